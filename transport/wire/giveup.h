/* SPDX-License-Identifier: MIT */
/*
 * transport/wire/giveup.h - Give-up, both ends, whatever carries the frames
 * (tcp or rdma): a ps never applies a request after its sender gave up on
 * it.  The rule and why it holds: transport/server/srv_proto.c "Give-up"
 * (the ps) and transport/psclient/ps_conn.c "Give-up" (the client); the
 * frame: wire.h VAR_SYNC.  This file is the one copy of the bookkeeping
 * both sides keep: the ps's marks and its staleness test (struct
 * coord_gu_srv), the client's frame count and when to name it (struct
 * coord_gu_cli), and the client's clock (window, ping, silence) from its
 * options.  Pure functions of their arguments and a time the caller reads
 * (tests/test_giveup.c runs both ends on simulated clocks); each struct is
 * used by one thread at a time (its connection's; the client's under its
 * k->lock).
 */
#ifndef COORD_TRANSPORT_GIVEUP_H
#define COORD_TRANSPORT_GIVEUP_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/util/util.h"
#include "transport/wire/wire.h"

/* Marks of (frame count, send time) a ps connection keeps. */
#define COORD_GU_MARKS 64
/* An echo token (a PONG answering a VAR_SYNC, counted) has this bit. */
#define COORD_GU_ECHO (1ull << 63)
/* The longest window a VAR_SYNC may name (and the client's cap), ms. */
#define COORD_GU_WINDOW_MAX_MS 3600000u

/**
 * struct coord_gu_srv - the ps's side of one connection.
 * @accept_ns: frame 0 (the handshake) left no earlier than this.
 * @sent:      frames counted (VAR_RES frames, VAR_SYNC echoes).
 * @ref_ns:    when frame @seen of the last VAR_SYNC left, or earlier.
 * @window_ns: 0: not judged (no VAR_SYNC yet).
 * @last_ns:   the newest mark's time.
 * @mark_n/@mark_ns: the ring of marks; @nmark made (next: nmark % MARKS).
 */
struct coord_gu_srv {
	uint64_t accept_ns;
	uint64_t sent;
	uint64_t ref_ns;
	uint64_t window_ns;
	uint64_t last_ns;
	uint64_t mark_n[COORD_GU_MARKS], mark_ns[COORD_GU_MARKS];
	unsigned nmark;
};

/* The connection was accepted at @now (before the handshake's last frame). */
COORD_HIDDEN void coord_gu_srv_init(struct coord_gu_srv *y, uint64_t now);
/* A frame the client counts is about to leave at @now: number it, and mark
 * when (at most every window / 32). */
COORD_HIDDEN void coord_gu_srv_sent_at(struct coord_gu_srv *y, uint64_t now);
/* The same, reading the clock only once the connection is judged. */
static inline void coord_gu_srv_sent(struct coord_gu_srv *y)
{
	if (!y->window_ns)
		y->sent++; /* never judged before the first VAR_SYNC */
	else
		coord_gu_srv_sent_at(y, coord_now_ns());
}
/*
 * coord_gu_srv_sync() - a VAR_SYNC @q arrived: check it, take its window
 * and the reference time of the frame it names.  Return: 0, or -EPROTO (a
 * window of 0 or over COORD_GU_WINDOW_MAX_MS, a token without the echo bit).
 */
COORD_HIDDEN int coord_gu_srv_sync(struct coord_gu_srv *y, const struct coord_wire_sync *q);
/* May a request starting at @now no longer be applied (its sender may
 * have given up)? */
COORD_HIDDEN bool coord_gu_srv_stale_at(const struct coord_gu_srv *y, uint64_t now);
static inline bool coord_gu_srv_stale(const struct coord_gu_srv *y)
{
	return y->window_ns && coord_gu_srv_stale_at(y, coord_now_ns());
}

/**
 * struct coord_gu_clock - a client's give-up clock, from its options.
 * @dead_ns:   a connection silent this long is lost (0: never).
 * @window_ns: the least time from receiving the frame a VAR_SYNC names to
 *             giving up on a request after it (0: no VAR_SYNC is sent).
 * @ping_ns:   a VAR_SYNC asking for an echo this often (0: never).
 */
struct coord_gu_clock {
	uint64_t dead_ns, window_ns, ping_ns;
};

/* The clock of a client with these options (coord_opts ps_timeout_ms,
 * heartbeat_ms, heartbeat_misses; <= 0: none). */
COORD_HIDDEN void coord_gu_clock_init(struct coord_gu_clock *c, int op_timeout_ms, int hb_ms,
				      int misses);

/**
 * struct coord_gu_cli - the client's side of one connection.
 * @rx_count: frames counted on it (frame 0: the handshake).
 * @rx_ns:    when the newest came.
 * @synced, @synced_ns: the count the last VAR_SYNC named, and when that
 *            frame came.
 * @ping_seq: the last echo token's number.
 */
struct coord_gu_cli {
	uint64_t rx_count, rx_ns, synced, synced_ns, ping_seq;
};

/* A new connection, its handshake done at @now: frame 0, named. */
COORD_HIDDEN void coord_gu_cli_reset(struct coord_gu_cli *g, uint64_t now);
/* A counted frame (a VAR_RES frame, an echo) arrived at @now. */
COORD_HIDDEN void coord_gu_cli_rx(struct coord_gu_cli *g, uint64_t now);
/* Before requests at @now: should a VAR_SYNC name a newer frame first (the
 * last one names a frame received a quarter window ago, newer ones came)? */
COORD_HIDDEN bool coord_gu_cli_due(const struct coord_gu_cli *g, const struct coord_gu_clock *c,
				   uint64_t now);
/* Fill the VAR_SYNC that names what was counted (@echo: ask for a PONG)
 * and remember it as the last named. */
COORD_HIDDEN void coord_gu_cli_sync(struct coord_gu_cli *g, const struct coord_gu_clock *c,
				    bool echo, struct coord_wire_sync *y);

#endif /* COORD_TRANSPORT_GIVEUP_H */
