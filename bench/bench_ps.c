// SPDX-License-Identifier: MIT
/*
 * bench/bench_ps.c - parameter-server variables at tensor sizes (issue 24):
 * bandwidth of read, assign_add, gather and scatter_add at 64 KiB, 1 MiB,
 * 16 MiB and 64 MiB per call, over the inproc transport (stores in this
 * process) and over tcp (one coord-ps process on loopback), against
 *   raw stream  a plain loopback TCP connection to a forked server moving
 *               the same bytes per call, large writes (one send() of the
 *               whole size, recv(MSG_WAITALL) into the whole buffer), one
 *               1-byte acknowledgement per call, TCP_NODELAY on both ends
 *               (as coord sets): <-ps (the server sends: what a read and a
 *               gather move) and ->ps (the client sends: what an
 *               assign_add and a scatter_add move); ->ps also as coord-ps
 *               takes in a large frame ("raw ->ps lowat": poll() with
 *               SO_RCVLOWAT 256 KiB, then recv() what is there,
 *               tcp_server.c W1), and each round's ->ps ratios are taken
 *               against the faster of the two;
 *   memcpy      one memcpy() of the size between two warm buffers: the
 *               physical floor of a copy (what inproc is measured against).
 * Implementations alternate within each round (the order flips every
 * round; round 0 warms up and is not counted); every ratio is taken within
 * a round and reported as the median with min - max over the rounds.  A
 * sample moves about 256 MiB (--quick: 16 MiB) in calls of one size.
 * Target (printed, not asserted): tcp read and assign_add >= 0.8x the raw
 * stream at >= 1 MiB.  Each size also prints this process's CPU time per
 * GiB moved by each implementation (getrusage: the client's side over tcp,
 * where its copies are; on a loaded machine steadier than GB/s).
 *
 * gather / scatter_add: rows of 64 floats (256 B) of a [262144, 64]
 * partitioned variable of one shard, distinct ids (a random permutation),
 * size / 256 of them per call.
 *
 * Then embedding gather: rows/s for batches of 1,024 uniform random ids
 * (a few repeat) from a [1M, 16] table partitioned over 1, 2 and 4 ps
 * tasks (one shard per task), one calling thread and four, over tcp (ps
 * processes) and inproc.
 *
 * Public API only (libcoord.so); coord-ps and coord-worker are the built
 * binaries (COORD_PS_BIN / COORD_WORKER_BIN override).
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <coord/coord.h>
#include <coord/var.h>

#include "stats.h"

#define MAXSZ (64u << 20)
#define ROWF 64 /* floats per row of the gather variable */
#define GROWS (MAXSZ / (4 * ROWF))
#define FRAME (256u << 20)
#define EMB_ROWS (1u << 20)
#define EMB_DIM 16
#define EMB_BATCH 1024
#define LOWAT_STEP (256u << 10) /* tcp_server.c's */

static const char *ps_bin, *worker_bin, *fns_lib;

/* ---- the raw stream: a forked server -------------------------------------------------- */

struct raw_hdr {
	uint64_t len;
	uint32_t dir; /* 0: client -> server, 1: server -> client, 2: as 0, raw_take() */
	uint32_t pad;
};

/* Take in @len bytes as coord-ps takes in a large frame (tcp_server.c
 * W1): poll() until 256 KiB more (or the rest) have come (SO_RCVLOWAT),
 * then recv() all there is without blocking.  (A blocking recv() with the
 * mark hangs once a partial copy leaves less than the mark to come.) */
