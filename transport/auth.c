// SPDX-License-Identifier: MIT
/*
 * transport/auth.c - cluster-key authentication primitives (design.md B5).
 *
 * The protocol, the key sources and what this does not protect against are
 * described at the top of transport/auth.h.  Implementation notes:
 *
 *   N1  libsodium is initialised once (pthread_once) before its first use;
 *       sodium_init() itself is thread-safe, the once only avoids calling it
 *       on every nonce.  It fails only without kernel randomness, and then
 *       the process dies: a predictable nonce would defeat the protocol.
 *   N2  Key material lives in the caller's struct coord_key and, while a key
 *       file or variable is parsed, in stack buffers that are wiped with
 *       sodium_memzero() on every path out.  Keys are never logged.
 *   N3  Received proofs are compared with crypto_verify_32() (constant time),
 *       so the time a refusal takes says nothing about how many bytes were
 *       right.
 *   N4  Handshake I/O never blocks in the kernel: recv()/send() with
 *       MSG_DONTWAIT, and poll() for at most the time left before one
 *       deadline for the whole exchange.  Every loop ends at that deadline or
 *       when its (at most 64) bytes have moved.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>

#include "transport/auth.h"

/* A key file larger than this is refused before parsing (128 hex digits and
 * a newline fit many times over). */
#define KEY_FILE_MAX 512

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static bool sodium_ready;

static void sodium_setup(void)
{
	/* 0 = initialised now, 1 = already was (another library), -1 = failed. */
	sodium_ready = sodium_init() >= 0;
}

/* N1: every libsodium entry point of this file goes through here first. */
static void sodium_once_init(void)
{
	/* pthread_once orders sodium_setup()'s writes before every return. */
	pthread_once(&sodium_once, sodium_setup);
	if (!sodium_ready)
		coord_die("sodium_init failed (no kernel randomness?)", EIO);
}

/*
 * Decode @n hex digits of @s into @key with sodium_hex2bin().  @what names
 * the source for the messages.  Return: 0, or COORD_EINVAL with a message
 * (key left unset), COORD_ENOMEM.
 */
static int key_from_hex(const uint8_t *s, size_t n, const char *what, struct coord_key *key,
			struct coord_error *err)
{
	/* Room for every digit pair: the whole string is checked before its length. */
	uint8_t *bin = malloc(n / 2 + 1);
	const char *end;
	size_t len, stop;
	int r, ret = 0;

	if (!bin)
		return coord_seterr(err, COORD_ENOMEM, "%s: out of memory", what);
	r = sodium_hex2bin(bin, n / 2 + 1, (const char *)s, n, NULL, &len, &end);
	/* It stops at the first non-digit; with an odd digit count before that
	 * stop it fails and backs @end up by one digit. */
	stop = (size_t)(end - (const char *)s) + (r < 0);
	if (stop < n)
		ret = coord_seterr(err, COORD_EINVAL,
				   "%s: character %zu is not a hex digit; write the key as "
				   "hex (e.g. `openssl rand -hex 32`)",
				   what, stop + 1);
	else if (r < 0)
		ret = coord_seterr(err, COORD_EINVAL, "%s: odd number of hex digits (%zu)", what,
				   n);
	else if (len < COORD_KEY_MIN || len > COORD_KEY_MAX)
		ret = coord_seterr(err, COORD_EINVAL,
				   "%s: key is %zu bytes; it must be %d..%d bytes (%d..%d hex "
				   "digits)",
				   what, len, COORD_KEY_MIN, COORD_KEY_MAX, 2 * COORD_KEY_MIN,
				   2 * COORD_KEY_MAX);
	if (ret == 0) {
		memcpy(key->bytes, bin, len);
		key->len = len;
		key->set = true;
	}
	sodium_memzero(bin, n / 2 + 1);
	free(bin);
	return ret;
}

static bool is_text_byte(uint8_t c)
{
	return (c >= 0x20 && c <= 0x7e) || c == '\n' || c == '\r' || c == '\t';
}

