// SPDX-License-Identifier: MIT
/*
 * transport/server/tcp_pool.c - the tcp server's serving pool and its
 * watchdog: the threads that wait in the pool's epoll set and serve the
 * connections it returns (tcp_server.c conn_serve()), and the checks the
 * acceptor thread makes between its polls: relief for a stuck thread,
 * keepalive PONGs, connections stalled mid-frame or idle, giving freed
 * memory back.  What a connection is and how it is held (P1, P3, H1, A1)
 * is tcp_server.c's; what the two files share is tcp_server_pvt.h.
 *
 *   P2  pool.target threads (one per CPU, at most 4) wait in epoll_wait,
 *       one event each, so a ready connection never waits behind another's
 *       frames on a busy thread while a thread is waiting.  A thread that
 *       serves one frame for longer than STUCK_NS (a long closure, a ps
 *       round trip, a send to a peer that does not read) while no thread is
 *       left in epoll_wait gets relief from the watchdog (the acceptor
 *       thread, ticking every 1 ms while a pool thread is busy): it unparks
 *       a spare or starts a new thread, unless the stuck thread only waits
 *       for a CPU (relief_helps(): runnable and barely running; a loaded
 *       machine preempted it, and a new thread would wait as well).  So a
 *       closure waits behind a long one of another connection at most about
 *       STUCK_NS + 1 ms.  Threads beyond the target park when they are done.
 *   P4  A started frame must be whole within partial_ms: the holder records
 *       the deadline, the watchdog shuts the read side when it passes, and
 *       the holder, reading EOF with `stalled` set, sends the ERROR frame
 *       and closes (tcp_server.c conn_serve()).
 *   P5  Keepalive: a connection held longer than half the coordinator's
 *       heartbeat interval (a long closure, a slow ps round trip) cannot
 *       answer the coordinator's PINGs, so the watchdog sends it an
 *       unsolicited PONG every half interval while it is held and nothing
 *       else was sent; every send on a connection takes its send_lock, so
 *       frames never interleave.  The interval is the token of the PING
 *       the coordinator sends at connect (engine.c coord_eng_greet()).
 *   P6  Take-back (srv_take.c T1-T5): at each tick the watchdog gives
 *       back, unstarted, the REQ records received behind a closure that
 *       has run past COORD_SRV_TAKE_NS (coord_srv_take_back(); it reads
 *       the socket ahead through tcp_server.c tcp_io_behind() and sends
 *       under send_lock), so that an idle worker runs them.  The tick is
 *       1 ms while a pool thread is busy, so they go back within about
 *       TAKE_NS + 2 ms of the closure's start.  The send may wait for a
 *       coordinator that does not read (as the holder's sends do).
 *   I1  Idle: an authenticated connection that received nothing for
 *       idle_ms (at least 4 heartbeat intervals of its coordinator, P5)
 *       while not held is closed by the watchdog as P4 does, with an ERROR
 *       frame saying so.  `last_active` is when its holder last let go of
 *       it (after serving what arrived, or a closure that ran long).
 *   M1  Memory: once connections were freed and none for TRIM_QUIET_NS (or
 *       TRIM_MANY were), the acceptor gives the pages malloc keeps of them
 *       back (trim()).
 *
 * Synchronization: the pool's fields (the connections' are in tcp_server.c's
 * table, the watchdog's reads of them included).
 *   field            written by (how)                read by (how)           order
 *   s->threads,      pool_spawn() (acceptor)         watch(), serve()'s      one thread
 *   nthreads,                                        joins (acceptor)
 *   capthreads
 *   t->busy_since    its pool thread (relaxed)       the watchdog (relaxed)  none: a hint (P2)
 *   t->tid           its pool thread, at start       the watchdog (relaxed)  none: 0 = unknown
 *                    (relaxed)                                               (P2)
 *   t->seen_busy,    the watchdog                    the watchdog            one thread
 *   seen_cpu
 *   s->waiting       pool threads (relaxed RMW)      the watchdog, pool      none: a hint (P2);
 *                                                    threads (relaxed)       epoll hands over
 *   s->parked,       park(), pool_spawn() (under     the same                park_lock (and
 *   s->tokens        park_lock)                                              park_cv)
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/wire/sock.h"
#include "transport/server/tcp_server_pvt.h"

#define STUCK_NS 1000000ull /* a pool thread held one connection this long: add one */
#define MAX_POOL_THREADS 4096u
#define TRIM_QUIET_NS 100000000ull /* M1: no connection freed this long: trim */
#define TRIM_MANY 4096u		   /* M1: ... or this many were */

/* ---- the serving pool (P2) ------------------------------------------------------- */

