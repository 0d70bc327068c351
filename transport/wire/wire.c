// SPDX-License-Identifier: MIT
/*
 * transport/wire/wire.c - encode and decode coord frames (format in wire.h).
 *
 * The decoder trusts nothing: every read goes through rd(), which checks the
 * bytes left before it copies; a record count is checked against the payload
 * size before any record is read (so a huge count cannot make us loop); and
 * a frame must be used up exactly by its records.  Canonical form: decoding
 * then re-encoding a valid frame gives the same bytes (the fuzzer checks it).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "transport/wire/wire.h"

#define HELLO_LEN 48
#define HELLO_ACK_LEN 80
#define ERROR_FIXED 6
#define FN_FIXED 6

/* ---- little-endian helpers ------------------------------------------------------ */

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

/* Take @n bytes from the iterator, or NULL if fewer are left. */
static inline const uint8_t *take(struct coord_wire_iter *it, size_t n)
{
	const uint8_t *p = it->p;

	if ((size_t)(it->end - it->p) < n)
		return NULL;
	it->p += n;
	return p;
}

/* ---- header -------------------------------------------------------------------- */

static size_t min_record(uint16_t type)
{
	switch (type) {
	case COORD_WIRE_HELLO:
		return HELLO_LEN;
	case COORD_WIRE_HELLO_ACK:
		return HELLO_ACK_LEN;
	case COORD_WIRE_AUTH:
		return COORD_WIRE_MAC;
	case COORD_WIRE_FN_TABLE:
	case COORD_WIRE_PS_TABLE:
		return FN_FIXED;
	case COORD_WIRE_VAR_REQ:
		return COORD_WIRE_VREQ_FIXED;
	case COORD_WIRE_VAR_RES:
		return COORD_WIRE_VRES_FIXED;
	case COORD_WIRE_REQ:
		return COORD_WIRE_REQ_FIXED;
	case COORD_WIRE_RES:
		return COORD_WIRE_RES_FIXED;
	case COORD_WIRE_PING:
	case COORD_WIRE_PONG:
		return 8;
	case COORD_WIRE_ERROR:
		return ERROR_FIXED;
	case COORD_WIRE_PW_FREE:
		return 8;
	case COORD_WIRE_CANCEL:
		return 4;
	case COORD_WIRE_VAR_SYNC:
		return 16;
	case COORD_WIRE_PS_OPTS:
		return COORD_WIRE_PS_OPTS_LEN;
	default:
		return 0;
	}
}

static bool single_record(uint16_t type)
{
	return type != COORD_WIRE_FN_TABLE && type != COORD_WIRE_REQ && type != COORD_WIRE_RES &&
	       type != COORD_WIRE_PS_TABLE && type != COORD_WIRE_VAR_REQ &&
	       type != COORD_WIRE_VAR_RES && type != COORD_WIRE_PW_FREE;
}

int coord_wire_parse_hdr(const void *buf, size_t avail, uint32_t max_frame,
			 struct coord_wire_hdr *h)
{
	const uint8_t *p = buf;
	size_t min;

	if (avail < COORD_WIRE_HDR)
		return -EAGAIN;
	h->len = get32(p);
	h->type = get16(p + 4);
	h->flags = get16(p + 6);
	h->count = get32(p + 8);
	if (h->len > max_frame)
		return -EMSGSIZE;
	min = min_record(h->type);
	if (min == 0 || h->flags != 0 || get32(p + 12) != 0)
		return -EPROTO;
	if (single_record(h->type) && h->count != 1)
		return -EPROTO;
	/* 64-bit product: count is at most 2^32 - 1, min at most 80. */
	if ((uint64_t)h->count * min > h->len)
		return -EPROTO;
	return 0;
}

void coord_wire_iter_init(struct coord_wire_iter *it, const struct coord_wire_hdr *h,
			  const void *payload)
{
	it->p = payload;
	it->end = it->p + h->len;
	it->left = h->count;
}

