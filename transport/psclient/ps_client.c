// SPDX-License-Identifier: MIT
/*
 * transport/psclient/ps_client.c - the network side of parameter-server variables: a
 * coordinator's or a worker's connections to the ps tasks (runtime/ps/ps.h).
 * This file: the request path (queueing, sending, the pending table,
 * one-sided reads, running a batch) and the coordinator's ps table;
 * ps_conn.c: a connection's life (creating the client, dialling and
 * redialling, the reader thread, the heartbeat and Give-up, losing and
 * destroying it); ps_client_pvt.h: what the two share.
 *
 * One connection per ps task, opened on first use and again after a loss.
 * Callers append their requests to the connection's frame buffer under a
 * short mutex (a memcpy); the first caller that finds no send in progress
 * becomes the sender and writes everything queued, again and again until
 * the buffer is empty, so concurrent callers (the connection threads of a
 * coord-worker process, a batch from coord_ctx_var_batch()) share frames and
 * system calls (flat combining).  A request with PSC_EXT_MIN (256 KiB) or
 * more of data over tcp is not copied: its caller waits for a sender at
 * work to finish, queues the request's header in a frame of its own, and,
 * as the sender, writes it and the data from its own buffers with one
 * sendmsg (struct psc_ext), so the buffers are in use only while their
 * owner is inside flush().  Each request takes a slot of the pending
 * table; its rid = (slot generation << 32) | slot index, so a reply that
 * names no pending request (a confused or hostile ps) is detected, never
 * followed.  A reader thread per connection takes the VAR_RES frames, copies
 * each result into its caller's buffer (a frame of PSC_RX_DIRECT_MIN or more over
 * tcp: received straight into it, ps_conn.c read_direct()) and, when the
 * last op of a caller's batch is done, wakes it on a futex.  A lost connection fails its pending
 * requests with COORD_EUNAVAILABLE.
 *
 * Over rdma (coord_psc_use_rdma(): the coordinator or worker itself runs
 * over rdma, and so do the ps tasks) a connection is a frame channel
 * (ps_rdma.h) in place of the socket, and a READ goes one-sided when it
 * can: the variable is mapped once per connection (a MAP op, answered with
 * its address and rkeys), then read with RDMA READs that the ps CPU takes no
 * part in (runtime/store/varstore.c SNAP1-SNAP3: a snapshot between two writes, or a
 * retry; after COORD_PSR_TRIES, or on any failure, the READ goes two-sided
 * as before; over COORD_PSR_READ_MAX bytes, straight into the caller's
 * buffer, ps_rdma.c P4).  An assign or assign_add of COORD_PSR_PUT_MIN (64 KiB)
 * or more goes rendezvous (ps_rdma.c P5): its caller registers the data
 * (rdv_register(), before k->lock is taken), the request carries only
 * where it is (ps.h ASSIGN_RDV), the ps RDMA READs it, and the caller
 * deregisters it once the request is answered or withdrawn (coord_psc_run());
 * a buffer that cannot be registered goes in frames as before.  use_lock
 * keeps the socket or channel open under a sender, a one-sided reader or a
 * registration while conn_up() closes or replaces a lost one.
 *
 * Why a mutex here when the closure path has none: a variable op is a round
 * trip to another process (tens of microseconds); the mutex covers a copy
 * into the frame buffer and the pending table, never a blocking system
 * call (the reader's ping is a send with MSG_DONTWAIT, or over rdma a
 * post of what credits allow now).
 *
 * Synchronization: who writes each shared field, who reads it, and what
 * orders the two.  Callers are any threads in coord_psc_run(); the reader
 * is a connection's reader thread (ps_conn.c reader_main()).  struct
 * coord_psc, k->fd, k->r, k->gen and the reader's own fields: ps_conn.c's
 * table.
 *   field            written by (how)                read by (how)           order
 *   k->up, flushing, callers, the reader,            the same                k->lock
 *   open, out/spare, conn_up() (under k->lock)
 *   w (the writer),
 *   slots[], freel,
 *   nfree, why,
 *   maps, nmaps,
 *   ext, next,
 *   idle_waiters,
 *   gu (Give-up's
 *   count),
 *   slots[].busy
 *   w->left          the caller (relaxed: init,      the caller (acquire     slot_done()'s
 *                    and - for ops never queued);    load; futex wait)       release -> the
 *                    slot_done() (release -, under                           caller's acquire:
 *                    k->lock, reader or caller)                              the op's result
 *   w->has_err,      wait_error() (acq_rel CAS; the  the caller (acquire),   the CAS, then
 *   *w->err          winner writes the message)      after left reads 0      left's release ->
 *                                                                            acquire
 *   op->code, dst,   on_result() (the reader, under  the caller, after left  as w->left
 *   dst_len, fate    k->lock; *dst outside it while  reads 0
 *                    the slot is busy, read_direct());
 *                    fail_pending();
 *                    the caller (before queueing,
 *                    one-sided, or a withdrawal
 *                    under k->lock)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "runtime/util/futex.h"
#include "runtime/core/dispatch.h"
#include "transport/wire/sock.h"
#include "transport/psclient/ps_client_pvt.h"

#define PSC_SPIN_NS 20000ull
#define SLOT_DONE (UINT32_MAX - 1) /* coord_psc_run(): done one-sided, not queued */

