/* SPDX-License-Identifier: MIT */
/*
 * transport/place.h - where a network transport's event loop sends the next
 * closure: the placement policy the tcp and rdma coordinator sides share,
 * over the connections of one loop (struct coord_conn, conn.h).
 *
 * The rules (what they keep true):
 *   PL1  A closure is sent to a worker only where it can start soon: onto
 *        an idle connection (up, started, nothing in flight), or packed
 *        behind closures known to be short (packable(): their expected run
 *        times sum to under PACK_WAIT_NS and results are coming).  A
 *        closure is never sent ahead behind one of unknown or long run time
 *        (PL6): it waits in the queue, where any worker takes it: an idle
 *        one, one whose staggered start passes (S13) or one that comes back
 *        (S10).  So while a staggered start is still to come, credit (how
 *        many a loop may take) counts one closure per idle started
 *        connection and the free slots of the one being packed, not every
 *        free slot; the same while another loop has an idle worker (or one
 *        still to start: it counts as idle there), so that one loop does
 *        not fill its workers' windows with what the other loop's worker
 *        could start (S13 over several loops: all 30 closures went to the
 *        loop whose one worker started first).  Once every worker has
 *        started and no other loop has one idle, it is every free slot
 *        that PL6 allows (PL4): pick() still prefers an idle connection,
 *        so a closure goes behind a busy one only when no worker is idle,
 *        and one not started when an error is taken is dropped there (S3,
 *        the CANCEL frame).  Counting only the packed connection's room
 *        there too cost 2.5-3x of the rate at 256 in flight (bench_tcp:
 *        1.6-1.9 against 4.6-5.0 M closures/s, one or two workers).
 *   PL2  Packing: a frame costs each side a send, a receive and usually a
 *        wake-up; an empty closure costs a worker well under a microsecond.
 *        So a loop keeps adding to one busy connection while what is on it
 *        is known to be short, and moves on when it is not.  Past the budget
 *        (PL5) it goes on filling the window only while everything on the
 *        connection is known to be short and no worker is idle: nobody
 *        could start those closures sooner.  Workers report
 *        each successful call's run time in its result (wire.h), and each
 *        loop keeps per function an estimate that rises at once to a longer
 *        sample and falls by half the difference per shorter one
 *        (runest.h @est).  A function never seen to finish counts as long.
 *   PL3  A known-short function that turns long is caught twice: its first
 *        long result raises the estimate, and a busy connection with no
 *        result for PACK_STALL_NS is no longer packed.
 *   PL4  Counts kept as slots and connections change (free_short, nidle,
 *        ndown), so credit() is O(1) once every staggered start has passed
 *        while no other loop has an idle worker; else it scans the loop's
 *        connections.
 *   PL5  The budget of PL2 and the silence of PL3 scale with the link: a
 *        closure may wait behind one round trip's worth of known-short work
 *        (at least PACK_WAIT_NS), so the window still hides the link's
 *        latency (a worker never idles a round trip between frames), and a
 *        connection is no longer packed after 4 round trips of silence (at
 *        least PACK_STALL_NS).  The round trip is the minimum, over a
 *        window of results, of result time less the reported run time: the
 *        link and the loops, not the wait behind other closures.
 *   PL6  S2 (issue 20): a closure never waits in a worker's window behind
 *        one of unknown or long run time, since another worker may go
 *        idle (finish, start late, come back) while it waits; it is never
 *        sent there rather than taken back (a worker busy in a long
 *        closure could not answer a recall until it ends).  A slot's
 *        closure is long when its function's gate (runest.h: the shorter
 *        of its last two run times, unknown until one) is not under
 *        PACK_WAIT_NS (PL5); a connection holding one (nlong) is not
 *        packable, pick() never falls back to it, and its free slots leave
 *        free_short, the credit of PL4.  After a long closure was placed
 *        (last_long) the next are expected long too: credit is one per
 *        idle connection (or one, to learn whether the stream turned
 *        short, while none is idle), so a loop does not take a batch to
 *        place one and give the rest back.  What a batch cannot place
 *        goes back to the front of the queue as it was
 *        (coord_dispatch_give_back(): attempt unchanged), for whichever
 *        worker frees first, over any loop.
 *   PL7  Take-back: a function known short whose closure turns long would
 *        hold what was packed behind it; the worker gives that back
 *        unstarted once the closure has run past COORD_SRV_TAKE_NS
 *        (transport/server/srv_take.c T1-T5: its watcher thread answers
 *        the records "returned", wire.h), and the engine gives them back
 *        to the front of the queue as they were (conn.c
 *        coord_conn_res_finish()), where an idle worker takes them.  A
 *        connection that returned work counts as holding one closure of
 *        long run time (gave_back, in nlong) until it answers anything
 *        else, so nothing is packed there again while the long one runs
 *        (PL3's silence alone would not do: the returned answers are
 *        traffic).
 *
 * Synchronization: a struct coord_place and its connections belong to one
 * loop (whoever holds it: rdma.c D1); nothing here is shared between
 * threads except @idle_all, a relaxed counter of idle connections over
 * every loop of the transport (a placement hint).
 */
