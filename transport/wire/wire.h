/* SPDX-License-Identifier: MIT */
/*
 * transport/wire/wire.h - coord's wire format (design.md §6), shared by the tcp
 * and rdma transports and the coord-worker / coord-ps servers.
 *
 * Everything is little-endian with explicit sizes; nothing is padded or
 * aligned (fields are read with memcpy).  A connection starts with a
 * versioned handshake and then carries length-prefixed frames, each holding
 * a batch of records:
 *
 *   frame   = header payload
 *   header  = u32 len       payload bytes after the header (<= max_frame)
 *             u16 type      enum coord_wire_type
 *             u16 flags     0 (reserved: non-zero is refused)
 *             u32 count     records in the payload
 *             u32 reserved  0
 *
 *   HELLO      client -> server   u32 magic, u16 vmin, u16 vmax, u8 role,
 *                                 u8 pad[3], u32 task, u8 nonce[32]    (count 1)
 *   HELLO_ACK  server -> client   u32 magic, u16 version, u16 status, u8 role,
 *                                 u8 pad[3], u32 task, u8 nonce[32], u8 mac[32]
 *                                 (count 1)
 *              task: the worker index this connection serves (HELLO), echoed.
 *   AUTH       client -> server   u8 mac[32]                           (count 1)
 *   FN_TABLE   coordinator -> worker: count x { u32 id, u16 len, name[len] }
 *   REQ        coordinator -> worker: count x request
 *   RES        worker -> coordinator: count x result
 *   PING/PONG  either way         u64 token                             (count 1)
 *   PS_TABLE   coordinator -> worker: count x { u32 task, u16 len, addr[len] }
 *              the ps tasks' "host:port" (len < 256), sent after FN_TABLE
 *   VAR_REQ    worker or coordinator -> ps: count x var request
 *   VAR_RES    ps -> worker or coordinator: count x var result
 *   ERROR      either way         i32 code, u16 len, msg[len]  then the sender
 *                                 closes (count 1)
 *   CANCEL     coordinator -> worker: u32 gen (count 1): an error was taken
 *              (S3): requests of a generation before @gen (serial-number
 *              order, RFC 1982) that have not started are not run; each is
 *              answered with code COORD_ECANCELLED and cause
 *              COORD_ECANCELLED ("not started"), the only pair that means so.
 *              It applies to requests sent before it as well as after: a
 *              worker may read ahead for it while a long closure runs.
 *              A worker may also answer a request it has not started with
 *              code COORD_ECANCELLED and cause COORD_WIRE_RETURNED
 *              ("returned"): it was queued behind a closure that ran long,
 *              and the worker gives it back unstarted for the coordinator
 *              to place elsewhere (transport/server/srv_take.c); it
 *              never runs there.  Only to a coordinator whose greeting
 *              had a PING of token COORD_WIRE_PING_TAKE_BACK.
 *   VAR_SYNC   worker or coordinator -> ps: u64 seq, u64 seen, u32 window_ms,
 *              u32 hb_ms (count 1): a ps client's give-up clock
 *              (transport/psclient/ps_conn.c "Give-up"): the ps answers
 *              PONG with token @seq and notes when; a VAR_REQ after it is
 *              applied only if it starts less than @window_ms after the ps
 *              sent the PONG of @seen (0: the connection's accept), else it
 *              is answered COORD_ETIMEDOUT, not applied.  @hb_ms: the
 *              client's ping interval (a keepalive hint, tcp_pool.c P5).
 *              Sent first on every connection of a client that uses it, and
 *              then every ping interval, over tcp and rdma; a connection
 *              without one is never judged (older clients).
 *   PS_OPTS    coordinator -> worker: u32 timeout_ms, u32 hb_ms, u32 misses,
 *              u32 reserved, u64 session (count 1), before PS_TABLE: the
 *              coordinator's ps_timeout_ms, heartbeat_ms and
 *              heartbeat_misses, which the worker's client of the ps tasks
 *              uses too, and its session (a random number, never 0; 0:
 *              none), which keys its closures' updates (var request ONCE).
 *   PW_FREE    coordinator -> worker: count x { u64 uid }: per-worker
 *              resources whose last handle was put (S9); the worker destroys
 *              its component of each, after every REQ before this frame and
 *              before every REQ after it.  A uid it never made is ignored.
 *
 *   request = u64 closure_id, u32 attempt, u32 fn, u32 args_len, u16 npw,
 *             u16 flags, u32 gen (the low 32 bits of the closure's
 *             cancellation generation, S3: see CANCEL),
 *             [flags & ID: u64 rv_id],
 *             npw x { u64 uid, u32 creator, u32 len, bytes[len] },
 *             bytes[args_len],
 *             [flags & INPUTS: u32 nin (>= 1), nin x { u32 len, bytes[len] }]
 *             flags: COORD_WIRE_REQ_INPUTS (0x1) "inputs follow": the values
 *             of the closure's RemoteValue inputs (B1), in order;
 *             COORD_WIRE_REQ_ID (0x2) "the closure's own id follows": the
 *             id of its RemoteValue (coord_rv_id()), which the function
 *             sees as coord_ctx_closure() (B8).  closure_id is the sender's
 *             handle for the result (the coordinator's slot, conn.h), which
 *             the result echoes; without ID it is also the closure's id.
 *             Any other bit is refused, and INPUTS with nin == 0 and ID
 *             with rv_id == 0 too (canonical form).
 *   result  = u64 closure_id, u32 attempt, i32 code, i32 cause, u32 len,
 *             bytes[len]          (the value when code == 0, else the message)
 *             cause: the error's typed cause when code != 0; when code == 0,
 *             1 + the call's run time on the worker in ns, saturated at
 *             INT32_MAX (0: not reported).  The coordinator places closures
 *             by it (transport/tcp/tcp.c, "Placement"); older peers send and
 *             ignore 0, so the record's layout is unchanged.
 *   var request = u64 rid, u16 op, u16 name_len, u32 var, u32 tag, u64 off,
 *             u64 n, u32 data_len,
 *             [op & ONCE: u64 session, u64 closure, u32 seq],
 *             name[name_len], data[data_len]
 *             (tag: the handle's run tag for an op on a variable, checked
 *             by the ps; 0 for the others: runtime/ps/ps.h)
 *             op: the opcode (ps.h) in the low 15 bits; COORD_WIRE_VREQ_ONCE
 *             (0x8000) "a closure's key follows": an update (assign,
 *             assign_add, scatter_add) made by closure @closure
 *             (coord_ctx_closure(), B8) of the coordinator whose PS_OPTS
 *             named @session, its @seq-th update (1, 2, ...): the ps applies
 *             it at most once however often the closure runs
 *             (runtime/ps/ps_once.c; it keys only those three ops and runs
 *             any other as without).  ONCE with session or seq 0 is
 *             refused (canonical form).
 *   var result  = u64 rid, i32 code, u32 len, bytes[len]
 *             (rid echoed; the op's result bytes when code == 0, else the
 *             message; the meaning of each op's fields: runtime/ps/ps.h)
 *
 * Decoding is zero-copy: decoded records point into the caller's buffer.
 * Every length, count and id is checked against the bytes present before it
 * is used; a frame whose records do not exactly fill its payload is refused.
 * Nothing here allocates, blocks or keeps state between calls: safe from
 * any thread on distinct buffers.
 */
