/* SPDX-License-Identifier: MIT */
/*
 * runtime/util/util.h - small internal helpers shared by runtime/ and transport/.
 */
#ifndef COORD_RUNTIME_UTIL_H
#define COORD_RUNTIME_UTIL_H

#include <sched.h>
#include <stdint.h>
#include <time.h>

#include <coord/error.h>
#include <coord/log.h>

#define COORD_HIDDEN __attribute__((visibility("hidden")))
/*
 * Internal, but called by the rdma provider (libcoord-rdma.so,
 * transport/rdma_provider.h): exported from libcoord.so under the version
 * node COORD_PRIVATE_<version> only, with the names in coord_private_syms
 * (transport/meson.build; a name missing there would fall into the public
 * node, and test 'man' would flag it).  Protected in libcoord: its own
 * calls bind to its own copy, direct, never interposed; default in the
 * provider's objects (built with COORD_PROVIDER), which call into
 * libcoord.so.
 */
#ifdef COORD_PROVIDER
#define COORD_PROV __attribute__((visibility("default")))
#else
#define COORD_PROV __attribute__((visibility("protected")))
#endif

/* The largest frame any layer sends or accepts (transport/wire/wire.h's
 * COORD_WIRE_MAX_FRAME_LIMIT; runtime/ps/ps.c bounds a batch's results by it). */
#define COORD_MAX_FRAME_LIMIT (1u << 30)
#define CACHELINE 64
#define __cacheline_aligned __attribute__((aligned(CACHELINE)))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/*
 * coord_seterr() - fill @err (if not NULL) with @code and a message; returns
 * @code so callers can `return coord_seterr(err, -EINVAL, "...")`.
 */
COORD_PROV int coord_seterr(struct coord_error *err, int code, const char *fmt, ...)
	COORD_PRINTF(3, 4);

/* Log at @level (enum coord_log_level, coord/log.h); runtime/log.c. */
COORD_PROV void coord_log(int level, const char *fmt, ...) COORD_PRINTF(2, 3);

/* coord_env_int() - a non-negative integer from the environment variable
 * @name, else @def (a value that is not one is logged and ignored). */
COORD_HIDDEN int coord_env_int(const char *name, int def);

/* coord_die() - a broken internal invariant: print where and why, abort. */
COORD_HIDDEN __attribute__((noreturn)) void coord_die_at(const char *file, int line,
							 const char *what, int err);
#define coord_die(what, err) coord_die_at(__FILE__, __LINE__, (what), (err))

static inline uint64_t coord_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/*
 * coord_prefetch_w() - ask for the line at @p for writing (exclusive), so
 * that the stores that follow do not each wait for another cache to give it
 * up.  __builtin_prefetch(p, 1, ...) is a read prefetch (prefetcht0) unless
 * the compiler may assume PREFETCHW (-mprfchw), which our baseline x86-64
 * target does not; so ask the CPU (libgcc's cached CPUID, one load).
 */
static inline void coord_prefetch_w(const void *p)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__PRFCHW__)
	if (__builtin_cpu_supports("prfchw")) {
		__asm__("prefetchw %0" : : "m"(*(const char *)p));
		return;
	}
#endif
	__builtin_prefetch(p, 1, 3);
}

/*
 * coord_spin_pause() - one step of a bounded spin: a pause, and every 64th
 * step a sched_yield(), so a spinning waiter does not keep the thread it
 * waits for off a CPU (2-core machines run the producer, the worker and the
 * waiter on two CPUs).
 */
static inline void coord_spin_pause(unsigned step)
{
	if ((step & 63) == 0)
		sched_yield();
	else
		cpu_relax();
}

/*
 * Adaptive spinning, shared by RemoteValue waits (rv.c) and rdma channels
 * (rdma_chan.c).  @avg is a moving average of recent waits: only those
 * that had to wait at all.  While those waits end within @max, the budget
 * is four times their average, at least @base and at most @max.  Four, not
 * two: waits have a long tail (a caller waiting for the oldest of 256 in
 * flight over tcp: most 50-100 us, 6% over 200 us), and every wait past
 * the budget costs the wake below.  A waiter whose
 * results keep coming that fast then meets them spinning. Parking instead
 * would cost the completer a cross-CPU FUTEX_WAKE (19-40 us of its CPU on
 * these VMs, when the waiter's CPU has gone idle) and the waiter a wake-up.
 * Waits longer than @max spin only @base, and so do all waits when
 * @max <= @base.  @base 0: no spinning at all.
 */
static inline uint64_t coord_spin_budget(uint64_t avg, uint64_t base, uint64_t max)
{
	uint64_t b;

	if (!base || max <= base || avg > max)
		return base;
	b = avg > max / 4 ? max : 4 * avg; /* no overflow, whatever @max */
	return b < base ? base : b;
}

/* The average after one more wait of @ns: over about 8 waits, and a wait
 * counts as at most 4 * @max, so that one long idle spell does not hide
 * the short waits that follow it for long. */
static inline uint64_t coord_spin_avg(uint64_t avg, uint64_t ns, uint64_t max)
{
	if (ns / 4 > max)
		ns = max > UINT64_MAX / 4 ? UINT64_MAX : 4 * max;
	return avg - avg / 8 + ns / 8;
}

/*
 * Reading the inputs of a call (B1): input @i's bytes from @src (a closure,
 * or a REQ record's packed input section).  @cur lets a walk over packed
 * values resume where the previous read ended; NULL is allowed.
 */
struct coord_in_cursor {
	uint32_t i;
	const void *p;
};
typedef const void *(*coord_input_get_t)(const void *src, uint32_t i, uint32_t *len,
					 struct coord_in_cursor *cur);

#endif /* COORD_RUNTIME_UTIL_H */
