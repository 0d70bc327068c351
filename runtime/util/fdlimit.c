// SPDX-License-Identifier: MIT
/*
 * runtime/util/fdlimit.c - raising and checking the descriptor limit
 * (fdlimit.h).  Only the soft limit is ever changed, and only upwards: a
 * process may do that without privileges, up to its hard limit (an
 * unlimited hard limit means the kernel's fs.nr_open).
 */
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>

#include "runtime/util/fdlimit.h"

#define FD_LIMIT_LOW 4096ul /* below this, the log says how to raise it */

unsigned long coord_fd_limit(void)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long)rl.rlim_cur : 0;
}

/* The most the soft limit may be raised to: the hard limit, or fs.nr_open. */
static unsigned long hard_limit(const struct rlimit *rl)
{
	unsigned long n = 0;
	FILE *f;

	if (rl->rlim_max != RLIM_INFINITY)
		return (unsigned long)rl->rlim_max;
	f = fopen("/proc/sys/fs/nr_open", "re");
	if (f) {
		if (fscanf(f, "%lu", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n ? n : 1048576ul;
}

unsigned long coord_fd_limit_raise(const char *who)
{
	struct rlimit rl;
	unsigned long was, max;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	was = (unsigned long)rl.rlim_cur;
	max = hard_limit(&rl);
	if (rl.rlim_cur != RLIM_INFINITY && was < max) {
		rl.rlim_cur = (rlim_t)max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			rl.rlim_cur = (rlim_t)was;
	}
	if ((unsigned long)rl.rlim_cur < FD_LIMIT_LOW)
		coord_log(COORD_LOG_WARN,
			  "%s: descriptor limit %lu (was %lu, hard limit %lu): at most about that "
			  "many connections; raise the hard limit for more (ulimit -Hn as root, "
			  "nofile in limits.conf, LimitNOFILE= for a systemd unit)",
			  who, (unsigned long)rl.rlim_cur, was, max);
	else
		coord_log(COORD_LOG_INFO, "%s: descriptor limit %lu (was %lu, hard limit %lu)", who,
			  (unsigned long)rl.rlim_cur, was, max);
	return (unsigned long)rl.rlim_cur;
}

int coord_fd_limit_need(unsigned long need, const char *who, const char *what,
			struct coord_error *err)
{
	unsigned long have = coord_fd_limit_raise(who);

	if (have >= need)
		return 0;
	return coord_seterr(err, -EMFILE,
			    "%s needs %lu descriptors (%s) but may open only %lu: raise the "
			    "hard limit to %lu or more (ulimit -Hn %lu as root; nofile in "
			    "limits.conf; LimitNOFILE=)",
			    who, need, what, have, need, need);
}