#ifndef COORD_TRANSPORT_WIRE_H
#define COORD_TRANSPORT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/coord.h>

#include "runtime/util/util.h"

#define COORD_WIRE_MAGIC 0x44524f43u /* "CORD" */
/* 2: coord's error codes in their own range (coord/error.h), the var
 * request's tag; a version-1 peer (codes that aliased errno values) is
 * refused at the handshake, so no code is read with the other numbering.
 * 3: the var request's closure key (ONCE) and PS_OPTS's session; a
 * version-2 peer is refused (its PS_OPTS is shorter, and a version-2 ps
 * would not keep an update to at most once). */
#define COORD_WIRE_VERSION 3
#define COORD_WIRE_HDR 16
#define COORD_WIRE_NONCE 32
#define COORD_WIRE_MAC 32
#define COORD_WIRE_MAX_FRAME_DEFAULT (16u << 20)
#define COORD_WIRE_MAX_FRAME_LIMIT COORD_MAX_FRAME_LIMIT
#define COORD_WIRE_REQ_FIXED 28	   /* request bytes before pw refs and args */
#define COORD_WIRE_REQ_INPUTS 0x1u /* request flag: inputs follow (B1) */
#define COORD_WIRE_REQ_ID 0x2u	   /* request flag: the closure's id follows (B8) */
#define COORD_WIRE_PW_FIXED 16
#define COORD_WIRE_RES_FIXED 24
#define COORD_WIRE_VREQ_FIXED 40
#define COORD_WIRE_VREQ_ONCE 0x8000u /* var request op flag: a closure's key follows */
#define COORD_WIRE_VREQ_KEY 20	     /* its bytes: u64 session, u64 closure, u32 seq */
#define COORD_WIRE_PS_OPTS_LEN 24
#define COORD_WIRE_VRES_FIXED 16
#define COORD_WIRE_ADDR_MAX 256 /* PS_TABLE address bytes, exclusive */
/* The largest frame either side accepts before the handshake is done
 * (HELLO, HELLO_ACK, AUTH, an ERROR saying why): checked from the header,
 * so an unauthenticated peer never makes a buffer grow past it. */
