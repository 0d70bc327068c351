// SPDX-License-Identifier: MIT
/*
 * tests/test_giveup.c - Give-up's bookkeeping (transport/wire/giveup.c), both
 * ends, without a network or a device: what a ps client and a ps do over tcp
 * and rdma alike.
 *   clock      the client's window, ping and silence from its options.
 *   srv        the ps's marks: frame 0 is the accept, a VAR_SYNC's frame
 *              gives the reference time, a request is stale from exactly
 *              window - window / 16 after it; frames never sent, or older
 *              than every mark kept, make everything stale; malformed
 *              VAR_SYNCs are refused.
 *   cli        the client's count and when it names a newer frame.
 *   simulated  a client and a ps on simulated clocks of different rates
 *              and offsets, joined by two FIFO links with random delays,
 *              long stalls (a large frame), a busy ps (a long READ, with
 *              keepalive PONGs meanwhile) and cuts whose frames arrive after
 *              the heal (a retransmission): the client gives up on a
 *              request at its timeout or when the connection has been
 *              silent for heartbeat x misses, and sends again one the ps
 *              answered late (ps_client.c "Late"); the ps applies no
 *              request after its sender gave up on it, ever; on a healthy
 *              link it refuses none.  Seeded, bounded in steps.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/wire/giveup.h"

#define MS 1000000ull

static void test_giveup_clock(void **state)
{
	struct coord_gu_clock c;

	(void)state;
	coord_gu_clock_init(&c, 30000, 1000, 3); /* coord_opts' defaults */
	assert_true(c.dead_ns == 3000 * MS && c.window_ns == 3000 * MS && c.ping_ns == 750 * MS);
	coord_gu_clock_init(&c, 30000, 0, 3); /* no heartbeat: the op timeout */
	assert_true(c.dead_ns == 0 && c.window_ns == 30000 * MS && c.ping_ns == 7500 * MS);
	coord_gu_clock_init(&c, 1000, 500, 4); /* the op timeout is shorter */
	assert_true(c.dead_ns == 2000 * MS && c.window_ns == 1000 * MS && c.ping_ns == 250 * MS);
	coord_gu_clock_init(&c, 30000, 100, 9); /* the heartbeat pings more often */
	assert_true(c.window_ns == 900 * MS && c.ping_ns == 100 * MS);
	coord_gu_clock_init(&c, 0, 0, 0); /* neither: no VAR_SYNC, no ping */
	assert_true(c.dead_ns == 0 && c.window_ns == 0 && c.ping_ns == 0);
	coord_gu_clock_init(&c, 2000000000, 0, 0); /* capped */
	assert_true(c.window_ns == COORD_GU_WINDOW_MAX_MS * MS);
	coord_gu_clock_init(&c, 2, 0, 0); /* a ping no more often than a millisecond */
	assert_true(c.window_ns == 2 * MS && c.ping_ns == 1 * MS);
}

static void test_giveup_srv(void **state)
{
	struct coord_gu_srv y;
	struct coord_wire_sync q = { .window_ms = 320 };
	const uint64_t w = 320 * MS, t0 = 1000 * MS;

	(void)state;
	memset(&y, 0, sizeof(y));
	coord_gu_srv_init(&y, t0);
	coord_gu_srv_sent_at(&y, t0 + 1); /* frame 1, not judged yet: no mark */
	assert_true(y.sent == 1 && y.nmark == 0 && !coord_gu_srv_stale_at(&y, t0 + 10 * w));
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0); /* seen 0: the accept */
	assert_true(y.ref_ns == t0);
	assert_false(coord_gu_srv_stale_at(&y, t0 + w - w / 16 - 1));
	assert_true(coord_gu_srv_stale_at(&y, t0 + w - w / 16));
	/* frames 2..: marked at most every window / 32 */
	coord_gu_srv_sent_at(&y, t0 + 100 * MS); /* 2: marked */
	coord_gu_srv_sent_at(&y, t0 + 101 * MS); /* 3: too soon */
	coord_gu_srv_sent_at(&y, t0 + 110 * MS); /* 4: marked */
	assert_true(y.sent == 4 && y.nmark == 2);
	q.seen = 3; /* left no earlier than frame 2's mark */
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == t0 + 100 * MS);
	q.seen = 4;
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == t0 + 110 * MS);
	assert_false(coord_gu_srv_stale_at(&y, t0 + 110 * MS + w - w / 16 - 1));
	q.seen = 1; /* before every mark: no time says, stale */
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == 0 && coord_gu_srv_stale_at(&y, t0));
	q.seen = 5; /* never sent */
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == 0 && coord_gu_srv_stale_at(&y, t0));
	/* the ring keeps the last COORD_GU_MARKS marks */
	for (unsigned i = 0; i < 2 * COORD_GU_MARKS; i++)
		coord_gu_srv_sent_at(&y, t0 + (200 + 10 * (uint64_t)i) * MS);
	q.seen = y.sent;
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == y.last_ns);
	q.seen = y.sent - COORD_GU_MARKS; /* older than the oldest mark kept */
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
	assert_true(y.ref_ns == 0);
	/* malformed: no window, too long a window, a token without the echo bit */
	q = (struct coord_wire_sync){ .window_ms = 0 };
	assert_int_equal(coord_gu_srv_sync(&y, &q), -EPROTO);
	q.window_ms = COORD_GU_WINDOW_MAX_MS + 1;
	assert_int_equal(coord_gu_srv_sync(&y, &q), -EPROTO);
	q = (struct coord_wire_sync){ .window_ms = 10, .seq = 7 };
	assert_int_equal(coord_gu_srv_sync(&y, &q), -EPROTO);
	q.seq = COORD_GU_ECHO | 7;
	assert_int_equal(coord_gu_srv_sync(&y, &q), 0);
}