/* ---- completing requests (under k->lock) ---------------------------------------- */

void wait_error(struct psc_wait *w, int code, const char *msg, size_t len)
{
	int no = 0;

	/* Acq_rel CAS: one writer of the message; the waiter reads it after
	 * left reaches 0 (release below, acquire in the waiter). */
	if (w->err && atomic_compare_exchange_strong_explicit(
			      &w->has_err, &no, 1, memory_order_acq_rel, memory_order_relaxed))
		coord_seterr(w->err, code, "%.*s", (int)(len < 200 ? len : 200), msg);
}

void slot_done(struct psc_conn *k, uint32_t idx)
{
	struct psc_wait *w = k->slots[idx].w;

	k->slots[idx].w = NULL;
	k->slots[idx].op = NULL;
	k->slots[idx].gen++;
	k->freel[k->nfree++] = idx;
	/* Release: the op's result and the error message happen-before the
	 * waiter's acquire load of 0.  The wake is issued under k->lock, and
	 * a waiter that gives up takes k->lock first, so w is still there. */
	if (atomic_fetch_sub_explicit(&w->left, 1, memory_order_release) == 1)
		coord_futex_wake_all(&w->left);
}

void fail_pending(struct psc_conn *k, int code, const char *why)
{
	for (uint32_t i = 0; i < k->nslots; i++) {
		struct psc_slot *s = &k->slots[i];

		if (!s->w || s->busy) /* busy: the reader completes it */
			continue;
		s->op->code = code;
		wait_error(s->w, code, why, strlen(why));
		slot_done(k, i);
	}
}

/* ---- queueing and sending (under k->lock) ------------------------------------------ */

static int slot_get(struct psc_conn *k, uint32_t *idx)
{
	if (k->nfree == 0) {
		uint32_t n = k->nslots ? 2 * k->nslots : 64;
		struct psc_slot *s = realloc(k->slots, n * sizeof(*s));
		uint32_t *f;

		if (!s)
			return COORD_ENOMEM;
		k->slots = s;
		f = realloc(k->freel, n * sizeof(*f));
		if (!f)
			return COORD_ENOMEM;
		k->freel = f;
		for (uint32_t i = n; i-- > k->nslots;) {
			memset(&k->slots[i], 0, sizeof(k->slots[i]));
			k->freel[k->nfree++] = i;
		}
		k->nslots = n;
	}
	*idx = k->freel[--k->nfree];
	return 0;
}

/* Make room for @need more bytes (a header included) in the frame buffer. */
int out_room(struct psc_conn *k, size_t need)
{
	size_t cap = k->outcap;
	uint8_t *b;

	if (k->w.len + need <= k->outcap)
		return 0;
	while (cap < k->w.len + need)
		cap *= 2;
	b = realloc(k->out, cap);
	if (!b)
		return COORD_ENOMEM;
	k->out = b;
	k->outcap = cap;
	k->w.buf = b;
	k->w.cap = cap;
	return 0;
}
/*
 * Queue @op (its reply to @w, its slot in *@slot).  @ext_ok: the caller
 * sends what it queues itself, now (no sender at work): a large request's
 * data then stays in its buffers (struct psc_ext), in a frame of its own.
 */
