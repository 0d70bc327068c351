// SPDX-License-Identifier: MIT
/*
 * tests/rdma/test_ps_rdv.c - the ps's side of rendezvous updates (runtime/ps/ps.h
 * ASSIGN_RDV / ASSIGN_ADD_RDV; transport/server/srv_proto.c, rdma_server.c
 * Q6) without a device: the protocol engine (coord_srv_conn_frame()) of a
 * ps over a real store, fed VAR_REQ frames, its fetch hook (struct
 * coord_srv @fetch, what rdma_server.c's RDMA READ is) a function here that
 * copies from this process's memory and counts.  Runs everywhere (the rig
 * runs the READs themselves: test_rdma_ps).
 *   checked      a descriptor whose length is not 4 n, a short one, a
 *                reserved word set, a range outside the variable, a stale
 *                handle, a ps without the hook: refused with a clear error,
 *                nothing fetched, nothing changed.
 *   assign       fetched straight into the variable (the hook's @dst is
 *                inside the block), within the write's SNAP1 counts (begun
 *                = done + 1 while it runs, equal after); assign_add fetched
 *                into the hook's buffer and added.
 *   once         a keyed assign_add (a closure's key) applied once: the same
 *                key again is answered done without a fetch; a fetch that
 *                fails fails the request, is not recorded, and the re-run
 *                applies it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/worker.h>

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "transport/server/srv_proto.h"
#include "transport/wire/wire.h"

#define N 4096

struct fix {
	struct coord_server_opts o;
	struct coord_srv s;
	struct coord_srv_conn k;
	struct coord_varstore *vs;
	uint32_t id;
	uint64_t handle_tag;
	/* the last VAR_RES record sent */
	int32_t code;
	char msg[256];
	unsigned replies;
	/* the fake READ */
	unsigned fetches;
	int fail; /* the next fetch fails with this */
	uint64_t begun_seen, done_seen;
	float buf[N];
};

static struct fix *F;

static int io_send(void *ctx, const void *b, size_t len)
{
	struct fix *f = ctx;
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_vres res;

	assert_true(len >= COORD_WIRE_HDR);
	assert_int_equal(coord_wire_parse_hdr(b, len, 1u << 20, &h), 0);
	assert_int_equal(h.type, COORD_WIRE_VAR_RES);
	coord_wire_iter_init(&it, &h, (const uint8_t *)b + COORD_WIRE_HDR);
	while (coord_wire_next_vres(&it, &res) == 1) {
		f->code = res.code;
		snprintf(f->msg, sizeof(f->msg), "%.*s", res.code ? (int)res.len : 0,
			 (const char *)res.data);
		f->replies++;
	}
	return 0;
}

/* struct coord_srv @fetch: the bytes at src->addr of this process. */
static int fake_fetch(struct coord_srv_conn *k, const struct coord_ps_rsrc *src, uint32_t id,
		      void *dst, const void **out, struct coord_error *err)
{
	struct fix *f = F;
	struct coord_var *v = coord_vs_get(f->vs, id);

	(void)k;
	f->fetches++;
	if (f->fail) {
		int r = f->fail;

		f->fail = 0;
		return coord_seterr(err, r, "fake READ failed");
	}
	if (dst) {
		/* SNAP1: inside the write: begun counted, done not yet */
		f->begun_seen = atomic_load(v->begun);
		f->done_seen = atomic_load(v->done);
		assert_true((uint8_t *)dst >= v->block + COORD_VAR_DATA_OFF);
		assert_true((uint8_t *)dst + src->len <= v->block + v->block_len - 8);
		memcpy(dst, (const void *)(uintptr_t)src->addr, src->len);
		return 0;
	}
	assert_true(src->len <= sizeof(f->buf));
	memcpy(f->buf, (const void *)(uintptr_t)src->addr, src->len);
	*out = f->buf;
	return 0;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct coord_srv_io io = { .send = io_send };
	uint64_t dims[1] = { N };
	struct coord_error err = { 0 };

	assert_non_null(f);
	io.ctx = f;
	unsetenv("COORD_CLUSTER_KEY");
	unsetenv("COORD_CLUSTER_KEY_FILE");
	coord_server_opts_init(&f->o);
	f->o.task = 0;
	assert_int_equal(coord_varstore_create(NULL, &f->vs, &err), 0);
	assert_int_equal(coord_varstore_var_create(f->vs, "w", 1, dims, NULL, &f->id, &err), 0);
	assert_int_equal(coord_srv_init(&f->s, &f->o, COORD_ROLE_PS, f->vs, &err), 0);
	f->s.fetch = fake_fetch;
	coord_srv_conn_init(&f->k, &f->s, &io);
	assert_int_equal(coord_srv_conn_start(&f->k, 0, "", &err), 0);
	F = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	coord_srv_conn_drop_ps(&f->k);
	coord_srv_conn_fini(&f->k);
	coord_srv_fini(&f->s);
	coord_varstore_destroy(f->vs);
	free(f);
	return 0;
}

