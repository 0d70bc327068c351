// SPDX-License-Identifier: MIT
/*
 * transport/server/srv_var.c - the ps side of the protocol engine
 * (srv_proto.c): VAR_REQ frames run on the ps's store, their results in
 * VAR_RES frames, and Give-up's VAR_SYNC.
 *
 * A READ's result of COORD_PS_STREAM_MIN or more goes, over a transport
 * that can (tcp, struct coord_srv_io @stream), from the variable's own
 * memory while the READ holds its stripes (stream_vres(): the kernel's
 * copy and no other); the transport sends what the socket takes within a
 * bounded time (2 ms + 1 ms a MiB: tcp_server.c) and copies the rest, so
 * the stripes never wait longer for the peer.
 *
 * Give-up (wire.h VAR_SYNC; the client's side: transport/psclient/ps_conn.c
 * "Give-up"; the bookkeeping of both ends, one copy: transport/wire/giveup.c).
 * A ps never applies a request after its sender has given up on it, so a
 * closure run again after a ps timeout never doubles an update; over tcp
 * and over rdma alike (the engine serves both).
 * Every frame a ps connection sends that the client counts (each VAR_RES
 * frame, each PONG that echoes a VAR_SYNC) has a number, 1, 2, ...; frame 0
 * is the handshake.  The connection keeps marks (n, t): frame n was about
 * to be sent at t on our clock (a mark at most every window / 32, the last
 * COORD_GU_MARKS of them, and the accept for frame 0).  A VAR_SYNC
 * names @seen, the frames its client had counted when it wrote it; the
 * newest mark at or before @seen gives ref, a time no later than the
 * moment frame @seen left here (and none: ref 0).  A VAR_REQ record is
 * applied only if it starts less than window - window / 16 after ref, on
 * our clock; else it is answered COORD_ETIMEDOUT, not applied.  The client
 * gives up on a request only when window has passed since it received
 * frame @seen of the last VAR_SYNC before the request (ps_conn.c), so an
 * applied request always started before its sender could have given up.
 * Both sides measure durations on their own clock: no two clocks are
 * compared, and only their rates must agree (within 1/16 over a window).
 * What Give-up cannot tell, an update applied whose reply was lost, the
 * closure's key handles (runtime/ps/ps_once.c): a record with one goes
 * through coord_ps_apply_once() after the check above.
 *
 * Synchronization: srv_proto.h (a connection driven by one thread at a
 * time); hb_ms is written relaxed by the connection's thread and read by
 * the keepalive (tcp_pool.c P5, rdma_server.c Q3), a hint.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "transport/server/srv_pvt.h"

int coord_srv_on_sync(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
		      const uint8_t *payload)
{
	struct coord_wire_sync q;
	uint8_t b[COORD_WIRE_HDR + 8];
	struct coord_wire_writer w;
	int r = coord_wire_get_sync(h, payload, &q);

	if (r == 0)
		r = coord_gu_srv_sync(&k->sync, &q);
	if (r < 0)
		return r;
	if (q.hb_ms >= 1 && q.hb_ms <= 3600000)
		/* Relaxed (P5): a hint for the watchdog's keepalive. */
		atomic_store_explicit(&k->hb_ms, q.hb_ms, memory_order_relaxed);
	if (!q.seq)
		return 0;
	coord_wire_writer_init(&w, b, sizeof(b));
	coord_wire_put_ping(&w, COORD_WIRE_PONG, q.seq);
	coord_gu_srv_sent(&k->sync);
	return k->io.send(k->io.ctx, b, w.len);
}

struct vres_sink {
	struct coord_srv_conn *k;
	uint64_t rid;
	int io;	       /* the connection failed while sending */
	bool streamed; /* the transport's stream is started: its end is owed */
};

