// SPDX-License-Identifier: MIT
/*
 * transport/server/srv_proto.c - the protocol engine of coord_worker_serve()
 * and coord_ps_serve() (srv_proto.h), whatever carries the frames: one
 * connection's function map, ps client and per-worker resources, and what
 * it does with each frame (REQ, VAR_REQ, FN_TABLE, PS_TABLE), results
 * batched into RES / VAR_RES frames and flushed early when a closure ran
 * long.  The tcp server (tcp_server.c) and the rdma server
 * (rdma_server.c) drive it; their headers say how they hold a connection.
 *
 * The ps side, VAR_REQ and Give-up's VAR_SYNC, is srv_var.c's; what the
 * two share, srv_pvt.h.
 *
 * Synchronization: srv_proto.h (a connection driven by one thread at a
 * time; struct coord_srv under its lock); hb_ms is written relaxed by the
 * connection's thread and read by the keepalive (tcp_pool.c P5,
 * rdma_server.c Q3), a hint.  Take-back (on_req(): T1, T3): srv_take.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "transport/wire/sock.h"
#include "transport/server/srv_pvt.h"
#include "transport/server/srv_take.h"

#define FLUSH_AFTER_NS 200000ull /* a result waits at most this for its batch */
#define MAX_FN_IDS 65536u
#define MAX_PS_TASKS 4096u

/* A client of one set of ps tasks, shared by the connections naming it. */
struct coord_srv_ps {
	struct coord_srv_ps *next;
	char *key; /* the addresses, joined by ',' */
	unsigned refs;
	struct coord_ps *ps;
};

/* Result sink of coord_exec(): the connection's result buffer. */
static void *conn_result_buf(void *sink, size_t len)
{
	struct coord_srv_conn *k = sink;

	if (len > k->s->o->max_frame - COORD_WIRE_HDR - COORD_WIRE_RES_FIXED)
		return NULL; /* could never be sent */
	if (len > k->rescap) {
		uint8_t *b = realloc(k->res, len);

		if (!b)
			return NULL;
		k->res = b;
		k->rescap = len;
	}
	k->reslen = len;
	return k->res;
}

/* The frames this connection answers with. */
static uint16_t frame_type(const struct coord_srv_conn *k)
{
	return k->s->role == COORD_ROLE_PS ? COORD_WIRE_VAR_RES : COORD_WIRE_RES;
}

int coord_srv_flush(struct coord_srv_conn *k)
{
	int r;

	if (k->w.count == 0)
		return 0;
	if (k->s->role == COORD_ROLE_PS)
		coord_gu_srv_sent(&k->sync);
	coord_wire_end(&k->w);
	r = k->io.send(k->io.ctx, k->out, k->w.len);
	coord_srv_frame_reset(k);
	return r;
}

void coord_srv_frame_reset(struct coord_srv_conn *k)
{
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, frame_type(k));
}

/* Send what is built and make the buffer hold @need bytes (a header
 * included): a record that did not fit. */
int coord_srv_flush_grow(struct coord_srv_conn *k, size_t need)
{
	int r = coord_srv_flush(k);

	if (r < 0)
		return r;
	if (need > k->outcap) { /* a result larger than the buffer: grow it */
		uint8_t *b = realloc(k->out, need);

		if (!b)
			return -ENOMEM;
		k->out = b;
		k->outcap = need;
		coord_wire_writer_init(&k->w, k->out, k->outcap);
		coord_wire_begin(&k->w, frame_type(k));
	}
	return 0;
}

/* Append a RES (@res) or VAR_RES (@vres) record, flushing and growing. */
int coord_srv_add_record(struct coord_srv_conn *k, const struct coord_wire_res *res,
			 const struct coord_wire_vres *vres)
{
	size_t need = COORD_WIRE_HDR + (res ? COORD_WIRE_RES_FIXED + (size_t)res->len
					    : COORD_WIRE_VRES_FIXED + (size_t)vres->len);
	int r = res ? coord_wire_put_res(&k->w, res) : coord_wire_put_vres(&k->w, vres);

	if (r != -ENOSPC)
		return r;
	r = coord_srv_flush_grow(k, need);
	if (r < 0)
		return r;
	return res ? coord_wire_put_res(&k->w, res) : coord_wire_put_vres(&k->w, vres);
}

static int add_result(struct coord_srv_conn *k, const struct coord_wire_res *res)
{
	return coord_srv_add_record(k, res, NULL);
}

