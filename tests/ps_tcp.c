// SPDX-License-Identifier: MIT
/*
 * tests/ps_tcp.c - part of test_ps, over tcp only: a wrong cluster key
 * across processes, hostile bytes at a ps, a ps that dies or restarts (S11's
 * threshold and stale handles, S12's exit code), the checkpoint root's
 * confinement and a stage dropped with its connection.
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

/* ---- tcp only ----------------------------------------------------------------------- */

static int write_key(const char *path, const char *hex)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "%s\n", hex);
	fclose(f);
	return chmod(path, 0600);
}

static int create_keyed(const char *key, unsigned wport, unsigned pport, struct coord **c,
			struct coord_error *err)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	char json[256];
	int r;

	t_opts(&o, reg);
	o.key_file = key;
	o.connect_timeout_ms = 20000; /* sanitizer builds are slow to answer */
	snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"], \"ps\": [\"127.0.0.1:%u\"]}",
		 wport, pport);
	r = coord_spec_parse(json, &spec, err);
	if (r == 0)
		r = coord_create(spec, &o, c, err);
	coord_spec_destroy(spec);
	return r;
}

/* A coordinator with another key is refused by a keyed worker and a keyed ps
 * (real processes); the same servers keep serving the right key. */
void test_wrong_key_across_processes(void **state)
{
	char good[64], bad[64]; /* per test process: concurrent runs do not share them */
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	char *wargv[] = { (char *)bin, "--fns",	     (char *)fns, "--listen", "127.0.0.1:0",
			  "--key",     (char *)good, "--log",	  "error",    NULL };
	char *pargv[] = { (char *)getenv("COORD_PS_BIN"),
			  "--listen",
			  "127.0.0.1:0",
			  "--task",
			  "0",
			  "--key",
			  (char *)good,
			  "--log",
			  "error",
			  NULL };
	unsigned wport, pport;
	pid_t wpid, ppid;
	struct coord_error err;
	struct coord *c;
	uint64_t dims[1] = { 1 };
	coord_var_t v;
	struct t_var_args a;
	struct out res;
	struct coord_rv *rv;
	float one;

	(void)state;
	snprintf(good, sizeof(good), "/tmp/coord-test-key-good-%d", (int)getpid());
	snprintf(bad, sizeof(bad), "/tmp/coord-test-key-bad-%d", (int)getpid());
	assert_int_equal(
		write_key(good, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
		0);
	assert_int_equal(
		write_key(bad, "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"),
		0);
	wpid = t_spawn(wargv, "coord-worker", &wport);
	ppid = t_spawn(pargv, "coord-ps", &pport);
	assert_true(wpid > 0 && ppid > 0);
	/* the wrong key: the worker refuses the coordinator */
	assert_int_not_equal(create_keyed(bad, wport, pport, &c, &err), 0);
	if (!strstr(err.msg, "authentication"))
		print_error("unexpected: %s\n", err.msg);
	assert_non_null(strstr(err.msg, "authentication"));
	/* a worker with the right key but a ps without it */
	{
		pid_t p2;
		unsigned port2;
		char *argv2[] = { pargv[0], "--listen",	 "127.0.0.1:0", "--task", "0",
				  "--key",  (char *)bad, "--log",	"error",  NULL };

		p2 = t_spawn(argv2, "coord-ps", &port2);
		assert_true(p2 > 0);
		assert_int_equal(create_keyed(good, wport, port2, &c, &err), 0);
		assert_int_equal(coord_var_create(c, "k", 1, dims, NULL, &v, &err),
				 COORD_EUNAVAILABLE);
		assert_non_null(strstr(err.msg, "authentication"));
		destroy(c);
		t_reap(p2);
	}
	/* the same worker and ps serve the right key, worker->ps included */
	assert_int_equal(create_keyed(good, wport, pport, &c, &err), 0);
	assert_int_equal(coord_var_create(c, "k", 1, dims, NULL, &v, &err), 0);
	a = (struct t_var_args){ .var = v, .off = 0, .n = 1, .val = 3.0f };
	rv = sched(c, "var_add", &a, sizeof(a));
	assert_int_equal(fetch(rv, &res), 0);
	assert_int_equal(coord_var_read(c, v, 0, 1, &one, NULL), 0);
	assert_true(one == 3.0f);
	destroy(c);
	t_reap(wpid);
	t_reap(ppid);
	unlink(good);
	unlink(bad);
}

static int raw_connect(unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	return fd;
}

/* The ps closes the connection within @ms: read returns 0 or an error. */
static bool closed_within(int fd, int ms)
{
	uint8_t buf[512];
	uint64_t until = t_now_ns() + (uint64_t)ms * 1000000;

	while (t_now_ns() < until) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return true;
	}
	return false;
}

