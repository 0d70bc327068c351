// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_hostlist.c - libFuzzer harness for the Slurm host-list and
 * tasks-per-node parsers.  Every expanded name must be a non-empty, bounded
 * host name; anything else aborts (a finding).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/spec/spec_pvt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct coord_error err;
	unsigned counts[8];
	char **hosts = NULL;
	size_t n = 0;
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (coord_hostlist_expand(text, 4096, &hosts, &n, &err) == 0) {
		if (n == 0 || n > 4096)
			abort();
		for (size_t i = 0; i < n; i++) {
			size_t len = strlen(hosts[i]);

			if (len > COORD_HOST_NAME_MAX || strpbrk(hosts[i], "[],"))
				abort();
		}
		coord_hostlist_free(hosts, n);
	}
	(void)coord_slurm_tasks_per_node(text, counts, 1 + size % 8, &err);
	free(text);
	return 0;
}
