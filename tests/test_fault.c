// SPDX-License-Identifier: MIT
/*
 * tests/test_fault.c - failures with real processes (the fault-tolerance
 * issue's suite): a worker killed while it runs a closure, a coordinator
 * killed mid-training and restarted (it resumes from its checkpoint), and a
 * worker in another network namespace partitioned away and healed.
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

#include <coord/var.h>

#include "helpers.h"

static struct coord_registry *reg;
static pid_t ps_pid = -1;
static unsigned ps_port;

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
	for (unsigned i = 0; i < 3; i++) /* bring the victim back for the next tests */
		if (t_worker_pid(i) == victim)
			assert_int_equal(t_worker_restart(i), 0);
}

/* A coordinator of 2 workers and the ps, as any process would make it. */
static int make_trainer(struct coord **c, struct coord_error *err)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	char json[256];
	int r;

	t_opts(&o, reg);
	snprintf(json, sizeof(json),
		 "{\"worker\": [\"127.0.0.1:%u\", \"127.0.0.1:%u\"], "
		 "\"ps\": [\"127.0.0.1:%u\"]}",
		 t_worker_port(0), t_worker_port(1), ps_port);
	r = coord_spec_parse(json, &spec, err);
	if (r == 0)
		r = coord_create(spec, &o, c, err);
	coord_spec_destroy(spec);
	return r;
}

/* One round: 50 closures each adding 1 to every element, join, checkpoint. */
static int round_and_save(struct coord *c, coord_var_t v, const char *dir, uint64_t step)
{
	struct t_var_args a = { .var = v, .off = 0, .n = 4, .val = 1.0f };
	uint32_t fn;
	int r = coord_fn_lookup(c, "var_add", &fn, NULL);

	for (int i = 0; r == 0 && i < 50; i++)
		r = coord_schedule(c, fn, &a, sizeof(a), NULL, NULL);
	if (r == 0)
		r = coord_join(c, NULL);
	if (r == 0)
		r = coord_checkpoint_save(c, dir, step, NULL);
	return r;
}

/*
 * Kill the coordinator mid-training (SIGKILL, a crash) and start a new one:
 * it reconnects to the same workers and ps, restores the latest checkpoint
 * and continues, the variable exactly as saved.
 */
