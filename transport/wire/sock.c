// SPDX-License-Identifier: MIT
/*
 * transport/wire/sock.c - blocking socket helpers and the handshake (sock.h).
 *
 * Frame reading: coord_frame_read() recv()s first (MSG_DONTWAIT) and poll()s
 * only when nothing is there, so a frame that is already waiting costs one
 * system call, not poll + recv.  coord_frame_try_read() is the same without
 * any wait, for the servers' event-driven pool (tcp_server.c).
 *
 * Handshake: the server side is a state machine fed one frame at a time
 * (coord_hs_server_frame()), so the tcp server's pool runs thousands at
 * once without a thread each, and coord_handshake_server_io() is the same
 * machine over a blocking read.  Until the peer is proven, either side
 * takes frames of at most COORD_WIRE_HS_MAX_FRAME (4 KiB), checked from
 * the header before the reader's buffer grows.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/wire/sock.h"

int coord_sock_addr(const char *hostport, struct sockaddr_storage *ss, socklen_t *len,
		    struct coord_error *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char host[256];
	const char *colon, *h = hostport;
	size_t hl;
	int r;

	if (!hostport || !*hostport)
		return coord_seterr(err, COORD_EINVAL, "empty address");
	colon = strrchr(hostport, ':');
	if (!colon || !colon[1])
		return coord_seterr(err, COORD_EINVAL, "address '%s' has no port", hostport);
	hl = (size_t)(colon - hostport);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { /* [v6]:port */
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return coord_seterr(err, COORD_EINVAL, "address '%s' has no host", hostport);
	memcpy(host, h, hl);
	host[hl] = 0;
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r != 0 || !ai)
		return coord_seterr(err, COORD_EINVAL, "cannot resolve '%s': %s", hostport,
				    gai_strerror(r));
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

const char *coord_sock_name(const struct sockaddr *sa, socklen_t len, char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(buf, cap, "%s:%u", host, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(buf, cap, "[%s]:%u", host, port);
	} else {
		snprintf(buf, cap, "(family %d)", sa->sa_family);
	}
	return buf;
}

int coord_sock_listen(const char *hostport, const struct coord_key *key, int *fd, unsigned *port,
		      struct coord_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, s, r;

	r = coord_sock_addr(hostport, &ss, &len, err);
	if (r < 0)
		return r;
	r = coord_auth_check_bind(key, (struct sockaddr *)&ss, len, err);
	if (r < 0)
		return r;
	s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return coord_seterr(err, -errno, "socket: %s", strerror(errno));
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&ss, len) < 0 || listen(s, 1024) < 0) {
		r = -errno;
		close(s);
		return coord_seterr(err, r, "cannot listen on %s: %s", hostport, strerror(-r));
	}
	len = sizeof(ss);
	getsockname(s, (struct sockaddr *)&ss, &len);
	*port = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
					: ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	*fd = s;
	return 0;
}

int coord_sock_connect(const char *hostport, int timeout_ms, int *fd, struct coord_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct pollfd p;
	int s, r, one = 1, soerr = 0;
	socklen_t sl = sizeof(soerr);

	r = coord_sock_addr(hostport, &ss, &len, err);
	if (r < 0)
		return r;
	s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return coord_seterr(err, -errno, "socket: %s", strerror(errno));
	if (connect(s, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
		r = -errno;
		goto fail;
	}
	p.fd = s;
	p.events = POLLOUT;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		r = -ETIMEDOUT;
		goto fail;
	}
	getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
	if (soerr) {
		r = -soerr;
		goto fail;
	}
	fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*fd = s;
	return 0;
fail:
	close(s);
	return coord_seterr(err, r, "cannot connect to %s: %s", hostport, strerror(-r));
}

