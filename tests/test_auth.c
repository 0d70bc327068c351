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

#include "transport/auth.h"
#include "helpers.h"

/* Short enough to keep the stall cases quick, long enough for a loaded CI
 * machine (sanitizers) to finish an honest exchange. */
#define T_TIMEOUT_MS 300
#define T_SLOW_MS 5000

static char tmpdir[64];

/* ---------------------------------------------------------------- helpers */

static void clear_env(void)
{
	unsetenv(COORD_KEY_FILE_ENV);
	unsetenv(COORD_KEY_ENV);
}

/* Write @len bytes to @name in tmpdir with @mode; returns the path (static). */
static const char *key_file(const char *name, const void *data, size_t len, mode_t mode)
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

static void hex_of(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void unhex(const char *s, uint8_t *out)
{
	for (size_t i = 0; s[2 * i]; i++) {
		unsigned v;

		assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* A key of @len bytes, byte i = @seed + i. */
static void make_key(struct coord_key *k, size_t len, uint8_t seed)
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

static void capture_begin(void)
{
	cap = tmpfile();
	assert_non_null(cap);
	fflush(stderr);
	saved_stderr = dup(2);
	assert_true(saved_stderr >= 0);
	assert_true(dup2(fileno(cap), 2) >= 0);
}

/* Stop capturing; the captured text in @buf. */
static void capture_end(char *buf, size_t size)
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

static void *side_main(void *arg)
{
	struct side *s = arg;
	uint64_t t0 = t_now_ns();

	s->ret = s->server ? coord_auth_handshake_server(s->fd, s->key, s->timeout_ms, &s->err)
			   : coord_auth_handshake_client(s->fd, s->key, s->timeout_ms, &s->err);
	s->elapsed_ns = t_now_ns() - t0;
	return NULL;
}

static void side_start(struct side *s, int fd, bool server, const struct coord_key *key,
		       int timeout_ms)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->server = server;
	s->key = key;
	s->timeout_ms = timeout_ms;
	s->ret = 1;
	assert_int_equal(pthread_create(&s->thread, NULL, side_main, s), 0);
}

static void side_join(struct side *s)
{
	assert_int_equal(pthread_join(s->thread, NULL), 0);
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* Blocking exact read/write for the hand-written peers (bounded by SO_RCVTIMEO). */
static void peer_read(int fd, void *buf, size_t len)
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

static void peer_write(int fd, const void *buf, size_t len)
{
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

/* ------------------------------------------------------------ key loading */

/* B5: a mode-600 file holding hex text and a newline. */
static void test_auth_key_file_hex(void **state)
{
	uint8_t want[32];
	char hex[160];
	struct coord_key k;
	struct coord_error err = { 0 };
	const char *p;

	clear_env();
	for (int i = 0; i < 32; i++)
		want[i] = (uint8_t)(0xa0 + i);
	hex_of(want, 32, hex);
	strcat(hex, "\n");
	p = key_file("hex", hex, strlen(hex), 0600);
	assert_int_equal(coord_key_load(p, &k, &err), 0);
	assert_true(k.set);
	assert_int_equal(k.len, 32);
	assert_memory_equal(k.bytes, want, 32);

	/* Upper case, CRLF, and the 16- and 64-byte limits. */
	p = key_file("hex", "000102030405060708090A0B0C0D0E0F\r\n", 34, 0400);
	assert_int_equal(coord_key_load(p, &k, &err), 0);
	assert_int_equal(k.len, 16);
	assert_int_equal(k.bytes[15], 0x0f);
	memset(hex, 'e', 128);
	p = key_file("hex", hex, 128, 0600);
	assert_int_equal(coord_key_load(p, &k, &err), 0);
	assert_int_equal(k.len, 64);
	assert_int_equal(k.bytes[63], 0xee);
	coord_key_wipe(&k);
	assert_false(k.set);
	assert_int_equal(k.len, 0);
	assert_int_equal(k.bytes[0], 0);
}

/* B5: a file of raw bytes is the key as is, newline bytes included. */
static void test_auth_key_file_raw(void **state)
{
	uint8_t raw[33];
	struct coord_key k;
	struct coord_error err = { 0 };
	const char *p;

	clear_env();
	for (int i = 0; i < 33; i++)
		raw[i] = (uint8_t)(i * 37 + 1);
	raw[3] = 0;
	raw[32] = '\n';
	p = key_file("raw", raw, 33, 0600);
	assert_int_equal(coord_key_load(p, &k, &err), 0);
	assert_int_equal(k.len, 33);
	assert_memory_equal(k.bytes, raw, 33);
	coord_key_wipe(&k);
}

/* B5: $COORD_CLUSTER_KEY (hex), $COORD_CLUSTER_KEY_FILE, and who wins. */
static void test_auth_key_env(void **state)
{
	uint8_t a[32], b[20];
	char hex[80];
	struct coord_key k;
	struct coord_error err = { 0 };
	const char *p;

	clear_env();
	for (int i = 0; i < 32; i++)
		a[i] = (uint8_t)(255 - i);
	hex_of(a, 32, hex);
	setenv(COORD_KEY_ENV, hex, 1);
	assert_int_equal(coord_key_load(NULL, &k, &err), 0);
	assert_true(k.set);
	assert_int_equal(k.len, 32);
	assert_memory_equal(k.bytes, a, 32);

	/* The key file variable wins over the key variable ... */
	memset(b, 0x5c, sizeof(b));
	b[0] = 0;
	p = key_file("envfile", b, sizeof(b), 0600);
	setenv(COORD_KEY_FILE_ENV, p, 1);
	assert_int_equal(coord_key_load(NULL, &k, &err), 0);
	assert_int_equal(k.len, 20);
	assert_memory_equal(k.bytes, b, 20);

	/* ... and an explicit file wins over both. */
	p = key_file("explicit", "0123456789abcdef0123456789abcdef", 32, 0600);
	assert_int_equal(coord_key_load(p, &k, &err), 0);
	assert_int_equal(k.len, 16);
	assert_int_equal(k.bytes[0], 0x01);

	/* An empty variable counts as unset. */
	setenv(COORD_KEY_FILE_ENV, "", 1);
	assert_int_equal(coord_key_load(NULL, &k, &err), 0);
	assert_int_equal(k.len, 32);
	clear_env();
	coord_key_wipe(&k);
}

/* B5: no key configured is not an error; it leaves key->set false. */
static void test_auth_key_none(void **state)
{
	struct coord_key k;
	struct coord_error err = { 0 };

	clear_env();
	memset(&k, 0xff, sizeof(k));
	assert_int_equal(coord_key_load(NULL, &k, &err), 0);
	assert_false(k.set);
	assert_int_equal(k.len, 0);
	setenv(COORD_KEY_ENV, "", 1);
	assert_int_equal(coord_key_load(NULL, &k, &err), 0);
	assert_false(k.set);
	clear_env();
}

/* Load must fail with @code, leave the key unset, and say @needle. */
static void load_fails(const char *file, int code, const char *needle)
{
	struct coord_key k;
	struct coord_error err = { 0 };

	memset(&k, 0x77, sizeof(k));
	assert_int_equal(coord_key_load(file, &k, &err), code);
	assert_int_equal(err.code, code);
	assert_false(k.set);
	assert_int_equal(k.bytes[0], 0); /* wiped, not half-loaded */
	if (!strstr(err.msg, needle))
		fail_msg("message \"%s\" does not say \"%s\"", err.msg, needle);
}

/* B5: a key file group or others can access is refused, like ssh does. */
static void test_auth_key_file_too_open(void **state)
{
	static const char hex[] = "00112233445566778899aabbccddeeff\n";
	const char *p;

	clear_env();
	p = key_file("open", hex, strlen(hex), 0640);
	load_fails(p, COORD_EINVAL, "too open");
	load_fails(p, COORD_EINVAL, "chmod 600");
	p = key_file("open", hex, strlen(hex), 0604);
	load_fails(p, COORD_EINVAL, "0604");
	p = key_file("open", hex, strlen(hex), 0620);
	load_fails(p, COORD_EINVAL, "too open");
	/* Through the environment too. */
	setenv(COORD_KEY_FILE_ENV, p, 1);
	load_fails(NULL, COORD_EINVAL, "too open");
	clear_env();
}

/* B5: keys shorter than COORD_KEY_MIN bytes are refused. */
static void test_auth_key_too_short(void **state)
{
	uint8_t raw[15];
	const char *p;

	clear_env();
	p = key_file("short", "00112233445566778899aabbccddee\n", 31, 0600);
	load_fails(p, COORD_EINVAL, "15 bytes");
	memset(raw, 0xff, sizeof(raw));
	p = key_file("short", raw, sizeof(raw), 0600);
	load_fails(p, COORD_EINVAL, "15 bytes");
	p = key_file("short", "\n", 1, 0600);
	load_fails(p, COORD_EINVAL, "empty");
	p = key_file("short", "", 0, 0600);
	load_fails(p, COORD_EINVAL, "empty");
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddee", 1);
	load_fails(NULL, COORD_EINVAL, "must be 16..64 bytes");
	clear_env();
}

/* B5: keys longer than COORD_KEY_MAX bytes are refused. */
static void test_auth_key_too_long(void **state)
{
	char hex[700];
	uint8_t raw[65];
	const char *p;

	clear_env();
	memset(hex, 'a', 130);
	hex[130] = 0;
	p = key_file("long", hex, 130, 0600);
	load_fails(p, COORD_EINVAL, "65 bytes");
	setenv(COORD_KEY_ENV, hex, 1);
	load_fails(NULL, COORD_EINVAL, "65 bytes");
	clear_env();
	memset(raw, 0x80, sizeof(raw));
	p = key_file("long", raw, sizeof(raw), 0600);
	load_fails(p, COORD_EINVAL, "65 bytes");
	memset(hex, 'a', sizeof(hex));
	p = key_file("long", hex, sizeof(hex), 0600);
	load_fails(p, COORD_EINVAL, "too long");
}

/* B5: text that is not an even run of hex digits is refused. */
static void test_auth_key_bad_hex(void **state)
{
	static const char pass[] = "correct horse battery staple\n";
	const char *p;

	clear_env();
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddeeffzz", 1);
	load_fails(NULL, COORD_EINVAL, "character 33 is not a hex digit");
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddeeff0", 1);
	load_fails(NULL, COORD_EINVAL, "odd number");
	/* A bad character after an odd number of digits is named as such. */
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddeeff0z", 1);
	load_fails(NULL, COORD_EINVAL, "character 34 is not a hex digit");
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddee", 1);
	load_fails(NULL, COORD_EINVAL, "key is 15 bytes");
	/* A trailing newline is allowed in files, not in the variable. */
	setenv(COORD_KEY_ENV, "00112233445566778899aabbccddeeff\n", 1);
	load_fails(NULL, COORD_EINVAL, "not a hex digit");
	clear_env();
	p = key_file("bad", pass, strlen(pass), 0600);
	load_fails(p, COORD_EINVAL, "openssl rand -hex");
	p = key_file("bad", "00112233445566778899aabbccddeeff0\n", 34, 0600);
	load_fails(p, COORD_EINVAL, "odd number");
	p = key_file("bad", " 00112233445566778899aabbccddeeff", 33, 0600);
	load_fails(p, COORD_EINVAL, "character 1");
}

/* B5: a missing file, a directory, a FIFO. */
static void test_auth_key_file_errors(void **state)
{
	char path[128];

	clear_env();
	snprintf(path, sizeof(path), "%s/does-not-exist", tmpdir);
	load_fails(path, -ENOENT, "does-not-exist");
	snprintf(path, sizeof(path), "%s/dir", tmpdir);
	assert_int_equal(mkdir(path, 0700), 0);
	load_fails(path, COORD_EINVAL, "not a regular file");
	rmdir(path);
	snprintf(path, sizeof(path), "%s/fifo", tmpdir);
	assert_int_equal(mkfifo(path, 0600), 0);
	load_fails(path, COORD_EINVAL, "not a regular file"); /* and does not hang */
	unlink(path);
	load_fails("", COORD_EINVAL, "empty");
}

/* ------------------------------------------------------------------- MACs */

/* The HMAC primitive against RFC 4231 test cases 1, 2 and 6. */
static void test_auth_hmac_rfc4231(void **state)
{
	uint8_t k[131], out[32], want[32];

	memset(k, 0x0b, 20);
	coord_auth_hmac(k, 20, (const uint8_t *)"Hi There", 8, out);
	unhex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", want);
	assert_memory_equal(out, want, 32);

	coord_auth_hmac((const uint8_t *)"Jefe", 4, (const uint8_t *)"what do ya want for nothing?",
			28, out);
	unhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want);
	assert_memory_equal(out, want, 32);

	/* Key longer than the block: hashed first. */
	memset(k, 0xaa, 131);
	coord_auth_hmac(k, 131,
			(const uint8_t *)"Test Using Larger Than Block-Size Key - Hash Key First",
			54, out);
	unhex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", want);
	assert_memory_equal(out, want, 32);
}

/*
 * coord_auth_mac's construction HMAC(key, label || a || b), against values
 * computed once with OpenSSL:
 *   printf 'S' + a + b > msg
 *   openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f msg
 * key = 00..1f, a = 20..3f, b = 40..5f.
 */
static void test_auth_mac_vector(void **state)
{
	uint8_t a[32], b[32], mac[32], want[32], msg[65];
	struct coord_key k;

	make_key(&k, 32, 0x00);
	for (int i = 0; i < 32; i++) {
		a[i] = (uint8_t)(0x20 + i);
		b[i] = (uint8_t)(0x40 + i);
	}
	coord_auth_mac(&k, COORD_AUTH_SERVER, a, b, mac);
	unhex("6760b2761b9ea12bd29c6d4c4058e31c48a22b76a6b572e0a4036ebfa7e24d79", want);
	assert_memory_equal(mac, want, 32);
	assert_true(coord_auth_verify(&k, COORD_AUTH_SERVER, a, b, want));

	/* The client proof of the same exchange: label 'C', nonces swapped. */
	coord_auth_mac(&k, COORD_AUTH_CLIENT, b, a, mac);
	unhex("efa424b91fe603187a47183ef470bb60e75d810f59cd91f934c9db23b5e8f770", want);
	assert_memory_equal(mac, want, 32);

	/* Same as the plain HMAC of the concatenation. */
	msg[0] = COORD_AUTH_CLIENT;
	memcpy(msg + 1, b, 32);
	memcpy(msg + 33, a, 32);
	coord_auth_hmac(k.bytes, k.len, msg, sizeof(msg), want);
	assert_memory_equal(mac, want, 32);
}

/* Any change to key, label, either nonce, their order or the MAC is refused. */
static void test_auth_verify_rejects(void **state)
{
	uint8_t a[32], b[32], mac[32], bad[32];
	struct coord_key k, k2;

	make_key(&k, 32, 0x11);
	coord_auth_nonce(a);
	coord_auth_nonce(b);
	assert_memory_not_equal(a, b, 32);
	coord_auth_mac(&k, COORD_AUTH_SERVER, a, b, mac);
	assert_true(coord_auth_verify(&k, COORD_AUTH_SERVER, a, b, mac));
	assert_false(coord_auth_verify(&k, COORD_AUTH_CLIENT, a, b, mac)); /* reflection */
	assert_false(coord_auth_verify(&k, COORD_AUTH_SERVER, b, a, mac));
	for (int bit = 0; bit < 256; bit += 7) {
		memcpy(bad, mac, 32);
		bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		assert_false(coord_auth_verify(&k, COORD_AUTH_SERVER, a, b, bad));
		memcpy(bad, a, 32);
		bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		assert_false(coord_auth_verify(&k, COORD_AUTH_SERVER, bad, b, mac));
	}
	k2 = k;
	k2.bytes[31] ^= 1;
	assert_false(coord_auth_verify(&k2, COORD_AUTH_SERVER, a, b, mac));
	k2 = k;
	k2.len = 31;
	assert_false(coord_auth_verify(&k2, COORD_AUTH_SERVER, a, b, mac));

	/* An unset key never verifies, and its "MAC" is zeros. */
	k2.set = false;
	coord_auth_mac(&k2, COORD_AUTH_SERVER, a, b, bad);
	memset(mac, 0, 32);
	assert_memory_equal(bad, mac, 32);
	assert_false(coord_auth_verify(&k2, COORD_AUTH_SERVER, a, b, bad));
	coord_key_wipe(&k);
}

/* ------------------------------------------------------------ bind policy */

static int check4(const struct coord_key *k, const char *ip, struct coord_error *err)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(2222) };

	assert_int_equal(inet_pton(AF_INET, ip, &in.sin_addr), 1);
	return coord_auth_check_bind(k, (struct sockaddr *)&in, sizeof(in), err);
}

static int check6(const struct coord_key *k, const char *ip, struct coord_error *err)
{
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(2222) };

	assert_int_equal(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
	return coord_auth_check_bind(k, (struct sockaddr *)&in6, sizeof(in6), err);
}

/* B5: without a key only loopback may be bound, and the refusal says why. */
static void test_auth_bind_without_key(void **state)
{
	struct coord_key none = { .set = false };
	struct coord_error err = { 0 };
	struct sockaddr_un un = { .sun_family = AF_UNIX, .sun_path = "/tmp/x" };
	struct sockaddr_in in = { .sin_family = AF_INET };
	char log[4096];

	capture_begin();
	assert_int_equal(check4(&none, "127.0.0.1", &err), 0);
	capture_end(log, sizeof(log));
	if (!strstr(log, "not authenticated") || !strstr(log, "127.0.0.1:2222"))
		fail_msg("loopback without a key is not logged: \"%s\"", log);
	assert_int_equal(check4(&none, "127.3.2.1", &err), 0);
	assert_int_equal(check6(&none, "::1", &err), 0);
	assert_int_equal(check6(&none, "::ffff:127.0.0.1", &err), 0);
	assert_int_equal(coord_auth_check_bind(&none, (struct sockaddr *)&un, sizeof(un), &err), 0);

	assert_int_equal(check4(&none, "0.0.0.0", &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "0.0.0.0:2222"));
	assert_non_null(strstr(err.msg, COORD_KEY_FILE_ENV));
	assert_non_null(strstr(err.msg, "127.0.0.1"));
	assert_int_equal(check4(&none, "10.1.2.3", &err), COORD_EINVAL);
	assert_int_equal(check4(&none, "128.0.0.1", &err), COORD_EINVAL);
	assert_int_equal(check6(&none, "::", &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "[::]:2222"));
	assert_int_equal(check6(&none, "fe80::1", &err), COORD_EINVAL);
	assert_int_equal(check6(&none, "::ffff:0.0.0.0", &err), COORD_EINVAL);
	assert_int_equal(check6(&none, "::2", &err), COORD_EINVAL);
	/* NULL key = none. */
	assert_int_equal(check4(NULL, "0.0.0.0", &err), COORD_EINVAL);
	assert_int_equal(check4(NULL, "127.0.0.1", NULL), 0);

	/* Malformed input. */
	assert_int_equal(coord_auth_check_bind(&none, NULL, 0, &err), COORD_EINVAL);
	assert_int_equal(coord_auth_check_bind(&none, (struct sockaddr *)&in, 4, &err),
			 COORD_EINVAL);
	in.sin_family = AF_PACKET;
	assert_int_equal(coord_auth_check_bind(&none, (struct sockaddr *)&in, sizeof(in), &err),
			 COORD_EINVAL);
}

/* B5: with a key any address may be bound. */
static void test_auth_bind_with_key(void **state)
{
	struct coord_key k;
	struct coord_error err = { 0 };

	make_key(&k, 16, 1);
	assert_int_equal(check4(&k, "0.0.0.0", &err), 0);
	assert_int_equal(check4(&k, "10.1.2.3", &err), 0);
	assert_int_equal(check4(&k, "127.0.0.1", &err), 0);
	assert_int_equal(check6(&k, "::", &err), 0);
	assert_int_equal(check6(&k, "::1", &err), 0);
	/* A key struct marked set but with a bad length counts as none. */
	k.len = 8;
	assert_int_equal(check4(&k, "0.0.0.0", &err), COORD_EINVAL);
}

/* -------------------------------------------------------------- handshake */

/* B5: both sides hold the key: both succeed, over a socketpair. */
static void test_auth_handshake_ok(void **state)
{
	struct coord_key k;
	struct side srv, cli;
	char buf[4];
	int sv[2];

	make_key(&k, 32, 0x42);
	for (int round = 0; round < 20; round++) {
		pair(sv);
		side_start(&srv, sv[0], true, &k, T_SLOW_MS);
		side_start(&cli, sv[1], false, &k, T_SLOW_MS);
		side_join(&srv);
		side_join(&cli);
		if (srv.ret || cli.ret)
			fail_msg("server %d (%s), client %d (%s)", srv.ret, srv.err.msg, cli.ret,
				 cli.err.msg);
		/* Exactly the handshake's bytes were consumed: the stream goes on. */
		peer_write(sv[1], "next", 4);
		peer_read(sv[0], buf, 4);
		assert_memory_equal(buf, "next", 4);
		close(sv[0]);
		close(sv[1]);
	}
}

/* B5: the same over loopback TCP on an ephemeral port, bind policy first. */
static void test_auth_handshake_tcp(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct coord_key k;
	struct coord_error err = { 0 };
	struct side srv, cli;
	int lfd, cfd, afd;

	make_key(&k, 24, 0x99);
	assert_int_equal(coord_auth_check_bind(&k, (struct sockaddr *)&a, sizeof(a), &err), 0);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cfd >= 0);
	assert_int_equal(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);

	side_start(&srv, afd, true, &k, T_SLOW_MS);
	side_start(&cli, cfd, false, &k, T_SLOW_MS);
	side_join(&srv);
	side_join(&cli);
	if (srv.ret || cli.ret)
		fail_msg("server %d (%s), client %d (%s)", srv.ret, srv.err.msg, cli.ret,
			 cli.err.msg);
	close(afd);
	close(cfd);
	close(lfd);
}