static void test_giveup_cli(void **state)
{
	struct coord_gu_clock c;
	struct coord_gu_cli g;
	struct coord_wire_sync y;

	(void)state;
	coord_gu_clock_init(&c, 30000, 1000, 3);
	coord_gu_cli_reset(&g, 5 * MS);
	g.ping_seq = 0;
	coord_gu_cli_sync(&g, &c, false, &y); /* the first: frame 0, no echo */
	assert_true(y.seen == 0 && y.seq == 0 && y.window_ms == 3000 && y.hb_ms == 750);
	assert_false(coord_gu_cli_due(&g, &c, 10000 * MS)); /* nothing newer came */
	coord_gu_cli_rx(&g, 100 * MS);
	/* the frame named (0) came at 5 ms: a newer one is named from a quarter window on */
	assert_false(coord_gu_cli_due(&g, &c, 5 * MS + 750 * MS - 1));
	assert_true(coord_gu_cli_due(&g, &c, 5 * MS + 750 * MS));
	coord_gu_cli_sync(&g, &c, true, &y);
	assert_true(y.seen == 1 && y.seq == (COORD_GU_ECHO | 1));
	assert_true(g.synced == 1 && g.synced_ns == 100 * MS);
	assert_false(coord_gu_cli_due(&g, &c, 100000 * MS));
	coord_gu_clock_init(&c, 0, 0, 0); /* no window: never */
	coord_gu_cli_rx(&g, 200 * MS);
	assert_false(coord_gu_cli_due(&g, &c, 100000 * MS));
}

/* ---- the simulation ------------------------------------------------------------------- */

#define STEP 100000ull /* 0.1 ms of true time a step */
#define QCAP 8192

enum { M_SYNC, M_REQ, M_RES, M_PONG, M_KEEP };

struct msg {
	int type;
	uint64_t at; /* arrives (true time) */
	struct coord_wire_sync y;
	unsigned req;
	bool late; /* M_RES: refused (COORD_ETIMEDOUT) */
};

struct link {
	struct msg m[QCAP];
	unsigned head, tail;
	uint64_t last;
};

