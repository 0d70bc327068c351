// SPDX-License-Identifier: MIT
/*
 * transport/server/rdma_server.c - coord_worker_serve() / coord_ps_serve() over
 * rdma (opts.transport "rdma"): the protocol engine of tcp_server.c
 * (srv_proto.h) driven by frame channels over RC queue pairs
 * (rdma_chan.h) instead of sockets.
 *
 * Threading: the caller's thread is the acceptor: it polls the listener's
 * rdma_cm fd and the stop fd, accepts (rdma_cm, bounded by handshake_ms)
 * and starts one thread per channel; a keeper thread sends the keepalives
 * (Q3), so that an accept held open by a peer never holds them back.  A channel belongs to one thread (its
 * contract), so that thread does everything on it: the handshake
 * (coord_handshake_server_io(), with deadlines), then frames in order, each
 * served by the engine, whose results go out through
 * coord_rdma_chan_send().  No locks and no allocation on that path (the
 * engine's buffers grow to the largest result, then stay).  Connections
 * over rdma are few (one per worker of each coordinator), so a thread each
 * costs little and a long closure holds only its own connection.
 *
 *   Q1  A connection's thread is its only user until it publishes `done`
 *       (release); the acceptor joins it after acquiring `done` (or at
 *       stop), and only then destroys the channel and frees the state.
 *   Q2  Every wait is bounded: the accept and the handshake by
 *       handshake_ms, a started frame by partial_ms (the channel's read:
 *       a frame that stalls is refused with an ERROR frame), a send by
 *       partial_ms (a peer that returns no credits or posts no receives),
 *       and the idle read by IDLE_TICK_MS, after which the thread looks at
 *       `stopping`.
 *   Q3  Keepalive (tcp_pool.c's P5): while the connection's thread
 *       serves a frame (a long closure, a ps round trip) it cannot answer
 *       the coordinator's PINGs, so the keeper thread, every KEEP_TICK_MS,
 *       sends an unsolicited PONG when the thread has been busy for half
 *       the coordinator's heartbeat interval (the token of its first PING)
 *       and nothing was sent meanwhile.  Not the acceptor: it waits up to
 *       handshake_ms in an accept that a peer can hold half-open.  The
 *       channel is still used by one thread at a time (rdma_chan.h): every
 *       use of it, by the serving thread (read, send) or the keeper (the
 *       PONG), holds chan_lock; the serving thread does not hold it while
 *       the engine runs a closure, and the keeper only tries it (a holder
 *       is alive).  The list of connections is the acceptor's and the
 *       keeper's: both hold list_lock while they walk or change it, so a
 *       connection the keeper looks at is never freed under it.
 *   Q4  One-sided reads (ps): a MAP op registers a variable's block (its
 *       data between its write counts, varstore.h) for remote reads once (map_lock; the registration
 *       serves every connection, one protection domain per device) and
 *       answers with their addresses and rkeys; readers then use RDMA READ
 *       without this process (runtime/store/varstore.c SNAP1-SNAP3).  A DELETE
 *       deregisters first; everything is deregistered when serving stops,
 *       before the caller destroys the store.
 *   Q5  Limits (tcp_server.c H1, tcp_pool.c I1): at most max_handshakes
 *       connections are in the handshake at once (`pending`: counted by
 *       the acceptor before their thread starts, uncounted by the thread
 *       when its handshake ends); one beyond is told so in an ERROR frame
 *       and closed at once, logged at most once a second.  An
 *       authenticated connection that has received nothing for idle_ms
 *       (at least COORD_SRV_IDLE_HB_MULT of its coordinator's heartbeat
 *       intervals) is closed with an ERROR frame by its own thread, at
 *       an idle tick (nothing of it runs then: its thread serves it).
 *   Q6  Rendezvous updates (ps, ASSIGN_RDV / ASSIGN_ADD_RDV, runtime/ps/ps.h):
 *       the client registered its data and sent where it is; the
 *       connection's thread RDMA READs exactly the 4 n bytes the op needs
 *       (srv_proto.c checked the declared length), in COORD_PSR_CHUNK
 *       pieces, one chain on the connection's channel: an assign straight
 *       into the variable's block (its MAP registration, which srv_proto.c
 *       makes before the stripes are held; without one, the range is
 *       registered for the call) under the store's stripes and SNAP1 counts
 *       (coord_vs_assign_fill()), an assign_add into the connection's own
 *       registered buffer, then added.  While the chain runs the thread
 *       sends the keepalive PONGs itself (coord_rdma_readv_tick(), Q3: it
 *       holds chan_lock), so the client's heartbeat sees the ps alive.
 *       A registration in use by a READ is not deregistered (the
 *       map's `users`: unmap_var() waits for 0, under map_lock with
 *       map_cond).  The READ's bound is that of a large read (5 s + 1 s a
 *       MiB); past it the channel is shut down before the thread lets go
 *       of the stripes, so no READ lands in the variable later.  Whatever
 *       the peer names (address, rkey, a region too short), a bad READ
 *       only fails: RC puts our queue pair in error, the request and its
 *       connection end (logged), the ps serves the others; the variable's
 *       range may then hold part of that assign's data (its SNAP1 counts
 *       are closed: readers see a value, never a write in progress).
 *   Q7  Take-back (srv_take.c T1-T5): the keeper also gives back,
 *       unstarted, what was received behind a closure that has run past
 *       COORD_SRV_TAKE_NS (coord_srv_take_back(): it looks at the frames
 *       behind through coord_rdma_chan_scan_all() under chan_lock, and
 *       sends under it), so that an idle worker runs them; it ticks every
 *       KEEP_BUSY_TICK_MS while a connection's thread serves a frame.
 *
 * Synchronization: the shared fields, who writes them, who reads them, and
 * what orders the two.
 *   field             written by (how)              read by (how)            order
 *   k->done           the connection's thread       the acceptor, the        Q1: release / acquire,
 *                     (release, its last store)     keeper (acquire)         then pthread_join()
 *   k->ch             the connection's thread;      the same                 chan_lock (Q3)
 *                     the keeper's PONG
 *   k->busy_since     the connection's thread       the keeper (relaxed)     none: a hint (a stale
 *                     (relaxed)                                              one costs one PONG)
 *   k->last_sent_ns   the connection's thread and   the keeper (relaxed)     as busy_since; both
 *                     the keeper (relaxed, under                             writers hold chan_lock
 *                     chan_lock)
 *   k->p.hb_ms        the connection's thread       the keeper (relaxed)     a hint (tcp_pool.c P5)
 *                     (srv_proto.c, relaxed)
 *   rs->conns         the acceptor (adds, reaps)    the keeper (walks)       list_lock (Q3)
 *   rs->pending       the acceptor + (and - if it   the acceptor (relaxed)   a bound, not an order
 *                     cannot start the thread); the                          (Q5): only the acceptor
 *                     connection's thread -                                  adds, so what it reads
 *                     (relaxed)                                              is never too low
 *   rs->stopping      the acceptor at stop          every thread (relaxed,   the keeper's join and
 *                     (relaxed)                     each tick)               reap(all) after it
 *   rs->maps, nmaps   connection threads (MAP,      the same; the acceptor   map_lock (Q4); at stop,
 *                     DELETE)                       at stop                  after every join
 *   peek_ns, rx_ns (the connection's thread's), tbuf (the keeper's, Q7) and
 *   refused, refused_logged_ns (the acceptor's) have one thread each: plain.
 *
 * Hostile input: the channel checks every header (coord_wire_parse_hdr())
 * before it buffers anything, the engine decodes every frame with the
 * checked decoder; a peer that fails either, that is not a coord channel
 * (bad private data: rejected at accept), that fails the handshake or that
 * stalls gets an ERROR frame when the channel can still carry one, is
 * disconnected and logged.  Nothing it does reaches another connection.
 *
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "transport/rdma/ps_rdma.h"
#include "transport/rdma/rdma_chan.h"
#include "transport/wire/sock.h"
#include "transport/server/srv_proto.h"

#define IDLE_TICK_MS 200 /* an idle connection's thread looks at `stopping` this often */
#define ACCEPT_TICK_MS 50
#define KEEP_TICK_MS 10	       /* Q3: the keeper looks at every busy connection this often */
#define KEEP_BUSY_TICK_MS 1    /* Q7: ... and this often while one serves a frame */
#define TAKE_BUF (64u * 1024u) /* Q7: the largest frame behind a take looks into */
#define FETCH_MS 5000	       /* Q6: a rendezvous READ chain's bound, plus 1 s a MiB */