/* B5: different keys: both sides refuse with -EACCES and log why. */
static void test_auth_handshake_wrong_key(void **state)
{
	struct coord_key ks, kc;
	struct side srv, cli;
	char log[8192];
	int sv[2];

	make_key(&ks, 32, 0x10);
	for (int which = 0; which < 2; which++) {
		make_key(&kc, 32, 0x10);
		if (which)
			kc.len = 31; /* a prefix of the server's key is not the key */
		else
			kc.bytes[7] ^= 0x80;
		pair(sv);
		capture_begin();
		side_start(&srv, sv[0], true, &ks, T_SLOW_MS);
		side_start(&cli, sv[1], false, &kc, T_SLOW_MS);
		side_join(&srv);
		side_join(&cli);
		capture_end(log, sizeof(log));
		assert_int_equal(cli.ret, -EACCES);
		assert_int_equal(srv.ret, -EACCES);
		assert_non_null(strstr(cli.err.msg, "server's proof is wrong"));
		assert_non_null(strstr(srv.err.msg, "different cluster key"));
		if (!strstr(log, "refused connection from local socket") ||
		    !strstr(log, "handshake with server local socket failed"))
			fail_msg("refusal not logged: \"%s\"", log);
		close(sv[0]);
		close(sv[1]);
	}
}

