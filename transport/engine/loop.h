/* SPDX-License-Identifier: MIT */
/*
 * transport/engine/loop.h - what the engine's two halves share: the loop
 * (loop.c) and its connections (engine.c).  Private to transport/engine/.
 * Everything here runs with the loop's tok held (engine.h E1).
 */
#ifndef COORD_TRANSPORT_ENGINE_LOOP_H
#define COORD_TRANSPORT_ENGINE_LOOP_H

#include "transport/engine/engine.h"

/* Retire the completed closures in one go (counts, references, wakes). */
COORD_HIDDEN void coord_eng_finish(struct coord_eloop *l);

/* @cl is final: retire it with the others of this round. */
static inline void coord_eng_done(struct coord_eloop *l, struct coord_closure *cl)
{
	l->done[l->ndone++] = cl;
	if (l->ndone == l->done_cap)
		coord_eng_finish(l);
}

/* Liveness of @l's connections (conn.h coord_conn_check()), rate-limited,
 * as of the loop's last read (read_ns); the next due time (0: none). */
COORD_HIDDEN uint64_t coord_eng_check(struct coord_eloop *l, uint64_t now);

/* Install the connections the recovery thread dialled again. */
COORD_HIDDEN void coord_eng_admit(struct coord_eloop *l);

/* Start the loops' threads; -errno (those started are stopped by
 * coord_eng_stop()). */
COORD_HIDDEN int coord_eng_threads(struct coord_eng *e, struct coord_error *err);

#endif /* COORD_TRANSPORT_ENGINE_LOOP_H */