static int raw_take(int fd, uint8_t *buf, size_t len)
{
	int lowat = 1, r = 0;

	for (size_t off = 0; off < len && r == 0;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int want = len - off < LOWAT_STEP ? (int)(len - off) : (int)LOWAT_STEP;
		ssize_t n;

		if (len < LOWAT_STEP)
			want = 1; /* a small payload: the default */
		if (want != lowat &&
		    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
			lowat = want;
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			r = -1;
		n = recv(fd, buf + off, len - off, MSG_DONTWAIT);
		if (n > 0)
			off += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			r = -1;
	}
	if (lowat != 1) {
		lowat = 1;
		setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	}
	return r;
}

static void raw_serve(int lfd)
{
	uint8_t *buf = malloc(MAXSZ), ack = 1;
	struct raw_hdr h;
	int fd = accept(lfd, NULL, NULL), one = 1;

	if (!buf || fd < 0)
		_exit(1);
	/* the options coord-ps sets on the connections it accepts */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(buf, 7, MAXSZ);
	while (bench_recv_all(fd, &h, sizeof(h)) == 0 && h.len <= MAXSZ) {
		int r = h.dir == 1   ? bench_send_all(fd, buf, h.len)
			: h.dir == 2 ? raw_take(fd, buf, h.len)
				     : bench_recv_all(fd, buf, h.len);

		if (r || (h.dir != 1 && bench_send_all(fd, &ack, 1)))
			break;
	}
	_exit(0);
}

static pid_t raw_pid;

/* Fork the server (before any coordinator thread exists); the client's fd. */
static int raw_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fd, one = 1;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&a, &al))
		return -1;
	raw_pid = fork();
	if (raw_pid < 0)
		return -1;
	if (raw_pid == 0)
		raw_serve(lfd);
	close(lfd);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int raw_call(int fd, void *buf, size_t len, unsigned dir)
{
	struct raw_hdr h = { .len = len, .dir = dir };
	uint8_t ack;

	if (bench_send_all(fd, &h, sizeof(h)))
		return -1;
	return dir != 1 ? (bench_send_all(fd, buf, len) || bench_recv_all(fd, &ack, 1))
			: bench_recv_all(fd, buf, len);
}

/* ---- coordinators ------------------------------------------------------------------------- */

static pid_t ps_pids[4], wpid;
static unsigned nps_procs;

static int ps_start(unsigned task, unsigned *port)
{
	char t[16], fr[16];
	char *argv[] = { (char *)ps_bin, "--listen", "127.0.0.1:0", "--task", t,
			 "--max-frame",	 fr,	     "--log",	    "error",  NULL };

	snprintf(t, sizeof(t), "%u", task);
	snprintf(fr, sizeof(fr), "%u", FRAME);
	ps_pids[task] = bench_spawn(argv, "coord-ps", port);
	return ps_pids[task] < 0 ? -1 : 0;
}

static void ps_stop(void)
{
	for (unsigned i = 0; i < nps_procs; i++)
		bench_reap(ps_pids[i]);
	nps_procs = 0;
}

static struct coord_registry *reg;
static unsigned wport;

/* A coordinator: inproc with @nps stores, or tcp with @nps fresh coord-ps. */
static struct coord *make(bool tcp, unsigned nps)
{
	struct coord_spec *spec = NULL;
	struct coord_error err = { .msg = "" };
	struct coord_opts o;
	struct coord *c = NULL;
	char json[512];
	size_t k;

	coord_opts_init(&o);
	o.registry = reg;
	o.max_frame = FRAME;
	o.start_delay_ms = 0;
	if (!tcp) {
		o.inproc_workers = 1;
		o.inproc_ps = nps;
		if (coord_create(NULL, &o, &c, &err)) {
			fprintf(stderr, "bench_ps: coordinator: %s\n", err.msg);
			exit(1);
		}
		return c;
	}
	o.transport = "tcp";
	k = (size_t)snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"], \"ps\": [",
			     wport);
	for (unsigned i = 0; i < nps; i++) {
		unsigned port;

		if (ps_start(i, &port)) {
			ps_stop();
			exit(1);
		}
		nps_procs = i + 1;
		k += (size_t)snprintf(json + k, sizeof(json) - k, "%s\"127.0.0.1:%u\"",
				      i ? ", " : "", port);
	}
	snprintf(json + k, sizeof(json) - k, "]}");
	if (coord_spec_parse(json, &spec, &err) || coord_create(spec, &o, &c, &err)) {
		fprintf(stderr, "bench_ps: coordinator: %s\n", err.msg);
		ps_stop();
		exit(1);
	}
	coord_spec_destroy(spec);
	return c;
}

