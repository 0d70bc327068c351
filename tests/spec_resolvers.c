// SPDX-License-Identifier: MIT
/*
 * tests/spec_resolvers.c - part of test_spec: the resolvers (TF_CONFIG, Slurm
 * host lists, tasks per node and layouts, malformed environments) and --spec
 * (JSON text, a file, their errors).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/spec.h>

#include "runtime/spec/spec_pvt.h"
#include "helpers.h"
#include "spec_test_config.h"
#include "spec_tests.h"

static const char tf_config[] =
	"{\"cluster\": {\"worker\": [\"host1:2222\", \"host2:2222\", \"host3:2222\"],"
	"              \"ps\": [\"host4:2222\", \"host5:2222\"]},"
	" \"task\": {\"type\": \"worker\", \"index\": 1},"
	" \"rpc_layer\": \"grpc\", \"environment\": \"cloud\"}";

/* TF_CONFIG: the cluster and this process's task. */
void test_spec_tf_config(void **state)
{
	struct coord_task_id self;
	struct coord_spec *s = NULL;
	const char *a;

	assert_int_equal(coord_spec_from_tf_config(tf_config, &s, &self, NULL), 0);
	assert_string_equal(self.job, "worker");
	assert_int_equal(self.index, 1);
	assert_int_equal(coord_spec_num_tasks(s, "ps"), 2);
	assert_int_equal(coord_spec_task_address(s, self.job, self.index, &a, NULL), 0);
	assert_string_equal(a, "host2:2222");
	coord_spec_destroy(s);
	/* No task: the spec alone. */
	assert_int_equal(
		coord_spec_from_tf_config("{\"cluster\": {\"chief\": [\"c:1\"]}}", &s, &self, NULL),
		0);
	assert_string_equal(self.job, "");
	assert_int_equal(self.index, -1);
	coord_spec_destroy(s);
	/* No index: TensorFlow's default 0. */
	assert_int_equal(coord_spec_from_tf_config("{\"cluster\": {\"chief\": [\"c:1\"]}, "
						   "\"task\": {\"type\": \"chief\"}}",
						   &s, &self, NULL),
			 0);
	assert_string_equal(self.job, "chief");
	assert_int_equal(self.index, 0);
	coord_spec_destroy(s);
}

