// SPDX-License-Identifier: MIT
/*
 * tests/test_wire.c - the wire format: round trips of every frame type,
 * canonical re-encoding, and refusal of hostile input (every truncation,
 * every single-byte corruption of the header, huge lengths and counts,
 * leftover bytes, wrong magic), with no crash and no read past the frame
 * (ASan builds check the latter).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/wire/sock.h"
#include "transport/wire/wire.h"
#include "helpers.h"

static uint8_t buf[1 << 16];

/* A REQ frame of 3 requests, one with two per-worker refs. */
static size_t make_req_frame(uint8_t *b, size_t cap)
{
	struct coord_wire_writer w;
	struct coord_wire_req q = { 0 };

	coord_wire_writer_init(&w, b, cap);
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	for (int i = 0; i < 3; i++) {
		memset(&q, 0, sizeof(q));
		q.closure_id = 0x1122334455667788ull + (uint64_t)i;
		q.attempt = (uint32_t)i + 1;
		q.fn = 7;
		q.args = "hello world";
		q.len = (uint32_t)(i * 5);
		if (i == 1) {
			q.npw = 2;
			q.pw[0] = (struct coord_wire_pw){
				.uid = 9, .creator = 3, .len = 4, .args = "abcd"
			};
			q.pw[1] = (struct coord_wire_pw){ .uid = 10, .creator = 4, .len = 0 };
		}
		if (i == 2) { /* B1: three inputs, one of them empty */
			static const uint8_t in[] = { 3, 0, 0, 0, 'a', 'b', 'c', 0,  0,
						      0, 0, 2, 0, 0,   0,   'x', 'y' };

			q.nin = 3;
			q.in = in;
			q.in_len = sizeof(in);
		}
		assert_int_equal(coord_wire_put_req(&w, &q), 0);
	}
	coord_wire_end(&w);
	return w.len;
}

static void test_wire_req_round_trip(void **state)
{
	size_t n = make_req_frame(buf, sizeof(buf));
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_req q;
	int i = 0, r;

	assert_int_equal(coord_wire_parse_hdr(buf, n, 1 << 20, &h), 0);
	assert_int_equal(h.type, COORD_WIRE_REQ);
	assert_int_equal(h.count, 3);
	assert_int_equal(h.len + COORD_WIRE_HDR, n);
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	while ((r = coord_wire_next_req(&it, &q)) == 1) {
		assert_int_equal(q.closure_id, 0x1122334455667788ull + (uint64_t)i);
		assert_int_equal(q.attempt, i + 1);
		assert_int_equal(q.fn, 7);
		assert_int_equal(q.len, i * 5);
		assert_memory_equal(q.args, "hello world", q.len);
		assert_int_equal(q.npw, i == 1 ? 2 : 0);
		if (i == 1) {
			assert_int_equal(q.pw[0].uid, 9);
			assert_int_equal(q.pw[0].creator, 3);
			assert_memory_equal(q.pw[0].args, "abcd", 4);
			assert_int_equal(q.pw[1].len, 0);
		}
		assert_int_equal(q.nin, i == 2 ? 3 : 0);
		if (i == 2) {
			struct coord_in_cursor cur = { 0, NULL };
			uint32_t len;
			const char *v;

			assert_int_equal(q.in_len, 17);
			/* in order, then out of order, with and without a cursor */
			v = coord_wire_input(q.in, 0, &len, &cur);
			assert_int_equal(len, 3);
			assert_memory_equal(v, "abc", 3);
			coord_wire_input(q.in, 1, &len, &cur);
			assert_int_equal(len, 0);
			v = coord_wire_input(q.in, 2, &len, &cur);
			assert_int_equal(len, 2);
			assert_memory_equal(v, "xy", 2);
			v = coord_wire_input(q.in, 0, &len, &cur);
			assert_memory_equal(v, "abc", 3);
			v = coord_wire_input(q.in, 2, &len, NULL);
			assert_memory_equal(v, "xy", 2);
		}
		i++;
	}
	assert_int_equal(r, 0);
	assert_int_equal(i, 3);
}

