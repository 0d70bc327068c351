// SPDX-License-Identifier: MIT
/*
 * tests/helpers.c - the standard test functions and small utilities: the
 * clock, the watchdog, the counters in shared memory (t_sh), t_registry().
 * The transports a group runs over, the processes a test starts, network
 * namespaces and the fixtures are in helpers_run.c.
 *
 * Functions registered by t_registry():
 *   echo      result = args
 *   add       args two int64 -> their sum
 *   sleep_us  args one uint32 microseconds; sleeps, result = worker index (int32)
 *   spin_us   the same, on a CPU (a busy loop on the clock)
 *   fail      fails with -EIO and a message
 *   gated     spins until t_gate != 0 (bounded 20 s), then returns worker index,
 *             or fails with -EIO if it was given any argument bytes
 *   attempt   result = coord_ctx_attempt() (uint32)
 *   order     appends its int64 argument to t_order (one worker: run order)
 *   stamp     records the first start time per worker in t_first_ns, sleeps 1 ms
 *   pw_next   per-worker arg 0 is a counter resource: result = worker index
 *             (int32) and the counter's next value (int64)
 *   counter   resource creator: an int64 counter starting at args (int64 or 0)
 *   tracked   resource creator, args an int64 token: counts itself in
 *             tr_creates[w] and its destroy callback in tr_destroys[w] when
 *             the token is tr_token
 *   tr_live   result = tr_creates[w] - tr_destroys[w] (int64) on its worker w:
 *             how many tracked resources are alive there
 *   closure_id result = { coord_ctx_closure() (uint64), attempt (uint32),
 *             worker (int32) }
 *   tb_run    struct t_tb_args: counts itself in tb_runs[idx], sleeps us
 *             (if any), fails with -EIO if fail, else result = worker (int32)
 * Every function counts t_entered/t_exited (not the var_* ones):
 *   sleep_attempt  uint32 us: stores its pid in running_pid, counts itself in
 *                  running[worker] while it sleeps; result
 *               = { attempt, worker } (uint32 x 2)
 *   stuck_once  sleeps 3 s on its first attempt; result = { attempt, worker }
 *   var_add     struct t_var_args: [off, off+n) += val through the ctx;
 *               stores its attempt in last_attempt
 *   var_read    struct t_var_args: result = floats [off, off+n)
 *   var_code    struct t_var_args: reads [off, off+n) and succeeds with the
 *               read's code as result (int32): what the function saw
 *   var_scatter struct t_var_args (off = row length) + int64 idx[n]:
 *               rows idx[k] += val
 *   var_lookup  args a name: result = { handle, nelem } (uint64 x 2)
 *   var_batch   struct t_var_args: one batch of += val and a read; result
 *               = what the read saw
 *   var_uniform struct t_var_args (pad = reads, n <= 1024): reads
 *               [off, off+n) pad times; result = { torn, changes, reads }
 *               (uint64 x 3): torn reads saw two values (a writer always
 *               assigns one value to the whole range), changes counts reads
 *               that differ from the one before
 *   var_read_lat struct t_var_args (pad = reads, n <= 1024): times pad
 *               reads of [off, off+n); result = { p50, p99, min } ns (uint64)
 *   pvar_rows   struct t_pvar_args + ids (+ rows): a gather (result: the
 *               rows, n * row_len <= 16384), a scatter_add, or a gather
 *               through a handle the worker looks up by pv.name
 *   pvar_multi  struct t_pvar_multi + ids (+ rows): one gather_multi (result:
 *               the rows, <= 16384 floats) or scatter_add_multi of two
 *               variables
 */
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <coord/var.h>

#include "helpers.h"

struct t_shared *t_sh;
static char t_shm_path[64];

static void t_shared_unlink(void)
{
	if (t_shm_path[0])
		unlink(t_shm_path);
}

/* Map the counters: the file named by COORD_TEST_SHM (a worker process
 * started by a test), or a new one whose name children inherit. */