/*
 * The wire layout, checked by a hand-written client that holds the key: the
 * server's reply is Ns || HMAC('S', Nc, Ns) and it accepts HMAC('C', Ns, Nc).
 */
static void test_auth_handshake_wire_layout(void **state)
{
	uint8_t nc[32], reply[64], proof[32];
	struct coord_key k;
	struct side srv;
	int sv[2];

	make_key(&k, 32, 0x33);
	pair(sv);
	side_start(&srv, sv[0], true, &k, T_SLOW_MS);
	coord_auth_nonce(nc);
	peer_write(sv[1], nc, 32);
	peer_read(sv[1], reply, 64);
	assert_true(coord_auth_verify(&k, 'S', nc, reply, reply + 32));
	coord_auth_mac(&k, 'C', reply, nc, proof);
	peer_write(sv[1], proof, 32);
	side_join(&srv);
	assert_int_equal(srv.ret, 0);
	close(sv[0]);
	close(sv[1]);
}

/* B5: a client without the key cannot pass by reflecting the server's proof
 * or by sending garbage; the server refuses and logs it. */
static void test_auth_handshake_bad_client(void **state)
{
	uint8_t nc[32], reply[64], junk[100];
	struct coord_key k;
	struct side srv;
	char log[4096];
	int sv[2];

	make_key(&k, 32, 0x44);

	/* Reflection: send the server's own proof back as ours. */
	pair(sv);
	capture_begin();
	side_start(&srv, sv[0], true, &k, T_SLOW_MS);
	coord_auth_nonce(nc);
	peer_write(sv[1], nc, 32);
	peer_read(sv[1], reply, 64);
	peer_write(sv[1], reply + 32, 32);
	side_join(&srv);
	capture_end(log, sizeof(log));
	assert_int_equal(srv.ret, -EACCES);
	assert_non_null(strstr(srv.err.msg, "does not hold the cluster key"));
	assert_non_null(strstr(log, "refused connection"));
	close(sv[0]);
	close(sv[1]);

	/* Garbage: 100 random bytes, the connection held open. */
	pair(sv);
	side_start(&srv, sv[0], true, &k, T_SLOW_MS);
	coord_auth_nonce(junk);
	coord_auth_nonce(junk + 32);
	coord_auth_nonce(junk + 64);
	peer_write(sv[1], junk, sizeof(junk));
	side_join(&srv);
	assert_int_equal(srv.ret, -EACCES);
	close(sv[0]);
	close(sv[1]);
}