/* Garbage, a VAR_REQ before the handshake, a huge length: each closed;
 * the ps keeps its variables and serves a healthy coordinator. */
void test_hostile_at_ps(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 2 };
	coord_var_t v = var(c, "h", 1, dims);
	float two[2] = { 1, 2 }, got[2];
	uint8_t garbage[64], frame[COORD_WIRE_HDR + 64];
	struct coord_wire_writer w;
	struct coord_wire_vreq q = { .rid = 1, .op = 3, .var = 0, .n = 1 };

	(void)state;
	assert_int_equal(coord_var_assign(c, v, 0, 2, two, NULL), 0);
	for (int i = 0; i < 64; i++)
		garbage[i] = (uint8_t)(i * 37 + 11);
	coord_wire_writer_init(&w, frame, sizeof(frame));
	coord_wire_begin(&w, COORD_WIRE_VAR_REQ);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	coord_wire_end(&w);
	for (unsigned p = 0; p < NPS; p++) {
		int fd = raw_connect(ps_port[p]);
		uint8_t huge[16] = { 0xff, 0xff, 0xff, 0x7f, 11, 0 };

		assert_true(fd >= 0);
		assert_int_equal(write(fd, garbage, sizeof(garbage)), sizeof(garbage));
		assert_true(closed_within(fd, 5000));
		close(fd);
		fd = raw_connect(ps_port[p]);
		assert_int_equal(write(fd, frame, w.len), (ssize_t)w.len);
		assert_true(closed_within(fd, 5000));
		close(fd);
		fd = raw_connect(ps_port[p]);
		assert_int_equal(write(fd, huge, sizeof(huge)), sizeof(huge));
		assert_true(closed_within(fd, 5000));
		close(fd);
	}
	assert_int_equal(coord_var_read(c, v, 0, 2, got, NULL), 0);
	assert_memory_equal(got, two, 8);
	destroy(c);
}

/* A ps that dies: operations fail with UNAVAILABLE, never hang; a closure
 * that used it is put back K = 3 times (the default threshold, S11) and then
 * fails with that message; nothing else is lost. */
void test_ps_dies(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 1 };
	coord_var_t v[8];
	struct out res;
	struct coord_error err;
	struct coord_rv *rv;
	int dead = -1;
	float x;
	char name[8];

	(void)state;
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		v[i] = var(c, name, 1, dims);
	}
	kill(ps_pid[0], SIGKILL);
	waitpid(ps_pid[0], NULL, 0);
	ps_pid[0] = -1;
	for (int i = 0; i < 8 && dead < 0; i++)
		if (coord_var_task(v[i]) == 0)
			dead = i;
	assert_true(dead >= 0);
	assert_int_equal(coord_var_read(c, v[dead], 0, 1, &x, &err), COORD_EUNAVAILABLE);
	assert_non_null(strstr(err.msg, "ps task 0"));
	{
		struct t_var_args a = { .var = v[dead], .off = 0, .n = 1, .val = 1.0f };

		t_reset_counters();
		rv = sched(c, "var_add", &a, sizeof(a));
		assert_int_equal(fetch(rv, &res), COORD_EUNAVAILABLE);
		assert_non_null(strstr(res.err.msg, "ps task 0"));
		assert_int_equal(res.err.cause, 1); /* typed: ps task 0 */
		assert_int_equal(atomic_load(&t_sh->last_attempt), 4);
	}
	assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
	/* the other ps task still works */
	for (int i = 0; i < 8; i++)
		if (coord_var_task(v[i]) == 1) {
			assert_int_equal(coord_var_read(c, v[i], 0, 1, &x, &err), 0);
			break;
		}
	destroy(c);
	assert_int_equal(ps_start(0, NULL), 0);
}

