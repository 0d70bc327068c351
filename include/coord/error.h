/* SPDX-License-Identifier: MIT */
/*
 * coord/error.h - error codes and the optional error detail record.
 *
 * Every fallible coord function returns 0 or a negative code and never
 * touches errno.  A code is one of:
 *
 *   - coord's own codes, COORD_E* below with values in
 *     [-COORD_ERR_LAST, -COORD_ERR_FIRST] = [-10099, -10001]: a range no
 *     errno uses (Linux keeps errno values below 4096), so a coord code is
 *     never read as an errno with another meaning, nor the reverse
 *     (COORD_ERR_OWN() tells them apart);
 *   - a plain negative errno value (-EINVAL, -ENOENT, ...), meaning what
 *     errno says; COORD_EINVAL, COORD_ENOMEM and COORD_ETIMEDOUT are such
 *     values, named for convenience;
 *   - a user function's own negative code, passed through unchanged (a
 *     function should not return coord's range for its own meanings).
 *
 * coord_strerror() prints each code's own meaning: the text below for
 * coord's codes, strerror's text for an errno value.
 *
 *   code                 value          meaning
 *   COORD_ECANCELLED     -10001         the closure was cancelled (S3) or its
 *                                       RemoteValue was aborted (S6)
 *   COORD_EUNAVAILABLE   -10002         a parameter server or every worker is
 *                                       gone (S11)
 *   COORD_EINPUT         -10003         an input of the closure failed (a
 *                                       per-worker resource could not be
 *                                       created, S9); cause in err->cause
 *   COORD_ENOFN          -10004         unknown function name or id (S15)
 *   COORD_ESTALE         -10005         a variable handle made before its ps
 *                                       task restarted: the variable it named
 *                                       is gone (a ps failure, S11; look the
 *                                       name up again)
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
 *   -EACCES        a checkpoint directory that escapes a ps task's
 *                  checkpoint root (coord-ps --ckpt-root)
 *   other -errno   a file operation of a checkpoint that failed
 *
 * Codes cross the wire as they are (i32); the wire version (2) that gave
 * coord's codes their own range is checked at every handshake, so a peer
 * of the earlier numbering is refused rather than misread.
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

/* coord's own codes: -COORD_ERR_LAST .. -COORD_ERR_FIRST (see above). */
#define COORD_ERR_FIRST 10001
#define COORD_ERR_LAST 10099
#define COORD_ERR_OWN(code) ((code) <= -COORD_ERR_FIRST && (code) >= -COORD_ERR_LAST)

#define COORD_ECANCELLED (-10001)
#define COORD_EUNAVAILABLE (-10002)
#define COORD_EINPUT (-10003)
#define COORD_ENOFN (-10004)
#define COORD_ESTALE (-10005)
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
 * coord's own codes are in [-10099, -10001], a range no errno uses
 * (COORD_ERR_OWN()): COORD_ECANCELLED (-10001), COORD_EUNAVAILABLE (-10002),
 * COORD_EINPUT (-10003), COORD_ENOFN (-10004) and COORD_ESTALE (-10005) each
 * print their own text.  An errno value prints strerror's text ("No such
 * file or directory" for -ENOENT); COORD_EINVAL, COORD_ENOMEM and
 * COORD_ETIMEDOUT are the errno values -EINVAL, -ENOMEM and -ETIMEDOUT.
 *
 * Concurrency: any thread.
 *
 * Return: a string that is never freed: "success" for 0, "unknown error"
 * for a negative code that is neither coord's nor an errno value.
 */
COORD_API const char *coord_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* COORD_ERROR_H */
