/* SPDX-License-Identifier: MIT */
/*
 * tests/helpers.h - shared test helpers (t_*), liburing test/helpers.h style.
 */
#ifndef COORD_TESTS_HELPERS_H
#define COORD_TESTS_HELPERS_H

#include <stdint.h>

#include <coord/coord.h>

#define T_EXIT_SKIP 77

/* Monotonic nanoseconds. */
uint64_t t_now_ns(void);
/* Sleep for @ns nanoseconds. */
void t_sleep_ns(uint64_t ns);
/* Abort the test binary with a message if it runs longer than @secs. */
void t_watchdog(unsigned secs);

/* A registry with the standard test functions (see helpers.c). */
struct coord_registry *t_registry(void);

/* A coordinator over @nworkers in-process workers, ring of @cap slots. */
struct coord *t_coord(struct coord_registry *reg, unsigned nworkers, unsigned cap);

/* Look up a function id or fail the test. */
uint32_t t_fn(struct coord *c, const char *name);

/*
 * Counters the standard functions update (atomics):
 *   t_entered / t_exited   - every function, on entry and exit
 *   t_creates[w]           - resource creations on worker w
 */
extern _Atomic long t_entered, t_exited;
extern _Atomic long t_creates[64];
extern _Atomic int t_create_fail;	/* creators fail while non-zero */
extern _Atomic int t_gate;		/* "gated" functions spin until non-zero */
extern _Atomic uint64_t t_first_ns[64]; /* "stamp": first start per worker */
extern int64_t *t_order;		/* "order": arguments in run order (t_order_cap max) */
extern _Atomic long t_norder;
extern long t_order_cap;
void t_reset_counters(void);

#endif
