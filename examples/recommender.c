// SPDX-License-Identifier: MIT
/*
 * examples/recommender.c - the second main job: a wide & deep recommender
 * trained by asynchronous SGD on a synthetic click log whose generating
 * model is known (rec_model.h), so that its held-out AUC has a ceiling to
 * compare with: the AUC of the generating model's own probabilities.
 *
 *   recommender                      in-process workers and ps (default)
 *   recommender --local 4            4 coord-worker and 2 coord-ps processes
 *   recommender --spec cluster.json  an existing cluster (tcp)
 *
 * The embedding tables (one per field, the largest --vocab rows x 16, 1 M
 * by default) and the wide weights are partitioned variables: split by rows
 * into shards spread over the ps tasks.  Each step is one closure: it reads
 * the rows its mini-batch uses with one gather per table (ids deduplicated
 * by the library, one request per ps task) and the dense layers, and adds
 * its gradients with one scatter_add per table and ASSIGN_ADD.  The
 * coordinator evaluates AUC at every epoch's end (after a join) by gathering
 * the rows the held-out impressions use.  --kill-worker-every and
 * --ckpt-dir (checkpoint, and resume, also onto another --ps: the restore
 * re-places the shards) as in the trainer.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>

#include "excommon.h"
#include "rec_model.h"

#define WINDOW 16	 /* steps in flight */
#define CHUNK (1u << 20) /* floats per init / evaluation op */

/* --ckpt-dir, absolute: the local coord-ps tasks' checkpoint root too. */
static char ckpt_abs[PATH_MAX];

struct opts {
	const char *transport, *spec, *ckpt_dir, *plot;
	unsigned workers, ps, local, epochs, steps, batch, vocab0, eval_n, kills, ckpt_every,
		shards;
	int epochs_set, quiet, sgd;
	double lr_dense, lr_sparse, kill_every;
	uint64_t seed;
};

/* ---- variables and evaluation ----------------------------------------------------- */

struct model {
	struct rm_vars v;
	uint32_t vocab[RM_F];
	struct rm_dense d; /* the coordinator's copy, for evaluation */
	float *emb,
		*wide; /* the held-out impressions' rows: [RM_F][eval_n][RM_D], [RM_F][eval_n][RM_W] */
	int64_t *ids;	       /* their ids: [RM_F][eval_n] */
	struct rm_example *ex; /* the held-out impressions */
};

/* The held-out impressions: the same for every evaluation and run. */
#define EVAL_SEED 0xe7a1e7a1ull

/*
 * The table @name of @rows x @width, partitioned over the ps tasks: found
 * (after a restore, with the shard count the checkpoint has), else created
 * with zeros (the wide weights) or random rows (the embeddings), sent in
 * chunks that keep frames small.
 */
static int create_table(struct coord *c, const struct opts *o, const char *name, unsigned f,
			uint32_t rows, unsigned width, struct coord_pvar *pv, float *buf,
			struct coord_error *err)
{
	uint64_t dims[2] = { rows, width }, n = (uint64_t)rows * width;
	struct coord_error e = { 0 };
	int r = coord_pvar_lookup(c, name, pv, &e);

	if (r == 0) {
		if (pv->rows == rows && pv->row_len == width)
			return 0;
		snprintf(err->msg, sizeof(err->msg),
			 "'%s' exists with %llu rows x %llu (another --vocab, or an older "
			 "checkpoint?)",
			 name, (unsigned long long)pv->rows, (unsigned long long)pv->row_len);
		return err->code = -EEXIST;
	}
	if (r != -ENOENT) {
		*err = e;
		return r;
	}
	struct coord_partitioner p = { .num_shards = o->shards < rows ? o->shards : rows };

	r = coord_pvar_create(c, name, 2, dims, NULL, o->shards ? &p : NULL, pv, err);
	for (uint64_t off = 0; r == 0 && width == RM_D && off < n; off += CHUNK) {
		size_t k = n - off < CHUNK ? (size_t)(n - off) : CHUNK;

		rm_emb_init(o->seed, f, off, buf, k);
		r = coord_pvar_assign_add(c, pv, off, k, buf, err);
	}
	return r;
}

