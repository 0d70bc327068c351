/* SPDX-License-Identifier: MIT */
/*
 * runtime/util/futex.h - futex waits and the eventcount every sleeper in coord uses.
 *
 * Overview
 *   Nothing on the fast path takes a lock.  A thread that must wait (a fetch
 *   on a RemoteValue, schedule() on a full ring, join(), a dispatcher with no
 *   work, the canceller waiting for in-flight closures) spins for a bounded
 *   time, then sleeps with FUTEX_WAIT_PRIVATE on a 32-bit word.  The side that
 *   makes the condition true issues FUTEX_WAKE only when a sleeper announced
 *   itself, so an uncontended completion costs no system call.
 *
 * Eventcount protocol (struct coord_ec, after ck_ec)
 *   word = (counter << 1) | WAITERS.
 *   Waiter:   v = coord_ec_prepare(ec);
 *             if (condition) done;
 *             coord_ec_wait(ec, v, deadline);   -- sets WAITERS, full fence,
 *                                                  re-checks nothing itself
 *             loop (re-check the condition: wakeups may be spurious).
 *   Signaler: make the condition true; coord_ec_signal(ec);
 *   Invariants:
 *     E1  A signaler that made the condition true before a waiter's fence F1
 *         is seen by the waiter's re-check; one that made it true after F1
 *         sees WAITERS (fence F2 pairs with F1: store-load Dekker) and wakes.
 *     E2  A waiter sleeps only on the exact word value that has WAITERS set;
 *         any signal changes the counter, so FUTEX_WAIT returns EAGAIN.
 *     E3  coord_ec_signal_sc() skips F2 when the signaler made the condition
 *         true with a seq_cst RMW (the ring's head CAS): that RMW, its seq_cst
 *         load of the word and the waiter's seq_cst flag CAS are all in the
 *         single total order S, so if the load misses WAITERS the flag CAS
 *         and then F1 come later in S, and the waiter's re-check (after F1)
 *         observes the RMW.  On x86 this saves an mfence per schedule().
 *   The caller re-checks its condition between prepare and wait (that is the
 *   "condition" step above) and coord_ec_wait() re-checks the word only.
 *
 * Errors from futex(): EAGAIN = the word changed, EINTR = retry, ETIMEDOUT =
 * deadline; anything else is a broken invariant: coord_die().  Futex words
 * live inside objects whose lifetime the callers document (the coordinator,
 * a closure held by a reference).
 *
 * Synchronization: the word is shared by every waiter and signaler of an
 * eventcount, ordered by the protocol above (E1-E3: fences F1 / F2, or the
 * seq_cst RMW of E3); the condition itself is the caller's, with its own
 * table.
 */
#ifndef COORD_RUNTIME_FUTEX_H
#define COORD_RUNTIME_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/util/util.h"

/* Absolute CLOCK_MONOTONIC deadline in ns; COORD_FOREVER = no deadline. */
#define COORD_FOREVER UINT64_MAX

static inline uint64_t coord_deadline(int64_t timeout_ns)
{
	return timeout_ns < 0 ? COORD_FOREVER : coord_now_ns() + (uint64_t)timeout_ns;
}

/*
 * coord_smp_mb() - full fence for the store-load (Dekker) edges documented at
 * each call site.  TSan does not model fences; it cannot see store-load
 * reordering either, so nothing is lost there.
 */
