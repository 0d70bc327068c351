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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>

#include "excommon.h"
#include "rec_model.h"

#define WINDOW 16	 /* steps in flight */
#define CHUNK (1u << 20) /* floats per init / evaluation op */

struct opts {
	struct ex_opts x; /* the common ones (excommon.h) */
	const char *plot;
	unsigned vocab0, eval_n, shards;
	int sgd;
	double lr_dense, lr_sparse;
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

		rm_emb_init(o->x.seed, f, off, buf, k);
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
	rm_dense_init(&m->d, o->x.seed);
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

/* The line's fields by priority on a terminal (losses: 8 while there are none). */
static const int prio[EX_NFIELDS] = {
	[EX_F_EPOCH] = 0, [EX_F_MODEL] = 1, [EX_F_LOSS] = 2, [EX_F_UP] = 3,
	[EX_F_RT] = 5,	  [EX_F_RATE] = 6,  [EX_F_STEP] = 7, [EX_F_LOST] = 8
};

/* A training run: its progress line, its model and evaluation, the points of --plot. */
struct rec_run {
	struct ex_progress pg; /* first: what the loop's callbacks are given */
	const struct opts *o;
	struct model *m;
	struct eval *e;
	double t_epoch; /* the last point's */
	uint64_t s_epoch;
	struct series ser;
};

/* The bar (or a line per epoch) with the held-out AUC and its ceiling. */
static void draw(struct ex_progress *pg, int final)
{
	const struct rec_run *rr = (const struct rec_run *)pg;
	char auc[48];

	snprintf(auc, sizeof(auc), "AUC %.4f/%.4f", rr->e->auc, rr->e->ceiling_auc);
	ex_progress_draw(pg, final, auc);
}

static void account(struct ex_progress *pg, const void *val, size_t len)
{
	struct rm_step_result res;

	if (len != sizeof(res))
		return;
	memcpy(&res, val, sizeof(res));
	pg->loss += res.loss_sum;
	pg->n += res.n;
	pg->aux += res.rows;
}

/* After an epoch's join: the held-out AUC, and a point for --plot. */
static int epoch_done(struct ex_progress *pg, uint64_t step, struct coord_error *err)
{
	struct rec_run *rr = (struct rec_run *)pg;
	struct series *ser = &rr->ser;
	double now;
	int r = evaluate(pg->c, rr->m, rr->o->eval_n, rr->e, err);

	if (r < 0 || ser->n >= MAX_POINTS)
		return r;
	now = ex_now_s();
	ser->p[ser->n++] = (struct point){ .t = now - pg->t0,
					   .step = step,
					   .loss = pg->n ? pg->loss / pg->n : 0,
					   .auc = rr->e->auc,
					   .rate = (double)(step - rr->s_epoch) /
						   (now - rr->t_epoch) };
	rr->t_epoch = now;
	rr->s_epoch = step;
	return 0;
}

/* *@aside_s: the time spent evaluating and checkpointing, not stepping. */
static int train(struct coord *c, const struct opts *o, struct model *m, struct eval *e,
		 uint64_t start_step, uint64_t *end_step, double *aside_s, struct coord_error *err)
{
	struct rm_step_args a = { .v = m->v,
				  .batch = o->x.batch,
				  .adagrad = !o->sgd,
				  .lr_dense = (float)o->lr_dense,
				  .lr_sparse = (float)o->lr_sparse };
	/* A resumed run draws impressions it has not trained on yet. */
	struct rm_data_args da = { .seed = o->x.seed + start_step * 0x9e3779b97f4a7c15ull };
	static struct rec_run rr; /* the latency window, the points: 176 KiB */
	struct ex_loop l = { .pg = &rr.pg,
			     .o = &o->x,
			     .fn = "rec_step",
			     .creator = "rec_data",
			     .args = &a,
			     .len = sizeof(a),
			     .pw_args = &da,
			     .pw_len = sizeof(da),
			     .window = WINDOW,
			     .grace = 120,
			     .account = account,
			     .draw = draw,
			     .epoch_done = epoch_done };
	int r;

	memcpy(a.vocab, m->vocab, sizeof(a.vocab));
	rr = (struct rec_run){ .pg = { .c = c,
				       .tty = isatty(1),
				       .quiet = o->x.quiet,
				       .total = (uint64_t)o->x.epochs * o->x.steps,
				       .epochs = o->x.epochs,
				       .prio = prio,
				       .model_label = "held-out " },
			       .o = o,
			       .m = m,
			       .e = e,
			       .t_epoch = ex_now_s(),
			       .s_epoch = start_step };
	/* The first point: the model before this run's steps. */
	rr.ser.p[0] = (struct point){ .step = start_step, .loss = NAN, .auc = e->auc, .rate = 0 };
	rr.ser.n = 1;
	r = ex_train(&l, start_step, end_step, err);
	*aside_s += l.aside_s;
	if (r == 0 && o->plot && plot(o->plot, &rr.ser, e->ceiling_auc, &l.kills, rr.pg.t0) == 0 &&
	    !o->x.quiet)
		printf("plot: %s (data in %s.dat)\n", o->plot, o->plot);
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

/* The recommender's own options. */
static int rec_opt(void *ctx, int ch, const char *arg)
{
	struct opts *o = ctx;

	switch (ch) {
	case 'V':
		o->vocab0 = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'l':
		o->lr_dense = strtod(arg, NULL);
		break;
	case 'R':
		o->lr_sparse = strtod(arg, NULL);
		break;
	case 'E':
		o->eval_n = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'P':
		o->plot = arg;
		break;
	case 'H':
		o->shards = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'G':
		o->sgd = 1;
		break;
	default:
		return -1;
	}
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = { { "vocab", required_argument, NULL, 'V' },
					    { "lr", required_argument, NULL, 'l' },
					    { "lr-sparse", required_argument, NULL, 'R' },
					    { "eval", required_argument, NULL, 'E' },
					    { "shards", required_argument, NULL, 'H' },
					    { "plot", required_argument, NULL, 'P' },
					    { "sgd", no_argument, NULL, 'G' },
					    { NULL, 0, NULL, 0 } };
	const struct ex_extra x = { .lo = lo, .opt = rec_opt, .ctx = o, .usage = usage };

	*o = (struct opts){
		.vocab0 = 1000000, .eval_n = 20000, .lr_dense = 0.05, .lr_sparse = 0.1
	};
	ex_opts_defaults(&o->x, "recommender");
	o->x.epochs = 20;
	o->x.batch = 256;
	o->x.ckpt_every = 1000;
	if (ex_parse(argc, argv, &o->x, &x) < 0)
		return -1;
	if (o->x.batch > RM_BATCH_MAX || o->vocab0 < 2 || o->vocab0 > RM_VOCAB_MAX ||
	    o->eval_n < 100 || o->eval_n > 10000000 || !(o->lr_dense > 0) || !(o->lr_sparse > 0) ||
	    !o->x.ckpt_every || o->shards > COORD_VAR_MAX_PARTS || optind != argc)
		return ex_bad_option(&o->x);
	return 0;
}

/* What the run is: its cluster and its tables. */
static void banner(struct coord *c, const struct opts *o, const struct model *m)
{
	uint64_t rows = 0;

	for (unsigned f = 0; f < RM_F; f++)
		rows += m->vocab[f];
	printf("coord recommender: %u workers, %u ps tasks, transport %s; wide & deep, "
	       "%u fields, %llu rows x %d, batch %u\n",
	       coord_num_workers(c), coord_num_ps(c), o->x.transport, RM_F,
	       (unsigned long long)rows, RM_D, o->x.batch);
}

/* Where the tables are, and how the model starts against its ceiling. */
static void before(struct coord *c, const struct model *m, const struct eval *e0)
{
	unsigned shards = 0;

	for (unsigned f = 0; f < RM_F; f++)
		shards += m->v.emb[f].nparts + m->v.wide[f].nparts;
	printf("tables: %d partitioned variables in %u shards over %u ps tasks (rec/emb0: "
	       "%llu x %d in %u)\n",
	       2 * RM_F, shards, coord_num_ps(c), (unsigned long long)m->v.emb[0].rows, RM_D,
	       m->v.emb[0].nparts);
	printf("before: held-out AUC %.4f, log loss %.4f; the generating model's: AUC "
	       "%.4f (the ceiling), log loss %.4f; %.1f%% clicks\n",
	       e0->auc, e0->logloss, e0->ceiling_auc, e0->ceiling_logloss, 100 * e0->ctr);
}

int main(int argc, char **argv)
{
	struct ex_run run = { 0 };
	struct coord_error err = { 0 };
	static struct model m;
	struct eval e0, e;
	struct opts o;
	uint64_t start = 0, end = 0;
	double t0, aside = 0;
	int r;

	if (parse(argc, argv, &o) < 0)
		return 2;
	r = ex_run_start(&run, &o.x, rm_register, "librec_fns.so");
	if (r < 0)
		goto out;
	rm_vocab(o.vocab0, m.vocab);
	if (!o.x.quiet)
		banner(run.c, &o, &m);
	/* Whole or not at all, onto however many ps tasks run now. */
	if (o.x.ckpt_dir && ex_ckpt_resume(run.c, o.x.ckpt_dir, &start, o.x.quiet, &err) < 0) {
		r = -1;
		goto out;
	}
	r = create_vars(run.c, &o, &m, &err);
	if (r == 0)
		r = evaluate(run.c, &m, o.eval_n, &e0, &err);
	if (r < 0) {
		fprintf(stderr, "recommender: %s\n", err.msg);
		goto out;
	}
	if (!o.x.quiet)
		before(run.c, &m, &e0);
	e = e0;
	t0 = ex_now_s();
	r = train(run.c, &o, &m, &e, start, &end, &aside, &err);
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
	ex_run_stop(&run);
	free_model(&m);
	return r < 0 ? 1 : 0;
}
