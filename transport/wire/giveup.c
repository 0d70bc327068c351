// SPDX-License-Identifier: MIT
/*
 * transport/wire/giveup.c - Give-up's bookkeeping, both ends (giveup.h): the
 * ps's marks and staleness test, the client's frame count and clock.  The
 * rule: transport/server/srv_proto.c "Give-up"; the client:
 * transport/psclient/ps_conn.c "Give-up".  No clock is read here: every time
 * comes from the caller, on its own host's clock (the two hosts' clocks are
 * never compared).
 */
#include <errno.h>

#include "transport/wire/giveup.h"

/* ---- the ps ------------------------------------------------------------------------ */

void coord_gu_srv_init(struct coord_gu_srv *y, uint64_t now)
{
	y->accept_ns = now;
}

void coord_gu_srv_sent_at(struct coord_gu_srv *y, uint64_t now)
{
	unsigned i;

	y->sent++;
	if (!y->window_ns)
		return; /* never judged before the first VAR_SYNC */
	if (y->nmark && now - y->last_ns < y->window_ns / 32)
		return;
	i = y->nmark++ % COORD_GU_MARKS;
	y->mark_n[i] = y->sent;
	y->mark_ns[i] = now;
	y->last_ns = now;
}

/* No later than when frame @seen left; 0 when no mark says. */
static uint64_t srv_ref(const struct coord_gu_srv *y, uint64_t seen)
{
	unsigned n = y->nmark < COORD_GU_MARKS ? y->nmark : COORD_GU_MARKS;
	uint64_t best = 0, ref = 0;

	if (seen == 0)
		return y->accept_ns;
	if (seen > y->sent)
		return 0; /* frames we never sent */
	for (unsigned i = 0; i < n; i++)
		if (y->mark_n[i] <= seen && y->mark_n[i] >= best) {
			best = y->mark_n[i];
			ref = y->mark_ns[i];
		}
	return ref;
}

int coord_gu_srv_sync(struct coord_gu_srv *y, const struct coord_wire_sync *q)
{
	/* An echo token has bit 63 set: the client tells it from a keepalive PONG. */
	if (q->window_ms == 0 || q->window_ms > COORD_GU_WINDOW_MAX_MS ||
	    (q->seq && !(q->seq & COORD_GU_ECHO)))
		return -EPROTO;
	y->window_ns = (uint64_t)q->window_ms * 1000000ull;
	y->ref_ns = srv_ref(y, q->seen);
	return 0;
}

bool coord_gu_srv_stale_at(const struct coord_gu_srv *y, uint64_t now)
{
	return y->window_ns && now - y->ref_ns >= y->window_ns - y->window_ns / 16;
}

/* ---- the client -------------------------------------------------------------------- */

void coord_gu_clock_init(struct coord_gu_clock *c, int op_timeout_ms, int hb_ms, int misses)
{
	uint64_t hb = hb_ms > 0 ? (uint64_t)hb_ms : 0;

	/* Silent for heartbeat x misses, a connection is lost; a request is
	 * given up no sooner than that or the op timeout after the frame its
	 * VAR_SYNC names; ping well within both. */
	c->dead_ns = hb * (uint64_t)(misses > 0 ? misses : 1) * 1000000u;
	c->window_ns = op_timeout_ms > 0 ? (uint64_t)op_timeout_ms * 1000000u : c->dead_ns;
	if (c->dead_ns && c->dead_ns < c->window_ns)
		c->window_ns = c->dead_ns;
	if (c->window_ns > COORD_GU_WINDOW_MAX_MS * 1000000ull)
		c->window_ns = COORD_GU_WINDOW_MAX_MS * 1000000ull;
	c->ping_ns = c->window_ns / 4;
	if (hb && hb * 1000000u < c->ping_ns)
		c->ping_ns = hb * 1000000u;
	if (c->dead_ns && c->dead_ns / 3 < c->ping_ns)
		c->ping_ns = c->dead_ns / 3;
	if (c->ping_ns && c->ping_ns < 1000000u)
		c->ping_ns = 1000000u;
}

void coord_gu_cli_reset(struct coord_gu_cli *g, uint64_t now)
{
	g->rx_count = g->synced = 0; /* frame 0: the handshake */
	g->rx_ns = g->synced_ns = now;
}

void coord_gu_cli_rx(struct coord_gu_cli *g, uint64_t now)
{
	g->rx_count++;
	g->rx_ns = now;
}

bool coord_gu_cli_due(const struct coord_gu_cli *g, const struct coord_gu_clock *c, uint64_t now)
{
	return c->window_ns && g->rx_count != g->synced && now - g->synced_ns >= c->window_ns / 4;
}

void coord_gu_cli_sync(struct coord_gu_cli *g, const struct coord_gu_clock *c, bool echo,
		       struct coord_wire_sync *y)
{
	y->seq = echo ? COORD_GU_ECHO | ++g->ping_seq : 0; /* the echo bit: not a keepalive */
	y->seen = g->rx_count;
	y->window_ms = (uint32_t)(c->window_ns / 1000000u);
	y->hb_ms = (uint32_t)(c->ping_ns / 1000000u);
	g->synced = g->rx_count;
	g->synced_ns = g->rx_ns;
}
