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
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>

#include "excommon.h"
#include "trainer_model.h"

#define MAX_PROCS 64 /* local processes */
#define WINDOW 64    /* steps in flight */

struct opts {
	struct ex_opts x; /* the common ones (excommon.h) */
	double lr;
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

/* The line's fields by priority on a terminal (losses: 6 while there are none). */
static const int prio[EX_NFIELDS] = {
	[EX_F_EPOCH] = 0, [EX_F_LOSS] = 1, [EX_F_MODEL] = 2, [EX_F_UP] = 3,
	[EX_F_RT] = 5,	  [EX_F_STEP] = 7, [EX_F_RATE] = 8,  [EX_F_LOST] = 6
};

/* The bar (or a line per epoch) with the training accuracy (aux: correct). */
static void draw(struct ex_progress *pg, int final)
{
	char acc[48];

	snprintf(acc, sizeof(acc), "acc %.1f%%", pg->n ? 100 * pg->aux / pg->n : 0);
	ex_progress_draw(pg, final, acc);
}

static void account(struct ex_progress *pg, const void *val, size_t len)
{
	struct tm_step_result res;

	if (len != sizeof(res))
		return;
	memcpy(&res, val, sizeof(res));
	pg->loss += res.loss_sum;
	pg->aux += res.correct;
	pg->n += res.n;
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
				  .batch = o->x.batch };
	struct tm_dataset_args da = { .seed = o->x.seed };
	static struct ex_progress pg; /* its latency window: 16 KiB */
	struct ex_loop l = { .pg = &pg,
			     .o = &o->x,
			     .fn = "train_step",
			     .creator = "dataset",
			     .args = &a,
			     .len = sizeof(a),
			     .pw_args = &da,
			     .pw_len = sizeof(da),
			     .window = WINDOW,
			     .grace = 60,
			     .account = account,
			     .draw = draw };

	pg = (struct ex_progress){ .c = c,
				   .tty = isatty(1),
				   .quiet = o->x.quiet,
				   .total = (uint64_t)o->x.epochs * o->x.steps,
				   .epochs = o->x.epochs,
				   .prio = prio,
				   .model_label = "" };
	return ex_train(&l, start_step, end_step, err);
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

/* The trainer's own option: --lr. */
static int trainer_opt(void *ctx, int ch, const char *arg)
{
	struct opts *o = ctx;

	if (ch != 'l')
		return -1;
	o->lr = strtod(arg, NULL);
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = { { "lr", required_argument, NULL, 'l' },
					    { NULL, 0, NULL, 0 } };
	const struct ex_extra x = { .lo = lo, .opt = trainer_opt, .ctx = o, .usage = usage };

	ex_opts_defaults(&o->x, "trainer");
	o->x.epochs = 10;
	o->x.batch = 64;
	o->x.ckpt_every = 500;
	o->lr = 0.1;
	if (ex_parse(argc, argv, &o->x, &x) < 0)
		return -1;
	if (o->x.batch > TM_BATCH_MAX || o->x.local + o->x.ps > MAX_PROCS || !(o->lr > 0))
		return ex_bad_option(&o->x);
	return 0;
}

int main(int argc, char **argv)
{
	struct ex_run run = { 0 };
	struct coord_error err = { 0 };
	struct vars v;
	struct opts o;
	uint64_t start = 0, end = 0;
	double loss0, acc0, loss, acc, t0;
	int r;

	if (parse(argc, argv, &o) < 0)
		return 2;
	r = ex_run_start(&run, &o.x, tm_register, "libtrainer_fns.so");
	if (r < 0)
		goto out;
	if (!o.x.quiet)
		printf("coord trainer: %u workers, %u ps tasks, transport %s; MLP %d-%d-1, "
		       "batch %u, lr %g\n",
		       coord_num_workers(run.c), coord_num_ps(run.c), o.x.transport, TM_D, TM_H,
		       o.x.batch, o.lr);
	/* Whole or not at all, onto however many ps tasks run now. */
	if (o.x.ckpt_dir && ex_ckpt_resume(run.c, o.x.ckpt_dir, &start, o.x.quiet, &err) < 0) {
		r = -1;
		goto out;
	}
	r = create_vars(run.c, o.x.seed, &v, &err);
	if (r == 0)
		r = evaluate(run.c, &v, &loss0, &acc0, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg);
		goto out;
	}
	if (!o.x.quiet)
		printf("before: held-out loss %.4f, accuracy %.1f%%\n", loss0, 100 * acc0);
	t0 = ex_now_s();
	r = train(run.c, &o, start, &v, &end, &err);
	if (r == 0)
		r = evaluate(run.c, &v, &loss, &acc, &err);
	if (r < 0) {
		fprintf(stderr, "trainer: %s\n", err.msg);
		goto out;
	}
	printf("after:  held-out loss %.4f, accuracy %.1f%% (%.1f s, %llu steps)\n", loss,
	       100 * acc, ex_now_s() - t0, (unsigned long long)(end - start));
out:
	ex_run_stop(&run);
	return r < 0 ? 1 : 0;
}
