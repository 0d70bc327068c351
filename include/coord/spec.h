/* SPDX-License-Identifier: MIT */
/*
 * coord/spec.h - ClusterSpec: the jobs of a cluster and their tasks (S16).
 *
 * A spec maps job names ("worker", "ps", ...) to tasks.  A job is dense (its
 * tasks are 0..n-1, written as a list) or sparse (index -> address, written as
 * a map).  Specs are immutable once built and may be read from any thread
 * without locking; only coord_spec_destroy() needs the caller to know that no
 * other thread still reads the spec.
 *
 * Rules every spec obeys, whatever it was built from (JSON, TF_CONFIG, Slurm,
 * ClusterDef bytes):
 *   - a job name is 1..COORD_SPEC_NAME_MAX-1 characters of [A-Za-z0-9_-],
 *     starting with a letter, and appears once;
 *   - a task index is 0..COORD_SPEC_MAX_INDEX and appears once in its job;
 *   - an address is "host:port" (host non-empty, "[v6]" allowed, port
 *     1..65535), or the literal "inproc" (the in-process transport);
 *   - jobs are kept sorted by name, tasks by index: every listing below is in
 *     that order, and the ClusterDef bytes are canonical.
 *
 * The `--spec` argument of the servers and examples is read with
 * coord_spec_from_arg(): a file, a JSON string, `tf_config` or `slurm`.
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

/* Longest job name plus its NUL. */
#define COORD_SPEC_NAME_MAX 64
/* Largest task index (bounds the dense view of a sparse job). */
#define COORD_SPEC_MAX_INDEX 1048575
/* Largest spec file and longest JSON text coord_spec_from_arg() reads. */
#define COORD_SPEC_TEXT_MAX (1u << 20)

/**
 * struct coord_task_id - which task of the cluster this process is.
 * @job:   job name, "" when the source does not say (a plain spec).
 * @index: task index in @job, or -1 when the source does not say.
 *
 * Caller-allocated plain data, filled by the resolvers.
 */
struct coord_task_id {
	char job[COORD_SPEC_NAME_MAX];
	int64_t index;
};

/**
 * coord_spec_parse() - build a spec from JSON text.
 * @json: `{"worker": ["h:p", ...], "ps": {"1": "h:p"}}`; borrowed for the
 *        call only.  A job given as a list is dense (index = position); a job
 *        given as an object maps decimal index strings to addresses.
 * @out:  on success a new spec; caller frees with coord_spec_destroy().
 * @err:  optional detail on failure (names what is malformed: not an object,
 *        a non-string task, a negative, duplicate or non-numeric index, a bad
 *        job name, an empty address, an address without a port, ...).
 *
 * Concurrency: any thread.  Nothing is allocated on failure.
 *
 * Return: 0; COORD_EINVAL on malformed input; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_parse(const char *json, struct coord_spec **out,
					       struct coord_error *err);

/**
 * coord_spec_local() - a spec of @nworkers dense workers and @nps dense ps
 * tasks, all with the address "inproc" (the in-process cluster).  The "ps"
 * job is left out when @nps is 0.
 * @out: caller frees with coord_spec_destroy().
 *
 * Concurrency: any thread.
 *
 * Return: 0; COORD_EINVAL if @nworkers is 0 or a count exceeds
 * COORD_SPEC_MAX_INDEX + 1; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_local(unsigned nworkers, unsigned nps,
					       struct coord_spec **out);

/**
 * coord_spec_destroy() - free a spec and every string it handed out; NULL is
 * ignored.
 *
 * Concurrency: no other thread may still read @spec.
 */
COORD_API void coord_spec_destroy(struct coord_spec *spec);

/**
 * coord_spec_num_tasks() - number of tasks in @job (0 if there is no such job;
 * use coord_spec_has_job() to tell an empty job from a missing one).
 *
 * Concurrency: any thread.
 */
COORD_API size_t coord_spec_num_tasks(const struct coord_spec *spec, const char *job);

/**
 * coord_spec_has_job() - whether @spec defines @job (possibly with no task).
 *
 * Concurrency: any thread.
 */
COORD_API bool coord_spec_has_job(const struct coord_spec *spec, const char *job);

/**
 * coord_spec_task_address() - the address of task @index of @job.
 * @addr: on success points into @spec; valid until coord_spec_destroy().
 *
 * Concurrency: any thread.
 *
 * Return: 0; COORD_EINVAL (with a message) if the job or the index is absent.
 */
COORD_API COORD_NODISCARD int coord_spec_task_address(const struct coord_spec *spec,
						      const char *job, int64_t index,
						      const char **addr, struct coord_error *err);

/**
 * coord_spec_empty() - true when the spec has no job (a spec "is false");
 * NULL is empty.  A job without tasks still makes the spec non-empty.
 *
 * Concurrency: any thread.
 */
