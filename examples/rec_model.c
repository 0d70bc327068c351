// SPDX-License-Identifier: MIT
/*
 * examples/rec_model.c - the recommender example's click log, generating
 * model, wide & deep student and worker functions (see rec_model.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rec_model.h"

#define TEACHER_SEED 0x5eed7eac4e2ull
#define RM_BIAS0 -1.5f	   /* the teacher's global bias: about 25% clicks */
#define RM_BIAS_SD 0.5f	   /* its per-(field, id) biases */
#define RM_LATENT_SD 0.35f /* its latent vectors */

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unif(uint64_t h)
{
	return ((double)(h >> 11) + 0.5) * 0x1.0p-53;
}

/* A standard normal that is a fixed function of @key. */
static float hgauss(uint64_t key)
{
	double u = unif(mix64(key)), v = unif(mix64(key ^ 0xa5a5a5a5a5a5a5a5ull));

	return (float)(sqrt(-2.0 * log(u)) * cos(2 * M_PI * v));
}

static uint64_t row_key(uint64_t seed, unsigned f, uint32_t id, unsigned k)
{
	return seed ^ ((uint64_t)f << 56) ^ ((uint64_t)id << 16) ^ k;
}

void rm_vocab(uint32_t vocab0, uint32_t vocab[RM_F])
{
	static const unsigned div[RM_F] = { 1, 1, 2, 2, 4, 10, 40, 400 };

	for (unsigned f = 0; f < RM_F; f++)
		vocab[f] = vocab0 / div[f] > 2 ? vocab0 / div[f] : 2;
}

void rm_stream_init(struct rm_stream *st, uint64_t seed)
{
	st->s = seed;
}

static double next_unif(struct rm_stream *st)
{
	st->s += 0x9e3779b97f4a7c15ull;
	return unif(mix64(st->s));
}

/* The teacher's logit of an impression with ids @id. */
static float teacher_logit(const uint32_t id[RM_F])
{
	float z = RM_BIAS0, sum[RM_K] = { 0 }, sq = 0;

	for (unsigned f = 0; f < RM_F; f++) {
		z += RM_BIAS_SD * hgauss(row_key(TEACHER_SEED, f, id[f], 0));
		for (unsigned k = 0; k < RM_K; k++) {
			float u = RM_LATENT_SD * hgauss(row_key(TEACHER_SEED, f, id[f], 1 + k));

			sum[k] += u;
			sq += u * u;
		}
	}
	/* sum over pairs f < g of u_f . u_g = (|sum u|^2 - sum |u_f|^2) / 2 */
	for (unsigned k = 0; k < RM_K; k++)
		z += sum[k] * sum[k] / 2;
	return z - sq / 2;
}

void rm_next(struct rm_stream *st, const uint32_t vocab[RM_F], struct rm_example *ex)
{
	for (unsigned f = 0; f < RM_F; f++) {
		/* P(id) ~ log((id + 2) / (id + 1)) ~ 1 / (id + 1) */
		double x = exp(next_unif(st) * log((double)vocab[f] + 1)) - 1;
		uint32_t id = (uint32_t)x;

		ex->id[f] = id < vocab[f] ? id : vocab[f] - 1;
	}
	ex->p_true = 1.0f / (1.0f + expf(-teacher_logit(ex->id)));
	ex->y = next_unif(st) < ex->p_true ? 1.0f : 0.0f;
}

void rm_emb_init(uint64_t seed, unsigned f, uint64_t off, float *out, size_t n)
{
	/* Uniform on +-0.05 * sqrt(3) (sd 0.05): one hash per element, so a
	 * table of 16 M elements takes a fraction of a second. */
	for (size_t i = 0; i < n; i++)
		out[i] = 0.0866f *
			 (float)(2 * unif(mix64(row_key(seed, f, (uint32_t)((off + i) / RM_D),
							100 + (unsigned)((off + i) % RM_D)))) -
				 1);
}