/* No records left: the payload must be used up exactly. */
static int iter_end(struct coord_wire_iter *it)
{
	return it->p == it->end ? 0 : -EPROTO;
}

/* ---- records ------------------------------------------------------------------- */

int coord_wire_next_req(struct coord_wire_iter *it, struct coord_wire_req *r)
{
	const uint8_t *p;
	uint16_t flags;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, COORD_WIRE_REQ_FIXED);
	if (!p)
		return -EPROTO;
	r->closure_id = get64(p);
	r->attempt = get32(p + 8);
	r->fn = get32(p + 12);
	r->len = get32(p + 16);
	r->npw = get16(p + 20);
	flags = get16(p + 22);
	if ((flags & ~(COORD_WIRE_REQ_INPUTS | COORD_WIRE_REQ_ID)) || r->npw > COORD_MAX_PW)
		return -EPROTO;
	r->gen = get32(p + 24);
	r->rv_id = 0;
	if (flags & COORD_WIRE_REQ_ID) {
		const uint8_t *q = take(it, 8);

		/* Canonical: the flag only with an id. */
		if (!q || (r->rv_id = get64(q)) == 0)
			return -EPROTO;
	}
	for (unsigned i = 0; i < r->npw; i++) {
		const uint8_t *q = take(it, COORD_WIRE_PW_FIXED);

		if (!q)
			return -EPROTO;
		r->pw[i].uid = get64(q);
		r->pw[i].creator = get32(q + 8);
		r->pw[i].len = get32(q + 12);
		r->pw[i].args = take(it, r->pw[i].len);
		if (!r->pw[i].args)
			return -EPROTO;
	}
	r->args = take(it, r->len);
	if (!r->args)
		return -EPROTO;
	r->nin = 0;
	r->in = NULL;
	r->in_len = 0;
	r->in_get = NULL;
	r->in_src = NULL;
	if (flags & COORD_WIRE_REQ_INPUTS) {
		const uint8_t *q = take(it, 4), *start;

		if (!q)
			return -EPROTO;
		r->nin = get32(q);
		/* Canonical: the flag only with inputs; each takes 4 bytes at
		 * least, so a huge count is refused before any loop. */
		if (r->nin == 0 || (uint64_t)r->nin * 4 > (size_t)(it->end - it->p))
			return -EPROTO;
		start = it->p;
		for (uint32_t i = 0; i < r->nin; i++) {
			q = take(it, 4);
			if (!q || !take(it, get32(q)))
				return -EPROTO;
		}
		r->in = start;
		r->in_len = (size_t)(it->p - start);
	}
	it->left--;
	return 1;
}

const void *coord_wire_input(const void *src, uint32_t i, uint32_t *len,
			     struct coord_in_cursor *cur)
{
	struct coord_in_cursor c0 = { 0, NULL };
	const uint8_t *p;

	/* The section was checked by coord_wire_next_req(): no bounds here. */
	if (!cur)
		cur = &c0;
	if (!cur->p || cur->i > i) {
		cur->i = 0;
		cur->p = src;
	}
	p = cur->p;
	while (cur->i < i) {
		p += 4 + (size_t)get32(p);
		cur->i++;
	}
	cur->p = p;
	*len = get32(p);
	return p + 4;
}

int coord_wire_next_res(struct coord_wire_iter *it, struct coord_wire_res *r)
{
	const uint8_t *p;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, COORD_WIRE_RES_FIXED);
	if (!p)
		return -EPROTO;
	r->closure_id = get64(p);
	r->attempt = get32(p + 8);
	r->code = (int32_t)get32(p + 12);
	r->cause = (int32_t)get32(p + 16);
	r->len = get32(p + 20);
	r->data = take(it, r->len);
	if (!r->data)
		return -EPROTO;
	it->left--;
	return 1;
}

