// SPDX-License-Identifier: MIT
/*
 * runtime/util/error.c - coord_strerror() and the error-detail helper.
 *
 * Keeps true: each of coord's own codes (coord/error.h, a range no errno
 * uses) has its own text, and every errno value prints strerror's text, so
 * no code is ever described by another code's meaning.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <coord/error.h>

#include "runtime/util/util.h"

const char *coord_strerror(int code)
{
	switch (code) {
	case 0:
		return "success";
	case COORD_ECANCELLED:
		return "cancelled: the closure was cancelled or its value aborted";
	case COORD_EUNAVAILABLE:
		return "unavailable: a parameter server or every worker is lost";
	case COORD_EINPUT:
		return "input error: an input of the closure failed";
	case COORD_ENOFN:
		return "no such function";
	case COORD_ESTALE:
		return "stale variable handle: its parameter server restarted after it was made";
	default:
		/* An errno value (COORD_EINVAL, COORD_ENOMEM and COORD_ETIMEDOUT
		 * among them): strerror's text.  strerror() is not thread-safe in
		 * general; glibc's table is. */
		if (code >= 0)
			return "not an error code";
		return code > -4096 && strerrordesc_np(-code) ? strerrordesc_np(-code)
							      : "unknown error";
	}
}

int coord_seterr(struct coord_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	err->cause = 0;
	err->worker = COORD_NO_WORKER;
	err->closure = COORD_NO_CLOSURE;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}
