// SPDX-License-Identifier: MIT
/*
 * tests/spec_cluster_def.c - part of test_spec: tensorflow.ClusterDef bytes
 * (round trip, malformed bytes refused) and against Debian's protoc (decode
 * our bytes, parse its encoding).
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

/* S16: ClusterDef bytes round trip, and a spec without jobs is zero bytes. */
void test_spec_cluster_def_round_trip(void **state)
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
void test_spec_cluster_def_malformed(void **state)
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

int protoc_setup(void **state)
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

int protoc_teardown(void **state)
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
void test_spec_protoc_decode(void **state)
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
void test_spec_protoc_encode(void **state)
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