static void unmake(struct coord *c)
{
	coord_destroy(c);
	ps_stop();
}

/* ---- the bandwidth rounds ----------------------------------------------------------------- */

enum impl {
	RAW_OUT,
	RAW_IN,
	RAW_OUT_LW,
	MEMCPY,
	IN_READ,
	IN_ADD,
	IN_GATHER,
	IN_SCATTER,
	TCP_READ,
	TCP_ADD,
	TCP_GATHER,
	TCP_SCATTER,
	NIMPL
};
static const char *const impl_name[NIMPL] = {
	"raw stream ->ps", "raw stream <-ps",	"raw ->ps lowat", "memcpy",
	"inproc read",	   "inproc assign_add", "inproc gather",  "inproc scatter_add",
	"tcp read",	   "tcp assign_add",	"tcp gather",	  "tcp scatter_add",
};

struct side {
	struct coord *c;
	coord_var_t v;
	struct coord_pvar pv;
};

static struct side in, tcp;
static int raw_fd;
static float *src, *dst;
static int64_t *perm;

static int one_call(enum impl i, size_t sz)
{
	struct side *s = i >= TCP_READ ? &tcp : &in;
	struct coord_error err = { .msg = "" };
	size_t nrows = sz / (4 * ROWF);
	int r;

	switch (i) {
	case RAW_OUT:
		return raw_call(raw_fd, src, sz, 0);
	case RAW_IN:
		return raw_call(raw_fd, dst, sz, 1);
	case RAW_OUT_LW:
		return raw_call(raw_fd, src, sz, 2);
	case MEMCPY:
		memcpy(dst, src, sz);
		__asm__ __volatile__("" ::: "memory");
		return 0;
	case IN_READ:
	case TCP_READ:
		r = coord_var_read(s->c, s->v, 0, sz / 4, dst, &err);
		break;
	case IN_ADD:
	case TCP_ADD: {
		struct coord_var_op op = {
			.op = COORD_VAR_ASSIGN_ADD, .var = s->v, .n = sz / 4, .src = src
		};

		r = coord_var_batch(s->c, &op, 1, &err);
		break;
	}
	case IN_GATHER:
	case TCP_GATHER:
		r = coord_pvar_gather(s->c, &s->pv, perm, nrows, dst, &err);
		break;
	default:
		r = coord_pvar_scatter_add(s->c, &s->pv, perm, nrows, src, &err);
		break;
	}
	if (r)
		fprintf(stderr, "bench_ps: %s: %s\n", impl_name[i], err.msg);
	return r;
}

/* CPU time (user + system) of this process, all threads, in ns. */
static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* CPU time of process @pid, all threads, in ns (the sum of its threads'
 * time on a CPU, /proc/PID/task/TID/schedstat); 0 if it cannot be read. */
static uint64_t pid_cpu_ns(pid_t pid)
{
	char path[64];
	uint64_t sum = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		unsigned long long ns;
		char f[64 + 256 + 16];
		FILE *fp;

		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s/schedstat", path, e->d_name);
		fp = fopen(f, "r");
		if (fp && fscanf(fp, "%llu", &ns) == 1)
			sum += ns;
		if (fp)
			fclose(fp);
	}
	closedir(d);
	return sum;
}

/* The process at the other end of @i (the raw stream's server, coord-ps),
 * or 0 (inproc, memcpy). */
static pid_t peer_of(enum impl i)
{
	return i <= RAW_OUT_LW ? raw_pid : i >= TCP_READ ? ps_pids[0] : 0;
}

