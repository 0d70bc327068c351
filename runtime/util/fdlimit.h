/* SPDX-License-Identifier: MIT */
/*
 * runtime/util/fdlimit.h - the process's descriptor limit (RLIMIT_NOFILE):
 * servers and a networked coordinator raise the soft limit to the hard one
 * at start and say what they got; a coordinator that still cannot open a
 * descriptor per connection fails with what it needs (issue 21, 27).
 */
#ifndef COORD_RUNTIME_FDLIMIT_H
#define COORD_RUNTIME_FDLIMIT_H

#include "runtime/util/util.h"

/* coord_fd_limit() - the soft descriptor limit now (ulimit -n). */
COORD_HIDDEN unsigned long coord_fd_limit(void);

/*
 * coord_fd_limit_raise() - raise the soft limit as far as the hard one
 * allows (never lower it) and log what it is now, as @who: at info, or at
 * warn when it is below 4096 (then also how to raise it).
 * Return: the soft limit now.
 */
COORD_HIDDEN unsigned long coord_fd_limit_raise(const char *who);

/*
 * coord_fd_limit_need() - coord_fd_limit_raise(), then check that @need
 * descriptors fit (@what: what needs them, for the message).
 * Return: 0; -EMFILE with a message saying how many are needed, what the
 * limit is and how to raise it.
 */
COORD_HIDDEN int coord_fd_limit_need(unsigned long need, const char *who, const char *what,
				     struct coord_error *err);

#endif /* COORD_RUNTIME_FDLIMIT_H */