struct rsrv;

struct rconn {
	struct rsrv *s;
	pthread_t thread;
	struct coord_rdma_chan *ch;
	struct coord_srv_conn p;
	_Atomic int done;	   /* Q1 */
	pthread_mutex_t chan_lock; /* Q3: every use of @ch */
	/* Q3: since when the thread serves a frame (0: it does not), and
	 * when a frame was last sent; hints for the acceptor's keepalive. */
	_Atomic uint64_t busy_since, last_sent_ns;
	uint64_t peek_ns; /* S3: when the serving thread last scanned for a CANCEL */
	uint8_t *tbuf;	  /* Q7: the keeper's copy of a frame behind (TAKE_BUF) */
	uint64_t rx_ns;	  /* Q5: when the serving thread last read a frame */
	/* Q6: the assign_add buffer, registered (the serving thread's) */
	uint8_t *fbuf;
	size_t fcap;
	struct coord_rdma_mr *fmr;
	struct rconn *next;
};

/* A variable registered for remote reads (ps, MAP ops; Q4). */
struct rmap {
	uint32_t id;
	unsigned users;		  /* Q6: READs into the block in progress */
	struct coord_rdma_mr *mr; /* the variable's block (varstore.h) */
	struct coord_ps_map m;
};

struct rsrv {
	struct coord_srv *base;
	_Atomic int stopping;
	pthread_mutex_t list_lock; /* Q3: @conns, the acceptor and the keeper */
	struct rconn *conns;
	_Atomic unsigned pending;   /* Q5: connections in the handshake */
	unsigned refused;	    /* Q5: refused since the last log line (the acceptor's) */
	uint64_t refused_logged_ns; /* Q5: when that was */
	pthread_t keeper;
	/* Q4: registrations, shared by every connection (one protection
	 * domain per device in this process); off the fast path. */
	pthread_mutex_t map_lock;
	pthread_cond_t map_cond; /* Q6: a map's users fell to 0 */
	struct rmap *maps;
	unsigned nmaps, capmaps;
};

