// SPDX-License-Identifier: MIT
/*
 * tests/auth_keys.c - part of test_auth: loading the cluster key (files of
 * hex or raw bytes, the environment, permissions, lengths, bad text, file
 * errors) and the MACs (HMAC against RFC 4231, our vector, every change
 * refused).
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

/* ------------------------------------------------------------ key loading */

/* B5: a mode-600 file holding hex text and a newline. */
void test_auth_key_file_hex(void **state)
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
void test_auth_key_file_raw(void **state)
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
void test_auth_key_env(void **state)
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
void test_auth_key_none(void **state)
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
void test_auth_key_file_too_open(void **state)
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
void test_auth_key_too_short(void **state)
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
void test_auth_key_too_long(void **state)
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
void test_auth_key_bad_hex(void **state)
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
void test_auth_key_file_errors(void **state)
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
void test_auth_hmac_rfc4231(void **state)
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
void test_auth_mac_vector(void **state)
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
void test_auth_verify_rejects(void **state)
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