int coord_sock_send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int coord_sock_sendv_all(int fd, struct iovec *iov, unsigned n)
{
	while (n > 0) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = n };
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int coord_sock_stream_start(int fd, struct coord_sock_stream *st, const void *head, size_t hlen,
			    const void *src, size_t len, uint64_t budget_ns)
{
	const uint8_t *s = src;
	uint64_t now, until = coord_now_ns() + budget_ns;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int r;

	if (st->tailcap < len) {
		uint8_t *b = realloc(st->tail, len);

		if (!b)
			return -ENOMEM;
		st->tail = b;
		st->tailcap = len;
	}
	st->head = head;
	st->hlen = hlen;
	st->len = len;
	st->sent = 0;
	st->from = len;
	while (st->sent < hlen + st->from) {
		struct iovec iov[2];
		struct msghdr m = { .msg_iov = iov };
		size_t lo = st->sent > hlen ? st->sent - hlen : 0;
		ssize_t n;

		if (st->sent < hlen)
			iov[m.msg_iovlen++] = (struct iovec){ (void *)(st->head + st->sent),
							      hlen - st->sent };
		if (lo < st->from)
			iov[m.msg_iovlen++] = (struct iovec){ (void *)(s + lo), st->from - lo };
		n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		now = coord_now_ns();
		if (n > 0)
			st->sent += (size_t)n;
		else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (n > 0 || (n < 0 && errno == EINTR) || now >= until) {
			if (now < until)
				continue;
			/* the budget is spent: the rest is copied, the source let go */
			lo = st->sent > hlen ? st->sent - hlen : 0;
			memcpy(st->tail + lo, s + lo, st->from - lo);
			st->from = lo;
			break;
		}
		/* full: wait for room, at most the budget's rest */
		do
			r = poll(&p, 1, (int)((until - now) / 1000000u) + 1);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
	}
	return 0;
}

int coord_sock_stream_finish(int fd, struct coord_sock_stream *st)
{
	struct iovec iov[2];
	size_t lo = st->sent > st->hlen ? st->sent - st->hlen : 0;
	unsigned n = 0;

	if (st->sent < st->hlen)
		iov[n++] = (struct iovec){ (void *)(st->head + st->sent), st->hlen - st->sent };
	if (lo < st->from)
		lo = st->from; /* sent from the source up to there */
	if (lo < st->len)
		iov[n++] = (struct iovec){ st->tail + lo, st->len - lo };
	return n ? coord_sock_sendv_all(fd, iov, n) : 0;
}

int coord_frame_reader_init_cap(struct coord_frame_reader *rd, int fd, uint32_t max_frame,
				size_t cap)
{
	memset(rd, 0, sizeof(*rd));
	rd->fd = fd;
	rd->max_frame = max_frame;
	rd->cap = cap < COORD_WIRE_HDR ? COORD_WIRE_HDR : cap;
	rd->buf = malloc(rd->cap);
	return rd->buf ? 0 : -ENOMEM;
}

int coord_frame_reader_init(struct coord_frame_reader *rd, int fd, uint32_t max_frame)
{
	return coord_frame_reader_init_cap(rd, fd, max_frame, 64 * 1024);
}

int coord_frame_reader_open(struct coord_frame_reader *rd, uint32_t max_frame, size_t cap)
{
	rd->max_frame = max_frame;
	if (rd->cap >= cap)
		return 0;
	if (rd->off > 0) { /* what is unread moves to the front */
		memmove(rd->buf, rd->buf + rd->off, rd->len - rd->off);
		rd->len -= rd->off;
		rd->off = 0;
	}
	{
		uint8_t *b = realloc(rd->buf, cap);

		if (!b)
			return -ENOMEM;
		rd->buf = b;
		rd->cap = cap;
	}
	return 0;
}

void coord_frame_reader_fini(struct coord_frame_reader *rd)
{
	free(rd->buf);
	rd->buf = NULL;
}

/* Make room for a frame of @need bytes starting at off. */
static int reserve(struct coord_frame_reader *rd, size_t need)
{
	if (rd->off > 0 && rd->off + need > rd->cap) {
		memmove(rd->buf, rd->buf + rd->off, rd->len - rd->off);
		rd->len -= rd->off;
		rd->off = 0;
	}
	if (need > rd->cap) {
		uint8_t *b = realloc(rd->buf, need);

		if (!b)
			return -ENOMEM;
		rd->buf = b;
		rd->cap = need;
	}
	return 0;
}

/*
 * The next whole frame already in @rd's buffer: 0 (@h, @payload set);
 * -EAGAIN with *@need the bytes a whole header or frame takes; or the
 * header's error.
 */