/* A { u32 id, u16 len, bytes[len] } record: 0 < len < @max, no NUL. */
static int next_named(struct coord_wire_iter *it, uint32_t *id, const char **name, uint16_t *len,
		      size_t max)
{
	const uint8_t *p;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, FN_FIXED);
	if (!p)
		return -EPROTO;
	*id = get32(p);
	*len = get16(p + 4);
	if (*len == 0 || *len >= max)
		return -EPROTO;
	*name = (const char *)take(it, *len);
	if (!*name || memchr(*name, 0, *len))
		return -EPROTO;
	it->left--;
	return 1;
}

int coord_wire_next_fn(struct coord_wire_iter *it, uint32_t *id, const char **name, uint16_t *len)
{
	return next_named(it, id, name, len, COORD_FN_NAME_MAX);
}

int coord_wire_next_addr(struct coord_wire_iter *it, uint32_t *task, const char **addr,
			 uint16_t *len)
{
	return next_named(it, task, addr, len, COORD_WIRE_ADDR_MAX);
}

int coord_wire_next_vreq(struct coord_wire_iter *it, struct coord_wire_vreq *r)
{
	const uint8_t *p;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, COORD_WIRE_VREQ_FIXED);
	if (!p)
		return -EPROTO;
	r->rid = get64(p);
	r->op = get16(p + 8);
	r->name_len = get16(p + 10);
	r->var = get32(p + 12);
	r->tag = get32(p + 16);
	r->off = get64(p + 20);
	r->n = get64(p + 28);
	r->len = get32(p + 36);
	r->session = r->closure = 0;
	r->seq = 0;
	if (r->op & COORD_WIRE_VREQ_ONCE) {
		p = take(it, COORD_WIRE_VREQ_KEY);
		if (!p)
			return -EPROTO;
		r->op &= (uint16_t)~COORD_WIRE_VREQ_ONCE;
		r->session = get64(p);
		r->closure = get64(p + 8);
		r->seq = get32(p + 16);
		if (!r->session || !r->seq)
			return -EPROTO; /* canonical: no key is no flag */
	}
	r->name = (const char *)take(it, r->name_len);
	r->data = take(it, r->len);
	r->data2 = NULL;
	r->len2 = 0;
	if (!r->name || !r->data)
		return -EPROTO;
	it->left--;
	return 1;
}

int coord_wire_next_vres(struct coord_wire_iter *it, struct coord_wire_vres *r)
{
	const uint8_t *p;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, COORD_WIRE_VRES_FIXED);
	if (!p)
		return -EPROTO;
	r->rid = get64(p);
	r->code = (int32_t)get32(p + 8);
	r->len = get32(p + 12);
	r->data = take(it, r->len);
	if (!r->data)
		return -EPROTO;
	it->left--;
	return 1;
}

int coord_wire_next_uid(struct coord_wire_iter *it, uint64_t *uid)
{
	const uint8_t *p;

	if (it->left == 0)
		return iter_end(it);
	p = take(it, 8);
	if (!p)
		return -EPROTO;
	*uid = get64(p);
	it->left--;
	return 1;
}

int coord_wire_get_hello(const struct coord_wire_hdr *h, const void *payload,
			 struct coord_wire_hello *out)
{
	const uint8_t *p = payload;
	size_t want = h->type == COORD_WIRE_HELLO ? HELLO_LEN : HELLO_ACK_LEN;

	if ((h->type != COORD_WIRE_HELLO && h->type != COORD_WIRE_HELLO_ACK) || h->len != want)
		return -EPROTO;
	memset(out, 0, sizeof(*out));
	out->magic = get32(p);
	if (out->magic != COORD_WIRE_MAGIC)
		return -EPROTONOSUPPORT;
	out->vmin = get16(p + 4);
	if (h->type == COORD_WIRE_HELLO)
		out->vmax = get16(p + 6);
	else
		out->status = get16(p + 6);
	out->role = p[8];
	if (p[9] || p[10] || p[11])
		return -EPROTO;
	out->task = get32(p + 12);
	memcpy(out->nonce, p + 16, COORD_WIRE_NONCE);
	if (h->type == COORD_WIRE_HELLO_ACK)
		memcpy(out->mac, p + 48, COORD_WIRE_MAC);
	return 0;
}

