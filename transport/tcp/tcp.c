// SPDX-License-Identifier: MIT
/*
 * transport/tcp/tcp.c - the tcp transport, coordinator side: workers are
 * coord-worker processes (or coord_worker_serve() in users' binaries).  A
 * backend of the connection engine (transport/engine/engine.h), which does
 * everything but move the bytes: this file moves them with io_uring, one
 * ring per event loop.
 *
 * Each connection has one receive buffer (grown to the largest frame), not
 * provided-buffer rings: a frame may span many segments and must be whole
 * before it is parsed (the result bytes are then copied once, from the
 * receive buffer into the closure); liburing 2.3's fixed buffers do not
 * apply to recv.  Sending swaps the engine's output buffer with ours: the
 * kernel has sbuf while the engine fills the next output.  A loop's sends
 * and receives go to the kernel with one io_uring_submit() a round (the
 * engine's ops->poll); it sleeps in io_uring_submit_and_wait_timeout(),
 * and its eventfd is read through the ring.  The ring is set up with
 * COOP_TASKRUN | TASKRUN_FLAG: a completion does not IPI the loop.  The
 * measurements behind these choices and the engine's corking, with what
 * was tried and dropped: docs/perf-history.md, "transport/tcp/tcp.c".
 *
 * What it keeps true: a connection's fd is replaced (re-admission) only
 * when none of its operations is still in the kernel (pending == 0), so no
 * stale completion meets the new connection; a failed connection's fd is
 * shut down at once, which completes what is pending.
 */
#include <errno.h>
#include <liburing.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/engine/engine.h"
#include "transport/wire/sock.h"

enum { OP_RECV = 0, OP_SEND = 1, OP_EFD = 2, OP_MASK = 3 };

struct tcp_conn {
	COORD_CONN_EMBED;
	int fd, admit_fd; /* admit_fd: dialled again, installed by tcp_install() */
	unsigned pending; /* submitted sqes not yet completed */
	/* receiving: bytes [0, rlen) of rbuf are unparsed */
	uint8_t *rbuf;
	size_t rcap, rlen;
	/* sending: sbuf is in the kernel's hands while sending */
	uint8_t *sbuf;
	size_t scap, slen, ssent;
	bool sending;
};

struct tcp_loop {
	struct coord_eloop l;
	struct io_uring ring;
	bool ring_ok;
	uint64_t efd_val;
};

_Static_assert(offsetof(struct tcp_conn, conn) == 0, "the engine's casts");
_Static_assert(offsetof(struct tcp_loop, l) == 0, "the engine's casts");

static inline struct tcp_conn *tk(struct coord_conn *k)
{
	return (struct tcp_conn *)k;
}

static inline struct tcp_loop *tl(struct coord_eloop *l)
{
	return (struct tcp_loop *)l;
}

/* ---- sqes ------------------------------------------------------------------------ */

static struct io_uring_sqe *get_sqe(struct tcp_loop *l, void *p, unsigned op)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) { /* full: hand what we have to the kernel and retry */
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
		if (!sqe)
			coord_die("io_uring sqe", EBUSY);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)p | op);
	return sqe;
}

static void arm_recv(struct tcp_conn *k)
{
	struct io_uring_sqe *sqe = get_sqe(tl(k->loop), k, OP_RECV);

	io_uring_prep_recv(sqe, k->fd, k->rbuf + k->rlen, k->rcap - k->rlen, 0);
	k->pending++;
}

static void arm_send(struct tcp_conn *k)
{
	struct io_uring_sqe *sqe = get_sqe(tl(k->loop), k, OP_SEND);

	io_uring_prep_send(sqe, k->fd, k->sbuf + k->ssent, k->slen - k->ssent, MSG_NOSIGNAL);
	k->pending++;
}

static void arm_efd(struct tcp_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l, l, OP_EFD);

	io_uring_prep_read(sqe, l->l.efd, &l->efd_val, sizeof(l->efd_val), 0);
}

/* ops->send: swap the filled output in and send it, unless a send runs. */
static bool tcp_send(struct coord_conn *ck)
{
	struct tcp_conn *k = tk(ck);
	uint8_t *b = k->sbuf;
	size_t cap = k->scap;

	if (k->sending)
		return false;
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	k->sbuf = k->obuf;
	k->scap = k->ocap;
	k->slen = k->ow.len;
	k->ssent = 0;
	k->obuf = b;
	k->ocap = cap;
	coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
	k->sending = true;
	arm_send(k);
	return true;
}

/* ---- completions ----------------------------------------------------------------- */

