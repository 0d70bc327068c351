// SPDX-License-Identifier: MIT
/*
 * examples/trainer_model.c - data, model and worker functions of the
 * example trainer (see trainer_model.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_model.h"

#define TEACHER_SEED 0x7eac4e2ull
#define LABEL_NOISE 0.02

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(struct tm_stream *st)
{
	return ((double)(splitmix64(&st->s) >> 11) + 0.5) * 0x1.0p-53;
}

static float gauss(struct tm_stream *st)
{
	double u, v, r;

	if (st->has_spare) {
		st->has_spare = 0;
		return st->spare;
	}
	u = uniform(st);
	v = uniform(st);
	r = sqrt(-2.0 * log(u));
	st->spare = (float)(r * sin(2 * M_PI * v));
	st->has_spare = 1;
	return (float)(r * cos(2 * M_PI * v));
}

void tm_stream_init(struct tm_stream *st, uint64_t seed)
{
	st->s = seed;
	st->has_spare = 0;
}

/* The teacher: label = sign(v . tanh(U x + c)); fixed for every process. */
static struct {
	float u[TM_TH][TM_D], c[TM_TH], v[TM_TH];
} teacher;

static pthread_once_t teacher_once = PTHREAD_ONCE_INIT;

static void teacher_make(void)
{
	struct tm_stream st;

	tm_stream_init(&st, TEACHER_SEED);
	for (int j = 0; j < TM_TH; j++) {
		for (int i = 0; i < TM_D; i++)
			teacher.u[j][i] = gauss(&st) * 0.6f;
		teacher.c[j] = gauss(&st) * 0.3f;
	}
	for (int j = 0; j < TM_TH; j++)
		teacher.v[j] = (j & 1 ? -1.0f : 1.0f) * (0.5f + (float)uniform(&st));
}

static void teacher_init(void)
{
	pthread_once(&teacher_once, teacher_make);
}

void tm_next_example(struct tm_stream *st, float *x, float *y)
{
	float t = 0;

	for (int i = 0; i < TM_D; i++)
		x[i] = gauss(st);
	for (int j = 0; j < TM_TH; j++) {
		float a = teacher.c[j];

		for (int i = 0; i < TM_D; i++)
			a += teacher.u[j][i] * x[i];
		t += teacher.v[j] * tanhf(a);
	}
	*y = t > 0 ? 1.0f : 0.0f;
	if (uniform(st) < LABEL_NOISE)
		*y = 1.0f - *y;
}

void tm_params_init(struct tm_params *p, uint64_t seed)
{
	struct tm_stream st;

	teacher_init();
	tm_stream_init(&st, seed);
	for (int i = 0; i < TM_H * TM_D; i++)
		p->w1[i] = gauss(&st) * (float)sqrt(1.0 / TM_D);
	for (int j = 0; j < TM_H; j++) {
		p->b1[j] = 0;
		p->w2[j] = gauss(&st) * (float)sqrt(1.0 / TM_H);
	}
	p->b2 = 0;
}

/* Forward pass: hidden activations @h, returns the probability of class 1. */
static float forward(const struct tm_params *p, const float *x, float *h)
{
	float z = p->b2;

	for (int j = 0; j < TM_H; j++) {
		float a = p->b1[j];

		for (int i = 0; i < TM_D; i++)
			a += p->w1[j * TM_D + i] * x[i];
		h[j] = tanhf(a);
		z += p->w2[j] * h[j];
	}
	return 1.0f / (1.0f + expf(-z));
}

static float bce(float prob, float y)
{
	const float eps = 1e-7f;

	return -(y * logf(prob + eps) + (1 - y) * logf(1 - prob + eps));
}

void tm_evaluate(const struct tm_params *p, uint64_t seed, unsigned n, double *loss, double *acc)
{
	struct tm_stream st;
	float x[TM_D], h[TM_H], y;
	double l = 0, ok = 0;

	teacher_init();
	tm_stream_init(&st, seed);
	for (unsigned k = 0; k < n; k++) {
		float prob;

		tm_next_example(&st, x, &y);
		prob = forward(p, x, h);
		l += bce(prob, y);
		ok += (prob > 0.5f) == (y > 0.5f);
	}
	*loss = l / n;
	*acc = ok / n;
}

