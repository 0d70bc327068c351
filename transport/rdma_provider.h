/* SPDX-License-Identifier: MIT */
/*
 * transport/rdma_provider.h - the rdma provider: what libcoord.so and
 * libcoord-rdma.so say to each other.  Everything that links libibverbs and
 * librdmacm (transport/rdma/, transport/server/rdma_server.c) is built into
 * the provider, which libcoord.so dlopen()s on the first use of rdma, so
 * that libcoord.so itself needs neither (rdma-core's providers and
 * libfabric's are the models).
 *
 * The two directions:
 *  - core -> provider: one table, struct coord_rdma_provider, the only
 *    symbol the provider exports (COORD_RDMA_PROVIDER_SYM); rdma_load.c
 *    finds it and forwards the rdma entry points the core calls to it.
 *  - provider -> core: the provider links libcoord.so and calls the
 *    internal functions declared COORD_PROV (runtime/util/util.h), which
 *    libcoord.so exports under the version node COORD_PRIVATE_<version>
 *    only (transport/meson.build; rdma-core's IBVERBS_PRIVATE_n).
 *
 * What it keeps true:
 *   RP1  A provider runs only with the libcoord.so of its own build: its
 *        private symbols name the release (a provider of another release
 *        fails to load, and dlerror() says which version node is missing),
 *        and the table's @abi and @version must equal the core's, else the
 *        loader refuses it and says why.
 *   RP2  The provider is loaded at most once per process, on first use,
 *        and never unloaded; a failure to load is kept and every later use
 *        of rdma gets the same error (the file, dlerror(), what to do).
 *   RP3  Nothing but rdma needs the provider: inproc and tcp, and every
 *        program that never asks for rdma, run where it cannot load.
 */
#ifndef COORD_TRANSPORT_RDMA_PROVIDER_H
#define COORD_TRANSPORT_RDMA_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>

#include "runtime/core/dispatch.h"
#include "transport/rdma/ps_rdma.h"

struct coord_srv;

/* Bumped whenever struct coord_rdma_provider changes (RP1). */
#define COORD_RDMA_PROVIDER_ABI 3
/* The one symbol a provider exports: a const struct coord_rdma_provider. */
#define COORD_RDMA_PROVIDER_SYM "coord_rdma_provider"
/* The environment variable that names the provider's file. */
#define COORD_RDMA_PROVIDER_ENV "COORD_RDMA_PROVIDER"

/*
 * struct coord_rdma_provider - the provider's entry points.
 * @abi: COORD_RDMA_PROVIDER_ABI of the provider's build.
 * @version: COORD_VERSION_STRING of the provider's build.
 * @tp: the "rdma" transport (transport/rdma/rdma.c).
 * @available: 0 if this host has an RDMA device and rdma_cm, else -ENODEV
 *        with the reason (transport/rdma/rdma_conn.c).
 * @serve: coord_rdma_serve() (transport/server/rdma_server.c).
 * @psr_*: coord_psr_*() (transport/rdma/ps_rdma.h).
 */
struct coord_rdma_provider {
	unsigned abi;
	const char *version;
	const struct coord_tp_ops *tp;
	int (*available)(struct coord_error *err);
	int (*serve)(struct coord_srv *s, struct coord_error *err);
	int (*psr_connect)(const char *addr, const struct coord_key *key, uint8_t role,
			   unsigned task, uint32_t max_frame, int timeout_ms,
			   struct coord_psr **out, struct coord_error *err);
	int (*psr_send)(struct coord_psr *r, const void *buf, size_t len);
	int (*psr_send_some)(struct coord_psr *r, const void *buf, size_t len, size_t *sent);
	uint64_t (*psr_rx)(struct coord_psr *r);
	int (*psr_next)(struct coord_psr *r, struct coord_wire_hdr *h, const uint8_t **payload,
			int wait_ms);
	int (*psr_read_var)(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off,
			    uint64_t n, void *dst, unsigned *tries);
	int (*psr_put_reg)(struct coord_psr *r, const void *src, size_t len,
			   struct coord_rdma_mr **out, struct coord_ps_rsrc *d);
	void (*psr_put_done)(struct coord_rdma_mr *mr);
	void (*psr_shutdown)(struct coord_psr *r);
	void (*psr_destroy)(struct coord_psr *r);
};

/* The provider's side: the table (rdma_provider.c) and the transport it
 * names (transport/rdma/rdma.c). */
extern const struct coord_rdma_provider coord_rdma_provider;
extern const struct coord_tp_ops coord_tp_rdma;

/*
 * The core's side (rdma_load.c).  coord_rdma_load() - the provider, loaded
 * on the first call (RP2); 0 with *@out, or -ENOENT with @err naming the
 * file and dlerror() (or the mismatch, RP1).  Any thread.
 */
COORD_HIDDEN int coord_rdma_load(const struct coord_rdma_provider **out, struct coord_error *err);
/* coord_rdma_tp_load() - the "rdma" entry of coord_transports[]: @tp. */
COORD_HIDDEN int coord_rdma_tp_load(const struct coord_tp_ops **tp, struct coord_error *err);
/* coord_rdma_usable() - 0 if rdma can run here: the provider loads and
 * finds a device (@available); else why not in @err. */
COORD_HIDDEN int coord_rdma_usable(struct coord_error *err);

#endif /* COORD_TRANSPORT_RDMA_PROVIDER_H */