__attribute__((constructor)) static void t_shared_init(void)
{
	const char *path = getenv("COORD_TEST_SHM");
	int fd;

	if (path) {
		fd = open(path, O_RDWR | O_CLOEXEC);
	} else {
		snprintf(t_shm_path, sizeof(t_shm_path), "/dev/shm/coord-test-XXXXXX");
		fd = mkstemp(t_shm_path);
		if (fd < 0) {
			snprintf(t_shm_path, sizeof(t_shm_path), "/tmp/coord-test-XXXXXX");
			fd = mkstemp(t_shm_path);
		}
		if (fd >= 0 && ftruncate(fd, sizeof(struct t_shared)) == 0) {
			setenv("COORD_TEST_SHM", t_shm_path, 1);
			atexit(t_shared_unlink);
		}
	}
	if (fd < 0) {
		perror("test counters");
		abort();
	}
	t_sh = mmap(NULL, sizeof(struct t_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (t_sh == MAP_FAILED) {
		perror("test counters mmap");
		abort();
	}
}

uint64_t t_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void t_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

static void on_alarm(int sig)
{
	static const char m[] = "test watchdog: time limit reached, aborting\n";

	(void)!write(2, m, sizeof(m) - 1);
	abort();
}

void t_watchdog(unsigned secs)
{
	const char *e = getenv("T_WATCHDOG_S"); /* a slower place (the rig's wire) */

	if (e && atoi(e) > 0)
		secs = (unsigned)atoi(e);
	signal(SIGALRM, on_alarm);
	alarm(secs);
}

void t_reset_counters(void)
{
	atomic_store(&t_entered, 0);
	atomic_store(&t_exited, 0);
	for (int i = 0; i < 64; i++)
		atomic_store(&t_creates[i], 0);
	atomic_store(&t_create_fail, 0);
	atomic_store(&t_gate, 0);
	for (int i = 0; i < 64; i++)
		atomic_store(&t_first_ns[i], 0);
	atomic_store(&t_norder, 0);
	for (int i = 0; i < T_TB_MAX; i++)
		atomic_store(&t_sh->tb_runs[i], 0);
	atomic_store(&t_sh->running_pid, 0);
	atomic_store(&t_sh->last_attempt, 0);
	for (int i = 0; i < 64; i++)
		atomic_store(&t_sh->running[i], 0);
	atomic_store(&t_sh->tr_token, 0);
	for (int i = 0; i < 64; i++) {
		atomic_store(&t_sh->tr_creates[i], 0);
		atomic_store(&t_sh->tr_destroys[i], 0);
	}
}

#define ENTER() atomic_fetch_add(&t_entered, 1)
#define EXIT(r)                                                                                    \
	do {                                                                                       \
		int r_ = (r);                                                                      \
		atomic_fetch_add(&t_exited, 1);                                                    \
		return r_;                                                                         \
	} while (0)

static int f_echo(struct coord_ctx *ctx, const void *args, size_t len)
{
	ENTER();
	EXIT(coord_ctx_set_result(ctx, args, len));
}

static int f_add(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t ab[2], s;

	ENTER();
	if (len != sizeof(ab))
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "add wants 16 bytes, got %zu", len));
	memcpy(ab, args, sizeof(ab));
	s = ab[0] + ab[1];
	EXIT(coord_ctx_set_result(ctx, &s, sizeof(s)));
}

/* add, and when it ran: {sum, entry, exit} (CLOCK_MONOTONIC ns; one clock
 * for every process of a host: bench_rdma's per-stage breakdown). */
static int f_add_clock(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t ab[2];
	uint64_t out[3], in = t_now_ns();

	ENTER();
	if (len != sizeof(ab))
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "add_clock wants 16 bytes, got %zu", len));
	memcpy(ab, args, sizeof(ab));
	out[0] = (uint64_t)(ab[0] + ab[1]);
	out[1] = in;
	out[2] = t_now_ns();
	EXIT(coord_ctx_set_result(ctx, out, sizeof(out)));
}