static void test_wire_res_fn_ping_error_round_trip(void **state)
{
	struct coord_wire_writer w;
	struct coord_wire_res s = {
		.closure_id = 42, .attempt = 2, .code = -5, .cause = -28, .len = 5, .data = "boom!"
	};
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	size_t off = 0;

	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_RES), 0);
	assert_int_equal(coord_wire_put_res(&w, &s), 0);
	coord_wire_end(&w);
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_FN_TABLE), 0);
	assert_int_equal(coord_wire_put_fn(&w, 3, "train_step"), 0);
	assert_int_equal(coord_wire_put_fn(&w, 4, ""), -EINVAL);
	coord_wire_end(&w);
	assert_int_equal(coord_wire_put_ping(&w, COORD_WIRE_PING, 0xabcdef), 0);
	assert_int_equal(coord_wire_put_error(&w, -EPROTO, "bad frame"), 0);

	/* RES */
	assert_int_equal(coord_wire_parse_hdr(buf + off, w.len - off, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, buf + off + COORD_WIRE_HDR);
	struct coord_wire_res s2;

	assert_int_equal(coord_wire_next_res(&it, &s2), 1);
	assert_int_equal(s2.closure_id, 42);
	assert_int_equal(s2.attempt, 2);
	assert_int_equal(s2.code, -5);
	assert_int_equal(s2.cause, -28);
	assert_memory_equal(s2.data, "boom!", 5);
	assert_int_equal(coord_wire_next_res(&it, &s2), 0);
	off += COORD_WIRE_HDR + h.len;
	/* FN_TABLE */
	uint32_t id;
	const char *name;
	uint16_t len;

	assert_int_equal(coord_wire_parse_hdr(buf + off, w.len - off, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, buf + off + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_fn(&it, &id, &name, &len), 1);
	assert_int_equal(id, 3);
	assert_int_equal(len, 10);
	assert_memory_equal(name, "train_step", 10);
	assert_int_equal(coord_wire_next_fn(&it, &id, &name, &len), 0);
	off += COORD_WIRE_HDR + h.len;
	/* PING */
	uint64_t tok;

	assert_int_equal(coord_wire_parse_hdr(buf + off, w.len - off, 1 << 20, &h), 0);
	assert_int_equal(coord_wire_get_ping(&h, buf + off + COORD_WIRE_HDR, &tok), 0);
	assert_int_equal(tok, 0xabcdef);
	off += COORD_WIRE_HDR + h.len;
	/* ERROR */
	int32_t code;

	assert_int_equal(coord_wire_parse_hdr(buf + off, w.len - off, 1 << 20, &h), 0);
	assert_int_equal(coord_wire_get_error(&h, buf + off + COORD_WIRE_HDR, &code, &name, &len),
			 0);
	assert_int_equal(code, -EPROTO);
	assert_memory_equal(name, "bad frame", len);
	off += COORD_WIRE_HDR + h.len;
	assert_int_equal(off, w.len);
}

static void test_wire_hello_round_trip_and_magic(void **state)
{
	struct coord_wire_writer w;
	struct coord_wire_hello h1 = { .magic = COORD_WIRE_MAGIC,
				       .vmin = 1,
				       .vmax = 3,
				       .role = COORD_ROLE_COORDINATOR },
				h2;
	struct coord_wire_hdr h;

	for (int i = 0; i < COORD_WIRE_NONCE; i++)
		h1.nonce[i] = (uint8_t)i;
	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_put_hello(&w, COORD_WIRE_HELLO, &h1), 0);
	assert_int_equal(coord_wire_parse_hdr(buf, w.len, 1 << 20, &h), 0);
	assert_int_equal(coord_wire_get_hello(&h, buf + COORD_WIRE_HDR, &h2), 0);
	assert_int_equal(h2.vmin, 1);
	assert_int_equal(h2.vmax, 3);
	assert_int_equal(h2.role, COORD_ROLE_COORDINATOR);
	assert_memory_equal(h2.nonce, h1.nonce, COORD_WIRE_NONCE);
	/* a peer that is not coord */
	buf[COORD_WIRE_HDR] ^= 0xff;
	assert_int_equal(coord_wire_get_hello(&h, buf + COORD_WIRE_HDR, &h2), -EPROTONOSUPPORT);
	/* HELLO_ACK carries the chosen version, a status and a mac */
	h1.status = COORD_WIRE_BAD_VERSION;
	memset(h1.mac, 0x5a, COORD_WIRE_MAC);
	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_put_hello(&w, COORD_WIRE_HELLO_ACK, &h1), 0);
	assert_int_equal(coord_wire_parse_hdr(buf, w.len, 1 << 20, &h), 0);
	assert_int_equal(coord_wire_get_hello(&h, buf + COORD_WIRE_HDR, &h2), 0);
	assert_int_equal(h2.status, COORD_WIRE_BAD_VERSION);
	assert_memory_equal(h2.mac, h1.mac, COORD_WIRE_MAC);
}

