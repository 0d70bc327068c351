// SPDX-License-Identifier: MIT
/*
 * runtime/spec/spec.c - ClusterSpec (S16): representation, builder and queries.
 *
 * A spec is an array of jobs sorted by name, each an array of tasks sorted
 * by index.  It is built once (coord_spec_new/add_job/add_task/seal, see
 * spec_pvt.h) and is read-only afterwards, so queries take no lock.  Lookups
 * are binary searches; the dense view of a sparse job is bounded by
 * COORD_SPEC_MAX_INDEX.  The readers of the outside formats live beside this
 * file: spec_json.c (JSON, TF_CONFIG, as_dict), spec_pb.c (ClusterDef),
 * spec_slurm.c (host lists, Slurm) and spec_arg.c (--spec).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

#include "runtime/spec/spec_pvt.h"

int coord_spec_new(struct coord_spec **out, struct coord_error *err)
{
	struct coord_spec *s = calloc(1, sizeof(*s));

	if (!s)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a cluster spec");
	*out = s;
	return 0;
}

int coord_spec_check_job_name(const char *name, struct coord_error *err)
{
	size_t len = strnlen(name, COORD_SPEC_NAME_MAX);

	if (len == 0)
		return coord_seterr(err, COORD_EINVAL, "empty job name");
	if (len >= COORD_SPEC_NAME_MAX)
		return coord_seterr(err, COORD_EINVAL, "job name '%.20s...' is longer than %d",
				    name, COORD_SPEC_NAME_MAX - 1);
	if (!isalpha((unsigned char)name[0]))
		return coord_seterr(err, COORD_EINVAL, "job name '%s' does not start with a letter",
				    name);
	for (size_t i = 1; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!isalnum(c) && c != '_' && c != '-')
			return coord_seterr(err, COORD_EINVAL,
					    "job name '%s' holds '%c' (allowed: letters, "
					    "digits, '_', '-')",
					    name, isprint(c) ? c : '?');
	}
	return 0;
}

/*
 * "host:port", "[v6]:port" or "inproc".  The host is any run of printable,
 * non-blank characters other than ':' (names and IPv4), or a bracketed IPv6
 * literal; the port is 1..65535 without sign or blanks.
 */
static int check_address(const char *job, int64_t index, const char *addr, struct coord_error *err)
{
	const char *colon, *host_end;
	unsigned long port = 0;
	size_t len = strlen(addr);

	if (len == 0)
		return coord_seterr(err, COORD_EINVAL, "job '%s' task %lld: empty address", job,
				    (long long)index);
	if (!strcmp(addr, "inproc"))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!isgraph((unsigned char)addr[i]))
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s' task %lld: address '%s' holds a blank or "
					    "control character",
					    job, (long long)index, addr);
	if (addr[0] == '[') {
		host_end = strchr(addr, ']');
		if (!host_end || host_end == addr + 1)
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s' task %lld: address '%s' has a bad [IPv6] "
					    "host",
					    job, (long long)index, addr);
		colon = host_end + 1;
		if (*colon != ':')
			colon = NULL;
	} else {
		colon = strchr(addr, ':');
		if (colon && strchr(colon + 1, ':'))
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s' task %lld: address '%s' has several ':' "
					    "(write IPv6 hosts as [addr]:port)",
					    job, (long long)index, addr);
		if (colon == addr)
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s' task %lld: address '%s' has no host", job,
					    (long long)index, addr);
	}
	if (!colon || colon[1] == '\0')
		return coord_seterr(err, COORD_EINVAL,
				    "job '%s' task %lld: address '%s' has no port (want host:port)",
				    job, (long long)index, addr);
	for (const char *p = colon + 1; *p; p++) {
		if (!isdigit((unsigned char)*p) || p - colon > 5)
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s' task %lld: address '%s' has a bad port", job,
					    (long long)index, addr);
		port = port * 10 + (unsigned long)(*p - '0');
	}
	if (port == 0 || port > 65535)
		return coord_seterr(err, COORD_EINVAL,
				    "job '%s' task %lld: port %lu of '%s' is not in 1..65535", job,
				    (long long)index, port, addr);
	return 0;
}

int coord_spec_add_job(struct coord_spec *s, const char *name, struct spec_job **job,
		       struct coord_error *err)
{
	struct spec_job *j;
	int r = coord_spec_check_job_name(name, err);