/* Serve one VAR_REQ of @op on the variable: @n floats at @off, data @d
 * (@dlen bytes); @seq != 0: keyed.  Returns the reply's code. */
static int serve(struct fix *f, uint16_t op, uint64_t off, uint64_t n, const void *d, uint32_t dlen,
		 uint32_t seq, uint32_t tag)
{
	uint8_t *b = malloc(dlen + 512);
	struct coord_wire_writer w;
	struct coord_wire_vreq q = { .rid = 1,
				     .op = op,
				     .var = f->id,
				     .tag = tag,
				     .off = off,
				     .n = n,
				     .len = dlen,
				     .data = d,
				     .session = seq ? 0x5e55 : 0,
				     .closure = seq ? 42 : 0,
				     .seq = seq };
	struct coord_wire_hdr h;
	unsigned before = f->replies;

	assert_non_null(b);
	coord_wire_writer_init(&w, b, dlen + 512);
	coord_wire_begin(&w, COORD_WIRE_VAR_REQ);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	coord_wire_end(&w);
	assert_int_equal(coord_wire_parse_hdr(b, w.len, 1u << 20, &h), 0);
	assert_int_equal(coord_srv_conn_frame(&f->k, &h, b + COORD_WIRE_HDR), 0);
	free(b);
	assert_int_equal(f->replies, before + 1);
	return f->code;
}

static int rdv(struct fix *f, uint16_t op, uint64_t off, uint64_t n, const float *src, uint64_t len,
	       uint32_t seq)
{
	struct coord_ps_rsrc d = { .addr = (uintptr_t)src, .len = len, .rkey = 1 };
	uint8_t desc[COORD_PS_RSRC_LEN];

	coord_ps_rsrc_put(desc, &d);
	return serve(f, op, off, n, desc, sizeof(desc), seq, coord_varstore_tag(f->vs));
}

static void read_all(struct fix *f, float *out)
{
	assert_int_equal(coord_vs_read(f->vs, f->id, 0, N, out, NULL), 0);
}