static bool is_space_byte(uint8_t c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The contents of a key file: hex text, or raw bytes (see coord_key_load()). */
static int key_from_file_bytes(const uint8_t *b, size_t n, const char *path, struct coord_key *key,
			       struct coord_error *err)
{
	char what[300];
	bool text = true;

	snprintf(what, sizeof(what), "cluster key file %s", path);
	for (size_t i = 0; i < n && text; i++)
		text = is_text_byte(b[i]);
	if (text) {
		/* Trailing whitespace (the editor's newline) is not part of the key. */
		while (n > 0 && is_space_byte(b[n - 1]))
			n--;
		if (n == 0)
			return coord_seterr(err, COORD_EINVAL, "%s is empty", what);
		return key_from_hex(b, n, what, key, err);
	}
	if (n < COORD_KEY_MIN || n > COORD_KEY_MAX)
		return coord_seterr(err, COORD_EINVAL,
				    "%s: raw key is %zu bytes; it must be %d..%d bytes", what, n,
				    COORD_KEY_MIN, COORD_KEY_MAX);
	memcpy(key->bytes, b, n);
	key->len = n;
	key->set = true;
	return 0;
}

static int key_from_file(const char *path, struct coord_key *key, struct coord_error *err)
{
	uint8_t buf[KEY_FILE_MAX + 1];
	struct stat st;
	size_t n = 0;
	int fd, ret;

	if (!*path)
		return coord_seterr(err, COORD_EINVAL, "cluster key file name is empty");
	/* O_NONBLOCK: a FIFO in its place must not hang the open; it is then
	 * refused as not a regular file. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		return coord_seterr(err, ret, "cannot open cluster key file %s: %s", path,
				    strerror(-ret));
	}
	/* fstat on the open file, not stat on the name: no window to swap it. */
	if (fstat(fd, &st) < 0) {
		ret = coord_seterr(err, -errno, "cannot stat cluster key file %s: %s", path,
				   strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = coord_seterr(err, COORD_EINVAL, "cluster key file %s is not a regular file",
				   path);
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		ret = coord_seterr(err, COORD_EINVAL,
				   "permissions %04o for cluster key file %s are too open: it must "
				   "not be accessible by group or others; run `chmod 600 %s`",
				   (unsigned)(st.st_mode & 07777), path, path);
		goto out;
	}
	/* Each pass moves at least one byte or ends; EINTR retries are bounded
	 * by the same count. */
	for (size_t pass = 0; pass < sizeof(buf) + 8 && n < sizeof(buf); pass++) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - n);

		if (r == 0)
			break;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = coord_seterr(err, -errno, "cannot read cluster key file %s: %s", path,
					   strerror(errno));
			goto out;
		}
		n += (size_t)r;
	}
	if (n > KEY_FILE_MAX)
		ret = coord_seterr(
			err, COORD_EINVAL,
			"cluster key file %s is too long (over %d bytes); a key is %d..%d "
			"bytes, or twice as many hex digits",
			path, KEY_FILE_MAX, COORD_KEY_MIN, COORD_KEY_MAX);
	else
		ret = key_from_file_bytes(buf, n, path, key, err);
out:
	sodium_memzero(buf, sizeof(buf)); /* N2 */
	close(fd);
	return ret;
}

int coord_key_load(const char *file, struct coord_key *key, struct coord_error *err)
{
	const char *env_file = getenv(COORD_KEY_FILE_ENV);
	const char *env_key = getenv(COORD_KEY_ENV);
	const char *source;
	int ret;

	if (!key)
		return coord_seterr(err, COORD_EINVAL, "coord_key_load: key is NULL");
	sodium_once_init();
	coord_key_wipe(key);
	if (env_file && !*env_file)
		env_file = NULL;
	if (env_key && !*env_key)
		env_key = NULL;

	if (file || env_file) {
		source = file ? file : env_file;
		ret = key_from_file(source, key, err);
		if (!ret && env_key)
			coord_log(COORD_LOG_INFO, "cluster key: %s is ignored, the key file wins",
				  COORD_KEY_ENV);
	} else if (env_key) {
		source = "$" COORD_KEY_ENV;
		ret = key_from_hex((const uint8_t *)env_key, strlen(env_key), source, key, err);
	} else {
		coord_log(COORD_LOG_INFO, "cluster key: none configured (set %s or %s)",
			  COORD_KEY_FILE_ENV, COORD_KEY_ENV);
		return 0;
	}
	if (ret) {
		coord_key_wipe(key);
		return ret;
	}
	coord_log(COORD_LOG_INFO, "cluster key: %zu bytes from %s", key->len, source);
	return 0;
}

