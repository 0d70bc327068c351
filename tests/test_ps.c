// SPDX-License-Identifier: MIT
/*
 * tests/test_ps.c - parameter-server variables (coord/var.h), the same test
 * bodies over the inproc transport (stores in this process) and over tcp
 * (4 coord-worker processes and 2 coord-ps processes on loopback, reached
 * by the coordinator and, through their ctx, by the worker functions).
 * Then, over tcp only: a peer with the wrong cluster key (at a ps and at a
 * worker, real processes), hostile bytes at a ps, and a ps that dies.
 * Every loop is bounded in count and time (t_watchdog).
 *
 * This file: main(), the group tables and the fixtures (the cluster, fetch,
 * make, var, sched); the tests are in the parts linked into the same
 * executable, declared in ps_tests.h: ps_vars.c, ps_layout.c, ps_tcp.c,
 * ps_pvar.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "transport/wire/wire.h"
#include "helpers.h"
#include "ps_tests.h"

struct coord_registry *reg;

int fetch(struct coord_rv *rv, struct out *o)
{
	const void *v = NULL;

	memset(o, 0, sizeof(*o));
	o->code = coord_rv_fetch_timeout(rv, 30000000000ll, &v, &o->len, &o->err);
	if (o->code == 0 && o->len <= sizeof(o->val) && o->len)
		memcpy(o->val, v, o->len);
	coord_rv_put(rv);
	return o->code;
}

pid_t ps_pid[NPS];
unsigned ps_port[NPS];

int ps_start(unsigned i, const char *key)
{
	const char *bin = getenv("COORD_PS_BIN");
	char task[16];
	const char *log = getenv("T_WORKER_LOG") ? getenv("T_WORKER_LOG") : "error";
	char *argv[] = { (char *)bin, "--listen",    "127.0.0.1:0", "--task", task, "--log",
			 (char *)log, "--ckpt-root", "/tmp",	    NULL,     NULL, NULL };

	if (!bin)
		return -1;
	snprintf(task, sizeof(task), "%u", i);
	if (key) {
		argv[9] = "--key";
		argv[10] = (char *)key;
	}
	ps_pid[i] = t_spawn(argv, "coord-ps", &ps_port[i]);
	return ps_pid[i] < 0 ? -1 : 0;
}

/*
 * The cluster: 4 workers; 2 ps tasks (processes over tcp, stores inproc),
 * with the given S11/S12 options (-1: the defaults).
 */
int create_opts(int threshold, int exit_code, struct coord **c, struct coord_error *err)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	char json[512], *w;
	int r;

	t_opts(&o, reg);
	o.ps_failure_threshold = threshold;
	o.restart_exit_code = exit_code;
	if (strcmp(t_transport, "tcp") != 0) {
		o.inproc_workers = NW;
		o.inproc_ps = NPS;
		return coord_create(NULL, &o, c, err);
	}
	w = t_spec_json(NW);
	w[strlen(w) - 1] = 0; /* drop the closing brace */
	snprintf(json, sizeof(json), "%s, \"ps\": [\"127.0.0.1:%u\", \"127.0.0.1:%u\"]}", w,
		 ps_port[0], ps_port[1]);
	free(w);
	r = coord_spec_parse(json, &spec, err);
	if (r == 0)
		r = coord_create(spec, &o, c, err);
	coord_spec_destroy(spec);
	return r;
}

int create(struct coord **c, struct coord_error *err)
{
	return create_opts(-1, -1, c, err);
}

struct coord *make(void)
{
	struct coord_error err;
	struct coord *c = NULL;

	if (create(&c, &err) != 0) {
		print_error("create: %s\n", err.msg);
		fail();
	}
	return c;
}

void destroy(struct coord *c)
{
	coord_destroy(c);
}