int coord_wire_get_auth(const struct coord_wire_hdr *h, const void *payload,
			uint8_t mac[COORD_WIRE_MAC])
{
	if (h->type != COORD_WIRE_AUTH || h->len != COORD_WIRE_MAC)
		return -EPROTO;
	memcpy(mac, payload, COORD_WIRE_MAC);
	return 0;
}

int coord_wire_get_ping(const struct coord_wire_hdr *h, const void *payload, uint64_t *token)
{
	if ((h->type != COORD_WIRE_PING && h->type != COORD_WIRE_PONG) || h->len != 8)
		return -EPROTO;
	*token = get64(payload);
	return 0;
}

int coord_wire_get_cancel(const struct coord_wire_hdr *h, const void *payload, uint32_t *gen)
{
	if (h->type != COORD_WIRE_CANCEL || h->len != 4)
		return -EPROTO;
	*gen = get32(payload);
	return 0;
}

int coord_wire_get_sync(const struct coord_wire_hdr *h, const void *payload,
			struct coord_wire_sync *s)
{
	const uint8_t *p = payload;

	if (h->type != COORD_WIRE_VAR_SYNC || h->len != 24)
		return -EPROTO;
	s->seq = get64(p);
	s->seen = get64(p + 8);
	s->window_ms = get32(p + 16);
	s->hb_ms = get32(p + 20);
	return 0;
}

int coord_wire_get_ps_opts(const struct coord_wire_hdr *h, const void *payload,
			   struct coord_wire_ps_opts *o)
{
	const uint8_t *p = payload;

	if (h->type != COORD_WIRE_PS_OPTS || h->len != COORD_WIRE_PS_OPTS_LEN || get32(p + 12) != 0)
		return -EPROTO;
	o->timeout_ms = get32(p);
	o->hb_ms = get32(p + 4);
	o->misses = get32(p + 8);
	o->session = get64(p + 16);
	return 0;
}

int coord_wire_get_error(const struct coord_wire_hdr *h, const void *payload, int32_t *code,
			 const char **msg, uint16_t *len)
{
	const uint8_t *p = payload;

	if (h->type != COORD_WIRE_ERROR || h->len < ERROR_FIXED)
		return -EPROTO;
	*code = (int32_t)get32(p);
	*len = get16(p + 4);
	if ((size_t)*len + ERROR_FIXED != h->len)
		return -EPROTO;
	*msg = (const char *)p + ERROR_FIXED;
	return 0;
}

/* ---- encoding ------------------------------------------------------------------- */

void coord_wire_writer_init(struct coord_wire_writer *w, void *buf, size_t cap)
{
	w->buf = buf;
	w->cap = cap;
	w->len = 0;
	w->frame = SIZE_MAX;
	w->count = 0;
	w->type = 0;
}

int coord_wire_begin(struct coord_wire_writer *w, uint16_t type)
{
	if (w->cap - w->len < COORD_WIRE_HDR)
		return -ENOSPC;
	w->frame = w->len;
	w->type = type;
	w->count = 0;
	memset(w->buf + w->len, 0, COORD_WIRE_HDR);
	put16(w->buf + w->len + 4, type);
	w->len += COORD_WIRE_HDR;
	return 0;
}

void coord_wire_end(struct coord_wire_writer *w)
{
	coord_wire_end_ext(w, 0);
}

void coord_wire_end_ext(struct coord_wire_writer *w, size_t ext)
{
	uint8_t *h = w->buf + w->frame;

	put32(h, (uint32_t)(w->len - w->frame - COORD_WIRE_HDR + ext));
	put32(h + 8, w->count);
	w->frame = SIZE_MAX;
}