/* The engine's send interface (struct coord_srv_io): bounded by partial_ms
 * (Q2), under chan_lock (Q3). */
static int rdma_io_send(void *ctx, const void *b, size_t len)
{
	struct rconn *k = ctx;
	int r;

	pthread_mutex_lock(&k->chan_lock);
	r = coord_rdma_chan_send(k->ch, b, len, k->s->base->o->partial_ms);
	/* Relaxed (Q3): a hint for the keepalive. */
	atomic_store_explicit(&k->last_sent_ns, coord_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&k->chan_lock);
	return r;
}

/* An ERROR frame (@r, @why) on @k's channel, under chan_lock (Q3). */
static void say_error(struct rconn *k, int r, const char *why)
{
	struct coord_frame_io io;

	pthread_mutex_lock(&k->chan_lock);
	coord_rdma_chan_io(&io, k->ch);
	coord_send_error_io(&io, r, why);
	pthread_mutex_unlock(&k->chan_lock);
}

/* Refuse: log, and say why on the channel if it can still carry a frame. */
static void refuse(struct rconn *k, int r, const char *why)
{
	coord_log(COORD_LOG_WARN, "%s: closing: %s", k->p.peer, why);
	if (r == -EPIPE || r == -ETIMEDOUT || r == -EIO)
		return; /* closed, or no credits: an ERROR frame would not get through */
	say_error(k, r, why);
}

/* Q5: has @k received nothing for longer than its idle limit at @now? */
static bool idle_over(const struct rconn *k, uint64_t now)
{
	const struct coord_server_opts *o = k->s->base->o;
	/* Relaxed: written by this thread (a PING), read by the keeper too. */
	uint64_t hb = atomic_load_explicit(&k->p.hb_ms, memory_order_relaxed);
	uint64_t limit = (uint64_t)o->idle_ms;

	if (!o->idle_ms)
		return false;
	if (limit < COORD_SRV_IDLE_HB_MULT * hb)
		limit = COORD_SRV_IDLE_HB_MULT * hb;
	return now > k->rx_ns && now - k->rx_ns > limit * 1000000ull;
}

static void serve_frames(struct rconn *k)
{
	const struct coord_server_opts *o = k->s->base->o;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	char why[96];
	int r;

	for (;;) {
		bool partial;

		pthread_mutex_lock(&k->chan_lock);
		r = coord_rdma_chan_read(k->ch, IDLE_TICK_MS, o->partial_ms, &h, &payload);
		partial = coord_rdma_chan_partial(k->ch);
		pthread_mutex_unlock(&k->chan_lock);
		if (r == -ETIMEDOUT && !partial) {
			/* Relaxed: a poll flag, read once per idle tick (Q2). */
			if (atomic_load_explicit(&k->s->stopping, memory_order_relaxed))
				return;
			if (idle_over(k, coord_now_ns())) { /* Q5 */
				coord_log(COORD_LOG_WARN,
					  "%s: closing: idle: nothing received "
					  "for too long",
					  k->p.peer);
				say_error(k, -ETIMEDOUT, "idle: nothing received for too long");
				return;
			}
			continue;
		}
		if (r == -EPIPE) {
			coord_log(COORD_LOG_INFO, "%s: closed by the coordinator", k->p.peer);
			return;
		}
		if (r < 0) {
			snprintf(why, sizeof(why), "%s",
				 r == -ETIMEDOUT  ? "stalled in the middle of a frame"
				 : r == -EMSGSIZE ? "frame larger than the limit"
				 : r == -EPROTO	  ? "malformed frame header"
						  : strerror(-r));
			/* A timed-out partial frame leaves the channel able to send. */
			refuse(k, r == -ETIMEDOUT ? -EPROTO : r, why);
			return;
		}
		/* Relaxed (Q3): a hint for the keepalive.  The read says nothing
		 * of the frames behind this one: a CANCEL may wait there (S3,
		 * rdma_io_peek()). */
		k->rx_ns = coord_now_ns(); /* Q5 */
		atomic_store_explicit(&k->busy_since, k->rx_ns, memory_order_relaxed);
		r = coord_srv_conn_frame(&k->p, &h, payload);
		/* Relaxed (Q3): as above; a stale read costs one PONG. */
		atomic_store_explicit(&k->busy_since, 0, memory_order_relaxed);
		if (r == 1)
			return;
		if (r < 0) {
			snprintf(why, sizeof(why), "%s (%s frame)",
				 r == -EPROTO ? "malformed or unexpected frame" : coord_strerror(r),
				 coord_wire_type_name(h.type));
			refuse(k, r, why);
			return;
		}
	}
}

