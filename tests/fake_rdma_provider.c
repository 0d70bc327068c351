// SPDX-License-Identifier: MIT
/*
 * tests/fake_rdma_provider.c - an rdma provider of another build (its
 * version is not libcoord's), which the loader must refuse before calling
 * anything in it (transport/rdma_provider.h RP1; test rdma_provider_mismatch).
 */
#include "transport/rdma_provider.h"

__attribute__((visibility("default"))) const struct coord_rdma_provider coord_rdma_provider = {
	.abi = COORD_RDMA_PROVIDER_ABI,
	.version = "0.0.0-other",
};