#define COORD_WIRE_HS_MAX_FRAME 4096u

enum coord_wire_type {
	COORD_WIRE_HELLO = 1,
	COORD_WIRE_HELLO_ACK = 2,
	COORD_WIRE_AUTH = 3,
	COORD_WIRE_FN_TABLE = 4,
	COORD_WIRE_REQ = 5,
	COORD_WIRE_RES = 6,
	COORD_WIRE_PING = 7,
	COORD_WIRE_PONG = 8,
	COORD_WIRE_ERROR = 9,
	COORD_WIRE_PS_TABLE = 10,
	COORD_WIRE_VAR_REQ = 11,
	COORD_WIRE_VAR_RES = 12,
	COORD_WIRE_PW_FREE = 13,
	COORD_WIRE_CANCEL = 14,
	COORD_WIRE_VAR_SYNC = 15,
	COORD_WIRE_PS_OPTS = 16,
	COORD_WIRE_TYPE_MAX = 16,
};

enum coord_wire_role {
	COORD_ROLE_COORDINATOR = 1,
	COORD_ROLE_WORKER = 2,
	COORD_ROLE_PS = 3,
};

/* HELLO_ACK status */
enum {
	COORD_WIRE_OK = 0,
	COORD_WIRE_BAD_VERSION = 1,
	COORD_WIRE_BAD_ROLE = 2,
};

struct coord_wire_hdr {
	uint32_t len;
	uint16_t type;
	uint16_t flags;
	uint32_t count;
};

struct coord_wire_pw {
	uint64_t uid;
	uint32_t creator;
	uint32_t len;
	const void *args;
};

