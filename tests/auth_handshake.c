// SPDX-License-Identifier: MIT
/*
 * tests/auth_handshake.c - part of test_auth: the bind policy (loopback
 * only without a key) and the handshake (both sides, tcp, wrong keys, the
 * wire layout, peers without the key, stalls and short reads, bad arguments).
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
void test_auth_bind_without_key(void **state)
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
void test_auth_bind_with_key(void **state)
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
void test_auth_handshake_ok(void **state)
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
void test_auth_handshake_tcp(void **state)
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
void test_auth_handshake_wrong_key(void **state)
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
void test_auth_handshake_wire_layout(void **state)
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
void test_auth_handshake_bad_client(void **state)
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
void test_auth_handshake_bad_server(void **state)
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
void test_auth_handshake_stall(void **state)
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
void test_auth_handshake_short_read(void **state)
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
void test_auth_handshake_bad_args(void **state)
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