void coord_key_wipe(struct coord_key *key)
{
	if (key)
		sodium_memzero(key, sizeof(*key));
}

void coord_auth_nonce(uint8_t nonce[COORD_NONCE_LEN])
{
	sodium_once_init();
	randombytes_buf(nonce, COORD_NONCE_LEN);
}

void coord_auth_hmac(const uint8_t *k, size_t klen, const uint8_t *m, size_t mlen,
		     uint8_t out[COORD_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	sodium_once_init();
	crypto_auth_hmacsha256_init(&st, k, klen);
	crypto_auth_hmacsha256_update(&st, m, mlen);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st)); /* N2: the state holds the padded key */
}

static bool key_usable(const struct coord_key *key)
{
	return key && key->set && key->len >= COORD_KEY_MIN && key->len <= COORD_KEY_MAX;
}

void coord_auth_mac(const struct coord_key *key, uint8_t label, const uint8_t a[COORD_NONCE_LEN],
		    const uint8_t b[COORD_NONCE_LEN], uint8_t mac[COORD_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	if (!key_usable(key)) {
		/* A caller bug; zeros are never accepted by coord_auth_verify(). */
		memset(mac, 0, COORD_MAC_LEN);
		return;
	}
	sodium_once_init();
	crypto_auth_hmacsha256_init(&st, key->bytes, key->len);
	crypto_auth_hmacsha256_update(&st, &label, 1);
	crypto_auth_hmacsha256_update(&st, a, COORD_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, b, COORD_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st)); /* N2 */
}

bool coord_auth_verify(const struct coord_key *key, uint8_t label, const uint8_t a[COORD_NONCE_LEN],
		       const uint8_t b[COORD_NONCE_LEN], const uint8_t mac[COORD_MAC_LEN])
{
	uint8_t want[COORD_MAC_LEN];
	bool ok;

	if (!key_usable(key))
		return false;
	coord_auth_mac(key, label, a, b, want);
	ok = crypto_verify_32(want, mac) == 0; /* N3 */
	sodium_memzero(want, sizeof(want));
	return ok;
}

/* "a.b.c.d:port", "[v6]:port", "local socket", or "?" into @buf. */
static void addr_name(const struct sockaddr *sa, socklen_t len, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(buf, size, "%s:%u", ip, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, size, "[%s]:%u", ip, ntohs(in6->sin6_port));
	} else if (sa->sa_family == AF_UNIX) {
		snprintf(buf, size, "local socket");
	} else {
		snprintf(buf, size, "address family %d", sa->sa_family);
	}
}

int coord_auth_check_bind(const struct coord_key *key, const struct sockaddr *addr, socklen_t len,
			  struct coord_error *err)
{
	char name[INET6_ADDRSTRLEN + 16];
	bool loopback;

	if (!addr || len < (socklen_t)sizeof(sa_family_t))
		return coord_seterr(err, COORD_EINVAL, "listen address missing or truncated");
	if (key_usable(key))
		return 0;

	switch (addr->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;

		if (len < (socklen_t)sizeof(*in))
			return coord_seterr(err, COORD_EINVAL, "IPv4 listen address truncated");
		loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127; /* 127.0.0.0/8 */
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;

		if (len < (socklen_t)sizeof(*in6))
			return coord_seterr(err, COORD_EINVAL, "IPv6 listen address truncated");
		loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
			   (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) &&
			    in6->sin6_addr.s6_addr[12] == 127);
		break;
	}
	case AF_UNIX:
		loopback = true; /* reachable from this host only */
		break;
	default:
		return coord_seterr(err, COORD_EINVAL,
				    "no cluster key is configured and address family %d is not "
				    "known to be local; set %s or %s",
				    addr->sa_family, COORD_KEY_FILE_ENV, COORD_KEY_ENV);
	}
	addr_name(addr, len, name, sizeof(name));
	if (!loopback)
		return coord_seterr(
			err, COORD_EINVAL,
			"refusing to listen on %s: no cluster key is configured, so only "
			"loopback may be bound; set %s (or %s) on every task, or listen "
			"on 127.0.0.1 or ::1",
			name, COORD_KEY_FILE_ENV, COORD_KEY_ENV);
	coord_log(COORD_LOG_WARN,
		  "no cluster key configured: connections are not authenticated; listening on "
		  "loopback only (%s)",
		  name);
	return 0;
}

