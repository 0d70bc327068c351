/* SPDX-License-Identifier: MIT */
/*
 * transport/wire/auth.h - cluster-key authentication primitives (design.md B5).
 *
 * Overview
 *   Every task of a cluster holds the same secret, the cluster key.  A
 *   connection is admitted only after both ends prove they hold it, with an
 *   HMAC-SHA256 challenge-response over two fresh nonces:
 *
 *     client -> server   Nc                                 (32 bytes)
 *     server -> client   Ns || MAC('S', Nc, Ns)             (32 + 32 bytes)
 *     client -> server   MAC('C', Ns, Nc)                   (32 bytes)
 *
 *   MAC(l, a, b) = HMAC-SHA256(key, l || a || b).  Each side checks the
 *   other's proof in constant time; the label byte keeps a proof from being
 *   reflected back as the other direction's.  A client that finds the
 *   server's proof wrong sends 32 zero bytes in place of its own proof (never
 *   a MAC under a key it could not confirm) and closes, so both ends report
 *   -EACCES and the server can log a clear reason.
 *
 *   The real TCP transport carries the same three values inside its HELLO
 *   frames (transport/wire); coord_auth_handshake_client()/_server() below
 *   run the bare exchange over a connected socket, for tests and tools.
 *
 * What it does not do
 *   It authenticates the connection's start only: it neither encrypts nor
 *   integrity-protects later frames, so an attacker on the path can still
 *   read them or take over an established connection.  Run clusters on a
 *   network you trust, or inside a VPN/WireGuard/IPsec tunnel, for that.
 *
 * Key configuration (coord_key_load())
 *   1. an explicit file; else 2. the file named by $COORD_CLUSTER_KEY_FILE;
 *   else 3. $COORD_CLUSTER_KEY as hex; else none.  Without a key, servers may
 *   listen on loopback only (coord_auth_check_bind()) and say so in the log.
 *   Make a key with `openssl rand -hex 32 > key && chmod 600 key`.
 *
 * Library: libsodium (crypto_auth_hmacsha256_*, crypto_verify_32,
 * randombytes_buf, sodium_memzero); sodium_init() runs once, on first use.
 */
#ifndef COORD_TRANSPORT_AUTH_H
#define COORD_TRANSPORT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <coord/error.h>

#include "runtime/util/util.h"

#define COORD_KEY_MIN 16 /* bytes */
#define COORD_KEY_MAX 64
#define COORD_NONCE_LEN 32
#define COORD_MAC_LEN 32

/* Labels of the two proofs (coord_auth_mac() @label). */
#define COORD_AUTH_SERVER 'S'
#define COORD_AUTH_CLIENT 'C'

/* Environment variables coord_key_load() reads. */
#define COORD_KEY_FILE_ENV "COORD_CLUSTER_KEY_FILE"
#define COORD_KEY_ENV "COORD_CLUSTER_KEY"

/**
 * struct coord_key - the cluster key.
 * @bytes: the key; only the first @len bytes are meaningful.
 * @len:   COORD_KEY_MIN..COORD_KEY_MAX when @set.
 * @set:   false when no key is configured (loopback-only mode).
 *
 * Caller-allocated; wipe with coord_key_wipe() when done.  Read-only after
 * coord_key_load(), so any number of threads may then use one key.
 */
struct coord_key {
	uint8_t bytes[COORD_KEY_MAX];
	size_t len;
	bool set;
};

/**
 * coord_key_load() - load the cluster key from its configured source.
 * @file: key file path, or NULL to use the environment; borrowed for the call.
 * @key:  caller-owned, not NULL; filled on return; key->set is false if no
 *        key is configured or on failure (and then the struct is all zero).
 * @err:  optional detail on failure.
 *
 * Sources, first that is configured wins: @file; the file named by
 * $COORD_CLUSTER_KEY_FILE; $COORD_CLUSTER_KEY (COORD_KEY_MIN*2 ..
 * COORD_KEY_MAX*2 hex digits, even count).  Empty variables count as unset.
 *
 * A key file must be a regular file with no permission bits for group or
 * others (like ssh's private keys: a key anyone else can read is no secret,
 * one they can write lets them plant their own) and holds either
 *   - hex text: only hex digits, an even number of them, optionally followed
 *     by whitespace (a trailing newline), or
 *   - raw bytes: anything else that is not printable text (e.g.
 *     `head -c 32 /dev/urandom`), used as is, newline bytes included.
 * Printable text that is not hex (a passphrase, base64) is refused: use hex.
 * Either way it must give COORD_KEY_MIN..COORD_KEY_MAX bytes.
 *
 * Concurrency: any thread, but it reads the environment with getenv(), so not
 * while another thread calls setenv().  Logs the key's source (never the key)
 * at info level.
 *
 * Return: 0 (a key loaded, or none configured); COORD_EINVAL a malformed key,
 * a key file open to group/others or not a regular file, @key NULL; -errno from open()
 * or read() (e.g. -ENOENT).  Detail in @err.
 */
COORD_HIDDEN int coord_key_load(const char *file, struct coord_key *key, struct coord_error *err);

/**
 * coord_key_wipe() - erase key material.
 * @key: may be NULL; afterwards all zero, key->set false.
 *
 * Uses sodium_memzero(), which the compiler may not elide.
 * Concurrency: no other thread may be using @key.
 */
COORD_HIDDEN void coord_key_wipe(struct coord_key *key);