static int f_sleep_us(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t us = 0;
	int32_t w = coord_ctx_worker(ctx);

	ENTER();
	if (len == sizeof(us))
		memcpy(&us, args, sizeof(us));
	t_sleep_ns((uint64_t)us * 1000);
	EXIT(coord_ctx_set_result(ctx, &w, sizeof(w)));
}

static int f_tb_run(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_tb_args a = { 0 };
	int32_t w = coord_ctx_worker(ctx);

	ENTER();
	if (len == sizeof(a))
		memcpy(&a, args, sizeof(a));
	if (a.idx < T_TB_MAX)
		atomic_fetch_add(&t_sh->tb_runs[a.idx], 1);
	if (a.us)
		t_sleep_ns((uint64_t)a.us * 1000);
	if (a.fail)
		EXIT(coord_ctx_fail(ctx, -EIO, "tb_run failed as asked"));
	EXIT(coord_ctx_set_result(ctx, &w, sizeof(w)));
}

static int f_spin_us(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t us = 0;
	int32_t w = coord_ctx_worker(ctx);
	uint64_t until;

	ENTER();
	if (len == sizeof(us))
		memcpy(&us, args, sizeof(us));
	until = t_now_ns() + (uint64_t)us * 1000;
	while (t_now_ns() < until)
		;
	EXIT(coord_ctx_set_result(ctx, &w, sizeof(w)));
}

static int f_fail(struct coord_ctx *ctx, const void *args, size_t len)
{
	ENTER();
	EXIT(coord_ctx_fail(ctx, -EIO, "injected failure on worker %d", coord_ctx_worker(ctx)));
}

static int f_gated(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint64_t until = t_now_ns() + 20000000000ull;
	int32_t w = coord_ctx_worker(ctx);

	ENTER();
	while (!atomic_load(&t_gate) && t_now_ns() < until)
		t_sleep_ns(100000);
	if (len > 0)
		EXIT(coord_ctx_fail(ctx, -EIO, "gated failure on worker %d", w));
	EXIT(coord_ctx_set_result(ctx, &w, sizeof(w)));
}

/* B1: args: optional int64 k; result: int64 k + the sum of the inputs,
 * each an int64 or an int32 (a gated result); any other size fails. */
static int f_sum_inputs(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t s = 0;
	unsigned n = coord_ctx_num_inputs(ctx);

	ENTER();
	if (len == sizeof(s))
		memcpy(&s, args, sizeof(s));
	for (unsigned i = 0; i < n; i++) {
		size_t l;
		const void *v = coord_ctx_input(ctx, i, &l);
		int64_t x = 0;
		int32_t y;

		if (l == sizeof(x)) {
			memcpy(&x, v, sizeof(x));
		} else if (l == sizeof(y)) {
			memcpy(&y, v, sizeof(y));
			x = y;
		} else {
			EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "sum_inputs: input %u has %zu bytes",
					    i, l));
		}
		s += x;
	}
	EXIT(coord_ctx_set_result(ctx, &s, sizeof(s)));
}

/* B1: result: the inputs' bytes one after another (in reverse order of
 * index when args is "r", to read them out of order). */
static int f_concat_inputs(struct coord_ctx *ctx, const void *args, size_t len)
{
	unsigned n = coord_ctx_num_inputs(ctx);
	int rev = len == 1 && *(const char *)args == 'r';
	size_t total = 0, off = 0, l;
	uint8_t *out;

	ENTER();
	for (unsigned i = 0; i < n; i++) {
		coord_ctx_input(ctx, i, &l);
		total += l;
	}
	out = coord_ctx_result_buf(ctx, total);
	if (!out && total)
		EXIT(COORD_ENOMEM);
	for (unsigned k = 0; k < n; k++) {
		unsigned i = rev ? n - 1 - k : k;
		const void *v = coord_ctx_input(ctx, i, &l);

		if (l)
			memcpy(out + (rev ? total - off - l : off), v, l);
		off += l;
	}
	if (coord_ctx_input(ctx, n, &l) != NULL || l != 0)
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "input past the end"));
	EXIT(0);
}

