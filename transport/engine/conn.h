/* SPDX-License-Identifier: MIT */
/*
 * transport/engine/conn.h - a coordinator's connection to a worker, as the
 * connection engine (engine.h) keeps it: its in-flight slots, its output
 * buffer of REQ frames, the handling of the results that come back, and
 * the liveness verdict.  The backends keep how bytes move.
 *
 * A backend embeds the fields with COORD_CONN_EMBED as the first member of
 * its connection: it names them directly (k->nfree), as before, and passes
 * &k->conn to the functions below (the union is Linux's struct_group_tagged
 * idiom).
 *
 * Slots.  A connection has @window slots; a request carries (seq << 32 |
 * slot) as its closure id, seq counting the slot's uses, so a result names
 * a slot in use, with the same seq and the closure's attempt, or the worker
 * is misbehaving and its connection is failed.  The closure's own id
 * (coord_rv_id(), which its function sees as coord_ctx_closure(), B8)
 * travels beside it in the record's ID field (wire.h).
 *
 * Synchronization: none.  A connection belongs to its loop (whoever holds
 * the loop's tok, engine.h E1); nothing here is shared between threads.
 */
#ifndef COORD_TRANSPORT_CONN_H
#define COORD_TRANSPORT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/dispatch.h"
#include "transport/wire/wire.h"

struct coord_eloop;

#define COORD_CONN_MEMBERS                                                                         \
	struct coord_worker *w;                                                                    \
	bool up;                                                                                   \
	bool idle; /* up with nothing in flight (the transport counts them) */                     \
	/* output: REQ and PING frames being written (ow, over obuf) */                            \
	uint8_t *obuf;                                                                             \
	size_t ocap;                                                                               \
	struct coord_wire_writer ow;                                                               \
	/* in flight: each slot's closure, seq and send time (B6); free slots */                   \
	struct coord_closure **slots;                                                              \
	uint32_t *seq;                                                                             \
	uint64_t *sent_ns;                                                                         \
	uint32_t *freel;                                                                           \
	unsigned nfree, window;                                                                    \
	/* liveness: anything received resets last_rx_ns; ping_ns: a PING is out */                \
	uint64_t last_rx_ns, ping_ns;                                                              \
	/* placement (place.h): each slot's expected run time, their sum, and */                   \
	/* when it last went from idle to busy */                                                  \
	/* and how many slots hold one of unknown or long run time (nlong) */                      \
	uint32_t *run;                                                                             \
	uint64_t backlog_ns, busy_ns;                                                              \
	unsigned nlong;                                                                            \
	bool gave_back; /* PL7: it returned work; counts in nlong until it answers */              \
	/* the engine's (engine.h): its loop; on the loop's lists of outputs */                    \
	/* to send and of re-admissions; output that must go now (a PING or */                     \
	/* a CANCEL, never corked); corking: REQ frames and closures in the */                     \
	/* output, REQ frames sent and not yet answered (engine.c "Frames") */                     \
	struct coord_eloop *loop;                                                                  \
	struct coord_conn *dirty_next, *admit_next;                                                \
	bool dirty, urgent;                                                                        \
	unsigned ow_reqs, ow_cl, reqs_out;                                                         \
	char peer[80]; /* its address, for messages */

struct coord_conn {
	COORD_CONN_MEMBERS
};

#define COORD_CONN_EMBED                                                                           \
	union {                                                                                    \
		struct coord_conn conn;                                                            \
		struct {                                                                           \
			COORD_CONN_MEMBERS                                                         \
		};                                                                                 \
	}

/* One dispatcher (event loop) per opts.tcp_loops, default 2, at most one
 * per worker: the coord_tp_ops.ndispatchers of tcp and rdma. */
COORD_PROV unsigned coord_conn_ndispatchers(const struct coord *c);

/* Make @k's slots (@window) and output buffer (@ocap bytes); up and idle.
 * -ENOMEM (what was made is freed by coord_conn_fini()). */
COORD_HIDDEN int coord_conn_init(struct coord_conn *k, struct coord_worker *w, unsigned window,
				 size_t ocap);
COORD_HIDDEN void coord_conn_fini(struct coord_conn *k);

/*
 * coord_conn_put_req() - write @cl's REQ record into @k's output (in the
 * open frame, or a new one), in a free slot it takes; @now: its send time.
 * 1 if the record began a new REQ frame, 0 if it joined the open one;
 * -EMSGSIZE if it cannot fit one frame of @max_frame bytes, -ENOMEM if the
 * output could not grow (the slot is free again in both cases).  @k must
 * have a free slot.
 */
COORD_HIDDEN int coord_conn_put_req(struct coord_conn *k, struct coord_closure *cl, uint64_t now,
				    uint32_t max_frame, uint32_t *slot);

