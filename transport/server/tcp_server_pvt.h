/* SPDX-License-Identifier: MIT */
/*
 * transport/server/tcp_server_pvt.h - what the tcp server's two files share,
 * private to transport/server/: tcp_server.c (the acceptor, the connections
 * and their serving, the handshake, coord_worker_serve() and coord_ps_serve())
 * and tcp_pool.c (the serving pool and its watchdog).
 *
 * The rules are each file's: P1, P3, H1, A1 and the synchronization table of
 * struct conn and struct srv are tcp_server.c's; P2, P4, P5, I1, M1 and the
 * table of the pool's fields (struct pool_thread, the pool part of struct
 * srv) are tcp_pool.c's.
 */
#ifndef COORD_TRANSPORT_TCP_SERVER_PVT_H
#define COORD_TRANSPORT_TCP_SERVER_PVT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/util/util.h"
#include "transport/server/srv_proto.h"
#include "transport/wire/sock.h"

/* Why the watchdog shut a connection's read side (k->stalled). */
enum { STALL_NONE, STALL_PARTIAL, STALL_HANDSHAKE, STALL_IDLE };

struct srv;

struct conn {
	struct srv *s;
	int fd;
	bool polled;	  /* registered with the pool's epoll (serving thread only) */
	bool authed;	  /* the handshake is done (the holder's, H1) */
	_Atomic int open; /* authed, for the watchdog (I1) */
	_Atomic int held; /* a thread serves it now (P1) */
	_Atomic int done; /* finished: the acceptor may free it (P3) */
	/* CLOCK_MONOTONIC ns by which a started frame (or the handshake) must
	 * be whole, 0 = none; the watchdog closes the connection after it (P4) */
	_Atomic uint64_t partial_deadline;
	_Atomic uint64_t last_active; /* when its holder last let go (I1) */
	_Atomic int stalled;	      /* why the watchdog shut the read side (STALL_*) */
	struct coord_hs_server hs;    /* the handshake (H1) */
	/* Keepalive (P5): since when a thread holds us, and when we last
	 * sent (the coordinator's heartbeat interval is p.hb_ms). */
	_Atomic uint64_t held_since, last_sent_ns;
	pthread_mutex_t send_lock; /* the holder's and the watchdog's sends */
	uint64_t peek_rx;	   /* S3: rd.rx_total at the last look for a CANCEL (holder) */
	/* a READ's result streamed from its variable (the holder's, with
	 * send_lock held from tcp_io_stream() to tcp_io_stream_end()) */
	struct coord_sock_stream st;
	int st_err;
	size_t lowat; /* W1: the socket's SO_RCVLOWAT as set (0: never, 1) */
	struct coord_frame_reader rd;
	struct coord_srv_conn p; /* the protocol (srv_proto.h) */
	struct conn *next;
};

/* A thread of the serving pool. */
struct pool_thread {
	struct srv *s;
	pthread_t thread;
	/* CLOCK_MONOTONIC ns since which it serves one frame, 0 = idle
	 * (the watchdog reads it, P2) */
	_Atomic uint64_t busy_since;
	_Atomic int tid; /* its thread id, for the watchdog (P2); 0 until known */
	/* the watchdog's first look at its current stuck frame: the frame's
	 * busy_since, and the thread's CPU time then (P2) */
	uint64_t seen_busy, seen_cpu;
};

struct srv {
	struct coord_srv base; /* base.lock guards conns too */
	_Atomic int stopping;
	struct conn *conns;
	unsigned nconns;	  /* in conns (under base.lock) */
	_Atomic unsigned pending; /* connections in the handshake (H1) */
	/* the acceptor's (A1, H1) */
	uint64_t accept_paused_until, refused_logged_ns;
	unsigned refused;
	bool out_of_fds;
	unsigned freed;	   /* connections freed since the last trim (M1) */
	uint64_t freed_ns; /* when the last was */
	/* the serving pool (P1, P2) */
	int epfd, stop_efd;
	unsigned target;	      /* threads that wait in epoll_wait at once */
	_Atomic int waiting;	      /* threads in (or entering) epoll_wait */
	struct pool_thread **threads; /* acceptor only */
	unsigned nthreads, capthreads;
	pthread_mutex_t park_lock; /* parked spare threads (off the fast path) */
	pthread_cond_t park_cv;
	unsigned parked, tokens;
};

/* tcp_server.c: serve what @k has to read, then re-arm it (P1). */
COORD_HIDDEN void conn_serve(struct pool_thread *t, struct conn *k);

/* tcp_pool.c: the pool (P2) and the watchdog (P2, P4, P5, I1, M1). */
COORD_HIDDEN unsigned pool_target(void);
COORD_HIDDEN int pool_spawn(struct srv *s);
COORD_HIDDEN bool watch(struct srv *s);
COORD_HIDDEN void trim(struct srv *s);

#endif