/* args: uint32 microseconds; records its pid, sleeps; result: { attempt,
 * worker index } (uint32 x 2). */
static int f_sleep_attempt(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t us, out[2];

	if (len != sizeof(us))
		return coord_ctx_fail(ctx, COORD_EINVAL, "sleep_attempt: want uint32 us");
	memcpy(&us, args, sizeof(us));
	out[0] = coord_ctx_attempt(ctx);
	out[1] = (uint32_t)coord_ctx_worker(ctx);
	atomic_fetch_add(&t_sh->running[out[1] % 64], 1);
	atomic_store(&t_sh->running_pid, (int)getpid());
	t_sleep_ns((uint64_t)us * 1000);
	atomic_fetch_sub(&t_sh->running[out[1] % 64], 1);
	return coord_ctx_set_result(ctx, out, sizeof(out));
}

/* On its first attempt sleeps 3 s (a stuck closure, B6); result: { attempt,
 * worker index } (uint32 x 2). */
static int f_stuck_once(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t out[2] = { coord_ctx_attempt(ctx), (uint32_t)coord_ctx_worker(ctx) };

	(void)args;
	(void)len;
	if (out[0] == 1)
		t_sleep_ns(3000000000ull);
	return coord_ctx_set_result(ctx, out, sizeof(out));
}

static int f_attempt(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t a = coord_ctx_attempt(ctx);

	ENTER();
	EXIT(coord_ctx_set_result(ctx, &a, sizeof(a)));
}

/* B4 stress: args int64[2]; result { int64 a + b, int32 worker, uint32
 * attempt }, so a test checks the value, where it ran and how often. */
static int f_add_where(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct {
		int64_t sum;
		int32_t worker;
		uint32_t attempt;
	} out;
	int64_t ab[2];

	ENTER();
	if (len != sizeof(ab))
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "add_where wants 16 bytes, got %zu", len));
	memcpy(ab, args, sizeof(ab));
	out.sum = ab[0] + ab[1];
	out.worker = coord_ctx_worker(ctx);
	out.attempt = coord_ctx_attempt(ctx);
	EXIT(coord_ctx_set_result(ctx, &out, sizeof(out)));
}

static int f_order(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x = -1;
	long i = atomic_fetch_add(&t_norder, 1);

	ENTER();
	if (len == sizeof(x))
		memcpy(&x, args, sizeof(x));
	if (i >= 0 && i < T_ORDER_MAX)
		t_order[i] = x;
	EXIT(0);
}

static int f_stamp(struct coord_ctx *ctx, const void *args, size_t len)
{
	int w = coord_ctx_worker(ctx);
	uint64_t zero = 0;

	ENTER();
	if (w >= 0 && w < 64)
		atomic_compare_exchange_strong(&t_first_ns[w], &zero, t_now_ns());
	t_sleep_ns(1000000);
	EXIT(0);
}

struct t_counter {
	int64_t next;
	int worker;
};

static int f_pw_next(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_counter *k = coord_ctx_per_worker(ctx, 0);
	struct {
		int32_t worker;
		int32_t owner;
		int64_t value;
	} out;

	ENTER();
	if (!k)
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "pw_next needs a per-worker argument"));
	out.worker = coord_ctx_worker(ctx);
	out.owner = k->worker;
	out.value = k->next++;
	EXIT(coord_ctx_set_result(ctx, &out, sizeof(out)));
}

static int r_counter(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	struct t_counter *k;
	int w = coord_ctx_worker(ctx);

	if (w >= 0 && w < 64)
		atomic_fetch_add(&t_creates[w], 1);
	if (atomic_load(&t_create_fail))
		return coord_ctx_fail(ctx, -ENOSPC, "counter creation refused on worker %d", w);
	k = calloc(1, sizeof(*k));
	if (!k)
		return COORD_ENOMEM;
	if (len == sizeof(k->next))
		memcpy(&k->next, args, sizeof(k->next));
	k->worker = w;
	*res = k;
	return 0;
}

