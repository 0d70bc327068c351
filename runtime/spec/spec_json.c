// SPDX-License-Identifier: MIT
/*
 * runtime/spec/spec_json.c - ClusterSpec from and to JSON, and TF_CONFIG (S16).
 *
 * JSON is read with jansson, refusing duplicate object keys, so a job or a
 * sparse index given twice is an error rather than "last one wins".  Every
 * error names the job and the task it is about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <coord/spec.h>

#include "runtime/spec/spec_pvt.h"

static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "a list";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "unknown";
}

/* A sparse key: decimal digits only, value 0..COORD_SPEC_MAX_INDEX. */
static int parse_index_key(const char *job, const char *key, int64_t *out, struct coord_error *err)
{
	int64_t v = 0;
	size_t i = 0;

	if (key[0] == '-' && key[1] >= '0' && key[1] <= '9')
		return coord_seterr(err, COORD_EINVAL, "job '%s': negative task index \"%s\"", job,
				    key);
	if (key[0] == '\0')
		return coord_seterr(err, COORD_EINVAL, "job '%s': empty task index", job);
	for (; key[i]; i++) {
		if (key[i] < '0' || key[i] > '9')
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s': task index \"%.40s\" is not a decimal "
					    "integer",
					    job, key);
		v = v * 10 + (key[i] - '0');
		if (v > COORD_SPEC_MAX_INDEX)
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s': task index \"%.40s\" is above the limit %d",
					    job, key, COORD_SPEC_MAX_INDEX);
	}
	*out = v;
	return 0;
}

static int add_json_job(struct coord_spec *s, const char *name, json_t *tasks,
			struct coord_error *err)
{
	struct spec_job *j;
	int r = coord_spec_add_job(s, name, &j, err);

	if (r < 0)
		return r;
	if (json_is_array(tasks)) {
		size_t n = json_array_size(tasks);

		if (n > COORD_SPEC_MAX_INDEX + 1u)
			return coord_seterr(err, COORD_EINVAL,
					    "job '%s': %zu tasks, above the "
					    "limit %d",
					    name, n, COORD_SPEC_MAX_INDEX + 1);
		for (size_t i = 0; i < n; i++) {
			json_t *a = json_array_get(tasks, i);

			if (!json_is_string(a))
				return coord_seterr(err, COORD_EINVAL,
						    "job '%s': task %zu is %s, not an address "
						    "string",
						    name, i, json_kind(a));
			r = coord_spec_add_task(j, (int64_t)i, json_string_value(a), err);
			if (r < 0)
				return r;
		}
		return 0;
	}
	if (json_is_object(tasks)) {
		const char *key;
		json_t *a;

		json_object_foreach(tasks, key, a)
		{
			int64_t index = 0;

			r = parse_index_key(name, key, &index, err);
			if (r < 0)
				return r;
			if (!json_is_string(a))
				return coord_seterr(err, COORD_EINVAL,
						    "job '%s': task %lld is %s, not an address "
						    "string",
						    name, (long long)index, json_kind(a));
			r = coord_spec_add_task(j, index, json_string_value(a), err);
			if (r < 0)
				return r;
		}
		return 0;
	}
	return coord_seterr(err, COORD_EINVAL,
			    "job '%s' is %s; want a list of addresses or an object from task "
			    "index to address",
			    name, json_kind(tasks));
}

int coord_spec_from_json(json_t *root, const char *what, struct coord_spec **out,
			 struct coord_error *err)
{
	struct coord_spec *s;
	const char *name;
	json_t *tasks;
	int r;

	if (!json_is_object(root))
		return coord_seterr(err, COORD_EINVAL,
				    "%s is %s, not an object mapping job names to tasks", what,
				    json_kind(root));
	r = coord_spec_new(&s, err);
	if (r < 0)
		return r;
	json_object_foreach(root, name, tasks)
	{
		r = add_json_job(s, name, tasks, err);
		if (r < 0)
			goto err;
	}
	r = coord_spec_seal(s, err);
	if (r < 0)
		goto err;
	*out = s;
	return 0;
err:
	coord_spec_destroy(s);
	return r;
}

static int load(const char *text, const char *what, json_t **root, struct coord_error *err)
{
	json_error_t je;

	if (!text)
		return coord_seterr(err, COORD_EINVAL, "%s: no text given", what);
	*root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!*root)
		return coord_seterr(err, COORD_EINVAL,
				    "%s is not valid JSON: %s (line %d, "
				    "column %d)",
				    what, je.text, je.line, je.column);
	return 0;
}

int coord_spec_parse(const char *json, struct coord_spec **out, struct coord_error *err)
{
	json_t *root;
	int r;

	if (!out)
		return coord_seterr(err, COORD_EINVAL, "coord_spec_parse: no out pointer");
	r = load(json, "cluster spec", &root, err);
	if (r < 0)
		return r;
	r = coord_spec_from_json(root, "the cluster spec", out, err);
	json_decref(root);
	return r;
}