static int create_vars(struct coord *c, const struct opts *o, struct model *m,
		       struct coord_error *err)
{
	uint64_t dh[2] = { RM_H, RM_IN }, d1[1] = { RM_H };
	float *buf = malloc(CHUNK * sizeof(float));
	struct rm_stream st;
	char name[32];
	int r = buf ? 0 : -ENOMEM;

	rm_vocab(o->vocab0, m->vocab);
	for (unsigned f = 0; f < RM_F && r == 0; f++) {
		snprintf(name, sizeof(name), "rec/wide%u", f);
		r = create_table(c, o, name, f, m->vocab[f], RM_W, &m->v.wide[f], buf, err);
		snprintf(name, sizeof(name), "rec/emb%u", f);
		if (r == 0)
			r = create_table(c, o, name, f, m->vocab[f], RM_D, &m->v.emb[f], buf, err);
	}
	free(buf);
	m->emb = malloc((size_t)RM_F * o->eval_n * RM_D * sizeof(float));
	m->wide = malloc((size_t)RM_F * o->eval_n * RM_W * sizeof(float));
	m->ids = malloc((size_t)RM_F * o->eval_n * sizeof(int64_t));
	m->ex = malloc((size_t)o->eval_n * sizeof(*m->ex));
	if (r == 0 && (!m->emb || !m->wide || !m->ids || !m->ex))
		r = -ENOMEM;
	rm_stream_init(&st, EVAL_SEED);
	for (unsigned i = 0; r == 0 && i < o->eval_n; i++) {
		rm_next(&st, m->vocab, &m->ex[i]);
		for (unsigned f = 0; f < RM_F; f++)
			m->ids[(size_t)f * o->eval_n + i] = m->ex[i].id[f];
	}
	rm_dense_init(&m->d, o->seed);
	if (r == 0)
		r = coord_var_create(c, "rec/w1", 2, dh, m->d.w1, &m->v.w1, err);
	if (r == 0)
		r = coord_var_create(c, "rec/b1", 1, d1, m->d.b1, &m->v.b1, err);
	if (r == 0)
		r = coord_var_create(c, "rec/w2", 1, d1, m->d.w2, &m->v.w2, err);
	if (r == 0)
		r = coord_var_create(c, "rec/b2", 0, NULL, &m->d.b2, &m->v.b2, err);
	if (r == -ENOMEM)
		snprintf(err->msg, sizeof(err->msg), "no memory for the tables");
	return r;
}

static void free_model(struct model *m)
{
	free(m->emb);
	free(m->wide);
	free(m->ids);
	free(m->ex);
}

struct eval {
	double auc, logloss, ceiling_auc, ceiling_logloss, ctr;
};

/* Held-out AUC and log loss: the rows the held-out impressions use,
 * gathered per table (each distinct row read once), and the dense layers. */
static int evaluate(struct coord *c, struct model *m, unsigned n, struct eval *e,
		    struct coord_error *err)
{
	float *score = malloc(n * sizeof(float)), *truth = malloc(n * sizeof(float)),
	      *y = malloc(n * sizeof(float));
	double ll = 0, cll = 0, clicks = 0;
	int r = score && truth && y ? 0 : -ENOMEM;

	for (unsigned f = 0; f < RM_F && r == 0; f++) {
		r = coord_pvar_gather(c, &m->v.emb[f], m->ids + (size_t)f * n, n,
				      m->emb + (size_t)f * n * RM_D, err);
		if (r == 0)
			r = coord_pvar_gather(c, &m->v.wide[f], m->ids + (size_t)f * n, n,
					      m->wide + (size_t)f * n * RM_W, err);
	}
	if (r == 0)
		r = coord_var_read(c, m->v.w1, 0, RM_H * RM_IN, m->d.w1, err);
	if (r == 0)
		r = coord_var_read(c, m->v.b1, 0, RM_H, m->d.b1, err);
	if (r == 0)
		r = coord_var_read(c, m->v.w2, 0, RM_H, m->d.w2, err);
	if (r == 0)
		r = coord_var_read(c, m->v.b2, 0, 1, &m->d.b2, err);
	for (unsigned i = 0; i < n && r == 0; i++) {
		const struct rm_example *ex = &m->ex[i];
		const float *emb[RM_F];
		float wide[RM_F];

		for (unsigned f = 0; f < RM_F; f++) {
			emb[f] = m->emb + ((size_t)f * n + i) * RM_D;
			wide[f] = m->wide[((size_t)f * n + i) * RM_W];
		}
		score[i] = rm_predict(&m->d, emb, wide);
		truth[i] = ex->p_true;
		y[i] = ex->y;
		clicks += ex->y;
		ll += -(ex->y * log(score[i] + 1e-7) + (1 - ex->y) * log(1 - score[i] + 1e-7));
		cll += -(ex->y * log(ex->p_true + 1e-7) + (1 - ex->y) * log(1 - ex->p_true + 1e-7));
	}
	if (r == 0) {
		e->auc = rm_auc(score, y, n);
		e->ceiling_auc = rm_auc(truth, y, n);
		e->logloss = ll / n;
		e->ceiling_logloss = cll / n;
		e->ctr = clicks / n;
	}
	free(score);
	free(truth);
	free(y);
	return r;
}