COORD_API bool coord_spec_empty(const struct coord_spec *spec);

/**
 * coord_spec_jobs() - the job names, sorted.
 * @names: array of @cap entries filled with the first min(@cap, count) names;
 *         NULL with @cap 0 to only count.  The strings point into @spec and
 *         live until coord_spec_destroy().
 *
 * Concurrency: any thread.  Return: the number of jobs (may exceed @cap).
 */
COORD_API size_t coord_spec_jobs(const struct coord_spec *spec, const char **names, size_t cap);

/**
 * coord_spec_task_indices() - the task indices of @job, ascending.
 * @idx: array of @cap entries, filled with the first min(@cap, *@n) indices;
 *       NULL with @cap 0 to only count.
 * @n:   set to the number of tasks in @job.
 *
 * Concurrency: any thread.
 *
 * Return: 0; COORD_EINVAL if @job is not in @spec.
 */
COORD_API COORD_NODISCARD int coord_spec_task_indices(const struct coord_spec *spec,
						      const char *job, int64_t *idx, size_t cap,
						      size_t *n, struct coord_error *err);

/**
 * coord_spec_job_tasks() - the dense view of @job: entry i is the address of
 * task i, or NULL where a sparse job has no task i.
 * @addrs: array of @cap entries, filled with the first min(@cap, *@n) entries;
 *         NULL with @cap 0 to only count.  The strings point into @spec.
 * @n:     set to the largest index + 1 (0 for a job without tasks).
 *
 * Concurrency: any thread.
 *
 * Return: 0; COORD_EINVAL if @job is not in @spec.
 */
COORD_API COORD_NODISCARD int coord_spec_job_tasks(const struct coord_spec *spec, const char *job,
						   const char **addrs, size_t cap, size_t *n,
						   struct coord_error *err);

/**
 * coord_spec_as_dict() - the spec as JSON text, the shape coord_spec_parse()
 * reads: a job whose indices are 0..n-1 is a list, any other an object from
 * index strings (ascending) to addresses; a job without tasks is `{}`.  Jobs
 * appear sorted by name, so equal specs give equal text.
 * @json: on success a NUL-terminated string; caller frees with free().
 *
 * Concurrency: any thread.  Return: 0; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_as_dict(const struct coord_spec *spec, char **json,
						 struct coord_error *err);

/**
 * coord_spec_equal() - whether @a and @b have the same jobs with the same
 * index -> address maps (how they were written, dense or sparse, does not
 * matter).  NULL equals only NULL.
 *
 * Concurrency: any thread.
 */
COORD_API bool coord_spec_equal(const struct coord_spec *a, const struct coord_spec *b);

/**
 * coord_spec_as_cluster_def() - the spec as `tensorflow.ClusterDef` wire
 * bytes (runtime/cluster.proto): one JobDef per job, sorted by name, its
 * tasks map written in ascending index order.
 * @buf: on success the bytes; caller frees with free().  A spec without jobs
 *       gives zero bytes and a non-NULL @buf.
 * @len: set to the number of bytes.
 *
 * Concurrency: any thread.  Return: 0; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_as_cluster_def(const struct coord_spec *spec,
							uint8_t **buf, size_t *len,
							struct coord_error *err);

/**
 * coord_spec_from_cluster_def() - build a spec from `tensorflow.ClusterDef`
 * wire bytes.  The spec rules above apply; a job name or task index given
 * twice is refused.
 * @buf: @len bytes, borrowed for the call only (NULL allowed when @len is 0).
 * @out: on success a new spec; caller frees with coord_spec_destroy().
 *
 * Concurrency: any thread.
 *
 * Return: 0; COORD_EINVAL if the bytes do not decode or break a rule;
 * COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_from_cluster_def(const void *buf, size_t len,
							  struct coord_spec **out,
							  struct coord_error *err);

/**
 * coord_spec_from_tf_config() - resolve TF_CONFIG-shaped JSON text:
 * `{"cluster": {...}, "task": {"type": "worker", "index": 0}}`.
 * @text: the JSON; borrowed for the call only.  Other members ("rpc_layer",
 *        "environment", ...) are ignored.  "task" may be absent.
 * @out:  on success a new spec; caller frees with coord_spec_destroy().
 * @self: optional; on success this process's job and index ("" and -1 when
 *        "task" is absent).
 *
 * When "task" is present its type must be a job of the cluster and its index
 * a task of that job.
 *
 * Return: 0; COORD_EINVAL on malformed text; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_from_tf_config(const char *text, struct coord_spec **out,
							struct coord_task_id *self,
							struct coord_error *err);

/**
 * coord_spec_resolve_tf_config() - coord_spec_from_tf_config() on the
 * TF_CONFIG environment variable.
 *
 * Concurrency: reads the environment; not safe against a concurrent setenv().
 *
 * Return: as coord_spec_from_tf_config(); COORD_EINVAL if TF_CONFIG is unset.
 */
