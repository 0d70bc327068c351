// SPDX-License-Identifier: MIT
/*
 * transport/tcp_server.c - coord_worker_serve() and coord_ps_serve(): the
 * server side of the tcp transport, used by coord-worker, coord-ps and by
 * users' own binaries.
 *
 * A ps server holds one variable store (runtime/varstore.h) and answers
 * VAR_REQ frames from coordinators and workers with one VAR_RES frame each
 * (runtime/ps.h has the operations).  A worker server learns where the ps
 * tasks are from its coordinator's PS_TABLE frame; the connections of one
 * process that name the same ps tasks share one client of them
 * (transport/ps_client.c), so their requests share frames.
 *
 * Threading: one thread per connection, blocking I/O.  A connection is one
 * worker of one coordinator, runs that worker's closures in order (as an
 * in-process worker does) and keeps that worker's per-worker resources, so
 * a process that accepts many connections serves many workers.  Results go
 * back in RES frames: one per REQ frame, flushed early when a closure has
 * run long enough that waiting for the rest of the batch would hold its
 * result back.
 *
 * Hostile input: every frame goes through the checked decoder (wire.c); a
 * frame that fails it, an unknown frame type, a function table that does
 * not parse, or a peer that stalls mid-frame closes that connection with an
 * ERROR frame and a logged reason.  Nothing a peer sends can stop the
 * server or another connection.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/internal.h"
#include "runtime/ps.h"
#include "transport/sock.h"

#define FLUSH_AFTER_NS 200000ull /* a result waits at most this for its batch */
#define MAX_FN_IDS 65536u
#define MAX_PS_TASKS 4096u

struct srv;

/* A client of one set of ps tasks, shared by the connections naming it. */
struct shared_ps {
	struct shared_ps *next;
	char *key; /* the addresses, joined by ',' */
	unsigned refs;
	struct coord_ps *ps;
};

struct conn {
	struct srv *s;
	int fd;
	pthread_t thread;
	_Atomic int done; /* the thread has finished (reaped by the acceptor) */
	char peer[80];
	struct coord_frame_reader rd;
	struct coord_exec_env env;
	uint32_t *fnmap; /* coordinator's function id -> our registry index */
	uint32_t nfn;
	struct shared_ps *ps;		 /* worker: the ps tasks (env.ps) */
	struct coord_ps_scratch scratch; /* ps: aligned copies of request data */
	/* the RES frame being built */
	uint8_t *out;
	size_t outcap;
	struct coord_wire_writer w;
	/* the current closure's result */
	uint8_t *res;
	size_t rescap, reslen;
	struct conn *next;
};

struct srv {
	const struct coord_server_opts *o;
	uint8_t role;		   /* COORD_ROLE_WORKER or COORD_ROLE_PS */
	struct coord_varstore *vs; /* ps: the variables */
	struct coord_key key;
	_Atomic int stopping;
	pthread_mutex_t lock; /* guards conns and pss */
	struct conn *conns;
	struct shared_ps *pss;
};

void coord_server_opts_init(struct coord_server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->listen = "127.0.0.1:0";
	o->max_frame = COORD_WIRE_MAX_FRAME_DEFAULT;
	o->handshake_ms = 5000;
	o->partial_ms = 10000;
	o->stop_fd = -1;
	o->task = -1;
}

/* Result sink of coord_exec(): the connection's result buffer. */
static void *conn_result_buf(void *sink, size_t len)
{
	struct conn *k = sink;

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
static uint16_t frame_type(const struct conn *k)
{
	return k->s->role == COORD_ROLE_PS ? COORD_WIRE_VAR_RES : COORD_WIRE_RES;
}

static int flush(struct conn *k)
{
	int r;

	if (k->w.count == 0)
		return 0;
	coord_wire_end(&k->w);
	r = coord_sock_send_all(k->fd, k->out, k->w.len);
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, frame_type(k));
	return r;
}

/* Append a RES (@res) or VAR_RES (@vres) record, flushing and growing. */
static int add_record(struct conn *k, const struct coord_wire_res *res,
		      const struct coord_wire_vres *vres)
{
	size_t need = COORD_WIRE_HDR + (res ? COORD_WIRE_RES_FIXED + (size_t)res->len
					    : COORD_WIRE_VRES_FIXED + (size_t)vres->len);
	int r = res ? coord_wire_put_res(&k->w, res) : coord_wire_put_vres(&k->w, vres);

	if (r != -ENOSPC)
		return r;
	r = flush(k);
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
	return res ? coord_wire_put_res(&k->w, res) : coord_wire_put_vres(&k->w, vres);
}