/* One sample: GB/s over about @bytes moved in calls of @sz; *@cpu: this
 * process's CPU ms per GiB moved (the client's side of tcp: what its
 * copies cost, less sensitive than GB/s to a loaded machine); *@pcpu: the
 * peer process's (the ps side), 0 for none. */
static double sample(enum impl i, size_t sz, uint64_t bytes, double *cpu, double *pcpu)
{
	uint64_t n = bytes / sz ? bytes / sz : 1, t0 = bench_now_ns(), c0 = cpu_ns();
	pid_t peer = peer_of(i);
	uint64_t p0 = peer ? pid_cpu_ns(peer) : 0;
	double gib;

	for (uint64_t k = 0; k < n; k++)
		if (!bench_check(one_call(i, sz) == 0, "%s failed", impl_name[i]))
			return 0;
	gib = (double)(n * sz) / (double)(1ull << 30);
	*cpu = (double)(cpu_ns() - c0) / 1e6 / gib;
	*pcpu = peer ? (double)(pid_cpu_ns(peer) - p0) / 1e6 / gib : 0;
	return (double)(n * sz) / (double)(bench_now_ns() - t0);
}

/* The ratios the issue asks for: which impl over which baseline. */
static const struct {
	enum impl a, b;
} ratios[] = {
	{ TCP_READ, RAW_IN },	  { TCP_ADD, RAW_OUT },	  { TCP_GATHER, RAW_IN },
	{ TCP_SCATTER, RAW_OUT }, { IN_READ, MEMCPY },	  { IN_ADD, MEMCPY },
	{ IN_GATHER, MEMCPY },	  { IN_SCATTER, MEMCPY },
};
#define NRATIO (sizeof(ratios) / sizeof(ratios[0]))

/* A round's baseline: ->ps, the faster of the raw stream's two ways to
 * take in (a blocking recv(MSG_WAITALL); poll with SO_RCVLOWAT as coord-ps). */
static double base_of(const double *v, enum impl b)
{
	return b == RAW_OUT && v[RAW_OUT_LW] > v[RAW_OUT] ? v[RAW_OUT_LW] : v[b];
}

/* --tcp-only: the raw stream, memcpy and tcp read / assign_add only. */
static bool tcp_only;

static bool skipped(enum impl i)
{
	return tcp_only && i > RAW_OUT_LW && i != MEMCPY && i != TCP_READ && i != TCP_ADD;
}

/* Both ends' CPU per GiB, tcp over the raw stream, per round: on a loaded
 * machine steadier than GB/s (what the copies and system calls cost). */
static void cpu_ratios(size_t sz, struct bench_samples *cs, struct bench_samples *ps)
{
	static const enum impl a[2] = { TCP_READ, TCP_ADD }, b[2] = { RAW_IN, RAW_OUT };
	struct bench_stats st;

	for (unsigned k = 0; k < 2; k++) {
		struct bench_samples r = { 0 };

		for (size_t j = 0; j < cs[a[k]].n; j++)
			bench_samples_add(&r, (cs[a[k]].v[j] + ps[a[k]].v[j]) /
						      (cs[b[k]].v[j] + ps[b[k]].v[j]));
		bench_summarize(&r, false, &st);
		printf("# CPU of both ends per GiB, %s / %s at %zu KiB: median %.2fx (min %.2fx - "
		       "max %.2fx)\n",
		       impl_name[a[k]], impl_name[b[k]], sz >> 10, st.median, st.min, st.max);
		bench_samples_free(&r);
	}
}