static int queue_op(struct psc_conn *k, struct coord_ps_op *op, struct psc_wait *w, uint32_t *slot,
		    bool ext_ok, const struct psc_rdv *rdv)
{
	struct coord_wire_vreq q = { .op = op->op,
				     .name_len = op->name_len,
				     .var = op->id,
				     .tag = op->tag,
				     .off = op->off,
				     .n = op->n,
				     .len = op->src_len + op->src2_len,
				     .name = op->name,
				     .data = op->src,
				     .data2 = op->src2,
				     .len2 = op->src2_len,
				     .session = op->sess,
				     .closure = op->closure,
				     .seq = op->seq };
	uint8_t desc[COORD_PS_RSRC_LEN];
	size_t need;
	bool ext = ext_ok && !k->p->rdma && q.len >= PSC_EXT_MIN && k->next < PSC_EXT_MAX;
	uint32_t idx;
	int r;

	if (rdv && rdv->mr) { /* rendezvous (ps_rdma.c P5): where the data is, not the data */
		q.op = op->op == COORD_PS_ASSIGN ? COORD_PS_ASSIGN_RDV : COORD_PS_ASSIGN_ADD_RDV;
		coord_ps_rsrc_put(desc, &rdv->d);
		q.data = desc;
		q.len = sizeof(desc);
		q.data2 = NULL;
		q.len2 = 0;
		ext = false;
	}
	need = coord_wire_vreq_size(&q);
	/* The request, and a read's reply, must each fit in one frame. */
	if ((uint64_t)op->src_len + op->src2_len > UINT32_MAX ||
	    need > k->p->max_frame - COORD_WIRE_HDR ||
	    op->cap > k->p->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return COORD_EINVAL;
	if (k->open && k->w.len - k->w.frame + need > k->p->max_frame) {
		coord_wire_end(&k->w); /* this frame is full: start another */
		k->open = false;
	}
	r = out_room(k, (ext ? need - q.len : need) + COORD_WIRE_HDR);
	if (r < 0)
		return r;
	r = slot_get(k, &idx);
	if (r < 0)
		return r;
	q.rid = ((uint64_t)k->slots[idx].gen << 32) | idx;
	if (ext) { /* room was made above, for a frame of its own */
		if (k->open)
			coord_wire_end(&k->w);
		coord_wire_begin(&k->w, COORD_WIRE_VAR_REQ);
		(void)coord_wire_put_vreq_head(&k->w, &q);
		k->ext[k->next++] = (struct psc_ext){ .off = k->w.len,
						      .p1 = op->src,
						      .l1 = op->src_len,
						      .p2 = op->src2,
						      .l2 = op->src2_len };
		coord_wire_end_ext(&k->w, q.len);
		k->open = false;
	} else {
		if (!k->open) {
			coord_wire_begin(&k->w, COORD_WIRE_VAR_REQ);
			k->open = true;
		}
		(void)coord_wire_put_vreq(&k->w, &q); /* room was made above */
	}
	k->slots[idx].w = w;
	k->slots[idx].op = op;
	op->fate = COORD_PS_SENT; /* from now its outcome is the ps's */
	*slot = idx;
	return 0;
}

/* Write @len bytes of @b over tcp, the data of its @next large requests
 * (@ext) from their callers' buffers in between (writev). */
static int send_ext(int fd, const uint8_t *b, size_t len, const struct psc_ext *ext, unsigned next)
{
	struct iovec iov[3 * PSC_EXT_MAX + 1];
	unsigned n = 0;
	size_t at = 0;

	for (unsigned i = 0; i < next; i++) {
		iov[n++] = (struct iovec){ (void *)(b + at), ext[i].off - at };
		if (ext[i].l1)
			iov[n++] = (struct iovec){ (void *)ext[i].p1, ext[i].l1 };
		if (ext[i].l2)
			iov[n++] = (struct iovec){ (void *)ext[i].p2, ext[i].l2 };
		at = ext[i].off;
	}
	if (at < len)
		iov[n++] = (struct iovec){ (void *)(b + at), len - at };
	return coord_sock_sendv_all(fd, iov, n);
}

/* Become the sender if nobody is: write until nothing is queued. */
static void flush(struct psc_conn *k)
{
	struct psc_ext ext[PSC_EXT_MAX];

	if (k->flushing)
		return;
	k->flushing = true;
	while (k->up && k->w.len > 0) {
		uint8_t *b = k->out;
		size_t len, cap = k->outcap;
		uint32_t gen = k->gen; /* the connection these bytes are for */
		unsigned next = k->next;
		int r;

		if (k->open)
			coord_wire_end(&k->w);
		k->open = false;
		memcpy(ext, k->ext, next * sizeof(*ext));
		k->next = 0;
		len = k->w.len;
		k->out = k->spare;
		k->outcap = k->sparecap;
		k->spare = b;
		k->sparecap = cap;
		coord_wire_writer_init(&k->w, k->out, k->outcap);
		pthread_mutex_unlock(&k->lock);
		/* use_lock: the fd or channel is not closed or replaced while
		 * we send; gen: it is still the connection of these bytes
		 * (never the next one: its requests were failed). */
		pthread_rwlock_rdlock(&k->use_lock);
		if (k->gen != gen)
			r = -EPIPE;
		else if (k->p->rdma)
			r = k->r ? coord_psr_send(k->r, b, len) : -EPIPE;
		else if (next)
			r = send_ext(k->fd, b, len, ext, next);
		else
			r = coord_sock_send_all(k->fd, b, len);
		pthread_rwlock_unlock(&k->use_lock);
		pthread_mutex_lock(&k->lock);
		if (r < 0 && k->gen == gen)
			conn_down(k, "send failed");
	}
	k->flushing = false;
	if (k->idle_waiters)
		pthread_cond_broadcast(&k->idle);
}

/* ---- one-sided reads (rdma) ---------------------------------------------------------- */

/* Remember @id's map on @k (under k->lock), unless the connection changed. */
static void map_store(struct psc_conn *k, uint32_t id, uint32_t tag, uint32_t gen, uint8_t state,
		      const struct coord_ps_map *m)
{
	if (k->gen != gen)
		return; /* replaced meanwhile: its maps are of another ps */
	if (id >= k->nmaps) {
		uint32_t n = k->nmaps ? k->nmaps : 16;
		struct psc_map *b;

		while (n <= id)
			n *= 2;
		b = realloc(k->maps, n * sizeof(*b));
		if (!b)
			return;
		memset(b + k->nmaps, 0, (n - k->nmaps) * sizeof(*b));
		k->maps = b;
		k->nmaps = n;
	}
	k->maps[id].state = state;
	k->maps[id].tag = tag;
	if (m)
		k->maps[id].m = *m;
}

/*
 * Try the READ @op one-sided (rdma): map its variable if this connection
 * has not yet, then RDMA READ a snapshot (runtime/store/varstore.c SNAP2).  True if
 * @op is done (result in place, code 0); false: send it two-sided, which
 * also reports any error properly.
 */
static bool read_one_sided(struct coord_psc *p, struct coord_ps_op *op)
{
	struct psc_conn *k = &p->conns[op->task];
	struct coord_ps_map m;
	uint8_t state = MAP_NONE;
	unsigned tries = 0;
	uint32_t gen;
	int r;

	if (op->n > COORD_PSR_LARGE_MAX / sizeof(float) || op->n * sizeof(float) > op->cap ||
	    conn_up(k, NULL) < 0)
		return false;
	pthread_mutex_lock(&k->lock);
	gen = k->gen;
	if (op->id < k->nmaps && k->maps[op->id].tag == op->tag) {
		state = k->maps[op->id].state;
		m = k->maps[op->id].m;
	}
	pthread_mutex_unlock(&k->lock);
	if (state == MAP_NO)
		return false;
	if (state == MAP_NONE) {
		uint8_t b[COORD_PS_MAP_LEN];
		struct coord_ps_op mop = { .op = COORD_PS_MAP,
					   .task = op->task,
					   .id = op->id,
					   .tag = op->tag,
					   .dst = b,
					   .cap = sizeof(b) };

		r = coord_psc_run(p, &mop, 1, NULL);
		if (r == 0 && mop.dst_len == sizeof(b)) {
			coord_ps_map_get(b, &m);
			state = MAP_OK;
		} else if (r == COORD_EINVAL) {
			state = MAP_NO; /* this ps cannot map it: two-sided from now on */
		}
		pthread_mutex_lock(&k->lock);
		if (state != MAP_NONE)
			map_store(k, op->id, op->tag, gen, state, &m);
		pthread_mutex_unlock(&k->lock);
		if (state != MAP_OK)
			return false;
	}
	pthread_rwlock_rdlock(&k->use_lock);
	r = k->r ? coord_psr_read_var(k->r, &m, op->off, op->n, op->dst, &tries) : -EPIPE;
	pthread_rwlock_unlock(&k->use_lock);
	if (r != 0) {
		coord_log(COORD_LOG_DEBUG, "ps task %u: one-sided read of %u: %s after %u tries",
			  op->task, op->id, strerror(-r), tries);
		return false;
	}
	op->dst_len = op->n * sizeof(float);
	op->code = 0;
	return true;
}

/* ---- rendezvous updates (rdma) -------------------------------------------------------- */

/* Does @op go rendezvous over rdma (ps_rdma.c P5)? */
static bool rdv_wanted(const struct coord_ps_op *op)
{
	return (op->op == COORD_PS_ASSIGN || op->op == COORD_PS_ASSIGN_ADD) && op->src &&
	       !op->src2 && op->src_len >= COORD_PSR_PUT_MIN &&
	       op->src_len <= COORD_PSR_LARGE_MAX && op->src_len == 4 * op->n;
}

/* Register the data of @ops' rendezvous updates for ps task @t (outside
 * k->lock: ibv_reg_mr is slow); one that cannot be goes two-sided. */
static void rdv_register(struct psc_conn *k, unsigned t, struct coord_ps_op *ops, unsigned n,
			 const uint32_t *slot, struct psc_rdv *rdv)
{
	pthread_rwlock_rdlock(&k->use_lock); /* k->r stays */
	for (unsigned i = 0; k->r && i < n; i++) {
		int r;

		if (ops[i].task != t || slot[i] == SLOT_DONE || !rdv_wanted(&ops[i]) || rdv[i].mr)
			continue;
		r = coord_psr_put_reg(k->r, ops[i].src, ops[i].src_len, &rdv[i].mr, &rdv[i].d);
		if (r < 0)
			coord_log(COORD_LOG_DEBUG,
				  "ps task %u: cannot register %u bytes for a rendezvous update: "
				  "%s; sent in frames",
				  t, ops[i].src_len, strerror(-r));
	}
	pthread_rwlock_unlock(&k->use_lock);
}

/* ---- running a batch ------------------------------------------------------------------ */

/* rdma: READs one-sided where they can (no ps CPU); a delete through
 * us forgets its map (its registration goes with it). */
static void run_one_sided(struct coord_psc *p, struct coord_ps_op *ops, unsigned n, uint32_t *slot,
			  struct psc_wait *w)
{
	for (unsigned i = 0; p->rdma && i < n; i++) {
		if (ops[i].task >= p->nps)
			continue;
		if (ops[i].op == COORD_PS_DELETE) {
			struct psc_conn *k = &p->conns[ops[i].task];

			pthread_mutex_lock(&k->lock);
			if (ops[i].id < k->nmaps)
				k->maps[ops[i].id].state = MAP_NONE;
			pthread_mutex_unlock(&k->lock);
		}
		if (ops[i].op == COORD_PS_READ && read_one_sided(p, &ops[i])) {
			slot[i] = SLOT_DONE; /* done: nothing to send */
			/* Relaxed: our own counter, nobody waits on it yet. */
			atomic_fetch_sub_explicit(&w->left, 1, memory_order_relaxed);
		}
	}
}

/* Queue and send the ops of @ops for ps task @t that are still to go
 * (not done one-sided); an op that cannot go is answered with its error. */
static void send_to_task(struct coord_psc *p, unsigned t, struct coord_ps_op *ops, unsigned n,
			 uint32_t *slot, struct psc_wait *w, struct psc_rdv *rdv, bool late)
{
	struct psc_conn *k = &p->conns[t];
	bool any = false;
	struct coord_error e;
	int r;

	for (unsigned i = 0; i < n && !any; i++)
		any = ops[i].task == t && slot[i] != SLOT_DONE;
	if (!any)
		return;
	r = conn_up(k, &e);
	if (r == 0 && rdv)
		rdv_register(k, t, ops, n, slot, rdv);
	pthread_mutex_lock(&k->lock);
	/* Give-up (ps_conn.c): the last VAR_SYNC names a frame received long ago (a
	 * quarter window) while newer ones came, or these requests came back
	 * late (@late): name the newest before them, so the ps does not take
	 * them for given up. */
	if (r == 0 && k->up &&
	    (late ? k->gu.rx_count != k->gu.synced
		  : coord_gu_cli_due(&k->gu, &p->gc, coord_now_ns())) &&
	    put_sync(k, false) < 0)
		r = coord_seterr(&e, COORD_ENOMEM, "no memory for a variable operation");
	/* A large request is sent from its caller's buffers (struct psc_ext)
	 * by the caller itself: wait for a sender at work to finish. */
	for (unsigned i = 0; r == 0 && !p->rdma && i < n; i++) {
		if (ops[i].task != t || slot[i] == SLOT_DONE ||
		    (uint64_t)ops[i].src_len + ops[i].src2_len < PSC_EXT_MIN)
			continue;
		k->idle_waiters++;
		while (k->flushing)
			pthread_cond_wait(&k->idle, &k->lock);
		k->idle_waiters--;
		break;
	}
	for (unsigned i = 0; i < n; i++) {
		if (ops[i].task != t || slot[i] == SLOT_DONE)
			continue;
		if (r == 0 && !k->up)
			r = coord_seterr(&e, COORD_EUNAVAILABLE, "ps task %u (%s) unavailable: %s",
					 t, k->addr, k->why);
		if (r == 0) {
			int q = queue_op(k, &ops[i], w, &slot[i], !k->flushing,
					 rdv ? &rdv[i] : NULL);

			if (q == 0)
				continue;
			coord_seterr(&e, q,
				     q == COORD_EINVAL ? "variable operation larger than a frame "
							 "(max_frame): split it"
						       : "no memory for a variable operation");
			ops[i].code = q;
			wait_error(w, q, e.msg, strlen(e.msg));
		} else {
			ops[i].code = r;
			wait_error(w, r, e.msg, strlen(e.msg));
		}
		/* Relaxed: our own counter, nobody waits on it yet. */
		atomic_fetch_sub_explicit(&w->left, 1, memory_order_relaxed);
	}
	flush(k);
	pthread_mutex_unlock(&k->lock);
}

/* Wait for the replies: spin briefly, then sleep on the futex; at the
 * deadline, withdraw what is still pending. */
static void wait_replies(struct coord_psc *p, struct coord_ps_op *ops, unsigned n,
			 const uint32_t *slot, struct psc_wait *w, uint64_t deadline)
{
	uint64_t t0 = coord_now_ns();

	for (unsigned step = 0;; step++) {
		/* Acquire: pairs with the release in slot_done(): results are
		 * in place once left reads 0. */
		uint32_t v = atomic_load_explicit(&w->left, memory_order_acquire);

		if (v == 0)
			break;
		if (coord_now_ns() - t0 < PSC_SPIN_NS) {
			coord_spin_pause(step);
			continue;
		}
		if (coord_futex_wait(&w->left, v, deadline) == -ETIMEDOUT) {
			/* Withdraw what is still pending, under each lock, so
			 * no reader touches w after we return; a reply being
			 * received into its buffer (busy) is the reader's to
			 * complete: wait for it a little longer. */
			for (unsigned i = 0; i < n; i++) {
				struct psc_conn *k = &p->conns[ops[i].task];

				if (slot[i] == UINT32_MAX || slot[i] == SLOT_DONE)
					continue;
				pthread_mutex_lock(&k->lock);
				if (k->slots[slot[i]].w == w && k->slots[slot[i]].op == &ops[i] &&
				    k->slots[slot[i]].busy) {
					deadline = coord_now_ns() + 1000000u;
				} else if (k->slots[slot[i]].w == w &&
					   k->slots[slot[i]].op == &ops[i]) {
					ops[i].code = COORD_ETIMEDOUT;
					wait_error(w, COORD_ETIMEDOUT,
						   "no reply from the ps in time", 28);
					slot_done(k, slot[i]);
				}
				pthread_mutex_unlock(&k->lock);
			}
		}
	}
}

/*
 * Late: which ops of a round to send again - those the ps answered
 * COORD_ETIMEDOUT (srv_proto.c "Give-up": the request started on the ps a
 * window after the frame its VAR_SYNC named, so it was not applied) while
 * we had not given up on them: the ps was busy (a large rendezvous READ, a
 * large frame), not cut off.  Only while their timeout (@deadline) is at
 * least a window (@window) away: the copy sent again names a frame received
 * by now, and Give-up holds only if we give up on it no sooner than a
 * window after that (tests/test_giveup.c found the copy that kept less).
 * Those get code 1 (not answered) and fate UNSENT again and are counted in
 * *@w; the others' slots become SLOT_DONE (nothing to send).  Return: how
 * many go again.
 */
static unsigned late_again(struct coord_ps_op *ops, unsigned n, uint32_t *slot, uint64_t deadline,
			   uint64_t window, struct psc_wait *w, struct coord_error *err)
{
	unsigned again = 0;
	bool failed = false;

	if (!window || coord_now_ns() + window > deadline)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		if (ops[i].fate == COORD_PS_ANSWERED && ops[i].code == COORD_ETIMEDOUT) {
			ops[i].code = 1;
			ops[i].fate = COORD_PS_UNSENT;
			slot[i] = UINT32_MAX;
			again++;
		} else {
			failed |= ops[i].code < 0;
			slot[i] = SLOT_DONE;
		}
	}
	/* An error of an op not sent again keeps its message.  Relaxed, both:
	 * the last round is over (every slot done or withdrawn under its
	 * lock), nobody else sees w before the ops are queued (under lock). */
	w->err = failed ? NULL : err;
	atomic_store_explicit(&w->has_err, 0, memory_order_relaxed);
	atomic_store_explicit(&w->left, again, memory_order_relaxed);
	return again;
}