coord_var_t var(struct coord *c, const char *name, unsigned ndim, const uint64_t *dims)
{
	struct coord_error err;
	coord_var_t v;

	if (coord_var_create(c, name, ndim, dims, NULL, &v, &err) != 0) {
		print_error("coord_var_create(%s): %s\n", name, err.msg);
		fail();
	}
	return v;
}

struct coord_rv *sched(struct coord *c, const char *fn, const void *args, size_t len)
{
	struct coord_rv *rv;
	struct coord_error err;

	if (coord_schedule(c, t_fn(c, fn), args, len, &rv, &err) != 0) {
		print_error("schedule %s: %s\n", fn, err.msg);
		fail();
	}
	return rv;
}

void join_ok(struct coord *c)
{
	struct coord_error err;

	if (coord_join(c, &err) != 0) {
		print_error("join: %s\n", err.msg);
		fail();
	}
}

/* 4 workers x 10,000 closures, each assign_add of 1 on a ps variable: exact. */
static int tcp_setup(void **state)
{
	(void)state;
	t_transport = "tcp";
	if (t_workers_start(NW) != 0)
		return -1;
	for (unsigned i = 0; i < NPS; i++)
		if (ps_start(i, NULL) != 0)
			return -1;
	return 0;
}

static int tcp_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	for (unsigned i = 0; i < NPS; i++)
		if (ps_pid[i] > 0)
			t_reap(ps_pid[i]);
	t_transport = "inproc";
	return 0;
}

static int group_teardown_dir(void **state)
{
	char cmd[128];

	(void)state;
	if (ckpt_dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ckpt_dir);
		(void)!system(cmd);
		ckpt_dir[0] = 0;
	}
	return 0;
}

static int tcp_teardown_all(void **state)
{
	group_teardown_dir(state);
	return tcp_teardown(state);
}

int main(void)
{
#define VAR_TESTS                                                                                  \
	cmocka_unit_test(test_assign_add_exact), cmocka_unit_test(test_scatter_add),               \
		cmocka_unit_test(test_large_requests), cmocka_unit_test(test_large_read_snapshot), \
		cmocka_unit_test(test_lookup_batch_read), cmocka_unit_test(test_errors),           \
		cmocka_unit_test(test_checkpoint_round_trip),                                      \
		cmocka_unit_test(test_checkpoint_corrupt_refused), LAY_TEST(test_restore_2_to_1),  \
		LAY_TEST(test_restore_2_to_3), LAY_TEST(test_restore_refused_whole),               \
		LAY_TEST(test_restore_version1), LAY_TEST(test_save_removes_temp_files),           \
		cmocka_unit_test(test_pvar_rows), cmocka_unit_test(test_pvar_multi),               \
		cmocka_unit_test(test_pvar_partitioner), LAY_TEST(test_pvar_restore_relayout),     \
		LAY_TEST(test_pvar_restore_resplit)
#define LAY_TEST(f) cmocka_unit_test_setup_teardown(f, lay_setup, lay_teardown)
	const struct CMUnitTest inproc_tests[] = { VAR_TESTS };
	const struct CMUnitTest tcp_tests[] = {
		VAR_TESTS,
		cmocka_unit_test(test_hostile_at_ps),
		cmocka_unit_test(test_wrong_key_across_processes),
		cmocka_unit_test(test_stale_handle_after_ps_restart),
		cmocka_unit_test(test_ps_dies),
		cmocka_unit_test(test_ps_failure_threshold),
		cmocka_unit_test(test_ps_failure_restart_exit_code),
		LAY_TEST(test_ckpt_root_escape),
		LAY_TEST(test_ckpt_root_start_sweep),
		LAY_TEST(test_stage_dies_with_connection),
	};
	int failed;

	t_watchdog(300);
	reg = t_registry();
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	failed = cmocka_run_group_tests_name("ps/inproc", inproc_tests, NULL, group_teardown_dir);
	failed += cmocka_run_group_tests_name("ps/tcp", tcp_tests, tcp_setup, tcp_teardown_all);
	coord_registry_destroy(reg);
	return failed;
}
