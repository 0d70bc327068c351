// SPDX-License-Identifier: MIT
/*
 * runtime/core/pw.c - releasing per-worker resources (S9): when the last handle
 * of a resource is put, every worker that made it destroys its component
 * while the coordinator lives, not only at coord_destroy().
 *
 * A worker's components live in its exec environment (runtime/core/exec.c): the
 * worker thread's for inproc, the server connection's for tcp and rdma
 * (transport/server/tcp_server.c), each used by one thread only.  So the release
 * is a message to the thread that owns the environment: the dispatcher that
 * serves the worker, which destroys the component itself (inproc) or sends
 * the worker a PW_FREE frame on its connection (tcp and rdma,
 * transport/engine/conn.c; the server destroys it when it reads the frame).
 *
 *   P1  Nothing uses a resource once its references are gone.  Every
 *       closure that names it holds a reference from schedule until it is
 *       freed, which is after it is final (coord_closure_drop_contents()):
 *       a queued, running, put-back or windowed closure keeps it alive.
 *       Final over the network means its result came back, so the
 *       worker's function returned; a lazy create happens only inside such
 *       a closure's run, so none can race the release.
 *   P2  Delivery.  coord_pw_retire() pushes node i of the handle on
 *       dispatcher i's pw_dead list (lock-free, a CAS per dispatcher), for
 *       every dispatcher, and wakes them as a push of work does.  Each
 *       takes its list with one exchange, in its own thread, and hands the
 *       uids to its workers: inproc, coord_exec_res_release() on the
 *       worker's environment; tcp and rdma, a PW_FREE frame to each live
 *       connection (a worker that never made it ignores the uid).  A
 *       connection that is down has nothing to free: its server destroyed
 *       that connection's components when it closed, and the worker comes
 *       back with a fresh environment.  The last dispatcher to take its
 *       node frees the handle (@pending).
 *   P3  Order.  A dispatcher looks for released resources at the start of
 *       each round and before it runs or sends a batch it took.  A closure
 *       scheduled after the put that retired a handle is pushed after the
 *       node; the dispatcher that pops it therefore sees the node first,
 *       and its worker destroys the component before it runs that closure
 *       (in-process calls carried inline in the ring, Q2, run inside the
 *       take and are not ordered so; they cannot have per-worker arguments).
 *   P4  coord_destroy().  Releases racing it (a closure freed by the
 *       transport's stop or an epoch callback) must not wake a transport
 *       that is stopping: a waker counts itself in pw_wakers (seq_cst) and
 *       then reads pw_closed (seq_cst); coord_pw_close() sets pw_closed
 *       (seq_cst) and then waits for pw_wakers to be 0: either the waker
 *       sees the flag, or close sees the waker and waits for it.  Nodes
 *       nobody took are freed by coord_pw_fini(); the components they name
 *       die with their environments (inproc: coord_exec_env_fini() at the
 *       worker thread's end; tcp/rdma: the server's, at disconnection).
 *       A component is destroyed at most once: a release removes it from
 *       its environment.  Handles still held keep the coordinator's memory
 *       (held_after_destroy, as RemoteValues do); put after destroy, a
 *       handle is just freed, as no worker is left.
 *
 * Nothing here is on the schedule path: a put that is not the last one is
 * one atomic decrement (coordinator.c), and the dispatchers' look is a
 * relaxed load of a word on a line they read anyway. *
 * Synchronization: the shared fields, who writes them, who reads them, and
 * what orders the two.
 *   field            written by (how)                read by (how)           order
 *   pw->refs         schedule + (relaxed: the        the puts (acq_rel RMW)  the last put's
 *                    caller holds one), puts -                               acq_rel: every
 *                    (acq_rel, coord_per_worker_                             user's accesses
 *                    put(), coordinator.c)                                   before the retire
 *   pw->pending      coord_pw_retire() (relaxed,     the takers, -           the push CAS ->
 *                    before the push CAS); takers    (acq_rel RMW)           the take's acquire;
 *                    - (acq_rel, pw_node_done())                             the last taker frees
 *   node[i].pw,      coord_pw_retire() (plain,       dispatcher i, after     P2: the push CAS
 *   node[i].next     before its CAS)                 its exchange (plain)    (seq_cst) -> the
 *                                                                            acquire exchange
 *   d->pw_dead       coord_pw_retire() (seq_cst      d's thread (relaxed     P2; P3 (the push
 *                    CAS push, any thread); d's      look, then acquire      before a closure's
 *                    thread (acquire exchange)       exchange)               push); E3 for wakes
 *   d->pw_taken      d's thread (plain)              d's thread; destroy's   one thread; the
 *                                                    coord_pw_fini()         joins before fini
 *   c->pw_wakers     pw_wake() (seq_cst +, release   coord_pw_close()        P4: the Dekker pair
 *                    -)                              (seq_cst load)          with pw_closed
 *   c->pw_closed     coord_pw_close() (seq_cst)      pw_wake() (seq_cst)     P4 (as above)
 *   c->pw_live       create + (relaxed,              coord_pw_fini()         the dispatchers'
 *                    coordinator.c); the last taker  (relaxed, after the     joins and the epoch
 *                    - (relaxed)                     joins)                  barrier
 *   c->dead          coord_destroy() (relaxed)       coord_pw_retire(),      the caller's own
 *                                                    coord_per_worker_state  ordering of a put
 *                                                    () (relaxed)            after destroy (P4)
 */