#ifndef COORD_TRANSPORT_PLACE_H
#define COORD_TRANSPORT_PLACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/engine/conn.h"
#include "transport/engine/runest.h"

struct coord_place {
	struct coord_conn **conns; /* the loop's connections */
	unsigned nconns, rr;
	struct coord_conn *pack; /* the connection being packed (PL2) */
	/* Per function: its run time on a worker, as results reported it
	 * (runest.h: the estimate PL2 budgets by, the gate PL6 places by). */
	struct coord_runest *run;
	uint32_t nfn;
	/* PL4, PL6: free slots on live connections with nothing of unknown
	 * or long run time in flight, the last staggered start, idle and
	 * down connections of this loop; was the last closure placed of
	 * unknown or long run time? */
	uint64_t free_short, start_end;
	unsigned nidle, ndown;
	bool last_long;
	/* PL5: the link's round trip (the minimum of the last window of
	 * samples), the minimum of the window being filled, its samples. */
	uint64_t rtt_ns, rtt_win;
	unsigned rtt_n;
	_Atomic int *idle_all; /* idle connections over all loops (hint) */
};

/* Make @p for @nconns connections (set p->conns[i] after) and @nfn
 * functions; @idle_all: the transport's counter.  0 or -ENOMEM. */
COORD_HIDDEN int coord_place_init(struct coord_place *p, unsigned nconns, uint32_t nfn,
				  _Atomic int *idle_all);
COORD_HIDDEN void coord_place_fini(struct coord_place *p);

/* The loop starts: count its connections (each up, idle and started or
 * not). */
COORD_HIDDEN void coord_place_start(struct coord_place *p);

/* Keep @k's idle flag and the idle counts in step with its slots. */
COORD_HIDDEN void coord_place_idle_update(struct coord_place *p, struct coord_conn *k);

/* @cl went into @k's slot @slot at @now (coord_conn_put_req()). */
COORD_HIDDEN void coord_place_sent(struct coord_place *p, struct coord_conn *k,
				   const struct coord_closure *cl, uint32_t slot, uint64_t now);

/* The result of @cl (function @fn) freed @k's slot @slot; @run_ns: the run
 * time it reported (coord_wire_run_ns()); @returned: the worker gave it
 * back unstarted (PL7). */
COORD_HIDDEN void coord_place_result(struct coord_place *p, struct coord_conn *k, uint32_t fn,
				     uint32_t slot, uint32_t run_ns, bool returned);

/* @k is failing: call before its closures are put back (it still holds
 * them); it counts as down until coord_place_up(). */
COORD_HIDDEN void coord_place_down(struct coord_place *p, struct coord_conn *k);
/* @k is up again (re-admitted), with every slot free. */
COORD_HIDDEN void coord_place_up(struct coord_place *p, struct coord_conn *k);

/* May a closure be packed onto busy connection @k at @now (PL2, PL3)? */
COORD_HIDDEN bool coord_place_packable(const struct coord_place *p, const struct coord_conn *k,
				       uint64_t now);

/*
 * coord_place_pick() - the connection the next untargeted closure goes to
 * (PL1): the one being packed while it may be, else the fullest packable
 * one, else an idle started one (fewest in flight; ties round robin).
 * Only when none is left (the packed one filled its budget within this
 * batch: credit counted its free slots) the least loaded started one with
 * a free slot; NULL if there is none.
 */
COORD_HIDDEN struct coord_conn *coord_place_pick(struct coord_place *p, uint64_t now);

/*
 * coord_place_credit() - how many closures the loop may take now (PL1).
 * *@next_start: the earliest staggered start still to come (S13), or 0;
 * *@has_idle: an idle started connection exists; *@has_down: some
 * connection is down (its worker may be re-admitted).
 */
COORD_HIDDEN unsigned coord_place_credit(struct coord_place *p, uint64_t now, uint64_t *next_start,
					 bool *has_idle, bool *has_down);

/*
 * coord_place_room() - room on live, started @k for closures targeted at its
 * worker (B4, ops->room), by PL1: 1 when it is idle, its free slots while it
 * may be packed, else 0 (they wait in the coordinator's queue, where S3's
 * cancellation reaches them, until it can start them soon).
 */
COORD_HIDDEN int coord_place_room(const struct coord_place *p, const struct coord_conn *k,
				  uint64_t now);

/* Idle connections on the transport's other loops (a hint, may be < 0). */
COORD_HIDDEN int coord_place_idle_elsewhere(const struct coord_place *p);

#endif /* COORD_TRANSPORT_PLACE_H */
