/* SPDX-License-Identifier: MIT */
/*
 * transport/psclient/ps_client_pvt.h - what the ps client's two files share,
 * private to transport/psclient/: ps_client.c (the request path: queueing,
 * sending, the pending table, one-sided reads, running a batch) and
 * ps_conn.c (a connection's life: creating the client, dialling and
 * redialling, the reader thread, the heartbeat and Give-up, losing and
 * destroying it).  Who writes and reads each field below: the two files'
 * synchronization tables (struct coord_psc, k->fd/r/gen and the reader:
 * ps_conn.c's; the rest: ps_client.c's).
 */
#ifndef COORD_TRANSPORT_PS_CLIENT_PVT_H
#define COORD_TRANSPORT_PS_CLIENT_PVT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/util/util.h"
#include "runtime/ps/ps.h"
#include "transport/rdma/ps_rdma.h"
#include "transport/wire/giveup.h"
#include "transport/wire/wire.h"

/* One caller's batch, on its stack. */
struct psc_wait {
	/* Ops not yet answered; the batch is done at 0 (futex word). */
	_Atomic uint32_t left;
	/* Set by whoever records the batch's first error message. */
	_Atomic int has_err;
	struct coord_error *err;
};

struct psc_slot {
	uint32_t gen;
	/* the reader is receiving the reply's data straight into op->dst,
	 * outside k->lock: nobody else completes or withdraws it meanwhile */
	bool busy;
	struct psc_wait *w; /* NULL when free */
	struct coord_ps_op *op;
};

/*
 * A large request's data, sent from its caller's buffers (writev) right
 * after the frame bytes before @off in the frame buffer, never copied
 * there.  Only a caller that is about to become the sender queues one
 * (ps_client.c send_to_task()), so its buffers outlive the send.
 */
struct psc_ext {
	size_t off;
	const void *p1, *p2;
	size_t l1, l2;
};

/* A rendezvous update's registered data (rdma; ps_rdma.c P5), per op of a
 * batch: @mr NULL: none (the op's data goes in the frame). */
struct psc_rdv {
	struct coord_rdma_mr *mr;
	struct coord_ps_rsrc d;
};

#define PSC_EXT_MAX 16
/* From this many data bytes a request's data is sent from its caller's
 * buffers (struct psc_ext), not copied into the frame buffer. */
#define PSC_EXT_MIN (256u << 10)
/* A VAR_RES frame this long is received record by record, each result's
 * data straight into its caller's buffer (ps_conn.c read_direct(), one
 * blocking recv(MSG_WAITALL) each: coord_frame_read_into()), not copied
 * from the reader's buffer (docs/perf-history.md, issue 24). */
#define PSC_RX_DIRECT_MIN (256u << 10)

struct psc_conn {
	struct coord_psc *p;
	unsigned task;
	char addr[COORD_WIRE_ADDR_MAX];
	/* Serialises connect / reconnect / teardown; never held by the reader. */
	pthread_mutex_t conn_lock;
	bool reader_started; /* under conn_lock */
	/* Redialling (under conn_lock): connected before (a redial is bounded
	 * by the heartbeat); after a failed dial, none before retry_at (the
	 * requests meanwhile fail at once, with dial_why). */
	bool was_up;
	uint64_t retry_at;
	char dial_why[COORD_ERRMSG_LEN];
	/* The last dial was refused (-ECONNREFUSED: nothing listens there, the
	 * ps process is gone; under conn_lock): coord_psc_run_sure() stops
	 * sending an update again. */
	bool refused;
	pthread_t reader;
	/* Everything below: under lock. */
	pthread_mutex_t lock;
	int fd;
	bool up;
	bool flushing;
	bool open; /* a frame is begun in out */
	uint8_t *out, *spare;
	size_t outcap, sparecap;
	struct coord_wire_writer w;
	/* the large requests' data in out (in order), and a sender's copy */
	struct psc_ext ext[PSC_EXT_MAX];
	unsigned next;
	/* signalled when a sender is done (flushing false): a caller with a
	 * large request waits for it to queue and send that itself */
	pthread_cond_t idle;
	unsigned idle_waiters;
	struct psc_slot *slots;
	uint32_t nslots;
	uint32_t *freel;
	uint32_t nfree;
	char why[160]; /* why the connection went down */
	/* rdma: the channel (NULL over tcp); replaced only with use_lock
	 * held for writing, used with it held for reading. */
	pthread_rwlock_t use_lock;
	struct coord_psr *r;
	/* rdma: variables mapped for one-sided reads, by id (under lock);
	 * forgotten when the connection is replaced (a restarted ps). */
	struct psc_map *maps;
	uint32_t nmaps;
	/* connections made (under lock and use_lock for writing): a map, a
	 * sender's buffer, are of one of them */
	uint32_t gen;
	/* Give-up (under lock): frames counted on this connection (each
	 * VAR_RES frame, each PONG echoing our VAR_SYNC), the count the last
	 * VAR_SYNC queued named (transport/wire/giveup.h). */
	struct coord_gu_cli gu;
	/* lost to silence: not dialled again before this (under lock) */
	uint64_t quiet_until;
};

/* A variable as this connection may read it one-sided. */
struct psc_map {
	uint8_t state; /* MAP_NONE, MAP_OK, MAP_NO (the ps cannot: read two-sided) */
	uint32_t tag;  /* of the handle it was mapped for: another one maps again */
	struct coord_ps_map m;
};

enum { MAP_NONE = 0, MAP_OK = 1, MAP_NO = 2 };

struct coord_psc {
	unsigned nps;
	uint8_t role;
	struct coord_key key;
	uint32_t max_frame;
	int connect_timeout_ms;
	int op_timeout_ms;
	int hb_ms, misses; /* the heartbeat: as coord_opts heartbeat_ms, _misses */
	/* Give-up and the heartbeat: silence, window, ping (giveup.h). */
	struct coord_gu_clock gc;
	bool rdma; /* the ps tasks are served over rdma (coord_psc_use_rdma()) */
	struct psc_conn *conns;
};

/* ps_client.c: completing requests and making room (under k->lock). */
COORD_HIDDEN void wait_error(struct psc_wait *w, int code, const char *msg, size_t len);
COORD_HIDDEN void slot_done(struct psc_conn *k, uint32_t idx);
COORD_HIDDEN void fail_pending(struct psc_conn *k, int code, const char *why);
COORD_HIDDEN int out_room(struct psc_conn *k, size_t need);

/* ps_conn.c: a connection up (dialled if need be) or down; Give-up's
 * VAR_SYNC (under k->lock). */
COORD_HIDDEN int conn_up(struct psc_conn *k, struct coord_error *err);
COORD_HIDDEN void conn_down(struct psc_conn *k, const char *why);
COORD_HIDDEN int put_sync(struct psc_conn *k, bool echo);

#endif