static void *conn_main(void *arg)
{
	struct rconn *k = arg;
	struct coord_srv *s = k->s->base;
	const struct coord_server_opts *o = s->o;
	struct coord_frame_io io;
	struct coord_error err;
	uint32_t task = 0;
	int r;

	pthread_mutex_lock(&k->chan_lock); /* Q3 (the handshake uses the channel) */
	coord_rdma_chan_io(&io, k->ch);
	r = coord_handshake_server_io(&io, &s->key, s->role, &task, o->handshake_ms, k->p.peer,
				      &err);
	if (r == 0)
		r = coord_srv_conn_start(&k->p, task, " over rdma", &err);
	k->rx_ns = coord_now_ns(); /* Q5: idle from here */
	/* Relaxed (Q5): a count the acceptor compares with its limit. */
	atomic_fetch_sub_explicit(&k->s->pending, 1, memory_order_relaxed);
	if (r < 0) {
		coord_log(COORD_LOG_WARN, "refused %s", err.msg);
		if (r != -EPIPE && r != -EACCES) /* -EACCES already said so */
			coord_send_error_io(&io, r, err.msg);
		pthread_mutex_unlock(&k->chan_lock);
	} else {
		pthread_mutex_unlock(&k->chan_lock);
		serve_frames(k);
	}
	coord_srv_conn_drop_ps(&k->p);
	/* Q1 (release): pairs with the acquire in reap(): everything this
	 * thread did to @k happens-before the acceptor frees it. */
	atomic_store_explicit(&k->done, 1, memory_order_release);
	return NULL;
}

static void conn_free(struct rconn *k)
{
	coord_rdma_dereg(k->fmr); /* Q6: before its channel */
	free(k->fbuf);
	free(k->tbuf);
	coord_rdma_chan_destroy(k->ch);
	coord_srv_conn_fini(&k->p);
	pthread_mutex_destroy(&k->chan_lock);
	free(k);
}

/*
 * Q3: an unsolicited PONG for a connection whose thread has served one
 * frame for half the coordinator's heartbeat interval with nothing sent
 * meanwhile.  Keeper thread, under list_lock; never waits: a PONG fits in
 * one SEND, which credits allow now or not at all (then the connection is
 * busy sending: alive, or its sends will time out).
 */
static void keepalive_locked(struct rconn *k, uint64_t now)
{
	uint8_t b[COORD_SRV_PONG_LEN];
	/* Relaxed (Q3): hints, both. */
	size_t len = coord_srv_keepalive(
		&k->p, atomic_load_explicit(&k->busy_since, memory_order_relaxed),
		atomic_load_explicit(&k->last_sent_ns, memory_order_relaxed), now, b);
	size_t sent = 0;

	if (len && coord_rdma_chan_send_some(k->ch, b, len, &sent) == 0 && sent == len)
		/* Relaxed (Q3): as above. */
		atomic_store_explicit(&k->last_sent_ns, now, memory_order_relaxed);
}

static void keepalive(struct rconn *k, uint64_t now)
{
	if (pthread_mutex_trylock(&k->chan_lock) != 0)
		return; /* the thread uses the channel: alive (Q6: it sends them itself) */
	keepalive_locked(k, now);
	pthread_mutex_unlock(&k->chan_lock);
}

/* Q6: coord_rdma_readv_tick()'s tick: the serving thread, chan_lock held. */
static void fetch_tick(void *arg)
{
	keepalive_locked(arg, coord_now_ns());
}

/* Join and free finished connections; with @all, every one (stopping).
 * They leave the list under list_lock (Q3) and are joined outside it. */