static void test_coordinator_restart_resumes(void **state)
{
	char dir[] = "/tmp/coord-fault-ckpt-XXXXXX", cmd[96];
	uint64_t dims[1] = { 4 }, step = 0;
	struct coord_error err;
	struct coord *c;
	coord_var_t v;
	float got[4];
	int p[2];
	pid_t pid;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(pipe(p), 0);
	pid = fork();
	if (pid == 0) { /* the first coordinator: trains until killed */
		close(p[0]);
		if (make_trainer(&c, &err) != 0 ||
		    coord_var_create(c, "fault/w", 1, dims, NULL, &v, &err) != 0)
			_exit(3);
		for (uint64_t s = 1; s < 100000; s++) {
			if (round_and_save(c, v, dir, s) != 0)
				_exit(4);
			if (write(p[1], &s, sizeof(s)) != sizeof(s))
				_exit(5);
		}
		_exit(6);
	}
	assert_true(pid > 0);
	close(p[1]);
	do /* bounded: the child writes a step per round or exits (EOF) */
		assert_int_equal(read(p[0], &step, sizeof(step)), sizeof(step));
	while (step < 3);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	close(p[0]);
	/* The restarted coordinator. */
	assert_int_equal(make_trainer(&c, &err), 0);
	assert_int_equal(coord_checkpoint_restore(c, dir, &step, &err), 0);
	assert_true(step >= 3);
	assert_int_equal(coord_var_create(c, "fault/w", 1, dims, NULL, &v, &err), 0);
	assert_int_equal(coord_var_read(c, v, 0, 4, got, &err), 0);
	for (int i = 0; i < 4; i++)
		assert_true(got[i] == (float)(50 * step));	  /* exactly as saved */
	assert_int_equal(round_and_save(c, v, dir, step + 1), 0); /* and it goes on */
	assert_int_equal(coord_var_read(c, v, 0, 4, got, &err), 0);
	assert_true(got[0] == (float)(50 * (step + 1)));
	coord_destroy(c);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/*
 * Partition (S10, B2): worker A lives in another network namespace, reached
 * over a veth pair; worker B on loopback.  Both need the cluster key (a
 * non-loopback listener must have one, B5).  Cutting the link is noticed by
 * heartbeats; B goes on meanwhile; healing it lets the recovery thread
 * reconnect A and re-admit it.
 */
static struct t_netns ns;

static uint64_t up_count(struct coord *c, uint64_t *recoveries)
{
	struct coord_metrics m;

	assert_int_equal(coord_metrics(c, &m, NULL, 0), 0);
	if (recoveries)
		*recoveries = m.recoveries;
	return m.workers_up;
}

static void adds(struct coord *c, int n)
{
	struct coord_error err;

	for (int64_t i = 0; i < n; i++) {
		int64_t ab[2] = { i, i }, x;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		assert_int_equal(coord_schedule(c, t_fn(c, "add"), ab, sizeof(ab), &rv, &err), 0);
		assert_int_equal(coord_rv_fetch_timeout(rv, 20000000000ll, &v, &len, &err), 0);
		memcpy(&x, v, sizeof(x));
		assert_int_equal(x, 2 * i);
		coord_rv_put(rv);
	}
}

static void test_partition_detected_and_healed(void **state)
{
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	char key[64]; /* per test process: concurrent runs do not share it */
	char listen[48], spec[200], *ip = "/usr/sbin/ip";
	unsigned port_a, port_b;
	pid_t pid_a, pid_b;
	struct coord_opts o;
	struct coord_spec *sp = NULL;
	struct coord_error err;
	struct coord *c;
	uint64_t until, rec = 0;
	FILE *f;

	(void)state;
	snprintf(key, sizeof(key), "/tmp/coord-test-fault-key-%d", (int)getpid());
	if (t_netns_create(&ns, 0) < 0) {
		t_netns_destroy(&ns);
		skip(); /* needs root and iproute2 */
	}
	f = fopen(key, "w");
	assert_non_null(f);
	fprintf(f, "8899aabbccddeeff00112233445566778899aabbccddeeff0011223344556677\n");
	fclose(f);
	chmod(key, 0600);
	if (access(ip, X_OK) != 0)
		ip = "/sbin/ip";
	snprintf(listen, sizeof(listen), "%s:0", ns.ns_ip);
	{
		char *argv[] = { ip,	      "netns",	   "exec",     ns.name, (char *)bin,
				 "--fns",     (char *)fns, "--listen", listen,	"--key",
				 (char *)key, "--log",	   "error",    NULL };

		pid_a = t_spawn(argv, "coord-worker", &port_a);
	}
	{
		char *argv[] = { (char *)bin, "--fns",	   (char *)fns, "--listen", "127.0.0.1:0",
				 "--key",     (char *)key, "--log",	"error",    NULL };

		pid_b = t_spawn(argv, "coord-worker", &port_b);
	}
	assert_true(pid_a > 0 && pid_b > 0);
	snprintf(spec, sizeof(spec), "{\"worker\": [\"%s:%u\", \"127.0.0.1:%u\"]}", ns.ns_ip,
		 port_a, port_b);
	t_opts(&o, reg);
	o.key_file = key;
	o.heartbeat_ms = 100;
	o.heartbeat_misses = 2;
	o.connect_timeout_ms = 500;
	assert_int_equal(coord_spec_parse(spec, &sp, &err), 0);
	assert_int_equal(coord_create(sp, &o, &c, &err), 0);
	adds(c, 100);				   /* closures run across the namespace */
	assert_int_equal(t_netns_link(&ns, 0), 0); /* the partition */
	until = t_now_ns() + 10000000000ull;
	while (up_count(c, NULL) == 2 && t_now_ns() < until)
		t_sleep_ns(5000000);
	assert_int_equal(up_count(c, NULL), 1);
	adds(c, 100);				   /* B2: the other worker carries on */
	assert_int_equal(t_netns_link(&ns, 1), 0); /* healed */
	until = t_now_ns() + 30000000000ull;
	while ((up_count(c, &rec) < 2 || rec < 1) && t_now_ns() < until)
		t_sleep_ns(5000000);
	assert_int_equal(up_count(c, &rec), 2);
	assert_true(rec >= 1);
	adds(c, 100);
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
	coord_spec_destroy(sp);
	t_reap(pid_a);
	t_reap(pid_b);
	unlink(key);
}

static int group_setup(void **state)
{
	(void)state;
	t_transport = "tcp";
	if (t_workers_start(3) != 0)
		return -1;
	{
		char *argv[] = { (char *)getenv("COORD_PS_BIN"),
				 "--listen",
				 "127.0.0.1:0",
				 "--log",
				 "error",
				 "--ckpt-root",
				 "/tmp",
				 NULL };

		ps_pid = argv[0] ? t_spawn(argv, "coord-ps", &ps_port) : -1;
	}
	return ps_pid > 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	if (ps_pid > 0)
		t_reap(ps_pid);
	t_netns_destroy(&ns);
	t_transport = "inproc";
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_worker_running_a_closure),
		cmocka_unit_test(test_coordinator_restart_resumes),
		cmocka_unit_test(test_partition_detected_and_healed),
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
