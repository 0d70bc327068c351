// SPDX-License-Identifier: MIT
/*
 * tests/test_spec.c - ClusterSpec (S16): the seed's rules and examples, the
 * JSON reader's refusals, TF_CONFIG, Slurm host lists and the Slurm resolver,
 * --spec, and ClusterDef bytes checked against Debian's protoc.
 *
 * The protoc cases need `protoc` (found by meson, spec_test_config.h); when
 * it is missing they are skipped and, the rest having passed, the binary
 * exits 77 saying why.
 *
 * This file: main(), the test table, the fixtures and the ClusterSpec rules'
 * tests; the resolvers' tests are in spec_resolvers.c, ClusterDef's in
 * spec_cluster_def.c, linked into the same executable (spec_tests.h).
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

/* The seed's two examples, as JSON (the sparse key becomes a string). */
const char seed_dense[] = "{\"worker\": [\"worker0.example.com:2222\",\n"
			  "              \"worker1.example.com:2222\",\n"
			  "              \"worker2.example.com:2222\"],\n"
			  " \"ps\": [\"ps0.example.com:2222\",\n"
			  "          \"ps1.example.com:2222\"]}";
const char seed_sparse[] = "{\"worker\": {\"1\": \"worker1.example.com:2222\"},\n"
			   " \"ps\": [\"ps0.example.com:2222\",\n"
			   "          \"ps1.example.com:2222\"]}";

struct coord_spec *parse_ok(const char *json)
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