/* A spare thread waits here until the watchdog needs it (P2). */
static bool park(struct srv *s)
{
	bool go;

	pthread_mutex_lock(&s->park_lock);
	s->parked++;
	/* Relaxed: stop also broadcasts park_cv under park_lock. */
	while (!s->tokens && !atomic_load_explicit(&s->stopping, memory_order_relaxed))
		pthread_cond_wait(&s->park_cv, &s->park_lock);
	s->parked--;
	go = s->tokens > 0;
	if (go)
		s->tokens--;
	pthread_mutex_unlock(&s->park_lock);
	return go;
}

static void *pool_main(void *arg)
{
	struct pool_thread *t = arg;
	struct srv *s = t->s;

	/* Relaxed (P2): a hint for the watchdog (0: unknown). */
	atomic_store_explicit(&t->tid, (int)gettid(), memory_order_relaxed);
	for (;;) {
		struct epoll_event ev;
		int n;

		/* Relaxed (P2): a count the watchdog and the park test read as
		 * hints; epoll does the handing over. */
		atomic_fetch_add_explicit(&s->waiting, 1, memory_order_relaxed);
		n = epoll_wait(s->epfd, &ev, 1, -1);
		/* Relaxed (P2): as above. */
		atomic_fetch_sub_explicit(&s->waiting, 1, memory_order_relaxed);
		if (n <= 0)
			continue; /* EINTR */
		if (!ev.data.ptr)
			break; /* the stop eventfd: level-triggered, every thread sees it */
		conn_serve(t, ev.data.ptr);
		/* More threads than the target waiting (a spare called in for a
		 * long closure, now back): park instead of crowding epoll.
		 * Relaxed (P2): a hint; parking one too many only delays. */
		if (atomic_load_explicit(&s->waiting, memory_order_relaxed) >= (int)s->target &&
		    !park(s))
			break;
	}
	return NULL;
}