/**
 * coord_auth_nonce() - a fresh random nonce.
 * @nonce: filled with COORD_NONCE_LEN bytes from libsodium's randombytes_buf()
 *         (getrandom(2) on Linux).
 *
 * Concurrency: any thread.  Cannot fail: if libsodium cannot initialise (no
 * kernel randomness), the process dies with a message (coord_die), as a
 * predictable nonce would be worse.
 */
COORD_HIDDEN void coord_auth_nonce(uint8_t nonce[COORD_NONCE_LEN]);

/**
 * coord_auth_mac() - HMAC-SHA256(key, label || a || b).
 * @key:   a set key (key->set); an unset or out-of-range key yields an all
 *         zero @mac, which coord_auth_verify() never accepts.
 * @label: COORD_AUTH_SERVER or COORD_AUTH_CLIENT: the direction of the proof,
 *         so a proof cannot be reflected back to its sender.
 * @a, @b: the two nonces, in the order the protocol gives for @label.
 * @mac:   the result.
 *
 * Concurrency: any thread; @key is only read.
 */
COORD_HIDDEN void coord_auth_mac(const struct coord_key *key, uint8_t label,
				 const uint8_t a[COORD_NONCE_LEN], const uint8_t b[COORD_NONCE_LEN],
				 uint8_t mac[COORD_MAC_LEN]);

/**
 * coord_auth_verify() - check a received proof in constant time.
 * @key, @label, @a, @b: as for coord_auth_mac().
 * @mac: the proof received from the peer; borrowed for the call.
 *
 * Concurrency: any thread.
 * Return: true if @mac equals coord_auth_mac(@key, @label, @a, @b); false
 * otherwise, and always false for an unset key.
 */
COORD_HIDDEN bool coord_auth_verify(const struct coord_key *key, uint8_t label,
				    const uint8_t a[COORD_NONCE_LEN],
				    const uint8_t b[COORD_NONCE_LEN],
				    const uint8_t mac[COORD_MAC_LEN]);

/**
 * coord_auth_hmac() - plain HMAC-SHA256 of one buffer (RFC 2104/4231).
 * @k, @klen: key of any length (longer than 64 bytes is hashed first).
 * @m, @mlen: message.
 * @out:      the 32-byte tag.
 *
 * The primitive under coord_auth_mac(), exposed so tests can check it
 * against RFC 4231's vectors.  Concurrency: any thread.
 */
COORD_HIDDEN void coord_auth_hmac(const uint8_t *k, size_t klen, const uint8_t *m, size_t mlen,
				  uint8_t out[COORD_MAC_LEN]);

/**
 * coord_auth_check_bind() - may a server listen on @addr?
 * @key:  the loaded key (possibly unset).
 * @addr: the address about to be bound; borrowed for the call.
 * @len:  its length.
 * @err:  optional detail on refusal.
 *
 * With a key every address is allowed.  Without one only loopback is:
 * 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104 and AF_UNIX; binding there logs a
 * warning that connections are not authenticated.
 *
 * Concurrency: any thread.
 * Return: 0 allowed; COORD_EINVAL refused (no key and not loopback: the
 * message names the address and says to configure a key or bind loopback),
 * or @addr NULL, too short for its family, or of an unknown family.
 */
COORD_PROV int coord_auth_check_bind(const struct coord_key *key, const struct sockaddr *addr,
				     socklen_t len, struct coord_error *err);

/**
 * coord_auth_handshake_client() - run the client side of the exchange.
 * @fd:         a connected stream socket; borrowed, left open and blocking
 *              mode unchanged (I/O uses MSG_DONTWAIT and poll()).
 * @key:        a set key.
 * @timeout_ms: > 0: the whole exchange must finish within this time.
 * @err:        optional detail on failure.
 *
 * Sends Nc, reads Ns || MAC('S', Nc, Ns), checks it, sends MAC('C', Ns, Nc).
 * Reads exactly the handshake's bytes, so the stream can carry on after it.
 * The server accepts or closes; a client that returns 0 has authenticated
 * the server, and the server has all it needs to authenticate the client.
 * Failures are logged at warn level with the peer's address.
 *
 * For tests and tools: the TCP transport embeds the same exchange in its
 * HELLO frames instead.
 *
 * Concurrency: any thread; one handshake per @fd at a time.
 * Return: 0; -EACCES the server's proof is wrong (different key); -ETIMEDOUT
 * out of time; -EPROTO the peer closed mid-exchange (short read); COORD_EINVAL
 * unset key or @timeout_ms <= 0; another -errno from the socket
 * (-ECONNRESET, -EPIPE, ...).  Detail in @err.
 */
COORD_HIDDEN int coord_auth_handshake_client(int fd, const struct coord_key *key, int timeout_ms,
					     struct coord_error *err);

/**
 * coord_auth_handshake_server() - run the server side of the exchange.
 * @fd, @key, @timeout_ms, @err: as for coord_auth_handshake_client().
 *
 * Reads Nc, sends Ns || MAC('S', Nc, Ns), reads the client's proof and
 * checks it.  On any failure the caller must close @fd: the peer is refused.
 * Every refusal is logged at warn level with the peer's address and reason.
 *
 * Concurrency: any thread; one handshake per @fd at a time.
 * Return: 0 the client holds the key; -EACCES its proof is wrong, or it
 * rejected ours (it holds a different key); -ETIMEDOUT; -EPROTO short read;
 * COORD_EINVAL unset key or @timeout_ms <= 0; another -errno from the socket.
 */
COORD_HIDDEN int coord_auth_handshake_server(int fd, const struct coord_key *key, int timeout_ms,
					     struct coord_error *err);

#endif /* COORD_TRANSPORT_AUTH_H */