/* Room for @n more bytes in the open frame? */
static inline uint8_t *reserve(struct coord_wire_writer *w, size_t n)
{
	uint8_t *p;

	if (w->frame == SIZE_MAX || w->cap - w->len < n)
		return NULL;
	p = w->buf + w->len;
	w->len += n;
	return p;
}

size_t coord_wire_req_size(const struct coord_wire_req *r)
{
	size_t n = COORD_WIRE_REQ_FIXED + r->len + (r->rv_id ? 8 : 0);

	for (unsigned i = 0; i < r->npw; i++)
		n += COORD_WIRE_PW_FIXED + r->pw[i].len;
	if (r->nin)
		n += 4 + r->in_len;
	return n;
}

void coord_wire_req_set_inputs(struct coord_wire_req *r, uint32_t nin, coord_input_get_t get,
			       const void *src)
{
	uint32_t len;

	r->nin = nin;
	r->in_get = get;
	r->in_src = src;
	r->in = NULL;
	r->in_len = 0;
	for (uint32_t i = 0; i < nin; i++) {
		get(src, i, &len, NULL);
		r->in_len += 4 + (size_t)len;
	}
}

int coord_wire_put_req(struct coord_wire_writer *w, const struct coord_wire_req *r)
{
	uint8_t *p;

	if (r->npw > COORD_MAX_PW)
		return -EINVAL;
	p = reserve(w, coord_wire_req_size(r));
	if (!p)
		return -ENOSPC;
	put64(p, r->closure_id);
	put32(p + 8, r->attempt);
	put32(p + 12, r->fn);
	put32(p + 16, r->len);
	put16(p + 20, r->npw);
	put16(p + 22, (r->nin ? COORD_WIRE_REQ_INPUTS : 0) | (r->rv_id ? COORD_WIRE_REQ_ID : 0));
	put32(p + 24, r->gen);
	p += COORD_WIRE_REQ_FIXED;
	if (r->rv_id) {
		put64(p, r->rv_id);
		p += 8;
	}
	for (unsigned i = 0; i < r->npw; i++) {
		put64(p, r->pw[i].uid);
		put32(p + 8, r->pw[i].creator);
		put32(p + 12, r->pw[i].len);
		if (r->pw[i].len)
			memcpy(p + 16, r->pw[i].args, r->pw[i].len);
		p += COORD_WIRE_PW_FIXED + r->pw[i].len;
	}
	if (r->len)
		memcpy(p, r->args, r->len);
	p += r->len;
	if (r->nin) {
		put32(p, r->nin);
		p += 4;
		if (!r->in_get) {
			memcpy(p, r->in, r->in_len);
		} else {
			for (uint32_t i = 0; i < r->nin; i++) {
				uint32_t len;
				const void *v = r->in_get(r->in_src, i, &len, NULL);

				put32(p, len);
				if (len)
					memcpy(p + 4, v, len);
				p += 4 + (size_t)len;
			}
		}
	}
	w->count++;
	return 0;
}

int coord_wire_put_res(struct coord_wire_writer *w, const struct coord_wire_res *r)
{
	uint8_t *p = reserve(w, COORD_WIRE_RES_FIXED + (size_t)r->len);

	if (!p)
		return -ENOSPC;
	put64(p, r->closure_id);
	put32(p + 8, r->attempt);
	put32(p + 12, (uint32_t)r->code);
	put32(p + 16, (uint32_t)r->cause);
	put32(p + 20, r->len);
	if (r->len)
		memcpy(p + COORD_WIRE_RES_FIXED, r->data, r->len);
	w->count++;
	return 0;
}

static int put_named(struct coord_wire_writer *w, uint32_t id, const char *name, size_t max)
{
	size_t n = strlen(name);
	uint8_t *p;

	if (n == 0 || n >= max)
		return -EINVAL;
	p = reserve(w, FN_FIXED + n);
	if (!p)
		return -ENOSPC;
	put32(p, id);
	put16(p + 4, (uint16_t)n);
	memcpy(p + FN_FIXED, name, n);
	w->count++;
	return 0;
}

