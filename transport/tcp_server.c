// SPDX-License-Identifier: MIT
/*
 * transport/tcp_server.c - coord_worker_serve(): the worker side of the tcp
 * transport, used by coord-worker and by users' own binaries.
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

#include "runtime/internal.h"
#include "transport/sock.h"

#define FLUSH_AFTER_NS 200000ull /* a result waits at most this for its batch */
#define MAX_FN_IDS 65536u

struct srv;

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
	struct coord_key key;
	_Atomic int stopping;
	pthread_mutex_t lock; /* guards conns (accept / reap / stop only) */
	struct conn *conns;
};

void coord_server_opts_init(struct coord_server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->listen = "127.0.0.1:0";
	o->max_frame = COORD_WIRE_MAX_FRAME_DEFAULT;
	o->handshake_ms = 5000;
	o->partial_ms = 10000;
	o->stop_fd = -1;
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

static int flush(struct conn *k)
{
	int r;

	if (k->w.count == 0)
		return 0;
	coord_wire_end(&k->w);
	r = coord_sock_send_all(k->fd, k->out, k->w.len);
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, COORD_WIRE_RES);
	return r;
}

static int add_result(struct conn *k, const struct coord_wire_res *res)
{
	size_t need = COORD_WIRE_HDR + COORD_WIRE_RES_FIXED + (size_t)res->len;
	int r = coord_wire_put_res(&k->w, res);

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
		coord_wire_begin(&k->w, COORD_WIRE_RES);
	}
	return coord_wire_put_res(&k->w, res);
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

	r = coord_handshake_server(&k->rd, &k->s->key, COORD_ROLE_WORKER, &task, o->handshake_ms,
				   k->peer, &err);
	if (r < 0) {
		coord_log(COORD_LOG_WARN, "refused %s", err.msg);
		if (r != -EPIPE && r != -EACCES) /* -EACCES already said so */
			coord_send_error(k->fd, r, err.msg);
		goto out;
	}
	k->env.reg = o->registry;
	k->env.worker = (int)task;
	coord_log(COORD_LOG_INFO, "%s connected as worker %u", k->peer, task);
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	coord_wire_begin(&k->w, COORD_WIRE_RES);
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
		switch (h.type) {
		case COORD_WIRE_FN_TABLE:
			r = on_fn_table(k, &h, payload);
			break;
		case COORD_WIRE_REQ:
			r = on_req(k, &h, payload);
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

int coord_worker_serve(const struct coord_server_opts *o, struct coord_error *err)
{
	struct srv s = { .o = o };
	unsigned port;
	int lfd, r;

	if (!o || !o->registry || !o->listen || o->max_frame < 4096 ||
	    o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_worker_serve: a registry, a listen "
				    "address and a max_frame of 4 KiB..1 GiB are required");
	r = coord_key_load(o->key_file, &s.key, err);
	if (r < 0)
		return r;
	r = coord_sock_listen(o->listen, &s.key, &lfd, &port, err);
	if (r < 0) {
		coord_key_wipe(&s.key);
		return r;
	}
	pthread_mutex_init(&s.lock, NULL);
	coord_log(COORD_LOG_INFO, "serving %u functions on port %u (%s)", o->registry->n, port,
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