/*
 * Issue 21: a handle made before its ps task restarted (a real restart: a
 * new coord-ps process) is refused with COORD_ESTALE, although the new run
 * gave the same name the same id: the coordinator gets the typed error, a
 * worker function sees it too, and a closure that fails with it is a ps
 * failure (S11: put back K = 3 times, then UNAVAILABLE with the ps task as
 * cause), never applied to the new run's variable.
 */
void test_stale_handle_after_ps_restart(void **state)
{
	uint64_t dims[1] = { 1 };
	float seven = 7.0f, x = -1.0f;
	struct coord_error err;
	struct coord *c;
	struct out res;
	coord_var_t v, v2;
	char name[16];
	int32_t code;
	int i;

	(void)state;
	for (i = 0; i < 64; i++) {
		snprintf(name, sizeof(name), "stale%d", i);
		if (coord_var_shard(name, NPS) == 0)
			break;
	}
	assert_true(i < 64);
	/* A fresh ps task 0: the variable is its first, id 0. */
	t_reap(ps_pid[0]);
	assert_int_equal(ps_start(0, NULL), 0);
	c = make();
	assert_int_equal(coord_var_create(c, name, 1, dims, &seven, &v, &err), 0);
	destroy(c);
	/* The restart: another process, no variables; the same name again. */
	t_reap(ps_pid[0]);
	assert_int_equal(ps_start(0, NULL), 0);
	c = make();
	assert_int_equal(coord_var_create(c, name, 1, dims, NULL, &v2, &err), 0);
	assert_int_equal(coord_var_task(v2), 0);
	assert_int_equal((uint32_t)v2, (uint32_t)v); /* the same id, */
	assert_true(v2 != v);			     /* of another run */
	assert_int_equal(coord_var_read(c, v, 0, 1, &x, &err), COORD_ESTALE);
	assert_non_null(strstr(err.msg, "another run of ps task 0"));
	assert_string_equal(
		coord_strerror(COORD_ESTALE),
		"stale variable handle: its parameter server restarted after it was made");
	{
		struct t_var_args a = { .var = v, .off = 0, .n = 1, .val = 1.0f };

		assert_int_equal(fetch(sched(c, "var_code", &a, sizeof(a)), &res), 0);
		assert_int_equal(res.len, sizeof(code));
		memcpy(&code, res.val, sizeof(code));
		assert_int_equal(code, COORD_ESTALE);
		t_reset_counters();
		assert_int_equal(fetch(sched(c, "var_add", &a, sizeof(a)), &res),
				 COORD_EUNAVAILABLE);
		assert_int_equal(res.err.cause, 1); /* typed: ps task 0 */
		assert_non_null(strstr(res.err.msg, "another run of ps task 0"));
		assert_int_equal(atomic_load(&t_sh->last_attempt), 4);
	}
	assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
	assert_int_equal(err.cause, 1);
	/* nothing landed on the new run's variable */
	assert_int_equal(coord_var_read(c, v2, 0, 1, &x, &err), 0);
	assert_true(x == 0.0f);
	destroy(c);
}

/* A variable on ps task 0 (created while it is up). */
static coord_var_t var_on_task0(struct coord *c)
{
	uint64_t dims[1] = { 1 };
	char name[16];

	for (int i = 0; i < 64; i++) {
		coord_var_t v;

		snprintf(name, sizeof(name), "t0_%d", i);
		v = var(c, name, 1, dims);
		if (coord_var_task(v) == 0)
			return v;
	}
	fail();
	return 0;
}