static void bandwidth(size_t sz, unsigned repeats, uint64_t bytes, double *read_ratio,
		      double *add_ratio)
{
	struct bench_samples s[NIMPL] = { 0 }, rr[NRATIO] = { 0 }, cs[NIMPL] = { 0 },
			     ps[NIMPL] = { 0 };
	struct bench_stats st[NIMPL], rs, cst;
	char title[128];

	for (unsigned round = 0; round <= repeats; round++) {
		double v[NIMPL] = { 0 }, c[NIMPL] = { 0 }, pc[NIMPL] = { 0 };

		for (unsigned k = 0; k < NIMPL; k++) {
			enum impl i = (enum impl)(round & 1 ? NIMPL - 1 - k : k);

			if (!skipped(i))
				v[i] = sample(i, sz, bytes, &c[i], &pc[i]);
		}
		if (round == 0)
			continue; /* warm-up */
		for (unsigned i = 0; i < NIMPL; i++) {
			if (skipped(i))
				continue;
			bench_samples_add(&s[i], v[i]);
			bench_samples_add(&cs[i], c[i]);
			bench_samples_add(&ps[i], pc[i]);
		}
		for (unsigned k = 0; k < NRATIO; k++)
			if (!skipped(ratios[k].a))
				bench_samples_add(&rr[k], v[ratios[k].a] / base_of(v, ratios[k].b));
	}
	snprintf(title, sizeof(title), "ps bandwidth, %zu KiB per call (GB/s)", sz >> 10);
	bench_header(title, "GB/s");
	for (unsigned i = 0; i < NIMPL; i++)
		bench_summarize(&s[i], true, &st[i]);
	for (unsigned i = 0; i < NIMPL; i++) {
		const struct bench_stats *base = &st[MEMCPY];

		if (skipped(i))
			continue;

		if (i >= TCP_READ || i <= RAW_OUT_LW)
			base = i == TCP_READ || i == TCP_GATHER || i == RAW_IN ? &st[RAW_IN]
									       : &st[RAW_OUT];
		bench_point(impl_name[i], (double)sz);
		bench_row(impl_name[i], &st[i], base, true);
	}
	for (unsigned k = 0; k < NRATIO; k++) {
		char name[96];

		snprintf(name, sizeof(name), "%s / %s at %zu KiB", impl_name[ratios[k].a],
			 impl_name[ratios[k].b], sz >> 10);
		bench_ratio_row(name, &rr[k], &rs);
		if (k == 0)
			*read_ratio = rs.median;
		if (k == 1)
			*add_ratio = rs.median;
	}
	/* The client's CPU per GiB (the raw stream's client and tcp's: the
	 * server is another process; inproc: everything). */
	printf("# this process's CPU (user + sys) per GiB moved at %zu KiB, median (min - max):",
	       sz >> 10);
	for (unsigned i = 0; i < NIMPL; i++) {
		if (skipped(i))
			continue;
		bench_summarize(&cs[i], false, &cst);
		printf("%s %s %.0f ms (%.0f - %.0f)", i ? ";" : "", impl_name[i], cst.median,
		       cst.min, cst.max);
	}
	printf("\n# the peer process's CPU per GiB at %zu KiB (the raw stream's server, "
	       "coord-ps):",
	       sz >> 10);
	for (unsigned i = 0; i < NIMPL; i++) {
		if (skipped(i) || !peer_of(i))
			continue;
		bench_summarize(&ps[i], false, &cst);
		printf("%s %s %.0f ms (%.0f - %.0f)", i ? ";" : "", impl_name[i], cst.median,
		       cst.min, cst.max);
	}
	printf("\n");
	cpu_ratios(sz, cs, ps);
	for (unsigned i = 0; i < NIMPL; i++) {
		bench_samples_free(&s[i]);
		bench_samples_free(&cs[i]);
		bench_samples_free(&ps[i]);
	}
	for (unsigned k = 0; k < NRATIO; k++)
		bench_samples_free(&rr[k]);
}

/* ---- embedding gather ---------------------------------------------------------------------- */

struct emb_thread {
	pthread_t t;
	struct coord *c;
	const struct coord_pvar *pv;
	uint64_t ns, rows;
	unsigned seed;
	int failed;
};