	if (r < 0)
		return r;
	if (s->njobs == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4;
		struct spec_job *n = realloc(s->jobs, cap * sizeof(*n));

		if (!n)
			return coord_seterr(err, COORD_ENOMEM, "no memory for job '%s'", name);
		s->jobs = n;
		s->cap = cap;
	}
	j = &s->jobs[s->njobs];
	memset(j, 0, sizeof(*j));
	j->name = strdup(name);
	if (!j->name)
		return coord_seterr(err, COORD_ENOMEM, "no memory for job '%s'", name);
	s->njobs++;
	*job = j;
	return 0;
}

int coord_spec_add_task(struct spec_job *j, int64_t index, const char *addr,
			struct coord_error *err)
{
	struct spec_task *t;
	int r;

	if (index < 0)
		return coord_seterr(err, COORD_EINVAL, "job '%s': negative task index %lld",
				    j->name, (long long)index);
	if (index > COORD_SPEC_MAX_INDEX)
		return coord_seterr(err, COORD_EINVAL,
				    "job '%s': task index %lld is above the limit %d", j->name,
				    (long long)index, COORD_SPEC_MAX_INDEX);
	r = check_address(j->name, index, addr, err);
	if (r < 0)
		return r;
	if (j->ntasks == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 4;
		struct spec_task *n = realloc(j->tasks, cap * sizeof(*n));

		if (!n)
			return coord_seterr(err, COORD_ENOMEM, "no memory for job '%s'", j->name);
		j->tasks = n;
		j->cap = cap;
	}
	t = &j->tasks[j->ntasks];
	t->index = index;
	t->addr = strdup(addr);
	if (!t->addr)
		return coord_seterr(err, COORD_ENOMEM, "no memory for job '%s'", j->name);
	j->ntasks++;
	return 0;
}

static int cmp_job(const void *a, const void *b)
{
	return strcmp(((const struct spec_job *)a)->name, ((const struct spec_job *)b)->name);
}

static int cmp_task(const void *a, const void *b)
{
	int64_t x = ((const struct spec_task *)a)->index, y = ((const struct spec_task *)b)->index;

	return (x > y) - (x < y);
}

int coord_spec_seal(struct coord_spec *s, struct coord_error *err)
{
	if (s->njobs > 1)
		qsort(s->jobs, s->njobs, sizeof(*s->jobs), cmp_job);
	for (size_t i = 0; i < s->njobs; i++) {
		struct spec_job *j = &s->jobs[i];

		if (i > 0 && !strcmp(s->jobs[i - 1].name, j->name))
			return coord_seterr(err, COORD_EINVAL, "duplicate job '%s'", j->name);
		if (j->ntasks > 1)
			qsort(j->tasks, j->ntasks, sizeof(*j->tasks), cmp_task);
		for (size_t k = 1; k < j->ntasks; k++)
			if (j->tasks[k - 1].index == j->tasks[k].index)
				return coord_seterr(err, COORD_EINVAL,
						    "job '%s': duplicate task index %lld", j->name,
						    (long long)j->tasks[k].index);
	}
	return 0;
}