static void reap(struct rsrv *rs, bool all)
{
	struct rconn **pp, *k, *dead = NULL;

	pthread_mutex_lock(&rs->list_lock);
	pp = &rs->conns;
	while ((k = *pp)) {
		/* Q1 (acquire): pairs with the release in conn_main(). */
		if (all || atomic_load_explicit(&k->done, memory_order_acquire)) {
			*pp = k->next;
			k->next = dead;
			dead = k;
		} else {
			pp = &k->next;
		}
	}
	pthread_mutex_unlock(&rs->list_lock);
	while ((k = dead)) {
		dead = k->next;
		pthread_join(k->thread, NULL);
		conn_free(k);
	}
}

/*
 * Q7 (struct coord_srv_io @behind, srv_take.c T2): the frames received
 * behind the one being served, each copied out (up to TAKE_BUF bytes; a
 * larger one is shown as NULL), under chan_lock.  The keeper, while the
 * serving thread runs a closure and has handed the take over.
 */
static void rdma_io_behind(void *ctx, coord_srv_visit_fn visit, void *arg)
{
	struct rconn *k = ctx;

	if (!k->tbuf && !(k->tbuf = malloc(TAKE_BUF)))
		return;
	pthread_mutex_lock(&k->chan_lock);
	coord_rdma_chan_scan_all(k->ch, visit, arg, k->tbuf, TAKE_BUF);
	pthread_mutex_unlock(&k->chan_lock);
}