/* One handshake in progress (N4). */
struct hs {
	int fd;
	bool server;
	int timeout_ms;
	uint64_t deadline_ns;
	char peer[INET6_ADDRSTRLEN + 16];
};

/* Fill @err and log the failure with the peer's name. Returns @code. */
static int COORD_PRINTF(4, 5)
	hs_fail(struct hs *h, struct coord_error *err, int code, const char *fmt, ...)
{
	char why[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (h->server)
		coord_log(COORD_LOG_WARN, "auth: refused connection from %s: %s", h->peer, why);
	else
		coord_log(COORD_LOG_WARN, "auth: handshake with server %s failed: %s", h->peer,
			  why);
	return coord_seterr(err, code, "cluster-key handshake with %s: %s", h->peer, why);
}

static int hs_init(struct hs *h, int fd, const struct coord_key *key, int timeout_ms, bool server,
		   struct coord_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	h->fd = fd;
	h->server = server;
	h->timeout_ms = timeout_ms;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
		addr_name((struct sockaddr *)&ss, len, h->peer, sizeof(h->peer));
	else
		snprintf(h->peer, sizeof(h->peer), "fd %d", fd);
	if (!key_usable(key))
		return coord_seterr(err, COORD_EINVAL,
				    "cluster-key handshake with %s: no cluster key is set",
				    h->peer);
	if (timeout_ms <= 0)
		return coord_seterr(err, COORD_EINVAL,
				    "cluster-key handshake: timeout must be > 0 ms, got %d",
				    timeout_ms);
	sodium_once_init();
	h->deadline_ns = coord_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	return 0;
}

/*
 * Wait until @h->fd has @events or the deadline passes.  Return: 0 ready
 * (also on POLLHUP/POLLERR: the next recv/send reports them), -ETIMEDOUT, or
 * -errno from poll().  Ends by the deadline: each pass sleeps in poll() for
 * the time left, and EINTR passes are cut off by the same clock.
 */
static int hs_wait(struct hs *h, short events)
{
	for (;;) {
		struct pollfd p = { .fd = h->fd, .events = events };
		uint64_t now = coord_now_ns();
		int r;

		if (now >= h->deadline_ns)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((h->deadline_ns - now + 999999) / 1000000));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Read exactly @len bytes of @what (N4). */
static int hs_recv(struct hs *h, void *buf, size_t len, const char *what, struct coord_error *err)
{
	size_t got = 0;
	int ret;

	while (got < len) {
		ssize_t r = recv(h->fd, (uint8_t *)buf + got, len - got, MSG_DONTWAIT);

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return hs_fail(
				h, err, -EPROTO,
				"peer closed the connection after %zu of the %zu bytes of %s", got,
				len, what);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return hs_fail(h, err, -errno, "reading %s: %s", what, strerror(errno));
		ret = hs_wait(h, POLLIN);
		if (ret == -ETIMEDOUT)
			return hs_fail(h, err, -ETIMEDOUT,
				       "timed out after %d ms waiting for %s (%zu of %zu bytes)",
				       h->timeout_ms, what, got, len);
		if (ret)
			return hs_fail(h, err, ret, "poll: %s", strerror(-ret));
	}
	return 0;
}

/* Write all @len bytes of @what (N4); MSG_NOSIGNAL: a closed peer is an
 * error, not a SIGPIPE. */
static int hs_send(struct hs *h, const void *buf, size_t len, const char *what,
		   struct coord_error *err)
{
	size_t sent = 0;
	int ret;

	while (sent < len) {
		ssize_t r = send(h->fd, (const uint8_t *)buf + sent, len - sent,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r >= 0) {
			sent += (size_t)r;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return hs_fail(h, err, -errno, "sending %s: %s", what, strerror(errno));
		ret = hs_wait(h, POLLOUT);
		if (ret == -ETIMEDOUT)
			return hs_fail(h, err, -ETIMEDOUT, "timed out after %d ms sending %s",
				       h->timeout_ms, what);
		if (ret)
			return hs_fail(h, err, ret, "poll: %s", strerror(-ret));
	}
	return 0;
}

int coord_auth_handshake_client(int fd, const struct coord_key *key, int timeout_ms,
				struct coord_error *err)
{
	uint8_t nc[COORD_NONCE_LEN], reply[COORD_NONCE_LEN + COORD_MAC_LEN];
	uint8_t proof[COORD_MAC_LEN];
	const uint8_t *ns = reply, *server_proof = reply + COORD_NONCE_LEN;
	struct hs h;
	int ret;

	ret = hs_init(&h, fd, key, timeout_ms, false, err);
	if (ret)
		return ret;
	coord_auth_nonce(nc);
	ret = hs_send(&h, nc, sizeof(nc), "our nonce", err);
	if (ret)
		return ret;
	ret = hs_recv(&h, reply, sizeof(reply), "the server's nonce and proof", err);
	if (ret)
		return ret;
	if (!coord_auth_verify(key, COORD_AUTH_SERVER, nc, ns, server_proof)) {
		/* Tell the server why we leave: zeros in place of our proof.  Never
		 * a MAC under our key for a peer we could not authenticate.  Best
		 * effort; the refusal stands whatever happens to these bytes. */
		memset(proof, 0, sizeof(proof));
		(void)!send(fd, proof, sizeof(proof), MSG_DONTWAIT | MSG_NOSIGNAL);
		return hs_fail(&h, err, -EACCES,
			       "the server's proof is wrong: it does not hold our cluster key");
	}
	coord_auth_mac(key, COORD_AUTH_CLIENT, ns, nc, proof);
	ret = hs_send(&h, proof, sizeof(proof), "our proof", err);
	if (ret)
		return ret;
	coord_log(COORD_LOG_DEBUG, "auth: server %s holds the cluster key", h.peer);
	return 0;
}

int coord_auth_handshake_server(int fd, const struct coord_key *key, int timeout_ms,
				struct coord_error *err)
{
	static const uint8_t zeros[COORD_MAC_LEN];
	uint8_t nc[COORD_NONCE_LEN], reply[COORD_NONCE_LEN + COORD_MAC_LEN];
	uint8_t proof[COORD_MAC_LEN];
	uint8_t *ns = reply;
	struct hs h;
	int ret;

	ret = hs_init(&h, fd, key, timeout_ms, true, err);
	if (ret)
		return ret;
	ret = hs_recv(&h, nc, sizeof(nc), "the client's nonce", err);
	if (ret)
		return ret;
	coord_auth_nonce(ns);
	coord_auth_mac(key, COORD_AUTH_SERVER, nc, ns, reply + COORD_NONCE_LEN);
	ret = hs_send(&h, reply, sizeof(reply), "our nonce and proof", err);
	if (ret)
		return ret;
	ret = hs_recv(&h, proof, sizeof(proof), "the client's proof", err);
	if (ret)
		return ret;
	if (!coord_auth_verify(key, COORD_AUTH_CLIENT, ns, nc, proof)) {
		/* The zero check runs only after the constant-time one failed:
		 * it tells two kinds of refusal apart, both public already. */
		if (!memcmp(proof, zeros, sizeof(proof)))
			return hs_fail(&h, err, -EACCES,
				       "it rejected our proof: it holds a different cluster key");
		return hs_fail(&h, err, -EACCES,
			       "its proof is wrong: it does not hold the cluster key");
	}
	coord_log(COORD_LOG_DEBUG, "auth: client %s holds the cluster key", h.peer);
	return 0;
}