/* Decode a whole buffer as a peer's stream; returns the first error, or 0. */
static int decode_all(const uint8_t *b, size_t n, uint32_t max_frame)
{
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_req q;
	int r = coord_wire_parse_hdr(b, n, max_frame, &h);

	if (r < 0)
		return r;
	if (n - COORD_WIRE_HDR < h.len)
		return -EAGAIN; /* incomplete: a transport waits for more */
	coord_wire_iter_init(&it, &h, b + COORD_WIRE_HDR);
	if (h.type != COORD_WIRE_REQ)
		return 0;
	while ((r = coord_wire_next_req(&it, &q)) == 1)
		;
	return r;
}

/* B1: the request flags and the input section are checked: an unknown
 * flag, INPUTS with no inputs, a count the payload cannot hold, a value
 * running past the end are refused; the getter path encodes the same bytes. */
static void test_wire_req_inputs_checked(void **state)
{
	uint8_t b[256], b2[256];
	struct coord_wire_writer w;
	struct coord_wire_req q = { .closure_id = 5, .fn = 1 };
	static const uint8_t in[] = { 1, 0, 0, 0, 'z' };
	size_t n, req_at = COORD_WIRE_HDR, sect;

	q.nin = 1;
	q.in = in;
	q.in_len = sizeof(in);
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	assert_int_equal(coord_wire_put_req(&w, &q), 0);
	coord_wire_end(&w);
	n = w.len;
	assert_int_equal(decode_all(b, n, 1 << 20), 0);
	sect = req_at + COORD_WIRE_REQ_FIXED; /* no pw, no args: the count */
	assert_int_equal(b[req_at + 22], COORD_WIRE_REQ_INPUTS);
	/* an unknown flag bit */
	memcpy(b2, b, n);
	b2[req_at + 22] |= 0x4;
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* INPUTS set, count 0 (not canonical) */
	memcpy(b2, b, n);
	memset(b2 + sect, 0, 4);
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* a count the payload cannot hold */
	memcpy(b2, b, n);
	memset(b2 + sect, 0xff, 4);
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* a value longer than what is left */
	memcpy(b2, b, n);
	b2[sect + 4] = 2;
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* the flag cleared: the section is left over, refused */
	memcpy(b2, b, n);
	b2[req_at + 22] = 0;
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* the getter path (coordinator side) gives the same bytes */
	{
		struct coord_wire_req q2 = { .closure_id = 5, .fn = 1 };

		coord_wire_req_set_inputs(&q2, 1, coord_wire_input, in);
		assert_int_equal(q2.in_len, sizeof(in));
		coord_wire_writer_init(&w, b2, sizeof(b2));
		assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
		assert_int_equal(coord_wire_put_req(&w, &q2), 0);
		coord_wire_end(&w);
		assert_int_equal(w.len, n);
		assert_memory_equal(b2, b, n);
	}
}

/* B8: a request may carry the closure's own id (ID flag) besides the id
 * its result echoes; it round-trips, with pw refs and inputs after it, and
 * the flag without an id (0) or without its 8 bytes is refused. */
