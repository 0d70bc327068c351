/* SPDX-License-Identifier: MIT */
/*
 * transport/wire/sock.h - blocking socket helpers shared by the servers and the
 * tcp transport's connection set-up: addresses, listen/connect, a frame
 * reader with deadlines, and the connection handshake.
 *
 * Handshake (frames of wire.h), client C, server S, cluster key K:
 *   C -> S  HELLO     { versions, role, task, Nc }
 *   S -> C  HELLO_ACK { version, status, role, task, Ns, MAC_K('S', Nc, Ns) }
 *   C -> S  AUTH      { MAC_K('C', Ns, Nc) }   (zeros if S's proof was wrong)
 * With no key on a side its MACs are zeros and it accepts only zeros: a
 * keyed and an unkeyed peer never talk.  Every step has a deadline; a
 * refusal is logged with the peer's address and the reason.  Frames of the
 * handshake may not exceed COORD_WIRE_HS_MAX_FRAME (wire.h).
 */
#ifndef COORD_TRANSPORT_SOCK_H
#define COORD_TRANSPORT_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <coord/error.h>

#include "transport/wire/auth.h"
#include "transport/wire/wire.h"

/* coord_sock_addr() - parse "host:port" (IPv4, [IPv6] or a name). */
COORD_PROV int coord_sock_addr(const char *hostport, struct sockaddr_storage *ss, socklen_t *len,
			       struct coord_error *err);
/* coord_sock_name() - "host:port" of @sa into @buf for logs. */
COORD_PROV const char *coord_sock_name(const struct sockaddr *sa, socklen_t len, char *buf,
				       size_t cap);
/* coord_sock_listen() - bind and listen on @hostport; *@port gets the bound
 * port.  Refuses a non-loopback address without a key (B5). */
COORD_HIDDEN int coord_sock_listen(const char *hostport, const struct coord_key *key, int *fd,
				   unsigned *port, struct coord_error *err);
/* coord_sock_connect() - connect to @hostport within @timeout_ms; TCP_NODELAY. */
COORD_HIDDEN int coord_sock_connect(const char *hostport, int timeout_ms, int *fd,
				    struct coord_error *err);
/* coord_sock_send_all() - write all of @buf; 0 or -errno. */
COORD_HIDDEN int coord_sock_send_all(int fd, const void *buf, size_t len);
/* coord_sock_sendv_all() - write all of @iov[0..@n) (advanced in place);
 * 0 or -errno. */
struct iovec;
COORD_HIDDEN int coord_sock_sendv_all(int fd, struct iovec *iov, unsigned n);

/*
 * Sending @hlen bytes at @head then @len bytes at @src, where @src may
 * change once coord_sock_stream_start() returns (a variable whose locks the
 * caller holds only until then): start sends from @src, waiting for room
 * in the socket, for at most @budget_ns; then it copies what is left of
 * @src into @tail (kept, grown to @len); finish sends what is left
 * (blocking), from @head and @tail.  Start returns 0, -ENOMEM (no @tail:
 * nothing sent) or -errno; finish 0 or -errno.
 */
struct coord_sock_stream {
	const uint8_t *head;
	size_t hlen, len;
	size_t sent; /* bytes of head + src sent */
	size_t from; /* src[from, len) is copied into tail[from, len) */
	uint8_t *tail;
	size_t tailcap;
};
COORD_HIDDEN int coord_sock_stream_start(int fd, struct coord_sock_stream *st, const void *head,
					 size_t hlen, const void *src, size_t len,
					 uint64_t budget_ns);
COORD_HIDDEN int coord_sock_stream_finish(int fd, struct coord_sock_stream *st);

/* Reads frames from a blocking socket into a buffer that grows to fit. */
struct coord_frame_reader {
	int fd;
	uint32_t max_frame;
	uint8_t *buf;
	size_t cap, len, off; /* bytes [off, len) are unread */
	/* when coord_frame_try_read() last found the socket empty (a server's
	 * look for a CANCEL behind a long batch, srv_proto.h io.peek) */
	uint64_t drained_ns;
	uint64_t rx_total; /* bytes received, ever (a look knows what is new) */
	/* 0, or: coord_frame_read() returns a frame whose payload is this
	 * long or longer after its header only (payload NULL); the caller
	 * then reads the payload with coord_frame_read_into(), where it wants
	 * it, before the next frame */
	uint32_t big;
	int rcvtimeo_ms; /* the socket's SO_RCVTIMEO as coord_frame_read_into() set it */
};

