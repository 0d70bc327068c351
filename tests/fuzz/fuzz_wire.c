// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_wire.c - libFuzzer harness for the frame decoder.
 *
 * The input is a byte stream of frames, as a peer would send them.  Each
 * complete frame is decoded with the same calls the transports use; a frame
 * that decodes is re-encoded and must give back exactly its bytes
 * (canonical form).  A crash, a sanitizer report or a mismatch is a finding.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[1 << 16];

/* A REQ frame's records (@h, @payload) through @it, re-encoded into @w; what
 * the last coord_wire_next_req() returned. */
static int recode_req(const struct coord_wire_hdr *h, const uint8_t *payload,
		      struct coord_wire_writer *w, struct coord_wire_iter *it)
{
	struct coord_wire_req q;
	int r;

	coord_wire_begin(w, h->type);
	while ((r = coord_wire_next_req(it, &q)) == 1) {
		if (q.nin) {
			/* B1: every input lies inside the payload, read in
			 * order through the cursor; re-encoded through the
			 * getter (the coordinator's path), the bytes match. */
			struct coord_wire_req q2 = q;
			struct coord_in_cursor cur = { 0, NULL };
			size_t total = 0;

			for (uint32_t i = 0; i < q.nin; i++) {
				uint32_t len;
				const uint8_t *v = coord_wire_input(q.in, i, &len, &cur);

				if (v < payload || v + len > payload + h->len)
					abort();
				total += 4 + (size_t)len;
			}
			coord_wire_req_set_inputs(&q2, q.nin, coord_wire_input, q.in);
			if (total != q.in_len || q2.in_len != q.in_len)
				abort();
			q = q2;
		}
		if (coord_wire_put_req(w, &q) < 0)
			abort();
	}
	return r;
}

/* Decode the records of frame @h (payload @payload) through @it and
 * re-encode each into @w; what the last next_*() returned (0: all decoded,
 * < 0: refused), or 1 if @h is not a frame of records. */
static int recode_records(const struct coord_wire_hdr *h, const uint8_t *payload,
			  struct coord_wire_writer *w, struct coord_wire_iter *it)
{
	int r = 0;

	switch (h->type) {
	case COORD_WIRE_REQ:
		r = recode_req(h, payload, w, it);
		break;
	case COORD_WIRE_RES: {
		struct coord_wire_res s;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_res(it, &s)) == 1)
			if (coord_wire_put_res(w, &s) < 0)
				abort();
		break;
	}
	case COORD_WIRE_FN_TABLE: {
		char name[COORD_FN_NAME_MAX];
		const char *p;
		uint32_t id;
		uint16_t len;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_fn(it, &id, &p, &len)) == 1) {
			memcpy(name, p, len);
			name[len] = 0;
			if (coord_wire_put_fn(w, id, name) < 0)
				abort();
		}
		break;
	}
	case COORD_WIRE_PS_TABLE: {
		char addr[COORD_WIRE_ADDR_MAX];
		const char *p;
		uint32_t task;
		uint16_t len;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_addr(it, &task, &p, &len)) == 1) {
			memcpy(addr, p, len);
			addr[len] = 0;
			if (coord_wire_put_addr(w, task, addr) < 0)
				abort();
		}
		break;
	}
	case COORD_WIRE_VAR_REQ: {
		struct coord_wire_vreq q;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_vreq(it, &q)) == 1)
			if (coord_wire_put_vreq(w, &q) < 0)
				abort();
		break;
	}
	case COORD_WIRE_VAR_RES: {
		struct coord_wire_vres s;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_vres(it, &s)) == 1)
			if (coord_wire_put_vres(w, &s) < 0)
				abort();
		break;
	}
	case COORD_WIRE_PW_FREE: {
		uint64_t uid;

		coord_wire_begin(w, h->type);
		while ((r = coord_wire_next_uid(it, &uid)) == 1)
			if (coord_wire_put_uid(w, uid) < 0)
				abort();
		break;
	}
	default:
		return 1;
	}
	return r;
}

/* A frame of one fixed-size record (HELLO, HELLO_ACK, VAR_SYNC, PS_OPTS;
 * @w, for the re-encoding): decoded, it re-encodes to its bytes. */
static void check_fixed(const struct coord_wire_hdr *h, const uint8_t *frame,
			struct coord_wire_writer *w)
{
	const uint8_t *payload = frame + COORD_WIRE_HDR;
	int r;

	switch (h->type) {
	case COORD_WIRE_HELLO:
	case COORD_WIRE_HELLO_ACK: {
		struct coord_wire_hello hello;

		r = coord_wire_get_hello(h, payload, &hello);
		if (r == 0 && coord_wire_put_hello(w, h->type, &hello) < 0)
			abort();
		return (void)(r == 0 && memcmp(out, frame, w->len) ? abort(), 0 : 0);
	}
	case COORD_WIRE_VAR_SYNC: {
		struct coord_wire_sync y;

		r = coord_wire_get_sync(h, payload, &y);
		if (r == 0 && coord_wire_put_sync(w, &y) < 0)
			abort();
		return (void)(r == 0 && memcmp(out, frame, w->len) ? abort(), 0 : 0);
	}
	case COORD_WIRE_PS_OPTS: {
		struct coord_wire_ps_opts o;

		r = coord_wire_get_ps_opts(h, payload, &o);
		if (r == 0 && coord_wire_put_ps_opts(w, &o) < 0)
			abort();
		return (void)(r == 0 && memcmp(out, frame, w->len) ? abort(), 0 : 0);
	}
	}
}

/* Frame @h (@frame: its bytes) decoded and, if it decodes, re-encoded to
 * exactly its bytes; any other type only decoded. */
static void check_frame(const struct coord_wire_hdr *h, const uint8_t *frame)
{
	const uint8_t *payload = frame + COORD_WIRE_HDR;
	struct coord_wire_writer w;
	struct coord_wire_iter it;
	int r;

	coord_wire_writer_init(&w, out, sizeof(out));
	coord_wire_iter_init(&it, h, payload);
	switch (h->type) {
	case COORD_WIRE_HELLO:
	case COORD_WIRE_HELLO_ACK:
	case COORD_WIRE_VAR_SYNC:
	case COORD_WIRE_PS_OPTS:
		check_fixed(h, frame, &w);
		return;
	}
	r = recode_records(h, payload, &w, &it);
	if (r == 1) {
		int32_t code;
		const char *msg;
		uint16_t len;
		uint64_t tok;
		uint8_t mac[COORD_WIRE_MAC];

		(void)coord_wire_get_error(h, payload, &code, &msg, &len);
		(void)coord_wire_get_ping(h, payload, &tok);
		(void)coord_wire_get_auth(h, payload, mac);
		return;
	}
	if (r < 0)
		return; /* refused: fine, as long as nothing crashed */
	coord_wire_end(&w);
	if (w.len != COORD_WIRE_HDR + h->len || memcmp(out, frame, w.len) != 0)
		abort(); /* decoded but not canonical */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (off < size) {
		struct coord_wire_hdr h;
		int r = coord_wire_parse_hdr(data + off, size - off, sizeof(out) - COORD_WIRE_HDR,
					     &h);

		if (r < 0 || size - off - COORD_WIRE_HDR < h.len)
			break; /* refused, or incomplete: a transport closes/waits */
		check_frame(&h, data + off);
		off += COORD_WIRE_HDR + h.len;
	}
	return 0;
}
