// SPDX-License-Identifier: MIT
/*
 * runtime/store/vs_add.c - the store's adds (varstore.h): element by
 * element, and a large assign_add split over helper threads.
 *
 * Why helpers: over tcp an assign_add of MiBs is a transfer, then the add
 * under the variable's stripes, then the reply; the add (two streams read,
 * one written) is on that path alone, and while it runs the sender waits
 * and the other CPUs of the ps have nothing to do.  TensorFlow's ps runs
 * the same elementwise op on its intra-op thread pool.  So an add of
 * ADD_PAR_MIN floats or more is cut into pieces of ADD_PIECE that the
 * caller and the helpers claim from one counter (one fewer helper than
 * online CPUs, at most ADD_HELPERS_MAX, started on the first such add).
 * The caller claims pieces too: if no helper runs (a loaded machine), it
 * adds them all itself, and waits only for pieces a helper already holds.
 *
 *   H1  One job at a time: a second large add while one runs adds alone.
 *   H2  A helper works on a job only between taking it (under lock, busy
 *       + 1) and letting go (under lock, busy - 1, after its last piece);
 *       the caller withdraws the job (under lock) once it claims nothing
 *       more, then waits for busy 0: every piece is added before it
 *       returns, and no helper touches the job after.
 *   H3  The caller holds the variable's stripes throughout; helpers take
 *       no stripe, only the pool's lock (after the stripes, V3).
 *
 * Synchronization:
 *   field            written by (how)                read by (how)           order
 *   job, seq, busy,  callers, helpers (under lock)   the same                lock
 *   stop, nth
 *   job->next        callers, helpers (relaxed RMW)  the same                none: a claim
 *                                                                            counter; the
 *                                                                            data is ordered
 *                                                                            by lock (H2)
 *   the pieces' data a helper (plain, under H2)      the caller, then the    the lock: busy - 1
 *                                                    stripes' next holder    -> the caller's
 *                                                                            wait
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/store/varstore.h"

#define ADD_PAR_MIN (1u << 20) /* floats: 4 MiB (a wake-up is small against its add) */
#define ADD_PIECE (16u << 10)  /* floats: 64 KiB */
#define ADD_HELPERS_MAX 3u

struct add_job {
	float *d;
	const float *s;
	size_t n;
	_Atomic size_t next; /* the next piece to claim */
};

struct coord_vs_adders {
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	pthread_t th[ADD_HELPERS_MAX];
	unsigned nth; /* helpers started */
	bool started, stop;
	struct add_job *job;
	uint64_t seq; /* jobs posted */
	unsigned busy;
};

/*
 * @d[i] += @s[i], i < @n, four floats at a time (GCC's vector extension):
 * -O2's cost model leaves the plain loop scalar (it would need a scalar
 * tail and a runtime alias check), and a scalar float add is a helper call
 * under TCG: the rig's ps spent ~40 ms a MiB in it (issue 25).  The same
 * adds, element by element, as the plain loop.
 */
void coord_vs_add_floats(float *d, const float *s, size_t n)
{
	typedef float v4 __attribute__((vector_size(16)));
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		v4 a, b;

		memcpy(&a, d + i, sizeof(a));
		memcpy(&b, s + i, sizeof(b));
		a += b;
		memcpy(d + i, &a, sizeof(a));
	}
	for (; i < n; i++)
		d[i] += s[i];
}

/* Claim and add pieces of @j until none is left. */
static void run_pieces(struct add_job *j)
{
	for (;;) {
		/* Relaxed: a claim counter; the pieces' data is ordered by the
		 * pool's lock (H2). */
		size_t p = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		size_t at = p * ADD_PIECE;

		if (at >= j->n)
			return;
		coord_vs_add_floats(j->d + at, j->s + at,
				    j->n - at < ADD_PIECE ? j->n - at : ADD_PIECE);
	}
}

static void *helper_main(void *arg)
{
	struct coord_vs_adders *a = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&a->lock);
	for (;;) {
		struct add_job *j;

		while (!a->stop && (!a->job || a->seq == seen))
			pthread_cond_wait(&a->work, &a->lock);
		if (a->stop)
			break;
		j = a->job; /* H2: taken */
		seen = a->seq;
		a->busy++;
		pthread_mutex_unlock(&a->lock);
		run_pieces(j);
		pthread_mutex_lock(&a->lock);
		if (--a->busy == 0) /* H2: let go */
			pthread_cond_broadcast(&a->idle);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

int coord_vs_adders_create(struct coord_vs_adders **out)
{
	struct coord_vs_adders *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->work, NULL);
	pthread_cond_init(&a->idle, NULL);
	*out = a;
	return 0;
}

void coord_vs_adders_destroy(struct coord_vs_adders *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = true;
	pthread_cond_broadcast(&a->work);
	pthread_mutex_unlock(&a->lock);
	for (unsigned i = 0; i < a->nth; i++)
		pthread_join(a->th[i], NULL);
	pthread_cond_destroy(&a->work);
	pthread_cond_destroy(&a->idle);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

/* The helpers, once (under a->lock): one fewer than the online CPUs. */
static void start_helpers(struct coord_vs_adders *a)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = ncpu > 1 ? (unsigned)(ncpu - 1) : 0;

	a->started = true;
	if (want > ADD_HELPERS_MAX)
		want = ADD_HELPERS_MAX;
	while (a->nth < want && pthread_create(&a->th[a->nth], NULL, helper_main, a) == 0)
		a->nth++;
}

void coord_vs_add(struct coord_vs_adders *a, float *d, const float *s, size_t n)
{
	struct add_job j = { .d = d, .s = s, .n = n };
	bool posted = false;

	if (a && n >= ADD_PAR_MIN) {
		pthread_mutex_lock(&a->lock);
		if (!a->started)
			start_helpers(a);
		if (a->nth && !a->job) { /* H1 */
			a->job = &j;
			a->seq++;
			posted = true;
			pthread_cond_broadcast(&a->work);
		}
		pthread_mutex_unlock(&a->lock);
	}
	if (!posted) {
		coord_vs_add_floats(d, s, n);
		return;
	}
	run_pieces(&j);
	pthread_mutex_lock(&a->lock);
	a->job = NULL; /* H2: withdrawn; wait for those who took it */
	while (a->busy)
		pthread_cond_wait(&a->idle, &a->lock);
	pthread_mutex_unlock(&a->lock);
}