static void test_wire_req_rv_id(void **state)
{
	uint8_t b[256], b2[256];
	struct coord_wire_writer w;
	struct coord_wire_req q = { .closure_id = 0x100000000ull,
				    .rv_id = 0x10000000full,
				    .fn = 2 };
	static const uint8_t in[] = { 1, 0, 0, 0, 'z' };
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_req d;
	size_t n, at = COORD_WIRE_HDR + COORD_WIRE_REQ_FIXED;

	q.npw = 1;
	q.pw[0] = (struct coord_wire_pw){ .uid = 77, .creator = 1, .len = 2, .args = "pw" };
	q.nin = 1;
	q.in = in;
	q.in_len = sizeof(in);
	q.len = 3;
	q.args = "abc";
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	assert_int_equal(coord_wire_put_req(&w, &q), 0);
	coord_wire_end(&w);
	n = w.len;
	assert_int_equal(n, COORD_WIRE_HDR + coord_wire_req_size(&q));
	assert_int_equal(b[COORD_WIRE_HDR + 22], COORD_WIRE_REQ_INPUTS | COORD_WIRE_REQ_ID);
	assert_int_equal(coord_wire_parse_hdr(b, n, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, b + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_req(&it, &d), 1);
	assert_int_equal(d.closure_id, q.closure_id);
	assert_int_equal(d.rv_id, q.rv_id);
	assert_int_equal(d.npw, 1);
	assert_int_equal(d.pw[0].uid, 77);
	assert_memory_equal(d.args, "abc", 3);
	assert_int_equal(d.nin, 1);
	assert_int_equal(coord_wire_next_req(&it, &d), 0);
	/* without the flag: no id (0), as before */
	q.rv_id = 0;
	coord_wire_writer_init(&w, b2, sizeof(b2));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	assert_int_equal(coord_wire_put_req(&w, &q), 0);
	coord_wire_end(&w);
	assert_int_equal(w.len, n - 8);
	assert_int_equal(coord_wire_parse_hdr(b2, w.len, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, b2 + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_req(&it, &d), 1);
	assert_int_equal(d.rv_id, 0);
	/* the flag with an id of 0: not canonical */
	memcpy(b2, b, n);
	memset(b2 + at, 0, 8);
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* the flag cleared: the id's bytes are read as the rest, refused */
	memcpy(b2, b, n);
	b2[COORD_WIRE_HDR + 22] = COORD_WIRE_REQ_INPUTS;
	assert_int_equal(decode_all(b2, n, 1 << 20), -EPROTO);
	/* every truncation of the frame: more needed, or refused */
	for (size_t k = 0; k < n; k++) {
		int r = decode_all(b, k, 1 << 20);

		assert_true(r == -EAGAIN || r == -EPROTO);
	}
}

/* S9: PW_FREE carries uids, many per frame; a frame whose payload is not
 * exactly its records is refused. */
static void test_wire_pw_free(void **state)
{
	uint8_t b[128];
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	uint64_t uid;
	int i = 0, r;

	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_PW_FREE), 0);
	for (uint64_t u = 1; u <= 5; u++)
		assert_int_equal(coord_wire_put_uid(&w, u << 40 | u), 0);
	coord_wire_end(&w);
	assert_int_equal(w.len, COORD_WIRE_HDR + 40);
	assert_string_equal(coord_wire_type_name(COORD_WIRE_PW_FREE), "PW_FREE");
	assert_int_equal(coord_wire_parse_hdr(b, w.len, 1 << 20, &h), 0);
	assert_int_equal(h.type, COORD_WIRE_PW_FREE);
	assert_int_equal(h.count, 5);
	coord_wire_iter_init(&it, &h, b + COORD_WIRE_HDR);
	while ((r = coord_wire_next_uid(&it, &uid)) == 1) {
		i++;
		assert_int_equal(uid, (uint64_t)i << 40 | (uint64_t)i);
	}
	assert_int_equal(r, 0);
	assert_int_equal(i, 5);
	/* a count the payload does not hold, or bytes left over: refused */
	b[8] = 6;
	assert_int_equal(coord_wire_parse_hdr(b, w.len, 1 << 20, &h), -EPROTO);
	b[8] = 4;
	assert_int_equal(coord_wire_parse_hdr(b, w.len, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, b + COORD_WIRE_HDR);
	while ((r = coord_wire_next_uid(&it, &uid)) == 1)
		;
	assert_int_equal(r, -EPROTO);
}

/* Every prefix of a valid frame is "need more" or refused, never decoded. */
static void test_wire_every_truncation(void **state)
{
	size_t n = make_req_frame(buf, sizeof(buf));

	for (size_t k = 0; k < n; k++) {
		uint8_t *copy = malloc(k ? k : 1); /* exact size: ASan sees overreads */

		memcpy(copy, buf, k);
		assert_int_equal(decode_all(copy, k, 1 << 20), -EAGAIN);
		free(copy);
	}
	assert_int_equal(decode_all(buf, n, 1 << 20), 0);
}

/* A frame whose header promises a shorter payload than its records need,
 * or leaves bytes over, is refused. */
static void test_wire_inconsistent_lengths_refused(void **state)
{
	size_t n = make_req_frame(buf, sizeof(buf));
	uint32_t len = (uint32_t)(n - COORD_WIRE_HDR);

	for (uint32_t cut = 1; cut < 40; cut++) {
		uint8_t *copy = malloc(n);
		uint32_t l = len - cut;

		memcpy(copy, buf, n);
		memcpy(copy, &l, 4); /* header says fewer bytes than the records use */
		assert_int_equal(decode_all(copy, n - cut, 1 << 20), -EPROTO);
		free(copy);
	}
	/* leftover byte after the last record */
	uint8_t *copy = malloc(n + 1);
	uint32_t l = len + 1;

	memcpy(copy, buf, n);
	copy[n] = 0;
	memcpy(copy, &l, 4);
	assert_int_equal(decode_all(copy, n + 1, 1 << 20), -EPROTO);
	free(copy);
}

static void test_wire_hostile_headers(void **state)
{
	uint8_t h[COORD_WIRE_HDR] = { 0 };
	struct coord_wire_hdr hd;
	uint32_t v;

	/* huge length */
	v = 0xffffffffu;
	memcpy(h, &v, 4);
	h[4] = COORD_WIRE_REQ;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EMSGSIZE);
	/* a count that cannot fit */
	v = 100;
	memcpy(h, &v, 4);
	v = 1000000;
	memcpy(h + 8, &v, 4);
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EPROTO);
	/* unknown type, non-zero flags, reserved */
	memset(h, 0, sizeof(h));
	h[4] = 99;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EPROTO);
	h[4] = COORD_WIRE_RES;
	h[6] = 1;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EPROTO);
	h[6] = 0;
	h[12] = 1;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EPROTO);
	/* single-record types need count 1 */
	memset(h, 0, sizeof(h));
	h[0] = 8;
	h[4] = COORD_WIRE_PING;
	h[8] = 2;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), -EPROTO);
	/* an empty REQ frame is valid (count 0, len 0) */
	memset(h, 0, sizeof(h));
	h[4] = COORD_WIRE_REQ;
	assert_int_equal(coord_wire_parse_hdr(h, sizeof(h), 1 << 20, &hd), 0);
}