/* A "tracked" resource: its token and worker. */
struct t_tracked {
	int64_t token;
	int worker;
};

static int r_tracked(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	struct t_tracked *k = calloc(1, sizeof(*k));
	int w = coord_ctx_worker(ctx);

	if (!k)
		return COORD_ENOMEM;
	if (len == sizeof(k->token))
		memcpy(&k->token, args, sizeof(k->token));
	k->worker = w;
	if (w >= 0 && w < 64 && k->token && k->token == atomic_load(&t_sh->tr_token))
		atomic_fetch_add(&t_sh->tr_creates[w], 1);
	*res = k;
	return 0;
}

static void r_tracked_destroy(void *res)
{
	struct t_tracked *k = res;

	if (k->worker >= 0 && k->worker < 64 && k->token &&
	    k->token == atomic_load(&t_sh->tr_token))
		atomic_fetch_add(&t_sh->tr_destroys[k->worker], 1);
	free(k);
}

static int f_tr_live(struct coord_ctx *ctx, const void *args, size_t len)
{
	int w = coord_ctx_worker(ctx);
	int64_t live = 0;

	ENTER();
	if (w >= 0 && w < 64)
		live = atomic_load(&t_sh->tr_creates[w]) - atomic_load(&t_sh->tr_destroys[w]);
	EXIT(coord_ctx_set_result(ctx, &live, sizeof(live)));
}

static int f_closure_id(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct {
		uint64_t id;
		uint32_t attempt;
		int32_t worker;
	} out = { coord_ctx_closure(ctx), coord_ctx_attempt(ctx), coord_ctx_worker(ctx) };

	ENTER();
	EXIT(coord_ctx_set_result(ctx, &out, sizeof(out)));
}

/* Fails with -EIO and its argument bytes as the whole message (a short
 * message travels in the closure's first line: V5 in runtime/core/rv.c). */
static int f_fail_msg(struct coord_ctx *ctx, const void *args, size_t len)
{
	ENTER();
	EXIT(coord_ctx_fail(ctx, -EIO, "%.*s", (int)len, (const char *)args));
}

/* args: two uint32 lengths a, b: sets a result of a bytes of 0xaa, then
 * replaces it with b bytes of 0xbb (the value is the second). */
static int f_set_twice(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint32_t ab[2];
	void *b;

	ENTER();
	if (len != sizeof(ab))
		EXIT(coord_ctx_fail(ctx, COORD_EINVAL, "set_twice wants 8 bytes, got %zu", len));
	memcpy(ab, args, sizeof(ab));
	b = coord_ctx_result_buf(ctx, ab[0]);
	if (!b && ab[0])
		EXIT(COORD_ENOMEM);
	if (ab[0])
		memset(b, 0xaa, ab[0]);
	b = coord_ctx_result_buf(ctx, ab[1]);
	if (!b && ab[1])
		EXIT(COORD_ENOMEM);
	if (ab[1])
		memset(b, 0xbb, ab[1]);
	EXIT(0);
}

/* ---- variables (coord/var.h) -------------------------------------------------------- */

/* args: struct t_var_args; every element of [off, off + n) += val (n <= 64). */
static int f_var_add(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	float d[64];

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_add: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n > 64)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_add: n > 64");
	atomic_store(&t_sh->last_attempt, (int)coord_ctx_attempt(ctx));
	for (uint64_t i = 0; i < a.n; i++)
		d[i] = a.val;
	return coord_ctx_var_assign_add(ctx, a.var, a.off, a.n, d);
}

