// SPDX-License-Identifier: MIT
/*
 * tests/test_spec.c - ClusterSpec (S16): the seed's rules and examples, the
 * JSON reader's refusals, TF_CONFIG, Slurm host lists and the Slurm resolver,
 * --spec, and ClusterDef bytes checked against Debian's protoc.
 *
 * The protoc cases need `protoc` (found by meson, spec_test_config.h); when
 * it is missing they are skipped and, the rest having passed, the binary
 * exits 77 saying why.
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

/* The seed's two examples, as JSON (the sparse key becomes a string). */
static const char seed_dense[] = "{\"worker\": [\"worker0.example.com:2222\",\n"
				 "              \"worker1.example.com:2222\",\n"
				 "              \"worker2.example.com:2222\"],\n"
				 " \"ps\": [\"ps0.example.com:2222\",\n"
				 "          \"ps1.example.com:2222\"]}";
static const char seed_sparse[] = "{\"worker\": {\"1\": \"worker1.example.com:2222\"},\n"
				  " \"ps\": [\"ps0.example.com:2222\",\n"
				  "          \"ps1.example.com:2222\"]}";

static struct coord_spec *parse_ok(const char *json)
{
	struct coord_error err = { 0 };
	struct coord_spec *s = NULL;
	int r = coord_spec_parse(json, &s, &err);

	if (r)
		fail_msg("parse of %s failed: %s", json, err.msg);
	assert_non_null(s);
	return s;
}

static void assert_dict(const struct coord_spec *s, const char *want)
{
	char *json = NULL;

	assert_int_equal(coord_spec_as_dict(s, &json, NULL), 0);
	assert_string_equal(json, want);
	free(json);
}

