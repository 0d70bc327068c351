/* SPDX-License-Identifier: MIT */
/*
 * tests/varstore_tests.h - what the parts of the test_varstore executable
 * share: the store and directory fixtures (test_varstore.c, with main() and
 * the test table) and the tests of each part.
 */
#ifndef COORD_TESTS_VARSTORE_TESTS_H
#define COORD_TESTS_VARSTORE_TESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

#define NTHREADS 4
#define NITERS 10000
/* A concurrency test gives up (and fails) after this long. */
#define TIME_LIMIT_NS (40ull * 1000000000ull)

/* A concurrent updater's store, variable and thread, its stop flag and counts. */
struct cargs {
	struct coord_varstore *vs;
	uint32_t id;
	int t;
	_Atomic int *stop;
	long bad;
	long done;
};

/* Helpers the parts share. */
struct coord_varstore *new_store(unsigned keep);
uint32_t mk(struct coord_varstore *vs, const char *name, unsigned ndim, const uint64_t *dims,
	    const float *init);
char *mk_dir(void);
void rm_dir(char *d);
bool file_exists(const char *dir, const char *name);
void write_file(const char *dir, const char *name, const void *b, size_t len);
unsigned char *read_file(const char *dir, const char *name, size_t *len);
void *adder(void *p);

/* varstore_rules.c */
void test_varstore_create_rules(void **state);
void test_varstore_read_assign_add(void **state);
void test_varstore_scatter_add_rules(void **state);
void test_varstore_delete(void **state);
void test_varstore_concurrent_assign_add(void **state);
void test_varstore_large_add(void **state);
void test_varstore_concurrent_scatter_add(void **state);
void test_varstore_shard_functions(void **state);
void test_varstore_crc32c(void **state);

/* varstore_ckpt.c */
void test_varstore_checkpoint_round_trip(void **state);
void test_varstore_save_during_updates(void **state);
void test_varstore_checkpoint_latest_and_keep(void **state);
void test_varstore_checkpoint_after_crash(void **state);
void test_varstore_live_temp_file_kept(void **state);
void test_varstore_checkpoint_corrupt_refused(void **state);
void test_varstore_prepare_commit(void **state);
void test_varstore_prepare_inconsistent(void **state);

#endif
