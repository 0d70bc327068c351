/* SPDX-License-Identifier: MIT */
/*
 * examples/trainer_model.h - the example trainer's model, data and worker
 * functions, shared by the trainer (in-process workers) and
 * libtrainer_fns.so (what coord-worker loads with --fns over tcp).
 *
 * The task: binary classification of 16-dimensional points whose label is
 * the sign of a fixed random "teacher" network (8 tanh units), with 2% label
 * noise: not linearly separable, so logistic regression stalls near 80% and
 * a small MLP is needed.  The student: 16 -> 32 tanh -> 1 sigmoid, trained by
 * asynchronous SGD (ParameterServerStrategy semantics): each step reads the
 * parameters from the ps, computes the gradient of one mini-batch from its
 * worker's own data stream, and applies it with assign_add.
 */
#ifndef COORD_EXAMPLES_TRAINER_MODEL_H
#define COORD_EXAMPLES_TRAINER_MODEL_H

#include <stdint.h>

#include <coord/var.h>

#define TM_D 16		 /* inputs */
#define TM_H 32		 /* student hidden units */
#define TM_TH 8		 /* teacher hidden units */
#define TM_BATCH_MAX 512 /* examples per step, at most */

/* The model's variables on the ps, by name. */
#define TM_W1 "mlp/w1" /* [H, D] */
#define TM_B1 "mlp/b1" /* [H] */
#define TM_W2 "mlp/w2" /* [H] */
#define TM_B2 "mlp/b2" /* scalar */

/* Arguments of "train_step" (per-worker argument 0: the "dataset"). */
struct tm_step_args {
	coord_var_t w1, b1, w2, b2;
	float lr;
	uint32_t batch;
};

/* Result of "train_step": over its mini-batch, before the update. */
struct tm_step_result {
	float loss_sum;
	float correct;
	float n;
};

/* Arguments of the "dataset" resource creator. */
struct tm_dataset_args {
	uint64_t seed;
};

/* Host-side parameters (the coordinator's copy for init and evaluation). */
struct tm_params {
	float w1[TM_H * TM_D], b1[TM_H], w2[TM_H], b2;
};

/* A deterministic stream of examples (splitmix64 + Box-Muller). */
struct tm_stream {
	uint64_t s;
	float spare;
	int has_spare;
};

void tm_stream_init(struct tm_stream *st, uint64_t seed);
/* The next example: @x[TM_D] and its label (0 or 1). */
void tm_next_example(struct tm_stream *st, float *x, float *y);
/* Small random initial parameters (Xavier-scaled) from @seed. */
void tm_params_init(struct tm_params *p, uint64_t seed);
/* Mean loss and accuracy of @p on @n examples of a held-out stream. */
void tm_evaluate(const struct tm_params *p, uint64_t seed, unsigned n, double *loss, double *acc);
/* Register "train_step" and the "dataset" creator. */
int tm_register(struct coord_registry *reg);

#endif