COORD_API COORD_NODISCARD int coord_spec_resolve_tf_config(struct coord_spec **out,
							   struct coord_task_id *self,
							   struct coord_error *err);

/**
 * struct coord_slurm_job - one job of a Slurm allocation and its task count.
 * @name:   job name (the spec rules apply).
 * @ntasks: number of tasks in the job.
 */
struct coord_slurm_job {
	const char *name;
	unsigned ntasks;
};

/**
 * struct coord_slurm_opts - options of coord_spec_resolve_slurm().
 * @size:           sizeof(struct coord_slurm_opts) as the program was
 *                  compiled; set by coord_slurm_opts_init().  The struct grows
 *                  only at its end, as struct coord_opts (coord/coord.h) does.
 * @flags:          0 (reserved for extension).
 * @port_base:      port of a node's first task; its k-th task gets
 *                  @port_base + k.  Default 8888, as TensorFlow.
 * @tasks_per_node: tasks on each node; 0 reads SLURM_NTASKS_PER_NODE, then
 *                  SLURM_TASKS_PER_NODE ("2(x3),1"), and otherwise spreads
 *                  SLURM_NTASKS in blocks of ceil(ntasks / nodes).
 * @jobs:           @njobs jobs, borrowed for the call.  Ranks are handed out
 *                  to the jobs sorted by name, as TensorFlow's
 *                  SlurmClusterResolver does.  NULL: one job "worker" of
 *                  SLURM_NTASKS tasks.
 * @njobs:          number of entries in @jobs.
 *
 * Caller-allocated; start from coord_slurm_opts_init().
 */
struct coord_slurm_opts {
	size_t size;
	uint32_t flags;
	unsigned port_base;
	unsigned tasks_per_node;
	const struct coord_slurm_job *jobs;
	size_t njobs;
};

/**
 * coord_slurm_opts_init_size() - fill the first @size bytes at @opts with
 * the defaults and @opts->size with @size; what coord_slurm_opts_init()
 * calls.
 * @opts: the caller's options.
 * @size: sizeof(*@opts) as the caller was compiled.
 */
COORD_API void coord_slurm_opts_init_size(struct coord_slurm_opts *opts, size_t size);

/**
 * coord_slurm_opts_init() - fill caller-owned @opts with the defaults: port
 * base 8888, tasks per node from the environment, one job "worker"; and its
 * size.
 * @opts: the caller's options.
 */
static inline void coord_slurm_opts_init(struct coord_slurm_opts *opts)
{
	coord_slurm_opts_init_size(opts, sizeof(*opts));
}

/**
 * coord_spec_resolve_slurm() - the spec of the current Slurm allocation.
 * @opts: optional (NULL = defaults); borrowed for the call.
 * @out:  on success a new spec; caller frees with coord_spec_destroy().
 * @self: optional; this process's job and index, from SLURM_PROCID.
 *
 * Reads SLURM_JOB_NODELIST (host-list syntax, `node[01-04,07],gpu-a`; falls
 * back to SLURM_NODELIST), SLURM_PROCID and SLURM_NTASKS.  Tasks are laid out
 * node by node in the order of the list, rank r being the r-th task; the
 * jobs' task counts must add up to SLURM_NTASKS.
 *
 * Concurrency: reads the environment; not safe against a concurrent setenv().
 *
 * Return: 0; COORD_EINVAL when a variable is missing or malformed, the counts
 * do not add up or a port passes 65535; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_resolve_slurm(const struct coord_slurm_opts *opts,
						       struct coord_spec **out,
						       struct coord_task_id *self,
						       struct coord_error *err);

/**
 * coord_spec_from_arg() - the spec named by a `--spec` argument.
 * @arg:  one of
 *        - "tf_config": coord_spec_resolve_tf_config();
 *        - "slurm" or "slurm:OPT[,OPT...]" with OPT one of "port=N",
 *          "tasks_per_node=N" or "JOB=N" (a job and its task count; several
 *          allowed): coord_spec_resolve_slurm();
 *        - text starting with '{' (after blanks): JSON for coord_spec_parse();
 *        - anything else: a file of at most COORD_SPEC_TEXT_MAX bytes holding
 *          such JSON.
 *        Borrowed for the call.
 * @out:  on success a new spec; caller frees with coord_spec_destroy().
 * @self: optional; this process's task when the source says it (tf_config,
 *        slurm), else "" and -1.
 *
 * Concurrency: any thread, but see the resolvers about the environment.
 *
 * Return: 0; COORD_EINVAL (detail in @err, which names @arg's kind);
 * the negative errno of a file that cannot be read; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_spec_from_arg(const char *arg, struct coord_spec **out,
						  struct coord_task_id *self,
						  struct coord_error *err);

#ifdef __cplusplus
}
#endif
#endif /* COORD_SPEC_H */
