// SPDX-License-Identifier: MIT
/*
 * tests/rdma/test_rdma_ps.c - parameter-server variables over rdma, with
 * one-sided reads (transport/ps_client.c, ps_rdma.h; runtime/varstore.c
 * S1-S3): one coord-ps --transport rdma, two coord-worker --transport rdma,
 * a coordinator over rdma, all on $RDMA_TEST_ADDR (the rig's 10.0.2.15).
 *   values       a worker function reads what the coordinator assigned;
 *                then the coord-ps process is stopped (SIGSTOP) and a read
 *                still completes with the right values: the ps CPU takes no
 *                part in a one-sided read (soft-RoCE answers READs in the
 *                kernel); a two-sided op (assign_add) waits for it, and
 *                completes after SIGCONT.
 *   consistent   while the coordinator assigns one value to 1024 elements
 *                again and again, worker functions read them thousands of
 *                times: never a torn read (two values in one snapshot), and
 *                the value seen changes; for a small variable (each read one
 *                RDMA READ of its whole block) and a large one (a chain of
 *                three READs); and for the large one assigned whole
 *                (256 KiB: rendezvous, the ps READs into the variable).
 *   heartbeat    a stopped coord-ps is found lost by the heartbeat (4 x
 *                500 ms), not the 30 s op timeout; after SIGCONT an op
 *                dials again; idle, pings keep the connection up.
 *   large        the coordinator reads 1 MiB and 300 KiB of a variable
 *                with coord-ps stopped: RDMA READs straight into its
 *                buffers (ps_rdma.c P4), every float right.
 *   rendezvous   large assigns and assign_adds (ps_rdma.c P5: the ps RDMA
 *                READs the caller's buffer, rdma_server.c Q6) with a
 *                coordinator whose max_frame (256 KiB) no frame of their
 *                data would fit: whole, at an odd offset, from read-only
 *                memory, at the threshold (64 KiB); every float right, the
 *                floats around each range untouched.
 *   rendezvous_hostile  a raw ps connection names bad data: a length that
 *                is not 4 n, a short descriptor, a reserved word: refused
 *                with a clear error, the connection serves on; an rkey that
 *                does not exist, a region shorter than declared: the ps's
 *                READ fails, that connection is closed, the variable is
 *                unchanged and the ps serves the coordinator on.
 * Bounded: t_watchdog(), deadlines on every fetch.  Exit 77 without a device.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "transport/rdma_provider.h"
#include "transport/wire/auth.h"
#include "transport/wire/wire.h"
#include "../helpers.h"

#define TEST_KEY "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static struct coord_registry *reg;
static pid_t ps_pid = -1;
static unsigned ps_port;

/* A coordinator of @nworkers and the ps; @hb_ms > 0: that heartbeat, 4
 * misses; @max_frame > 0: that max_frame. */
static struct coord *make_opts(unsigned nworkers, int hb_ms, uint32_t max_frame)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	struct coord_error err = { 0 };
	struct coord *c = NULL;
	char json[512], *w;
	int r;

	t_opts(&o, reg);
	if (hb_ms > 0) {
		o.heartbeat_ms = hb_ms;
		o.heartbeat_misses = 4;
	}
	if (max_frame)
		o.max_frame = max_frame;
	w = t_spec_json(nworkers);
	w[strlen(w) - 1] = 0; /* drop the closing brace */
	snprintf(json, sizeof(json), "%s, \"ps\": [\"%s:%u\"]}", w, t_addr(), ps_port);
	free(w);
	r = coord_spec_parse(json, &spec, &err);
	if (r == 0)
		r = coord_create(spec, &o, &c, &err);
	coord_spec_destroy(spec);
	if (r != 0)
		fail_msg("create: %s", err.msg);
	return c;
}

static struct coord *make_hb(unsigned nworkers, int hb_ms)
{
	return make_opts(nworkers, hb_ms, 0);
}

static struct coord *make(unsigned nworkers)
{
	return make_hb(nworkers, 0);
}