static inline void coord_smp_mb(void)
{
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wtsan"
#endif
	/* seq_cst fence: the F1/F2 edges of the eventcount (see callers). */
	atomic_thread_fence(memory_order_seq_cst);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

/*
 * coord_futex_wait() - sleep while *@word == @val, until @deadline.
 * Return: 0 woken or the word changed (re-check); -ETIMEDOUT.
 */
static inline int coord_futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t deadline)
{
	struct timespec ts, *tsp = NULL;
	long r;

	if (deadline != COORD_FOREVER) {
		ts.tv_sec = (time_t)(deadline / 1000000000ull);
		ts.tv_nsec = (long)(deadline % 1000000000ull);
		tsp = &ts;
		if (coord_now_ns() >= deadline)
			return -ETIMEDOUT;
	}
	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, so a retry
	 * after EINTR does not stretch the deadline. */
	r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, val, tsp,
		    NULL, FUTEX_BITSET_MATCH_ANY);
	if (r == 0)
		return 0;
	switch (errno) {
	case EAGAIN:
	case EINTR:
		return 0;
	case ETIMEDOUT:
		return -ETIMEDOUT;
	default:
		coord_die("futex wait", errno);
	}
}

static inline void coord_futex_wake_all(_Atomic uint32_t *word)
{
	if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL,
		    NULL, 0) < 0)
		coord_die("futex wake", errno);
}

#define COORD_EC_WAITERS 1u

struct coord_ec {
	_Atomic uint32_t word;
};

static inline uint32_t coord_ec_prepare(struct coord_ec *ec)
{
	/* Acquire: pairs with the release CAS in coord_ec_signal(), so state
	 * published before a signal is visible to the re-check that follows. */
	return atomic_load_explicit(&ec->word, memory_order_acquire);
}

/*
 * coord_ec_wait() - announce a sleeper and sleep unless @v is stale.
 * The caller must re-check its condition after this returns.
 * Return: 0 (re-check); -ETIMEDOUT.
 */
static inline int coord_ec_wait(struct coord_ec *ec, uint32_t v, uint64_t deadline)
{
	if (!(v & COORD_EC_WAITERS)) {
		/* seq_cst on success: E3 (coord_ec_signal_sc()) needs this flag
		 * store in the single total order.  Failure means a signal moved
		 * the counter (E2): the caller re-checks. */
		if (!atomic_compare_exchange_strong_explicit(&ec->word, &v, v | COORD_EC_WAITERS,
							     memory_order_seq_cst,
							     memory_order_relaxed))
			return 0;
		v |= COORD_EC_WAITERS;
		/* F1: pairs with F2 in coord_ec_signal() (E1).  The caller's
		 * condition was checked before the flag was set, so check it
		 * again here by returning; the next call sleeps on v. */
		coord_smp_mb();
		return 0;
	}
	return coord_futex_wait(&ec->word, v, deadline);
}

/*
 * coord_ec_signal() - wake every sleeper, if any announced itself.
 * Call after making the condition true.  No system call without sleepers.
 */
static inline void ec_wake_if_waiters(struct coord_ec *ec, uint32_t w)
{
	while (w & COORD_EC_WAITERS) {
		/* Release: publishes the condition to coord_ec_prepare(); bumps the
		 * counter and clears WAITERS in one step (w is odd, w + 1 is even). */
		if (atomic_compare_exchange_weak_explicit(
			    &ec->word, &w, w + 1, memory_order_release, memory_order_relaxed)) {
			coord_futex_wake_all(&ec->word);
			return;
		}
	}
}

static inline void coord_ec_signal(struct coord_ec *ec)
{
	/* F2: pairs with F1 in coord_ec_wait() (E1): our condition store is
	 * ordered before the WAITERS load below. */
	coord_smp_mb();
	/* Relaxed: ordered by F2; a stale value is fixed by the CAS loop. */
	ec_wake_if_waiters(ec, atomic_load_explicit(&ec->word, memory_order_relaxed));
}

/*
 * coord_ec_signal_sc() - coord_ec_signal() for a caller whose last write to
 * the condition was a seq_cst read-modify-write (E3): no fence.
 */
static inline void coord_ec_signal_sc(struct coord_ec *ec)
{
	/* seq_cst: E3, after the caller's seq_cst RMW in the total order. */
	ec_wake_if_waiters(ec, atomic_load_explicit(&ec->word, memory_order_seq_cst));
}

#endif /* COORD_RUNTIME_FUTEX_H */