int coord_wire_put_fn(struct coord_wire_writer *w, uint32_t id, const char *name)
{
	return put_named(w, id, name, COORD_FN_NAME_MAX);
}

int coord_wire_put_addr(struct coord_wire_writer *w, uint32_t task, const char *addr)
{
	return put_named(w, task, addr, COORD_WIRE_ADDR_MAX);
}

size_t coord_wire_vreq_size(const struct coord_wire_vreq *r)
{
	return COORD_WIRE_VREQ_FIXED + (r->seq ? COORD_WIRE_VREQ_KEY : 0) + (size_t)r->name_len +
	       r->len;
}

/* The request's fixed part and name; its @len data bytes follow unless
 * @head_only (they are sent from the caller's buffer: coord_wire_end_ext()). */
static int put_vreq(struct coord_wire_writer *w, const struct coord_wire_vreq *r, bool head_only)
{
	uint8_t *p = reserve(w, coord_wire_vreq_size(r) - (head_only ? r->len : 0));

	if (!p)
		return -ENOSPC;
	put64(p, r->rid);
	put16(p + 8, (uint16_t)(r->op | (r->seq ? COORD_WIRE_VREQ_ONCE : 0)));
	put16(p + 10, r->name_len);
	put32(p + 12, r->var);
	put32(p + 16, r->tag);
	put64(p + 20, r->off);
	put64(p + 28, r->n);
	put32(p + 36, r->len);
	p += COORD_WIRE_VREQ_FIXED;
	if (r->seq) {
		put64(p, r->session);
		put64(p + 8, r->closure);
		put32(p + 16, r->seq);
		p += COORD_WIRE_VREQ_KEY;
	}
	if (r->name_len)
		memcpy(p, r->name, r->name_len);
	p += r->name_len;
	if (head_only) {
		w->count++;
		return 0;
	}
	if (r->len > r->len2)
		memcpy(p, r->data, r->len - r->len2);
	if (r->len2)
		memcpy(p + r->len - r->len2, r->data2, r->len2);
	w->count++;
	return 0;
}

int coord_wire_put_vreq(struct coord_wire_writer *w, const struct coord_wire_vreq *r)
{
	return put_vreq(w, r, false);
}

int coord_wire_put_vreq_head(struct coord_wire_writer *w, const struct coord_wire_vreq *r)
{
	return put_vreq(w, r, true);
}

/* A VAR_RES record, its data too unless @head_only (sent from elsewhere
 * right after the frame: coord_wire_end_ext()). */
static int put_vres(struct coord_wire_writer *w, const struct coord_wire_vres *r, bool head_only)
{
	uint8_t *p = reserve(w, COORD_WIRE_VRES_FIXED + (head_only ? 0 : (size_t)r->len));

	if (!p)
		return -ENOSPC;
	put64(p, r->rid);
	put32(p + 8, (uint32_t)r->code);
	put32(p + 12, r->len);
	/* The data may be in place already (srv_var.c room_vres()). */
	if (!head_only && r->len && r->data != p + COORD_WIRE_VRES_FIXED)
		memcpy(p + COORD_WIRE_VRES_FIXED, r->data, r->len);
	w->count++;
	return 0;
}

int coord_wire_put_vres(struct coord_wire_writer *w, const struct coord_wire_vres *r)
{
	return put_vres(w, r, false);
}

int coord_wire_put_vres_head(struct coord_wire_writer *w, const struct coord_wire_vres *r)
{
	return put_vres(w, r, true);
}

int coord_wire_put_uid(struct coord_wire_writer *w, uint64_t uid)
{
	uint8_t *p = reserve(w, 8);

	if (!p)
		return -ENOSPC;
	put64(p, uid);
	w->count++;
	return 0;
}

/* Begin a frame of @type holding one record of @n bytes; NULL if no room
 * (the writer is left as it was). */
