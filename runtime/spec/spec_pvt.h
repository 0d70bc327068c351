/* SPDX-License-Identifier: MIT */
/*
 * runtime/spec/spec_pvt.h - ClusterSpec internals shared by runtime/spec*.c and
 * the tests: the representation, the builder and the host-list parser.
 */
#ifndef COORD_RUNTIME_SPEC_PVT_H
#define COORD_RUNTIME_SPEC_PVT_H

#include <stddef.h>
#include <stdint.h>

#include <coord/spec.h>

#include "runtime/util/util.h"

/* Most hosts a host list may expand to, and the longest host name. */
#define COORD_HOSTLIST_MAX 65536
#define COORD_HOST_NAME_MAX 255

struct spec_task {
	int64_t index;
	char *addr;
};

struct spec_job {
	char *name;
	size_t ntasks;
	size_t cap;
	struct spec_task *tasks; /* sorted by index once sealed */
};

/*
 * A spec is built with coord_spec_new(), coord_spec_add_job() and
 * coord_spec_add_task(), then coord_spec_seal() sorts it and refuses
 * duplicates.  Only a sealed spec is handed to a caller; it never changes
 * again, which is what lets any thread read it without a lock.
 */
struct coord_spec {
	size_t njobs;
	size_t cap;
	struct spec_job *jobs; /* sorted by name once sealed */
};

/* A new spec without jobs; free it with coord_spec_destroy(). */
COORD_HIDDEN int coord_spec_new(struct coord_spec **out, struct coord_error *err);

/*
 * Add job @name (checked against the naming rule) and return it in @job;
 * @job stays valid until the next coord_spec_add_job() on @s.
 */
COORD_HIDDEN int coord_spec_add_job(struct coord_spec *s, const char *name, struct spec_job **job,
				    struct coord_error *err);

/* Add task @index of @j at @addr (copied; index and address are checked). */
COORD_HIDDEN int coord_spec_add_task(struct spec_job *j, int64_t index, const char *addr,
				     struct coord_error *err);

/* Sort jobs and tasks; refuse a job name or a task index given twice. */
COORD_HIDDEN int coord_spec_seal(struct coord_spec *s, struct coord_error *err);

/* The job called @name in a sealed spec, or NULL. */
COORD_HIDDEN const struct spec_job *coord_spec_find_job(const struct coord_spec *s,
							const char *name);

/* 0 if @name is a valid job name, else COORD_EINVAL with the reason. */
COORD_HIDDEN int coord_spec_check_job_name(const char *name, struct coord_error *err);

/* Build a spec from a parsed JSON cluster object (spec_json.c). */
struct json_t;
COORD_HIDDEN int coord_spec_from_json(struct json_t *root, const char *what,
				      struct coord_spec **out, struct coord_error *err);

/*
 * coord_hostlist_expand() - expand a Slurm host list: items separated by
 * commas, each a name with up to 8 bracket groups of numbers and ranges
 * (`node[01-04,07]`, `r[1-2]n[1-3]`, `gpu-a`).  A range keeps the width of
 * its lower bound ("01-04" gives 01 02 03 04).  Host names are
 * [A-Za-z0-9._-], at most COORD_HOST_NAME_MAX characters.
 * @max:   refuse lists expanding to more than @max hosts.
 * @hosts: on success an array of *@n strings; free with coord_hostlist_free().
 */
COORD_HIDDEN int coord_hostlist_expand(const char *list, size_t max, char ***hosts, size_t *n,
				       struct coord_error *err);
COORD_HIDDEN void coord_hostlist_free(char **hosts, size_t n);

/*
 * coord_slurm_tasks_per_node() - expand SLURM_TASKS_PER_NODE ("2(x3),1") to
 * one count per node; exactly @nnodes counts are required.
 * @counts: caller-allocated, @nnodes entries.
 */
COORD_HIDDEN int coord_slurm_tasks_per_node(const char *s, unsigned *counts, size_t nnodes,
					    struct coord_error *err);

#endif /* COORD_RUNTIME_SPEC_PVT_H */