static int take_frame(struct coord_frame_reader *rd, struct coord_wire_hdr *h,
		      const uint8_t **payload, size_t *need)
{
	size_t avail = rd->len - rd->off;
	int r = coord_wire_parse_hdr(rd->buf + rd->off, avail, rd->max_frame, h);

	*need = COORD_WIRE_HDR;
	if (r < 0)
		return r;
	if (rd->big && h->len >= rd->big) { /* the caller reads the payload */
		*payload = NULL;
		rd->off += COORD_WIRE_HDR;
		return 0;
	}
	*need = COORD_WIRE_HDR + (size_t)h->len;
	if (avail < *need)
		return -EAGAIN;
	*payload = rd->buf + rd->off + COORD_WIRE_HDR;
	rd->off += *need;
	return 0;
}

int coord_frame_read(struct coord_frame_reader *rd, int idle_ms, int partial_ms,
		     struct coord_wire_hdr *h, const uint8_t **payload)
{
	uint64_t deadline = 0;

	if (rd->off == rd->len)
		rd->off = rd->len = 0;
	for (;;) {
		size_t avail = rd->len - rd->off, need = COORD_WIRE_HDR;
		struct pollfd p = { .fd = rd->fd, .events = POLLIN };
		int r, wait;
		ssize_t n;

		r = take_frame(rd, h, payload, &need);
		if (r != -EAGAIN)
			return r;
		r = reserve(rd, need);
		if (r < 0)
			return r;
		if (avail > 0 && deadline == 0)
			deadline = coord_now_ns() + (uint64_t)partial_ms * 1000000ull;
		if (avail == 0) {
			wait = idle_ms;
		} else {
			uint64_t now = coord_now_ns();

			wait = now >= deadline ? 0 : (int)((deadline - now) / 1000000ull) + 1;
		}
		/* recv first, poll only when nothing is there: a busy peer's
		 * next frame is usually waiting already, and one syscall (not
		 * poll + recv, with poll's wake-up) reads it. */
		n = recv(rd->fd, rd->buf + rd->len, rd->cap - rd->len, MSG_DONTWAIT);
		if (n > 0) {
			rd->len += (size_t)n;
			rd->rx_total += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		do
			r = poll(&p, 1, wait);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
	}
}

int coord_frame_read_into(struct coord_frame_reader *rd, void *dst, size_t n, int partial_ms)
{
	uint8_t *d = dst;
	size_t k = rd->len - rd->off < n ? rd->len - rd->off : n;

	if (k && d)
		memcpy(d, rd->buf + rd->off, k);
	rd->off += k;
	n -= k;
	d = d ? d + k : NULL;
	if (rd->off == rd->len)
		rd->off = rd->len = 0;
	if (d && n > 0 && partial_ms > 0 && rd->rcvtimeo_ms != partial_ms) {
		struct timeval tv = { .tv_sec = partial_ms / 1000,
				      .tv_usec = partial_ms % 1000 * 1000 };

		if (setsockopt(rd->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0)
			rd->rcvtimeo_ms = partial_ms;
	}
	while (n > 0) {
		struct pollfd p = { .fd = rd->fd, .events = POLLIN };
		size_t want = d ? n : (n < rd->cap ? n : rd->cap);
		bool wait = d && partial_ms > 0 && rd->rcvtimeo_ms == partial_ms;
		ssize_t got = recv(rd->fd, d ? (void *)d : (void *)rd->buf, want,
				   wait ? MSG_WAITALL : MSG_DONTWAIT);
		int r;

		if (got < 0 && wait && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -ETIMEDOUT; /* nothing for partial_ms */

		if (got > 0) {
			rd->rx_total += (uint64_t)got;
			n -= (size_t)got;
			d = d ? d + got : NULL;
			continue;
		}
		if (got == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		do
			r = poll(&p, 1, partial_ms);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
	}
	return 0;
}

int coord_frame_try_read(struct coord_frame_reader *rd, struct coord_wire_hdr *h,
			 const uint8_t **payload)
{
	if (rd->off == rd->len)
		rd->off = rd->len = 0;
	for (;;) {
		size_t need;
		ssize_t n;
		int r = take_frame(rd, h, payload, &need);

		if (r != -EAGAIN)
			return r;
		r = reserve(rd, need);
		if (r < 0)
			return r;
		n = recv(rd->fd, rd->buf + rd->len, rd->cap - rd->len, MSG_DONTWAIT);
		if (n > 0) {
			/* Less than the room: what had arrived is all here. */
			if ((size_t)n < rd->cap - rd->len)
				rd->drained_ns = coord_now_ns();
			rd->len += (size_t)n;
			rd->rx_total += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return -EPIPE;
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK)
			rd->drained_ns = coord_now_ns();
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

/* A whole frame of @len bytes to the socket of the reader @ctx. */
static int sock_io_write(void *ctx, const void *buf, size_t len)
{
	return coord_sock_send_all(((struct coord_frame_reader *)ctx)->fd, buf, len);
}

static int sock_io_read(void *ctx, int idle_ms, int partial_ms, struct coord_wire_hdr *h,
			const uint8_t **payload)
{
	return coord_frame_read(ctx, idle_ms, partial_ms, h, payload);
}

void coord_frame_io_sock(struct coord_frame_io *io, struct coord_frame_reader *rd)
{
	io->ctx = rd;
	io->read = sock_io_read;
	io->write = sock_io_write;
}

void coord_send_error_io(const struct coord_frame_io *io, int code, const char *msg)
{
	uint8_t b[COORD_WIRE_HDR + 6 + 256];
	struct coord_wire_writer w;
	char m[256];

	snprintf(m, sizeof(m), "%s", msg);
	coord_wire_writer_init(&w, b, sizeof(b));
	if (coord_wire_put_error(&w, code, m) == 0)
		(void)io->write(io->ctx, b, w.len);
}

void coord_send_error(int fd, int code, const char *msg)
{
	struct coord_frame_reader rd = { .fd = fd };
	struct coord_frame_io io;

	coord_frame_io_sock(&io, &rd);
	coord_send_error_io(&io, code, msg);
}

static int send_frame_hello(const struct coord_frame_io *io, uint16_t type,
			    const struct coord_wire_hello *hello)
{
	uint8_t b[COORD_WIRE_HDR + 96];
	struct coord_wire_writer w;

	coord_wire_writer_init(&w, b, sizeof(b));
	if (coord_wire_put_hello(&w, type, hello) < 0)
		return -EINVAL;
	return io->write(io->ctx, b, w.len);
}

static int send_frame_auth(const struct coord_frame_io *io, const uint8_t mac[COORD_WIRE_MAC])
{
	uint8_t b[COORD_WIRE_HDR + COORD_WIRE_MAC];
	struct coord_wire_writer w;

	coord_wire_writer_init(&w, b, sizeof(b));
	if (coord_wire_put_auth(&w, mac) < 0)
		return -EINVAL;
	return io->write(io->ctx, b, w.len);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	uint8_t acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return acc == 0;
}

/* Our proof for @label over (a, b), or zeros without a key. */
static void proof(const struct coord_key *key, uint8_t label, const uint8_t *a, const uint8_t *b,
		  uint8_t mac[COORD_WIRE_MAC])
{
	if (key && key->set)
		coord_auth_mac(key, label, a, b, mac);
	else
		memset(mac, 0, COORD_WIRE_MAC);
}

/* Check the peer's proof: with a key, a valid MAC; without, zeros. */
static bool proof_ok(const struct coord_key *key, uint8_t label, const uint8_t *a, const uint8_t *b,
		     const uint8_t mac[COORD_WIRE_MAC])
{
	if (key && key->set)
		return coord_auth_verify(key, label, a, b, mac);
	return all_zero(mac, COORD_WIRE_MAC);
}

int coord_handshake_read_error(int r, uint16_t type, int timeout_ms, const char *peer,
			       struct coord_error *err)
{
	if (r == -ETIMEDOUT)
		return coord_seterr(err, r, "%s: no %s within %d ms", peer,
				    coord_wire_type_name(type), timeout_ms);
	if (r == -EMSGSIZE)
		return coord_seterr(err, r, "%s: handshake frame larger than %u bytes", peer,
				    COORD_WIRE_HS_MAX_FRAME);
	return coord_seterr(err, r, "%s: handshake failed: %s", peer, strerror(-r));
}

/* Is the frame @h of the handshake the @type expected?  0, or why not. */
static int check_frame(uint16_t type, const struct coord_wire_hdr *h, const uint8_t *payload,
		       const char *peer, struct coord_error *err)
{
	if (h->type == COORD_WIRE_ERROR) {
		int32_t code;
		const char *msg = "";
		uint16_t len = 0;

		coord_wire_get_error(h, payload, &code, &msg, &len);
		return coord_seterr(err, -ECONNREFUSED, "%s refused: %.*s", peer, (int)len, msg);
	}
	if (h->type != type)
		return coord_seterr(err, -EPROTO, "%s: expected %s, got %s", peer,
				    coord_wire_type_name(type), coord_wire_type_name(h->type));
	return 0;
}

/* Read one frame of @type within @timeout_ms, or fail with a reason. */
static int read_expect(const struct coord_frame_io *io, uint16_t type, int timeout_ms,
		       struct coord_wire_hdr *h, const uint8_t **payload, const char *peer,
		       struct coord_error *err)
{
	int r = io->read(io->ctx, timeout_ms, timeout_ms, h, payload);

	if (r < 0)
		return coord_handshake_read_error(r, type, timeout_ms, peer, err);
	return check_frame(type, h, *payload, peer, err);
}

static const char *role_name(uint8_t role)
{
	return role == COORD_ROLE_COORDINATOR ? "coordinator"
	       : role == COORD_ROLE_WORKER    ? "worker"
	       : role == COORD_ROLE_PS	      ? "ps"
					      : "peer of unknown role";
}

int coord_handshake_client_io(const struct coord_frame_io *io, const struct coord_key *key,
			      uint8_t role, uint8_t server_role, uint32_t task, int timeout_ms,
			      const char *peer, struct coord_error *err)
{
	struct coord_wire_hello hello = { .magic = COORD_WIRE_MAGIC,
					  .vmin = COORD_WIRE_VERSION,
					  .vmax = COORD_WIRE_VERSION,
					  .role = role,
					  .task = task },
				ack;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	uint8_t mac[COORD_WIRE_MAC];
	int r;

	coord_auth_nonce(hello.nonce);
	r = send_frame_hello(io, COORD_WIRE_HELLO, &hello);
	if (r < 0)
		return coord_seterr(err, r, "%s: cannot send HELLO: %s", peer, strerror(-r));
	r = read_expect(io, COORD_WIRE_HELLO_ACK, timeout_ms, &h, &payload, peer, err);
	if (r < 0)
		return r;
	r = coord_wire_get_hello(&h, payload, &ack);
	if (r < 0)
		return coord_seterr(err, r, "%s: not a coord server (bad HELLO_ACK)", peer);
	if (ack.status != COORD_WIRE_OK)
		return coord_seterr(err, -EPROTONOSUPPORT, "%s refused the connection: %s", peer,
				    ack.status == COORD_WIRE_BAD_VERSION ? "unsupported version"
									 : "wrong role");
	if (!proof_ok(key, COORD_AUTH_SERVER, hello.nonce, ack.nonce, ack.mac)) {
		memset(mac, 0, sizeof(mac)); /* never prove ourselves to an unproven peer */
		(void)send_frame_auth(io, mac);
		return coord_seterr(err, -EACCES, "%s: authentication failed: the server %s", peer,
				    key && key->set ? "does not hold our cluster key"
						    : "requires a cluster key and we have none");
	}
	proof(key, COORD_AUTH_CLIENT, ack.nonce, hello.nonce, mac);
	r = send_frame_auth(io, mac);
	if (r == 0 && (ack.role != server_role || ack.task != task))
		return coord_seterr(err, -EPROTO,
				    "%s is a %s serving task %u, not the %s of task %u we expected",
				    peer, role_name(ack.role), ack.task, role_name(server_role),
				    task);
	if (r < 0)
		return coord_seterr(err, r, "%s: cannot send AUTH: %s", peer, strerror(-r));
	return 0;
}

void coord_hs_server_init(struct coord_hs_server *hs, const struct coord_key *key, uint8_t my_role)
{
	memset(hs, 0, sizeof(*hs));
	hs->key = key;
	hs->my_role = my_role;
	hs->want = COORD_WIRE_HELLO;
}

/* HELLO: answer with HELLO_ACK (our proof), or refuse the version or role. */
static int hs_hello(struct coord_hs_server *hs, const struct coord_frame_io *io,
		    const struct coord_wire_hdr *h, const uint8_t *payload, const char *peer,
		    struct coord_error *err)
{
	struct coord_wire_hello hello, ack = { .magic = COORD_WIRE_MAGIC,
					       .vmin = COORD_WIRE_VERSION,
					       .role = hs->my_role };
	int r;

	r = coord_wire_get_hello(h, payload, &hello);
	if (r < 0)
		return coord_seterr(err, r, "%s: not a coord peer (bad HELLO)", peer);
	ack.task = hello.task;
	if (hello.vmin > COORD_WIRE_VERSION || hello.vmax < COORD_WIRE_VERSION ||
	    !(hello.role == COORD_ROLE_COORDINATOR ||
	      (hs->my_role == COORD_ROLE_PS && hello.role == COORD_ROLE_WORKER))) {
		bool ver = hello.vmin > COORD_WIRE_VERSION || hello.vmax < COORD_WIRE_VERSION;

		ack.status = ver ? COORD_WIRE_BAD_VERSION : COORD_WIRE_BAD_ROLE;
		(void)send_frame_hello(io, COORD_WIRE_HELLO_ACK, &ack);
		if (ver)
			return coord_seterr(err, -EPROTONOSUPPORT,
					    "%s: wire versions %u..%u, we speak %u", peer,
					    hello.vmin, hello.vmax, COORD_WIRE_VERSION);
		return coord_seterr(err, -EPROTO, "%s: role %u may not connect here", peer,
				    hello.role);
	}
	coord_auth_nonce(ack.nonce);
	proof(hs->key, COORD_AUTH_SERVER, hello.nonce, ack.nonce, ack.mac);
	r = send_frame_hello(io, COORD_WIRE_HELLO_ACK, &ack);
	if (r < 0)
		return coord_seterr(err, r, "%s: cannot send HELLO_ACK: %s", peer, strerror(-r));
	memcpy(hs->cnonce, hello.nonce, sizeof(hs->cnonce));
	memcpy(hs->snonce, ack.nonce, sizeof(hs->snonce));
	hs->task = hello.task;
	hs->want = COORD_WIRE_AUTH;
	return 0;
}

int coord_hs_server_frame(struct coord_hs_server *hs, const struct coord_frame_io *io,
			  const struct coord_wire_hdr *h, const uint8_t *payload, const char *peer,
			  struct coord_error *err)
{
	uint8_t mac[COORD_WIRE_MAC];
	int r = check_frame(hs->want, h, payload, peer, err);

	if (r < 0)
		return r;
	if (hs->want == COORD_WIRE_HELLO)
		return hs_hello(hs, io, h, payload, peer, err);
	if (coord_wire_get_auth(h, payload, mac) < 0)
		return coord_seterr(err, -EPROTO, "%s: bad AUTH frame", peer);
	if (!proof_ok(hs->key, COORD_AUTH_CLIENT, hs->snonce, hs->cnonce, mac)) {
		coord_send_error_io(io, -EACCES, "authentication failed");
		return coord_seterr(err, -EACCES, "%s: authentication failed: %s", peer,
				    hs->key && hs->key->set
					    ? "it does not hold the cluster key"
					    : "it sent a proof but this server has no key");
	}
	hs->want = 0;
	return 1;
}

int coord_handshake_server_io(const struct coord_frame_io *io, const struct coord_key *key,
			      uint8_t my_role, uint32_t *task, int timeout_ms, const char *peer,
			      struct coord_error *err)
{
	struct coord_hs_server hs;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	int r;

	coord_hs_server_init(&hs, key, my_role);
	do {
		r = io->read(io->ctx, timeout_ms, timeout_ms, &h, &payload);
		if (r < 0)
			return coord_handshake_read_error(r, hs.want, timeout_ms, peer, err);
		r = coord_hs_server_frame(&hs, io, &h, payload, peer, err);
	} while (r == 0);
	if (r < 0)
		return r;
	*task = hs.task;
	return 0;
}

int coord_handshake_client(struct coord_frame_reader *rd, const struct coord_key *key, uint8_t role,
			   uint8_t server_role, uint32_t task, int timeout_ms, const char *peer,
			   struct coord_error *err)
{
	struct coord_frame_io io;
	uint32_t max = rd->max_frame;
	int r;

	/* A server not yet proven gets the handshake's limit (wire.h). */
	if (rd->max_frame > COORD_WIRE_HS_MAX_FRAME)
		rd->max_frame = COORD_WIRE_HS_MAX_FRAME;
	coord_frame_io_sock(&io, rd);
	r = coord_handshake_client_io(&io, key, role, server_role, task, timeout_ms, peer, err);
	rd->max_frame = max;
	return r;
}