const struct spec_job *coord_spec_find_job(const struct coord_spec *s, const char *name)
{
	size_t lo = 0, hi;

	if (!s || !name)
		return NULL;
	/* Binary search over the sealed, name-sorted jobs: O(log njobs) steps. */
	hi = s->njobs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, s->jobs[mid].name);

		if (c == 0)
			return &s->jobs[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

static const struct spec_task *find_task(const struct spec_job *j, int64_t index)
{
	size_t lo = 0, hi = j->ntasks;

	/* Dense jobs hit directly; otherwise binary search, O(log ntasks). */
	if (index >= 0 && (uint64_t)index < j->ntasks && j->tasks[index].index == index)
		return &j->tasks[index];
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (j->tasks[mid].index == index)
			return &j->tasks[mid];
		if (j->tasks[mid].index > index)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int coord_spec_local(unsigned nworkers, unsigned nps, struct coord_spec **out)
{
	static const char *const names[] = { "ps", "worker" };
	unsigned counts[] = { nps, nworkers };
	struct coord_spec *s = NULL;
	int r;

	if (!out || nworkers == 0 || nworkers > COORD_SPEC_MAX_INDEX + 1u ||
	    nps > COORD_SPEC_MAX_INDEX + 1u)
		return COORD_EINVAL;
	r = coord_spec_new(&s, NULL);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct spec_job *j;

		if (counts[i] == 0)
			continue;
		r = coord_spec_add_job(s, names[i], &j, NULL);
		for (unsigned k = 0; r == 0 && k < counts[i]; k++)
			r = coord_spec_add_task(j, k, "inproc", NULL);
		if (r < 0)
			goto err;
	}
	r = coord_spec_seal(s, NULL);
	if (r < 0)
		goto err;
	*out = s;
	return 0;
err:
	coord_spec_destroy(s);
	return r;
}

void coord_spec_destroy(struct coord_spec *spec)
{
	if (!spec)
		return;
	for (size_t i = 0; i < spec->njobs; i++) {
		for (size_t k = 0; k < spec->jobs[i].ntasks; k++)
			free(spec->jobs[i].tasks[k].addr);
		free(spec->jobs[i].tasks);
		free(spec->jobs[i].name);
	}
	free(spec->jobs);
	free(spec);
}

size_t coord_spec_num_tasks(const struct coord_spec *spec, const char *job)
{
	const struct spec_job *j = coord_spec_find_job(spec, job);

	return j ? j->ntasks : 0;
}

bool coord_spec_has_job(const struct coord_spec *spec, const char *job)
{
	return coord_spec_find_job(spec, job) != NULL;
}

static int no_job(const struct coord_spec *spec, const char *job, struct coord_error *err)
{
	if (!spec || !job)
		return coord_seterr(err, COORD_EINVAL, "no spec or no job name given");
	return coord_seterr(err, COORD_EINVAL, "no job '%s' in the cluster spec", job);
}

int coord_spec_task_address(const struct coord_spec *spec, const char *job, int64_t index,
			    const char **addr, struct coord_error *err)
{
	const struct spec_job *j = coord_spec_find_job(spec, job);
	const struct spec_task *t;

	if (!j)
		return no_job(spec, job, err);
	t = find_task(j, index);
	if (!t)
		return coord_seterr(err, COORD_EINVAL, "no task %lld in job '%s'", (long long)index,
				    job);
	*addr = t->addr;
	return 0;
}

bool coord_spec_empty(const struct coord_spec *spec)
{
	return !spec || spec->njobs == 0;
}

size_t coord_spec_jobs(const struct coord_spec *spec, const char **names, size_t cap)
{
	if (!spec)
		return 0;
	for (size_t i = 0; names && i < cap && i < spec->njobs; i++)
		names[i] = spec->jobs[i].name;
	return spec->njobs;
}

int coord_spec_task_indices(const struct coord_spec *spec, const char *job, int64_t *idx,
			    size_t cap, size_t *n, struct coord_error *err)
{
	const struct spec_job *j = coord_spec_find_job(spec, job);

	if (!j)
		return no_job(spec, job, err);
	for (size_t k = 0; idx && k < cap && k < j->ntasks; k++)
		idx[k] = j->tasks[k].index;
	if (n)
		*n = j->ntasks;
	return 0;
}

int coord_spec_job_tasks(const struct coord_spec *spec, const char *job, const char **addrs,
			 size_t cap, size_t *n, struct coord_error *err)
{
	const struct spec_job *j = coord_spec_find_job(spec, job);
	size_t len, k = 0;

	if (!j)
		return no_job(spec, job, err);
	/* Tasks are sorted, so the last holds the largest index (<= MAX_INDEX). */
	len = j->ntasks ? (size_t)j->tasks[j->ntasks - 1].index + 1 : 0;
	for (size_t i = 0; addrs && i < cap && i < len; i++) {
		if (k < j->ntasks && j->tasks[k].index == (int64_t)i)
			addrs[i] = j->tasks[k++].addr;
		else
			addrs[i] = NULL;
	}
	if (n)
		*n = len;
	return 0;
}

bool coord_spec_equal(const struct coord_spec *a, const struct coord_spec *b)
{
	if (!a || !b)
		return a == b;
	if (a->njobs != b->njobs)
		return false;
	for (size_t i = 0; i < a->njobs; i++) {
		const struct spec_job *x = &a->jobs[i], *y = &b->jobs[i];

		if (strcmp(x->name, y->name) || x->ntasks != y->ntasks)
			return false;
		for (size_t k = 0; k < x->ntasks; k++)
			if (x->tasks[k].index != y->tasks[k].index ||
			    strcmp(x->tasks[k].addr, y->tasks[k].addr))
				return false;
	}
	return true;
}
