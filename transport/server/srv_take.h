/* SPDX-License-Identifier: MIT */
/*
 * transport/server/srv_take.h - the take-back's claim word as the protocol
 * engine's driving thread uses it around each closure it runs (srv_take.c
 * T1, T3; the watcher's side is coord_srv_take_back(), srv_proto.h).
 */
#ifndef COORD_TRANSPORT_SRV_TAKE_H
#define COORD_TRANSPORT_SRV_TAKE_H

#include <stdatomic.h>
#include <stdint.h>

#include "transport/server/srv_proto.h"

#define TB_RUN 1ull   /* a closure runs; tb_rest is published (T1) */
#define TB_TAKEN 2ull /* the watcher holds the take (T2) */
#define TB_DONE 4ull  /* ... and is done: tb_end is published (T2) */
#define TB_SHIFT 3

/* T3: the watcher took the word: wait until it is done (srv_take.c). */
COORD_HIDDEN void coord_srv_tb_wait(struct coord_srv_conn *k);
/* Free what takes made (the connection's end). */
COORD_HIDDEN void coord_srv_take_fini(struct coord_srv_conn *k);

/* T1: the closure of record tb_idx - 1 (the one on_req() took last)
 * starts; @rest: its frame from the next record on. */
static inline void tb_run(struct coord_srv_conn *k, const struct coord_wire_iter *rest)
{
	uint64_t idx = k->tb_idx - 1;

	if (!k->tb_ok)
		return; /* T5: not this coordinator */
	k->tb_rest = *rest;
	/* T1 (release): tb_rest before the word; pairs with the watcher's
	 * acquire CAS in coord_srv_take_back(). */
	atomic_store_explicit(&k->tb_word, idx << TB_SHIFT | TB_RUN, memory_order_release);
}

/* T1: that closure ended: take the word back (one uncontended CAS), or wait
 * for the watcher that took it (T3). */
static inline void tb_ran(struct coord_srv_conn *k)
{
	uint64_t w = (k->tb_idx - 1) << TB_SHIFT | TB_RUN;

	if (!k->tb_ok)
		return; /* T5: nothing was published */
	/* T1 (acq_rel): succeeds unless the watcher's CAS took the word
	 * first (T2, T3); relaxed on failure, coord_srv_tb_wait() acquires. */
	if (unlikely(!atomic_compare_exchange_strong_explicit(
		    &k->tb_word, &w, 0, memory_order_acq_rel, memory_order_relaxed)))
		coord_srv_tb_wait(k);
}

/* T1: coord_exec() of @call on @k (@buf, @ctx, @cause as there), published
 * as the record before @rest. */
static inline int tb_exec(struct coord_srv_conn *k, const struct coord_wire_iter *rest,
			  const struct coord_exec_call *call, void *(*buf)(void *sink, size_t len),
			  struct coord_ctx *ctx, int *cause)
{
	int code;

	tb_run(k, rest);
	code = coord_exec(&k->env, call, buf, k, ctx, cause);
	tb_ran(k);
	return code;
}

#endif /* COORD_TRANSPORT_SRV_TAKE_H */
