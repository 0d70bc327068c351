/* SPDX-License-Identifier: MIT */
/*
 * examples/rec_model.h - the recommender example's click log, its known
 * generating model, the wide & deep student and its worker functions,
 * shared by the recommender (in-process workers) and librec_fns.so (what
 * coord-worker loads with --fns over tcp).
 *
 * The click log: each impression has RM_F categorical fields; field f's id
 * is drawn from [0, vocab[f]) with P(id) ~ 1/(id + 1) (a Zipf-like head and
 * a long tail).  The generating model (the "teacher") gives every (field,
 * id) a bias and a latent vector of RM_K, both fixed functions of a hash,
 * and clicks with probability sigmoid(RM_BIAS0 + sum of biases + sum over
 * field pairs of latent dot products) (a factorization machine).  Its own
 * probabilities are the best possible scorer, so their AUC on held-out
 * impressions is the ceiling a student can reach.
 *
 * The student: wide (one weight per (field, id): column 0 of table
 * "rec/wide<f>" of vocab[f] x RM_W) and deep (an embedding table "rec/emb<f>" of vocab[f] x RM_D
 * per field, their concatenation through RM_H relu units to one logit),
 * trained by asynchronous SGD.  The tables are partitioned variables, split
 * by rows over the ps tasks.  Each step reads its mini-batch's rows with one
 * gather per table (the batch's ids as drawn: the library reads each
 * distinct row once, one request per ps task holding one) and the dense
 * layers in one batch, and adds the sparse updates (one row per distinct
 * id) with one scatter_add per table and the dense ones with ASSIGN_ADD.
 * Rows learn by row-wise Adagrad (an accumulator of squared gradients per
 * row, as TPU embeddings' RowWiseAdagrad): a tail row seen a few times
 * moves as far as its few gradients say, a head row seen in every batch
 * slows down; --sgd gives plain SGD of each row's mean gradient instead.
 */
#ifndef COORD_EXAMPLES_REC_MODEL_H
#define COORD_EXAMPLES_REC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <coord/var.h>

#define RM_F 8		    /* categorical fields */
#define RM_K 4		    /* the teacher's latent dimensions */
#define RM_D 16		    /* the student's embedding dimensions */
#define RM_H 64		    /* the student's hidden units */
#define RM_IN (RM_F * RM_D) /* the deep part's input */
#define RM_W 3		    /* a wide row: its weight, its and the embedding row's accumulators */
#define RM_BATCH_MAX 1024
#define RM_VOCAB_MAX 16000000 /* rows per table, at most */

/* The variables: per field the partitioned "rec/wide<f>" [vocab, RM_W] (the
 * wide weight, then the row-wise Adagrad accumulators of that weight and of
 * the embedding row: slot variables kept in the same row, so one gather
 * reads them) and "rec/emb<f>" [vocab, RM_D] (their shards spread over the
 * ps tasks);
 * "rec/w1" [RM_H, RM_IN], "rec/b1" [RM_H], "rec/w2" [RM_H], "rec/b2" scalar. */
struct rm_vars {
	struct coord_pvar wide[RM_F], emb[RM_F];
	coord_var_t w1, b1, w2, b2;
};

/* Arguments of "rec_step" (per-worker argument 0: its "rec_data"). */
struct rm_step_args {
	struct rm_vars v;
	uint32_t vocab[RM_F];
	uint32_t batch;
	uint32_t adagrad; /* rows: row-wise Adagrad, else SGD of each row's mean gradient */
	float lr_dense, lr_sparse;
};

/* Result of "rec_step": over its mini-batch, before the update. */
struct rm_step_result {
	float loss_sum, clicks, n;
	uint32_t rows; /* distinct rows it read and updated, all fields */
};

/* Arguments of the "rec_data" resource creator. */
struct rm_data_args {
	uint64_t seed;
};

/* One impression. */
struct rm_example {
	uint32_t id[RM_F];
	float y;      /* clicked: 0 or 1 */
	float p_true; /* the teacher's click probability */
};

/* A deterministic stream of impressions. */
struct rm_stream {
	uint64_t s;
};

/* The vocabularies of the fields, from the largest one's @vocab0. */
void rm_vocab(uint32_t vocab0, uint32_t vocab[RM_F]);
void rm_stream_init(struct rm_stream *st, uint64_t seed);
void rm_next(struct rm_stream *st, const uint32_t vocab[RM_F], struct rm_example *ex);

/* Host-side dense parameters. */
struct rm_dense {
	float w1[RM_H * RM_IN], b1[RM_H], w2[RM_H], b2;
};

/* Initial values: embeddings uniform with sd 0.05 from @seed (@n floats of table @f
 * from @off), wide 0, dense Xavier-scaled. */
void rm_emb_init(uint64_t seed, unsigned f, uint64_t off, float *out, size_t n);
void rm_dense_init(struct rm_dense *d, uint64_t seed);

/* The student's click probability of @ex given its rows. */
float rm_predict(const struct rm_dense *d, const float *const emb[RM_F], const float wide[RM_F]);

/* The area under the ROC curve of @score against @y (ties count half). */
double rm_auc(const float *score, const float *y, size_t n);

/* Register "rec_step" and the "rec_data" creator. */
int rm_register(struct coord_registry *reg);

#endif
