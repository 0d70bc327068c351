// SPDX-License-Identifier: MIT
/*
 * runtime/util/log.c - leveled logging to stderr and the fatal-invariant exit.
 *
 * COORD_LOG=error|warn|info|debug picks the level (default warn).  The level
 * is read once; one fprintf per line keeps lines whole between threads.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/util/util.h"

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static int log_level(void)
{
	/* Relaxed: the level is idempotently computed; racing initialisers
	 * store the same value. */
	static _Atomic int level = -1;
	int l = atomic_load_explicit(&level, memory_order_relaxed);

	if (l < 0) {
		const char *e = getenv("COORD_LOG");

		l = COORD_LOG_WARN;
		for (int i = 0; e && i < (int)ARRAY_SIZE(level_names); i++)
			if (!strcmp(e, level_names[i]))
				l = i;
		/* Relaxed: see above, every thread computes the same l. */
		atomic_store_explicit(&level, l, memory_order_relaxed);
	}
	return l;
}

void coord_log(int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (level > log_level())
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "coord %s: %s\n", level_names[level], buf);
}

void coord_die_at(const char *file, int line, const char *what, int err)
{
	fprintf(stderr, "coord: fatal: %s:%d: %s: %s\n", file, line, what, strerror(err));
	abort();
}