/* S16: the seed's two-job, five-task cluster. */
static void test_spec_seed_dense(void **state)
{
	struct coord_spec *s = parse_ok(seed_dense);
	const char *names[4], *addrs[4], *a;
	int64_t idx[4];
	size_t n;

	assert_false(coord_spec_empty(s));
	assert_int_equal(coord_spec_jobs(s, NULL, 0), 2);
	assert_int_equal(coord_spec_jobs(s, names, 4), 2);
	assert_string_equal(names[0], "ps");
	assert_string_equal(names[1], "worker");
	assert_int_equal(coord_spec_num_tasks(s, "worker"), 3);
	assert_int_equal(coord_spec_num_tasks(s, "ps"), 2);
	assert_int_equal(coord_spec_task_indices(s, "worker", idx, 4, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_int_equal(idx[0], 0);
	assert_int_equal(idx[2], 2);
	assert_int_equal(coord_spec_task_address(s, "worker", 2, &a, NULL), 0);
	assert_string_equal(a, "worker2.example.com:2222");
	assert_int_equal(coord_spec_task_address(s, "ps", 0, &a, NULL), 0);
	assert_string_equal(a, "ps0.example.com:2222");
	assert_int_equal(coord_spec_job_tasks(s, "ps", addrs, 4, &n, NULL), 0);
	assert_int_equal(n, 2);
	assert_string_equal(addrs[1], "ps1.example.com:2222");
	assert_dict(s, "{\"ps\":[\"ps0.example.com:2222\",\"ps1.example.com:2222\"],"
		       "\"worker\":[\"worker0.example.com:2222\",\"worker1.example.com:2222\","
		       "\"worker2.example.com:2222\"]}");
	coord_spec_destroy(s);
}

/* S16: the seed's sparse worker job. */
static void test_spec_seed_sparse(void **state)
{
	struct coord_spec *s = parse_ok(seed_sparse);
	struct coord_error err = { 0 };
	const char *addrs[4], *a = NULL;
	int64_t idx[4];
	size_t n;

	assert_int_equal(coord_spec_num_tasks(s, "worker"), 1);
	assert_int_equal(coord_spec_task_indices(s, "worker", idx, 4, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(idx[0], 1);
	assert_int_equal(coord_spec_task_address(s, "worker", 1, &a, NULL), 0);
	assert_string_equal(a, "worker1.example.com:2222");
	assert_int_equal(coord_spec_task_address(s, "worker", 0, &a, &err), COORD_EINVAL);
	assert_string_equal(err.msg, "no task 0 in job 'worker'");
	assert_int_equal(coord_spec_job_tasks(s, "worker", addrs, 4, &n, NULL), 0);
	assert_int_equal(n, 2);
	assert_null(addrs[0]);
	assert_string_equal(addrs[1], "worker1.example.com:2222");
	assert_dict(s, "{\"ps\":[\"ps0.example.com:2222\",\"ps1.example.com:2222\"],"
		       "\"worker\":{\"1\":\"worker1.example.com:2222\"}}");
	coord_spec_destroy(s);
}

/* S16: task_address names what is absent; other queries refuse unknown jobs. */
static void test_spec_absent_job_and_index(void **state)
{
	struct coord_spec *s = parse_ok(seed_dense);
	struct coord_error err = { 0 };
	const char *a = "untouched";
	size_t n = 99;

	assert_int_equal(coord_spec_task_address(s, "chief", 0, &a, &err), COORD_EINVAL);
	assert_string_equal(err.msg, "no job 'chief' in the cluster spec");
	assert_int_equal(err.code, COORD_EINVAL);
	assert_int_equal(coord_spec_task_address(s, "ps", 2, &a, &err), COORD_EINVAL);
	assert_string_equal(err.msg, "no task 2 in job 'ps'");
	assert_int_equal(coord_spec_task_address(s, "ps", -1, &a, &err), COORD_EINVAL);
	assert_string_equal(a, "untouched");
	assert_int_equal(coord_spec_task_indices(s, "chief", NULL, 0, &n, &err), COORD_EINVAL);
	assert_int_equal(coord_spec_job_tasks(s, "chief", NULL, 0, &n, &err), COORD_EINVAL);
	assert_int_equal(n, 99);
	assert_int_equal(coord_spec_num_tasks(s, "chief"), 0);
	assert_false(coord_spec_has_job(s, "chief"));
	assert_true(coord_spec_has_job(s, "ps"));
	assert_int_equal(coord_spec_task_address(NULL, "ps", 0, &a, NULL), COORD_EINVAL);
	coord_spec_destroy(s);
}

/* S16: task_indices are sorted; job_tasks fills gaps with NULL; as_dict sparse order. */
static void test_spec_sparse_order_and_gaps(void **state)
{
	struct coord_spec *s = parse_ok(
		"{\"w\": {\"10\": \"c:3\", \"2\": \"a:1\", \"7\": \"b:2\"}}");
	const char *addrs[16];
	int64_t idx[2];
	size_t n;

	assert_int_equal(coord_spec_task_indices(s, "w", idx, 2, &n, NULL), 0);
	assert_int_equal(n, 3); /* the count, though only 2 fit */
	assert_int_equal(idx[0], 2);
	assert_int_equal(idx[1], 7);
	assert_int_equal(coord_spec_job_tasks(s, "w", NULL, 0, &n, NULL), 0);
	assert_int_equal(n, 11);
	assert_int_equal(coord_spec_job_tasks(s, "w", addrs, 16, &n, NULL), 0);
	for (size_t i = 0; i < n; i++) {
		if (i == 2 || i == 7 || i == 10)
			assert_non_null(addrs[i]);
		else
			assert_null(addrs[i]);
	}
	assert_string_equal(addrs[10], "c:3");
	/* Numeric, not lexical, order: 2 7 10. */
	assert_dict(s, "{\"w\":{\"2\":\"a:1\",\"7\":\"b:2\",\"10\":\"c:3\"}}");
	coord_spec_destroy(s);
}

/* S16: equality is on index -> address maps, not on how they were written. */
static void test_spec_equality(void **state)
{
	struct coord_spec *a = parse_ok("{\"w\": [\"h:1\", \"h:2\"], \"ps\": {\"3\": \"p:1\"}}");
	struct coord_spec *b = parse_ok("{\"ps\": {\"3\": \"p:1\"}, \"w\": {\"1\": \"h:2\", "
					"\"0\": \"h:1\"}}");
	struct coord_spec *c = parse_ok("{\"w\": [\"h:1\", \"h:3\"], \"ps\": {\"3\": \"p:1\"}}");
	struct coord_spec *d = parse_ok("{\"w\": [\"h:1\", \"h:2\"], \"ps\": {\"4\": \"p:1\"}}");
	struct coord_spec *e = parse_ok("{\"w\": [\"h:1\", \"h:2\"]}");
	struct coord_spec *f = parse_ok("{\"w\": [\"h:1\", \"h:2\"], \"chief\": {\"3\": \"p:1\"}}");

	assert_true(coord_spec_equal(a, b));
	assert_true(coord_spec_equal(b, a));
	assert_true(coord_spec_equal(a, a));
	assert_false(coord_spec_equal(a, c));
	assert_false(coord_spec_equal(a, d));
	assert_false(coord_spec_equal(a, e));
	assert_false(coord_spec_equal(e, a));
	assert_false(coord_spec_equal(a, f));
	assert_false(coord_spec_equal(a, NULL));
	assert_true(coord_spec_equal(NULL, NULL));
	/* A sparse job whose indices are 0..n-1 is written back dense. */
	assert_dict(b, "{\"ps\":{\"3\":\"p:1\"},\"w\":[\"h:1\",\"h:2\"]}");
	coord_spec_destroy(a);
	coord_spec_destroy(b);
	coord_spec_destroy(c);
	coord_spec_destroy(d);
	coord_spec_destroy(e);
	coord_spec_destroy(f);
}

/* S16: an empty spec is false; a job without tasks still counts as a job. */
static void test_spec_empty_is_false(void **state)
{
	struct coord_spec *e = parse_ok("{}");
	struct coord_spec *j = parse_ok("{\"w\": []}");
	struct coord_spec *k = parse_ok("  {\"w\": {}}  ");

	assert_true(coord_spec_empty(e));
	assert_true(coord_spec_empty(NULL));
	assert_int_equal(coord_spec_jobs(e, NULL, 0), 0);
	assert_dict(e, "{}");
	assert_false(coord_spec_empty(j));
	assert_true(coord_spec_has_job(j, "w"));
	assert_int_equal(coord_spec_num_tasks(j, "w"), 0);
	assert_dict(j, "{\"w\":{}}");
	assert_true(coord_spec_equal(j, k));
	assert_false(coord_spec_equal(e, j));
	coord_spec_destroy(e);
	coord_spec_destroy(j);
	coord_spec_destroy(k);
}

/* S16: malformed input is refused with a message naming what is wrong. */
static void test_spec_malformed(void **state)
{
	static const struct {
		const char *json, *msg;
	} cases[] = {
		{ "[\"h:1\"]", "the cluster spec is a list, not an object" },
		{ "\"h:1\"", "not valid JSON" },
		{ "{\"worker\": [\"h:1\"", "not valid JSON" },
		{ "", "not valid JSON" },
		{ "{\"worker\": [\"a:1\", 5]}",
		  "job 'worker': task 1 is an integer, not an address" },
		{ "{\"worker\": [\"a:1\", [\"b:1\"]]}", "task 1 is a list, not an address" },
		{ "{\"worker\": {\"1\": null}}", "job 'worker': task 1 is null" },
		{ "{\"worker\": {\"-1\": \"a:1\"}}", "job 'worker': negative task index \"-1\"" },
		{ "{\"worker\": {\"1\": \"a:1\", \"1\": \"b:1\"}}", "duplicate object key" },
		{ "{\"worker\": {\"1\": \"a:1\", \"01\": \"b:1\"}}",
		  "job 'worker': duplicate task index 1" },
		{ "{\"w\": [], \"w\": []}", "duplicate object key" },
		{ "{\"worker\": {\"x\": \"a:1\"}}", "task index \"x\" is not a decimal integer" },
		{ "{\"worker\": {\"1.5\": \"a:1\"}}", "is not a decimal integer" },
		{ "{\"worker\": {\"\": \"a:1\"}}", "job 'worker': empty task index" },
		{ "{\"worker\": {\"99999999999\": \"a:1\"}}", "is above the limit" },
		{ "{\"worker\": [\"\"]}", "job 'worker' task 0: empty address" },
		{ "{\"worker\": {\"4\": \"\"}}", "job 'worker' task 4: empty address" },
		{ "{\"worker\": [\"host\"]}", "address 'host' has no port" },
		{ "{\"worker\": [\"host:\"]}", "address 'host:' has no port" },
		{ "{\"worker\": [\":80\"]}", "address ':80' has no host" },
		{ "{\"worker\": [\"host:http\"]}", "address 'host:http' has a bad port" },
		{ "{\"worker\": [\"host:123456\"]}", "has a bad port" },
		{ "{\"worker\": [\"host:0\"]}", "port 0 of 'host:0' is not in 1..65535" },
		{ "{\"worker\": [\"host:65536\"]}", "is not in 1..65535" },
		{ "{\"worker\": [\"a b:1\"]}", "holds a blank or control character" },
		{ "{\"worker\": [\"::1:80\"]}", "has several ':'" },
		{ "{\"worker\": [\"[::1]\"]}", "has no port" },
		{ "{\"worker\": [\"[]:80\"]}", "bad [IPv6] host" },
		{ "{\"worker\": 3}", "job 'worker' is an integer; want a list" },
		{ "{\"worker\": \"h:1\"}", "job 'worker' is a string; want a list" },
		{ "{\"\": [\"a:1\"]}", "empty job name" },
		{ "{\"1w\": [\"a:1\"]}", "does not start with a letter" },
		{ "{\"w/x\": [\"a:1\"]}", "holds '/'" },
		{ "{\"a123456789012345678901234567890123456789012345678901234567890123\": []}",
		  "is longer than 63" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct coord_error err = { 0 };
		struct coord_spec *s = NULL;
		int r = coord_spec_parse(cases[i].json, &s, &err);

		if (r != COORD_EINVAL || s || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu %s: r=%d msg '%s', want '%s'", i, cases[i].json, r,
				 err.msg, cases[i].msg);
		assert_int_equal(err.code, COORD_EINVAL);
	}
	assert_int_equal(coord_spec_parse(NULL, &(struct coord_spec *){ NULL }, NULL),
			 COORD_EINVAL);
	assert_int_equal(coord_spec_parse("{}", NULL, NULL), COORD_EINVAL);
}

/* S16: addresses that are accepted (IPv6 literal, inproc, bounds). */
static void test_spec_addresses_accepted(void **state)
{
	struct coord_spec *s = parse_ok("{\"w\": [\"[::1]:80\", \"inproc\", \"10.0.0.1:65535\", "
					"\"h-1.example.com:1\"]}");
	const char *a;

	assert_int_equal(coord_spec_task_address(s, "w", 0, &a, NULL), 0);
	assert_string_equal(a, "[::1]:80");
	assert_int_equal(coord_spec_task_address(s, "w", 1, &a, NULL), 0);
	assert_string_equal(a, "inproc");
	coord_spec_destroy(s);
}

/* S16: as_dict text parses back to an equal spec. */
static void test_spec_as_dict_round_trip(void **state)
{
	static const char *const inputs[] = {
		seed_dense,
		seed_sparse,
		"{}",
		"{\"w\": {}}",
		"{\"a\": {\"5\": \"x:1\", \"0\": \"y:2\"}, \"b\": [\"z:3\"]}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(inputs); i++) {
		struct coord_spec *s = parse_ok(inputs[i]), *t;
		char *json = NULL;

		assert_int_equal(coord_spec_as_dict(s, &json, NULL), 0);
		t = parse_ok(json);
		assert_true(coord_spec_equal(s, t));
		free(json);
		coord_spec_destroy(s);
		coord_spec_destroy(t);
	}
}

/* S16: the in-process spec the core uses. */
static void test_spec_local(void **state)
{
	struct coord_spec *s = NULL, *t;
	const char *a;
	char *json;

	assert_int_equal(coord_spec_local(3, 2, &s), 0);
	assert_int_equal(coord_spec_num_tasks(s, "worker"), 3);
	assert_int_equal(coord_spec_num_tasks(s, "ps"), 2);
	assert_int_equal(coord_spec_task_address(s, "worker", 2, &a, NULL), 0);
	assert_string_equal(a, "inproc");
	assert_int_equal(coord_spec_task_address(s, "worker", 3, &a, NULL), COORD_EINVAL);
	assert_int_equal(coord_spec_as_dict(s, &json, NULL), 0);
	assert_string_equal(json, "{\"ps\":[\"inproc\",\"inproc\"],"
				  "\"worker\":[\"inproc\",\"inproc\",\"inproc\"]}");
	t = parse_ok(json);
	assert_true(coord_spec_equal(s, t));
	free(json);
	coord_spec_destroy(t);
	coord_spec_destroy(s);
	assert_int_equal(coord_spec_local(2, 0, &s), 0);
	assert_false(coord_spec_has_job(s, "ps"));
	assert_int_equal(coord_spec_num_tasks(s, "ps"), 0);
	assert_false(coord_spec_empty(s));
	coord_spec_destroy(s);
	assert_int_equal(coord_spec_local(0, 1, &s), COORD_EINVAL);
	assert_int_equal(coord_spec_local(COORD_SPEC_MAX_INDEX + 2u, 0, &s), COORD_EINVAL);
	coord_spec_destroy(NULL);
}

static const char tf_config[] =
	"{\"cluster\": {\"worker\": [\"host1:2222\", \"host2:2222\", \"host3:2222\"],"
	"              \"ps\": [\"host4:2222\", \"host5:2222\"]},"
	" \"task\": {\"type\": \"worker\", \"index\": 1},"
	" \"rpc_layer\": \"grpc\", \"environment\": \"cloud\"}";

/* TF_CONFIG: the cluster and this process's task. */
static void test_spec_tf_config(void **state)
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
static void test_spec_tf_config_malformed(void **state)
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
static void test_spec_resolve_tf_config(void **state)
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
static void test_spec_hostlist(void **state)
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
static void test_spec_hostlist_malformed(void **state)
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
static void test_spec_slurm_tasks_per_node(void **state)
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
static void test_spec_slurm_default(void **state)
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
static void test_spec_slurm_jobs(void **state)
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
static void test_spec_slurm_malformed(void **state)
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
static void test_spec_from_arg(void **state)
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

/* S16: ClusterDef bytes round trip, and a spec without jobs is zero bytes. */
static void test_spec_cluster_def_round_trip(void **state)
{
	static const char *const inputs[] = { seed_dense, seed_sparse, "{}", "{\"w\": []}" };

	for (size_t i = 0; i < ARRAY_SIZE(inputs); i++) {
		struct coord_spec *s = parse_ok(inputs[i]), *t = NULL;
		uint8_t *buf = NULL;
		size_t len = 99;

		assert_int_equal(coord_spec_as_cluster_def(s, &buf, &len, NULL), 0);
		assert_non_null(buf);
		if (i == 2)
			assert_int_equal(len, 0);
		assert_int_equal(coord_spec_from_cluster_def(buf, len, &t, NULL), 0);
		assert_true(coord_spec_equal(s, t));
		free(buf);
		coord_spec_destroy(s);
		coord_spec_destroy(t);
	}
}

/* S16: ClusterDef bytes that break the rules are refused. */
static void test_spec_cluster_def_malformed(void **state)
{
	/* Hand-made wire bytes: JobDef{name, tasks{key, value}}. */
	static const uint8_t dup_job[] = {
		0x0a, 0x03, 0x0a, 0x01, 'w', 0x0a, 0x03, 0x0a, 0x01, 'w'
	};
	static const uint8_t neg_key[] = { 0x0a, 0x15, 0x0a, 0x01, 'w',	 0x12, 0x10, 0x08,
					   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					   0xff, 0x01, 0x12, 0x03, 'h',	 ':',  '1' };
	static const uint8_t dup_key[] = { 0x0a, 0x15, 0x0a, 0x01, 'w', 0x12, 0x07, 0x08,
					   0x01, 0x12, 0x03, 'h',  ':', '1',  0x12, 0x07,
					   0x08, 0x01, 0x12, 0x03, 'h', ':',  '2' };
	static const uint8_t empty_addr[] = { 0x0a, 0x07, 0x0a, 0x01, 'w', 0x12, 0x02, 0x08, 0x01 };
	static const uint8_t no_name[] = { 0x0a, 0x00 };
	static const uint8_t truncated[] = { 0x0a, 0x09, 0x0a, 0x01 };
	static const uint8_t garbage[] = { 0xff, 0xff, 0xff };
	static const struct {
		const uint8_t *b;
		size_t n;
		const char *msg;
	} cases[] = {
		{ dup_job, sizeof(dup_job), "duplicate job 'w'" },
		{ neg_key, sizeof(neg_key), "job 'w': negative task index -1" },
		{ dup_key, sizeof(dup_key), "job 'w': duplicate task index 1" },
		{ empty_addr, sizeof(empty_addr), "job 'w' task 1: empty address" },
		{ no_name, sizeof(no_name), "empty job name" },
		{ truncated, sizeof(truncated), "are not a tensorflow.ClusterDef" },
		{ garbage, sizeof(garbage), "are not a tensorflow.ClusterDef" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct coord_error err = { 0 };
		struct coord_spec *s = NULL;
		int r = coord_spec_from_cluster_def(cases[i].b, cases[i].n, &s, &err);

		if (r != COORD_EINVAL || s || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu: r=%d msg '%s', want '%s'", i, r, err.msg, cases[i].msg);
	}
	/* Zero bytes are the empty cluster. */
	{
		struct coord_spec *s = NULL;

		assert_int_equal(coord_spec_from_cluster_def(NULL, 0, &s, NULL), 0);
		assert_true(coord_spec_empty(s));
		coord_spec_destroy(s);
	}
}

/* Run protoc with @args, stdin from @in, stdout to @out; 0 if it exited 0. */
static int run_protoc(const char *args, const char *in, const char *out)
{
	char cmd[2048];
	int r;

	snprintf(cmd, sizeof(cmd), "'%s' %s --proto_path='%s' cluster.proto < '%s' > '%s'",
		 SPEC_PROTOC, args, SPEC_PROTO_DIR, in, out);
	r = system(cmd);
	return r == 0 ? 0 : -1;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = calloc(1, 65536);
	size_t n;

	assert_non_null(f);
	assert_non_null(buf);
	n = fread(buf, 1, 65535, f);
	fclose(f);
	if (len)
		*len = n;
	return buf;
}

static void spit(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
}

struct tmp2 {
	char in[64], out[64];
};

static int protoc_setup(void **state)
{
	struct tmp2 *t = calloc(1, sizeof(*t));
	int a, b;

	if (!t)
		return -1;
	if (!SPEC_PROTOC[0]) {
		*state = t;
		return 0;
	}
	strcpy(t->in, "/tmp/coord_spec_in_XXXXXX");
	strcpy(t->out, "/tmp/coord_spec_out_XXXXXX");
	a = mkstemp(t->in);
	b = mkstemp(t->out);
	if (a < 0 || b < 0)
		return -1;
	close(a);
	close(b);
	*state = t;
	return 0;
}

static int protoc_teardown(void **state)
{
	struct tmp2 *t = *state;

	if (t->in[0])
		unlink(t->in);
	if (t->out[0])
		unlink(t->out);
	free(t);
	return 0;
}

/* S16: our ClusterDef bytes, as Debian's protoc decodes them. */
static void test_spec_protoc_decode(void **state)
{
	struct tmp2 *t = *state;
	struct coord_spec *s;
	uint8_t *buf = NULL;
	size_t len;
	char *text;

	if (!SPEC_PROTOC[0])
		skip();
	s = parse_ok(seed_sparse);
	assert_int_equal(coord_spec_as_cluster_def(s, &buf, &len, NULL), 0);
	spit(t->in, buf, len);
	assert_int_equal(run_protoc("--decode=tensorflow.ClusterDef", t->in, t->out), 0);
	text = slurp(t->out, NULL);
	assert_string_equal(text, "job {\n"
				  "  name: \"ps\"\n"
				  "  tasks {\n"
				  "    key: 0\n"
				  "    value: \"ps0.example.com:2222\"\n"
				  "  }\n"
				  "  tasks {\n"
				  "    key: 1\n"
				  "    value: \"ps1.example.com:2222\"\n"
				  "  }\n"
				  "}\n"
				  "job {\n"
				  "  name: \"worker\"\n"
				  "  tasks {\n"
				  "    key: 1\n"
				  "    value: \"worker1.example.com:2222\"\n"
				  "  }\n"
				  "}\n");
	free(text);
	free(buf);
	coord_spec_destroy(s);
}

/* S16: bytes that protoc --encode produced parse to the spec they describe. */
static void test_spec_protoc_encode(void **state)
{
	static const char src[] =
		"job { name: \"worker\" tasks { key: 0 value: \"worker0.example.com:2222\" }\n"
		"      tasks { key: 2 value: \"worker2.example.com:2222\" }\n"
		"      tasks { key: 1 value: \"worker1.example.com:2222\" } }\n"
		"job { name: \"ps\" tasks { key: 0 value: \"ps0.example.com:2222\" }\n"
		"      tasks { key: 1 value: \"ps1.example.com:2222\" } }\n";
	struct tmp2 *t = *state;
	struct coord_spec *s = NULL, *want;
	uint8_t *ours = NULL;
	size_t len, olen;
	char *bytes, *text;

	if (!SPEC_PROTOC[0])
		skip();
	spit(t->in, src, strlen(src));
	assert_int_equal(run_protoc("--encode=tensorflow.ClusterDef", t->in, t->out), 0);
	bytes = slurp(t->out, &len);
	assert_int_equal(coord_spec_from_cluster_def(bytes, len, &s, NULL), 0);
	want = parse_ok(seed_dense);
	assert_true(coord_spec_equal(s, want));
	free(bytes);
	/* Ours decode to what protoc decodes its own canonical bytes to. */
	assert_int_equal(coord_spec_as_cluster_def(s, &ours, &olen, NULL), 0);
	spit(t->in, ours, olen);
	assert_int_equal(run_protoc("--decode=tensorflow.ClusterDef", t->in, t->out), 0);
	text = slurp(t->out, NULL);
	assert_non_null(strstr(text, "name: \"ps\""));
	assert_non_null(strstr(text, "key: 2\n    value: \"worker2.example.com:2222\""));
	/* ps before worker: jobs sorted by name. */
	assert_true(strstr(text, "\"ps\"") < strstr(text, "\"worker\""));
	free(text);
	free(ours);
	coord_spec_destroy(s);
	coord_spec_destroy(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_seed_dense),
		cmocka_unit_test(test_spec_seed_sparse),
		cmocka_unit_test(test_spec_absent_job_and_index),
		cmocka_unit_test(test_spec_sparse_order_and_gaps),
		cmocka_unit_test(test_spec_equality),
		cmocka_unit_test(test_spec_empty_is_false),
		cmocka_unit_test(test_spec_malformed),
		cmocka_unit_test(test_spec_addresses_accepted),
		cmocka_unit_test(test_spec_as_dict_round_trip),
		cmocka_unit_test(test_spec_local),
		cmocka_unit_test(test_spec_tf_config),
		cmocka_unit_test(test_spec_tf_config_malformed),
		cmocka_unit_test(test_spec_resolve_tf_config),
		cmocka_unit_test(test_spec_hostlist),
		cmocka_unit_test(test_spec_hostlist_malformed),
		cmocka_unit_test(test_spec_slurm_tasks_per_node),
		cmocka_unit_test(test_spec_slurm_default),
		cmocka_unit_test(test_spec_slurm_jobs),
		cmocka_unit_test(test_spec_slurm_malformed),
		cmocka_unit_test(test_spec_from_arg),
		cmocka_unit_test(test_spec_cluster_def_round_trip),
		cmocka_unit_test(test_spec_cluster_def_malformed),
	};
	const struct CMUnitTest protoc_tests[] = {
		cmocka_unit_test_setup_teardown(test_spec_protoc_decode, protoc_setup,
						protoc_teardown),
		cmocka_unit_test_setup_teardown(test_spec_protoc_encode, protoc_setup,
						protoc_teardown),
	};
	int r;

	t_watchdog(50);
	r = cmocka_run_group_tests_name("spec", tests, NULL, NULL);
	r |= cmocka_run_group_tests_name("spec_protoc", protoc_tests, NULL, NULL);
	if (r)
		return 1;
	if (!SPEC_PROTOC[0]) {
		printf("SKIP: protoc not found at configure time (apt-get install "
		       "protobuf-compiler); the ClusterDef checks against protoc did not run\n");
		return T_EXIT_SKIP;
	}
	return 0;
}
