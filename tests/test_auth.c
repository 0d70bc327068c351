// SPDX-License-Identifier: MIT
/*
 * tests/test_auth.c - cluster-key authentication (B5): key loading and its
 * refusals, HMAC vectors, the listen policy, and the handshake over real
 * sockets (socketpair and loopback TCP), with honest peers on both sides and
 * hand-written dishonest ones: wrong key, reflected proof, garbage, half a
 * nonce then a stall or a close.
 *
 * Every blocking step is bounded: handshakes by their timeout, the binary by
 * t_watchdog().  Log lines are captured from stderr to check that refusals
 * are logged.
 *
 * This file: main(), the test table and the fixtures; the tests are in
 * auth_keys.c and auth_handshake.c, linked into the same executable
 * (auth_tests.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/wire/auth.h"
#include "helpers.h"
#include "auth_tests.h"

char tmpdir[64];

/* ---------------------------------------------------------------- helpers */

void clear_env(void)
{
	unsetenv(COORD_KEY_FILE_ENV);
	unsetenv(COORD_KEY_ENV);
}

/* Write @len bytes to @name in tmpdir with @mode; returns the path (static). */
const char *key_file(const char *name, const void *data, size_t len, mode_t mode)
{
	static char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	return path;
}

void hex_of(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

void unhex(const char *s, uint8_t *out)
{
	for (size_t i = 0; s[2 * i]; i++) {
		unsigned v;

		assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* A key of @len bytes, byte i = @seed + i. */
void make_key(struct coord_key *k, size_t len, uint8_t seed)
{
	memset(k, 0, sizeof(*k));
	for (size_t i = 0; i < len; i++)
		k->bytes[i] = (uint8_t)(seed + i);
	k->len = len;
	k->set = true;
}

/* stderr capture, to check what is logged. */
static int saved_stderr = -1;
static FILE *cap;

void capture_begin(void)
{
	cap = tmpfile();
	assert_non_null(cap);
	fflush(stderr);
	saved_stderr = dup(2);
	assert_true(saved_stderr >= 0);
	assert_true(dup2(fileno(cap), 2) >= 0);
}

/* Stop capturing; the captured text in @buf. */
void capture_end(char *buf, size_t size)
{
	size_t n;

	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	rewind(cap);
	n = fread(buf, 1, size - 1, cap);
	buf[n] = 0;
	fclose(cap);
	/* Show it in the test log too. */
	fputs(buf, stderr);
}

static void *side_main(void *arg)
{
	struct side *s = arg;
	uint64_t t0 = t_now_ns();

	s->ret = s->server ? coord_auth_handshake_server(s->fd, s->key, s->timeout_ms, &s->err)
			   : coord_auth_handshake_client(s->fd, s->key, s->timeout_ms, &s->err);
	s->elapsed_ns = t_now_ns() - t0;
	return NULL;
}

void side_start(struct side *s, int fd, bool server, const struct coord_key *key, int timeout_ms)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->server = server;
	s->key = key;
	s->timeout_ms = timeout_ms;
	s->ret = 1;
	assert_int_equal(pthread_create(&s->thread, NULL, side_main, s), 0);
}

void side_join(struct side *s)
{
	assert_int_equal(pthread_join(s->thread, NULL), 0);
}

void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* Blocking exact read/write for the hand-written peers (bounded by SO_RCVTIMEO). */
void peer_read(int fd, void *buf, size_t len)
{
	struct timeval tv = { .tv_sec = 5 };
	size_t got = 0;

	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	while (got < len) {
		ssize_t r = read(fd, (uint8_t *)buf + got, len - got);

		assert_true(r > 0);
		got += (size_t)r;
	}
}

void peer_write(int fd, const void *buf, size_t len)
{
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

static int group_setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/coord-auth-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	static const char *const names[] = { "hex",  "raw",   "envfile", "explicit",
					     "open", "short", "long",	 "bad" };
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	return rmdir(tmpdir);
}

int main(void)
{
	const char *lvl = getenv("COORD_LOG");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auth_key_file_hex),
		cmocka_unit_test(test_auth_key_file_raw),
		cmocka_unit_test(test_auth_key_env),
		cmocka_unit_test(test_auth_key_none),
		cmocka_unit_test(test_auth_key_file_too_open),
		cmocka_unit_test(test_auth_key_too_short),
		cmocka_unit_test(test_auth_key_too_long),
		cmocka_unit_test(test_auth_key_bad_hex),
		cmocka_unit_test(test_auth_key_file_errors),
		cmocka_unit_test(test_auth_hmac_rfc4231),
		cmocka_unit_test(test_auth_mac_vector),
		cmocka_unit_test(test_auth_verify_rejects),
		cmocka_unit_test(test_auth_bind_without_key),
		cmocka_unit_test(test_auth_bind_with_key),
		cmocka_unit_test(test_auth_handshake_ok),
		cmocka_unit_test(test_auth_handshake_tcp),
		cmocka_unit_test(test_auth_handshake_wrong_key),
		cmocka_unit_test(test_auth_handshake_wire_layout),
		cmocka_unit_test(test_auth_handshake_bad_client),
		cmocka_unit_test(test_auth_handshake_bad_server),
		cmocka_unit_test(test_auth_handshake_stall),
		cmocka_unit_test(test_auth_handshake_short_read),
		cmocka_unit_test(test_auth_handshake_bad_args),
	};

	/* Refusals are logged at warn level; the checks above read them, so
	 * raise meson's COORD_LOG=error (read once, on the first log line). */
	if (!lvl || (strcmp(lvl, "info") && strcmp(lvl, "debug")))
		setenv("COORD_LOG", "warn", 1);
	t_watchdog(50);
	return cmocka_run_group_tests_name("auth", tests, group_setup, group_teardown);
}