void rm_dense_init(struct rm_dense *d, uint64_t seed)
{
	for (unsigned i = 0; i < RM_H * RM_IN; i++)
		d->w1[i] = hgauss(row_key(seed, RM_F, i, 1)) * (float)sqrt(2.0 / RM_IN);
	for (unsigned j = 0; j < RM_H; j++) {
		d->b1[j] = 0;
		d->w2[j] = hgauss(row_key(seed, RM_F, j, 2)) * (float)sqrt(1.0 / RM_H);
	}
	d->b2 = RM_BIAS0;
}

/* Forward: the logit; @x the input, @h the hidden activations. */
static float forward(const struct rm_dense *d, const float *const emb[RM_F], const float wide[RM_F],
		     float *x, float *h)
{
	float z = d->b2;

	for (unsigned f = 0; f < RM_F; f++) {
		memcpy(x + f * RM_D, emb[f], RM_D * sizeof(float));
		z += wide[f];
	}
	for (unsigned j = 0; j < RM_H; j++) {
		const float *w = d->w1 + (size_t)j * RM_IN;
		float a = d->b1[j];

		for (unsigned i = 0; i < RM_IN; i++)
			a += w[i] * x[i];
		h[j] = a > 0 ? a : 0;
		z += d->w2[j] * h[j];
	}
	return z;
}

float rm_predict(const struct rm_dense *d, const float *const emb[RM_F], const float wide[RM_F])
{
	float x[RM_IN], h[RM_H];

	return 1.0f / (1.0f + expf(-forward(d, emb, wide, x, h)));
}

struct scored {
	float s, y;
};

static int cmp_scored(const void *a, const void *b)
{
	float x = ((const struct scored *)a)->s, y = ((const struct scored *)b)->s;

	return (x > y) - (x < y);
}

double rm_auc(const float *score, const float *y, size_t n)
{
	struct scored *v = malloc(n * sizeof(*v));
	double pos = 0, neg = 0, rank_sum = 0;

	if (!v)
		return 0;
	for (size_t i = 0; i < n; i++)
		v[i] = (struct scored){ score[i], y[i] };
	qsort(v, n, sizeof(*v), cmp_scored);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		double npos = 0;

		while (j < n && v[j].s == v[i].s)
			npos += v[j++].y > 0.5f;
		/* ranks i+1..j share (i + 1 + j) / 2 */
		rank_sum += npos * (double)(i + 1 + j) / 2;
		pos += npos;
		neg += (double)(j - i) - npos;
		i = j;
	}
	free(v);
	if (pos == 0 || neg == 0)
		return 0.5;
	return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

/* ---- worker side --------------------------------------------------------------- */

/* "rec_data": this worker's own stream of impressions. */
static int data_create(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	struct rm_data_args a;
	struct rm_stream *st;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "rec_data: bad arguments");
	memcpy(&a, args, sizeof(a));
	st = malloc(sizeof(*st));
	if (!st)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "rec_data: no memory");
	rm_stream_init(st, mix64(a.seed * 1000003ull + (uint64_t)coord_ctx_worker(ctx)));
	*res = st;
	return 0;
}

#define SLOTS 2048 /* per field: > 2 * RM_BATCH_MAX, a power of two */

/* One thread's scratch for a step (malloc'd once per thread). */
struct scratch {
	struct rm_example ex[RM_BATCH_MAX];
	int64_t bid[RM_F][RM_BATCH_MAX];   /* the batch's ids per field, as drawn */
	uint32_t slot[RM_BATCH_MAX][RM_F]; /* the example's row among its field's */
	int64_t uid[RM_F][RM_BATCH_MAX];   /* distinct ids per field */
	uint32_t nu[RM_F];
	uint32_t cnt[RM_F][RM_BATCH_MAX];   /* examples using each distinct id */
	uint32_t first[RM_F][RM_BATCH_MAX]; /* the first example using it */
	uint32_t hkey[SLOTS], hval[SLOTS];  /* id + 1 -> its slot; 0 empty */
	float e[RM_F][RM_BATCH_MAX * RM_D], w[RM_F][RM_BATCH_MAX];   /* per example */
	float ge[RM_F][RM_BATCH_MAX * RM_D], gw[RM_F][RM_BATCH_MAX]; /* per distinct id */
	struct rm_dense d, g;
	struct coord_var_op ops[4];
	struct coord_pvar_rows rows[2 * RM_F]; /* every table's, for one call */
	struct rm_step_args a;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_key_make(void)
{
	pthread_key_create(&scratch_key, free);
}

static struct scratch *scratch_get(void)
{
	struct scratch *s;