/* TF_CONFIG: malformed shapes are refused and free what they built. */
void test_spec_tf_config_malformed(void **state)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{ "[]", "TF_CONFIG is a list, not an object" },
		{ "{", "TF_CONFIG is not valid JSON" },
		{ "{\"task\": {\"type\": \"worker\", \"index\": 0}}", "has no \"cluster\"" },
		{ "{\"cluster\": []}", "TF_CONFIG \"cluster\" is a list, not an object" },
		{ "{\"cluster\": {\"worker\": [\"h\"]}}", "address 'h' has no port" },
		{ "{\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": 3}", "\"task\" is an integer" },
		{ "{\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": {\"index\": 0}}",
		  "has no string \"type\"" },
		{ "{\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": {\"type\": \"ps\", "
		  "\"index\": 0}}",
		  "task type 'ps' is not a job of the cluster" },
		{ "{\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": {\"type\": \"worker\", "
		  "\"index\": 1}}",
		  "no task 1 in job 'worker'" },
		{ "{\"cluster\": {\"worker\": [\"h:1\"]}, \"task\": {\"type\": \"worker\", "
		  "\"index\": \"0\"}}",
		  "task index is a string, not an integer" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct coord_error err = { 0 };
		struct coord_spec *s = NULL;
		int r = coord_spec_from_tf_config(cases[i].text, &s, NULL, &err);

		if (r != COORD_EINVAL || s || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu %s: r=%d msg '%s', want '%s'", i, cases[i].text, r,
				 err.msg, cases[i].msg);
	}
}

/* TF_CONFIG from the environment. */
void test_spec_resolve_tf_config(void **state)
{
	struct coord_error err = { 0 };
	struct coord_task_id self;
	struct coord_spec *s = NULL;

	unsetenv("TF_CONFIG");
	assert_int_equal(coord_spec_resolve_tf_config(&s, &self, &err), COORD_EINVAL);
	assert_string_equal(err.msg, "TF_CONFIG is not set");
	setenv("TF_CONFIG", tf_config, 1);
	assert_int_equal(coord_spec_resolve_tf_config(&s, &self, NULL), 0);
	assert_int_equal(self.index, 1);
	coord_spec_destroy(s);
	assert_int_equal(coord_spec_from_arg("tf_config", &s, &self, NULL), 0);
	assert_string_equal(self.job, "worker");
	coord_spec_destroy(s);
	unsetenv("TF_CONFIG");
}

static void assert_hosts(const char *list, const char *const *want, size_t nwant)
{
	struct coord_error err = { 0 };
	char **hosts = NULL;
	size_t n = 0;

	if (coord_hostlist_expand(list, 0, &hosts, &n, &err))
		fail_msg("host list '%s': %s", list, err.msg);
	assert_int_equal(n, nwant);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(hosts[i], want[i]);
	coord_hostlist_free(hosts, n);
}

/* Slurm host lists: ranges, padding, several groups, plain names. */
void test_spec_hostlist(void **state)
{
	static const char *const a[] = {
		"node01", "node02", "node03", "node04", "node07", "gpu-a"
	};
	static const char *const b[] = { "r1n1", "r1n2", "r1n3", "r2n1", "r2n2", "r2n3" };
	static const char *const c[] = { "n8", "n9", "n10" };
	static const char *const d[] = { "a", "b.example.com", "x009-ib", "x010-ib" };
	static const char *const e[] = { "n0", "n5" };

	assert_hosts("node[01-04,07],gpu-a", a, ARRAY_SIZE(a));
	assert_hosts("r[1-2]n[1-3]", b, ARRAY_SIZE(b));
	assert_hosts("n[8-10]", c, ARRAY_SIZE(c));
	assert_hosts("a,b.example.com,x[009-010]-ib", d, ARRAY_SIZE(d));
	assert_hosts("n[0,5]", e, ARRAY_SIZE(e));
	assert_hosts("gpu-a", a + 5, 1);
}

/* Slurm host lists: malformed ones are refused, and expansion is bounded. */
void test_spec_hostlist_malformed(void **state)
{
	static const struct {
		const char *list, *msg;
	} cases[] = {
		{ "", "host list: empty" },
		{ "node[1-2", "'[' without ']'" },
		{ "node1-2]", "']' without '['" },
		{ "node[[1]]", "nested '['" },
		{ "node[]", "expected a number" },
		{ "node[1,]", "expected a number" },
		{ "node[,1]", "expected a number" },
		{ "node[1-]", "expected a number" },
		{ "node[3-1]", "range 3-1 runs backwards" },
		{ "node[1;2]", "unexpected ';' in brackets" },
		{ "node[1234567890]", "more than 9 digits" },
		{ "a,,b", "empty host name" },
		{ ",a", "empty host name" },
		{ "a,", "empty host name" },
		{ "a b", "unexpected ' ' in a host name" },
		{ "a:1", "unexpected ':'" },
		{ "n[0-999999999]", "more than 65536 hosts" },
		{ "n[0-999]m[0-999]", "more than 65536 hosts" },
		{ "a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]", "more than 8 bracket groups" },
	};
	char **hosts = NULL;
	size_t n = 0;
	char longname[300];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct coord_error err = { 0 };
		int r = coord_hostlist_expand(cases[i].list, 0, &hosts, &n, &err);

		if (r != COORD_EINVAL || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu '%s': r=%d msg '%s', want '%s'", i, cases[i].list, r,
				 err.msg, cases[i].msg);
	}
	/* The caller's maximum holds across items. */
	assert_int_equal(coord_hostlist_expand("a[1-3],b[1-3]", 5, &hosts, &n, NULL), COORD_EINVAL);
	assert_int_equal(coord_hostlist_expand("a[1-3],b[1-2]", 5, &hosts, &n, NULL), 0);
	assert_int_equal(n, 5);
	coord_hostlist_free(hosts, n);
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(coord_hostlist_expand(longname, 0, &hosts, &n, NULL), COORD_EINVAL);
}

/* SLURM_TASKS_PER_NODE: "2(x3),1" is 2 2 2 1. */
void test_spec_slurm_tasks_per_node(void **state)
{
	unsigned c[4];

	assert_int_equal(coord_slurm_tasks_per_node("2(x3),1", c, 4, NULL), 0);
	assert_int_equal(c[0], 2);
	assert_int_equal(c[2], 2);
	assert_int_equal(c[3], 1);
	assert_int_equal(coord_slurm_tasks_per_node("4", c, 1, NULL), 0);
	assert_int_equal(c[0], 4);
	assert_int_equal(coord_slurm_tasks_per_node("2(x3)", c, 4, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("2(x5)", c, 4, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("1,1,1,1,1", c, 4, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("2(3)", c, 1, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("x", c, 1, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("1,", c, 1, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("1,", c, 2, NULL), COORD_EINVAL);
	assert_int_equal(coord_slurm_tasks_per_node("", c, 1, NULL), COORD_EINVAL);
}

static void slurm_env(const char *nodelist, const char *ntasks, const char *procid, const char *tpn)
{
	unsetenv("SLURM_NODELIST");
	unsetenv("SLURM_NTASKS_PER_NODE");
	if (nodelist)
		setenv("SLURM_JOB_NODELIST", nodelist, 1);
	else
		unsetenv("SLURM_JOB_NODELIST");
	if (ntasks)
		setenv("SLURM_NTASKS", ntasks, 1);
	else
		unsetenv("SLURM_NTASKS");
	if (procid)
		setenv("SLURM_PROCID", procid, 1);
	else
		unsetenv("SLURM_PROCID");
	if (tpn)
		setenv("SLURM_TASKS_PER_NODE", tpn, 1);
	else
		unsetenv("SLURM_TASKS_PER_NODE");
}

static void assert_spec_json(const struct coord_spec *s, const char *want)
{
	struct coord_spec *w = parse_ok(want);

	if (!coord_spec_equal(s, w)) {
		char *json = NULL;

		assert_int_equal(coord_spec_as_dict(s, &json, NULL), 0);
		fail_msg("spec %s, want %s", json, want);
	}
	coord_spec_destroy(w);
}

/* Slurm: the default job "worker", tasks spread in blocks over the nodes. */
void test_spec_slurm_default(void **state)
{
	struct coord_task_id self;
	struct coord_spec *s = NULL;

	slurm_env("node[01-02]", "4", "3", NULL);
	assert_int_equal(coord_spec_resolve_slurm(NULL, &s, &self, NULL), 0);
	assert_spec_json(s, "{\"worker\": [\"node01:8888\", \"node01:8889\", \"node02:8888\", "
			    "\"node02:8889\"]}");
	assert_string_equal(self.job, "worker");
	assert_int_equal(self.index, 3);
	coord_spec_destroy(s);
	/* 5 tasks on 2 nodes: 3 then 2. */
	slurm_env("node[01-02]", "5", "0", NULL);
	assert_int_equal(coord_spec_resolve_slurm(NULL, &s, &self, NULL), 0);
	assert_spec_json(s, "{\"worker\": [\"node01:8888\", \"node01:8889\", \"node01:8890\", "
			    "\"node02:8888\", \"node02:8889\"]}");
	coord_spec_destroy(s);
	/* SLURM_TASKS_PER_NODE decides the layout; "slurm" through --spec. */
	slurm_env("node[01-02],gpu-a", "4", "3", "2,1(x2)");
	assert_int_equal(coord_spec_from_arg("slurm", &s, &self, NULL), 0);
	assert_spec_json(s, "{\"worker\": [\"node01:8888\", \"node01:8889\", \"node02:8888\", "
			    "\"gpu-a:8888\"]}");
	assert_int_equal(self.index, 3);
	coord_spec_destroy(s);
	/* SLURM_NODELIST is the fallback of SLURM_JOB_NODELIST. */
	slurm_env(NULL, "1", "0", NULL);
	setenv("SLURM_NODELIST", "solo", 1);
	assert_int_equal(coord_spec_resolve_slurm(NULL, &s, NULL, NULL), 0);
	assert_spec_json(s, "{\"worker\": [\"solo:8888\"]}");
	coord_spec_destroy(s);
	slurm_env(NULL, NULL, NULL, NULL);
}

/* Slurm: jobs and port base as options; ranks go to jobs sorted by name. */
void test_spec_slurm_jobs(void **state)
{
	const struct coord_slurm_job jobs[] = { { "worker", 3 }, { "ps", 1 } };
	struct coord_slurm_opts o;
	struct coord_task_id self;
	struct coord_spec *s = NULL;

	coord_slurm_opts_init(&o);
	assert_int_equal(o.port_base, 8888);
	o.port_base = 9000;
	o.jobs = jobs;
	o.njobs = 2;
	slurm_env("node[01-02]", "4", "0", NULL);
	assert_int_equal(coord_spec_resolve_slurm(&o, &s, &self, NULL), 0);
	assert_spec_json(s, "{\"ps\": [\"node01:9000\"], \"worker\": [\"node01:9001\", "
			    "\"node02:9000\", \"node02:9001\"]}");
	assert_string_equal(self.job, "ps");
	assert_int_equal(self.index, 0);
	coord_spec_destroy(s);
	/* tasks_per_node overrides the environment. */
	o.tasks_per_node = 1;
	slurm_env("node[01-04]", "4", "2", "4,0(x3)");
	assert_int_equal(coord_spec_resolve_slurm(&o, &s, &self, NULL), 0);
	assert_spec_json(s, "{\"ps\": [\"node01:9000\"], \"worker\": [\"node02:9000\", "
			    "\"node03:9000\", \"node04:9000\"]}");
	assert_string_equal(self.job, "worker");
	assert_int_equal(self.index, 1);
	coord_spec_destroy(s);
	/* The same through --spec. */
	slurm_env("node[01-02]", "4", "1", NULL);
	assert_int_equal(coord_spec_from_arg("slurm:port=9000,worker=3,ps=1", &s, &self, NULL), 0);
	assert_spec_json(s, "{\"ps\": [\"node01:9000\"], \"worker\": [\"node01:9001\", "
			    "\"node02:9000\", \"node02:9001\"]}");
	assert_string_equal(self.job, "worker");
	assert_int_equal(self.index, 0);
	coord_spec_destroy(s);
	slurm_env(NULL, NULL, NULL, NULL);
}

/* Slurm: missing or inconsistent environments are refused with the reason. */
void test_spec_slurm_malformed(void **state)
{
	static const struct {
		const char *nodelist, *ntasks, *procid, *tpn, *arg, *msg;
	} cases[] = {
		{ NULL, "1", "0", NULL, "slurm", "SLURM_JOB_NODELIST is not set" },
		{ "n1", NULL, "0", NULL, "slurm", "SLURM_NTASKS is not set" },
		{ "n1", "1", NULL, NULL, "slurm", "SLURM_PROCID is not set" },
		{ "n1", "x", "0", NULL, "slurm", "SLURM_NTASKS='x' is not an integer" },
		{ "n1", "-1", "0", NULL, "slurm", "SLURM_NTASKS='-1' is not an integer" },
		{ "n1", "2", "2", NULL, "slurm", "SLURM_PROCID=2 is not a rank" },
		{ "n1", "0", "0", NULL, "slurm", "is not a rank" },
		{ "n[1-", "1", "0", NULL, "slurm", "'[' without ']'" },
		{ "n[1-2]", "4", "0", "1,1", "slurm", "2 nodes hold 2 tasks, fewer than" },
		{ "n[1-2]", "4", "0", "1", "slurm", "does not give a count for each" },
		{ "n1", "3", "0", NULL, "slurm:worker=2", "the jobs ask for 2 tasks but" },
		{ "n1", "2", "0", NULL, "slurm:port=65535", "needs port 65536" },
		{ "n1", "1", "0", NULL, "slurm:port=0", "port base 0 is not in 1..65535" },
		{ "n1", "1", "0", NULL, "slurm:port", "is not NAME=NUMBER" },
		{ "n1", "1", "0", NULL, "slurm:port=1x", "has a bad number" },
		{ "n1", "2", "0", NULL, "slurm:w=1,w=1", "duplicate job 'w'" },
		{ "n1", "1", "0", NULL, "slurm:9w=1", "does not start with a letter" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct coord_error err = { 0 };
		struct coord_spec *s = NULL;
		int r;

		slurm_env(cases[i].nodelist, cases[i].ntasks, cases[i].procid, cases[i].tpn);
		r = coord_spec_from_arg(cases[i].arg, &s, NULL, &err);
		if (r != COORD_EINVAL || s || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu: r=%d msg '%s', want '%s'", i, r, err.msg, cases[i].msg);
	}
	slurm_env(NULL, NULL, NULL, NULL);
}

/* --spec: JSON text, a file, and the errors of each. */
void test_spec_from_arg(void **state)
{
	char path[] = "/tmp/coord_spec_XXXXXX";
	struct coord_error err = { 0 };
	struct coord_task_id self = { "x", 7 };
	struct coord_spec *s = NULL, *want = parse_ok(seed_sparse);
	int fd;

	assert_int_equal(coord_spec_from_arg(seed_sparse, &s, &self, NULL), 0);
	assert_true(coord_spec_equal(s, want));
	assert_string_equal(self.job, "");
	assert_int_equal(self.index, -1);
	coord_spec_destroy(s);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, seed_sparse, strlen(seed_sparse)), (ssize_t)strlen(seed_sparse));
	close(fd);
	assert_int_equal(coord_spec_from_arg(path, &s, NULL, NULL), 0);
	assert_true(coord_spec_equal(s, want));
	coord_spec_destroy(s);
	/* A file with a malformed spec says which file. */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "{\"w\": [1]}", 10), 10);
	close(fd);
	assert_int_equal(coord_spec_from_arg(path, &s, NULL, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "task 0 is an integer"));
	unlink(path);
	assert_int_equal(coord_spec_from_arg(path, &s, NULL, &err), -ENOENT);
	/* named as a missing file, not as another meaning of the value (issue 21) */
	assert_non_null(strstr(err.msg, "cannot be opened as a file: No such file or directory"));
	assert_int_equal(coord_spec_from_arg("  {\"w\": [\"h\"]}", &s, NULL, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "has no port"));
	assert_int_equal(coord_spec_from_arg("", &s, NULL, &err), COORD_EINVAL);
	assert_string_equal(err.msg, "--spec is empty");
	s = NULL;
	assert_int_equal(coord_spec_from_arg(NULL, &s, NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_spec_from_arg("/", &s, NULL, &err), -EISDIR);
	assert_non_null(strstr(err.msg, "Is a directory"));
	assert_null(s);
	coord_spec_destroy(want);
}
