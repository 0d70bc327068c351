// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_spec_json.c - libFuzzer harness for the ClusterSpec readers:
 * the input is tried as spec JSON, as TF_CONFIG and as ClusterDef bytes.  A
 * spec that parses must survive as_dict -> parse and as_cluster_def ->
 * from_cluster_def unchanged; anything else aborts (a finding).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const struct coord_spec *s)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct coord_spec *s = NULL;
	struct coord_task_id self;
	struct coord_error err;
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (coord_spec_parse(text, &s, &err) == 0) {
		roundtrip(s);
		coord_spec_destroy(s);
	}
	if (coord_spec_from_tf_config(text, &s, &self, &err) == 0)
		coord_spec_destroy(s);
	if (coord_spec_from_cluster_def(data, size, &s, &err) == 0) {
		roundtrip(s);
		coord_spec_destroy(s);
	}
	free(text);
	return 0;
}