struct coord_wire_req {
	uint64_t closure_id;
	/* The closure's own id (B8), if it is not closure_id; 0: none (the
	 * ID flag is written and read from this). */
	uint64_t rv_id;
	uint32_t gen; /* the closure's generation, low 32 bits (S3) */
	uint32_t attempt;
	uint32_t fn;
	uint32_t len;
	uint16_t npw;
	const void *args;
	struct coord_wire_pw pw[COORD_MAX_PW];
	/*
	 * Inputs (B1): @nin values.  Decoded: @in points at the first of
	 * them in the payload (nin x { u32 len, bytes }, checked), @in_len
	 * bytes in all; read them with coord_wire_input().  Encoding: @in_get
	 * (if set) gives value i of @in_src, and @in_len must be what
	 * coord_wire_req_set_inputs() computed; else @in/@in_len are copied.
	 */
	uint32_t nin;
	const void *in;
	size_t in_len;
	coord_input_get_t in_get;
	const void *in_src;
};

struct coord_wire_res {
	uint64_t closure_id;
	uint32_t attempt;
	int32_t code;
	int32_t cause;
	uint32_t len;
	const void *data;
};

/* A result's cause with code COORD_ECANCELLED: returned, not started (see
 * CANCEL): in coord's range, and no code of coord's (coord/error.h), so no
 * real cause reads as it. */
#define COORD_WIRE_RETURNED (-10098)

/* The token of the PING a coordinator that takes closures back (its
 * workers may answer "returned", see CANCEL) sends in its greeting; outside
 * the heartbeat tokens (1 .. 3600000 ms), so an older worker only answers
 * its PONG (transport/server/srv_take.c T5). */
#define COORD_WIRE_PING_TAKE_BACK (1ull << 62)

/* Was @r returned unstarted (take-back)? */
static inline bool coord_wire_returned(const struct coord_wire_res *r)
{
	return r->code == COORD_ECANCELLED && r->cause == COORD_WIRE_RETURNED;
}

/* A successful result's run time, as its cause field carries it (see above). */
static inline int32_t coord_wire_run_ns_enc(uint64_t ns)
{
	return ns >= (uint64_t)INT32_MAX - 1 ? INT32_MAX : (int32_t)ns + 1;
}

/* The run time of a successful result @r in ns, or UINT32_MAX if not reported. */
static inline uint32_t coord_wire_run_ns(const struct coord_wire_res *r)
{
	return r->code == 0 && r->cause > 0 ? (uint32_t)r->cause - 1 : UINT32_MAX;
}

struct coord_wire_vreq {
	uint64_t rid;
	uint16_t op;
	uint16_t name_len;
	uint32_t var;
	uint32_t tag;
	uint64_t off;
	uint64_t n;
	uint32_t len;
	const char *name; /* not NUL-terminated */
	const void *data;
	/* Encoder only: the last @len2 of the @len data bytes come from
	 * @data2 (the first len - len2 from @data).  The decoder sets 0. */
	const void *data2;
	uint32_t len2;
	/* The closure's key (ONCE above) when @seq != 0; @op never has the
	 * flag (the encoder sets it from @seq, the decoder clears it). */
	uint64_t session, closure;
	uint32_t seq;
};

struct coord_wire_vres {
	uint64_t rid;
	int32_t code;
	uint32_t len;
	const void *data;
};

/* VAR_SYNC (above). */
struct coord_wire_sync {
	uint64_t seq;
	uint64_t seen;
	uint32_t window_ms;
	uint32_t hb_ms;
};

/* PS_OPTS (above). */
struct coord_wire_ps_opts {
	uint32_t timeout_ms;
	uint32_t hb_ms;
	uint32_t misses;
	uint64_t session;
};

struct coord_wire_hello {
	uint32_t magic;
	uint16_t vmin, vmax; /* HELLO; in HELLO_ACK vmin is the chosen version */
	uint16_t status;     /* HELLO_ACK only */
	uint8_t role;
	uint32_t task;
	uint8_t nonce[COORD_WIRE_NONCE];
	uint8_t mac[COORD_WIRE_MAC]; /* HELLO_ACK only */
};