/* ---- worker side --------------------------------------------------------------- */

/* "dataset": this worker's own stream, seeded by the seed and its index. */
static int dataset_create(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	struct tm_dataset_args a;
	struct tm_stream *st;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "dataset: bad arguments");
	memcpy(&a, args, sizeof(a));
	st = malloc(sizeof(*st));
	if (!st)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "dataset: no memory");
	teacher_init();
	tm_stream_init(st, a.seed * 1000003ull + (uint64_t)coord_ctx_worker(ctx));
	*res = st;
	return 0;
}

/* "train_step": read the parameters, one mini-batch, push the gradient. */
static int train_step(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct tm_step_args a;
	struct tm_step_result out = { 0 };
	struct tm_stream *st = coord_ctx_per_worker(ctx, 0);
	static __thread struct tm_params p, g;
	float x[TM_D], h[TM_H], y, gb2;
	struct coord_var_op ops[4];
	int r;

	if (len != sizeof(a) || !st)
		return coord_ctx_fail(ctx, COORD_EINVAL, "train_step: want its args and a dataset");
	memcpy(&a, args, sizeof(a));
	if (a.batch == 0 || a.batch > TM_BATCH_MAX)
		return coord_ctx_fail(ctx, COORD_EINVAL, "train_step: batch 1..%d", TM_BATCH_MAX);
	/* One frame per ps task for all four reads. */
	ops[0] = (struct coord_var_op){
		.op = COORD_VAR_READ, .var = a.w1, .n = TM_H * TM_D, .dst = p.w1
	};
	ops[1] = (struct coord_var_op){ .op = COORD_VAR_READ, .var = a.b1, .n = TM_H, .dst = p.b1 };
	ops[2] = (struct coord_var_op){ .op = COORD_VAR_READ, .var = a.w2, .n = TM_H, .dst = p.w2 };
	ops[3] = (struct coord_var_op){ .op = COORD_VAR_READ, .var = a.b2, .n = 1, .dst = &p.b2 };
	r = coord_ctx_var_batch(ctx, ops, 4);
	if (r < 0)
		return r;
	memset(&g, 0, sizeof(g));
	gb2 = 0;
	for (uint32_t k = 0; k < a.batch; k++) {
		float prob, dz;

		tm_next_example(st, x, &y);
		prob = forward(&p, x, h);
		out.loss_sum += bce(prob, y);
		out.correct += (prob > 0.5f) == (y > 0.5f);
		dz = prob - y;
		gb2 += dz;
		for (int j = 0; j < TM_H; j++) {
			float da = dz * p.w2[j] * (1 - h[j] * h[j]);

			g.w2[j] += dz * h[j];
			g.b1[j] += da;
			for (int i = 0; i < TM_D; i++)
				g.w1[j * TM_D + i] += da * x[i];
		}
	}
	/* Scale to -lr * mean gradient, then push all four in one batch. */
	for (int i = 0; i < TM_H * TM_D; i++)
		g.w1[i] *= -a.lr / (float)a.batch;
	for (int j = 0; j < TM_H; j++) {
		g.b1[j] *= -a.lr / (float)a.batch;
		g.w2[j] *= -a.lr / (float)a.batch;
	}
	g.b2 = gb2 * -a.lr / (float)a.batch;
	for (int i = 0; i < 4; i++) {
		ops[i].op = COORD_VAR_ASSIGN_ADD;
		ops[i].dst = NULL;
	}
	ops[0].src = g.w1;
	ops[1].src = g.b1;
	ops[2].src = g.w2;
	ops[3].src = &g.b2;
	r = coord_ctx_var_batch(ctx, ops, 4);
	if (r < 0)
		return r;
	out.n = (float)a.batch;
	return coord_ctx_set_result(ctx, &out, sizeof(out));
}

int tm_register(struct coord_registry *reg)
{
	if (coord_registry_add(reg, "train_step", train_step) ||
	    coord_registry_add_resource(reg, "dataset", dataset_create, free))
		return -1;
	return 0;
}

/* The entry point coord-worker looks up in libtrainer_fns.so. */
int coord_register_fns(struct coord_registry *reg);
int coord_register_fns(struct coord_registry *reg)
{
	return tm_register(reg);
}
