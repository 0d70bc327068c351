// SPDX-License-Identifier: MIT
/*
 * tests/test_rdma_provider.c - libcoord.so where the rdma provider cannot
 * be used (transport/rdma_provider.h RP1-RP3), as a program linked with
 * libcoord.so alone sees it:
 *   test_rdma_provider missing   COORD_RDMA_PROVIDER names no file
 *   test_rdma_provider mismatch  it names a provider of another build
 *                                (tests/fake_rdma_provider.c)
 * Either way coord_create(transport "rdma") and coord_worker_serve(transport
 * "rdma") fail with an error that names the file and why (dlerror(), or
 * the versions), the same error every time; inproc and tcp still run; and
 * libibverbs never enters the process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/coord.h>

static const char *mode;

static int square(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x;

	if (len != sizeof(x))
		return coord_ctx_fail(ctx, COORD_EINVAL, "square wants one int64");
	memcpy(&x, args, sizeof(x));
	x *= x;
	return coord_ctx_set_result(ctx, &x, sizeof(x));
}

static struct coord_registry *registry(void)
{
	struct coord_registry *reg;

	assert_int_equal(coord_registry_create(&reg), 0);
	assert_int_equal(coord_registry_add(reg, "square", square), 0);
	return reg;
}

/* The error says what the mode broke: the file, and dlerror()'s or the
 * loader's reason. */
static void assert_says_why(const struct coord_error *err)
{
	const char *path = getenv("COORD_RDMA_PROVIDER");

	assert_non_null(path);
	assert_int_equal(err->code, -ENODEV);
	if (!strstr(err->msg, path) ||
	    !strstr(err->msg, strcmp(mode, "missing") ? "refusing" : "No such file") ||
	    (!strcmp(mode, "mismatch") && !strstr(err->msg, "of coord 0.0.0-other")))
		fail_msg("the error does not say what is wrong: %s", err->msg);
}

/* square(7) on @c. */
static void run_square(struct coord *c)
{
	struct coord_error err;
	struct coord_rv *rv;
	const void *v;
	int64_t x = 7, y;
	uint32_t fn;

	assert_int_equal(coord_fn_lookup(c, "square", &fn, &err), 0);
	assert_int_equal(coord_schedule(c, fn, &x, sizeof(x), &rv, &err), 0);
	if (coord_rv_fetch(rv, &v, NULL, &err))
		fail_msg("square(7): %s", err.msg);
	memcpy(&y, v, sizeof(y));
	assert_int_equal(y, 49);
	coord_rv_put(rv);
}

/* No rdma-core library was mapped into this process (RP3). */
static void assert_no_verbs(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libibverbs") || strstr(line, "librdmacm"))
			fail_msg("rdma-core is mapped: %s", line);
	fclose(f);
}

static void test_rdma_fails_clearly(void **state)
{
	struct coord_registry *reg = registry();
	struct coord_spec *spec;
	struct coord_opts opts;
	struct coord_error err, again;
	struct coord *c = NULL;

	(void)state;
	assert_int_equal(coord_spec_parse("{\"worker\": [\"127.0.0.1:1\"]}", &spec, NULL), 0);
	coord_opts_init(&opts);
	opts.registry = reg;
	opts.transport = "rdma";
	assert_int_equal(coord_create(spec, &opts, &c, &err), -ENODEV);
	assert_null(c);
	assert_says_why(&err);
	/* RP2: the same answer the second time, without trying again */
	assert_int_equal(coord_create(spec, &opts, &c, &again), -ENODEV);
	assert_string_equal(again.msg, err.msg);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	assert_no_verbs();
}

static void test_rdma_server_fails_clearly(void **state)
{
	struct coord_registry *reg = registry();
	struct coord_server_opts so;
	struct coord_error err;

	(void)state;
	coord_server_opts_init(&so);
	so.registry = reg;
	so.listen = "127.0.0.1:0";
	so.transport = "rdma";
	assert_int_equal(coord_worker_serve(&so, &err), -ENODEV);
	assert_says_why(&err);
	coord_registry_destroy(reg);
	assert_no_verbs();
}

static void test_inproc_runs(void **state)
{
	struct coord_registry *reg = registry();
	struct coord_opts opts;
	struct coord_error err;
	struct coord *c;

	(void)state;
	coord_opts_init(&opts);
	opts.registry = reg;
	opts.inproc_workers = 2;
	if (coord_create(NULL, &opts, &c, &err))
		fail_msg("inproc: %s", err.msg);
	run_square(c);
	coord_destroy(c);
	coord_registry_destroy(reg);
	assert_no_verbs();
}

/* A worker served over tcp in this process, stopped through a pipe. */
struct server {
	struct coord_registry *reg;
	pthread_t thread;
	int stop[2];
	_Atomic unsigned port;
	int rc;
	struct coord_error err;
};

static void on_listen(unsigned port, void *arg)
{
	struct server *s = arg;

	/* release: the test thread's acquire load waits for it; nothing else */
	atomic_store_explicit(&s->port, port, memory_order_release);
}

static void *serve(void *arg)
{
	struct server *s = arg;
	struct coord_server_opts so;

	coord_server_opts_init(&so);
	so.registry = s->reg;
	so.listen = "127.0.0.1:0";
	so.stop_fd = s->stop[0];
	so.on_listen = on_listen;
	so.arg = s;
	s->rc = coord_worker_serve(&so, &s->err);
	if (s->rc) /* wake the waiting test thread */
		atomic_store_explicit(&s->port, 1,
				      memory_order_release); /* release: as on_listen */
	return NULL;
}

static void test_tcp_runs(void **state)
{
	struct server s = { .reg = registry() };
	struct coord_spec *spec;
	struct coord_opts opts;
	struct coord_error err;
	struct coord *c;
	char json[64];
	unsigned port = 0;

	(void)state;
	assert_int_equal(pipe(s.stop), 0);
	assert_int_equal(pthread_create(&s.thread, NULL, serve, &s), 0);
	/* bounded: 30 s for the server to listen */
	for (int i = 0; i < 3000 && !port; i++) {
		/* acquire: pairs with on_listen's release */
		port = atomic_load_explicit(&s.port, memory_order_acquire);
		if (!port)
			usleep(10000);
	}
	if (!port || s.rc)
		fail_msg("the tcp worker did not listen: %s", s.err.msg);
	snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"]}", port);
	assert_int_equal(coord_spec_parse(json, &spec, NULL), 0);
	coord_opts_init(&opts);
	opts.registry = s.reg;
	opts.transport = "tcp";
	if (coord_create(spec, &opts, &c, &err))
		fail_msg("tcp: %s", err.msg);
	run_square(c);
	coord_destroy(c);
	coord_spec_destroy(spec);
	assert_int_equal(write(s.stop[1], "x", 1), 1);
	assert_int_equal(pthread_join(s.thread, NULL), 0);
	assert_int_equal(s.rc, 0);
	close(s.stop[0]);
	close(s.stop[1]);
	coord_registry_destroy(s.reg);
	assert_no_verbs();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_fails_clearly),
		cmocka_unit_test(test_rdma_server_fails_clearly),
		cmocka_unit_test(test_inproc_runs),
		cmocka_unit_test(test_tcp_runs),
	};

	if (argc != 2 || (strcmp(argv[1], "missing") && strcmp(argv[1], "mismatch"))) {
		fprintf(stderr, "usage: %s missing|mismatch (with COORD_RDMA_PROVIDER set)\n",
			argv[0]);
		return 2;
	}
	mode = argv[1];
	return cmocka_run_group_tests_name(mode, tests, NULL, NULL);
}
