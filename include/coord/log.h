/* SPDX-License-Identifier: MIT */
/*
 * coord/log.h - where coord's log messages go, and which.
 *
 * coord logs what a caller cannot see in a return code: a worker lost or
 * re-admitted, a refused connection, an ignored environment variable.  By
 * default each message is one line on stderr,
 *
 *   2026-11-26T01:41:32.123Z coord-worker[4242] warn: worker 1 lost: ...
 *
 * (UTC time with milliseconds, the program's name and process id, the
 * level), for levels up to $COORD_LOG (error, warn, info or debug; default
 * warn).  A program embedding coord can route them (coord_set_log_fn(), as
 * libfabric and UCX take a callback) and set the level (coord_set_log_level()).
 */
#ifndef COORD_LOG_H
#define COORD_LOG_H

#include <coord/error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Log levels, most severe first: a level lets through itself and those above. */
enum coord_log_level {
	COORD_LOG_ERROR = 0, /* an operation failed, or a worker was dropped */
	COORD_LOG_WARN = 1,  /* something went wrong and was handled (the default) */
	COORD_LOG_INFO = 2,  /* notable events: keys loaded, workers re-admitted */
	COORD_LOG_DEBUG = 3, /* detail for developers */
};

/**
 * coord_log_fn_t - receives one log message.
 * @level: enum coord_log_level.
 * @msg:   the message, one line without a trailing newline and without time
 *         or level; valid only during the call.
 * @arg:   the @arg given to coord_set_log_fn().
 *
 * Called from whichever coord thread logs (a dispatcher, an event loop, the
 * caller's own thread), possibly from several at once: it must be
 * thread-safe, must not block for long, and must not call coord functions.
 */
typedef void (*coord_log_fn_t)(int level, const char *msg, void *arg);

/**
 * coord_set_log_fn() - send coord's log messages to @fn instead of stderr.
 * @fn:  the callback; NULL restores the default stderr logger.
 * @arg: passed to every call of @fn.
 *
 * Only messages at or above the level (coord_set_log_level(), else
 * $COORD_LOG) reach @fn.  Meant to be called once at start-up, or rarely:
 * each call keeps a few bytes until the process exits.
 *
 * Concurrency: any thread, any time, also while coordinators and servers
 * run.  A message being logged while this runs may still go to the previous
 * callback, so keep the previous @arg valid until no coord call that could
 * log is running.
 */
COORD_API void coord_set_log_fn(coord_log_fn_t fn, void *arg);

/**
 * coord_set_log_level() - log messages up to @level, overriding $COORD_LOG.
 * @level: enum coord_log_level.
 *
 * Concurrency: any thread, any time; later messages see it.
 * Return: the previous level (>= 0); COORD_EINVAL for a level out of range.
 */
COORD_API int coord_set_log_level(int level);

#ifdef __cplusplus
}
#endif
#endif /* COORD_LOG_H */