int coord_psc_run(struct coord_psc *p, struct coord_ps_op *ops, unsigned n, struct coord_error *err)
{
	struct psc_wait w = { .err = err };
	uint32_t small[16], *slot = small;
	struct psc_rdv small_rdv[16], *rdv = NULL;
	uint64_t deadline = coord_deadline((int64_t)p->op_timeout_ms * 1000000);
	int first = 0;
	bool said;

	if (n > 16 && !(slot = malloc(n * sizeof(*slot))))
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	for (unsigned i = 0; p->rdma && i < n && !rdv; i++)
		if (rdv_wanted(&ops[i])) /* only then: the small ops' batches pay nothing */
			rdv = n <= 16 ? small_rdv : malloc(n * sizeof(*rdv));
	if (rdv)
		memset(rdv, 0, n * sizeof(*rdv)); /* (no memory: all two-sided) */
	/* Relaxed: nobody else sees w before the ops are queued (under lock). */
	atomic_store_explicit(&w.left, n, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		ops[i].code = 1; /* not answered */
		ops[i].fate = COORD_PS_UNSENT;
		ops[i].dst_len = 0;
		slot[i] = UINT32_MAX;
	}
	run_one_sided(p, ops, n, slot, &w);
	for (unsigned t = 0; t < p->nps; t++)
		send_to_task(p, t, ops, n, slot, &w, rdv, false);
	wait_replies(p, ops, n, slot, &w, deadline);
	/* Acquire: pairs with wait_error()'s CAS (a round's message is in *err). */
	said = atomic_load_explicit(&w.has_err, memory_order_acquire);
	/* Late: bounded by the ops' own deadline; each round waits for the ps. */
	while (late_again(ops, n, slot, deadline, p->gc.window_ns, &w, err)) {
		for (unsigned t = 0; t < p->nps; t++)
			send_to_task(p, t, ops, n, slot, &w, rdv, true);
		wait_replies(p, ops, n, slot, &w, deadline);
		/* Acquire: as above. */
		said |= atomic_load_explicit(&w.has_err, memory_order_acquire);
	}
	/* P5: answered or withdrawn: the ps reads them no more */
	for (unsigned i = 0; rdv && i < n; i++)
		coord_psr_put_done(rdv[i].mr);
	if (rdv && rdv != small_rdv)
		free(rdv);
	if (slot != small)
		free(slot);
	for (unsigned i = 0; i < n && !first; i++)
		if (ops[i].code < 0)
			first = ops[i].code;
	if (first && err && !said)
		coord_seterr(err, first, "%s", coord_strerror(first));
	if (first && err)
		err->code = first;
	return first;
}