/*
 * coord_wire_parse_hdr() - check and decode a frame header.
 * @buf/@avail: the bytes received so far.
 * @max_frame:  the largest payload this side accepts.
 *
 * Return: 0 (@h filled; the frame is complete when avail >= 16 + h->len);
 * -EAGAIN fewer than 16 bytes yet; -EMSGSIZE payload over @max_frame;
 * -EPROTO unknown type, non-zero flags or reserved field, or a count that
 * cannot fit in the payload.
 */
COORD_PROV int coord_wire_parse_hdr(const void *buf, size_t avail, uint32_t max_frame,
				    struct coord_wire_hdr *h);

/* Iterating the records of one complete frame's payload. */
struct coord_wire_iter {
	const uint8_t *p, *end;
	uint32_t left; /* records still expected */
};

COORD_HIDDEN void coord_wire_iter_init(struct coord_wire_iter *it, const struct coord_wire_hdr *h,
				       const void *payload);

/*
 * coord_wire_next_req() / _res() / _fn() - the next record.
 * Return: 1 one decoded; 0 the payload is exactly used up (the end);
 * -EPROTO a record runs past the payload, bytes are left over after the
 * last record, too many per-worker refs, a non-zero reserved field.
 */
COORD_HIDDEN int coord_wire_next_req(struct coord_wire_iter *it, struct coord_wire_req *r);
COORD_HIDDEN int coord_wire_next_res(struct coord_wire_iter *it, struct coord_wire_res *r);
COORD_HIDDEN int coord_wire_next_fn(struct coord_wire_iter *it, uint32_t *id, const char **name,
				    uint16_t *len);
COORD_HIDDEN int coord_wire_next_addr(struct coord_wire_iter *it, uint32_t *task, const char **addr,
				      uint16_t *len);
COORD_HIDDEN int coord_wire_next_vreq(struct coord_wire_iter *it, struct coord_wire_vreq *r);
COORD_HIDDEN int coord_wire_next_vres(struct coord_wire_iter *it, struct coord_wire_vres *r);
/* A PW_FREE record: one resource's uid. */
COORD_HIDDEN int coord_wire_next_uid(struct coord_wire_iter *it, uint64_t *uid);

/* Single-record frames. -EPROTO on a bad size; -EPROTONOSUPPORT bad magic. */
COORD_HIDDEN int coord_wire_get_hello(const struct coord_wire_hdr *h, const void *payload,
				      struct coord_wire_hello *out);
COORD_HIDDEN int coord_wire_get_auth(const struct coord_wire_hdr *h, const void *payload,
				     uint8_t mac[COORD_WIRE_MAC]);
COORD_HIDDEN int coord_wire_get_ping(const struct coord_wire_hdr *h, const void *payload,
				     uint64_t *token);
COORD_PROV int coord_wire_get_cancel(const struct coord_wire_hdr *h, const void *payload,
				     uint32_t *gen);
COORD_HIDDEN int coord_wire_get_error(const struct coord_wire_hdr *h, const void *payload,
				      int32_t *code, const char **msg, uint16_t *len);
COORD_HIDDEN int coord_wire_get_sync(const struct coord_wire_hdr *h, const void *payload,
				     struct coord_wire_sync *s);
COORD_HIDDEN int coord_wire_get_ps_opts(const struct coord_wire_hdr *h, const void *payload,
					struct coord_wire_ps_opts *o);

/*
 * Encoding into a caller's buffer: begin a frame, add records until one
 * returns -ENOSPC (send the frame, begin another), end it.
 */
struct coord_wire_writer {
	uint8_t *buf;
	size_t cap, len;
	size_t frame; /* offset of the open frame's header */
	uint32_t count;
	uint16_t type;
};

COORD_PROV void coord_wire_writer_init(struct coord_wire_writer *w, void *buf, size_t cap);
/* Open a frame of @type at the end of the buffer; -ENOSPC if no header fits. */
COORD_HIDDEN int coord_wire_begin(struct coord_wire_writer *w, uint16_t type);
/* Close the open frame: write its length and count. */
COORD_PROV void coord_wire_end(struct coord_wire_writer *w);
/* The same, for a frame whose last @ext bytes are not in the buffer (they
 * are written from elsewhere right after it: coord_wire_put_vreq_head()). */