/* A scenario: the links' delays, stalls, a busy ps, a cut. */
struct scen {
	uint64_t dmax, stall, stall_every; /* a stall: a frame that takes long */
	uint64_t busy, busy_every;	   /* a long op on the ps */
	uint64_t cut_at, cut_len;	   /* frames in the cut arrive after it */
	double rc, rs;			   /* clock rates: client, ps */
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void put(struct link *l, const struct scen *sc, uint64_t *seed, uint64_t t, struct msg m)
{
	uint64_t at = t + 50000 + rnd(seed) % sc->dmax;

	if (sc->stall_every && rnd(seed) % sc->stall_every == 0)
		at += rnd(seed) % sc->stall;
	if (sc->cut_len && at >= sc->cut_at && t < sc->cut_at + sc->cut_len &&
	    at < sc->cut_at + sc->cut_len + 50000)
		at = sc->cut_at + sc->cut_len + 50000 + rnd(seed) % sc->dmax; /* retransmitted */
	if (at < l->last)
		at = l->last; /* FIFO (TCP, RC) */
	l->last = at;
	m.at = at;
	assert_true(l->tail - l->head < QCAP);
	l->m[l->tail++ % QCAP] = m;
}

static struct msg *peek(struct link *l, uint64_t t)
{
	return l->head != l->tail && l->m[l->head % QCAP].at <= t ? &l->m[l->head % QCAP] : NULL;
}

#define NREQ 4096
struct req {
	uint64_t deadline_c; /* client clock */
	uint64_t gave_up;    /* true time; 0: not (yet) */
	uint64_t applied;    /* true time it started on the ps; 0: not */
	bool answered, pending;
};

struct sim_stats {
	unsigned applied, refused, gave_up, violations;
};

/* One connection from its handshake until the client has given it up (or
 * @horizon), then the ps drains what is in flight.  Return: the stats. */
static struct sim_stats sim_run(const struct scen *sc, uint64_t seed, uint64_t horizon)
{
	static struct link c2s, s2c;
	static struct req rq[NREQ];
	struct coord_gu_clock gc;
	struct coord_gu_cli g;
	struct coord_gu_srv y;
	struct sim_stats st = { 0 };
	uint64_t last_rx = 0, next_ping, busy_until = 0, keep_at = 0, next_req = 0;
	unsigned nreq = 0, lo = 0, serving = NREQ;
	bool alive = true;
	const uint64_t c_off = 7 * MS * 1000, s_off = 123456789;

#define CCLK(t) ((uint64_t)((double)(t)*sc->rc) + c_off)
#define SCLK(t) ((uint64_t)((double)(t)*sc->rs) + s_off)
	memset(&c2s, 0, sizeof(c2s));
	memset(&s2c, 0, sizeof(s2c));
	memset(rq, 0, sizeof(rq));
	memset(&y, 0, sizeof(y));
	coord_gu_clock_init(&gc, 3000, 500, 3); /* window 1.5 s, ping 375 ms */
	coord_gu_srv_init(&y, SCLK(0));
	coord_gu_cli_reset(&g, CCLK(1000000)); /* the handshake's reply came at 1 ms */
	g.ping_seq = 0;
	last_rx = 1000000;
	next_ping = 1000000 + gc.ping_ns;
	{
		struct msg m = { .type = M_SYNC };

		coord_gu_cli_sync(&g, &gc, false, &m.y); /* the first frame */
		put(&c2s, sc, &seed, 1000000, m);
	}
	for (uint64_t t = 1000000; t < horizon + 20000 * MS; t += STEP) {
		struct msg *m;

		while (lo < nreq && !rq[lo].pending)
			lo++; /* the oldest pending request */
		if (t >= horizon && lo == nreq && c2s.head == c2s.tail && s2c.head == s2c.tail &&
		    serving == NREQ)
			break; /* nothing pending, nothing in flight */

		/* ---- the ps: serve in order, one at a time */
		if (serving < NREQ && t >= busy_until) { /* the op is done: its reply */
			struct msg r = { .type = M_RES, .req = serving };

			coord_gu_srv_sent_at(&y, SCLK(t));
			put(&s2c, sc, &seed, t, r);
			serving = NREQ;
		}
		if (serving < NREQ && t >= keep_at) { /* busy: keepalive PONGs (uncounted) */
			put(&s2c, sc, &seed, t, (struct msg){ .type = M_KEEP });
			keep_at = t + 250 * MS;
		}
		while (serving == NREQ && (m = peek(&c2s, t))) {
			c2s.head++;
			if (m->type == M_SYNC) {
				assert_int_equal(coord_gu_srv_sync(&y, &m->y), 0);
				if (m->y.seq) {
					coord_gu_srv_sent_at(&y, SCLK(t));
					put(&s2c, sc, &seed, t, (struct msg){ .type = M_PONG });
				}
				continue;
			}
			if (coord_gu_srv_stale_at(&y, SCLK(t))) {
				struct msg r = { .type = M_RES, .req = m->req, .late = true };

				st.refused++;
				coord_gu_srv_sent_at(&y, SCLK(t));
				put(&s2c, sc, &seed, t, r);
				continue;
			}
			rq[m->req].applied = t;
			st.applied++;
			if (rq[m->req].gave_up)
				st.violations++; /* applied after its sender gave up */
			serving = m->req;
			busy_until = t + 10000;
			if (sc->busy_every && rnd(&seed) % sc->busy_every == 0)
				busy_until += rnd(&seed) % sc->busy;
			keep_at = t + 250 * MS;
		}
		/* ---- the client */
		while ((m = peek(&s2c, t))) {
			s2c.head++;
			if (!alive)
				continue;
			last_rx = t; /* any frame is a sign of life */
			if (m->type == M_KEEP)
				continue;
			coord_gu_cli_rx(&g, CCLK(t)); /* PONG echoes and VAR_RES frames count */
			if (m->type != M_RES || !rq[m->req].pending)
				continue;
			if (!m->late) {
				rq[m->req].pending = false;
				rq[m->req].answered = true;
			} else if (CCLK(t) + gc.window_ns <= rq[m->req].deadline_c && nreq < NREQ) {
				/* Late: send it again (a new request), a VAR_SYNC first,
				 * if its timeout is a window away (ps_client.c) */
				struct msg s = { .type = M_SYNC };

				rq[m->req].pending = false;
				rq[nreq] = (struct req){ .deadline_c = rq[m->req].deadline_c,
							 .pending = true };
				if (g.rx_count != g.synced) {
					coord_gu_cli_sync(&g, &gc, false, &s.y);
					put(&c2s, sc, &seed, t, s);
				}
				put(&c2s, sc, &seed, t,
				    (struct msg){ .type = M_REQ, .req = nreq++ });
			} else {
				rq[m->req].pending = false; /* given up at its timeout */
			}
		}
		if (!alive)
			continue;
		/* silent for heartbeat x misses: lost, every pending request given up */
		if (CCLK(t) - CCLK(last_rx) >= gc.dead_ns) {
			alive = false;
			for (unsigned i = lo; i < nreq; i++)
				if (rq[i].pending) {
					rq[i].pending = false;
					rq[i].gave_up = t;
					st.gave_up++;
				}
			continue;
		}
		for (unsigned i = lo; i < nreq; i++) /* a request's timeout */
			if (rq[i].pending && CCLK(t) >= rq[i].deadline_c) {
				rq[i].pending = false;
				rq[i].gave_up = t;
				st.gave_up++;
			}
		if (t >= next_ping) {
			struct msg s = { .type = M_SYNC };

			coord_gu_cli_sync(&g, &gc, true, &s.y);
			put(&c2s, sc, &seed, t, s);
			next_ping = t + gc.ping_ns;
		}
		if (t >= next_req && t < horizon && nreq < NREQ) {
			if (coord_gu_cli_due(&g, &gc, CCLK(t))) {
				struct msg s = { .type = M_SYNC };

				coord_gu_cli_sync(&g, &gc, false, &s.y);
				put(&c2s, sc, &seed, t, s);
			}
			rq[nreq] = (struct req){ .deadline_c = CCLK(t) + 3000 * MS,
						 .pending = true };
			put(&c2s, sc, &seed, t, (struct msg){ .type = M_REQ, .req = nreq++ });
			next_req = t + 1 * MS + rnd(&seed) % (40 * MS);
		}
	}
#undef CCLK
#undef SCLK
	for (unsigned i = 0; i < nreq; i++) /* every request ended */
		assert_false(rq[i].pending);
	return st;
}

static void test_giveup_simulated(void **state)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	struct sim_stats tot[4] = { { 0 } };