/* ---- training ------------------------------------------------------------------ */

/* What --plot draws: a point per epoch, and the kills. */
#define MAX_POINTS 4096
struct series {
	unsigned n;
	struct point {
		double t, loss, auc, rate;
		uint64_t step;
	} p[MAX_POINTS];
};

/*
 * --plot FILE: the points in FILE.dat, then gnuplot (Debian's gnuplot-nox)
 * draws held-out AUC (and its ceiling) and training loss over time above,
 * steps/s below, the kills as red lines in both.  Return: 0, or -1 with the
 * reason printed (the data file stays).
 */
static int plot(const char *png, const struct series *s, double ceiling, const struct ex_kills *k,
		double t0)
{
	char dat[4096];
	FILE *f, *gp;
	unsigned nk = k->done < 64 ? k->done : 64;

	snprintf(dat, sizeof(dat), "%s.dat", png);
	f = fopen(dat, "w");
	if (!f) {
		fprintf(stderr, "recommender: --plot: %s: %s\n", dat, strerror(errno));
		return -1;
	}
	fprintf(f, "# t_s step train_loss heldout_auc steps_per_s\n");
	for (unsigned i = 0; i < s->n; i++)
		fprintf(f, "%.3f %llu %.5f %.5f %.1f\n", s->p[i].t,
			(unsigned long long)s->p[i].step, s->p[i].loss, s->p[i].auc, s->p[i].rate);
	fclose(f);
	gp = popen("gnuplot", "w");
	if (!gp) {
		fprintf(stderr,
			"recommender: --plot: no gnuplot (apt install gnuplot-nox); data "
			"in %s\n",
			dat);
		return -1;
	}
	fprintf(gp,
		"set terminal png size 1000,750\nset output '%s'\nset multiplot layout 2,1\n"
		"set grid\nset key bottom right\nset xlabel 'seconds'\nset xrange [0:*]\n",
		png);
	for (unsigned i = 0; i < nk; i++)
		fprintf(gp, "set arrow from %.3f, graph 0 to %.3f, graph 1 nohead lc rgb 'red'\n",
			k->at[i] - t0, k->at[i] - t0);
	fprintf(gp,
		"set title 'held-out AUC against the generating model (red: a worker killed)'\n"
		"set ylabel 'AUC'\nset y2label 'train log loss'\nset ytics nomirror\n"
		"set y2tics\nplot '%s' u 1:4 w lp t 'AUC', %.5f w l dt 2 t 'ceiling %.4f', "
		"'%s' u 1:3 axes x1y2 w l t 'train loss'\n"
		"unset y2tics\nunset y2label\nset title 'steps/s (per epoch)'\n"
		"set ylabel 'steps/s'\nset yrange [0:*]\nplot '%s' u 1:5 w fsteps t 'steps/s'\n"
		"unset multiplot\n",
		dat, ceiling, ceiling, dat, dat);
	if (pclose(gp) != 0) {
		fprintf(stderr, "recommender: --plot: gnuplot failed; data in %s\n", dat);
		return -1;
	}
	return 0;
}

enum { F_EPOCH, F_STEP, F_LOSS, F_AUC, F_RATE, F_UP, F_LOST, F_RT, NFIELDS };