/* args: struct t_var_args; result: elements [off, off + n) (n <= 64). */
static int f_var_read(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	float v[64];
	int r;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_read: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n > 64)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_read: n > 64");
	r = coord_ctx_var_read(ctx, a.var, a.off, a.n, v);
	return r < 0 ? r : coord_ctx_set_result(ctx, v, 4 * a.n);
}

/* args: struct t_var_args; result: the code of reading [off, off + n). */
static int f_var_code(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	float v[64];
	int32_t code;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_code: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n > 64)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_code: n > 64");
	code = coord_ctx_var_read(ctx, a.var, a.off, a.n, v);
	return coord_ctx_set_result(ctx, &code, sizeof(code));
}

/* args: struct t_var_args (pad = reads, n <= 1024); see the table above. */
static int f_var_uniform(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	uint64_t out[3] = { 0 };
	float v[1024], last = 0;
	int r;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_uniform: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n == 0 || a.n > 1024 || a.pad > 100000)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_uniform: n 1..1024, pad <= 100000");
	for (uint32_t k = 0; k < a.pad; k++) {
		r = coord_ctx_var_read(ctx, a.var, a.off, a.n, v);
		if (r < 0)
			return r;
		for (uint64_t i = 1; i < a.n; i++)
			if (v[i] != v[0]) {
				out[0]++;
				break;
			}
		out[1] += k && v[0] != last;
		last = v[0];
		out[2]++;
	}
	return coord_ctx_set_result(ctx, out, sizeof(out));
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* args: struct t_var_args (pad = reads, n <= 1024); see the table above. */
static int f_var_read_lat(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	uint64_t out[3], *lat;
	float v[1024];
	int r = 0;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_read_lat: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n == 0 || a.n > 1024 || a.pad == 0 || a.pad > 100000)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_read_lat: n 1..1024, pad 1..100000");
	lat = malloc(a.pad * sizeof(*lat));
	if (!lat)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "var_read_lat: no memory");
	for (uint32_t k = 0; k < a.pad && r == 0; k++) {
		uint64_t t0 = t_now_ns();

		r = coord_ctx_var_read(ctx, a.var, a.off, a.n, v);
		lat[k] = t_now_ns() - t0;
	}
	if (r == 0) {
		qsort(lat, a.pad, sizeof(*lat), cmp_u64);
		out[0] = lat[a.pad / 2];
		out[1] = lat[(uint64_t)a.pad * 99 / 100];
		out[2] = lat[0];
	}
	free(lat);
	return r < 0 ? r : coord_ctx_set_result(ctx, out, sizeof(out));
}

/* args: struct t_var_args (off = row length, n = indices) + int64 idx[n];
 * every updated row gets val in each element. */
static int f_var_scatter(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	int64_t idx[16];
	float rows[16 * 16];

	memcpy(&a, args, len < sizeof(a) ? len : sizeof(a));
	if (len < sizeof(a) || a.n > 16 || a.off > 16 || len != sizeof(a) + 8 * a.n)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_scatter: bad args");
	memcpy(idx, (const uint8_t *)args + sizeof(a), 8 * a.n);
	for (uint64_t i = 0; i < a.n * a.off; i++)
		rows[i] = a.val;
	return coord_ctx_var_scatter_add(ctx, a.var, idx, a.n, a.off, rows);
}

