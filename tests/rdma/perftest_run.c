// SPDX-License-Identifier: MIT
/*
 * tests/rdma/perftest_run.c - one perftest pair's figure (perftest_run.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perftest_run.h"

double t_perftest(const char *sh, const char *tool, unsigned iters, size_t bytes, const char *key)
{
	char cmd[512], line[512], sz[32] = "", want[64];
	double v = 0;
	FILE *f;

	if (!sh)
		return 0;
	if (bytes)
		snprintf(sz, sizeof(sz), " -s %zu", bytes);
	snprintf(cmd, sizeof(cmd), "sh %s %s -n %u%s 2>&1", sh, tool, iters, sz);
	snprintf(want, sizeof(want), "%s ", key);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, want);

		if (!strncmp(line, "SUMMARY ", 8) && p)
			v = atof(p + strlen(want));
	}
	if (pclose(f) != 0)
		v = 0;
	return v;
}
