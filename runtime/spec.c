// SPDX-License-Identifier: MIT
/*
 * runtime/spec.c - ClusterSpec (S16).  Minimal: the in-process cluster.
 */
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

#include "runtime/util.h"

struct coord_spec {
	unsigned nworkers;
	unsigned nps;
};

int coord_spec_local(unsigned nworkers, unsigned nps, struct coord_spec **out)
{
	struct coord_spec *s;

	if (nworkers == 0)
		return COORD_EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return COORD_ENOMEM;
	s->nworkers = nworkers;
	s->nps = nps;
	*out = s;
	return 0;
}

int coord_spec_parse(const char *json, struct coord_spec **out, struct coord_error *err)
{
	return coord_seterr(err, COORD_EINVAL, "coord_spec_parse: not implemented yet");
}

void coord_spec_destroy(struct coord_spec *spec)
{
	free(spec);
}

size_t coord_spec_num_tasks(const struct coord_spec *spec, const char *job)
{
	if (!strcmp(job, "worker"))
		return spec->nworkers;
	if (!strcmp(job, "ps"))
		return spec->nps;
	return 0;
}

int coord_spec_task_address(const struct coord_spec *spec, const char *job, int64_t index,
			    const char **addr, struct coord_error *err)
{
	if (index < 0 || (size_t)index >= coord_spec_num_tasks(spec, job))
		return coord_seterr(err, COORD_EINVAL, "no task %lld in job '%s'",
				    (long long)index, job);
	*addr = "inproc";
	return 0;
}

bool coord_spec_empty(const struct coord_spec *spec)
{
	return !spec || (spec->nworkers == 0 && spec->nps == 0);
}