/* B5: a server without the key is refused by the client, which then sends
 * zeros, never a proof under its key. */
static void test_auth_handshake_bad_server(void **state)
{
	uint8_t nc[32], reply[64], got[32], zeros[32] = { 0 };
	struct coord_key k;
	struct side cli;
	int sv[2];

	make_key(&k, 32, 0x55);
	pair(sv);
	side_start(&cli, sv[1], false, &k, T_SLOW_MS);
	peer_read(sv[0], nc, 32);
	coord_auth_nonce(reply);
	coord_auth_nonce(reply + 32);
	peer_write(sv[0], reply, 64);
	side_join(&cli);
	assert_int_equal(cli.ret, -EACCES);
	peer_read(sv[0], got, 32);
	assert_memory_equal(got, zeros, 32);
	close(sv[0]);
	close(sv[1]);

	/* A server that echoes our nonce back as its own, with a garbage proof. */
	pair(sv);
	side_start(&cli, sv[1], false, &k, T_SLOW_MS);
	peer_read(sv[0], nc, 32);
	memcpy(reply, nc, 32);
	memset(reply + 32, 0, 32);
	peer_write(sv[0], reply, 64);
	side_join(&cli);
	assert_int_equal(cli.ret, -EACCES);
	close(sv[0]);
	close(sv[1]);
}