/* ---- the coordinator's own calls: an unknown outcome sent again ---------------------- */

/* Is the outcome of @op still unknown: a keyed update sent and not answered,
 * or answered COORD_ETIMEDOUT (the ps gave this copy up, not an earlier)? */
static bool unknown(const struct coord_ps_op *op)
{
	return op->seq && op->code < 0 &&
	       (op->fate == COORD_PS_SENT ||
		(op->fate == COORD_PS_ANSWERED && op->code == COORD_ETIMEDOUT));
}

/* Did the last dial of @k find nothing listening (the ps process gone)? */
static bool gone(struct psc_conn *k)
{
	bool r;

	pthread_mutex_lock(&k->conn_lock);
	r = k->refused;
	pthread_mutex_unlock(&k->conn_lock);
	return r;
}

/*
 * Send @op (unknown) again under its key until the ps answers it or @until:
 * the ps answers "done" if it applied an earlier copy (runtime/ps/ps_once.c
 * O1), else applies it now.  A try that did not reach the ps (its
 * connection not up again yet, ps_conn.c conn_up()) or got no answer waits
 * a ping interval; one refused (the ps process is gone, and with it what it
 * applied: a new one has other handles, COORD_ESTALE) ends the tries.  True
 * if the outcome is known now (@op's code says it).
 */
