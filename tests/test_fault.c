// SPDX-License-Identifier: MIT
/*
 * tests/test_fault.c - failures with real processes (the fault-tolerance
 * issue's suite): a worker killed while it runs a closure, and workers
 * reached across a network namespace (the partition tests' set-up).
 * Every loop is bounded in count and time; namespaces are removed at the end
 * even when a test fails (group teardown).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static struct coord_registry *reg;

static struct coord *tcp_coord(unsigned nworkers)
{
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;

	t_opts(&o, reg);
	if (t_create(&o, nworkers, &c, &err) != 0) {
		print_error("create: %s\n", err.msg);
		fail();
	}
	return c;
}

/*
 * S2/S10, B8: SIGKILL the worker process running a long closure.  The
 * closure goes back on the queue and runs on another worker, which sees
 * attempt >= 2; its RemoteValue gets that run's value; join returns 0;
 * nothing else is lost.
 */
static void test_kill_worker_running_a_closure(void **state)
{
	struct coord *c = tcp_coord(3);
	uint32_t fn = t_fn(c, "sleep_attempt"), us = 300000, out[2];
	uint32_t add = t_fn(c, "add");
	uint64_t until = t_now_ns() + 20000000000ull;
	struct coord_rv *rv, *more[32];
	struct coord_error err;
	const void *v;
	size_t len;
	int victim;

	(void)state;
	t_reset_counters();
	assert_int_equal(coord_schedule(c, fn, &us, sizeof(us), &rv, &err), 0);
	while (!(victim = atomic_load(&t_sh->running_pid)) && t_now_ns() < until)
		t_sleep_ns(1000000);
	assert_true(victim > 0);
	atomic_store(&t_sh->running_pid, 0);
	assert_int_equal(kill(victim, SIGKILL), 0);
	/* closures scheduled after the kill complete too */
	for (int64_t i = 0; i < 32; i++) {
		int64_t ab[2] = { i, 1 };

		assert_int_equal(coord_schedule(c, add, ab, sizeof(ab), &more[i], &err), 0);
	}
	assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &v, &len, &err), 0);
	assert_int_equal(len, sizeof(out));
	memcpy(out, v, sizeof(out));
	assert_true(out[0] >= 2); /* B8: the function saw its second attempt */
	assert_int_not_equal(atomic_load(&t_sh->running_pid), victim);
	coord_rv_put(rv);
	for (int64_t i = 0; i < 32; i++) {
		int64_t x;

		assert_int_equal(coord_rv_fetch_timeout(more[i], 30000000000ll, &v, &len, &err), 0);
		memcpy(&x, v, sizeof(x));
		assert_int_equal(x, i + 1);
		coord_rv_put(more[i]);
	}
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/*
 * A worker in another network namespace, reached over a veth pair with a
 * cluster key (a non-loopback listener needs one, B5): closures run there.
 * The partition tests of the fault-tolerance issue build on this set-up.
 */
static struct t_netns ns;

static void test_worker_across_a_namespace(void **state)
{
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	const char *key = "/tmp/coord-test-fault-key";
	char listen[48], spec[160];
	unsigned port;
	pid_t pid;
	struct coord_opts o;
	struct coord_spec *sp = NULL;
	struct coord_error err;
	struct coord *c;
	FILE *f;

	(void)state;
	if (t_netns_create(&ns, 0) < 0) {
		t_netns_destroy(&ns);
		skip(); /* needs root and iproute2 */
	}
	f = fopen(key, "w");
	assert_non_null(f);
	fprintf(f, "8899aabbccddeeff00112233445566778899aabbccddeeff0011223344556677\n");
	fclose(f);
	chmod(key, 0600);
	snprintf(listen, sizeof(listen), "%s:0", ns.ns_ip);
	{
		char *argv[] = { "/usr/sbin/ip", "netns",     "exec",	  ns.name, (char *)bin,
				 "--fns",	 (char *)fns, "--listen", listen,  "--key",
				 (char *)key,	 "--log",     "error",	  NULL };

		if (access(argv[0], X_OK) != 0)
			argv[0] = "/sbin/ip";
		pid = t_spawn(argv, "coord-worker", &port);
	}
	assert_true(pid > 0);
	snprintf(spec, sizeof(spec), "{\"worker\": [\"%s:%u\", \"%s:%u\"]}", ns.ns_ip, port,
		 ns.ns_ip, port);
	t_opts(&o, reg);
	o.key_file = key;
	assert_int_equal(coord_spec_parse(spec, &sp, &err), 0);
	assert_int_equal(coord_create(sp, &o, &c, &err), 0);
	for (int64_t i = 0; i < 100; i++) {
		int64_t ab[2] = { i, i }, x;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		assert_int_equal(coord_schedule(c, t_fn(c, "add"), ab, sizeof(ab), &rv, &err), 0);
		assert_int_equal(coord_rv_fetch_timeout(rv, 10000000000ll, &v, &len, &err), 0);
		memcpy(&x, v, sizeof(x));
		assert_int_equal(x, 2 * i);
		coord_rv_put(rv);
	}
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
	coord_spec_destroy(sp);
	t_reap(pid);
	unlink(key);
}

static int group_setup(void **state)
{
	(void)state;
	t_transport = "tcp";
	return t_workers_start(3) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	t_netns_destroy(&ns);
	t_transport = "inproc";
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_worker_running_a_closure),
		cmocka_unit_test(test_worker_across_a_namespace),
	};
	int failed;

	t_watchdog(300);
	reg = t_registry();
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	failed = cmocka_run_group_tests_name("fault/tcp", tests, group_setup, group_teardown);
	coord_registry_destroy(reg);
	return failed;
}