/* Elapsed time of a timed-out side must be about its timeout, never far over. */
static void assert_timed_out(const struct side *s, const char *needle)
{
	uint64_t lo = (uint64_t)(T_TIMEOUT_MS - 5) * 1000000ull;
	uint64_t hi = (uint64_t)(T_TIMEOUT_MS + 1000) * 1000000ull;

	assert_int_equal(s->ret, -ETIMEDOUT);
	if (s->elapsed_ns < lo || s->elapsed_ns > hi)
		fail_msg("timed out after %llu ms, timeout %d ms",
			 (unsigned long long)(s->elapsed_ns / 1000000), T_TIMEOUT_MS);
	if (!strstr(s->err.msg, needle))
		fail_msg("message \"%s\" does not say \"%s\"", s->err.msg, needle);
}

/* B5: half a nonce then a stall: the server gives up at its timeout. */
static void test_auth_handshake_stall(void **state)
{
	uint8_t half[16] = { 1, 2, 3 };
	struct coord_key k;
	struct side srv, cli;
	char log[4096];
	int sv[2];

	make_key(&k, 32, 0x66);
	pair(sv);
	capture_begin();
	side_start(&srv, sv[0], true, &k, T_TIMEOUT_MS);
	peer_write(sv[1], half, sizeof(half));
	side_join(&srv); /* the peer end stays open throughout */
	capture_end(log, sizeof(log));
	assert_timed_out(&srv, "16 of 32 bytes");
	assert_non_null(strstr(log, "timed out"));
	close(sv[0]);
	close(sv[1]);

	/* A whole nonce of garbage, then nothing: stalls waiting for the proof. */
	pair(sv);
	side_start(&srv, sv[0], true, &k, T_TIMEOUT_MS);
	peer_write(sv[1], log, 32);
	side_join(&srv);
	assert_timed_out(&srv, "the client's proof");
	close(sv[0]);
	close(sv[1]);

	/* A server that reads the nonce and never answers. */
	pair(sv);
	side_start(&cli, sv[1], false, &k, T_TIMEOUT_MS);
	side_join(&cli);
	assert_timed_out(&cli, "0 of 64 bytes");
	close(sv[0]);
	close(sv[1]);
}