static int add_result(struct conn *k, const struct coord_wire_res *res)
{
	return add_record(k, res, NULL);
}

static int on_fn_table(struct conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
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

			if (!m)
				return -ENOMEM;
			for (uint32_t i = k->nfn; i < n; i++)
				m[i] = UINT32_MAX;
			k->fnmap = m;
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
	}
	return r;
}

static void ps_release(struct srv *s, struct shared_ps *sp)
{
	struct shared_ps **pp;
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
static int on_ps_table(struct conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct srv *s = k->s;
	struct coord_wire_iter it;
	const char *addrs[MAX_PS_TASKS];
	char *key, *p, *copy;
	struct shared_ps *sp;
	struct coord_error err;
	uint32_t task, n = 0;
	uint16_t len;
	size_t total = 1;
	int r;

	if (h->count == 0 || h->count > MAX_PS_TASKS)
		return -EPROTO;
	key = malloc(h->len + 1);
	copy = malloc(h->len + h->count);
	if (!key || !copy) {
		free(key);
		free(copy);
		return -ENOMEM;
	}
	p = copy;
	key[0] = 0;
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
		total += snprintf(key + total - 1, h->len + 2 - total, "%s%s", n ? "," : "",
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
					  5000, 30000, &sp->ps, &err)
		       : -ENOMEM;
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

struct vres_sink {
	struct conn *k;
	uint64_t rid;
	int io; /* the connection failed while sending */
};

static int emit_vres(void *arg, const void *p, size_t len)
{
	struct vres_sink *v = arg;
	struct coord_wire_vres res = { .rid = v->rid, .len = (uint32_t)len, .data = p };

	int r;

	if (len > v->k->s->o->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return COORD_EINVAL;
	r = add_record(v->k, NULL, &res);
	if (r < 0)
		v->io = r;
	return r;
}

/* VAR_REQ: run each op on our store; one VAR_RES record each. */
static int on_var_req(struct conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
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
					  .name = q.name,
					  .name_len = q.name_len,
					  .off = q.off,
					  .n = q.n,
					  .src = q.data,
					  .src_len = q.len };
		struct vres_sink v = { .k = k, .rid = q.rid };
		struct coord_error err = { 0 };
		int code = coord_ps_apply(k->s->vs, task, &op, &k->scratch, emit_vres, &v, &err);

		if (v.io)
			return v.io; /* the connection itself failed */
		if (code < 0) {
			struct coord_wire_vres res = { .rid = q.rid, .code = code };
			const char *m = err.msg[0] ? err.msg : coord_strerror(code);

			if (code == COORD_EINVAL && !err.msg[0])
				m = "result too large for one frame";
			res.data = m;
			res.len = (uint32_t)strlen(m) + 1;
			r = add_record(k, NULL, &res);
			if (r < 0)
				return r;
		}
	}
	if (r < 0)
		return r;
	return flush(k);
}

static uint32_t map_fn(struct conn *k, uint32_t id)
{
	return id < k->nfn ? k->fnmap[id] : UINT32_MAX;
}

static int on_req(struct conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct coord_wire_iter it;
	struct coord_wire_req q;
	uint64_t last_flush = coord_now_ns();
	int r;

	coord_wire_iter_init(&it, h, payload);
	while ((r = coord_wire_next_req(&it, &q)) == 1) {
		struct coord_exec_call call = { .id = q.closure_id,
						.fn = map_fn(k, q.fn),
						.attempt = q.attempt,
						.args = q.args,
						.len = q.len,
						.npw = q.npw };
		struct coord_wire_res res = { .closure_id = q.closure_id, .attempt = q.attempt };
		struct coord_ctx ctx;
		int code, cause;

		for (unsigned i = 0; i < q.npw; i++) {
			call.pw[i].uid = q.pw[i].uid;
			call.pw[i].creator = map_fn(k, q.pw[i].creator);
			call.pw[i].len = q.pw[i].len;
			call.pw[i].args = q.pw[i].args;
		}
		k->reslen = 0;
		code = coord_exec(&k->env, &call, conn_result_buf, k, &ctx, &cause);
		res.code = code;
		res.cause = cause;
		if (code == 0) {
			res.data = k->res;
			res.len = (uint32_t)k->reslen;
		} else {
			const char *m = ctx.has_msg ? ctx.msg : coord_strerror(code);

			res.data = m;
			res.len = (uint32_t)strlen(m) + 1;
		}
		r = add_result(k, &res);
		if (r < 0)
			return r;
		if (coord_now_ns() - last_flush > FLUSH_AFTER_NS) {
			r = flush(k);
			if (r < 0)
				return r;
			last_flush = coord_now_ns();
		}
	}
	if (r < 0)
		return r;
	return flush(k);
}

static void *conn_main(void *arg)
{
	struct conn *k = arg;
	const struct coord_server_opts *o = k->s->o;
	struct coord_error err;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	uint32_t task = 0;
	int r;

	r = coord_handshake_server(&k->rd, &k->s->key, k->s->role, &task, o->handshake_ms, k->peer,
				   &err);
	if (r == 0 && k->s->role == COORD_ROLE_PS && o->task >= 0 && task != (uint32_t)o->task)
		r = coord_seterr(&err, -EPROTO, "%s asked for ps task %u, this is ps task %d",
				 k->peer, task, o->task);
	if (r < 0) {
		coord_log(COORD_LOG_WARN, "refused %s", err.msg);
		if (r != -EPIPE && r != -EACCES) /* -EACCES already said so */
			coord_send_error(k->fd, r, err.msg);
		goto out;
	}
	k->env.reg = o->registry;
	k->env.worker = (int)task;
	coord_log(COORD_LOG_INFO, "%s connected to %s %u", k->peer,
		  k->s->role == COORD_ROLE_PS ? "ps task" : "worker", task);
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, frame_type(k));
	for (;;) {
		/* Idle connections may wait (the coordinator pings, issue 4);
		 * a started frame must finish within partial_ms. */
		r = coord_frame_read(&k->rd, 100, o->partial_ms, &h, &payload);
		if (r == -ETIMEDOUT && k->rd.len == k->rd.off) {
			/* Relaxed: a poll flag; reap() also shuts the socket. */
			if (atomic_load_explicit(&k->s->stopping, memory_order_relaxed))
				break;
			continue;
		}
		if (r == -EPIPE) {
			coord_log(COORD_LOG_INFO, "%s: closed by the coordinator", k->peer);
			break;
		}
		if (r < 0) {
			const char *why = r == -ETIMEDOUT  ? "stalled in the middle of a frame"
					  : r == -EMSGSIZE ? "frame larger than the limit"
					  : r == -EPROTO   ? "malformed frame header"
							   : strerror(-r);

			coord_log(COORD_LOG_WARN, "%s: closing: %s", k->peer, why);
			coord_send_error(k->fd, r, why);
			break;
		}
		/* Each role takes its own frames; anything else is refused. */
		switch (k->s->role == COORD_ROLE_PS && h.type != COORD_WIRE_VAR_REQ &&
					h.type != COORD_WIRE_PING && h.type != COORD_WIRE_ERROR
				? 0
				: h.type) {
		case COORD_WIRE_FN_TABLE:
			r = on_fn_table(k, &h, payload);
			break;
		case COORD_WIRE_PS_TABLE:
			r = on_ps_table(k, &h, payload);
			break;
		case COORD_WIRE_REQ:
			r = on_req(k, &h, payload);
			break;
		case COORD_WIRE_VAR_REQ:
			r = k->s->role == COORD_ROLE_PS ? on_var_req(k, &h, payload) : -EPROTO;
			break;
		case COORD_WIRE_PING: {
			uint64_t tok;
			uint8_t b[COORD_WIRE_HDR + 8];
			struct coord_wire_writer w;

			r = coord_wire_get_ping(&h, payload, &tok);
			if (r == 0) {
				coord_wire_writer_init(&w, b, sizeof(b));
				coord_wire_put_ping(&w, COORD_WIRE_PONG, tok);
				r = coord_sock_send_all(k->fd, b, w.len);
			}
			break;
		}
		case COORD_WIRE_ERROR: {
			int32_t code;
			const char *m = "";
			uint16_t len = 0;

			coord_wire_get_error(&h, payload, &code, &m, &len);
			coord_log(COORD_LOG_INFO, "%s: coordinator closed: %.*s", k->peer, (int)len,
				  m);
			goto out;
		}
		default:
			r = -EPROTO;
		}
		if (r < 0) {
			const char *why = r == -EPROTO ? "malformed or unexpected frame"
						       : strerror(-r);

			coord_log(COORD_LOG_WARN, "%s: closing: %s (%s frame)", k->peer, why,
				  coord_wire_type_name(h.type));
			coord_send_error(k->fd, r, why);
			break;
		}
	}
out:
	/* Here, not in conn_free(): reap() holds s->lock, ps_release takes it. */
	ps_release(k->s, k->ps);
	k->ps = NULL;
	k->env.ps = NULL;
	shutdown(k->fd, SHUT_RDWR);
	/* Release: the acceptor reaps us only after everything above. */
	atomic_store_explicit(&k->done, 1, memory_order_release);
	return NULL;
}