#include <sched.h>
#include <stdlib.h>

#include "runtime/core/internal.h"

/* P2/P4: wake the dispatchers, as a push of work would, unless the
 * coordinator is stopping its transport. */
static void pw_wake(struct coord *c)
{
	/* seq_cst: P4's Dekker pair with coord_pw_close(): our count before
	 * our load of pw_closed, its store before its load of the count. */
	atomic_fetch_add_explicit(&c->pw_wakers, 1, memory_order_seq_cst);
	/* seq_cst: P4 (above). */
	if (!atomic_load_explicit(&c->pw_closed, memory_order_seq_cst))
		coord_queue_wake(c); /* the pushes' CAS were seq_cst RMWs (E3) */
	/* Release: P4: our use of the transport happens-before close's load
	 * that sees the count back at 0. */
	atomic_fetch_sub_explicit(&c->pw_wakers, 1, memory_order_release);
}

void coord_pw_retire(struct coord_pw *pw)
{
	struct coord *c = pw->c;

	/* Relaxed: set by coord_destroy() before it returns; a put after
	 * that is ordered after it by the caller (coord.h), and no put of
	 * the runtime's own runs then. */
	if (atomic_load_explicit(&c->dead, memory_order_relaxed)) {
		free(pw); /* P4: no worker is left to destroy anything */
		coord_dead_put(c);
		return;
	}
	/* Relaxed: published with the nodes by the CAS below. */
	atomic_store_explicit(&pw->pending, c->ndisp, memory_order_relaxed);
	for (unsigned i = 0; i < c->ndisp; i++) {
		struct coord_dispatcher *d = &c->disp[i];
		struct coord_pw_node *n = &pw->node[i];

		n->pw = pw;
		/* Relaxed: the CAS below checks it. */
		n->next = atomic_load_explicit(&d->pw_dead, memory_order_relaxed);
		/* seq_cst: release publishes the node and @pending to the
		 * taker's acquire exchange (P2); seq_cst makes it the RMW that
		 * the wake's E3 and the loop sleepers' Dekker pair need (P2,
		 * queue.c queue_push()). */
		while (!atomic_compare_exchange_weak_explicit(
			&d->pw_dead, &n->next, n, memory_order_seq_cst, memory_order_relaxed))
			;
	}
	pw_wake(c);
}

/* One dispatcher is done with @pw's node: the last one frees it (P2). */
static void pw_node_done(struct coord_pw *pw)
{
	struct coord *c = pw->c;

	/* acq_rel: the last taker frees @pw after every other taker read it. */
	if (atomic_fetch_sub_explicit(&pw->pending, 1, memory_order_acq_rel) == 1) {
		free(pw);
		/* Relaxed: a count read by coord_destroy() after the
		 * dispatchers stopped (their joins order it). */
		atomic_fetch_sub_explicit(&c->pw_live, 1, memory_order_relaxed);
	}
}

unsigned coord_dispatch_pw_take(struct coord_dispatcher *d, uint64_t *uids, unsigned max)
{
	unsigned n = 0;

	/* Relaxed: a look before the exchange, which orders. */
	if (!d->pw_taken && atomic_load_explicit(&d->pw_dead, memory_order_relaxed))
		/* Acquire: pairs with the CAS in coord_pw_retire(): the nodes,
		 * their handles' uids and @pending (P2). */
		d->pw_taken = atomic_exchange_explicit(&d->pw_dead, NULL, memory_order_acquire);
	while (n < max && d->pw_taken) {
		struct coord_pw_node *x = d->pw_taken;

		d->pw_taken = x->next; /* before the node may be freed */
		uids[n++] = x->pw->uid;
		pw_node_done(x->pw);
	}
	return n;
}

void coord_pw_close(struct coord *c)
{
	/* seq_cst: P4, the Dekker pair with pw_wake(). */
	atomic_store_explicit(&c->pw_closed, true, memory_order_seq_cst);
	/* seq_cst: P4 (above); also acquire: a waker's use of the transport
	 * happens-before we go on to stop it. */
	while (atomic_load_explicit(&c->pw_wakers, memory_order_seq_cst) != 0)
		sched_yield(); /* a waker is inside a few wake calls */
}

uint64_t coord_pw_fini(struct coord *c)
{
	for (unsigned i = 0; i < c->ndisp; i++) {
		uint64_t uid;

		while (coord_dispatch_pw_take(&c->disp[i], &uid, 1))
			;
	}
	/* Relaxed: every dispatcher has stopped (joined) and every epoch
	 * callback has run (urcu_bp_barrier()). */
	return atomic_load_explicit(&c->pw_live, memory_order_relaxed);
}