static void *emb_main(void *arg)
{
	struct emb_thread *e = arg;
	int64_t ids[EMB_BATCH];
	float *out = malloc(sizeof(float) * EMB_BATCH * EMB_DIM);
	uint64_t t0 = bench_now_ns(), until = t0 + e->ns;

	if (!out) {
		e->failed = 1;
		return NULL;
	}
	while (bench_now_ns() < until) {
		for (unsigned k = 0; k < EMB_BATCH; k++)
			ids[k] = (int64_t)((unsigned)rand_r(&e->seed) % EMB_ROWS);
		if (coord_pvar_gather(e->c, e->pv, ids, EMB_BATCH, out, NULL)) {
			e->failed = 1;
			break;
		}
		e->rows += EMB_BATCH;
	}
	e->ns = bench_now_ns() - t0;
	free(out);
	return NULL;
}

/* rows/s of @nthr threads gathering for @ns each. */
static double emb_sample(struct coord *c, const struct coord_pvar *pv, unsigned nthr, uint64_t ns,
			 unsigned seed)
{
	struct emb_thread th[4] = { 0 };
	bool made[4] = { false };
	double rate = 0;

	for (unsigned i = 0; i < nthr; i++) {
		th[i] = (struct emb_thread){ .c = c, .pv = pv, .ns = ns, .seed = seed + i };
		made[i] = pthread_create(&th[i].t, NULL, emb_main, &th[i]) == 0;
		th[i].failed = !made[i];
	}
	for (unsigned i = 0; i < nthr; i++) {
		if (made[i])
			pthread_join(th[i].t, NULL);
		bench_check(!th[i].failed, "embedding gather failed");
		rate += th[i].ns ? (double)th[i].rows * 1e9 / (double)th[i].ns : 0;
	}
	return rate;
}

static void embedding(unsigned repeats, uint64_t ns, double *scale)
{
	static const unsigned nps[] = { 1, 2, 4 };
	uint64_t dims[2] = { EMB_ROWS, EMB_DIM };
	struct bench_stats st[2][3][2];

	bench_header("embedding gather, [1M, 16] table, batches of 1,024 ids (rows/s)", "rows/s");
	for (unsigned t = 0; t < 2; t++)
		for (unsigned p = 0; p < 3; p++) {
			struct coord_partitioner part = { .num_shards = nps[p] };
			struct coord_error err = { .msg = "" };
			struct coord *c = make(t == 1, nps[p]);
			struct coord_pvar pv;

			if (coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv, &err)) {
				fprintf(stderr, "bench_ps: embedding table: %s\n", err.msg);
				exit(1);
			}
			for (unsigned th = 0; th < 2; th++) {
				struct bench_samples s = { 0 };
				char name[64];

				(void)emb_sample(c, &pv, th ? 4 : 1, ns / 4, 99); /* warm-up */
				for (unsigned r = 0; r < repeats; r++)
					bench_samples_add(
						&s, emb_sample(c, &pv, th ? 4 : 1, ns, r * 16));
				bench_summarize(&s, true, &st[t][p][th]);
				snprintf(name, sizeof(name), "%s %u ps, %u thread%s",
					 t ? "tcp" : "inproc", nps[p], th ? 4 : 1, th ? "s" : "");
				bench_point(t ? (th ? "tcp 4 threads" : "tcp 1 thread")
					      : (th ? "inproc 4 threads" : "inproc 1 thread"),
					    nps[p]);
				bench_row(name, &st[t][p][th], &st[t][0][th], true);
				bench_samples_free(&s);
			}
			unmake(c);
		}
	*scale = st[1][2][1].median / st[1][0][1].median;
}

