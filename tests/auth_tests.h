/* SPDX-License-Identifier: MIT */
/*
 * tests/auth_tests.h - what the parts of the test_auth executable share:
 * key files, stderr capture and handshake sides in threads (test_auth.c, with
 * main() and the test table) and the tests of each part.
 */
#ifndef COORD_TESTS_AUTH_TESTS_H
#define COORD_TESTS_AUTH_TESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/types.h>

#include "transport/wire/auth.h"
#include "helpers.h"

/* The test's directory of key files (group_setup()). */
extern char tmpdir[64];

/* Short enough to keep the stall cases quick, long enough for a loaded CI
 * machine (sanitizers) to finish an honest exchange. */
#define T_TIMEOUT_MS 300
#define T_SLOW_MS 5000

/* One side of a handshake in a thread. */
struct side {
	pthread_t thread;
	int fd;
	bool server;
	const struct coord_key *key;
	int timeout_ms;
	int ret;
	uint64_t elapsed_ns;
	struct coord_error err;
};

/* Helpers the parts share. */
void clear_env(void);
const char *key_file(const char *name, const void *data, size_t len, mode_t mode);
void hex_of(const uint8_t *b, size_t n, char *out);
void unhex(const char *s, uint8_t *out);
void make_key(struct coord_key *k, size_t len, uint8_t seed);
void capture_begin(void);
void capture_end(char *buf, size_t size);
void side_start(struct side *s, int fd, bool server, const struct coord_key *key, int timeout_ms);
void side_join(struct side *s);
void pair(int sv[2]);
void peer_read(int fd, void *buf, size_t len);
void peer_write(int fd, const void *buf, size_t len);

/* auth_keys.c */
void test_auth_key_file_hex(void **state);
void test_auth_key_file_raw(void **state);
void test_auth_key_env(void **state);
void test_auth_key_none(void **state);
void test_auth_key_file_too_open(void **state);
void test_auth_key_too_short(void **state);
void test_auth_key_too_long(void **state);
void test_auth_key_bad_hex(void **state);
void test_auth_key_file_errors(void **state);
void test_auth_hmac_rfc4231(void **state);
void test_auth_mac_vector(void **state);
void test_auth_verify_rejects(void **state);

/* auth_handshake.c */
void test_auth_bind_without_key(void **state);
void test_auth_bind_with_key(void **state);
void test_auth_handshake_ok(void **state);
void test_auth_handshake_tcp(void **state);
void test_auth_handshake_wrong_key(void **state);
void test_auth_handshake_wire_layout(void **state);
void test_auth_handshake_bad_client(void **state);
void test_auth_handshake_bad_server(void **state);
void test_auth_handshake_stall(void **state);
void test_auth_handshake_short_read(void **state);
void test_auth_handshake_bad_args(void **state);

#endif