static void test_rdv_checked(void **state)
{
	struct fix *f = *state;
	static float src[N], got[N], zero[N];
	struct coord_ps_rsrc d = { .addr = (uintptr_t)src, .len = 400, .rkey = 1 };
	uint8_t desc[COORD_PS_RSRC_LEN];

	for (int i = 0; i < N; i++)
		src[i] = (float)i;
	/* a length that is not 4 n */
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_RDV, 0, 100, src, 404, 0), COORD_EINVAL);
	assert_non_null(strstr(f->msg, "declared"));
	/* a short descriptor */
	coord_ps_rsrc_put(desc, &d);
	assert_int_equal(
		serve(f, COORD_PS_ASSIGN_RDV, 0, 100, desc, 20, 0, coord_varstore_tag(f->vs)),
		COORD_EINVAL);
	assert_non_null(strstr(f->msg, "descriptor"));
	/* the reserved word */
	desc[20] = 1;
	assert_int_equal(serve(f, COORD_PS_ASSIGN_ADD_RDV, 0, 100, desc, sizeof(desc), 0,
			       coord_varstore_tag(f->vs)),
			 COORD_EINVAL);
	/* outside the variable: checked before the fetch */
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_RDV, N - 50, 100, src, 400, 0), -EINVAL);
	assert_non_null(strstr(f->msg, "outside"));
	/* a stale handle */
	coord_ps_rsrc_put(desc, &d);
	assert_int_equal(serve(f, COORD_PS_ASSIGN_RDV, 0, 100, desc, sizeof(desc), 0,
			       coord_varstore_tag(f->vs) ^ 1),
			 COORD_ESTALE);
	/* a ps that cannot fetch (tcp) */
	f->s.fetch = NULL;
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_RDV, 0, 100, src, 400, 0), COORD_EINVAL);
	assert_non_null(strstr(f->msg, "rdma"));
	f->s.fetch = fake_fetch;
	assert_int_equal(f->fetches, 0);
	read_all(f, got);
	assert_memory_equal(got, zero, sizeof(got));
}

static void test_rdv_assign_and_add(void **state)
{
	struct fix *f = *state;
	static float src[N], want[N], got[N];
	struct coord_var *v = coord_vs_get(f->vs, f->id);

	for (int i = 0; i < N; i++)
		src[i] = (float)i * 0.5f;
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_RDV, 0, N, src, 4 * N, 0), 0);
	assert_int_equal(f->fetches, 1);
	/* the fetch ran inside the write (SNAP1), straight into the variable */
	assert_true(f->begun_seen == f->done_seen + 1);
	assert_true(atomic_load(v->begun) == atomic_load(v->done));
	memcpy(want, src, sizeof(want));
	read_all(f, got);
	assert_memory_equal(got, want, sizeof(got));

	/* assign_add of 1000 floats at 77: into the hook's buffer, then added */
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 77, 1000, src, 4000, 0), 0);
	assert_int_equal(f->fetches, 2);
	for (int i = 0; i < 1000; i++)
		want[77 + i] += src[i];
	read_all(f, got);
	assert_memory_equal(got, want, sizeof(got));
}

static void test_rdv_once(void **state)
{
	struct fix *f = *state;
	static float one[N], got[N];

	for (int i = 0; i < N; i++)
		one[i] = 1.0f;
	/* keyed assign_add: applied once; the same key again: done, no fetch */
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 0, N, one, 4 * N, 1), 0);
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 0, N, one, 4 * N, 1), 0);
	assert_int_equal(f->fetches, 1);
	read_all(f, got);
	for (int i = 0; i < N; i++)
		assert_true(got[i] == 1.0f);
	/* a failed fetch fails the request and is not recorded: the re-run applies it */
	f->fail = COORD_EUNAVAILABLE;
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 0, N, one, 4 * N, 2), COORD_EUNAVAILABLE);
	assert_non_null(strstr(f->msg, "fake READ failed"));
	read_all(f, got);
	for (int i = 0; i < N; i++)
		assert_true(got[i] == 1.0f);
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 0, N, one, 4 * N, 2), 0);
	assert_int_equal(rdv(f, COORD_PS_ASSIGN_ADD_RDV, 0, N, one, 4 * N, 2), 0);
	assert_int_equal(f->fetches, 3);
	read_all(f, got);
	for (int i = 0; i < N; i++)
		assert_true(got[i] == 2.0f);
	/* a keyed plain (two-sided) re-run of a rendezvous update is the same
	 * update (the fingerprint is the plain op's): done */
	assert_int_equal(
		serve(f, COORD_PS_ASSIGN_ADD, 0, N, one, 4 * N, 2, coord_varstore_tag(f->vs)), 0);
	read_all(f, got);
	for (int i = 0; i < N; i++)
		assert_true(got[i] == 2.0f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rdv_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rdv_assign_and_add, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rdv_once, setup, teardown),
	};

	return cmocka_run_group_tests_name("ps_rdv", tests, NULL, NULL);
}