/* Flip every bit of every byte of a valid frame: decode or refuse, never
 * crash or read out of bounds. */
static void test_wire_every_bit_flip(void **state)
{
	size_t n = make_req_frame(buf, sizeof(buf));
	uint8_t *copy = malloc(n);
	int refused = 0;

	for (size_t i = 0; i < n; i++)
		for (int bit = 0; bit < 8; bit++) {
			int r;

			memcpy(copy, buf, n);
			copy[i] ^= (uint8_t)(1u << bit);
			r = decode_all(copy, n, 1 << 20);
			assert_true(r == 0 || r == -EPROTO || r == -EMSGSIZE || r == -EAGAIN);
			refused += r != 0;
		}
	assert_true(refused > 0);
	free(copy);
}

/* VAR_REQ (data from one or two buffers, a closure's key or none), VAR_RES
 * and PS_TABLE round trip; every truncation and bit flip of a VAR_REQ
 * frame decodes or is refused; a ONCE flag without a key is refused. */
/* Every bit flip of the VAR_REQ frame of @n bytes in buf decodes or is
 * refused. */
static void vreq_flips(size_t n)
{
	struct coord_wire_vreq q2;
	struct coord_wire_iter it;

	for (size_t k = 0; k < n; k++)
		for (int bit = 0; bit < 8; bit++) {
			uint8_t *copy = malloc(n);
			struct coord_wire_hdr hh;
			int r;

			memcpy(copy, buf, n);
			copy[k] ^= (uint8_t)(1u << bit);
			r = coord_wire_parse_hdr(copy, n, 1 << 20, &hh);
			if (r == 0 && hh.type == COORD_WIRE_VAR_REQ &&
			    hh.len <= n - COORD_WIRE_HDR) {
				coord_wire_iter_init(&it, &hh, copy + COORD_WIRE_HDR);
				while ((r = coord_wire_next_vreq(&it, &q2)) == 1)
					;
				assert_true(r == 0 || r == -EPROTO);
			}
			free(copy);
		}
}