static int on_fn_table(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
		       const uint8_t *payload)
{
	struct coord_wire_iter it;
	const struct coord_registry *reg = k->s->o->registry;
	const char *name;
	uint16_t len;
	uint32_t id;
	int r;

	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_fn(&it, &id, &name, &len)) == 1) {
		uint32_t local = UINT32_MAX;

		if (id >= MAX_FN_IDS)
			return -EPROTO;
		if (id >= k->nfn) {
			uint32_t n = id + 1;
			uint32_t *m = realloc(k->fnmap, n * sizeof(*m));
			char **miss;

			if (!m)
				return -ENOMEM;
			k->fnmap = m;
			miss = realloc(k->fnmiss, n * sizeof(*miss));
			if (!miss)
				return -ENOMEM;
			k->fnmiss = miss;
			for (uint32_t i = k->nfn; i < n; i++) {
				m[i] = UINT32_MAX;
				miss[i] = NULL;
			}
			k->nfn = n;
		}
		for (uint32_t i = 0; i < reg->n; i++)
			if (strlen(reg->fns[i].name) == len && !memcmp(reg->fns[i].name, name, len))
				local = i;
		if (local == UINT32_MAX)
			coord_log(COORD_LOG_WARN,
				  "%s: coordinator function '%.*s' is not "
				  "registered here; its closures will fail",
				  k->peer, (int)len, name);
		k->fnmap[id] = local;
		free(k->fnmiss[id]); /* its name for the error (not_here()) */
		k->fnmiss[id] = local == UINT32_MAX ? strndup(name, len) : NULL;
	}
	return r;
}

static void ps_release(struct coord_srv *s, struct coord_srv_ps *sp)
{
	struct coord_srv_ps **pp;
	bool last;

	if (!sp)
		return;
	pthread_mutex_lock(&s->lock);
	last = --sp->refs == 0;
	for (pp = &s->pss; last && *pp; pp = &(*pp)->next)
		if (*pp == sp) {
			*pp = sp->next;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	if (last) {
		coord_ps_destroy(sp->ps);
		free(sp->key);
		free(sp);
	}
}

/* PS_TABLE: tasks 0..count-1 in order; share a client with the same table. */
static int on_ps_table(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
		       const uint8_t *payload)
{
	struct coord_srv *s = k->s;
	struct coord_wire_ps_opts o = k->ps_opts;
	struct coord_wire_iter it;
	const char *addrs[MAX_PS_TASKS];
	char *key, *p, *copy;
	struct coord_srv_ps *sp;
	struct coord_error err;
	uint32_t task, n = 0;
	uint16_t len;
	size_t total = 1;
	int r;

	if (h->count == 0 || h->count > MAX_PS_TASKS)
		return -EPROTO;
	/* The coordinator's options (PS_OPTS), else the defaults of coord_opts. */
	if (k->ps_opts.timeout_ms == 0)
		o = (struct coord_wire_ps_opts){ .timeout_ms = 30000, .hb_ms = 1000, .misses = 3 };
	key = malloc(h->len + 1 + 40);
	copy = malloc(h->len + h->count);
	if (!key || !copy) {
		free(key);
		free(copy);
		return -ENOMEM;
	}
	p = copy;
	/* Clients are shared by the same tasks with the same options. */
	total = 1 + (size_t)snprintf(key, 41, "%u/%u/%u ", o.timeout_ms, o.hb_ms, o.misses);
	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_addr(&it, &task, &addrs[n], &len)) == 1) {
		if (task != n) {
			r = -EPROTO;
			break;
		}
		memcpy(p, addrs[n], len);
		p[len] = 0;
		addrs[n] = p;
		p += len + 1;
		total += snprintf(key + total - 1, h->len + 42 - total, "%s%s", n ? "," : "",
				  addrs[n]);
		n++;
	}
	if (r < 0) {
		free(key);
		free(copy);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	for (sp = s->pss; sp && strcmp(sp->key, key); sp = sp->next)
		;
	if (sp)
		sp->refs++;
	pthread_mutex_unlock(&s->lock);
	if (!sp) {
		sp = calloc(1, sizeof(*sp));
		r = sp ? coord_psc_create(addrs, n, COORD_ROLE_WORKER, &s->key, s->o->max_frame,
					  5000, (int)o.timeout_ms, (int)o.hb_ms, (int)o.misses,
					  &sp->ps, &err)
		       : -ENOMEM;
		if (r == 0 && s->o->transport && !strcmp(s->o->transport, "rdma"))
			coord_psc_use_rdma(sp->ps); /* a worker over rdma reaches ps over rdma */
		if (r < 0) {
			free(sp);
			free(key);
			free(copy);
			return r;
		}
		sp->key = key;
		sp->refs = 1;
		key = NULL;
		pthread_mutex_lock(&s->lock);
		sp->next = s->pss;
		s->pss = sp;
		pthread_mutex_unlock(&s->lock);
		coord_log(COORD_LOG_INFO, "%s: %u ps tasks: %s", k->peer, n, sp->key);
	}
	free(key);
	free(copy);
	ps_release(s, k->ps);
	k->ps = sp;
	k->env.ps = sp->ps;
	return 0;
}