static uint8_t *single(struct coord_wire_writer *w, uint16_t type, size_t n)
{
	size_t save = w->len;
	uint8_t *p;

	if (coord_wire_begin(w, type) < 0)
		return NULL;
	p = reserve(w, n);
	if (!p) {
		w->len = save;
		w->frame = SIZE_MAX;
		return NULL;
	}
	w->count = 1;
	return p;
}

int coord_wire_put_hello(struct coord_wire_writer *w, uint16_t type,
			 const struct coord_wire_hello *h)
{
	bool ack = type == COORD_WIRE_HELLO_ACK;
	uint8_t *p;

	if (type != COORD_WIRE_HELLO && !ack)
		return -EINVAL;
	p = single(w, type, ack ? HELLO_ACK_LEN : HELLO_LEN);
	if (!p)
		return -ENOSPC;
	memset(p, 0, ack ? HELLO_ACK_LEN : HELLO_LEN);
	put32(p, h->magic);
	put16(p + 4, h->vmin);
	put16(p + 6, ack ? h->status : h->vmax);
	p[8] = h->role;
	put32(p + 12, h->task);
	memcpy(p + 16, h->nonce, COORD_WIRE_NONCE);
	if (ack)
		memcpy(p + 48, h->mac, COORD_WIRE_MAC);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_auth(struct coord_wire_writer *w, const uint8_t mac[COORD_WIRE_MAC])
{
	uint8_t *p = single(w, COORD_WIRE_AUTH, COORD_WIRE_MAC);

	if (!p)
		return -ENOSPC;
	memcpy(p, mac, COORD_WIRE_MAC);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_ping(struct coord_wire_writer *w, uint16_t type, uint64_t token)
{
	uint8_t *p;

	if (type != COORD_WIRE_PING && type != COORD_WIRE_PONG)
		return -EINVAL;
	p = single(w, type, 8);
	if (!p)
		return -ENOSPC;
	put64(p, token);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_cancel(struct coord_wire_writer *w, uint32_t gen)
{
	uint8_t *p = single(w, COORD_WIRE_CANCEL, 4);

	if (!p)
		return -ENOSPC;
	put32(p, gen);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_sync(struct coord_wire_writer *w, const struct coord_wire_sync *s)
{
	uint8_t *p = single(w, COORD_WIRE_VAR_SYNC, 24);

	if (!p)
		return -ENOSPC;
	put64(p, s->seq);
	put64(p + 8, s->seen);
	put32(p + 16, s->window_ms);
	put32(p + 20, s->hb_ms);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_ps_opts(struct coord_wire_writer *w, const struct coord_wire_ps_opts *o)
{
	uint8_t *p = single(w, COORD_WIRE_PS_OPTS, COORD_WIRE_PS_OPTS_LEN);

	if (!p)
		return -ENOSPC;
	put32(p, o->timeout_ms);
	put32(p + 4, o->hb_ms);
	put32(p + 8, o->misses);
	put32(p + 12, 0);
	put64(p + 16, o->session);
	coord_wire_end(w);
	return 0;
}

int coord_wire_put_error(struct coord_wire_writer *w, int32_t code, const char *msg)
{
	size_t n = strnlen(msg, 1024);
	uint8_t *p = single(w, COORD_WIRE_ERROR, ERROR_FIXED + n);

	if (!p)
		return -ENOSPC;
	put32(p, (uint32_t)code);
	put16(p + 4, (uint16_t)n);
	memcpy(p + ERROR_FIXED, msg, n);
	coord_wire_end(w);
	return 0;
}

const char *coord_wire_type_name(uint16_t type)
{
	static const char *const names[] = { "?",	 "HELLO",   "HELLO_ACK", "AUTH",
					     "FN_TABLE", "REQ",	    "RES",	 "PING",
					     "PONG",	 "ERROR",   "PS_TABLE",	 "VAR_REQ",
					     "VAR_RES",	 "PW_FREE", "CANCEL",	 "VAR_SYNC",
					     "PS_OPTS" };

	return type <= COORD_WIRE_TYPE_MAX ? names[type] : "?";
}