/* Q3: the keeper thread, until serving stops. */
static void *keeper_main(void *arg)
{
	struct rsrv *rs = arg;

	/* Relaxed: the flag alone stops the loop; nothing is published with it. */
	while (!atomic_load_explicit(&rs->stopping, memory_order_relaxed)) {
		uint64_t now = coord_now_ns();
		struct timespec tick = { 0, KEEP_TICK_MS * 1000000L };

		pthread_mutex_lock(&rs->list_lock);
		for (struct rconn *k = rs->conns; k; k = k->next) {
			/* Q1 (acquire): a finished connection is left to reap(). */
			if (atomic_load_explicit(&k->done, memory_order_acquire))
				continue;
			keepalive(k, now);
			/* Q7: what waits behind a closure that runs long goes
			 * back (srv_take.c); look often while one serves. */
			coord_srv_take_back(&k->p, now);
			/* Relaxed (Q3): a hint. */
			if (atomic_load_explicit(&k->busy_since, memory_order_relaxed))
				tick.tv_nsec = KEEP_BUSY_TICK_MS * 1000000L;
		}
		pthread_mutex_unlock(&rs->list_lock);
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static struct rconn *conn_of(struct coord_srv_conn *p)
{
	return (struct rconn *)((char *)p - offsetof(struct rconn, p));
}

/* Q4: variable @id's registration, found or made; under map_lock.  The
 * pointer is valid until map_lock is let go. */
static int map_locked(struct rconn *k, uint32_t id, struct rmap **out, struct coord_error *err)
{
	struct rsrv *rs = k->s;
	struct coord_var_map vm;
	struct rmap *m = NULL;
	int r;

	for (unsigned i = 0; i < rs->nmaps; i++)
		if (rs->maps[i].id == id) {
			*out = &rs->maps[i];
			return 0;
		}
	r = coord_vs_map(rs->base->vs, id, &vm, err);
	if (r < 0)
		return r;
	if (rs->nmaps == rs->capmaps) {
		unsigned cap = rs->capmaps ? 2 * rs->capmaps : 16;
		struct rmap *b = realloc(rs->maps, cap * sizeof(*b));

		if (!b)
			return coord_seterr(err, COORD_ENOMEM, "map: no memory");
		rs->maps = b;
		rs->capmaps = cap;
	}
	m = &rs->maps[rs->nmaps];
	memset(m, 0, sizeof(*m));
	m->id = id;
	r = coord_rdma_reg(k->ch, vm.block, vm.block_len, true, &m->mr);
	if (r < 0)
		return coord_seterr(err, r, "map: cannot register the variable: %s", strerror(-r));
	coord_rdma_mr_export(m->mr, &m->m.block_addr, &m->m.rkey);
	m->m.block_len = vm.block_len;
	m->m.nelem = vm.nelem;
	rs->nmaps++;
	*out = m;
	return 0;
}

/* Q4: the MAP op (struct coord_srv map_var). */
static int map_var(struct coord_srv_conn *p, uint32_t id, struct coord_ps_map *out,
		   struct coord_error *err)
{
	struct rconn *k = conn_of(p);
	struct rmap *m = NULL;
	int r;

	pthread_mutex_lock(&k->s->map_lock);
	r = map_locked(k, id, &m, err);
	if (r == 0)
		*out = m->m;
	pthread_mutex_unlock(&k->s->map_lock);
	return r;
}

/* Q4: @id is about to be deleted: no remote read may reach its memory. */
static void unmap_var(struct coord_srv *s, uint32_t id)
{
	struct rsrv *rs = s->map_ctx;

	pthread_mutex_lock(&rs->map_lock);
	for (unsigned i = 0; i < rs->nmaps; i++) {
		if (rs->maps[i].id != id)
			continue;
		if (rs->maps[i].users) { /* Q6: a READ into it: wait, then look again */
			pthread_cond_wait(&rs->map_cond, &rs->map_lock);
			i = (unsigned)-1;
			continue;
		}
		coord_rdma_dereg(rs->maps[i].mr);
		rs->maps[i] = rs->maps[--rs->nmaps];
		break;
	}
	pthread_mutex_unlock(&rs->map_lock);
}

/* Q6: @k's assign_add buffer, at least @len bytes, registered. */
static int fbuf_reserve(struct rconn *k, size_t len, struct coord_error *err)
{
	size_t cap = k->fcap ? k->fcap : 1u << 20;
	int r;

	if (len <= k->fcap)
		return 0;
	while (cap < len)
		cap *= 2;
	coord_rdma_dereg(k->fmr);
	free(k->fbuf);
	k->fmr = NULL;
	k->fcap = 0;
	k->fbuf = aligned_alloc(4096, cap);
	if (!k->fbuf)
		return coord_seterr(err, COORD_ENOMEM, "rendezvous update: no memory for %zu bytes",
				    cap);
	r = coord_rdma_reg(k->ch, k->fbuf, cap, false, &k->fmr);
	if (r < 0) {
		free(k->fbuf);
		k->fbuf = NULL;
		return coord_seterr(err, COORD_ENOMEM,
				    "rendezvous update: cannot register %zu bytes: %s", cap,
				    strerror(-r));
	}
	k->fcap = cap;
	return 0;
}

/*
 * Q6: the READs of @src (its @len bytes, in COORD_PSR_CHUNK pieces, one
 * chain) into @mr at @loff, keepalives meanwhile.  0, or a coord error
 * code with @err (the connection is then broken or shut down).
 */
static int fetch_chain(struct rconn *k, struct coord_rdma_mr *mr, size_t loff,
		       const struct coord_ps_rsrc *src, struct coord_error *err)
{
	struct coord_rdma_rseg seg[COORD_PSR_LARGE_MAX / COORD_PSR_CHUNK];
	int ms = FETCH_MS + (int)(src->len >> 20) * 1000;
	unsigned ns = 0;
	int r;

	for (uint64_t at = 0; at < src->len; at += COORD_PSR_CHUNK)
		seg[ns++] = (struct coord_rdma_rseg){
			.mr = mr,
			.loff = loff + at,
			.raddr = src->addr + at, /* wraps for a hostile peer: its READ fails */
			.rkey = src->rkey,
			.len = src->len - at < COORD_PSR_CHUNK ? src->len - at : COORD_PSR_CHUNK
		};
	pthread_mutex_lock(&k->chan_lock);
	r = coord_rdma_readv_tick(k->ch, mr, seg, ns, ms, fetch_tick, k);
	if (r == -ETIMEDOUT)
		coord_rdma_chan_shutdown(k->ch); /* no READ lands after we return */
	pthread_mutex_unlock(&k->chan_lock);
	if (r == 0)
		return 0;
	coord_log(COORD_LOG_WARN,
		  "%s: rendezvous update: RDMA READ of %llu bytes (rkey %#x) failed: %s; "
		  "closing the connection",
		  k->p.peer, (unsigned long long)src->len, src->rkey,
		  r == -EIO ? "the peer's memory cannot be read (address, rkey or length)"
			    : strerror(-r));
	return coord_seterr(err, COORD_EUNAVAILABLE,
			    "rendezvous update: the ps could not RDMA READ the %llu bytes (%s)",
			    (unsigned long long)src->len, strerror(-r));
}

/* Q6: struct coord_srv @fetch. */
static int fetch(struct coord_srv_conn *p, const struct coord_ps_rsrc *src, uint32_t id, void *dst,
		 const void **out, struct coord_error *err)
{
	struct rconn *k = conn_of(p);
	struct rsrv *rs = k->s;
	struct coord_rdma_mr *mr = NULL, *own;
	size_t loff = 0;
	int r;

	if (src->len > COORD_PSR_LARGE_MAX)
		return coord_seterr(err, COORD_EINVAL,
				    "rendezvous update of %llu bytes: at most %u",
				    (unsigned long long)src->len, COORD_PSR_LARGE_MAX);
	if (!dst) {
		r = fbuf_reserve(k, src->len, err);
		if (r == 0)
			r = fetch_chain(k, k->fmr, 0, src, err);
		*out = k->fbuf;
		return r;
	}
	/* The variable's registration (on_var_req() made it before the
	 * stripes were taken: coord_vs_map() takes one, so never here). */
	pthread_mutex_lock(&rs->map_lock);
	for (unsigned i = 0; i < rs->nmaps && !mr; i++) {
		struct rmap *m = &rs->maps[i];

		if (m->id != id)
			continue;
		loff = (size_t)((uintptr_t)dst - (uintptr_t)m->m.block_addr);
		if ((uintptr_t)dst < m->m.block_addr || loff > m->m.block_len ||
		    src->len > m->m.block_len - loff)
			break; /* never: the store gave @dst */
		mr = m->mr;    /* stays: users > 0 (the array may move) */
		m->users++;
	}
	pthread_mutex_unlock(&rs->map_lock);
	if (!mr) { /* none (deleted and mapped again meanwhile?): this range, for this call */
		r = coord_rdma_reg(k->ch, dst, src->len, false, &own);
		if (r < 0)
			return coord_seterr(err, COORD_ENOMEM,
					    "rendezvous update: cannot register the variable: %s",
					    strerror(-r));
		r = fetch_chain(k, own, 0, src, err);
		coord_rdma_dereg(own);
		return r;
	}
	r = fetch_chain(k, mr, loff, src, err);
	pthread_mutex_lock(&rs->map_lock);
	for (unsigned i = 0; i < rs->nmaps; i++)
		if (rs->maps[i].id == id && --rs->maps[i].users == 0)
			pthread_cond_broadcast(&rs->map_cond);
	pthread_mutex_unlock(&rs->map_lock);
	return r;
}

/* S3: a scan this recent needs no other. */
#define PEEK_NS 20000ull

static void peek_cancel(void *arg, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	uint32_t gen;

	if (coord_wire_get_cancel(h, payload, &gen) == 0)
		coord_srv_conn_cancel(arg, gen);
}

/*
 * S3 (struct coord_srv_io @peek): a CANCEL received behind the frame being
 * served (coord_rdma_chan_scan(): nothing is consumed, the frame stays
 * valid).  The serving thread, between two closures of a REQ frame.
 */
static void rdma_io_peek(void *ctx, uint64_t now)
{
	struct rconn *k = ctx;

	if (now - k->peek_ns < PEEK_NS)
		return;
	k->peek_ns = now;
	pthread_mutex_lock(&k->chan_lock);
	coord_rdma_chan_scan(k->ch, COORD_WIRE_CANCEL, peek_cancel, &k->p, 4);
	pthread_mutex_unlock(&k->chan_lock);
}

/* Q5: too many handshakes: say so to the peer, close, log at most once a
 * second (with how many were refused).  The acceptor. */
static void refuse_busy(struct rsrv *rs, struct coord_rdma_chan *ch, unsigned pending)
{
	struct coord_frame_io io;
	uint64_t now = coord_now_ns();
	char m[96];

	snprintf(m, sizeof(m), "server busy: %u connections in the handshake", pending);
	coord_rdma_chan_io(&io, ch);
	coord_send_error_io(&io, -EBUSY, m);
	rs->refused++;
	if (now - rs->refused_logged_ns >= 1000000000ull) {
		coord_log(COORD_LOG_WARN,
			  "rdma: refused %u connection%s in the last second (the last from %s): "
			  "%u in the handshake, the limit (max_handshakes) is %u",
			  rs->refused, rs->refused == 1 ? "" : "s", coord_rdma_chan_peer(ch),
			  pending, rs->base->o->max_handshakes);
		rs->refused_logged_ns = now;
		rs->refused = 0;
	}
	coord_rdma_chan_destroy(ch);
}

static void accept_one(struct rsrv *rs, struct coord_rdma_listener *l)
{
	const struct coord_server_opts *o = rs->base->o;
	struct coord_srv_io io = { .send = rdma_io_send,
				   .peek = rdma_io_peek,
				   .behind = rdma_io_behind };
	struct coord_error err;
	struct coord_rdma_chan *ch;
	struct rconn *k;
	unsigned pending;
	int r;

	memset(&err, 0, sizeof(err));
	r = coord_rdma_accept(l, o->handshake_ms, &ch, &err);
	if (r < 0) {
		if (r != -ETIMEDOUT || err.msg[0])
			coord_log(COORD_LOG_WARN, "rdma: refused a connection: %s",
				  err.msg[0] ? err.msg : strerror(-r));
		return;
	}
	/* Relaxed (Q5): only the acceptor adds; a thread may subtract meanwhile. */
	pending = atomic_load_explicit(&rs->pending, memory_order_relaxed);
	if (pending >= o->max_handshakes) {
		refuse_busy(rs, ch, pending);
		return;
	}
	k = calloc(1, sizeof(*k));
	io.ctx = k;
	if (!k) {
		coord_log(COORD_LOG_ERROR, "out of memory for a connection");
		coord_rdma_chan_destroy(ch);
		return;
	}
	coord_srv_conn_init(&k->p, rs->base, &io);
	pthread_mutex_init(&k->chan_lock, NULL);
	k->s = rs;
	k->ch = ch;
	snprintf(k->p.peer, sizeof(k->p.peer), "%s", coord_rdma_chan_peer(ch));
	/* Relaxed (Q5): a count; conn_main() subtracts when its handshake ends. */
	atomic_fetch_add_explicit(&rs->pending, 1, memory_order_relaxed);
	if (pthread_create(&k->thread, NULL, conn_main, k) != 0) {
		/* Relaxed (Q5): as above. */
		atomic_fetch_sub_explicit(&rs->pending, 1, memory_order_relaxed);
		coord_log(COORD_LOG_ERROR, "cannot start a thread for %s", k->p.peer);
		conn_free(k);
		return;
	}
	pthread_mutex_lock(&rs->list_lock);
	k->next = rs->conns;
	rs->conns = k;
	pthread_mutex_unlock(&rs->list_lock);
}

int coord_rdma_serve(struct coord_srv *s, struct coord_error *err)
{
	const struct coord_server_opts *o = s->o;
	struct coord_rdma_opts ro = { .max_frame = o->max_frame };
	struct rsrv rs = { .base = s };
	struct coord_rdma_listener *l;
	struct sockaddr_storage ss;
	socklen_t sl;
	unsigned port;
	int r;

	/* rdma_cm has no loopback: the cluster-key policy (B5) is ours. */
	r = coord_sock_addr(o->listen, &ss, &sl, err);
	if (r < 0)
		return r;
	r = coord_auth_check_bind(&s->key, (struct sockaddr *)&ss, sl, err);
	if (r < 0)
		return r;
	r = coord_rdma_listen(o->listen, &ro, &l, &port, err);
	if (r < 0)
		return r;
	pthread_mutex_init(&rs.list_lock, NULL);
	r = pthread_create(&rs.keeper, NULL, keeper_main, &rs);
	if (r) {
		pthread_mutex_destroy(&rs.list_lock);
		coord_rdma_listener_destroy(l);
		return coord_seterr(err, -r, "rdma: cannot start the keepalive thread");
	}
	pthread_mutex_init(&rs.map_lock, NULL);
	pthread_cond_init(&rs.map_cond, NULL);
	if (s->role == COORD_ROLE_PS && s->vs) { /* Q4, Q6 */
		s->map_var = map_var;
		s->unmap_var = unmap_var;
		s->fetch = fetch;
		s->map_ctx = &rs;
	}
	if (s->role == COORD_ROLE_PS)
		coord_log(COORD_LOG_INFO, "serving ps task %d over rdma on port %u (%s)", o->task,
			  port, s->key.set ? "cluster key required" : "no cluster key");
	else
		coord_log(COORD_LOG_INFO, "serving %u functions over rdma on port %u (%s)",
			  o->registry->n, port,
			  s->key.set ? "cluster key required" : "no cluster key");
	if (o->on_listen)
		o->on_listen(port, o->arg);
	for (;;) {
		struct pollfd p[2] = { { .fd = coord_rdma_listener_fd(l), .events = POLLIN },
				       { .fd = o->stop_fd, .events = POLLIN } };

		if (poll(p, o->stop_fd >= 0 ? 2 : 1, ACCEPT_TICK_MS) > 0) {
			if (o->stop_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP)))
				break;
			if (p[0].revents & POLLIN)
				accept_one(&rs, l);
		}
		reap(&rs, false);
	}
	/* Relaxed: each connection's thread polls it once per idle tick (Q2),
	 * the keeper once per tick (Q3). */
	atomic_store_explicit(&rs.stopping, 1, memory_order_relaxed);
	pthread_join(rs.keeper, NULL);
	reap(&rs, true);
	pthread_mutex_destroy(&rs.list_lock);
	s->map_var = NULL;
	s->unmap_var = NULL;
	s->fetch = NULL;
	for (unsigned i = 0; i < rs.nmaps; i++) { /* Q4: before the store goes */
		coord_rdma_dereg(rs.maps[i].mr);
	}
	free(rs.maps);
	pthread_cond_destroy(&rs.map_cond);
	pthread_mutex_destroy(&rs.map_lock);
	coord_rdma_listener_destroy(l);
	return 0;
}