static uint32_t map_fn(struct coord_srv_conn *k, uint32_t id)
{
	return id < k->nfn ? k->fnmap[id] : UINT32_MAX;
}

/* A call's function or per-worker creator map_fn() found no match for:
 * the error names it (from the FN_TABLE) and says how to serve it; 0 if
 * everything maps and coord_exec() may run it. */
static int not_here(struct coord_srv_conn *k, const struct coord_wire_req *q,
		    const struct coord_exec_call *call, struct coord_ctx *ctx, int *cause)
{
	const char *what = "function";
	uint32_t id = q->fn;
	int code = COORD_ENOFN;

	*cause = 0;
	if (likely(call->fn != UINT32_MAX)) {
		unsigned i = 0;

		while (i < call->npw && call->pw[i].creator != UINT32_MAX)
			i++;
		if (likely(i == call->npw))
			return 0;
		what = "resource creator";
		id = q->pw[i].creator;
		code = COORD_EINPUT; /* as coord_exec() reports a creator's failure */
		*cause = COORD_ENOFN;
	}
	coord_exec_missing(ctx, k->env.worker, what, id < k->nfn ? k->fnmiss[id] : NULL);
	return code;
}

void coord_srv_conn_cancel(struct coord_srv_conn *k, uint32_t gen)
{
	if (!k->cancelled || coord_wire_gen_before(k->min_gen, gen)) {
		k->min_gen = gen;
		k->cancelled = true;
	}
}

/* S3: is @q of a generation a CANCEL dropped (looking for one behind us
 * first, io.peek)?  @now: when it would start. */
static bool not_started(struct coord_srv_conn *k, const struct coord_wire_req *q, uint64_t now)
{
	if (k->io.peek)
		k->io.peek(k->io.ctx, now);
	return k->cancelled && coord_wire_gen_before(q->gen, k->min_gen);
}

static int on_req(struct coord_srv_conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct coord_wire_iter it;
	struct coord_wire_req q;
	uint64_t t = coord_now_ns(), last_flush = t;
	int r;

	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_req(&it, &q)) == 1) {
		/* B8: the closure's own id when the coordinator sent it
		 * (closure_id is then its handle for the result). */
		struct coord_exec_call call = { .id = q.rv_id ? q.rv_id : q.closure_id,
						.fn = map_fn(k, q.fn),
						.attempt = q.attempt,
						.args = q.args,
						.len = q.len,
						.npw = q.npw,
						.nin = q.nin, /* B1 */
						.in_get = coord_wire_input,
						.in_src = q.in };
		struct coord_wire_res res = { .closure_id = q.closure_id, .attempt = q.attempt };
		struct coord_ctx ctx;
		uint64_t now;
		int code, cause;

		for (unsigned i = 0; i < q.npw; i++) {
			call.pw[i].uid = q.pw[i].uid;
			call.pw[i].creator = map_fn(k, q.pw[i].creator);
			call.pw[i].len = q.pw[i].len;
			call.pw[i].args = q.pw[i].args;
		}
		if (unlikely(k->tb_idx++ < k->tb_end))
			continue; /* T3: returned by the watcher, never started here */
		k->reslen = 0;
		if (unlikely(not_started(k, &q, t))) {
			/* S3: answered "not started" (wire.h CANCEL), not run. */
			static const char m[] = "cancelled before it started (S3)";

			res.code = res.cause = COORD_ECANCELLED;
			res.data = m;
			res.len = sizeof(m);
			r = add_result(k, &res);
			if (r < 0)
				return r;
			continue;
		}
		code = not_here(k, &q, &call, &ctx, &cause);
		if (likely(!code)) /* published for the take-back (srv_take.h T1) */
			code = tb_exec(k, &it, &call, conn_result_buf, &ctx, &cause);
		now = coord_now_ns();
		res.code = code;
		res.cause = cause;
		if (code == 0) {
			res.data = k->res;
			res.len = (uint32_t)k->reslen;
			/* Its run time, for the coordinator's placement (wire.h);
			 * the clock read the flush check below needs anyway. */
			res.cause = coord_wire_run_ns_enc(now - t);
		} else {
			const char *m = ctx.has_msg ? ctx.msg : coord_strerror(code);

			res.data = m;
			res.len = (uint32_t)strlen(m) + 1;
		}
		r = add_result(k, &res);
		if (r < 0)
			return r;
		if (now - last_flush > FLUSH_AFTER_NS) {
			r = coord_srv_flush(k);
			if (r < 0)
				return r;
			last_flush = now = coord_now_ns();
		}
		t = now;
	}
	if (r < 0)
		return r;
	return coord_srv_flush(k);
}