/* Parse the frame at @off of @k's receive buffer: its length, 0 if it is
 * not whole yet (the buffer grown for it), -errno if bad or failed. */
static long one_frame(struct tcp_conn *k, size_t off)
{
	uint32_t max = coord_cview(k->loop->e->c)->opts.max_frame;
	struct coord_wire_hdr h;
	size_t need;
	int r = coord_wire_parse_hdr(k->rbuf + off, k->rlen - off, max, &h);

	if (r == -EAGAIN)
		return 0;
	if (r < 0)
		return r;
	need = COORD_WIRE_HDR + (size_t)h.len;
	if (k->rlen - off >= need)
		return coord_eng_frame(&k->conn, &h, k->rbuf + off + COORD_WIRE_HDR) ? (long)need
										     : -ECANCELED;
	if (need > k->rcap) { /* a frame larger than the buffer */
		uint8_t *b;

		memmove(k->rbuf, k->rbuf + off, k->rlen - off);
		k->rlen -= off;
		b = realloc(k->rbuf, need);
		if (!b)
			return -ENOMEM;
		k->rbuf = b;
		k->rcap = need;
		return -EAGAIN; /* moved to the front */
	}
	return 0;
}

/* Parse every whole frame received on @k; then receive more. */
static void on_recv(struct tcp_conn *k, int res)
{
	size_t off = 0;
	long n;

	if (res <= 0) {
		coord_eng_fail(&k->conn, 0,
			       res == 0 ? "connection closed by the worker" : strerror(-res));
		return;
	}
	coord_eng_rx(&k->conn, coord_now_ns());
	k->rlen += (size_t)res;
	while ((n = one_frame(k, off)) > 0)
		off += (size_t)n;
	if (n == -ECANCELED)
		return; /* the engine failed it */
	if (n < 0 && n != -EAGAIN) {
		coord_eng_bad(&k->conn, (int)n);
		return;
	}
	if (n == 0) {
		memmove(k->rbuf, k->rbuf + off, k->rlen - off);
		k->rlen -= off;
	}
	arm_recv(k);
	coord_eng_flush(&k->conn); /* what the cork held back, if anything */
}

static void on_send(struct tcp_conn *k, int res)
{
	if (res < 0) {
		coord_eng_fail(&k->conn, 0, strerror(-res));
		return;
	}
	k->ssent += (size_t)res;
	if (k->ssent < k->slen) {
		arm_send(k); /* partial send: the rest */
		return;
	}
	k->sending = false;
	coord_eng_flush(&k->conn);
}

/* ops->poll: submit, then reap every completion there is. */
static bool tcp_poll(struct coord_eloop *el)
{
	struct tcp_loop *l = tl(el);
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_submit(&l->ring);
	io_uring_for_each_cqe(&l->ring, head, cqe)
	{
		uint64_t u = io_uring_cqe_get_data64(cqe);
		struct tcp_conn *k = (struct tcp_conn *)(uintptr_t)(u & ~(uint64_t)OP_MASK);

		seen++;
		if ((u & OP_MASK) == OP_EFD) {
			arm_efd(l);
			continue;
		}
		k->pending--;
		if (!k->up)
			continue;
		if ((u & OP_MASK) == OP_RECV)
			on_recv(k, cqe->res);
		else
			on_send(k, cqe->res);
	}
	io_uring_cq_advance(&l->ring, seen);
	return seen > 0;
}

static void tcp_submit(struct coord_eloop *l)
{
	io_uring_submit(&tl(l)->ring);
}

/* ops->wait: in the kernel until a completion or @deadline. */
static void tcp_wait(struct coord_eloop *el, uint64_t deadline)
{
	struct tcp_loop *l = tl(el);
	struct io_uring_cqe *cqe;

	if (deadline) {
		uint64_t now = coord_now_ns(), d = deadline > now ? deadline - now : 0;
		struct __kernel_timespec ts = { .tv_sec = (long long)(d / 1000000000ull),
						.tv_nsec = (long long)(d % 1000000000ull) };

		io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
	} else {
		io_uring_submit_and_wait(&l->ring, 1);
	}
	coord_eng_tok_wait(el); /* nobody drives a tcp loop: free */
}

/* ---- connections ----------------------------------------------------------------- */