/* args: struct t_pvar_args + int64 ids[n] (+ rows); see the table above. */
static int f_pvar_rows(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_pvar_args a;
	const uint8_t *p = (const uint8_t *)args + sizeof(a);
	struct coord_pvar pv;
	int64_t *ids;
	float *rows;
	size_t rl, need;
	int r;

	memcpy(&a, args, len < sizeof(a) ? len : sizeof(a));
	rl = a.pv.row_len;
	if (len < sizeof(a) || rl == 0 || rl > 16384 || a.n > 16384 / rl ||
	    a.op > T_PV_LOOKUP_GATHER)
		return coord_ctx_fail(ctx, COORD_EINVAL, "pvar_rows: bad args");
	need = sizeof(a) + 8 * (size_t)a.n + (a.op == T_PV_SCATTER ? 4 * (size_t)a.n * rl : 0);
	if (len != need)
		return coord_ctx_fail(ctx, COORD_EINVAL, "pvar_rows: %zu bytes, %zu expected", len,
				      need);
	ids = malloc(8 * (size_t)a.n + 4 * (size_t)a.n * rl + 8);
	if (!ids)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "pvar_rows: no memory");
	rows = (float *)(ids + a.n);
	memcpy(ids, p, 8 * (size_t)a.n);
	pv = a.pv;
	if (a.op == T_PV_SCATTER) {
		memcpy(rows, p + 8 * (size_t)a.n, 4 * (size_t)a.n * rl);
		r = coord_ctx_pvar_scatter_add(ctx, &pv, ids, a.n, rows);
	} else {
		r = a.op == T_PV_LOOKUP_GATHER ? coord_ctx_pvar_lookup(ctx, a.pv.name, &pv) : 0;
		if (r == 0)
			r = coord_ctx_pvar_gather(ctx, &pv, ids, a.n, rows);
		if (r == 0)
			r = coord_ctx_set_result(ctx, rows, 4 * (size_t)a.n * rl);
	}
	free(ids);
	return r;
}

/* args: struct t_pvar_multi + ids (+ rows); see the table above. */
static int f_pvar_multi(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_pvar_multi a;
	struct coord_pvar_rows v[2];
	const uint8_t *p = (const uint8_t *)args + sizeof(a);
	size_t ids = 0, floats = 0, at = 0;
	uint8_t *b;
	int r;

	memcpy(&a, args, len < sizeof(a) ? len : sizeof(a));
	if (len < sizeof(a) || a.op > T_PV_SCATTER)
		return coord_ctx_fail(ctx, COORD_EINVAL, "pvar_multi: bad args");
	for (int i = 0; i < 2; i++) {
		if (a.pv[i].row_len > 16384 || a.n[i] > 16384)
			return coord_ctx_fail(ctx, COORD_EINVAL, "pvar_multi: bad args");
		ids += a.n[i];
		floats += (size_t)a.n[i] * a.pv[i].row_len;
	}
	if (floats > 16384 || len != sizeof(a) + 8 * ids + (a.op == T_PV_SCATTER ? 4 * floats : 0))
		return coord_ctx_fail(ctx, COORD_EINVAL, "pvar_multi: bad length");
	b = malloc(8 * ids + 4 * floats + 8);
	if (!b)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "pvar_multi: no memory");
	memcpy(b, p, 8 * ids + (a.op == T_PV_SCATTER ? 4 * floats : 0));
	for (int i = 0; i < 2; i++) {
		float *rows = (float *)(b + 8 * ids) + at;

		v[i] = (struct coord_pvar_rows){ .pv = &a.pv[i],
						 .ids = (const int64_t *)b + (i ? a.n[0] : 0),
						 .n = a.n[i],
						 .out = rows,
						 .updates = rows };
		at += (size_t)a.n[i] * a.pv[i].row_len;
	}
	if (a.op == T_PV_SCATTER) {
		r = coord_ctx_pvar_scatter_add_multi(ctx, v, 2);
	} else {
		r = coord_ctx_pvar_gather_multi(ctx, v, 2);
		if (r == 0)
			r = coord_ctx_set_result(ctx, b + 8 * ids, 4 * floats);
	}
	free(b);
	return r;
}

/* args: a variable name; result: its handle, as the worker resolves it. */
static int f_var_lookup(struct coord_ctx *ctx, const void *args, size_t len)
{
	char name[COORD_VAR_NAME_LEN + 1];
	struct coord_var_shape sh;
	coord_var_t v;
	uint64_t out[2];
	int r;

	if (len == 0 || len > COORD_VAR_NAME_LEN)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_lookup: bad name");
	memcpy(name, args, len);
	name[len] = 0;
	r = coord_ctx_var_lookup(ctx, name, &v, &sh);
	if (r < 0)
		return r;
	out[0] = v;
	out[1] = sh.nelem;
	return coord_ctx_set_result(ctx, out, sizeof(out));
}