	(void)state;
	for (unsigned run = 0; run < 48; run++) {
		unsigned kind = run % 4;
		struct scen sc = { .dmax = 2 * MS, .rc = 1.0, .rs = 1.0 };
		struct sim_stats st;

		/* clock rates apart by up to 1 % either way */
		sc.rc = 1.0 + ((double)(rnd(&seed) % 2001) - 1000.0) / 100000.0;
		sc.rs = 1.0 + ((double)(rnd(&seed) % 2001) - 1000.0) / 100000.0;
		if (kind == 1) { /* large frames: some take up to 3 s to cross */
			sc.stall = 3000 * MS;
			sc.stall_every = 40;
		} else if (kind == 2) { /* a busy ps: long ops up to 2.5 s */
			sc.busy = 2500 * MS;
			sc.busy_every = 30;
		} else if (kind == 3) { /* a cut of 0.5 to 4 s; its frames arrive late */
			sc.cut_at = 2000 * MS + rnd(&seed) % (3000 * MS);
			sc.cut_len = 500 * MS + rnd(&seed) % (3500 * MS);
		}
		st = sim_run(&sc, rnd(&seed) | 1, 8000 * MS);
		if (st.violations)
			fail_msg("run %u (kind %u, rates %.4f %.4f): %u requests applied after "
				 "their sender gave up",
				 run, kind, sc.rc, sc.rs, st.violations);
		tot[kind].applied += st.applied;
		tot[kind].refused += st.refused;
		tot[kind].gave_up += st.gave_up;
	}
	for (unsigned k = 0; k < 4; k++)
		print_message("kind %u: %u applied, %u refused late, %u given up\n", k,
			      tot[k].applied, tot[k].refused, tot[k].gave_up);
	assert_int_equal(tot[0].refused, 0); /* a healthy link: nothing refused */
	assert_true(tot[0].applied > 1000);
	assert_true(tot[2].refused > 0); /* the busy ps's queue: refused, then sent again */
	assert_true(tot[3].refused > 0); /* what crossed the cut late: refused */
	for (unsigned k = 0; k < 4; k++)
		assert_true(tot[k].applied > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_giveup_clock),
		cmocka_unit_test(test_giveup_srv),
		cmocka_unit_test(test_giveup_cli),
		cmocka_unit_test(test_giveup_simulated),
	};

	return cmocka_run_group_tests_name("giveup", tests, NULL, NULL);
}
