/* SPDX-License-Identifier: MIT */
/*
 * tests/rdma/perftest_run.h - run one perftest pair now, through
 * tests/rdma/perftest_pair.sh, and read one figure of its SUMMARY line:
 * the floor the rdma benches print beside their own rows.
 */
#ifndef COORD_TESTS_RDMA_PERFTEST_RUN_H
#define COORD_TESTS_RDMA_PERFTEST_RUN_H

#include <stddef.h>

/*
 * t_perftest() - run `sh @sh @tool -n @iters [-s @bytes]` (no -s when
 * @bytes is 0) and return the number after "@key " on its SUMMARY line
 * (e.g. "t_typical", "BW average"); 0 if @sh is NULL, the run failed or
 * printed no such figure.
 */
double t_perftest(const char *sh, const char *tool, unsigned iters, size_t bytes, const char *key);

#endif
