// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_spec_json.c - libFuzzer harness for the ClusterSpec readers:
 * the input is tried as spec JSON, as TF_CONFIG and as ClusterDef bytes.  A
 * spec that parses must survive as_dict -> parse and as_cluster_def ->
 * from_cluster_def unchanged; anything else aborts (a finding).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

#include "spec_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
		fuzz_spec_roundtrip(s);
		coord_spec_destroy(s);
	}
	if (coord_spec_from_tf_config(text, &s, &self, &err) == 0)
		coord_spec_destroy(s);
	if (coord_spec_from_cluster_def(data, size, &s, &err) == 0) {
		fuzz_spec_roundtrip(s);
		coord_spec_destroy(s);
	}
	free(text);
	return 0;
}
