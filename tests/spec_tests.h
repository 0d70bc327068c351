/* SPDX-License-Identifier: MIT */
/*
 * tests/spec_tests.h - what the parts of the test_spec executable share:
 * the parse and compare fixtures (test_spec.c, with main(), the test table
 * and the ClusterSpec rules' tests) and the tests of each part.
 */
#ifndef COORD_TESTS_SPEC_TESTS_H
#define COORD_TESTS_SPEC_TESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

/* The seed's two examples, as JSON (test_spec.c). */
extern const char seed_dense[], seed_sparse[];

/* Helpers the parts share. */
struct coord_spec *parse_ok(const char *json);
int protoc_setup(void **state);
int protoc_teardown(void **state);

/* spec_resolvers.c */
void test_spec_tf_config(void **state);
void test_spec_tf_config_malformed(void **state);
void test_spec_resolve_tf_config(void **state);
void test_spec_hostlist(void **state);
void test_spec_hostlist_malformed(void **state);
void test_spec_slurm_tasks_per_node(void **state);
void test_spec_slurm_default(void **state);
void test_spec_slurm_jobs(void **state);
void test_spec_slurm_malformed(void **state);
void test_spec_from_arg(void **state);

/* spec_cluster_def.c */
void test_spec_cluster_def_round_trip(void **state);
void test_spec_cluster_def_malformed(void **state);
void test_spec_protoc_decode(void **state);
void test_spec_protoc_encode(void **state);

#endif