struct progress {
	struct coord *c;
	int tty, quiet;
	double t0, last_draw, last_line;
	uint64_t total, done, start;
	double loss, n, rows; /* since the last epoch */
	double auc, ceiling;
	unsigned epoch, epochs;
	struct ex_window rt;
};

static void draw(struct progress *pg, int final)
{
	static struct coord_metrics m;
	double t = ex_now_s(), dt = t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9;
	char f[NFIELDS][48], line[512];
	const char *fp[NFIELDS];
	int prio[NFIELDS] = { [F_EPOCH] = 0, [F_AUC] = 1,  [F_LOSS] = 2, [F_UP] = 3,
			      [F_RT] = 5,    [F_RATE] = 6, [F_STEP] = 7 };
	int keep;

	if (pg->quiet || coord_metrics(pg->c, &m, NULL, 0) < 0)
		return;
	keep = final && (t - pg->last_line >= 1 || pg->done >= pg->total);
	if (keep)
		pg->last_line = t;
	ex_window_update(&pg->rt, &m.round_trip_ns, t);
	prio[F_LOST] = m.losses ? 4 : 8;
	snprintf(f[F_EPOCH], sizeof(f[0]), "epoch %u/%u", pg->epoch, pg->epochs);
	snprintf(f[F_STEP], sizeof(f[0]), "step %llu/%llu", (unsigned long long)pg->done,
		 (unsigned long long)pg->total);
	snprintf(f[F_LOSS], sizeof(f[0]), "loss %.4f", pg->n ? pg->loss / pg->n : 0);
	snprintf(f[F_AUC], sizeof(f[0]), "AUC %.4f/%.4f", pg->auc, pg->ceiling);
	snprintf(f[F_RATE], sizeof(f[0]), "%.0f steps/s", (double)(pg->done - pg->start) / dt);
	snprintf(f[F_UP], sizeof(f[0]), "workers %u/%u up", m.workers_up, m.workers);
	snprintf(f[F_LOST], sizeof(f[0]), "%llu lost, %llu recovered", (unsigned long long)m.losses,
		 (unsigned long long)m.recoveries);
	snprintf(f[F_RT], sizeof(f[0]), "rt p50 %.2f p99 %.2f ms",
		 coord_hist_percentile(&pg->rt.win, 50) / 1e6,
		 coord_hist_percentile(&pg->rt.win, 99) / 1e6);
	if (!pg->rt.win.count)
		f[F_RT][0] = 0;
	if (pg->tty) {
		for (int i = 0; i < NFIELDS; i++)
			fp[i] = f[i];
		ex_fit_line(line, sizeof(line), ex_term_cols(),
			    (double)pg->done / (pg->total ? pg->total : 1), fp, prio, NFIELDS);
		printf("\r%s\033[K%s", line, keep ? "\n" : "");
		fflush(stdout);
	} else if (keep) {
		printf("%s  %s  train %s  held-out %s  %s  %s (%s)  %s\n", f[F_EPOCH], f[F_STEP],
		       f[F_LOSS], f[F_AUC], f[F_RATE], f[F_UP], f[F_LOST], f[F_RT]);
		fflush(stdout);
	}
	pg->last_draw = t;
}

static void account(struct progress *pg, struct coord_rv *rv)
{
	struct rm_step_result res;
	const void *val;
	size_t len;

	if (coord_rv_fetch(rv, &val, &len, NULL) == 0 && len == sizeof(res)) {
		memcpy(&res, val, sizeof(res));
		pg->loss += res.loss_sum;
		pg->n += res.n;
		pg->rows += res.rows;
	}
	coord_rv_put(rv);
}

