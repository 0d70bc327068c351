// SPDX-License-Identifier: MIT
/*
 * examples/trainer.c - the main job: train a small MLP by asynchronous SGD
 * with ParameterServerStrategy semantics on a coord cluster.
 *
 *   trainer                          in-process workers and ps (default)
 *   trainer --transport tcp --local 4
 *                                    4 coord-worker and 2 coord-ps processes
 *                                    on loopback, stopped at the end
 *   trainer --spec cluster.json      an existing cluster (tcp)
 *
 * The model, data and worker functions are in trainer_model.c (also built
 * as libtrainer_fns.so for coord-worker).  Each step is one closure: it
 * reads the parameters from the ps, computes one mini-batch's gradient from
 * its worker's own data stream (a per-worker "dataset" resource) and applies
 * it with assign_add.  The loop keeps a window of steps in flight, joins at
 * each epoch, checkpoints every --ckpt-every steps (after a join, so the
 * snapshot is exact) and evaluates on held-out data at the start and end.
 * A run given the same --ckpt-dir resumes from its last checkpoint, whole
 * (also onto another --ps: the variables are re-placed, and it says so), or
 * stops with the reason and leaves that checkpoint as it is.  Local coord-ps
 * tasks get the checkpoint dir as their --ckpt-root.  --kill-worker-every
 * SIGKILLs and restarts local workers; without --epochs the run goes on by
 * whole epochs until --kills of them were lost and are back.  On a terminal
 * the progress line is redrawn in place and never wider than it (no wrap,
 * nothing stale); the latency figures are coord_metrics() percentiles.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <coord/var.h>

#include "trainer_model.h"

#define MAX_PROCS 64
#define WINDOW 64 /* steps in flight */

struct opts {
	const char *transport, *spec, *ckpt_dir;
	unsigned workers, ps, local, epochs, steps, batch, ckpt_every, kills;
	int epochs_set; /* --epochs given: no longer for --kill-worker-every */
	double lr, kill_every;
	uint64_t seed;
	int quiet;
};

/* ---- local server processes (--local) ----------------------------------------- */

struct proc {
	pid_t pid;
	unsigned port;
	int is_ps;
	unsigned task;
};

static struct proc procs[MAX_PROCS];
static unsigned nprocs;
static char worker_bin[PATH_MAX], ps_bin[PATH_MAX], fns_lib[PATH_MAX];
/* --ckpt-dir, absolute: the local coord-ps tasks' checkpoint root too. */
static char ckpt_abs[PATH_MAX];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Paths of the servers: $COORD_WORKER_BIN etc., else beside this binary. */
static void find_binaries(void)
{
	char self[PATH_MAX], *dir;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	self[n > 0 ? n : 0] = 0;
	dir = dirname(self);
	snprintf(worker_bin, sizeof(worker_bin), "%s",
		 getenv("COORD_WORKER_BIN") ? getenv("COORD_WORKER_BIN") : "");
	if (!worker_bin[0])
		snprintf(worker_bin, sizeof(worker_bin), "%s/../tools/coord-worker", dir);
	snprintf(ps_bin, sizeof(ps_bin), "%s",
		 getenv("COORD_PS_BIN") ? getenv("COORD_PS_BIN") : "");
	if (!ps_bin[0])
		snprintf(ps_bin, sizeof(ps_bin), "%s/../tools/coord-ps", dir);
	snprintf(fns_lib, sizeof(fns_lib), "%s/libtrainer_fns.so", dir);
}