	pthread_once(&scratch_once, scratch_key_make);
	s = pthread_getspecific(scratch_key);
	if (!s) {
		s = malloc(sizeof(*s));
		if (s && pthread_setspecific(scratch_key, s) != 0) {
			free(s);
			s = NULL;
		}
	}
	return s;
}

/* The ids of the batch per field (@s->bid), and deduplicated for the
 * update: @s->uid, @s->nu, @s->slot, @s->cnt. */
static void dedup(struct scratch *s, uint32_t batch)
{
	for (unsigned f = 0; f < RM_F; f++) {
		s->nu[f] = 0;
		memset(s->hkey, 0, sizeof(s->hkey));
		for (uint32_t b = 0; b < batch; b++) {
			uint32_t id = s->ex[b].id[f], h = (uint32_t)mix64(id) & (SLOTS - 1);

			s->bid[f][b] = id;
			while (s->hkey[h] && s->hkey[h] != id + 1)
				h = (h + 1) & (SLOTS - 1);
			if (!s->hkey[h]) {
				s->hkey[h] = id + 1;
				s->hval[h] = s->nu[f];
				s->cnt[f][s->nu[f]] = 0;
				s->first[f][s->nu[f]] = b;
				s->uid[f][s->nu[f]++] = id;
			}
			s->slot[b][f] = s->hval[h];
			s->cnt[f][s->hval[h]]++;
		}
	}
}

/* The dense layers: read (@op COORD_VAR_READ into @d) or add (@d). */
static int dense_batch(struct coord_ctx *ctx, struct scratch *s, const struct rm_vars *v,
		       unsigned opc, struct rm_dense *d)
{
	struct coord_var_op *op = s->ops;
	int rd = opc == COORD_VAR_READ;

	op[0] = (struct coord_var_op){ .op = opc, .var = v->w1, .n = RM_H * RM_IN };
	op[1] = (struct coord_var_op){ .op = opc, .var = v->b1, .n = RM_H };
	op[2] = (struct coord_var_op){ .op = opc, .var = v->w2, .n = RM_H };
	op[3] = (struct coord_var_op){ .op = opc, .var = v->b2, .n = 1 };
	if (rd) {
		op[0].dst = d->w1;
		op[1].dst = d->b1;
		op[2].dst = d->w2;
		op[3].dst = &d->b2;
	} else {
		op[0].src = d->w1;
		op[1].src = d->b1;
		op[2].src = d->w2;
		op[3].src = &d->b2;
	}
	return coord_ctx_var_batch(ctx, op, 4);
}

/*
 * The update of one row from its gradients summed over the batch (@ge, RM_D
 * floats; @gw[0]) into what scatter_add adds to the embedding row (@ge) and
 * the wide row (@gw: weight, accumulators), given the wide row as gathered
 * (@w: its accumulators) and the examples that used it (@cnt).
 *
 * Row-wise Adagrad: acc += mean of the squared gradient; the step is
 * -lr * g / sqrt(acc), from an initial accumulator of 0.1 (TF's).  With
 * other workers' updates landing in between, acc is the gathered value plus
 * this step's: asynchronous, as the rows themselves.
 */
#define ACC0 0.1f
static void sparse_update(const struct rm_step_args *a, float *ge, float *gw, const float *w,
			  uint32_t cnt)
{
	if (a->adagrad) {
		float ge2 = 0, acc_w, acc_e, g = gw[0];

		for (unsigned j = 0; j < RM_D; j++)
			ge2 += ge[j] * ge[j];
		ge2 /= RM_D;
		acc_w = ACC0 + (w[1] > 0 ? w[1] : 0) + g * g;
		acc_e = ACC0 + (w[2] > 0 ? w[2] : 0) + ge2;
		for (unsigned j = 0; j < RM_D; j++)
			ge[j] *= -a->lr_sparse / sqrtf(acc_e);
		gw[0] = -a->lr_sparse * g / sqrtf(acc_w);
		gw[1] = g * g;
		gw[2] = ge2;
	} else {
		float k = -a->lr_sparse / (float)cnt;

		for (unsigned j = 0; j < RM_D; j++)
			ge[j] *= k;
		gw[0] *= k;
		gw[1] = gw[2] = 0;
	}
}

/* Forward and backward over the batch: the loss into @out, the dense
 * layers' gradient summed into @s->g, the rows' into @s->ge, @s->gw (per
 * distinct id). */
static void backprop(struct scratch *s, uint32_t batch, struct rm_step_result *out)
{
	float x[RM_IN], h[RM_H], dh[RM_H];

	memset(&s->g, 0, sizeof(s->g));
	for (unsigned f = 0; f < RM_F; f++) {
		memset(s->ge[f], 0, s->nu[f] * RM_D * sizeof(float));
		memset(s->gw[f], 0, s->nu[f] * RM_W * sizeof(float));
	}
	for (uint32_t b = 0; b < batch; b++) {
		const float *emb[RM_F];
		float wide[RM_F], z, p, dz, y = s->ex[b].y;

		for (unsigned f = 0; f < RM_F; f++) {
			emb[f] = s->e[f] + (size_t)b * RM_D;
			wide[f] = s->w[f][b * RM_W];
		}
		z = forward(&s->d, emb, wide, x, h);
		p = 1.0f / (1.0f + expf(-z));
		out->loss_sum += -(y * logf(p + 1e-7f) + (1 - y) * logf(1 - p + 1e-7f));
		out->clicks += y;
		dz = p - y;
		s->g.b2 += dz;
		for (unsigned j = 0; j < RM_H; j++) {
			s->g.w2[j] += dz * h[j];
			dh[j] = h[j] > 0 ? dz * s->d.w2[j] : 0;
			s->g.b1[j] += dh[j];
		}
		for (unsigned j = 0; j < RM_H; j++) {
			float *gw1 = s->g.w1 + (size_t)j * RM_IN;

			if (dh[j] == 0)
				continue;
			for (unsigned i = 0; i < RM_IN; i++)
				gw1[i] += dh[j] * x[i];
		}
		for (unsigned f = 0; f < RM_F; f++) {
			float *ge = s->ge[f] + s->slot[b][f] * RM_D;

			s->gw[f][s->slot[b][f] * RM_W] += dz;
			for (unsigned j = 0; j < RM_H; j++) {
				const float *w = s->d.w1 + (size_t)j * RM_IN + f * RM_D;

				if (dh[j] == 0)
					continue;
				for (unsigned k = 0; k < RM_D; k++)
					ge[k] += dh[j] * w[k];
			}
		}
	}
}

/* What the step adds: -lr x the dense layers' mean gradient (@s->g), and
 * each distinct row's update (sparse_update()). */
static void updates(struct scratch *s, const struct rm_step_args *a)
{
	float k = -a->lr_dense / (float)a->batch;

	for (unsigned i = 0; i < RM_H * RM_IN; i++)
		s->g.w1[i] *= k;
	for (unsigned j = 0; j < RM_H; j++) {
		s->g.b1[j] *= k;
		s->g.w2[j] *= k;
	}
	s->g.b2 *= k;
	for (unsigned f = 0; f < RM_F; f++)
		for (uint32_t u = 0; u < s->nu[f]; u++)
			sparse_update(a, s->ge[f] + u * RM_D, s->gw[f] + u * RM_W,
				      s->w[f] + s->first[f][u] * RM_W, s->cnt[f][u]);
}

/* The step's rows of every table, for one gather_multi (@gather: the
 * batch's ids as drawn, into @s->e, @s->w) or one scatter_add_multi (the
 * distinct ids, from @s->ge, @s->gw). */
static void table_rows(struct scratch *s, const struct rm_step_args *a, bool gather)
{
	for (unsigned f = 0; f < RM_F; f++) {
		const int64_t *ids = gather ? s->bid[f] : s->uid[f];
		size_t n = gather ? a->batch : s->nu[f];

		s->rows[2 * f] = (struct coord_pvar_rows){
			.pv = &a->v.emb[f], .ids = ids, .n = n, .out = s->e[f], .updates = s->ge[f]
		};
		s->rows[2 * f + 1] = (struct coord_pvar_rows){
			.pv = &a->v.wide[f], .ids = ids, .n = n, .out = s->w[f], .updates = s->gw[f]
		};
	}
}

/*
 * One step of asynchronous SGD on a batch of this worker's stream: four
 * round trips to the ps tasks (all tables' rows in one gather, the dense
 * layers' read, all tables' updates in one scatter_add, the dense layers'
 * update); the library reads each distinct row once, one request per ps
 * task per call.
 */
static int rec_step(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct rm_step_result out = { 0 };
	struct rm_stream *st = coord_ctx_per_worker(ctx, 0);
	struct scratch *s = scratch_get();
	const struct rm_step_args *a;
	int r;

	if (len != sizeof(*a) || !st)
		return coord_ctx_fail(ctx, COORD_EINVAL, "rec_step: want its args and a rec_data");
	if (!s)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "rec_step: no memory");
	memcpy(&s->a, args, sizeof(s->a)); /* aligned, and ours */
	a = &s->a;
	if (a->batch == 0 || a->batch > RM_BATCH_MAX)
		return coord_ctx_fail(ctx, COORD_EINVAL, "rec_step: batch 1..%d", RM_BATCH_MAX);
	for (unsigned f = 0; f < RM_F; f++)
		if (a->vocab[f] == 0 || a->vocab[f] != a->v.emb[f].rows ||
		    a->v.wide[f].rows != a->vocab[f] || a->v.emb[f].row_len != RM_D ||
		    a->v.wide[f].row_len != RM_W)
			return coord_ctx_fail(ctx, COORD_EINVAL, "rec_step: table %u's shape", f);
	for (uint32_t b = 0; b < a->batch; b++)
		rm_next(st, a->vocab, &s->ex[b]);
	dedup(s, a->batch);
	table_rows(s, a, true);
	r = coord_ctx_pvar_gather_multi(ctx, s->rows, 2 * RM_F);
	if (r == 0)
		r = dense_batch(ctx, s, &a->v, COORD_VAR_READ, &s->d);
	if (r < 0)
		return r;
	backprop(s, a->batch, &out);
	updates(s, a);
	table_rows(s, a, false);
	r = coord_ctx_pvar_scatter_add_multi(ctx, s->rows, 2 * RM_F);
	if (r == 0)
		r = dense_batch(ctx, s, &a->v, COORD_VAR_ASSIGN_ADD, &s->g);
	if (r < 0)
		return r;
	for (unsigned f = 0; f < RM_F; f++)
		out.rows += s->nu[f];
	out.n = (float)a->batch;
	return coord_ctx_set_result(ctx, &out, sizeof(out));
}

int rm_register(struct coord_registry *reg)
{
	if (coord_registry_add(reg, "rec_step", rec_step) ||
	    coord_registry_add_resource(reg, "rec_data", data_create, free))
		return -1;
	return 0;
}

/* The entry point coord-worker looks up in librec_fns.so. */
int coord_register_fns(struct coord_registry *reg);
int coord_register_fns(struct coord_registry *reg)
{
	return rm_register(reg);
}