static bool send_again(struct coord_psc *p, struct coord_ps_op *op, uint64_t until)
{
	uint64_t gap = p->gc.ping_ns ? p->gc.ping_ns : 100000000u;

	for (unsigned tries = 0; tries == 0 || coord_now_ns() < until; tries++) {
		struct coord_ps_op q = *op;
		struct coord_error e;

		if (tries) {
			uint64_t now = coord_now_ns(), d = until > now ? until - now : 0;

			d = d < gap ? d : gap;
			nanosleep(&(struct timespec){ .tv_sec = (time_t)(d / 1000000000u),
						      .tv_nsec = (long)(d % 1000000000u) },
				  NULL);
		}
		(void)coord_psc_run(p, &q, 1, &e);
		if (q.fate == COORD_PS_UNSENT && gone(&p->conns[op->task]))
			return false;
		if (q.fate == COORD_PS_UNSENT)
			continue; /* the earlier copy's outcome is still unknown */
		op->fate = q.fate;
		op->code = q.code;
		if (!unknown(&q))
			return true;
	}
	return false;
}

int coord_psc_run_sure(struct coord_psc *p, struct coord_ps_op *ops, unsigned n,
		       struct coord_error *err)
{
	uint64_t until = coord_deadline((int64_t)p->op_timeout_ms * 1000000);
	unsigned lost = 0, task = 0;
	int r = coord_psc_run(p, ops, n, err), first = 0;