/* coord_frame_reader_init() - a reader of @fd, frames up to @max_frame, a
 * 64 KiB buffer to start.  0 or -ENOMEM. */
COORD_HIDDEN int coord_frame_reader_init(struct coord_frame_reader *rd, int fd, uint32_t max_frame);
/* coord_frame_reader_init_cap() - the same with a buffer of @cap bytes to
 * start (a server's handshake: a few hundred bytes, and frames up to
 * COORD_WIRE_HS_MAX_FRAME, so a peer not yet authenticated holds little). */
COORD_HIDDEN int coord_frame_reader_init_cap(struct coord_frame_reader *rd, int fd,
					     uint32_t max_frame, size_t cap);
/* coord_frame_reader_open() - the handshake is done: frames up to
 * @max_frame from now, a buffer of at least @cap bytes; what is buffered
 * stays.  0 or -ENOMEM. */
COORD_HIDDEN int coord_frame_reader_open(struct coord_frame_reader *rd, uint32_t max_frame,
					 size_t cap);
COORD_HIDDEN void coord_frame_reader_fini(struct coord_frame_reader *rd);
/*
 * coord_frame_read() - the next whole frame.  @idle_ms bounds the wait for
 * its first byte (-1 forever); @partial_ms bounds the wait for the rest
 * once it started (a peer that sends half a frame and stops).  @payload
 * points into the reader's buffer until the next call.
 * Return: 0; -ETIMEDOUT; -EPIPE peer closed; -EPROTO / -EMSGSIZE bad header;
 * another -errno from the socket.
 */
COORD_HIDDEN int coord_frame_read(struct coord_frame_reader *rd, int idle_ms, int partial_ms,
				  struct coord_wire_hdr *h, const uint8_t **payload);
/*
 * coord_frame_read_into() - the next @n bytes of a frame whose payload
 * coord_frame_read() left unread (rd->big), into @dst (NULL: dropped):
 * what is buffered, then straight from the socket: into @dst, one
 * blocking recv(MSG_WAITALL) as a plain program would (the kernel wakes it
 * as data comes, no poll in between; SO_RCVTIMEO is @partial_ms, a
 * blocking read being the reader's own).  @partial_ms bounds each wait
 * for more.  Return: 0; -ETIMEDOUT; -EPIPE; another -errno.
 */
COORD_HIDDEN int coord_frame_read_into(struct coord_frame_reader *rd, void *dst, size_t n,
				       int partial_ms);

/**
 * struct coord_frame_io - what the handshake needs of a connection, so that
 * the same code runs over a socket (coord_frame_io_sock()) and over an RDMA
 * channel (transport/rdma/rdma_chan.h).
 * @ctx:   the connection, passed to both callbacks.
 * @read:  the next whole frame, with coord_frame_read()'s contract.
 * @write: send @len bytes of whole frames; 0 or -errno.
 */
struct coord_frame_io {
	void *ctx;
	int (*read)(void *ctx, int idle_ms, int partial_ms, struct coord_wire_hdr *h,
		    const uint8_t **payload);
	int (*write)(void *ctx, const void *buf, size_t len);
};

/**
 * coord_frame_io_sock() - a frame I/O over @rd's blocking socket.
 * @io: filled in; it borrows @rd, which must outlive its use.
 * @rd: an initialised frame reader.
 */
COORD_HIDDEN void coord_frame_io_sock(struct coord_frame_io *io, struct coord_frame_reader *rd);

/**
 * coord_handshake_client_io() - coord_handshake_client() over any frame I/O.
 * @io: the connection (borrowed for the call).
 * The other parameters and the return value: coord_handshake_client().
 */
COORD_PROV int coord_handshake_client_io(const struct coord_frame_io *io,
					 const struct coord_key *key, uint8_t role,
					 uint8_t server_role, uint32_t task, int timeout_ms,
					 const char *peer, struct coord_error *err);