/* S9: the coordinator put the last handle of these resources: destroy
 * this worker's components (runtime/core/pw.c P2; an unknown uid was never
 * made here).  Frames are served in order, so every REQ sent before this
 * frame has run and none sent after it has. */
static int on_pw_free(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
		      const uint8_t *payload)
{
	struct coord_wire_iter it;
	uint64_t uid;
	int r;

	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_uid(&it, &uid)) == 1)
		coord_exec_res_release(&k->env, uid);
	return r;
}

/*
 * One frame of an established connection.  Return: 0 go on; 1 the
 * coordinator closed (logged); < 0 close with that reason.
 */
static int on_frame(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
		    const uint8_t *payload)
{
	int r;

	/* Each role takes its own frames; anything else is refused. */
	switch (k->s->role == COORD_ROLE_PS
			? (h->type == COORD_WIRE_VAR_REQ || h->type == COORD_WIRE_PING ||
					   h->type == COORD_WIRE_ERROR ||
					   h->type == COORD_WIRE_VAR_SYNC
				   ? h->type
				   : 0)
			: (h->type == COORD_WIRE_VAR_SYNC ? 0 : h->type)) {
	case COORD_WIRE_FN_TABLE:
		return on_fn_table(k, h, payload);
	case COORD_WIRE_PS_TABLE:
		return on_ps_table(k, h, payload);
	case COORD_WIRE_REQ:
		return on_req(k, h, payload);
	case COORD_WIRE_PW_FREE:
		return on_pw_free(k, h, payload);
	case COORD_WIRE_CANCEL: {
		uint32_t gen;

		r = coord_wire_get_cancel(h, payload, &gen);
		if (r == 0)
			coord_srv_conn_cancel(k, gen);
		return r;
	}
	case COORD_WIRE_VAR_REQ:
		return k->s->role == COORD_ROLE_PS ? coord_srv_on_var_req(k, h, payload) : -EPROTO;
	case COORD_WIRE_VAR_SYNC:
		return coord_srv_on_sync(k, h, payload);
	case COORD_WIRE_PS_OPTS:
		r = coord_wire_get_ps_opts(h, payload, &k->ps_opts);
		if (r == 0) /* its closures' updates are keyed with it (ps.h) */
			k->env.sess = k->ps_opts.session;
		return r;
	case COORD_WIRE_PING: {
		uint64_t tok;
		uint8_t b[COORD_WIRE_HDR + 8];
		struct coord_wire_writer w;

		r = coord_wire_get_ping(h, payload, &tok);
		if (r == 0) {
			if (tok >= 1 && tok <= 3600000) /* tcp_pool.c P5: the heartbeat interval */
				/* Relaxed (tcp_pool.c P5): a hint for the watchdog. */
				atomic_store_explicit(&k->hb_ms, (uint32_t)tok,
						      memory_order_relaxed);
			k->tb_ok |= tok == COORD_WIRE_PING_TAKE_BACK; /* srv_take.c T5 */
			coord_wire_writer_init(&w, b, sizeof(b));
			coord_wire_put_ping(&w, COORD_WIRE_PONG, tok);
			r = k->io.send(k->io.ctx, b, w.len);
		}
		return r;
	}
	case COORD_WIRE_ERROR: {
		int32_t code;
		const char *m = "";
		uint16_t len = 0;

		coord_wire_get_error(h, payload, &code, &m, &len);
		coord_log(COORD_LOG_INFO, "%s: coordinator closed: %.*s", k->peer, (int)len, m);
		return 1;
	}
	default:
		return -EPROTO;
	}
}