COORD_HIDDEN void coord_wire_end_ext(struct coord_wire_writer *w, size_t ext);

COORD_HIDDEN size_t coord_wire_req_size(const struct coord_wire_req *r);
/* coord_wire_req_set_inputs() - @r carries the @nin values @get(@src, i)
 * (B1); sets nin, in_get, in_src and in_len. */
COORD_HIDDEN void coord_wire_req_set_inputs(struct coord_wire_req *r, uint32_t nin,
					    coord_input_get_t get, const void *src);
/* coord_wire_input() - value @i of a decoded request's inputs (@src = its
 * @in), a coord_input_get_t: O(1) when read in order through @cur. */
COORD_HIDDEN const void *coord_wire_input(const void *src, uint32_t i, uint32_t *len,
					  struct coord_in_cursor *cur);
COORD_HIDDEN int coord_wire_put_req(struct coord_wire_writer *w, const struct coord_wire_req *r);
COORD_HIDDEN int coord_wire_put_res(struct coord_wire_writer *w, const struct coord_wire_res *r);
COORD_HIDDEN int coord_wire_put_fn(struct coord_wire_writer *w, uint32_t id, const char *name);
/* -EINVAL for an empty address or one of COORD_WIRE_ADDR_MAX bytes or more. */
COORD_HIDDEN int coord_wire_put_addr(struct coord_wire_writer *w, uint32_t task, const char *addr);
COORD_HIDDEN size_t coord_wire_vreq_size(const struct coord_wire_vreq *r);
COORD_HIDDEN int coord_wire_put_vreq(struct coord_wire_writer *w, const struct coord_wire_vreq *r);
/* A request without its data (r->len bytes the caller sends after it). */
COORD_HIDDEN int coord_wire_put_vreq_head(struct coord_wire_writer *w,
					  const struct coord_wire_vreq *r);
COORD_HIDDEN int coord_wire_put_vres(struct coord_wire_writer *w, const struct coord_wire_vres *r);
/* A result without its data (r->len bytes the caller sends after it). */
COORD_HIDDEN int coord_wire_put_vres_head(struct coord_wire_writer *w,
					  const struct coord_wire_vres *r);
COORD_HIDDEN int coord_wire_put_uid(struct coord_wire_writer *w, uint64_t uid);
/* Whole single-record frames (begin + record + end). */
COORD_HIDDEN int coord_wire_put_hello(struct coord_wire_writer *w, uint16_t type,
				      const struct coord_wire_hello *h);
COORD_HIDDEN int coord_wire_put_auth(struct coord_wire_writer *w,
				     const uint8_t mac[COORD_WIRE_MAC]);
COORD_HIDDEN int coord_wire_put_ping(struct coord_wire_writer *w, uint16_t type, uint64_t token);
COORD_HIDDEN int coord_wire_put_cancel(struct coord_wire_writer *w, uint32_t gen);
COORD_HIDDEN int coord_wire_put_sync(struct coord_wire_writer *w, const struct coord_wire_sync *s);
COORD_HIDDEN int coord_wire_put_ps_opts(struct coord_wire_writer *w,
					const struct coord_wire_ps_opts *o);
/* Is request generation @gen before @min (a CANCEL's), in serial order? */
static inline int coord_wire_gen_before(uint32_t gen, uint32_t min)
{
	return (int32_t)(gen - min) < 0;
}
COORD_HIDDEN int coord_wire_put_error(struct coord_wire_writer *w, int32_t code, const char *msg);

/* coord_wire_type_name() - "REQ", ... or "?" for logs. */
COORD_PROV const char *coord_wire_type_name(uint16_t type);

#endif /* COORD_TRANSPORT_WIRE_H */