/* *@aside_s: the time spent evaluating and checkpointing, not stepping. */
static int train(struct coord *c, const struct opts *o, struct model *m, struct eval *e,
		 uint64_t start_step, uint64_t *end_step, double *aside_s, struct coord_error *err)
{
	double t_aside;

	static struct series ser;
	double t_epoch = ex_now_s();
	uint64_t s_epoch = start_step;
	struct rm_step_args a = { .v = m->v,
				  .batch = o->batch,
				  .adagrad = !o->sgd,
				  .lr_dense = (float)o->lr_dense,
				  .lr_sparse = (float)o->lr_sparse };
	/* A resumed run draws impressions it has not trained on yet. */
	struct rm_data_args da = { .seed = o->seed + start_step * 0x9e3779b97f4a7c15ull };
	static struct progress pg; /* its latency window: 16 KiB */
	struct coord_call call = { .args = &a, .len = sizeof(a), .npw = 1 };
	struct coord_rv *win[WINDOW];
	struct coord_pw *data;
	struct ex_kills kills;
	unsigned head = 0, nwin = 0;
	int r;
	uint64_t step = start_step, last_ckpt = start_step;

	memcpy(a.vocab, m->vocab, sizeof(a.vocab));
	pg = (struct progress){ .c = c,
				.tty = isatty(1),
				.quiet = o->quiet,
				.t0 = ex_now_s(),
				.total = (uint64_t)o->epochs * o->steps,
				.done = start_step,
				.start = start_step,
				.epochs = o->epochs,
				.auc = e->auc,
				.ceiling = e->ceiling_auc };
	/* The first point: the model before this run's steps. */
	ser.p[0] = (struct point){ .step = start_step, .loss = NAN, .auc = e->auc, .rate = 0 };
	ser.n = 1;
	r = coord_fn_lookup(c, "rec_step", &call.fn, err);
	if (r == 0)
		r = coord_per_worker_create(c, "rec_data", &da, sizeof(da), &data, err);
	if (r < 0)
		return r;
	call.pw = &data;
	ex_kills_init(&kills, o->kill_every, o->kills, !o->epochs_set, 120, o->quiet);
	while (step < pg.total && r == 0) {
		uint64_t epoch_end = (step / o->steps + 1) * o->steps;

		pg.epoch = (unsigned)(step / o->steps) + 1;
		for (; step < epoch_end && r == 0; step++) {
			if (nwin == WINDOW) {
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
			r = coord_join(c, err);
		t_aside = ex_now_s();
		if (r == 0)
			r = evaluate(c, m, o->eval_n, e, err);
		pg.auc = e->auc;
		if (r == 0 && ser.n < MAX_POINTS) {
			double now = ex_now_s();

			ser.p[ser.n++] = (struct point){ .t = now - pg.t0,
							 .step = step,
							 .loss = pg.n ? pg.loss / pg.n : 0,
							 .auc = e->auc,
							 .rate = (double)(step - s_epoch) /
								 (now - t_epoch) };
			t_epoch = now;
			s_epoch = step;
		}
		if (r == 0 && step >= pg.total && ex_kills_more(&kills, c)) {
			pg.total += o->steps; /* one more epoch */
			pg.epochs++;
		}
		draw(&pg, 1);
		pg.loss = pg.n = pg.rows = 0;
		if (r == 0 && o->ckpt_dir &&
		    (step - last_ckpt >= o->ckpt_every || step == pg.total)) {
			r = ex_ckpt_save(c, o->ckpt_dir, step, o->quiet, err);
			last_ckpt = step;
		}
		*aside_s += ex_now_s() - t_aside;
	}
	*end_step = step;
	if (r == 0 && o->plot && plot(o->plot, &ser, e->ceiling_auc, &kills, pg.t0) == 0 &&
	    !o->quiet)
		printf("plot: %s (data in %s.dat)\n", o->plot, o->plot);
	while (nwin) {
		coord_rv_put(win[head]);
		head = (head + 1) % WINDOW;
		nwin--;
	}
	coord_per_worker_put(data);
	return r;
}

/* ---- options and main ------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: recommender [--transport inproc|tcp] [--local N] [--spec SPEC]\n"
		"                   [--workers N] [--ps N] [--epochs E] [--steps S] [--batch B]\n"
		"                   [--vocab V] [--shards N] [--lr LR] [--lr-sparse LR] [--eval "
		"N]\n"
		"                   [--seed N] [--ckpt-dir DIR] [--ckpt-every STEPS] [--plot "
		"FILE.png]\n"
		"                   [--sgd] [--kill-worker-every SEC [--kills N]] [--quiet]\n"
		"\n"
		"Train a wide & deep click model (%d categorical fields, embeddings of %d, %d "
		"relu\n"
		"units) by asynchronous SGD on a synthetic click log drawn from a known\n"
		"factorization machine; print held-out AUC against that model's own (the "
		"ceiling).\n"
		"\n"
		"  --transport T   inproc (default) or tcp; --local N: N coord-worker and --ps\n"
		"                  coord-ps processes on loopback; --spec SPEC: an existing "
		"cluster\n"
		"  --workers N     inproc workers (4); --ps N: ps tasks (2)\n"
		"  --epochs E      epochs (20); --steps S: steps per epoch (200); --batch B (256)\n"
		"  --vocab V       rows of the largest tables (1000000; the 8 fields have\n"
		"                  V, V, V/2, V/2, V/4, V/10, V/40, V/400)\n"
		"  --lr LR         dense learning rate (0.05); --lr-sparse LR: rows' (0.1)\n"
		"  --sgd           rows learn by SGD of their mean gradient in the batch, not\n"
		"                  by row-wise Adagrad (the default)\n"
		"  --eval N        held-out impressions (20000)\n"
		"  --shards N      split every table into N shards (default: as many as\n"
		"                  ps tasks, each at least 256 KiB); a resumed run keeps the\n"
		"                  checkpoint's\n"
		"  --ckpt-dir DIR  checkpoint there every --ckpt-every steps (1000) and at the\n"
		"                  end; a run given the same DIR resumes from the last one,\n"
		"                  also onto another --ps (the tables' shards are re-placed)\n"
		"  --plot FILE     at the end, a PNG of held-out AUC, loss and steps/s over\n"
		"                  time with the kills marked (gnuplot; the data in FILE.dat)\n"
		"  --kill-worker-every SEC  with --local: SIGKILL a random worker every SEC\n"
		"                  seconds and restart it; without --epochs, training goes on\n"
		"                  by whole epochs until --kills workers (3) were killed and\n"
		"                  are back\n",
		RM_F, RM_D, RM_H);
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
					    { "vocab", required_argument, NULL, 'V' },
					    { "lr", required_argument, NULL, 'l' },
					    { "lr-sparse", required_argument, NULL, 'R' },
					    { "eval", required_argument, NULL, 'E' },
					    { "seed", required_argument, NULL, 'r' },
					    { "ckpt-dir", required_argument, NULL, 'c' },
					    { "ckpt-every", required_argument, NULL, 'C' },
					    { "shards", required_argument, NULL, 'H' },
					    { "plot", required_argument, NULL, 'P' },
					    { "kill-worker-every", required_argument, NULL, 'k' },
					    { "kills", required_argument, NULL, 'K' },
					    { "quiet", no_argument, NULL, 'q' },
					    { "sgd", no_argument, NULL, 'G' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	int ch;

	*o = (struct opts){ .transport = "inproc",
			    .workers = 4,
			    .ps = 2,
			    .epochs = 20,
			    .steps = 200,
			    .batch = 256,
			    .vocab0 = 1000000,
			    .eval_n = 20000,
			    .kills = 3,
			    .ckpt_every = 1000,
			    .lr_dense = 0.05,
			    .lr_sparse = 0.1,
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
		case 'V':
			o->vocab0 = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'l':
			o->lr_dense = strtod(optarg, NULL);
			break;
		case 'R':
			o->lr_sparse = strtod(optarg, NULL);
			break;
		case 'E':
			o->eval_n = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'r':
			o->seed = strtoull(optarg, NULL, 10);
			break;
		case 'c':
			o->ckpt_dir = optarg;
			break;
		case 'P':
			o->plot = optarg;
			break;
		case 'C':
			o->ckpt_every = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'H':
			o->shards = (unsigned)strtoul(optarg, NULL, 10);
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
		case 'G':
			o->sgd = 1;
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
	    o->batch > RM_BATCH_MAX || o->vocab0 < 2 || o->vocab0 > RM_VOCAB_MAX ||
	    o->eval_n < 100 || o->eval_n > 10000000 || !(o->lr_dense > 0) || !(o->lr_sparse > 0) ||
	    (o->kill_every > 0 && !o->local) || !o->kills || o->kills > 1000 || !o->ckpt_every ||
	    o->shards > COORD_VAR_MAX_PARTS || optind != argc) {
		fprintf(stderr, "recommender: bad option (see --help)\n");
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
	static struct model m;
	struct eval e0, e;
	struct opts o;
	uint64_t start = 0, end = 0;
	char *json = NULL;
	double t0, aside = 0;
	int r = 0;

	if (parse(argc, argv, &o) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	if (isatty(1) && !o.quiet)
		coord_set_log_fn(ex_log_over_progress, NULL);
	if (coord_registry_create(&reg) || rm_register(reg)) {
		fprintf(stderr, "recommender: cannot register the functions\n");
		return 1;
	}
	coord_opts_init(&co);
	co.registry = reg;
	co.transport = o.transport;
	co.inproc_workers = o.workers;
	co.inproc_ps = o.ps;
	if (o.ckpt_dir) {
		r = ex_ckpt_dir(o.ckpt_dir, ckpt_abs);
		if (r < 0)
			goto out;
		o.ckpt_dir = ckpt_abs;
	}
	if (o.local) {
		json = ex_local_start("librec_fns.so", o.local, o.ps,
				      ckpt_abs[0] ? ckpt_abs : NULL);
		r = json ? coord_spec_parse(json, &spec, &err) : -1;
	} else if (o.spec) {
		r = coord_spec_from_arg(o.spec, &spec, NULL, &err);
	}
	if (r == 0)
		r = coord_create(spec, &co, &c, &err);
	if (r < 0) {
		fprintf(stderr, "recommender: %s\n",
			err.msg[0] ? err.msg : "cannot start the cluster");
		goto out;
	}
	rm_vocab(o.vocab0, m.vocab);
	if (!o.quiet) {
		uint64_t rows = 0;

		for (unsigned f = 0; f < RM_F; f++)
			rows += m.vocab[f];
		printf("coord recommender: %u workers, %u ps tasks, transport %s; wide & deep, "
		       "%u fields, %llu rows x %d, batch %u\n",
		       coord_num_workers(c), coord_num_ps(c), o.transport, RM_F,
		       (unsigned long long)rows, RM_D, o.batch);
	}
	/* Whole or not at all, onto however many ps tasks run now. */
	if (o.ckpt_dir && ex_ckpt_resume(c, o.ckpt_dir, &start, o.quiet, &err) < 0) {
		r = -1;
		goto out;
	}
	r = create_vars(c, &o, &m, &err);
	if (r == 0)
		r = evaluate(c, &m, o.eval_n, &e0, &err);
	if (r < 0) {
		fprintf(stderr, "recommender: %s\n", err.msg);
		goto out;
	}
	if (!o.quiet) {
		unsigned shards = 0;

		for (unsigned f = 0; f < RM_F; f++)
			shards += m.v.emb[f].nparts + m.v.wide[f].nparts;
		printf("tables: %d partitioned variables in %u shards over %u ps tasks (rec/emb0: "
		       "%llu x %d in %u)\n",
		       2 * RM_F, shards, coord_num_ps(c), (unsigned long long)m.v.emb[0].rows, RM_D,
		       m.v.emb[0].nparts);
	}
	if (!o.quiet)
		printf("before: held-out AUC %.4f, log loss %.4f; the generating model's: AUC "
		       "%.4f (the ceiling), log loss %.4f; %.1f%% clicks\n",
		       e0.auc, e0.logloss, e0.ceiling_auc, e0.ceiling_logloss, 100 * e0.ctr);
	e = e0;
	t0 = ex_now_s();
	r = train(c, &o, &m, &e, start, &end, &aside, &err);
	if (r < 0) {
		fprintf(stderr, "recommender: %s\n", err.msg);
		goto out;
	}
	t0 = ex_now_s() - t0;
	printf("after:  held-out AUC %.4f of a ceiling of %.4f (%.1f%% of the way from 0.5), "
	       "log loss %.4f (ceiling %.4f) (%.1f s, %llu steps; %.0f steps/s between "
	       "evaluations)\n",
	       e.auc, e.ceiling_auc, 100 * (e.auc - 0.5) / (e.ceiling_auc - 0.5), e.logloss,
	       e.ceiling_logloss, t0, (unsigned long long)(end - start),
	       t0 - aside > 0 ? (double)(end - start) / (t0 - aside) : 0.0);
out:
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	ex_local_stop();
	free(json);
	free_model(&m);
	return r < 0 ? 1 : 0;
}