static int tcp_dial(struct coord_conn *ck, bool again, struct coord_error *err)
{
	const struct coord_view *c = coord_cview(ck->loop->e->c);
	struct tcp_conn *k = tk(ck);
	struct coord_frame_reader rd;
	struct coord_frame_io io;
	int fd, r;

	if (!again) {
		k->fd = -1;
		k->rcap = k->scap = 64 * 1024;
		k->rbuf = malloc(k->rcap);
		k->sbuf = malloc(k->scap);
		if (!k->rbuf || !k->sbuf)
			return coord_seterr(err, COORD_ENOMEM, "no memory for a connection");
	}
	r = coord_sock_connect(k->peer, c->opts.connect_timeout_ms, &fd, err);
	if (r < 0)
		return r;
	r = coord_frame_reader_init(&rd, fd, c->opts.max_frame);
	if (r < 0) {
		close(fd);
		return coord_seterr(err, r, "no memory");
	}
	coord_frame_io_sock(&io, &rd);
	r = coord_eng_greet(ck, &io, err);
	coord_frame_reader_fini(&rd);
	if (r < 0)
		close(fd);
	else if (again)
		k->admit_fd = fd;
	else
		k->fd = fd;
	return r;
}

/* ops->install: the new fd once the old one's last completions are in. */
static bool tcp_install(struct coord_conn *ck)
{
	struct tcp_conn *k = tk(ck);

	if (k->pending)
		return false;
	close(k->fd);
	k->fd = k->admit_fd;
	k->rlen = 0;
	k->sending = false;
	k->slen = k->ssent = 0;
	arm_recv(k);
	return true;
}

static void tcp_drop(struct coord_conn *k)
{
	close(tk(k)->admit_fd);
}

static void tcp_down(struct coord_conn *ck, int code, const char *why)
{
	struct tcp_conn *k = tk(ck);

	if (code < 0)
		coord_send_error(k->fd, code, why);
	shutdown(k->fd, SHUT_RDWR); /* pending recv/send complete now */
}

static void tcp_close(struct coord_conn *ck, bool bye)
{
	struct tcp_conn *k = tk(ck);

	if (bye && k->fd >= 0)
		coord_send_error(k->fd, 0, "coordinator shutting down");
	if (k->fd >= 0)
		close(k->fd);
	free(k->rbuf);
	free(k->sbuf);
}

/* ---- loops ----------------------------------------------------------------------- */

static int tcp_loop_init(struct coord_eloop *el, unsigned nconns, struct coord_error *err)
{
	struct tcp_loop *l = tl(el);
	unsigned entries = 8;
	int r;

	while (entries < 2 * nconns + 8)
		entries <<= 1;
	el->efd = eventfd(0, EFD_CLOEXEC);
	if (el->efd < 0)
		return coord_seterr(err, -errno, "eventfd: %s", strerror(errno));
	/* COOP_TASKRUN: a completion does not interrupt the loop with an IPI
	 * (costly on a VM); its task work runs at the loop's next
	 * io_uring_enter(), which TASKRUN_FLAG makes liburing's submit call
	 * when work is pending (docs/perf-history.md).  Older kernels: plain. */
	r = io_uring_queue_init(entries, &l->ring,
				IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
	if (r == -EINVAL)
		r = io_uring_queue_init(entries, &l->ring, 0);
	if (r < 0)
		return coord_seterr(err, r, "io_uring_queue_init: %s", strerror(-r));
	l->ring_ok = true;
	return 0;
}

static void tcp_loop_fini(struct coord_eloop *l)
{
	if (tl(l)->ring_ok)
		io_uring_queue_exit(&tl(l)->ring);
}

static void tcp_loop_start(struct coord_eloop *l)
{
	arm_efd(tl(l));
	for (unsigned i = 0; i < l->place.nconns; i++)
		arm_recv(tk(l->place.conns[i]));
	io_uring_submit(&tl(l)->ring);
}

static const struct coord_eng_ops tcp_ops = {
	.name = "tcp",
	.conn_size = sizeof(struct tcp_conn),
	.loop_size = sizeof(struct tcp_loop),
	.cork_frames = 2,
	.loop_init = tcp_loop_init,
	.loop_fini = tcp_loop_fini,
	.loop_start = tcp_loop_start,
	.dial = tcp_dial,
	.install = tcp_install,
	.drop = tcp_drop,
	.down = tcp_down,
	.close = tcp_close,
	.send = tcp_send,
	.submit = tcp_submit,
	.poll = tcp_poll,
	.wait = tcp_wait,
};

static int tcp_start(struct coord *c, struct coord_error *err)
{
	return coord_eng_start(c, &tcp_ops, err);
}

const struct coord_tp_ops coord_tp_tcp = {
	.name = "tcp",
	COORD_ENG_TP_OPS(tcp_start),
	.wake = coord_eng_wake,
};
