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

/* One simulated connection: both ends, their links, the requests. */
struct sim {
	const struct scen *sc;
	uint64_t seed;
	struct link c2s, s2c;
	struct req rq[NREQ];
	struct coord_gu_clock gc;
	struct coord_gu_cli g;
	struct coord_gu_srv y;
	struct sim_stats st;
	uint64_t last_rx, next_ping, busy_until, keep_at, next_req;
	unsigned nreq, lo, serving; /* serving: the op the ps runs (NREQ: none) */
	bool alive;
};

/* The two hosts' clocks at true time @t: rates and offsets of their own. */
static uint64_t cclk(const struct sim *s, uint64_t t)
{
	return (uint64_t)((double)t * s->sc->rc) + 7 * MS * 1000;
}

static uint64_t sclk(const struct sim *s, uint64_t t)
{
	return (uint64_t)((double)t * s->sc->rs) + 123456789;
}

/* The client queues a VAR_SYNC at @t (@echo: a ping). */
static void cli_sync(struct sim *s, uint64_t t, bool echo)
{
	struct msg m = { .type = M_SYNC };

	coord_gu_cli_sync(&s->g, &s->gc, echo, &m.y);
	put(&s->c2s, s->sc, &s->seed, t, m);
}

/* The client queues request @i at @t. */
static void cli_req(struct sim *s, uint64_t t, uint64_t deadline_c)
{
	s->rq[s->nreq] = (struct req){ .deadline_c = deadline_c, .pending = true };
	put(&s->c2s, s->sc, &s->seed, t, (struct msg){ .type = M_REQ, .req = s->nreq++ });
}

/* The ps at @t: the op it runs ends (its reply), keepalives while busy,
 * then what arrived, in order, one op at a time. */
static void ps_step(struct sim *s, uint64_t t)
{
	struct msg *m;

	if (s->serving < NREQ && t >= s->busy_until) { /* the op is done: its reply */
		coord_gu_srv_sent_at(&s->y, sclk(s, t));
		put(&s->s2c, s->sc, &s->seed, t, (struct msg){ .type = M_RES, .req = s->serving });
		s->serving = NREQ;
	}
	if (s->serving < NREQ && t >= s->keep_at) { /* busy: keepalive PONGs (uncounted) */
		put(&s->s2c, s->sc, &s->seed, t, (struct msg){ .type = M_KEEP });
		s->keep_at = t + 250 * MS;
	}
	while (s->serving == NREQ && (m = peek(&s->c2s, t))) {
		s->c2s.head++;
		if (m->type == M_SYNC) {
			assert_int_equal(coord_gu_srv_sync(&s->y, &m->y), 0);
			if (m->y.seq) {
				coord_gu_srv_sent_at(&s->y, sclk(s, t));
				put(&s->s2c, s->sc, &s->seed, t, (struct msg){ .type = M_PONG });
			}
			continue;
		}
		if (coord_gu_srv_stale_at(&s->y, sclk(s, t))) {
			struct msg r = { .type = M_RES, .req = m->req, .late = true };

			s->st.refused++;
			coord_gu_srv_sent_at(&s->y, sclk(s, t));
			put(&s->s2c, s->sc, &s->seed, t, r);
			continue;
		}
		s->rq[m->req].applied = t;
		s->st.applied++;
		if (s->rq[m->req].gave_up)
			s->st.violations++; /* applied after its sender gave up */
		s->serving = m->req;
		s->busy_until = t + 10000;
		if (s->sc->busy_every && rnd(&s->seed) % s->sc->busy_every == 0)
			s->busy_until += rnd(&s->seed) % s->sc->busy;
		s->keep_at = t + 250 * MS;
	}
}

/* The client takes in what arrived by @t: any frame a sign of life, the
 * counted ones counted, replies; one the ps refused late is sent again
 * (a new request, a VAR_SYNC first) if its timeout is a window away
 * (ps_client.c "Late"), else it is given up at its timeout. */
static void cli_rx(struct sim *s, uint64_t t)
{
	struct msg *m;

	while ((m = peek(&s->s2c, t))) {
		struct req *q;

		s->s2c.head++;
		if (!s->alive)
			continue;
		s->last_rx = t;
		if (m->type == M_KEEP)
			continue;
		coord_gu_cli_rx(&s->g, cclk(s, t)); /* PONG echoes and VAR_RES frames count */
		q = &s->rq[m->req];
		if (m->type != M_RES || !q->pending)
			continue;
		q->pending = false;
		q->answered = !m->late;
		if (m->late && cclk(s, t) + s->gc.window_ns <= q->deadline_c && s->nreq < NREQ) {
			if (s->g.rx_count != s->g.synced)
				cli_sync(s, t, false);
			cli_req(s, t, q->deadline_c);
		}
	}
}

/* The client at @t: given up on silence or at a timeout, pings, requests. */
static void cli_step(struct sim *s, uint64_t t, uint64_t horizon)
{
	bool dead = cclk(s, t) - cclk(s, s->last_rx) >= s->gc.dead_ns;

	/* silent for heartbeat x misses: lost, every pending request given up;
	 * else each at its timeout */
	for (unsigned i = s->lo; i < s->nreq; i++)
		if (s->rq[i].pending && (dead || cclk(s, t) >= s->rq[i].deadline_c)) {
			s->rq[i].pending = false;
			s->rq[i].gave_up = t;
			s->st.gave_up++;
		}
	if (dead) {
		s->alive = false;
		return;
	}
	if (t >= s->next_ping) {
		cli_sync(s, t, true);
		s->next_ping = t + s->gc.ping_ns;
	}
	if (t >= s->next_req && t < horizon && s->nreq < NREQ) {
		if (coord_gu_cli_due(&s->g, &s->gc, cclk(s, t)))
			cli_sync(s, t, false);
		cli_req(s, t, cclk(s, t) + 3000 * MS);
		s->next_req = t + 1 * MS + rnd(&s->seed) % (40 * MS);
	}
}

/* One connection from its handshake until @horizon (no new requests
 * after it) and nothing is pending or in flight, or the client lost it
 * and the ps drained what was in flight.  Return: the stats. */
static struct sim_stats sim_run(const struct scen *sc, uint64_t seed, uint64_t horizon)
{
	static struct sim s;

	memset(&s, 0, sizeof(s));
	s.sc = sc;
	s.seed = seed;
	s.serving = NREQ;
	s.alive = true;
	coord_gu_clock_init(&s.gc, 3000, 500, 3); /* window 1.5 s, ping 375 ms */
	coord_gu_srv_init(&s.y, sclk(&s, 0));
	coord_gu_cli_reset(&s.g, cclk(&s, 1000000)); /* the handshake's reply came at 1 ms */
	s.last_rx = 1000000;
	s.next_ping = 1000000 + s.gc.ping_ns;
	cli_sync(&s, 1000000, false); /* the first frame */
	for (uint64_t t = 1000000; t < horizon + 20000 * MS; t += STEP) {
		while (s.lo < s.nreq && !s.rq[s.lo].pending)
			s.lo++; /* the oldest pending request */
		if (t >= horizon && s.lo == s.nreq && s.c2s.head == s.c2s.tail &&
		    s.s2c.head == s.s2c.tail && s.serving == NREQ)
			break; /* nothing pending, nothing in flight */
		ps_step(&s, t);
		cli_rx(&s, t);
		if (s.alive)
			cli_step(&s, t, horizon);
	}
	for (unsigned i = 0; i < s.nreq; i++) /* every request ended */
		assert_false(s.rq[i].pending);
	return s.st;
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