/* Run var_read on [off, off + n) (n <= 64) and compare with @want. */
static void read_check(struct coord *c, coord_var_t v, uint64_t off, uint64_t n, const float *want,
		       int64_t timeout_ns)
{
	struct t_var_args a = { .var = v, .off = off, .n = n };
	struct coord_error err = { 0 };
	struct coord_rv *rv;
	const void *p;
	size_t len;

	assert_int_equal(coord_schedule(c, t_fn(c, "var_read"), &a, sizeof(a), &rv, &err), 0);
	if (coord_rv_fetch_timeout(rv, timeout_ns, &p, &len, &err) != 0)
		fail_msg("var_read: %s", err.msg);
	assert_int_equal(len, 4 * n);
	assert_memory_equal(p, want, 4 * n);
	coord_rv_put(rv);
}

static void test_rdma_ps_one_sided_values_ps_stopped(void **state)
{
	struct coord *c = make(1);
	uint64_t dims[1] = { 256 };
	struct coord_error err = { 0 };
	struct t_var_args add = { .off = 0, .n = 8, .val = 1.0f };
	struct coord_rv *rv;
	float vals[256];
	coord_var_t v;
	const void *p;
	size_t len;

	(void)state;
	for (int i = 0; i < 256; i++)
		vals[i] = (float)i * 0.5f;
	assert_int_equal(coord_var_create(c, "rdma/w", 1, dims, NULL, &v, &err), 0);
	assert_int_equal(coord_var_assign(c, v, 0, 256, vals, &err), 0);
	read_check(c, v, 0, 64, vals, 30000000000ll);	      /* maps it, then READs */
	read_check(c, v, 100, 50, vals + 100, 30000000000ll); /* one-sided */

	/* The ps process is stopped: one-sided reads still complete. */
	assert_int_equal(kill(ps_pid, SIGSTOP), 0);
	t_sleep_ns(100000000);
	read_check(c, v, 192, 64, vals + 192, 20000000000ll);
	read_check(c, v, 7, 1, vals + 7, 20000000000ll);
	print_message("read 2 ranges one-sided while coord-ps was stopped\n");
	/* a two-sided op waits for the ps... */
	add.var = v;
	assert_int_equal(coord_schedule(c, t_fn(c, "var_add"), &add, sizeof(add), &rv, &err), 0);
	t_sleep_ns(300000000);
	assert_int_equal(coord_rv_state(rv), COORD_RV_NOT_READY);
	assert_int_equal(kill(ps_pid, SIGCONT), 0);
	/* ...and completes once it runs again */
	assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &p, &len, &err), 0);
	coord_rv_put(rv);
	for (int i = 0; i < 8; i++)
		vals[i] += 1.0f;
	read_check(c, v, 0, 64, vals, 30000000000ll); /* the write is seen */
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/*
 * Large reads (ps_rdma.c P4): the coordinator's own ps client reads a 1 MiB
 * variable whole and 300 KiB of it at an odd offset, straight into its
 * buffers, with coord-ps stopped (one-sided: a two-sided fallback would wait
 * for the ps and fail at the op timeout), every float right; the bytes
 * around the range are untouched.
 */