/* Start a server; wait for its "... listening on port P" line. */
static int spawn(struct proc *p, unsigned port)
{
	char listen[32], task[16], line[128], fmt[64];
	int fds[2];
	FILE *f;

	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	snprintf(task, sizeof(task), "%u", p->task);
	if (pipe(fds) < 0)
		return -1;
	p->pid = fork();
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the trainer */
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (p->is_ps && ckpt_abs[0])
			execl(ps_bin, ps_bin, "--listen", listen, "--task", task, "--log", "error",
			      "--ckpt-root", ckpt_abs, (char *)NULL);
		else if (p->is_ps)
			execl(ps_bin, ps_bin, "--listen", listen, "--task", task, "--log", "error",
			      (char *)NULL);
		else
			execl(worker_bin, worker_bin, "--fns", fns_lib, "--listen", listen, "--log",
			      "error", (char *)NULL);
		fprintf(stderr, "trainer: cannot run %s: %s\n", p->is_ps ? ps_bin : worker_bin,
			strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	snprintf(fmt, sizeof(fmt), "%s listening on port %%u",
		 p->is_ps ? "coord-ps" : "coord-worker");
	if (p->pid < 0 || !f || !fgets(line, sizeof(line), f) || sscanf(line, fmt, &p->port) != 1) {
		if (p->pid > 0)
			kill(p->pid, SIGKILL);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

static void stop_all(void)
{
	for (unsigned i = 0; i < nprocs; i++)
		if (procs[i].pid > 0)
			kill(procs[i].pid, SIGTERM);
	for (unsigned i = 0; i < nprocs; i++)
		if (procs[i].pid > 0)
			waitpid(procs[i].pid, NULL, 0);
	nprocs = 0;
}

/* Start @nw workers and @nps ps tasks; the spec of that cluster as JSON. */
static char *start_local(unsigned nw, unsigned nps)
{
	size_t cap = 64 + 32 * (size_t)(nw + nps), off = 0;
	char *json = malloc(cap);

	find_binaries();
	for (unsigned i = 0; i < nw + nps && i < MAX_PROCS; i++) {
		struct proc *p = &procs[nprocs];

		p->is_ps = i >= nw;
		p->task = p->is_ps ? i - nw : i;
		if (spawn(p, 0) < 0) {
			fprintf(stderr, "trainer: could not start %s (build it: ninja -C build)\n",
				p->is_ps ? ps_bin : worker_bin);
			stop_all();
			free(json);
			return NULL;
		}
		nprocs++;
	}
	off += (size_t)snprintf(json + off, cap - off, "{\"worker\": [");
	for (unsigned i = 0; i < nw; i++)
		off += (size_t)snprintf(json + off, cap - off, "%s\"127.0.0.1:%u\"", i ? ", " : "",
					procs[i].port);
	off += (size_t)snprintf(json + off, cap - off, "], \"ps\": [");
	for (unsigned i = 0; i < nps; i++)
		off += (size_t)snprintf(json + off, cap - off, "%s\"127.0.0.1:%u\"", i ? ", " : "",
					procs[nw + i].port);
	snprintf(json + off, cap - off, "]}");
	return json;
}

/* --kill-worker-every: SIGKILL a random worker, restart it on its port. */
static void kill_one_worker(unsigned nw, int quiet)
{
	struct proc *p = &procs[(unsigned)rand() % nw];
	/* On a terminal the message takes the progress line's place (erased
	 * with EL); the next draw puts the line back under it. */
	const char *pre = isatty(1) ? "\r\033[K" : "";
	pid_t old = p->pid;

	if (old <= 0) /* its restart failed: nothing to kill (never kill(-1)) */
		return;
	kill(old, SIGKILL);
	waitpid(old, NULL, 0);
	if (spawn(p, p->port) < 0) {
		p->pid = -1;
		fprintf(stderr, "%strainer: worker %u killed; restart on port %u failed\n", pre,
			p->task, p->port);
		return;
	}
	if (!quiet)
		fprintf(stderr, "%strainer: killed worker %u (pid %d), restarted on port %u\n", pre,
			p->task, (int)old, p->port);
}

/* On a terminal, coord's log lines (a worker lost...) take the progress
 * line's place as the kill messages do, so that no half-line is left. */
static void log_over_progress(int level, const char *msg, void *arg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	(void)arg;
	fprintf(stderr, "\r\033[Kcoord %s: %s\n", level >= 0 && level < 4 ? names[level] : "log",
		msg);
}

/* Every kill so far seen as a loss, and no worker down: the time for the
 * next one (else it waits, so that each kill is one loss and one recovery). */
static int all_back(struct coord *c, unsigned kills)
{
	struct coord_metrics m;

	return coord_metrics(c, &m, NULL, 0) == 0 && m.losses >= kills && m.workers_down == 0;
}

/*
 * --kill-worker-every without --epochs: has the demo shown what it is for?
 * @kills SIGKILLs sent, all of them seen as losses, and no worker still
 * down (each is back, or dropped past opts.recovery_limit_ms).
 */
static int kill_demo_done(struct coord *c, unsigned kills, unsigned want)
{
	return kills >= want && all_back(c, kills);
}

/* ---- the training loop ------------------------------------------------------------- */

struct vars {
	coord_var_t w1, b1, w2, b2;
};

static int create_vars(struct coord *c, uint64_t seed, struct vars *v, struct coord_error *err)
{
	static struct tm_params p;
	uint64_t d1[2] = { TM_H, TM_D }, d0[1] = { TM_H };
	int r;

	tm_params_init(&p, seed);
	/* Idempotent: after a restore these are the restored variables. */
	r = coord_var_create(c, TM_W1, 2, d1, p.w1, &v->w1, err);
	if (!r)
		r = coord_var_create(c, TM_B1, 1, d0, p.b1, &v->b1, err);
	if (!r)
		r = coord_var_create(c, TM_W2, 1, d0, p.w2, &v->w2, err);
	if (!r)
		r = coord_var_create(c, TM_B2, 0, NULL, &p.b2, &v->b2, err);
	return r;
}

static int evaluate(struct coord *c, const struct vars *v, double *loss, double *acc,
		    struct coord_error *err)
{
	static struct tm_params p;
	struct coord_var_op ops[4] = {
		{ .op = COORD_VAR_READ, .var = v->w1, .n = TM_H * TM_D, .dst = p.w1 },
		{ .op = COORD_VAR_READ, .var = v->b1, .n = TM_H, .dst = p.b1 },
		{ .op = COORD_VAR_READ, .var = v->w2, .n = TM_H, .dst = p.w2 },
		{ .op = COORD_VAR_READ, .var = v->b2, .n = 1, .dst = &p.b2 },
	};
	int r = coord_var_batch(c, ops, 4, err);

	if (r == 0)
		tm_evaluate(&p, 0xe7a1ull, 10000, loss, acc);
	return r;
}

struct progress {
	struct coord *c;
	int tty, quiet;
	double t0, last_draw, last_turn, last_line;
	uint64_t total, done, start;
	double loss, correct, n; /* since the last line */
	unsigned epoch, epochs;
	/* Step round trips of the last 1-2 s: now less the snapshot of two
	 * turns (a second each) ago (coord_hist_sub()). */
	struct coord_hist rt_old, rt_older, rt_win;
};

/* The terminal's width: TIOCGWINSZ, else $COLUMNS, else 80. */
static int term_cols(void)
{
	struct winsize ws;
	const char *e = getenv("COLUMNS");

	if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (e && atoi(e) > 0)
		return atoi(e);
	return 80;
}

/* The line is the fields that fit, by priority (0 first, at most NFIELDS),
 * in this order. */
enum { F_EPOCH, F_STEP, F_LOSS, F_ACC, F_RATE, F_UP, F_LOST, F_RT, NFIELDS };

/*
 * Compose the fields into @line of at most @cols - 1 columns (the last
 * column would wrap on some terminals): those of highest priority that fit,
 * then a bar [###   ] of what room is left (8 to 26 columns, or none).
 */
static void fit_line(char *line, size_t cap, int cols, double frac, char f[NFIELDS][48],
		     const int prio[NFIELDS])
{
	int room = cols - 1, used = 0, keep[NFIELDS] = { 0 }, bar;
	size_t off = 0;

	for (int p = 0; p <= NFIELDS; p++)
		for (int i = 0; i < NFIELDS; i++)
			if (prio[i] == p && f[i][0] &&
			    used + (used ? 1 : 0) + (int)strlen(f[i]) <= room) {
				used += (used ? 1 : 0) + (int)strlen(f[i]);
				keep[i] = 1;
			}
	bar = room - used - 1;
	bar = bar > 26 ? 26 : bar < 8 ? 0 : bar;
	line[0] = 0;
	if (bar) {
		int in = bar - 2, fill = (int)(in * (frac > 1 ? 1 : frac));

		off += (size_t)snprintf(line, cap, "[%.*s%*s]", fill, "########################",
					in - fill, "");
	}
	for (int i = 0; i < NFIELDS && off < cap; i++)
		if (keep[i])
			off += (size_t)snprintf(line + off, cap - off, "%s%s", off ? " " : "",
						f[i]);
}

/* Rotate the round-trip snapshots once a second; the window in rt_win. */
static void rt_window(struct progress *pg, const struct coord_metrics *m, double t)
{
	if (t - pg->last_turn >= 1.0) {
		pg->rt_older = pg->rt_old;
		pg->rt_old = m->round_trip_ns;
		pg->last_turn = t;
	}
	if (coord_hist_sub(&pg->rt_win, &m->round_trip_ns, &pg->rt_older) < 0 ||
	    pg->rt_win.count < 8)
		pg->rt_win = m->round_trip_ns; /* too few yet: since the start */
}

/* The bar (or a line per epoch): steps, loss, accuracy, and what the
 * coordinator's metrics say (B7): steps/s, workers up, losses and
 * recoveries, the median and 99th percentile round trip of a step (from
 * schedule to its value) over the last second or two. */
static void draw(struct progress *pg, int final)
{
	double t = now_s(),
	       rate = (double)(pg->done - pg->start) / (t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9);
	double loss = pg->n ? pg->loss / pg->n : 0, acc = pg->n ? 100 * pg->correct / pg->n : 0;
	static struct coord_metrics m; /* 11 KiB: the histograms */
	char f[NFIELDS][48], line[512];
	int keep;
	/* Losses come before latency once there are some (--kill-worker-every). */
	int prio[NFIELDS] = { [F_EPOCH] = 0, [F_LOSS] = 1, [F_ACC] = 2, [F_UP] = 3,
			      [F_RT] = 5,    [F_STEP] = 7, [F_RATE] = 8 };

	if (pg->quiet || coord_metrics(pg->c, &m, NULL, 0) < 0)
		return;
	/* An epoch's end keeps its line at most once a second, and the last. */
	keep = final && (t - pg->last_line >= 1 || pg->done >= pg->total);
	if (keep)
		pg->last_line = t;
	rt_window(pg, &m, t);
	prio[F_LOST] = m.losses ? 4 : 6;
	snprintf(f[F_EPOCH], sizeof(f[0]), "epoch %u/%u", pg->epoch, pg->epochs);
	snprintf(f[F_STEP], sizeof(f[0]), "step %llu/%llu", (unsigned long long)pg->done,
		 (unsigned long long)pg->total);
	snprintf(f[F_LOSS], sizeof(f[0]), "loss %.4f", loss);
	snprintf(f[F_ACC], sizeof(f[0]), "acc %.1f%%", acc);
	snprintf(f[F_RATE], sizeof(f[0]), "%.0f steps/s", rate);
	snprintf(f[F_UP], sizeof(f[0]), "workers %u/%u up", m.workers_up, m.workers);
	snprintf(f[F_LOST], sizeof(f[0]), "%llu lost, %llu recovered", (unsigned long long)m.losses,
		 (unsigned long long)m.recoveries);
	snprintf(f[F_RT], sizeof(f[0]), "rt p50 %.2f p99 %.2f ms",
		 coord_hist_percentile(&pg->rt_win, 50) / 1e6,
		 coord_hist_percentile(&pg->rt_win, 99) / 1e6);
	if (!pg->rt_win.count)
		f[F_RT][0] = 0; /* no sample yet: left out */
	if (pg->tty) {
		/* \r, the line, then erase what a longer line left (EL, \033[K). */
		fit_line(line, sizeof(line), term_cols(),
			 (double)pg->done / (pg->total ? pg->total : 1), f, prio);
		printf("\r%s\033[K%s", line, keep ? "\n" : "");
		fflush(stdout);
	} else if (keep) {
		printf("%s  %s  train %s  %s  %s  %s (%s)  %s\n", f[F_EPOCH], f[F_STEP], f[F_LOSS],
		       f[F_ACC], f[F_RATE], f[F_UP], f[F_LOST], f[F_RT]);
		fflush(stdout);
	}
	pg->last_draw = t;
}

static void account(struct progress *pg, struct coord_rv *rv)
{
	const void *val;
	size_t len;
	struct tm_step_result res;

	if (coord_rv_fetch(rv, &val, &len, NULL) == 0 && len == sizeof(res)) {
		memcpy(&res, val, sizeof(res));
		pg->loss += res.loss_sum;
		pg->correct += res.correct;
		pg->n += res.n;
	}
	coord_rv_put(rv);
}

/*
 * Train from @start_step to the end of --epochs; with --kill-worker-every
 * and no --epochs, on by whole epochs until --kills workers were killed and
 * are back (at most a minute more).  @end_step: where it stopped.
 */
static int train(struct coord *c, const struct opts *o, uint64_t start_step, const struct vars *v,
		 uint64_t *end_step, struct coord_error *err)
{
	struct tm_step_args a = { .w1 = v->w1,
				  .b1 = v->b1,
				  .w2 = v->w2,
				  .b2 = v->b2,
				  .lr = (float)o->lr,
				  .batch = o->batch };
	struct tm_dataset_args da = { .seed = o->seed };
	struct coord_rv *win[WINDOW];
	struct progress pg = { .c = c,
			       .tty = isatty(1),
			       .quiet = o->quiet,
			       .t0 = now_s(),
			       .total = (uint64_t)o->epochs * o->steps,
			       .epochs = o->epochs };
	struct coord_pw *dataset;
	struct coord_call call = { .args = &a, .len = sizeof(a), .npw = 1 };
	uint64_t step = start_step, last_ckpt = start_step;
	double next_kill = o->kill_every > 0 ? now_s() + o->kill_every : 0;
	double demo_until = now_s() + 60 + o->kills * o->kill_every;
	int demo = o->kill_every > 0 && !o->epochs_set;
	unsigned head = 0, nwin = 0, kills = 0;
	int r;

	r = coord_fn_lookup(c, "train_step", &call.fn, err);
	if (r == 0)
		r = coord_per_worker_create(c, "dataset", &da, sizeof(da), &dataset, err);
	if (r < 0)
		return r;
	call.pw = &dataset;
	pg.done = pg.start = start_step;
	pg.t0 = now_s();
	while (step < pg.total && r == 0) {
		uint64_t epoch_end = (step / o->steps + 1) * o->steps;

		pg.epoch = (unsigned)(step / o->steps) + 1;
		for (; step < epoch_end && r == 0; step++) {
			if (nwin == WINDOW) { /* the window is full: take the oldest */
				account(&pg, win[head]);
				head = (head + 1) % WINDOW;
				nwin--;
				pg.done++;
			}
			r = coord_schedule_call(c, &call, &win[(head + nwin) % WINDOW], err);
			if (r == 0)
				nwin++;
			if (pg.tty && now_s() - pg.last_draw > 0.1)
				draw(&pg, 0);
			if (next_kill && now_s() >= next_kill && (!demo || kills < o->kills) &&
			    all_back(c, kills)) {
				kill_one_worker(nprocs - o->ps, o->quiet);
				kills++;
				next_kill = now_s() + o->kill_every;
			}
		}
		while (nwin) {
			account(&pg, win[head]);
			head = (head + 1) % WINDOW;
			nwin--;
			pg.done++;
		}
		if (r == 0)
			r = coord_join(c, err); /* the epoch: every step applied */
		if (r == 0 && demo && step >= pg.total && !kill_demo_done(c, kills, o->kills) &&
		    now_s() < demo_until) {
			pg.total += o->steps; /* one more epoch */
			pg.epochs++;
		}
		draw(&pg, 1);
		pg.loss = pg.correct = pg.n = 0;
		if (r == 0 && o->ckpt_dir &&
		    (step - last_ckpt >= o->ckpt_every || step == pg.total)) {
			r = coord_checkpoint_save(c, o->ckpt_dir, step, err);
			if (r == 0 && !o->quiet)
				printf("checkpoint: step %llu saved to %s\n",
				       (unsigned long long)step, o->ckpt_dir);
			last_ckpt = step;
		}
	}
	*end_step = step;
	while (nwin) {
		coord_rv_put(win[head]);
		head = (head + 1) % WINDOW;
		nwin--;
	}
	coord_per_worker_put(dataset);
	return r;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: trainer [--transport inproc|tcp] [--local N] [--spec SPEC]\n"
		   "               [--workers N] [--ps N] [--epochs E] [--steps S] [--batch B]\n"
		   "               [--lr LR] [--seed N] [--ckpt-dir DIR] [--ckpt-every STEPS]\n"
		   "               [--kill-worker-every SEC [--kills N]] [--quiet]\n"
		   "\n"
		   "Train a 16-32-1 MLP on a synthetic classification task by asynchronous SGD,\n"
		   "the parameters on parameter servers, one closure per mini-batch step.\n"
		   "\n"
		   "  --transport T   inproc (default: workers are threads, ps stores in this\n"
		   "                  process) or tcp\n"
		   "  --local N       tcp: start N coord-worker processes and --ps coord-ps\n"
		   "                  processes on loopback (default 4 when --transport tcp)\n"
		   "  --spec SPEC     tcp: an existing cluster (\"worker\" and \"ps\" jobs)\n"
		   "  --workers N     inproc workers (default 4)\n"
		   "  --ps N          ps tasks (default 2)\n"
		   "  --epochs E      epochs (default 10); --steps S: steps per epoch (200)\n"
		   "  --batch B       examples per step (64); --lr LR: learning rate (0.1)\n"
		   "  --ckpt-dir DIR  checkpoint there every --ckpt-every steps (500) and at the\n"
		   "                  end; a run given the same DIR resumes from the last one\n"
		   "  --kill-worker-every SEC  with --local: SIGKILL a random worker every SEC\n"
		   "                  seconds and restart it on its port (preemption, live);\n"
		   "                  without --epochs, training goes on by whole epochs until\n"
		   "                  --kills workers (3) were killed and are back\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = { { "transport", required_argument, NULL, 't' },
					    { "local", required_argument, NULL, 'L' },
					    { "spec", required_argument, NULL, 's' },
					    { "workers", required_argument, NULL, 'w' },
					    { "ps", required_argument, NULL, 'p' },
					    { "epochs", required_argument, NULL, 'e' },
					    { "steps", required_argument, NULL, 'S' },
					    { "batch", required_argument, NULL, 'b' },
					    { "lr", required_argument, NULL, 'l' },
					    { "seed", required_argument, NULL, 'r' },
					    { "ckpt-dir", required_argument, NULL, 'c' },
					    { "ckpt-every", required_argument, NULL, 'C' },
					    { "kill-worker-every", required_argument, NULL, 'k' },
					    { "kills", required_argument, NULL, 'K' },
					    { "quiet", no_argument, NULL, 'q' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	int ch;

	*o = (struct opts){ .transport = "inproc",
			    .workers = 4,
			    .ps = 2,
			    .epochs = 10,
			    .steps = 200,
			    .batch = 64,
			    .ckpt_every = 500,
			    .kills = 3,
			    .lr = 0.1,
			    .seed = 1 };
	while ((ch = getopt_long(argc, argv, "hq", lo, NULL)) != -1) {
		switch (ch) {
		case 't':
			o->transport = optarg;
			break;
		case 'L':
			o->local = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 's':
			o->spec = optarg;
			break;
		case 'w':
			o->workers = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'p':
			o->ps = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'e':
			o->epochs = (unsigned)strtoul(optarg, NULL, 10);
			o->epochs_set = 1;
			break;
		case 'S':
			o->steps = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'b':
			o->batch = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'l':
			o->lr = strtod(optarg, NULL);
			break;
		case 'r':
			o->seed = strtoull(optarg, NULL, 10);
			break;
		case 'c':
			o->ckpt_dir = optarg;
			break;
		case 'C':
			o->ckpt_every = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'k':
			o->kill_every = strtod(optarg, NULL);
			break;
		case 'K':
			o->kills = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'q':
			o->quiet = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (strcmp(o->transport, "tcp") == 0 && !o->spec && !o->local)
		o->local = 4;
	if (o->spec || o->local)
		o->transport = "tcp";
	if (!o->workers || !o->ps || o->ps > 16 || !o->epochs || !o->steps || !o->batch ||
	    o->batch > TM_BATCH_MAX || o->local + o->ps > MAX_PROCS || !(o->lr > 0) ||
	    (o->kill_every > 0 && !o->local) || !o->kills || o->kills > 1000) {
		fprintf(stderr, "trainer: bad option (see --help)\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct coord_registry *reg = NULL;
	struct coord_spec *spec = NULL;
	struct coord *c = NULL;
	struct coord_opts co;
	struct coord_error err = { 0 };
	struct vars v;
	struct opts o;
	uint64_t start = 0, end = 0;
	double loss0, acc0, loss, acc, t0;
	char *json = NULL;
	int r;

	if (parse(argc, argv, &o) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	if (isatty(1) && !o.quiet)
		coord_set_log_fn(log_over_progress, NULL);
	if (coord_registry_create(&reg) || tm_register(reg)) {
		fprintf(stderr, "trainer: cannot register the functions\n");
		return 1;
	}
	coord_opts_init(&co);
	co.registry = reg;
	co.transport = o.transport;
	co.inproc_workers = o.workers;
	co.inproc_ps = o.ps;
	r = 0;
	if (o.ckpt_dir) {
		mkdir(o.ckpt_dir, 0755);
		if (!realpath(o.ckpt_dir, ckpt_abs)) {
			fprintf(stderr, "trainer: --ckpt-dir %s: %s\n", o.ckpt_dir,
				strerror(errno));
			r = -1;
			goto out;
		}
		o.ckpt_dir = ckpt_abs;
	}
	if (o.local) {
		json = start_local(o.local, o.ps);
		r = json ? coord_spec_parse(json, &spec, &err) : -1;
	} else if (o.spec) {
		r = coord_spec_from_arg(o.spec, &spec, NULL, &err);
	}
	if (r == 0)
		r = coord_create(spec, &co, &c, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg[0] ? err.msg : "cannot start the cluster");
		goto out;
	}
	if (!o.quiet)
		printf("coord trainer: %u workers, %u ps tasks, transport %s; MLP %d-%d-1, "
		       "batch %u, lr %g\n",
		       coord_num_workers(c), coord_num_ps(c), o.transport, TM_D, TM_H, o.batch,
		       o.lr);
	if (o.ckpt_dir) {
		/* Whole or not at all, onto however many ps tasks run now. */
		r = coord_checkpoint_restore(c, o.ckpt_dir, &start, &err);
		if (r == -ENOENT) {
			r = 0;
			start = 0;
		} else if (r < 0) {
			fprintf(stderr,
				"trainer: cannot resume from %s: %s\n"
				"trainer: nothing was restored and the checkpoint is left as it "
				"is\n",
				o.ckpt_dir, err.msg);
			goto out;
		} else if (!o.quiet) {
			printf("resumed from the checkpoint of step %llu in %s%s%s\n",
			       (unsigned long long)start, o.ckpt_dir, err.msg[0] ? ": " : "",
			       err.msg);
		}
	}
	if (r == 0)
		r = create_vars(c, o.seed, &v, &err);
	if (r == 0)
		r = evaluate(c, &v, &loss0, &acc0, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg);
		goto out;
	}
	if (!o.quiet)
		printf("before: held-out loss %.4f, accuracy %.1f%%\n", loss0, 100 * acc0);
	t0 = now_s();
	r = train(c, &o, start, &v, &end, &err);
	if (r == 0)
		r = evaluate(c, &v, &loss, &acc, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg);
		goto out;
	}
	printf("after:  held-out loss %.4f, accuracy %.1f%% (%.1f s, %llu steps)\n", loss,
	       100 * acc, now_s() - t0, (unsigned long long)(end - start));
out:
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	stop_all();
	free(json);
	return r < 0 ? 1 : 0;
}