/*
 * coord_conn_pw_release() - S9 (runtime/pw.c P2, P3): take the per-worker
 * resources released to dispatcher @d and write one PW_FREE frame naming
 * them into the output of each live connection @conn(@ctx, i), i <
 * @nconns, after what it holds (so after every REQ placed before), then
 * @flush(k) to send it.  Call when coord_dispatch_pw_pending(@d), at the
 * start of a round and before placing a batch taken from the queue.
 */
#define COORD_CONN_PW_BATCH 64

/*
 * coord_conn_cancel() - S3: when the coordinator's generation moved past
 * *@sent, write one CANCEL frame of it (wire.h) into the output of each
 * live connection @conn(@ctx, i), i < @nconns, then @flush(k) to send it at
 * once (never held back), and remember it in *@sent.  Its workers answer
 * what they have not started "not started" (coord_conn_res_finish() puts
 * those back, where a stale one is cancelled).  Call at the start of every
 * round (ops->cancel wakes the loops for it).
 */
COORD_HIDDEN void coord_conn_cancel(struct coord_dispatcher *d, uint32_t *sent,
				    struct coord_conn *(*conn)(void *, unsigned), void *ctx,
				    unsigned nconns, void (*flush)(struct coord_conn *));
COORD_HIDDEN void coord_conn_pw_release(struct coord_dispatcher *d,
					struct coord_conn *(*conn)(void *, unsigned), void *ctx,
					unsigned nconns, void (*flush)(struct coord_conn *));

/* Empty every slot of @k and put its closure back on the queue (S2, once
 * each: engine.h E2); how many. */
COORD_HIDDEN unsigned coord_conn_put_back_all(struct coord_conn *k, struct coord_dispatcher *d);

/*
 * coord_conn_res_claim() - the closure result @r is for, its slot freed;
 * NULL with *@rc = -EBADSLT (names no closure in flight here) or -EPROTO
 * (another attempt, or a positive code).  *@slot: the slot it was in (its
 * sent_ns is still there to read).
 */
COORD_HIDDEN struct coord_closure *coord_conn_res_claim(struct coord_conn *k,
							const struct coord_wire_res *r,
							uint32_t *slot, int *rc);

/*
 * coord_conn_res_finish() - make claimed @cl final with result @r from
 * @k's worker: its value (copied), or its error (message and cause).
 * true: finished (the caller retires it with coord_dispatch_finish());
 * false: a transient ps failure (S11), or not started (S3: a CANCEL dropped
 * it), put back on the queue instead (where a stale one is cancelled), or
 * returned unstarted (wire.h COORD_WIRE_RETURNED: queued behind a closure
 * that ran long), given back as it was (coord_dispatch_give_back()).
 */
COORD_HIDDEN bool coord_conn_res_finish(struct coord_conn *k, struct coord_dispatcher *d,
					struct coord_closure *cl, const struct coord_wire_res *r);

/*
 * Liveness (issue 4).  coord_conn_check_due(): is a check of a loop's
 * connections due at @now (rate-limited by *@next_check_ns, which it
 * advances)?  Its period, or 0 (*@next_check_ns then says when; 0 when
 * heartbeats and closure deadlines are both off).
 */
COORD_HIDDEN uint64_t coord_conn_check_due(const struct coord_opts *o, uint64_t now,
					   uint64_t *next_check_ns);

/* What a liveness check does to a connection (the transport's own). */
struct coord_conn_act {
	void (*fail)(struct coord_conn *k, const char *why); /* fail it: @why says why */
	void (*ping)(struct coord_conn *k, uint64_t token);  /* send a PING carrying @token */
};

/*
 * Check live connection @k in a check of period @period at @now.
 *   - Silent for heartbeat_misses intervals, with a PING out for
 *     heartbeat_misses - 1 of them, it fails (declared one check early, so
 *     within misses x H of its last frame; the PING's time counts two
 *     checks short, as it goes out up to a check after the first H).  A
 *     worker answers when asked (or sends unsolicited PONGs while busy);
 *     one never asked, because our loop did not run, is not failed for
 *     our silence.
 *   - Silent for a heartbeat interval, it gets a PING (our interval in
 *     ms), once until something is received; ping_ns is when.
 *   - A closure past closure_timeout_ms (B6) fails it.
 * Silence and deadlines are measured at @seen, not at the clock: @seen is
 * when the loop last took in everything that had arrived on its
 * connections (its last pass over their completions).  A loop that did
 * not run for a while (descheduled, a stalled guest) then does not fail a
 * worker whose PONG or result is already there, unread; a worker that
 * really is silent is failed at most one round later.
 */
COORD_HIDDEN void coord_conn_check(struct coord_conn *k, const struct coord_opts *o, uint64_t now,
				   uint64_t seen, uint64_t period,
				   const struct coord_conn_act *act);

#endif /* COORD_TRANSPORT_CONN_H */
