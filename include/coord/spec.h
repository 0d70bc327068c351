/* SPDX-License-Identifier: MIT */
/*
 * coord/spec.h - ClusterSpec: the jobs of a cluster and their tasks (S16).
 *
 * A spec maps job names ("worker", "ps", ...) to tasks.  A job is dense (its
 * tasks are 0..n-1, written as a list) or sparse (index -> address, written as
 * a map).  Specs are immutable once built and may be read from any thread.
 */
#ifndef COORD_SPEC_H
#define COORD_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>

#ifdef __cplusplus
extern "C" {
#endif

struct coord_spec;

/**
 * coord_spec_parse() - build a spec from JSON text.
 * @json: `{"worker": ["h:p", ...], "ps": {"1": "h:p"}}`; copied.
 * @out:  on success a new spec; caller frees with coord_spec_destroy().
 * @err:  optional detail on failure (names what is malformed).
 *
 * Return: 0; COORD_EINVAL on malformed input; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_parse(const char *json, struct coord_spec **out,
					       struct coord_error *err);

/**
 * coord_spec_local() - a spec of @nworkers dense workers and @nps dense ps
 * tasks, all with the address "inproc" (the in-process cluster).
 * @out: caller frees with coord_spec_destroy().
 *
 * Return: 0; COORD_EINVAL if @nworkers is 0; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_local(unsigned nworkers, unsigned nps,
					       struct coord_spec **out);

/** coord_spec_destroy() - free a spec; NULL is ignored. */
COORD_API void coord_spec_destroy(struct coord_spec *spec);

/**
 * coord_spec_num_tasks() - number of tasks in @job (0 if there is no such job).
 */
COORD_API size_t coord_spec_num_tasks(const struct coord_spec *spec, const char *job);

/**
 * coord_spec_task_address() - the address of task @index of @job.
 * @addr: on success points into @spec; valid until coord_spec_destroy().
 *
 * Return: 0; COORD_EINVAL (with a message) if the job or the index is absent.
 */
COORD_API COORD_NODISCARD int coord_spec_task_address(const struct coord_spec *spec,
						      const char *job, int64_t index,
						      const char **addr, struct coord_error *err);

/** coord_spec_empty() - true when the spec has no job (a spec "is false"). */
COORD_API bool coord_spec_empty(const struct coord_spec *spec);

#ifdef __cplusplus
}
#endif
#endif /* COORD_SPEC_H */