	for (unsigned i = 0; i < n; i++)
		if (unknown(&ops[i]) && !send_again(p, &ops[i], until) && !lost++)
			task = ops[i].task;
	if (!lost && r == 0)
		return 0;
	for (unsigned i = 0; i < n && !first; i++)
		if (ops[i].code < 0)
			first = ops[i].code;
	if (lost)
		return coord_seterr(
			err, first,
			"%u update(s), the first on ps task %u (%.64s), may or may not have been "
			"applied: sent, no answer, none when sent again within ps_timeout_ms "
			"(%d ms) or before the ps refused connections; read it back before "
			"repeating one",
			lost, task, p->conns[task].addr, p->op_timeout_ms);
	if (first && first != r)
		coord_seterr(err, first, "ps task: %s", coord_strerror(first));
	return first;
}

/* ---- the coordinator's ps tasks --------------------------------------------------------- */

size_t coord_psc_table_len(const struct coord_ps *ps)
{
	size_t n = 2 * COORD_WIRE_HDR + COORD_WIRE_PS_OPTS_LEN;

	if (!ps || !ps->remote || !ps->nps)
		return 0;
	for (unsigned i = 0; i < ps->nps; i++)
		n += 6 + strlen(ps->remote->conns[i].addr);
	return n;
}

void coord_psc_put_table(struct coord_wire_writer *w, const struct coord_ps *ps)
{
	const struct coord_psc *p;
	struct coord_wire_ps_opts o;

	if (!ps || !ps->remote || !ps->nps)
		return;
	p = ps->remote;
	o.timeout_ms = (uint32_t)p->op_timeout_ms;
	o.hb_ms = (uint32_t)p->hb_ms;
	o.misses = (uint32_t)p->misses;
	o.session = ps->sess;
	coord_wire_put_ps_opts(w, &o);
	coord_wire_begin(w, COORD_WIRE_PS_TABLE);
	for (unsigned i = 0; i < ps->nps; i++)
		coord_wire_put_addr(w, i, p->conns[i].addr);
	coord_wire_end(w);
}

