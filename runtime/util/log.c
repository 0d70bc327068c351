// SPDX-License-Identifier: MIT
/*
 * runtime/util/log.c - leveled logging (coord/log.h) and the fatal-invariant exit.
 *
 * The level is coord_set_log_level()'s, else $COORD_LOG's (read once),
 * else warn.  A message goes to the callback of coord_set_log_fn(), else to
 * stderr as one line with the UTC time, the program and its pid (one
 * fprintf per line keeps lines whole between threads).
 *
 * What it keeps true: a message is formatted only when its level passes; a
 * set level or callback is never lost to a racing first use; the callback
 * and its arg are always read as the pair that was set (one immutable sink,
 * published by one pointer), and a replaced sink stays allocated (reachable
 * through the new one) because a racing logger may still be using it.
 *
 * Synchronization: the shared fields, who writes them, who reads them, and
 * what orders the two.
 *   field         written by (how)               read by (how)          order
 *   log_level_v   the first logger ($COORD_LOG,  every logger           none: a lone value;
 *                 relaxed CAS from -1);          (relaxed)              the CAS keeps a set
 *                 coord_set_log_level()                                 level from being lost
 *                 (relaxed exchange)
 *   log_sink_v    coord_set_log_fn() (release)   coord_log() (acquire)  release / acquire:
 *                                                                       the sink's fn and arg
 *   all           coord_set_log_fn() (relaxed    nobody (a root for     none needed
 *                 CAS push)                      leak checkers)
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/util/util.h"

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* -1 until the first use reads $COORD_LOG, or coord_set_log_level(). */
static _Atomic int log_level_v = -1;

/* A callback and its arg, never changed once published. */
struct log_sink {
	coord_log_fn_t fn;
	void *arg;
	struct log_sink *prev; /* the one set before: kept, see the header */
};

/* NULL: the default stderr logger. */
static _Atomic(struct log_sink *) log_sink_v;

static int log_level(void)
{
	/* Relaxed: the level is a lone value; no other memory is read
	 * through it. */
	int l = atomic_load_explicit(&log_level_v, memory_order_relaxed);
	int unset = -1;

	if (l < 0) {
		const char *e = getenv("COORD_LOG");

		l = COORD_LOG_WARN;
		for (int i = 0; e && i < (int)ARRAY_SIZE(level_names); i++)
			if (!strcmp(e, level_names[i]))
				l = i;
		/* Relaxed, as above; a CAS so that a racing coord_set_log_level()
		 * wins over the environment.  On failure @unset holds the
		 * level that was set. */
		if (!atomic_compare_exchange_strong_explicit(
			    &log_level_v, &unset, l, memory_order_relaxed, memory_order_relaxed))
			l = unset;
	}
	return l;
}

int coord_set_log_level(int level)
{
	if (level < COORD_LOG_ERROR || level > COORD_LOG_DEBUG)
		return COORD_EINVAL;
	/* $COORD_LOG first, so that the previous level returned is a real one. */
	(void)log_level();
	/* Relaxed: a lone value (log_level()). */
	return atomic_exchange_explicit(&log_level_v, level, memory_order_relaxed);
}

void coord_set_log_fn(coord_log_fn_t fn, void *arg)
{
	/* Every sink ever set: keeps them reachable (never freed, see above). */
	static struct log_sink *_Atomic all;
	struct log_sink *s = NULL;

	if (fn) {
		s = malloc(sizeof(*s));
		if (!s) {
			coord_log(COORD_LOG_ERROR,
				  "coord_set_log_fn: out of memory; the previous logger stays");
			return;
		}
		*s = (struct log_sink){ .fn = fn, .arg = arg };
		/* Relaxed: @all is only a root for leak checkers; nothing
		 * reads a sink through it. */
		s->prev = atomic_load_explicit(&all, memory_order_relaxed);
		/* Relaxed, as above. */
		while (!atomic_compare_exchange_weak_explicit(
			&all, &s->prev, s, memory_order_relaxed, memory_order_relaxed))
			;
	}
	/* Release: publishes *s (fn, arg) to the acquire load in coord_log(). */
	atomic_store_explicit(&log_sink_v, s, memory_order_release);
}

/* The default: "2026-11-26T01:41:32.123Z prog[pid] level: msg" on stderr. */
static void log_stderr(int level, const char *msg)
{
	struct timespec ts;
	struct tm tm;
	char when[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ldZ %s[%ld] %s: %s\n", when, ts.tv_nsec / 1000000,
		program_invocation_short_name, (long)getpid(), level_names[level], msg);
}

void coord_log(int level, const char *fmt, ...)
{
	struct log_sink *s;
	char buf[512];
	va_list ap;

	if (level > log_level())
		return;
	if (level < COORD_LOG_ERROR)
		level = COORD_LOG_ERROR;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* Acquire: pairs with the release in coord_set_log_fn(), so fn and
	 * arg are the ones set with this sink. */
	s = atomic_load_explicit(&log_sink_v, memory_order_acquire);
	if (s)
		s->fn(level, buf, s->arg);
	else
		log_stderr(level, buf);
}

void coord_die_at(const char *file, int line, const char *what, int err)
{
	/* stderr always: the process is about to abort. */
	fprintf(stderr, "coord: fatal: %s:%d: %s: %s\n", file, line, what, strerror(err));
	/* Acquire: as in coord_log(); a routed log gets the reason too. */
	if (atomic_load_explicit(&log_sink_v, memory_order_acquire))
		coord_log(COORD_LOG_ERROR, "fatal: %s:%d: %s: %s", file, line, what, strerror(err));
	abort();
}