/* B5: a peer that closes mid-exchange: -EPROTO, at once. */
static void test_auth_handshake_short_read(void **state)
{
	uint8_t buf[40] = { 9 };
	struct coord_key k;
	struct side srv, cli;
	int sv[2];

	make_key(&k, 32, 0x77);
	pair(sv);
	side_start(&srv, sv[0], true, &k, T_SLOW_MS);
	peer_write(sv[1], buf, 16);
	close(sv[1]);
	side_join(&srv);
	assert_int_equal(srv.ret, -EPROTO);
	assert_non_null(strstr(srv.err.msg, "after 16 of the 32 bytes"));
	assert_true(srv.elapsed_ns < (uint64_t)T_SLOW_MS * 1000000ull / 2);
	close(sv[0]);

	/* Nothing at all. */
	pair(sv);
	close(sv[1]);
	side_start(&srv, sv[0], true, &k, T_SLOW_MS);
	side_join(&srv);
	assert_int_equal(srv.ret, -EPROTO);
	close(sv[0]);

	/* The server half of a reply, then close. */
	pair(sv);
	side_start(&cli, sv[1], false, &k, T_SLOW_MS);
	peer_read(sv[0], buf, 32);
	peer_write(sv[0], buf, 40);
	close(sv[0]);
	side_join(&cli);
	assert_int_equal(cli.ret, -EPROTO);
	assert_non_null(strstr(cli.err.msg, "after 40 of the 64 bytes"));
	close(sv[1]);
}

/* No key or no time limit: refused before any I/O. */
static void test_auth_handshake_bad_args(void **state)
{
	struct coord_key k, none = { .set = false };
	struct coord_error err = { 0 };
	int sv[2];

	make_key(&k, 32, 0x88);
	pair(sv);
	assert_int_equal(coord_auth_handshake_client(sv[0], &none, 100, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "no cluster key"));
	assert_int_equal(coord_auth_handshake_server(sv[0], NULL, 100, &err), COORD_EINVAL);
	assert_int_equal(coord_auth_handshake_server(sv[0], &k, 0, &err), COORD_EINVAL);
	assert_int_equal(coord_auth_handshake_client(sv[0], &k, -1, NULL), COORD_EINVAL);
	close(sv[0]);
	close(sv[1]);
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