/*
 * S11 with K = 2 and K = 0: a closure whose ps is gone is put back K times,
 * runs K + 1 times in all, and then fails UNAVAILABLE with a typed cause
 * (the ps task), which join returns.
 */
void test_ps_failure_threshold(void **state)
{
	struct coord_error err;
	struct coord *c;
	struct out res;
	coord_var_t v;

	(void)state;
	for (int k = 2; k >= 0; k -= 2) {
		struct t_var_args a = { .off = 0, .n = 1, .val = 1.0f };

		assert_int_equal(create_opts(k, -1, &c, &err), 0);
		v = var_on_task0(c);
		a.var = v;
		t_reap(ps_pid[0]);
		ps_pid[0] = -1;
		t_reset_counters();
		assert_int_equal(fetch(sched(c, "var_add", &a, sizeof(a)), &res),
				 COORD_EUNAVAILABLE);
		assert_int_equal(res.err.cause, 1);
		assert_int_equal(atomic_load(&t_sh->last_attempt), k + 1);
		assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
		assert_non_null(strstr(err.msg, "ps task 0"));
		coord_destroy(c);
		assert_int_equal(ps_start(0, NULL), 0);
	}
}

/* S12: with a restart exit code, the call that would return a ps failure
 * exits the process with it (a supervisor restarts the coordinator). */
void test_ps_failure_restart_exit_code(void **state)
{
	struct coord_error err;
	struct coord *c;
	coord_var_t v;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(create_opts(0, -1, &c, &err), 0);
	v = var_on_task0(c);
	coord_destroy(c);
	t_reap(ps_pid[0]);
	ps_pid[0] = -1;
	pid = fork();
	if (pid == 0) {
		struct t_var_args a = { .var = v, .off = 0, .n = 1, .val = 1.0f };
		struct coord_rv *rv;

		if (create_opts(0, 42, &c, &err) != 0 ||
		    coord_schedule(c, t_fn(c, "var_add"), &a, sizeof(a), &rv, &err) != 0)
			_exit(3);
		if (coord_join(c, &err) == 0) /* exits 42 inside */
			_exit(5);
		_exit(4);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 42);
	assert_int_equal(ps_start(0, NULL), 0);
}

/* coord-ps writes only beneath its --ckpt-root: escapes are refused. */
void test_ckpt_root_escape(void **state)
{
	char out[64], link[128], rel[128], up[192], deep[192], p[192];
	const char *bad[6];
	struct coord_error err;
	struct coord *c;
	uint64_t step;
	DIR *d;
	unsigned n = 0;

	(void)state;
	snprintf(out, sizeof(out), "/tmp/coord-out-XXXXXX");
	assert_non_null(mkdtemp(out));
	snprintf(link, sizeof(link), "%s/link", lay_root);
	assert_int_equal(symlink(out, link), 0);
	snprintf(rel, sizeof(rel), "../%s", strrchr(out, '/') + 1);
	snprintf(up, sizeof(up), "%s/../%s", lay_root, strrchr(out, '/') + 1);
	snprintf(deep, sizeof(deep), "%s/ck/../../%s", lay_root, strrchr(out, '/') + 1);
	bad[0] = rel;  /* .. */
	bad[1] = up;   /* absolute, through .. */
	bad[2] = out;  /* absolute elsewhere */
	bad[3] = link; /* a symlink out (absolute) */
	bad[4] = "link";
	bad[5] = deep;
	c = lay_make(1);
	lay_fill(c, 1);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(coord_checkpoint_save(c, bad[i], 1, &err), -EACCES);
		if (!strstr(err.msg, "escapes"))
			fail_msg("%s: %s", bad[i], err.msg);
		assert_int_equal(coord_checkpoint_restore(c, bad[i], &step, &err), -EACCES);
	}
	d = opendir(out);
	assert_non_null(d);
	for (struct dirent *de; n < 100 && (de = readdir(d));)
		n++;
	closedir(d);
	assert_int_equal(n, 2); /* . and .. : nothing was written outside */
	/* inside the root: relative to it, or absolute beneath it */
	assert_int_equal(coord_checkpoint_save(c, "ck", 1, &err), 0);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 2, &err), 0);
	assert_int_equal(coord_checkpoint_restore(c, "ck", &step, &err), 0);
	assert_int_equal(step, 2);
	lay_destroy(c);
	snprintf(p, sizeof(p), "rm -rf '%s'", out);
	(void)!system(p);
}