/* ---- the engine's interface (srv_proto.h) ----------------------------------------- */

int coord_srv_conn_frame(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
			 const uint8_t *payload)
{
	return on_frame(k, h, payload);
}

int coord_srv_init(struct coord_srv *s, const struct coord_server_opts *o, uint8_t role,
		   struct coord_varstore *vs, struct coord_error *err)
{
	int r;

	memset(s, 0, sizeof(*s));
	s->o = o;
	s->role = role;
	s->vs = vs;
	r = coord_key_load(o->key_file, &s->key, err);
	if (r < 0)
		return r;
	if (role == COORD_ROLE_PS && vs && coord_ps_once_create(COORD_PS_ONCE_MAX, &s->once) < 0) {
		coord_key_wipe(&s->key);
		return coord_seterr(err, COORD_ENOMEM, "no memory for the at-most-once table");
	}
	pthread_mutex_init(&s->lock, NULL);
	return 0;
}

void coord_srv_fini(struct coord_srv *s)
{
	pthread_mutex_destroy(&s->lock);
	coord_key_wipe(&s->key);
	if (s->once) {
		struct coord_ps_once_stats st;

		coord_ps_once_stats(s->once, &st);
		if (st.dups || st.finals || st.evicted)
			coord_log(COORD_LOG_INFO,
				  "at most once: %llu keyed updates applied, %llu answered as done "
				  "(a closure run again), %llu refused (closure final), %llu keys "
				  "forgotten (table full)",
				  (unsigned long long)st.applied, (unsigned long long)st.dups,
				  (unsigned long long)st.finals, (unsigned long long)st.evicted);
	}
	coord_ps_once_destroy(s->once);
	s->once = NULL;
}

void coord_srv_conn_init(struct coord_srv_conn *k, struct coord_srv *s,
			 const struct coord_srv_io *io)
{
	k->s = s;
	k->io = *io;
	coord_gu_srv_init(&k->sync, coord_now_ns()); /* before the handshake's last frame */
}

size_t coord_srv_keepalive(const struct coord_srv_conn *k, uint64_t busy, uint64_t last_sent,
			   uint64_t now, uint8_t *b)
{
	/* Relaxed: a hint (the interval the coordinator's PING named); a stale
	 * read costs one PONG more or less. */
	uint64_t half = (uint64_t)atomic_load_explicit(&k->hb_ms, memory_order_relaxed) * 500000ull;
	struct coord_wire_writer w;

	if (!busy || !half || now - busy < half || now - last_sent < half)
		return 0;
	coord_wire_writer_init(&w, b, COORD_SRV_PONG_LEN);
	coord_wire_put_ping(&w, COORD_WIRE_PONG, half / 500000ull);
	return w.len;
}

int coord_srv_conn_start(struct coord_srv_conn *k, uint32_t task, const char *how,
			 struct coord_error *err)
{
	const struct coord_server_opts *o = k->s->o;

	if (k->s->role == COORD_ROLE_PS && o->task >= 0 && task != (uint32_t)o->task)
		return coord_seterr(err, -EPROTO, "%s asked for ps task %u, this is ps task %d",
				    k->peer, task, o->task);
	/* Only now: a peer not authenticated holds no result buffer. */
	k->outcap = 64 * 1024;
	k->out = malloc(k->outcap);
	if (!k->out)
		return coord_seterr(err, COORD_ENOMEM, "%s: no memory for a connection", k->peer);
	k->env.reg = o->registry;
	k->env.worker = (int)task;
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, frame_type(k));
	coord_log(COORD_LOG_INFO, "%s connected to %s %u%s", k->peer,
		  k->s->role == COORD_ROLE_PS ? "ps task" : "worker", task, how);
	return 0;
}

void coord_srv_conn_drop_ps(struct coord_srv_conn *k)
{
	ps_release(k->s, k->ps);
	k->ps = NULL;
	k->env.ps = NULL;
}

void coord_srv_conn_fini(struct coord_srv_conn *k)
{
	if (k->s && k->s->vs) /* a restore it prepared dies with it (ps.h) */
		coord_varstore_abort(k->s->vs, &k->scratch);
	coord_exec_env_fini(&k->env);
	free(k->scratch.buf);
	for (uint32_t i = 0; i < k->nfn; i++)
		free(k->fnmiss[i]);
	free(k->fnmiss);
	free(k->fnmap);
	free(k->out);
	free(k->res);
	coord_srv_take_fini(k);
}