int main(int argc, char **argv)
{
	static const size_t all_sizes[] = { 64u << 10, 1u << 20, 16u << 20, 64u << 20 };
	uint64_t dims[1] = { MAXSZ / 4 }, gdims[2] = { GROWS, ROWF };
	struct coord_partitioner one = { .num_shards = 1 };
	struct coord_error err = { .msg = "" };
	double rd[4] = { 0 }, ad[4] = { 0 }, scale = 0;
	unsigned nsz, seed = 1;
	struct bench_args a;
	char *wargv[8];
	bool met = true;
	unsigned long o_tcp = 0;
	const struct bench_opt opts[] = {
		{ "tcp-only", "only the raw stream, memcpy and tcp read / assign_add; no embedding",
		  0, 1, &o_tcp, true },
	};

	bench_parse_args_ex(argc, argv, &a, opts, sizeof(opts) / sizeof(opts[0]));
	tcp_only = o_tcp;
	ps_bin = getenv_or("COORD_PS_BIN", BENCH_PS_BIN);
	worker_bin = getenv_or("COORD_WORKER_BIN", BENCH_WORKER_BIN);
	fns_lib = getenv_or("BENCH_FNS", BENCH_FNS_LIB);
	signal(SIGPIPE, SIG_IGN);
	nsz = a.quick ? 2 : 4;
	src = malloc(MAXSZ);
	dst = malloc(MAXSZ);
	perm = malloc(sizeof(*perm) * GROWS);
	if (!src || !dst || !perm)
		return 1;
	for (size_t i = 0; i < MAXSZ / 4; i++)
		src[i] = (float)(i & 7) * 0.125f;
	memset(dst, 0, MAXSZ);
	for (size_t i = 0; i < GROWS; i++)
		perm[i] = (int64_t)i;
	for (size_t i = GROWS - 1; i > 0; i--) {
		size_t j = (size_t)rand_r(&seed) % (i + 1);
		int64_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	raw_fd = raw_start();
	if (raw_fd < 0) {
		fprintf(stderr, "bench_ps: raw stream: %s\n", strerror(errno));
		return 1;
	}
	wargv[0] = (char *)worker_bin;
	wargv[1] = "--fns";
	wargv[2] = (char *)fns_lib;
	wargv[3] = "--listen";
	wargv[4] = "127.0.0.1:0";
	wargv[5] = "--log";
	wargv[6] = "error";
	wargv[7] = NULL;
	wpid = bench_spawn(wargv, "coord-worker", &wport);
	if (wpid < 0 || coord_registry_create(&reg))
		return 1;

	in.c = make(false, 1);
	tcp.c = make(true, 1);
	for (int k = 0; k < 2; k++) {
		struct side *s = k ? &tcp : &in;

		if (coord_var_create(s->c, "bw", 1, dims, NULL, &s->v, &err) ||
		    coord_pvar_create(s->c, "bwrows", 2, gdims, NULL, &one, &s->pv, &err)) {
			fprintf(stderr, "bench_ps: variables: %s\n", err.msg);
			return 1;
		}
	}
	for (unsigned i = 0; i < nsz; i++) {
		bandwidth(all_sizes[i], a.repeats, a.quick ? 16u << 20 : 256u << 20, &rd[i],
			  &ad[i]);
		if (i > 0)
			met = met && rd[i] >= 0.8 && ad[i] >= 0.8;
	}
	coord_destroy(in.c);
	unmake(tcp.c);
	close(raw_fd);
	bench_reap(raw_pid);

	if (!tcp_only)
		embedding(a.repeats, a.quick ? 100000000ull : 1000000000ull, &scale);
	bench_reap(wpid);
	coord_registry_destroy(reg);
	printf("SUMMARY bench_ps read_1m=%.2f add_1m=%.2f read_16m=%.2f add_16m=%.2f "
	       "read_64m=%.2f add_64m=%.2f emb_tcp_4ps_over_1ps=%.2f target_0.8x_raw=%s\n",
	       rd[1], ad[1], rd[2], ad[2], rd[3], ad[3], scale, bench_met(met));
	free(src);
	free(dst);
	free(perm);
	return bench_exit_code();
}