static void conn_free(struct conn *k)
{
	close(k->fd);
	coord_frame_reader_fini(&k->rd);
	coord_exec_env_fini(&k->env);
	free(k->scratch.buf);
	free(k->fnmap);
	free(k->out);
	free(k->res);
	free(k);
}

/* Join and free finished connections; with @all, every connection. */
static void reap(struct srv *s, bool all)
{
	struct conn **pp, *k;

	pthread_mutex_lock(&s->lock);
	for (pp = &s->conns; (k = *pp);) {
		/* Acquire: pairs with the release in conn_main(). */
		if (all || atomic_load_explicit(&k->done, memory_order_acquire)) {
			*pp = k->next;
			if (all)
				shutdown(k->fd, SHUT_RDWR);
			pthread_join(k->thread, NULL);
			conn_free(k);
		} else {
			pp = &k->next;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

static void accept_one(struct srv *s, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct conn *k;
	int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC), one = 1;

	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	k = calloc(1, sizeof(*k));
	if (!k || coord_frame_reader_init(&k->rd, fd, s->o->max_frame) < 0) {
		coord_log(COORD_LOG_ERROR, "out of memory for a connection");
		free(k);
		close(fd);
		return;
	}
	k->s = s;
	k->fd = fd;
	k->outcap = 64 * 1024;
	k->out = malloc(k->outcap);
	coord_sock_name((struct sockaddr *)&ss, len, k->peer, sizeof(k->peer));
	if (!k->out || pthread_create(&k->thread, NULL, conn_main, k) != 0) {
		coord_log(COORD_LOG_ERROR, "cannot start a thread for %s", k->peer);
		conn_free(k);
		return;
	}
	pthread_mutex_lock(&s->lock);
	k->next = s->conns;
	s->conns = k;
	pthread_mutex_unlock(&s->lock);
}

static int serve(const struct coord_server_opts *o, uint8_t role, struct coord_varstore *vs,
		 struct coord_error *err)
{
	struct srv s = { .o = o, .role = role, .vs = vs };
	unsigned port;
	int lfd, r;

	r = coord_key_load(o->key_file, &s.key, err);
	if (r < 0)
		return r;
	r = coord_sock_listen(o->listen, &s.key, &lfd, &port, err);
	if (r < 0) {
		coord_key_wipe(&s.key);
		return r;
	}
	pthread_mutex_init(&s.lock, NULL);
	if (role == COORD_ROLE_PS)
		coord_log(COORD_LOG_INFO, "serving ps task %d on port %u (%s)", o->task, port,
			  s.key.set ? "cluster key required" : "no cluster key: loopback only");
	else
		coord_log(COORD_LOG_INFO, "serving %u functions on port %u (%s)", o->registry->n,
			  port,
			  s.key.set ? "cluster key required" : "no cluster key: loopback only");
	if (o->on_listen)
		o->on_listen(port, o->arg);
	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN },
				       { .fd = o->stop_fd, .events = POLLIN } };

		if (poll(p, o->stop_fd >= 0 ? 2 : 1, 100) > 0) {
			if (o->stop_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP)))
				break;
			if (p[0].revents & POLLIN)
				accept_one(&s, lfd);
		}
		reap(&s, false);
	}
	/* Relaxed: conn threads poll it; reap() shuts their sockets too. */
	atomic_store_explicit(&s.stopping, 1, memory_order_relaxed);
	close(lfd);
	reap(&s, true);
	pthread_mutex_destroy(&s.lock);
	coord_key_wipe(&s.key);
	return 0;
}

int coord_worker_serve(const struct coord_server_opts *o, struct coord_error *err)
{
	if (!o || !o->registry || !o->listen || o->max_frame < 4096 ||
	    o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_worker_serve: a registry, a listen "
				    "address and a max_frame of 4 KiB..1 GiB are required");
	return serve(o, COORD_ROLE_WORKER, NULL, err);
}

int coord_ps_serve(const struct coord_server_opts *o, struct coord_error *err)
{
	struct coord_varstore *vs;
	int r;

	if (!o || !o->listen || o->max_frame < 4096 || o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_ps_serve: a listen address and a max_frame of "
				    "4 KiB..1 GiB are required");
	r = coord_varstore_create(NULL, &vs, err);
	if (r < 0)
		return r;
	r = serve(o, COORD_ROLE_PS, vs, err);
	coord_varstore_destroy(vs);
	return r;
}
