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
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <coord/var.h>

#include "excommon.h"
#include "trainer_model.h"

#define MAX_PROCS 64 /* local processes */
#define WINDOW 64    /* steps in flight */

/* --ckpt-dir, absolute: the local coord-ps tasks' checkpoint root too. */
static char ckpt_abs[PATH_MAX];

struct opts {
	const char *transport, *spec, *ckpt_dir;
	unsigned workers, ps, local, epochs, steps, batch, ckpt_every, kills;
	int epochs_set; /* --epochs given: no longer for --kill-worker-every */
	double lr, kill_every;
	uint64_t seed;
	int quiet;
};

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
	double t0, last_draw, last_line;
	uint64_t total, done, start;
	double loss, correct, n; /* since the last line */
	unsigned epoch, epochs;
	struct ex_window rt; /* step round trips of the last 1-2 s */
};

/* The fields of the line, in their order. */
enum { F_EPOCH, F_STEP, F_LOSS, F_ACC, F_RATE, F_UP, F_LOST, F_RT, NFIELDS };

/* The bar (or a line per epoch): steps, loss, accuracy, and what the
 * coordinator's metrics say (B7): steps/s, workers up, losses and
 * recoveries, the median and 99th percentile round trip of a step (from
 * schedule to its value) over the last second or two. */
static void draw(struct progress *pg, int final)
{
	double t = ex_now_s(),
	       rate = (double)(pg->done - pg->start) / (t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9);
	double loss = pg->n ? pg->loss / pg->n : 0, acc = pg->n ? 100 * pg->correct / pg->n : 0;
	static struct coord_metrics m; /* 11 KiB: the histograms */
	char f[NFIELDS][48], line[512];
	const char *fp[NFIELDS];
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
	ex_window_update(&pg->rt, &m.round_trip_ns, t);
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
		 coord_hist_percentile(&pg->rt.win, 50) / 1e6,
		 coord_hist_percentile(&pg->rt.win, 99) / 1e6);
	if (!pg->rt.win.count)
		f[F_RT][0] = 0; /* no sample yet: left out */
	if (pg->tty) {
		/* \r, the line, then erase what a longer line left (EL, \033[K). */
		for (int i = 0; i < NFIELDS; i++)
			fp[i] = f[i];
		ex_fit_line(line, sizeof(line), ex_term_cols(),
			    (double)pg->done / (pg->total ? pg->total : 1), fp, prio, NFIELDS);
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
			       .t0 = ex_now_s(),
			       .total = (uint64_t)o->epochs * o->steps,
			       .epochs = o->epochs };
	struct coord_pw *dataset;
	struct coord_call call = { .args = &a, .len = sizeof(a), .npw = 1 };
	uint64_t step = start_step, last_ckpt = start_step;
	struct ex_kills kills;
	unsigned head = 0, nwin = 0;
	int r;

	r = coord_fn_lookup(c, "train_step", &call.fn, err);
	if (r == 0)
		r = coord_per_worker_create(c, "dataset", &da, sizeof(da), &dataset, err);
	if (r < 0)
		return r;
	call.pw = &dataset;
	ex_kills_init(&kills, o->kill_every, o->kills, !o->epochs_set, 60, o->quiet);
	pg.done = pg.start = start_step;
	pg.t0 = ex_now_s();
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
			if (pg.tty && ex_now_s() - pg.last_draw > 0.1)
				draw(&pg, 0);
			ex_kills_tick(&kills, c);
		}
		while (nwin) {
			account(&pg, win[head]);
			head = (head + 1) % WINDOW;
			nwin--;
			pg.done++;
		}
		if (r == 0)
			r = coord_join(c, err); /* the epoch: every step applied */
		if (r == 0 && step >= pg.total && ex_kills_more(&kills, c)) {
			pg.total += o->steps; /* one more epoch */
			pg.epochs++;
		}
		draw(&pg, 1);
		pg.loss = pg.correct = pg.n = 0;
		if (r == 0 && o->ckpt_dir &&
		    (step - last_ckpt >= o->ckpt_every || step == pg.total)) {
			r = ex_ckpt_save(c, o->ckpt_dir, step, o->quiet, err);
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
		coord_set_log_fn(ex_log_over_progress, NULL);
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
		r = ex_ckpt_dir(o.ckpt_dir, ckpt_abs);
		if (r < 0)
			goto out;
		o.ckpt_dir = ckpt_abs;
	}
	if (o.local) {
		json = ex_local_start("libtrainer_fns.so", o.local, o.ps,
				      ckpt_abs[0] ? ckpt_abs : NULL);
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
	/* Whole or not at all, onto however many ps tasks run now. */
	if (o.ckpt_dir && ex_ckpt_resume(c, o.ckpt_dir, &start, o.quiet, &err) < 0) {
		r = -1;
		goto out;
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
	t0 = ex_now_s();
	r = train(c, &o, start, &v, &end, &err);
	if (r == 0)
		r = evaluate(c, &v, &loss, &acc, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg);
		goto out;
	}
	printf("after:  held-out loss %.4f, accuracy %.1f%% (%.1f s, %llu steps)\n", loss,
	       100 * acc, ex_now_s() - t0, (unsigned long long)(end - start));
out:
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	ex_local_stop();
	free(json);
	return r < 0 ? 1 : 0;
}