/* args: struct t_var_args; one batch: += val on [off, off+n), then read
 * the same range (one frame); result: what the read saw. */
static int f_var_batch(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct t_var_args a;
	float d[64], v[64];
	struct coord_var_op ops[2];
	int r;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_batch: bad args");
	memcpy(&a, args, sizeof(a));
	if (a.n > 64)
		return coord_ctx_fail(ctx, COORD_EINVAL, "var_batch: n > 64");
	for (uint64_t i = 0; i < a.n; i++)
		d[i] = a.val;
	memset(ops, 0, sizeof(ops));
	ops[0] = (struct coord_var_op){
		.op = COORD_VAR_ASSIGN_ADD, .var = a.var, .off = a.off, .n = a.n, .src = d
	};
	ops[1] = (struct coord_var_op){
		.op = COORD_VAR_READ, .var = a.var, .off = a.off, .n = a.n, .dst = v
	};
	r = coord_ctx_var_batch(ctx, ops, 2);
	return r < 0 ? r : coord_ctx_set_result(ctx, v, 4 * a.n);
}

int t_register(struct coord_registry *r)
{
	if (coord_registry_add(r, "var_add", f_var_add) ||
	    coord_registry_add(r, "sleep_attempt", f_sleep_attempt) ||
	    coord_registry_add(r, "stuck_once", f_stuck_once) ||
	    coord_registry_add(r, "var_read", f_var_read) ||
	    coord_registry_add(r, "var_code", f_var_code) ||
	    coord_registry_add(r, "var_scatter", f_var_scatter) ||
	    coord_registry_add(r, "var_lookup", f_var_lookup) ||
	    coord_registry_add(r, "pvar_rows", f_pvar_rows) ||
	    coord_registry_add(r, "pvar_multi", f_pvar_multi) ||
	    coord_registry_add(r, "var_batch", f_var_batch) ||
	    coord_registry_add(r, "var_uniform", f_var_uniform) ||
	    coord_registry_add(r, "var_read_lat", f_var_read_lat))
		return -1;
	if (coord_registry_add(r, "echo", f_echo) || coord_registry_add(r, "add", f_add) ||
	    coord_registry_add(r, "add_clock", f_add_clock) ||
	    coord_registry_add(r, "sleep_us", f_sleep_us) ||
	    coord_registry_add(r, "spin_us", f_spin_us) || coord_registry_add(r, "fail", f_fail) ||
	    coord_registry_add(r, "tb_run", f_tb_run) || coord_registry_add(r, "gated", f_gated) ||
	    coord_registry_add(r, "attempt", f_attempt) ||
	    coord_registry_add(r, "add_where", f_add_where) ||
	    coord_registry_add(r, "stamp", f_stamp) || coord_registry_add(r, "order", f_order) ||
	    coord_registry_add(r, "pw_next", f_pw_next) ||
	    coord_registry_add(r, "sum_inputs", f_sum_inputs) ||
	    coord_registry_add(r, "concat_inputs", f_concat_inputs) ||
	    coord_registry_add(r, "tr_live", f_tr_live) ||
	    coord_registry_add(r, "closure_id", f_closure_id) ||
	    coord_registry_add(r, "fail_msg", f_fail_msg) ||
	    coord_registry_add(r, "set_twice", f_set_twice) ||
	    coord_registry_add_resource(r, "tracked", r_tracked, r_tracked_destroy) ||
	    coord_registry_add_resource(r, "counter", r_counter, free))
		return -1;
	return 0;
}

struct coord_registry *t_registry(void)
{
	struct coord_registry *r;

	if (coord_registry_create(&r) || t_register(r)) {
		fprintf(stderr, "t_registry failed\n");
		abort();
	}
	return r;
}