static int ps_remote_setup(struct coord *c, const struct coord_spec *spec, struct coord_error *err)
{
	struct coord_view *v = coord_view(c);
	const char **addrs;
	struct coord_key key;
	unsigned nps;
	int r = coord_ps_ntasks(spec, 0, &nps, err);

	v->ps = NULL;
	if (r < 0 || nps == 0)
		return r;
	addrs = calloc(nps ? nps : 1, sizeof(*addrs));
	if (!addrs)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	for (unsigned i = 0; i < nps; i++) {
		r = coord_spec_task_address(spec, "ps", i, &addrs[i], err);
		if (r < 0) {
			free(addrs);
			return r;
		}
	}
	r = coord_key_load(v->opts.key_file, &key, err);
	if (r == 0) {
		r = coord_psc_create(addrs, nps, COORD_ROLE_COORDINATOR, &key, v->opts.max_frame,
				     v->opts.connect_timeout_ms, v->opts.ps_timeout_ms,
				     v->opts.heartbeat_ms, v->opts.heartbeat_misses, &v->ps, err);
		coord_key_wipe(&key);
		if (r == 0 && (v->tp->caps & COORD_TP_PS_RDMA))
			coord_psc_use_rdma(v->ps); /* the ps tasks serve rdma too */
	}
	free(addrs);
	if (r == 0 && !(v->ps->failures = calloc(nps, sizeof(*v->ps->failures)))) {
		coord_ps_destroy(v->ps);
		v->ps = NULL;
		r = coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	if (r == 0) {
		v->ps->sess = coord_ps_session_new();	   /* at most once (ps.h): PS_OPTS */
		v->ps->call_sess = coord_ps_session_new(); /* its own calls' keys */
	}
	return r;
}

const struct coord_ps_ops coord_ps_remote_ops = {
	.setup = ps_remote_setup,
	.destroy = coord_ps_destroy,
	.failure = coord_ps_failure,
};
