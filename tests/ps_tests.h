/* SPDX-License-Identifier: MIT */
/*
 * tests/ps_tests.h - what the parts of the test_ps executable share: the
 * cluster they run on (test_ps.c: main(), the group tables, the fixtures),
 * the tests of each part, and the helpers one part lends another.
 */
#ifndef COORD_TESTS_PS_TESTS_H
#define COORD_TESTS_PS_TESTS_H

#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

#define NW 4
#define NPS 2

/* A closure's outcome (bounded wait), its value copied out. */
struct out {
	int code;
	size_t len;
	uint8_t val[256];
	struct coord_error err;
};

#define LAY_MAX 3
#define LAY_VARS 24
extern struct coord_registry *reg;
extern pid_t ps_pid[NPS];
extern unsigned ps_port[NPS];
extern char ckpt_dir[64];
extern unsigned lay_port[LAY_MAX];
extern char lay_root[64], lay_dir[96];

/* Helpers the parts share. */
int lay_setup(void **state);
int lay_teardown(void **state);
struct coord *lay_make(unsigned nps);
void lay_fill(struct coord *c, unsigned seed);
void lay_destroy(struct coord *c);
void lay_save(unsigned from);
pid_t lay_spawn(unsigned task, const char *root, unsigned *port);
int fetch(struct coord_rv *rv, struct out *o);
int ps_start(unsigned i, const char *key);
int create_opts(int threshold, int exit_code, struct coord **c, struct coord_error *err);
int create(struct coord **c, struct coord_error *err);
struct coord *make(void);
void destroy(struct coord *c);
coord_var_t var(struct coord *c, const char *name, unsigned ndim, const uint64_t *dims);
struct coord_rv *sched(struct coord *c, const char *fn, const void *args, size_t len);
void join_ok(struct coord *c);

/* ps_vars.c */
void test_assign_add_exact(void **state);
void test_scatter_add(void **state);
void test_large_requests(void **state);
void test_large_read_snapshot(void **state);
void test_lookup_batch_read(void **state);
void test_errors(void **state);
void test_checkpoint_round_trip(void **state);
void test_checkpoint_corrupt_refused(void **state);

/* ps_layout.c */
void test_restore_2_to_1(void **state);
void test_restore_2_to_3(void **state);
void test_restore_refused_whole(void **state);
void test_restore_version1(void **state);
void test_save_removes_temp_files(void **state);

/* ps_tcp.c */
void test_wrong_key_across_processes(void **state);
void test_hostile_at_ps(void **state);
void test_ps_dies(void **state);
void test_stale_handle_after_ps_restart(void **state);
void test_ps_failure_threshold(void **state);
void test_ps_failure_restart_exit_code(void **state);
void test_ckpt_root_escape(void **state);
void test_stage_dies_with_connection(void **state);
void test_ckpt_root_start_sweep(void **state);

/* ps_pvar.c */
void test_pvar_rows(void **state);
void test_pvar_multi(void **state);
void test_pvar_partitioner(void **state);
void test_pvar_restore_relayout(void **state);
void test_pvar_restore_resplit(void **state);

#endif