/*
 * A prepared restore belongs to the connection that prepared it: held, it
 * keeps a create from giving a staged name another shape; when that
 * connection closes, coord-ps drops it.
 */
void test_stage_dies_with_connection(void **state)
{
	uint8_t res[COORD_PS_PREP_MAX];
	uint64_t d2[2] = { 9, 9 };
	char addr[32];
	const char *addrs[1] = { addr };
	struct coord_ps *ps = NULL;
	struct coord_ps_op op;
	struct coord_error err;
	struct coord *c;
	coord_var_t h;
	int r = -1;

	(void)state;
	lay_save(2);
	c = lay_make(1);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", lay_port[0]);
	assert_int_equal(coord_psc_create(addrs, 1, COORD_ROLE_COORDINATOR, NULL,
					  COORD_WIRE_MAX_FRAME_DEFAULT, 5000, 30000, 1000, 3, &ps,
					  &err),
			 0);
	memset(&op, 0, sizeof(op));
	op.op = COORD_PS_PREPARE;
	op.name = lay_dir;
	op.name_len = (uint16_t)strlen(lay_dir);
	op.off = COORD_CKPT_STEP_LATEST;
	op.n = 1;
	op.id = 5;
	op.dst = res;
	op.cap = sizeof(res);
	if (coord_ps_run(ps, &op, 1, &err) != 0)
		fail_msg("prepare: %s", err.msg);
	assert_true(op.dst_len >= COORD_PS_PREP_FIXED);
	assert_int_equal(res[16], LAY_VARS); /* nstaged, little-endian */
	assert_int_equal(coord_var_create(c, "lay/v7", 2, d2, NULL, &h, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "restore being prepared"));
	coord_ps_destroy(ps); /* closes its connection */
	/* Bounded: the server drops the stage as it reaps the connection. */
	for (int i = 0; i < 400 && r != 0; i++) {
		r = coord_var_create(c, "lay/v7", 2, d2, NULL, &h, &err);
		if (r != 0)
			t_sleep_ns(25000000);
	}
	assert_int_equal(r, 0);
	for (unsigned i = 0; i < LAY_VARS; i++) { /* nothing was committed */
		char name[32];

		snprintf(name, sizeof(name), "lay/v%u", i);
		assert_int_equal(coord_var_lookup(c, name, &h, NULL, NULL), i == 7 ? 0 : -ENOENT);
	}
	lay_destroy(c);
}

/* coord-ps --ckpt-root removes its own task's temp files at start. */
void test_ckpt_root_start_sweep(void **state)
{
	char a[256], b[160], dir[128];
	struct stat st;
	unsigned port;
	pid_t pid;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/x/y/ps-0", lay_root);
	snprintf(a, sizeof(a), "mkdir -p '%s' '%s/ps-1'", dir, lay_root);
	assert_int_equal(system(a), 0);
	snprintf(a, sizeof(a), "%s/.ckpt-3.coord.tmp.4242.7", dir);
	snprintf(b, sizeof(b), "%s/ps-1/.latest.tmp.4242.8", lay_root);
	close(open(a, O_CREAT | O_WRONLY, 0644));
	close(open(b, O_CREAT | O_WRONLY, 0644));
	pid = lay_spawn(0, lay_root, &port); /* ready once it printed its port */
	assert_true(pid > 0);
	assert_int_equal(stat(a, &st), -1);
	assert_int_equal(stat(b, &st), 0); /* task 1's: not ours */
	t_reap(pid);
}
