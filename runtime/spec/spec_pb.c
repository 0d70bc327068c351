// SPDX-License-Identifier: MIT
/*
 * runtime/spec/spec_pb.c - ClusterSpec as `tensorflow.ClusterDef` wire bytes (S16).
 *
 * The message types come from runtime/spec/cluster.proto through protoc-c at build
 * time.  Encoding walks the sealed spec, so jobs come out sorted by name and
 * each job's map entries in ascending index order: equal specs give equal
 * bytes.  Decoding leaves the wire checks to protobuf-c and then applies the
 * same rules as every other source (spec.c), refusing repeated names and
 * indices instead of letting the last one win silently.
 */
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

#include "runtime/spec/cluster.pb-c.h"
#include "runtime/spec/spec_pvt.h"

int coord_spec_as_cluster_def(const struct coord_spec *spec, uint8_t **buf, size_t *len,
			      struct coord_error *err)
{
	Tensorflow__ClusterDef cd = TENSORFLOW__CLUSTER_DEF__INIT;
	Tensorflow__JobDef *jobs = NULL, **jobp = NULL;
	Tensorflow__JobDef__TasksEntry *ents = NULL, **entp = NULL;
	size_t total = 0, e = 0, n;
	uint8_t *out;
	int r = COORD_ENOMEM;

	if (!spec || !buf || !len)
		return coord_seterr(err, COORD_EINVAL, "coord_spec_as_cluster_def: no spec or out");
	for (size_t i = 0; i < spec->njobs; i++)
		total += spec->jobs[i].ntasks;
	/* calloc(0, ...) may return NULL: ask for one element at least. */
	jobs = calloc(spec->njobs + 1, sizeof(*jobs));
	jobp = calloc(spec->njobs + 1, sizeof(*jobp));
	ents = calloc(total + 1, sizeof(*ents));
	entp = calloc(total + 1, sizeof(*entp));
	if (!jobs || !jobp || !ents || !entp)
		goto out;
	for (size_t i = 0; i < spec->njobs; i++) {
		const struct spec_job *j = &spec->jobs[i];

		tensorflow__job_def__init(&jobs[i]);
		/* protobuf-c takes char *, packing only reads it. */
		jobs[i].name = j->name;
		jobs[i].n_tasks = j->ntasks;
		jobs[i].tasks = &entp[e];
		for (size_t k = 0; k < j->ntasks; k++, e++) {
			tensorflow__job_def__tasks_entry__init(&ents[e]);
			/* Indices are 0..COORD_SPEC_MAX_INDEX: they fit an int32. */
			ents[e].key = (int32_t)j->tasks[k].index;
			ents[e].value = j->tasks[k].addr;
			entp[e] = &ents[e];
		}
		jobp[i] = &jobs[i];
	}
	cd.n_job = spec->njobs;
	cd.job = jobp;
	n = tensorflow__cluster_def__get_packed_size(&cd);
	out = malloc(n ? n : 1);
	if (!out)
		goto out;
	if (tensorflow__cluster_def__pack(&cd, out) != n) {
		free(out);
		coord_die("protobuf-c packed a size other than it announced", EINVAL);
	}
	*buf = out;
	*len = n;
	r = 0;
out:
	free(entp);
	free(ents);
	free(jobp);
	free(jobs);
	if (r < 0)
		coord_seterr(err, r, "no memory for the ClusterDef of a cluster spec");
	return r;
}

int coord_spec_from_cluster_def(const void *buf, size_t len, struct coord_spec **out,
				struct coord_error *err)
{
	static const uint8_t none[1];
	Tensorflow__ClusterDef *cd;
	struct coord_spec *s = NULL;
	int r;

	if (!out || (!buf && len))
		return coord_seterr(err, COORD_EINVAL,
				    "coord_spec_from_cluster_def: no bytes "
				    "or no out pointer");
	cd = tensorflow__cluster_def__unpack(NULL, len, buf ? buf : none);
	if (!cd)
		return coord_seterr(err, COORD_EINVAL,
				    "%zu bytes are not a tensorflow.ClusterDef (or no memory)",
				    len);
	r = coord_spec_new(&s, err);
	for (size_t i = 0; r == 0 && i < cd->n_job; i++) {
		const Tensorflow__JobDef *jd = cd->job[i];
		struct spec_job *j;

		r = coord_spec_add_job(s, jd->name ? jd->name : "", &j, err);
		for (size_t k = 0; r == 0 && k < jd->n_tasks; k++)
			r = coord_spec_add_task(j, jd->tasks[k]->key,
						jd->tasks[k]->value ? jd->tasks[k]->value : "",
						err);
	}
	if (r == 0)
		r = coord_spec_seal(s, err);
	tensorflow__cluster_def__free_unpacked(cd, NULL);
	if (r < 0) {
		coord_spec_destroy(s);
		return r;
	}
	*out = s;
	return 0;
}