static void test_rdma_ps_one_sided_large(void **state)
{
	enum { N = 256 * 1024, OFF = 12345, M = 75 * 1024 };
	struct coord *c = make(1);
	uint64_t dims[1] = { N };
	struct coord_error err = { 0 };
	float *vals = malloc(N * sizeof(float)), *got = malloc((N + 2) * sizeof(float));
	coord_var_t v;

	(void)state;
	assert_non_null(vals);
	assert_non_null(got);
	for (int i = 0; i < N; i++)
		vals[i] = (float)i + 0.25f;
	assert_int_equal(coord_var_create(c, "rdma/large", 1, dims, NULL, &v, &err), 0);
	assert_int_equal(coord_var_assign(c, v, 0, N, vals, &err), 0);
	assert_int_equal(coord_var_read(c, v, 0, N, got, &err), 0); /* maps it */
	assert_memory_equal(got, vals, N * sizeof(float));

	assert_int_equal(kill(ps_pid, SIGSTOP), 0);
	t_sleep_ns(100000000);
	memset(got, 0, (N + 2) * sizeof(float));
	if (coord_var_read(c, v, 0, N, got, &err) != 0) {
		kill(ps_pid, SIGCONT);
		fail_msg("1 MiB read with coord-ps stopped: %s", err.msg);
	}
	assert_memory_equal(got, vals, N * sizeof(float));
	got[0] = got[M + 1] = -1.0f;
	if (coord_var_read(c, v, OFF, M, got + 1, &err) != 0) {
		kill(ps_pid, SIGCONT);
		fail_msg("300 KiB read with coord-ps stopped: %s", err.msg);
	}
	assert_int_equal(kill(ps_pid, SIGCONT), 0);
	assert_memory_equal(got + 1, vals + OFF, M * sizeof(float));
	assert_true(got[0] == -1.0f && got[M + 1] == -1.0f);
	print_message("read 1 MiB and 300 KiB one-sided while coord-ps was stopped\n");
	free(vals);
	free(got);
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/* Read all @n floats of @v and compare them with @want. */
static void check_all(struct coord *c, coord_var_t v, const float *want, uint64_t n)
{
	float *got = malloc(n * sizeof(float));
	struct coord_error err = { 0 };

	assert_non_null(got);
	if (coord_var_read(c, v, 0, n, got, &err) != 0)
		fail_msg("read: %s", err.msg);
	for (uint64_t i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("float %llu: %g, not %g", (unsigned long long)i, got[i], want[i]);
	free(got);
}

/* One assign_add of @n floats at @off (a batch of one: the coordinator's). */
static int add_batch(struct coord *c, coord_var_t v, uint64_t off, uint64_t n, const float *d,
		     struct coord_error *err)
{
	struct coord_var_op op = {
		.op = COORD_VAR_ASSIGN_ADD, .var = v, .off = off, .n = n, .src = d
	};

	return coord_var_batch(c, &op, 1, err);
}

/*
 * Rendezvous updates (ps_rdma.c P5, rdma_server.c Q6): with max_frame
 * 256 KiB, an update of 1 MiB (or 2 MiB) of floats fits no frame, so only
 * a rendezvous (the ps READs the caller's buffer) can carry it.  Whole,
 * at an odd offset, an assign_add, from read-only memory (registered
 * without local write), and at the threshold; the model checks every float.
 */
static void test_rdma_ps_rendezvous_updates(void **state)
{
	enum { N = 512 * 1024, OFF = 12345, M = 75 * 1024, AOFF = 200001, AM = 256 * 1024 };
	struct coord *c = make_opts(1, 0, 256u << 10);
	uint64_t dims[1] = { N };
	struct coord_error err = { 0 };
	float *model = malloc(N * sizeof(float)), *buf = malloc(N * sizeof(float));
	size_t ro_len = (size_t)M * sizeof(float);
	float *ro;
	coord_var_t v;

	(void)state;
	assert_non_null(model);
	assert_non_null(buf);
	assert_int_equal(coord_var_create(c, "rdma/rdv", 1, dims, NULL, &v, &err), 0);
	for (int i = 0; i < N; i++)
		model[i] = (float)i + 0.5f;
	if (coord_var_assign(c, v, 0, N, model, &err) != 0) /* 2 MiB: rendezvous */
		fail_msg("2 MiB assign: %s", err.msg);
	check_all(c, v, model, N);

	for (int i = 0; i < M; i++)
		buf[i] = -(float)i;
	assert_int_equal(coord_var_assign(c, v, OFF, M, buf, &err), 0); /* 300 KiB, odd offset */
	memcpy(model + OFF, buf, (size_t)M * sizeof(float));
	check_all(c, v, model, N);

	for (int i = 0; i < AM; i++)
		buf[i] = (float)(i % 7);
	if (add_batch(c, v, AOFF, AM, buf, &err) != 0) /* 1 MiB assign_add */
		fail_msg("1 MiB assign_add: %s", err.msg);
	for (int i = 0; i < AM; i++)
		model[AOFF + i] += buf[i];
	check_all(c, v, model, N);

	/* from read-only memory */
	ro = mmap(NULL, ro_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(ro != MAP_FAILED);
	for (int i = 0; i < M; i++)
		ro[i] = 3.0f * (float)i;
	assert_int_equal(mprotect(ro, ro_len, PROT_READ), 0);
	if (coord_var_assign(c, v, 1, M, ro, &err) != 0)
		fail_msg("assign from read-only memory: %s", err.msg);
	memcpy(model + 1, ro, ro_len);
	munmap(ro, ro_len);
	check_all(c, v, model, N);

	/* the threshold: 64 KiB goes rendezvous, 64 KiB - 4 in a frame */
	for (int i = 0; i < 16384; i++)
		buf[i] = 7.0f + (float)i;
	assert_int_equal(coord_var_assign(c, v, N - 16384, 16384, buf, &err), 0);
	assert_int_equal(coord_var_assign(c, v, 2, 16383, buf, &err), 0);
	memcpy(model + N - 16384, buf, 16384 * sizeof(float));
	memcpy(model + 2, buf, 16383 * sizeof(float));
	check_all(c, v, model, N);
	print_message("rendezvous: 2 MiB and 300 KiB assigns, a 1 MiB assign_add, from read-only "
		      "memory, at 64 KiB: every float right\n");
	free(model);
	free(buf);
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/* A raw ps connection (the ps client's rdma channel), handshake done. */
static struct coord_psr *raw_ps(void)
{
	struct coord_key key = { 0 };
	struct coord_error err = { 0 };
	struct coord_psr *r = NULL;
	char addr[96];

	assert_int_equal(coord_key_load(NULL, &key, NULL), 0);
	snprintf(addr, sizeof(addr), "%s:%u", t_addr(), ps_port);
	if (coord_psr_connect(addr, &key, COORD_ROLE_COORDINATOR, 0, 1u << 20, 10000, &r, &err) !=
	    0)
		fail_msg("connect to the ps: %s", err.msg);
	coord_key_wipe(&key);
	return r;
}

/*
 * One ASSIGN_RDV of @n floats at 0 of @v naming @data (@dlen bytes) on @r;
 * its reply's code and message, or, when the ps closed the connection
 * instead, 1.
 */
static int raw_rdv(struct coord_psr *r, coord_var_t v, uint64_t n, const void *data, uint32_t dlen,
		   char *msg, size_t cap)
{
	uint8_t b[256];
	struct coord_wire_writer w;
	struct coord_wire_vreq q = { .rid = 7,
				     .op = COORD_PS_ASSIGN_RDV,
				     .var = (uint32_t)v,
				     .tag = coord_ps_handle_tag(v),
				     .n = n,
				     .len = dlen,
				     .data = data };
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_vres res;
	const uint8_t *payload;
	int rc;

	coord_wire_writer_init(&w, b, sizeof(b));
	coord_wire_begin(&w, COORD_WIRE_VAR_REQ);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	coord_wire_end(&w);
	assert_int_equal(coord_psr_send(r, b, w.len), 0);
	for (int k = 0; k < 10; k++) { /* bounded: PONGs may come first */
		rc = coord_psr_next(r, &h, &payload, 20000);
		if (rc == -EPIPE)
			return 1;
		if (rc < 0)
			fail_msg("raw ps connection: %s", strerror(-rc));
		if (h.type == COORD_WIRE_ERROR)
			return 1;
		if (h.type != COORD_WIRE_VAR_RES)
			continue;
		coord_wire_iter_init(&it, &h, payload);
		assert_int_equal(coord_wire_next_vres(&it, &res), 1);
		assert_int_equal(res.rid, 7);
		snprintf(msg, cap, "%.*s", (int)res.len, (const char *)res.data);
		return res.code;
	}
	fail_msg("no reply from the ps");
	return 0;
}

/*
 * A hostile sender of rendezvous updates (rdma_server.c Q6): descriptors
 * that do not match the op are refused before any READ and the
 * connection goes on; a READ that fails (an rkey that does not exist, a
 * region shorter than declared) closes only that connection; the variable
 * is unchanged and the ps serves on.
 */
static void test_rdma_ps_rendezvous_hostile(void **state)
{
	enum { N = 64 * 1024 };
	struct coord *c = make(1);
	uint64_t dims[1] = { N };
	struct coord_error err = { 0 };
	float *vals = malloc(N * sizeof(float)), *small = calloc(N / 4, sizeof(float));
	struct coord_ps_rsrc d = { .addr = 0x10000, .len = 4 * N, .rkey = 0x1234 };
	struct coord_rdma_mr *mr = NULL;
	uint8_t desc[COORD_PS_RSRC_LEN];
	struct coord_psr *r;
	char msg[256];
	coord_var_t v;
	int code;

	(void)state;
	assert_non_null(vals);
	assert_non_null(small);
	for (int i = 0; i < N; i++)
		vals[i] = (float)i;
	assert_int_equal(coord_var_create(c, "rdma/rdvh", 1, dims, NULL, &v, &err), 0);
	assert_int_equal(coord_var_assign(c, v, 0, N, vals, &err), 0);

	r = raw_ps();
	d.len = 4 * N + 4; /* not 4 n */
	coord_ps_rsrc_put(desc, &d);
	code = raw_rdv(r, v, N, desc, sizeof(desc), msg, sizeof(msg));
	print_message("length 4 n + 4: %d %s\n", code, msg);
	assert_int_equal(code, COORD_EINVAL);
	assert_non_null(strstr(msg, "declared"));
	code = raw_rdv(r, v, N, desc, 20, msg, sizeof(msg)); /* short descriptor */
	assert_int_equal(code, COORD_EINVAL);
	d.len = 4 * N;
	d.reserved = 1;
	coord_ps_rsrc_put(desc, &d);
	desc[20] = 1; /* coord_ps_rsrc_put() writes 0 there */
	code = raw_rdv(r, v, N, desc, sizeof(desc), msg, sizeof(msg));
	assert_int_equal(code, COORD_EINVAL);
	d.reserved = 0;

	/* an rkey nobody registered: the READ fails, this connection ends */
	coord_ps_rsrc_put(desc, &d);
	code = raw_rdv(r, v, N, desc, sizeof(desc), msg, sizeof(msg));
	print_message("an rkey that does not exist: %s\n",
		      code == 1 ? "the ps closed the connection" : msg);
	assert_true(code == 1 || code == COORD_EUNAVAILABLE);
	coord_psr_shutdown(r);
	coord_psr_destroy(r);
	check_all(c, v, vals, N);

	/* a real region, shorter than declared: the READ fails too */
	r = raw_ps();
	assert_int_equal(coord_psr_put_reg(r, small, N, &mr, &d), 0); /* N bytes: a quarter */
	d.len = 4 * N;
	coord_ps_rsrc_put(desc, &d);
	code = raw_rdv(r, v, N, desc, sizeof(desc), msg, sizeof(msg));
	print_message("a region shorter than declared: %s\n",
		      code == 1 ? "the ps closed the connection" : msg);
	assert_true(code == 1 || code == COORD_EUNAVAILABLE);
	coord_psr_shutdown(r);
	coord_psr_put_done(mr);
	coord_psr_destroy(r);
	check_all(c, v, vals, N);

	/* an honest one on a raw connection: applied */
	r = raw_ps();
	for (int i = 0; i < N / 4; i++)
		small[i] = 0.25f * (float)i;
	assert_int_equal(coord_psr_put_reg(r, small, N, &mr, &d), 0);
	coord_ps_rsrc_put(desc, &d);
	code = raw_rdv(r, v, N / 4, desc, sizeof(desc), msg, sizeof(msg));
	coord_psr_put_done(mr);
	coord_psr_shutdown(r);
	coord_psr_destroy(r);
	assert_int_equal(code, 0);
	memcpy(vals, small, N);
	check_all(c, v, vals, N); /* the ps served on */
	free(vals);
	free(small);
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/*
 * The heartbeat over rdma (ps_conn.c): with coord-ps stopped, a two-sided
 * op fails with COORD_EUNAVAILABLE once the connection has been silent for
 * heartbeat x misses (here 4 x 500 ms), long before the 30 s op timeout;
 * after SIGCONT the next op dials again and succeeds.  Idle in between
 * (pings answered), the connection stays up.  The op is a lookup: an
 * update of the coordinator's in flight is sent again until the ps answers
 * (coord_psc_run_sure()), so it would wait for the SIGCONT.
 */
static void test_rdma_ps_heartbeat(void **state)
{
	struct coord *c = make_hb(1, 500);
	uint64_t dims[1] = { 16 };
	struct coord_error err = { 0 };
	float one[16], got[16];
	coord_var_t v;
	uint64_t t0, took;
	int r = 0;

	(void)state;
	for (int i = 0; i < 16; i++)
		one[i] = (float)i;
	assert_int_equal(coord_var_create(c, "rdma/hb", 1, dims, NULL, &v, &err), 0);
	assert_int_equal(coord_var_assign(c, v, 0, 16, one, &err), 0);
	t_sleep_ns(3000000000ull); /* idle 1.5 x heartbeat x misses: pings keep it up */
	assert_int_equal(coord_var_assign(c, v, 0, 16, one, &err), 0);

	assert_int_equal(kill(ps_pid, SIGSTOP), 0);
	t_sleep_ns(100000000); /* kill() returns before the process has stopped */
	t0 = t_now_ns();
	r = coord_var_lookup(c, "rdma/hb", NULL, NULL, &err);
	took = t_now_ns() - t0;
	assert_int_equal(kill(ps_pid, SIGCONT), 0);
	print_message("with coord-ps stopped: %s after %.2f s\n", err.msg, took / 1e9);
	assert_int_equal(r, COORD_EUNAVAILABLE);
	assert_true(took < 15000000000ull); /* the op timeout is 30 s */

	/* coord-ps runs again: an op dials again (bounded: 50 x 200 ms) */
	for (int k = 0; k < 50; k++) {
		r = coord_var_assign(c, v, 0, 16, one, &err);
		if (r == 0)
			break;
		t_sleep_ns(200000000);
	}
	assert_int_equal(r, 0);
	assert_int_equal(coord_var_read(c, v, 0, 16, got, &err), 0);
	assert_memory_equal(got, one, sizeof(one));
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

struct assigner {
	struct coord *c;
	coord_var_t v;
	uint64_t count; /* floats per assign, from 0 */
	_Atomic int stop;
	long n;
	int bad;
};

/* Assign k to @count elements, k = 1, 2, ..., until told to stop (bounded). */
static void *assigner_main(void *arg)
{
	struct assigner *a = arg;
	uint64_t until = t_now_ns() + 120000000000ull;
	float *vals = malloc(a->count * sizeof(float));

	for (long k = 1; vals && !atomic_load(&a->stop) && t_now_ns() < until && k < 200000; k++) {
		for (uint64_t i = 0; i < a->count; i++)
			vals[i] = (float)k;
		if (coord_var_assign(a->c, a->v, 0, a->count, vals, NULL) != 0) {
			a->bad = 1;
			break;
		}
		a->n = k;
	}
	a->bad |= !vals;
	free(vals);
	return NULL;
}

/* Readers of [0, 1024) of @name (shape @rows x @cols) during assigns of
 * its first @count floats. */
static void consistent_under_assigns(const char *name, uint64_t rows, uint64_t cols, uint64_t count)
{
	struct coord *c = make(2);
	uint64_t dims[2] = { rows, cols };
	struct coord_error err = { 0 };
	struct assigner as = { .c = c, .count = count };
	struct coord_rv *rv[4];
	uint64_t torn = 0, changes = 0, reads = 0;
	pthread_t th;

	assert_int_equal(coord_var_create(c, name, 2, dims, NULL, &as.v, &err), 0);
	assert_int_equal(pthread_create(&th, NULL, assigner_main, &as), 0);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++) {
			struct t_var_args a = { .var = as.v, .off = 0, .n = 1024, .pad = 500 };

			assert_int_equal(coord_schedule(c, t_fn(c, "var_uniform"), &a, sizeof(a),
							&rv[i], &err),
					 0);
		}
		for (int i = 0; i < 4; i++) {
			uint64_t out[3];
			const void *p;
			size_t len;

			if (coord_rv_fetch_timeout(rv[i], 120000000000ll, &p, &len, &err) != 0)
				fail_msg("var_uniform: %s", err.msg);
			assert_int_equal(len, sizeof(out));
			memcpy(out, p, sizeof(out));
			torn += out[0];
			changes += out[1];
			reads += out[2];
			coord_rv_put(rv[i]);
		}
	}
	atomic_store(&as.stop, 1);
	pthread_join(th, NULL);
	print_message("%s (%llu x %llu): %llu reads of 1024 floats during %ld assigns: %llu torn, "
		      "%llu changes seen\n",
		      name, (unsigned long long)rows, (unsigned long long)cols,
		      (unsigned long long)reads, as.n, (unsigned long long)torn,
		      (unsigned long long)changes);
	assert_int_equal(as.bad, 0);
	assert_int_equal(torn, 0);
	assert_int_equal(reads, 3 * 4 * 500);
	assert_true(changes > 0);
	assert_int_equal(coord_join(c, &err), 0);
	coord_destroy(c);
}

/* A 32 x 32 variable: each read takes its whole block in one RDMA READ. */
static void test_rdma_ps_one_sided_consistent_whole_block(void **state)
{
	(void)state;
	consistent_under_assigns("rdma/u", 32, 32, 1024);
}

/* A 64 x 1024 variable (256 KiB): reads of its first row take a chain of
 * three READs (done, the row, begun). */
static void test_rdma_ps_one_sided_consistent_chain(void **state)
{
	(void)state;
	consistent_under_assigns("rdma/big", 64, 1024, 1024);
}

/* The same variable assigned whole (256 KiB: rendezvous, the ps READs the
 * floats straight into it inside the SNAP1 counts, rdma_server.c Q6). */
static void test_rdma_ps_one_sided_consistent_rendezvous(void **state)
{
	(void)state;
	consistent_under_assigns("rdma/rdvc", 64, 1024, 64 * 1024);
}

static int group_setup(void **state)
{
	const char *bin = getenv("COORD_PS_BIN");
	const char *log = getenv("T_WORKER_LOG") ? getenv("T_WORKER_LOG") : "error";
	char listen[80];
	char *argv[] = { (char *)bin, "--listen",  listen,	  "--task", "0",
			 "--log",     (char *)log, "--transport", "rdma",   NULL };

	(void)state;
	/* not loopback: a cluster key is required (B5); servers inherit it */
	setenv("COORD_CLUSTER_KEY", TEST_KEY, 1);
	t_transport = "rdma";
	if (!bin) {
		fprintf(stderr, "COORD_PS_BIN must be set\n");
		return -1;
	}
	snprintf(listen, sizeof(listen), "%s:0", t_addr());
	ps_pid = t_spawn(argv, "coord-ps", &ps_port);
	if (ps_pid < 0)
		return -1;
	return t_workers_start(2) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	if (ps_pid > 0) {
		kill(ps_pid, SIGCONT);
		t_reap(ps_pid);
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_ps_one_sided_values_ps_stopped),
		cmocka_unit_test(test_rdma_ps_one_sided_large),
		cmocka_unit_test(test_rdma_ps_rendezvous_updates),
		cmocka_unit_test(test_rdma_ps_rendezvous_hostile),
		cmocka_unit_test(test_rdma_ps_heartbeat),
		cmocka_unit_test(test_rdma_ps_one_sided_consistent_whole_block),
		cmocka_unit_test(test_rdma_ps_one_sided_consistent_chain),
		cmocka_unit_test(test_rdma_ps_one_sided_consistent_rendezvous),
	};
	struct coord_error err = { 0 };
	int failed;

	t_watchdog(500);
	if (coord_rdma_usable(&err) < 0) {
		printf("test_rdma_ps: SKIP: %s (tests/rdma/rig.sh runs this)\n", err.msg);
		return T_EXIT_SKIP;
	}
	reg = t_registry();
	failed = cmocka_run_group_tests_name("rdma_ps", tests, group_setup, group_teardown);
	coord_registry_destroy(reg);
	return failed;
}