/* Add a thread to the pool: unpark a spare, else start one.  Acceptor only. */
int pool_spawn(struct srv *s)
{
	struct pool_thread *t;

	pthread_mutex_lock(&s->park_lock);
	if (s->parked > s->tokens) {
		s->tokens++;
		pthread_cond_signal(&s->park_cv);
		pthread_mutex_unlock(&s->park_lock);
		return 0;
	}
	pthread_mutex_unlock(&s->park_lock);
	if (s->nthreads == s->capthreads) {
		unsigned cap = s->capthreads ? 2 * s->capthreads : 8;
		struct pool_thread **a = realloc(s->threads, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		s->threads = a;
		s->capthreads = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->s = s;
	if (pthread_create(&t->thread, NULL, pool_main, t) != 0) {
		free(t);
		return -EAGAIN;
	}
	s->threads[s->nthreads++] = t;
	return 0;
}

/* Threads that wait for connections at once: one per CPU, at most 4. */
unsigned pool_target(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

/* ---- the watchdog (P2, P4, P5, I1, M1) ------------------------------------------ */

/* P5: an unsolicited PONG for a connection held (busy) past half the
 * coordinator's heartbeat interval with nothing sent meanwhile. */
static void keepalive(struct conn *k, uint64_t now)
{
	uint8_t b[COORD_SRV_PONG_LEN];
	/* Relaxed (P5): hints, both. */
	size_t len = coord_srv_keepalive(
		&k->p, atomic_load_explicit(&k->held_since, memory_order_relaxed),
		atomic_load_explicit(&k->last_sent_ns, memory_order_relaxed), now, b);
	ssize_t n;

	if (!len || pthread_mutex_trylock(&k->send_lock) != 0)
		return; /* none due, or the holder is sending: alive */
	n = send(k->fd, b, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n > 0 && (size_t)n < len) /* rare: finish the frame */
		(void)coord_sock_send_all(k->fd, b + n, len - (size_t)n);
	if (n > 0)
		/* Relaxed (P5): as above. */
		atomic_store_explicit(&k->last_sent_ns, now, memory_order_relaxed);
	pthread_mutex_unlock(&k->send_lock);
}

/* I1: has authenticated @k received nothing, and run nothing, for longer
 * than its idle limit? */
static bool idle_over(struct conn *k, uint64_t now)
{
	const struct coord_server_opts *o = k->s->base.o;
	/* Relaxed (I1, P5): hints; a stale one delays the close by a tick. */
	uint64_t last = atomic_load_explicit(&k->last_active, memory_order_relaxed);
	/* Relaxed (P5): as above. */
	uint64_t hb = atomic_load_explicit(&k->p.hb_ms, memory_order_relaxed);
	uint64_t limit = (uint64_t)o->idle_ms;

	if (!o->idle_ms ||
	    /* Relaxed (I1): as above. */
	    !atomic_load_explicit(&k->open, memory_order_relaxed) ||
	    /* Relaxed (P5): as above; a held connection is never idle. */
	    atomic_load_explicit(&k->held_since, memory_order_relaxed))
		return false;
	if (limit < COORD_SRV_IDLE_HB_MULT * hb)
		limit = COORD_SRV_IDLE_HB_MULT * hb;
	return now > last && now - last > limit * 1000000ull;
}

/* The scheduler state of pool thread @t ('R' runnable, 'S' sleeping, ...);
 * 0 if unknown. */
static char thread_state(struct pool_thread *t)
{
	/* Relaxed (P2): set once by the thread; 0 until then (unknown). */
	int tid = atomic_load_explicit(&t->tid, memory_order_relaxed);
	char path[64], buf[256], *p, st = 0;
	ssize_t n;
	int fd;

	if (!tid)
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* "pid (comm) S ..." */
	if (p && p[1] == ' ')
		st = p[2];
	return st;
}

/*
 * P2: would another thread relieve pool thread @t, held by one frame (since
 * @busy_since) past STUCK_NS?  Yes if it is blocked (a sleep, a ps round
 * trip, a send to a peer that does not read), or once it has run STUCK_NS / 2
 * on a CPU since the watchdog first saw it stuck (a long closure; under
 * load that takes longer, but it comes).  Not while it is runnable and has
 * barely run: a loaded machine preempted it in a short frame, another
 * thread would wait for a CPU as well, and each one added keeps its stack
 * and malloc arena for good.  Unknown: yes.
 */
static bool relief_helps(struct pool_thread *t, uint64_t busy_since)
{
	struct timespec ts;
	clockid_t cid;
	uint64_t cpu;
	char st = thread_state(t);

	if (!st || pthread_getcpuclockid(t->thread, &cid) != 0 || clock_gettime(cid, &ts) != 0)
		return true;
	if (st != 'R')
		return true;
	cpu = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (t->seen_busy != busy_since) { /* the first look at this frame */
		t->seen_busy = busy_since;
		t->seen_cpu = cpu;
		return false;
	}
	return cpu - t->seen_cpu >= STUCK_NS / 2;
}
/*
 * The watchdog, run by the acceptor between polls (P2, P4): if a pool
 * thread has held one connection longer than STUCK_NS (a long closure, a
 * send to a peer that does not read, a ps round trip) and no thread is
 * left waiting in epoll_wait, add one, so that another connection's
 * closures never wait behind it; and close connections whose started
 * frame is overdue.  Return: whether some thread is busy (poll sooner).
 */
bool watch(struct srv *s)
{
	uint64_t now = coord_now_ns();
	bool busy = false, stuck = false;

	/* Relaxed (P2): a hint; a stale value costs one tick. */
	bool waiter = atomic_load_explicit(&s->waiting, memory_order_relaxed) > 0;

	for (unsigned i = 0; i < s->nthreads; i++) {
		struct pool_thread *t = s->threads[i];
		/* Relaxed (P2): as above. */
		uint64_t b = atomic_load_explicit(&t->busy_since, memory_order_relaxed);

		busy |= b != 0;
		if (!waiter && !stuck && b != 0 && now - b > STUCK_NS)
			stuck = relief_helps(t, b);
	}
	if (stuck && s->nthreads < MAX_POOL_THREADS && pool_spawn(s) < 0)
		coord_log(COORD_LOG_ERROR, "cannot add a serving thread");
	pthread_mutex_lock(&s->base.lock);
	for (struct conn *k = s->conns; k; k = k->next) {
		/* Relaxed (P4): a hint; the holder re-checks stalled. */
		uint64_t d = atomic_load_explicit(&k->partial_deadline, memory_order_relaxed);
		int why = STALL_NONE, none = STALL_NONE;

		keepalive(k, now);
		/* P6: what waits behind a closure that runs long goes back. */
		coord_srv_take_back(&k->p, now);
		if (d && now >= d)
			/* Relaxed (H1): a hint, as above. */
			why = atomic_load_explicit(&k->open, memory_order_relaxed)
				      ? STALL_PARTIAL
				      : STALL_HANDSHAKE;
		else if (idle_over(k, now))
			why = STALL_IDLE;
		/* Relaxed (P4): read back by the thread that sees the EOF. */
		if (why && atomic_compare_exchange_strong_explicit(&k->stalled, &none, why,
								   memory_order_relaxed,
								   memory_order_relaxed))
			shutdown(k->fd, SHUT_RD); /* its holder reads EOF: closes (P4) */
	}
	pthread_mutex_unlock(&s->base.lock);
	return busy;
}

/* M1: connections were freed and none for TRIM_QUIET_NS (or very many):
 * give the pages malloc keeps of them back (the acceptor's, between polls). */
void trim(struct srv *s)
{
	if (!s->freed || (s->freed < TRIM_MANY && coord_now_ns() - s->freed_ns < TRIM_QUIET_NS))
		return;
	malloc_trim(0);
	s->freed = 0;
}