/**
 * coord_handshake_server_io() - accept a peer over a blocking frame I/O
 * (the rdma server's channels); a worker server accepts coordinators, a ps
 * server coordinators and workers.
 * @io: the connection (borrowed for the call); @key: ours (or none);
 * @my_role: COORD_ROLE_WORKER or COORD_ROLE_PS; @task: the task the peer
 * named; @timeout_ms: for each frame; @peer: for messages.
 * Return: 0, or < 0 refused with the reason in @err (coord_hs_server_frame()).
 */
COORD_PROV int coord_handshake_server_io(const struct coord_frame_io *io,
					 const struct coord_key *key, uint8_t my_role,
					 uint32_t *task, int timeout_ms, const char *peer,
					 struct coord_error *err);
/**
 * struct coord_hs_server - the server side of the handshake as a state
 * machine, fed one frame at a time, so that an event loop can run many
 * handshakes without a thread each (tcp_server.c) and a blocking reader
 * can run one (coord_handshake_server_io()).
 * @want: the frame type expected next (HELLO, then AUTH; 0 when done).
 * @task: the task the peer named (valid once done).
 * The rest is private to sock.c.
 */
struct coord_hs_server {
	const struct coord_key *key;
	uint8_t my_role;
	uint16_t want;
	uint32_t task;
	uint8_t cnonce[COORD_WIRE_NONCE], snonce[COORD_WIRE_NONCE];
};

/* coord_hs_server_init() - a handshake of a server of @my_role holding @key
 * (borrowed; NULL or unset: no key). */
COORD_HIDDEN void coord_hs_server_init(struct coord_hs_server *hs, const struct coord_key *key,
				       uint8_t my_role);
/**
 * coord_hs_server_frame() - take the next frame of the handshake.
 * @hs: the handshake; @io: where answers go (only @io->write is used);
 * @h/@payload: the frame (borrowed for the call); @peer: for messages.
 * Return: 0 more frames are needed (@hs->want); 1 the peer is
 * authenticated (@hs->task); < 0 refused, with the reason in @err (the
 * answer the protocol gives, a refusing HELLO_ACK or an ERROR frame after a
 * wrong proof, is sent; others are the caller's to send).
 */
COORD_HIDDEN int coord_hs_server_frame(struct coord_hs_server *hs, const struct coord_frame_io *io,
				       const struct coord_wire_hdr *h, const uint8_t *payload,
				       const char *peer, struct coord_error *err);
/* coord_handshake_read_error() - the message for a read that failed with
 * @r (-ETIMEDOUT: no frame of @type within @timeout_ms) in a handshake with
 * @peer; returns @r. */
COORD_HIDDEN int coord_handshake_read_error(int r, uint16_t type, int timeout_ms, const char *peer,
					    struct coord_error *err);

/**
 * coord_send_error_io() - best effort: an ERROR frame saying why we close.
 * @io: the connection; @code/@msg: the frame's contents (@msg cut at 255 bytes).
 */
COORD_PROV void coord_send_error_io(const struct coord_frame_io *io, int code, const char *msg);

/*
 * coord_frame_try_read() - the next whole frame if it can be had without
 * blocking: parses what is buffered, then recv()s (MSG_DONTWAIT) until a
 * frame is whole or the socket is empty.
 * Return: 0; -EAGAIN (no whole frame yet; bytes of a partial one may be
 * buffered: rd->len > rd->off); -EPIPE peer closed; -EPROTO / -EMSGSIZE bad
 * header; another -errno.
 */
COORD_HIDDEN int coord_frame_try_read(struct coord_frame_reader *rd, struct coord_wire_hdr *h,
				      const uint8_t **payload);

/*
 * coord_handshake_client() - connect as @role (a coordinator, or a worker
 * reaching a ps) to the server of @task, which must answer as @server_role.
 */
COORD_HIDDEN int coord_handshake_client(struct coord_frame_reader *rd, const struct coord_key *key,
					uint8_t role, uint8_t server_role, uint32_t task,
					int timeout_ms, const char *peer, struct coord_error *err);
/* coord_send_error() - best effort: tell the peer why we close. */
COORD_HIDDEN void coord_send_error(int fd, int code, const char *msg);

#endif /* COORD_TRANSPORT_SOCK_H */
