/* SPDX-License-Identifier: MIT */
/*
 * coord/error.h - error codes and the optional error detail record.
 *
 * Every fallible coord function returns 0 or a negative errno-style code and
 * never touches errno.  The codes below are the ones coord itself produces;
 * a user function may fail with any negative code of its own and that code
 * is passed through unchanged.
 *
 *   code                 value          meaning
 *   COORD_ECANCELLED     -ECANCELED     the closure was cancelled (S3) or its
 *                                       RemoteValue was aborted (S6)
 *   COORD_EUNAVAILABLE   -EHOSTDOWN     a parameter server or every worker is
 *                                       gone (S11)
 *   COORD_EINPUT         -EBADE         an input of the closure failed (a
 *                                       per-worker resource could not be
 *                                       created, S9); cause in err->cause
 *   COORD_ENOFN          -ENOENT        unknown function name or id (S15)
 *   COORD_ETIMEDOUT      -ETIMEDOUT     a wait ran out of time
 *   COORD_EINVAL         -EINVAL        bad argument or malformed input
 *   COORD_ENOMEM         -ENOMEM        out of memory (slow path only)
 *
 * The variable and checkpoint calls (coord/var.h) return these too, as
 * plain errno values (no COORD_ name):
 *   -EEXIST        a variable of that name exists with another shape
 *   -ENOENT        no such variable; no checkpoint in the directory
 *   -ERANGE        a scatter_add index outside [0, dims[0])
 *   -ENOSPC        the ps task's store has made 2^20 variables
 *   -EBADMSG       a corrupt checkpoint (the file named in err->msg)
 *   -EFBIG         a checkpoint over the ps task's size limit
 *   -ENAMETOOLONG  a checkpoint directory name too long
 *   other -errno   a file operation of a checkpoint that failed
 */
#ifndef COORD_ERROR_H
#define COORD_ERROR_H

#include <errno.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COORD_API __attribute__((visibility("default")))
#define COORD_NODISCARD __attribute__((warn_unused_result))
#define COORD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define COORD_API
#define COORD_NODISCARD
#define COORD_PRINTF(a, b)
#endif

#define COORD_ECANCELLED (-ECANCELED)
#define COORD_EUNAVAILABLE (-EHOSTDOWN)
#define COORD_EINPUT (-EBADE)
#define COORD_ENOFN (-ENOENT)
#define COORD_ETIMEDOUT (-ETIMEDOUT)
#define COORD_EINVAL (-EINVAL)
#define COORD_ENOMEM (-ENOMEM)

/* Length of coord_error.msg, terminating NUL included. */
#define COORD_ERRMSG_LEN 256

/* No worker / no closure, in coord_error.worker and coord_error.closure. */
#define COORD_NO_WORKER (-1)
#define COORD_NO_CLOSURE UINT64_MAX

/**
 * struct coord_error - detail of a failure, filled by the callee.
 * @code:    the negative code the call returned.
 * @cause:   for COORD_EINPUT, the code of the underlying failure; else 0.
 * @worker:  the worker the failure happened on, or COORD_NO_WORKER.
 * @closure: the closure's sequence number (coord_rv_id()), or COORD_NO_CLOSURE.
 * @msg:     NUL-terminated human-readable message.
 *
 * Caller-allocated plain data.  Every function that takes a
 * `struct coord_error *` accepts NULL and then only returns the code.
 */
struct coord_error {
	int code;
	int cause;
	int worker;
	uint64_t closure;
	char msg[COORD_ERRMSG_LEN];
};

/**
 * coord_strerror() - a static description of a code.
 * @code: a negative coord or errno code.
 *
 * Concurrency: any thread.  Return: a string that is never freed.
 */
COORD_API const char *coord_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* COORD_ERROR_H */
