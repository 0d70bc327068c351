/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/spec_check.h - the invariant the spec harnesses check on every
 * spec they get: it survives as_dict -> parse and as_cluster_def ->
 * from_cluster_def unchanged, and its listings agree with its counts.
 * Anything else aborts (a finding).
 */
#ifndef COORD_TESTS_FUZZ_SPEC_CHECK_H
#define COORD_TESTS_FUZZ_SPEC_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <coord/spec.h>

static void fuzz_spec_roundtrip(const struct coord_spec *s)
{
	struct coord_spec *t = NULL, *u = NULL;
	uint8_t *pb = NULL;
	size_t len = 0, n = 0, nj;
	char *json = NULL;
	const char *names[4];

	if (coord_spec_as_dict(s, &json, NULL) < 0)
		abort();
	if (coord_spec_parse(json, &t, NULL) < 0 || !coord_spec_equal(s, t)) {
		fprintf(stderr, "as_dict round trip failed: %s\n", json);
		abort();
	}
	if (coord_spec_as_cluster_def(s, &pb, &len, NULL) < 0)
		abort();
	if (coord_spec_from_cluster_def(pb, len, &u, NULL) < 0 || !coord_spec_equal(s, u))
		abort();
	nj = coord_spec_jobs(s, names, 4);
	for (size_t i = 0; i < nj && i < 4; i++) {
		const char *addrs[8];
		int64_t idx[8];

		if (coord_spec_job_tasks(s, names[i], addrs, 8, &n, NULL) < 0 ||
		    coord_spec_task_indices(s, names[i], idx, 8, &n, NULL) < 0 ||
		    n != coord_spec_num_tasks(s, names[i]))
			abort();
	}
	coord_spec_destroy(u);
	coord_spec_destroy(t);
	free(pb);
	free(json);
}

#endif /* COORD_TESTS_FUZZ_SPEC_CHECK_H */
