/* SPDX-License-Identifier: MIT */
/*
 * tests/tcp_hostile_tests.h - what the parts of the test_tcp_hostile
 * executable share: raw sockets against a coord-worker (test_tcp_hostile.c,
 * with main() and the test table) and the tests of each part.
 */
#ifndef COORD_TESTS_TCP_HOSTILE_TESTS_H
#define COORD_TESTS_TCP_HOSTILE_TESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

/* A healthy coordinator kept busy by healthy_main() while hostile peers
 * connect: its closures that came back right and wrong. */
struct healthy {
	struct coord *c;
	uint32_t add;
	_Atomic int stop;
	_Atomic long ok, wrong;
};

/* Helpers the parts share. */
void *healthy_main(void *arg);
int dial(void);
size_t drain_until_closed(int fd, uint8_t *buf, size_t cap, int timeout_ms);
void send_raw(int fd, const void *p, size_t n);
size_t hello(uint8_t *b, size_t cap, uint32_t magic, uint16_t vmin, uint16_t vmax);
int create_100(void);

/* tcp_hostile_peers.c */
void test_hostile_peers_refused_healthy_served(void **state);
void test_long_closures_do_not_block_other_connections(void **state);
void test_spinning_closures_do_not_block_other_connections(void **state);
void test_cancel_drops_what_has_not_started(void **state);

/* tcp_hostile_limits.c */
void test_handshake_frames_limited(void **state);
void test_handshakes_pending_bounded(void **state);
void test_accept_backs_off_without_descriptors(void **state);
void test_server_raises_descriptor_limit(void **state);
void test_coordinator_descriptor_limit(void **state);
void test_idle_connections_closed(void **state);
void test_idle_ps_connections_kept_by_heartbeats(void **state);

#endif