/* VAR_RES and PS_TABLE round trip; a truncated record and a NUL inside an
 * address are refused. */
static void var_res_and_ps_table(void)
{
	struct coord_wire_vres s = { .rid = 99, .code = -22, .len = 6, .data = "oops!" }, s2;
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	const char *addr;
	uint32_t task;
	uint16_t len;

	/* VAR_RES */
	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_VAR_RES), 0);
	assert_int_equal(coord_wire_put_vres(&w, &s), 0);
	coord_wire_end(&w);
	assert_int_equal(coord_wire_parse_hdr(buf, w.len, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_vres(&it, &s2), 1);
	assert_true(s2.rid == 99 && s2.code == -22 && s2.len == 6);
	assert_string_equal(s2.data, "oops!");
	/* a truncated record inside a well-formed header is refused */
	h.len -= 1;
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_vres(&it, &s2), -EPROTO);
	/* PS_TABLE: addresses of < 256 bytes, no NUL inside */
	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_PS_TABLE), 0);
	assert_int_equal(coord_wire_put_addr(&w, 0, "127.0.0.1:7000"), 0);
	assert_int_equal(coord_wire_put_addr(&w, 1, "[::1]:7001"), 0);
	assert_int_equal(coord_wire_put_addr(&w, 2, ""), -EINVAL);
	coord_wire_end(&w);
	assert_int_equal(coord_wire_parse_hdr(buf, w.len, 1 << 20, &h), 0);
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_addr(&it, &task, &addr, &len), 1);
	assert_true(task == 0 && len == 14 && !memcmp(addr, "127.0.0.1:7000", 14));
	assert_int_equal(coord_wire_next_addr(&it, &task, &addr, &len), 1);
	assert_true(task == 1 && len == 10);
	assert_int_equal(coord_wire_next_addr(&it, &task, &addr, &len), 0);
	buf[COORD_WIRE_HDR + 6 + 3] = 0; /* a NUL inside an address */
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_addr(&it, &task, &addr, &len), -EPROTO);
	assert_string_equal(coord_wire_type_name(COORD_WIRE_VAR_RES), "VAR_RES");
}

static void test_wire_var_and_ps_table(void **state)
{
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	struct coord_wire_iter it;
	struct coord_wire_vreq q = { .rid = (7ull << 32) | 3,
				     .op = 6,
				     .name_len = 4,
				     .var = 42,
				     .tag = 0xabcde,
				     .off = 1ull << 40,
				     .n = 2,
				     .len = 10,
				     .name = "emb0",
				     .data = "abcdef",
				     .data2 = "WXYZ",
				     .len2 = 4 },
			       q2;
	size_t n;

	(void)state;
	coord_wire_writer_init(&w, buf, sizeof(buf));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_VAR_REQ), 0);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	q.len = q.len2 = 0;
	q.name_len = 0;
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	q.op = 5; /* assign_add, keyed: at most once (ps.h) */
	q.session = 0x1122334455667788ull;
	q.closure = (9ull << 32) | 17;
	q.seq = 3;
	q.data = "abcd";
	q.len = 4;
	assert_int_equal(coord_wire_vreq_size(&q), COORD_WIRE_VREQ_FIXED + COORD_WIRE_VREQ_KEY + 4);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	coord_wire_end(&w);
	n = w.len;
	assert_int_equal(coord_wire_parse_hdr(buf, n, 1 << 20, &h), 0);
	assert_int_equal(h.count, 3);
	coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
	assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
	assert_true(q2.rid == ((7ull << 32) | 3) && q2.op == 6 && q2.var == 42 &&
		    q2.tag == 0xabcde && q2.off == 1ull << 40 && q2.n == 2 && q2.len == 10 &&
		    q2.name_len == 4);
	assert_memory_equal(q2.name, "emb0", 4);
	assert_memory_equal(q2.data, "abcdefWXYZ", 10); /* both parts, in order */
	assert_null(q2.data2);
	assert_int_equal(q2.seq, 0); /* no key */
	assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
	assert_int_equal(q2.len, 0);
	assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
	assert_true(q2.op == 5 && q2.session == 0x1122334455667788ull &&
		    q2.closure == ((9ull << 32) | 17) && q2.seq == 3 && q2.len == 4);
	assert_memory_equal(q2.data, "abcd", 4);
	assert_int_equal(coord_wire_next_vreq(&it, &q2), 0);
	{ /* the flag with seq 0 (or session 0) is not canonical */
		size_t at = n - 4 - COORD_WIRE_VREQ_KEY;
		uint8_t keep[4];

		memcpy(keep, buf + at + 16, 4);
		memset(buf + at + 16, 0, 4);
		coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), -EPROTO);
		memcpy(buf + at + 16, keep, 4);
		memset(buf + at, 0, 8);
		coord_wire_iter_init(&it, &h, buf + COORD_WIRE_HDR);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), 1);
		assert_int_equal(coord_wire_next_vreq(&it, &q2), -EPROTO);
	}
	vreq_flips(n);
	var_res_and_ps_table();
}