static int emit_vres(void *arg, const void *p, size_t len)
{
	struct vres_sink *v = arg;
	struct coord_wire_vres res = { .rid = v->rid, .len = (uint32_t)len, .data = p };

	int r;

	if (len > v->k->s->o->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return COORD_EINVAL;
	r = coord_srv_add_record(v->k, NULL, &res);
	if (r < 0)
		v->io = r;
	return r;
}

/* struct coord_ps_scratch @room: the place a VAR_RES record's @len data
 * bytes will take in the frame being built (made room for), so a READ or
 * GATHER writes its result there and emit_vres() adds only the record's
 * header before it; NULL (the op copies as before) when it cannot be. */
static void *room_vres(void *arg, size_t len)
{
	struct vres_sink *v = arg;
	struct coord_srv_conn *k = v->k;
	size_t need = COORD_WIRE_VRES_FIXED + len;

	if (len > k->s->o->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return NULL;
	if (k->w.frame == SIZE_MAX || k->w.cap - k->w.len < need) {
		int r = coord_srv_flush_grow(k, COORD_WIRE_HDR + need);

		if (r < 0) {
			v->io = r;
			return NULL;
		}
		if (k->w.cap - k->w.len < need)
			return NULL;
	}
	return k->w.buf + k->w.len + COORD_WIRE_VRES_FIXED;
}

/*
 * struct coord_ps_scratch @stream: a READ's result of @len bytes sent from
 * @p, its variable's memory, under the READ's stripes, in a VAR_RES frame
 * of its own (coord_srv_on_var_req() sent what was built before).  The
 * transport's stream_end, after the stripes are let go, sends what it
 * could not at once.
 */
static int stream_vres(void *arg, const void *p, size_t len, struct coord_error *err)
{
	struct vres_sink *v = arg;
	struct coord_srv_conn *k = v->k;
	struct coord_wire_vres res = { .rid = v->rid, .len = (uint32_t)len };
	int r;

	if (len > k->s->o->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return coord_seterr(err, COORD_EINVAL, "result too large for one frame");
	if (k->w.count || coord_wire_put_vres_head(&k->w, &res) < 0)
		return coord_seterr(err, COORD_EINVAL, "no room for a result's header");
	coord_wire_end_ext(&k->w, len);
	coord_gu_srv_sent(&k->sync); /* Give-up: this frame is counted */
	r = k->io.stream(k->io.ctx, k->out, k->w.len, p, len);
	if (r == -ENOMEM) {	/* nothing sent: not counted, the frame unmade */
		k->sync.sent--; /* a mark it made stays: earlier than the frame, safe */
		coord_srv_frame_reset(k);
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	v->streamed = true;
	if (r < 0) {
		v->io = r;
		return coord_seterr(err, COORD_EUNAVAILABLE, "connection failed");
	}
	return 0;
}

/* MAP (ps.h): the transport registers the variable for remote reads. */
static int on_map(struct coord_srv_conn *k, const struct coord_ps_op *op, struct vres_sink *v,
		  struct coord_error *err)
{
	struct coord_ps_map m;
	uint8_t b[COORD_PS_MAP_LEN];
	int r;

	if (!k->s->map_var || !k->s->vs)
		return coord_seterr(err, COORD_EINVAL,
				    "map: remote reads need a ps served over rdma");
	r = k->s->map_var(k, op->id, &m, err);
	if (r < 0)
		return r;
	coord_ps_map_put(b, &m);
	return emit_vres(v, b, sizeof(b));
}

/* A rendezvous update's fetch (struct coord_ps_op @fetch): the transport's,
 * for the descriptor the request carried. */
struct rdv {
	struct coord_srv_conn *k;
	struct coord_ps_rsrc src;
};

static int rdv_fetch(void *arg, uint32_t id, void *dst, size_t len, const void **out,
		     struct coord_error *err)
{
	struct rdv *d = arg;

	if (len != d->src.len) /* coord_ps_apply() asks for what src_len says */
		return coord_seterr(err, COORD_EINVAL,
				    "rendezvous update: %zu bytes asked, %llu "
				    "declared",
				    len, (unsigned long long)d->src.len);
	return d->k->s->fetch(d->k, &d->src, id, dst, out, err);
}

/*
 * ASSIGN_RDV / ASSIGN_ADD_RDV (ps.h): the ASSIGN or ASSIGN_ADD @op stands
 * for, its data to be fetched with @d, once the descriptor is checked: its
 * length exactly the 4 n bytes the op needs (the ps reads no more than that
 * from the sender), a transport that can fetch.  0 or COORD_EINVAL with @err.
 */
static int rdv_op(struct coord_srv_conn *k, const struct coord_wire_vreq *q, struct coord_ps_op *op,
		  struct rdv *d, struct coord_error *err)
{
	if (!k->s->fetch || !k->s->vs)
		return coord_seterr(err, COORD_EINVAL,
				    "rendezvous updates need a ps served over rdma");
	if (q->len != COORD_PS_RSRC_LEN)
		return coord_seterr(err, COORD_EINVAL,
				    "rendezvous update: a descriptor of %u bytes (not %u)", q->len,
				    COORD_PS_RSRC_LEN);
	coord_ps_rsrc_get(q->data, &d->src);
	if (d->src.reserved || q->n > COORD_VAR_MAX_ELEMS || d->src.len != 4 * q->n)
		return coord_seterr(err, COORD_EINVAL,
				    "rendezvous update: %llu bytes declared for %llu elements",
				    (unsigned long long)d->src.len, (unsigned long long)q->n);
	d->k = k;
	op->op = q->op == COORD_PS_ASSIGN_RDV ? COORD_PS_ASSIGN : COORD_PS_ASSIGN_ADD;
	op->src = NULL;
	op->src_len = (uint32_t)d->src.len; /* <= 4 x 2^28 - 4 */
	op->fetch = rdv_fetch;
	op->fetch_arg = d;
	return 0;
}

/* VAR_REQ: run each op on our store; one VAR_RES record each. */
int coord_srv_on_var_req(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
			 const uint8_t *payload)
{
	struct coord_wire_iter it;
	struct coord_wire_vreq q;
	unsigned task = k->s->o->task >= 0 ? (unsigned)k->s->o->task : (unsigned)k->env.worker;
	int r;

	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_vreq(&it, &q)) == 1) {
		struct coord_ps_op op = { .op = q.op,
					  .task = task,
					  .id = q.var,
					  .tag = q.tag,
					  .name = q.name,
					  .name_len = q.name_len,
					  .off = q.off,
					  .n = q.n,
					  .src = q.data,
					  .src_len = q.len,
					  .sess = q.session,
					  .closure = q.closure,
					  .seq = q.seq };
		struct vres_sink v = { .k = k, .rid = q.rid };
		struct coord_error err = { 0 };
		struct rdv d;
		int code = 0;

		k->scratch.room = room_vres;
		k->scratch.stream = NULL;
		if (q.op == COORD_PS_READ && k->io.stream &&
		    (uint64_t)4 * q.n >= COORD_PS_STREAM_MIN) {
			/* its result goes in a frame of its own (stream_vres()):
			 * what is built goes first, not under the stripes */
			r = coord_srv_flush(k);
			if (r < 0)
				return r;
			k->scratch.stream = stream_vres;
		}
		if (q.op == COORD_PS_ASSIGN_RDV || q.op == COORD_PS_ASSIGN_ADD_RDV)
			code = rdv_op(k, &q, &op, &d, &err);
		if (code == 0 && unlikely(coord_gu_srv_stale(&k->sync)))
			code = coord_seterr(&err, COORD_ETIMEDOUT,
					    "not applied: it reached ps task %u after its "
					    "sender's deadline",
					    task);
		/* A stale handle's id is not ours to map or unmap. */
		else if (code == 0 && k->s->vs)
			code = coord_ps_handle_check(k->s->vs, task, &op, &err);
		/* A rendezvous assign READs into the variable's registered block:
		 * registered now, before its stripes are held (rdma_server.c Q6). */
		if (code == 0 && op.fetch && op.op == COORD_PS_ASSIGN && k->s->map_var) {
			struct coord_error e2;
			struct coord_ps_map mm;

			(void)k->s->map_var(k, op.id, &mm, &e2); /* else fetch() registers */
		}
		if (code == 0 && q.op == COORD_PS_DELETE && k->s->unmap_var)
			k->s->unmap_var(k->s, q.var); /* no remote read of freed memory */
		if (code == 0)
			code = q.op == COORD_PS_MAP
				       ? on_map(k, &op, &v, &err)
				       : coord_ps_apply_once(k->s->once, k->s->vs, task, &op,
							     &k->scratch, emit_vres, &v, &err);

		if (v.streamed) { /* the rest of the result, the stripes let go */
			r = k->io.stream_end(k->io.ctx);
			coord_srv_frame_reset(k);
			if (r < 0 && !v.io)
				v.io = r;
		}
		if (v.io)
			return v.io; /* the connection itself failed */
		if (code < 0) {
			struct coord_wire_vres res = { .rid = q.rid, .code = code };
			const char *m = err.msg[0] ? err.msg : coord_strerror(code);

			if (code == COORD_EINVAL && !err.msg[0])
				m = "result too large for one frame";
			res.data = m;
			res.len = (uint32_t)strlen(m) + 1;
			r = coord_srv_add_record(k, NULL, &res);
			if (r < 0)
				return r;
		}
	}
	if (r < 0)
		return r;
	return coord_srv_flush(k);
}