static void no_task(struct coord_task_id *self)
{
	if (self) {
		self->job[0] = '\0';
		self->index = -1;
	}
}

int coord_spec_from_tf_config(const char *text, struct coord_spec **out, struct coord_task_id *self,
			      struct coord_error *err)
{
	struct coord_spec *s = NULL;
	json_t *root, *cluster, *task, *type, *index;
	const char *addr;
	int r;

	if (!out)
		return coord_seterr(err, COORD_EINVAL, "TF_CONFIG: no out pointer");
	r = load(text, "TF_CONFIG", &root, err);
	if (r < 0)
		return r;
	r = COORD_EINVAL;
	if (!json_is_object(root)) {
		coord_seterr(err, r, "TF_CONFIG is %s, not an object", json_kind(root));
		goto out;
	}
	cluster = json_object_get(root, "cluster");
	if (!cluster) {
		coord_seterr(err, r, "TF_CONFIG has no \"cluster\"");
		goto out;
	}
	r = coord_spec_from_json(cluster, "TF_CONFIG \"cluster\"", &s, err);
	if (r < 0)
		goto out;
	r = COORD_EINVAL;
	task = json_object_get(root, "task");
	if (!task || json_is_null(task)) {
		no_task(self);
		r = 0;
		goto out;
	}
	if (!json_is_object(task)) {
		coord_seterr(err, r, "TF_CONFIG \"task\" is %s, not an object", json_kind(task));
		goto out;
	}
	type = json_object_get(task, "type");
	index = json_object_get(task, "index");
	if (!json_is_string(type)) {
		coord_seterr(err, r, "TF_CONFIG \"task\" has no string \"type\"");
		goto out;
	}
	if (!coord_spec_has_job(s, json_string_value(type))) {
		coord_seterr(err, r, "TF_CONFIG task type '%.63s' is not a job of the cluster",
			     json_string_value(type));
		goto out;
	}
	/* TensorFlow defaults a missing index to 0. */
	if (index && !json_is_integer(index)) {
		coord_seterr(err, r, "TF_CONFIG task index is %s, not an integer",
			     json_kind(index));
		goto out;
	}
	r = coord_spec_task_address(s, json_string_value(type),
				    index ? json_integer_value(index) : 0, &addr, err);
	if (r < 0)
		goto out;
	if (self) {
		/* Job names were checked: shorter than COORD_SPEC_NAME_MAX. */
		snprintf(self->job, sizeof(self->job), "%s", json_string_value(type));
		self->index = index ? json_integer_value(index) : 0;
	}
	r = 0;
out:
	json_decref(root);
	if (r < 0)
		coord_spec_destroy(s);
	else
		*out = s;
	return r;
}

int coord_spec_resolve_tf_config(struct coord_spec **out, struct coord_task_id *self,
				 struct coord_error *err)
{
	const char *v = getenv("TF_CONFIG");

	if (!v || !*v)
		return coord_seterr(err, COORD_EINVAL, "TF_CONFIG is not set");
	return coord_spec_from_tf_config(v, out, self, err);
}

static json_t *job_to_json(const struct spec_job *j)
{
	bool dense = j->ntasks > 0 && j->tasks[j->ntasks - 1].index + 1 == (int64_t)j->ntasks;
	json_t *v = dense ? json_array() : json_object();

	for (size_t k = 0; v && k < j->ntasks; k++) {
		json_t *a = json_string(j->tasks[k].addr);
		char key[24];
		int r;

		if (dense) {
			r = json_array_append_new(v, a);
		} else {
			snprintf(key, sizeof(key), "%lld", (long long)j->tasks[k].index);
			r = json_object_set_new(v, key, a);
		}
		if (r < 0) {
			json_decref(v);
			return NULL;
		}
	}
	return v;
}

int coord_spec_as_dict(const struct coord_spec *spec, char **json, struct coord_error *err)
{
	json_t *root;
	char *text;

	if (!spec || !json)
		return coord_seterr(err, COORD_EINVAL, "coord_spec_as_dict: no spec or no out");
	root = json_object();
	if (!root)
		goto nomem;
	for (size_t i = 0; i < spec->njobs; i++) {
		json_t *v = job_to_json(&spec->jobs[i]);

		if (!v || json_object_set_new(root, spec->jobs[i].name, v) < 0) {
			json_decref(root);
			goto nomem;
		}
	}
	/* Insertion order is name order for jobs and index order for tasks. */
	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		goto nomem;
	*json = text;
	return 0;
nomem:
	return coord_seterr(err, COORD_ENOMEM, "no memory for the JSON of a cluster spec");
}