/* VAR_SYNC and PS_OPTS (the ps heartbeat and give-up clock) round trip;
 * wrong sizes, the wrong type and PS_OPTS's reserved field are refused. */
static void test_wire_sync_ps_opts(void **state)
{
	struct coord_wire_sync y = { .seq = (1ull << 63) | 7,
				     .seen = 123456789012ull,
				     .window_ms = 3000,
				     .hb_ms = 750 },
			       y2;
	struct coord_wire_ps_opts o = { .timeout_ms = 30000,
					.hb_ms = 1000,
					.misses = 3,
					.session = 0xfedcba9876543210ull },
				  o2;
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	uint8_t b[128];

	(void)state;
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_put_sync(&w, &y), 0);
	assert_int_equal(coord_wire_put_ps_opts(&w, &o), 0);
	assert_int_equal(w.len, 2 * COORD_WIRE_HDR + 24 + COORD_WIRE_PS_OPTS_LEN);
	assert_int_equal(coord_wire_parse_hdr(b, w.len, 1 << 20, &h), 0);
	assert_int_equal(h.type, COORD_WIRE_VAR_SYNC);
	assert_int_equal(coord_wire_get_sync(&h, b + COORD_WIRE_HDR, &y2), 0);
	assert_memory_equal(&y, &y2, sizeof(y));
	assert_int_equal(coord_wire_get_ps_opts(&h, b + COORD_WIRE_HDR, &o2), -EPROTO);
	assert_int_equal(coord_wire_parse_hdr(b + 40, w.len - 40, 1 << 20, &h), 0);
	assert_int_equal(h.type, COORD_WIRE_PS_OPTS);
	assert_int_equal(coord_wire_get_ps_opts(&h, b + 40 + COORD_WIRE_HDR, &o2), 0);
	assert_true(o2.timeout_ms == o.timeout_ms && o2.hb_ms == o.hb_ms && o2.misses == o.misses &&
		    o2.session == o.session);
	b[40 + COORD_WIRE_HDR + 12] = 1; /* reserved */
	assert_int_equal(coord_wire_get_ps_opts(&h, b + 40 + COORD_WIRE_HDR, &o2), -EPROTO);
	h.len = 16; /* a version-2 PS_OPTS */
	assert_int_equal(coord_wire_get_ps_opts(&h, b + 40 + COORD_WIRE_HDR, &o2), -EPROTO);
	h.type = COORD_WIRE_VAR_SYNC;
	h.len = 16;
	assert_int_equal(coord_wire_get_sync(&h, b + COORD_WIRE_HDR, &y2), -EPROTO);
	assert_string_equal(coord_wire_type_name(COORD_WIRE_VAR_SYNC), "VAR_SYNC");
	assert_string_equal(coord_wire_type_name(COORD_WIRE_PS_OPTS), "PS_OPTS");
}

/* The writer reports a full buffer instead of overflowing it. */
static void test_wire_writer_full(void **state)
{
	uint8_t small[64];
	struct coord_wire_writer w;
	struct coord_wire_req q = { .closure_id = 1, .fn = 1, .len = 30, .args = buf };

	coord_wire_writer_init(&w, small, sizeof(small));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	assert_int_equal(coord_wire_put_req(&w, &q), -ENOSPC); /* 16 + 58 > 64 */
	q.len = 20;
	assert_int_equal(coord_wire_put_req(&w, &q), 0);
	assert_int_equal(coord_wire_put_req(&w, &q), -ENOSPC);
	coord_wire_end(&w);
	assert_int_equal(w.len, 16 + 48);
	assert_int_equal(decode_all(small, w.len, 1 << 20), 0);
	q.npw = COORD_MAX_PW + 1;
	assert_int_equal(coord_wire_put_req(&w, &q), -EINVAL);
	assert_string_equal(coord_wire_type_name(COORD_WIRE_REQ), "REQ");
	assert_string_equal(coord_wire_type_name(1000), "?");
}

struct st_reader {
	int fd;
	uint8_t *buf;
	size_t len;
	int code;
};

static void *st_read(void *p)
{
	struct st_reader *r = p;
	size_t got = 0;

	while (got < r->len) {
		ssize_t n = recv(r->fd, r->buf + got, r->len - got, 0);

		if (n <= 0) {
			r->code = -1;
			return NULL;
		}
		got += (size_t)n;
	}
	return NULL;
}

/* coord_sock_stream_start() waits for the peer only its budget: with
 * nobody reading (then with a reader, and with no time at all) it copies
 * what the socket did not take; the peer gets the source as it was when
 * start returned, though it changed before finish. */
static void test_sock_stream(void **state)
{
	const size_t len = 4u << 20, hlen = 100;
	uint8_t *src = malloc(len), *want = malloc(len), head[100], *got = malloc(hlen + len);
	struct coord_sock_stream st = { 0 };

	(void)state;
	assert_true(src && want && got);
	for (int pass = 0; pass < 3; pass++) {
		struct st_reader r = { .buf = got, .len = hlen + len };
		int fd[2];
		pthread_t th;

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
		r.fd = fd[1];
		for (size_t i = 0; i < len; i++)
			src[i] = (uint8_t)(i * 7 + (size_t)pass);
		memset(head, 0x40 + pass, hlen);
		memcpy(want, src, len);
		if (pass > 0) /* a reader draining meanwhile */
			assert_int_equal(pthread_create(&th, NULL, st_read, &r), 0);
		assert_int_equal(coord_sock_stream_start(fd[0], &st, head, hlen, src, len,
							 pass == 2 ? 0 : 20000000ull),
				 0);
		memset(src, 0xee, len); /* the variable changes: its stripes let go */
		if (pass == 0)
			assert_int_equal(pthread_create(&th, NULL, st_read, &r), 0);
		assert_int_equal(coord_sock_stream_finish(fd[0], &st), 0);
		pthread_join(th, NULL);
		assert_int_equal(r.code, 0);
		assert_memory_equal(got, head, hlen);
		assert_memory_equal(got + hlen, want, len);
		close(fd[0]);
		close(fd[1]);
	}
	free(st.tail);
	free(src);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_req_round_trip),
		cmocka_unit_test(test_wire_req_inputs_checked),
		cmocka_unit_test(test_wire_req_rv_id),
		cmocka_unit_test(test_wire_pw_free),
		cmocka_unit_test(test_wire_res_fn_ping_error_round_trip),
		cmocka_unit_test(test_wire_sync_ps_opts),
		cmocka_unit_test(test_wire_hello_round_trip_and_magic),
		cmocka_unit_test(test_wire_every_truncation),
		cmocka_unit_test(test_wire_inconsistent_lengths_refused),
		cmocka_unit_test(test_wire_hostile_headers),
		cmocka_unit_test(test_wire_every_bit_flip),
		cmocka_unit_test(test_wire_writer_full),
		cmocka_unit_test(test_wire_var_and_ps_table),
		cmocka_unit_test(test_sock_stream),
	};

	t_watchdog(60);
	return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
