/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/exec.h - worker-side execution (runtime/core/exec.c), shared
 * by every transport and server: a worker's environment (its per-worker
 * resources), one call, its context, coord_exec().
 */
#ifndef COORD_RUNTIME_CORE_EXEC_H
#define COORD_RUNTIME_CORE_EXEC_H

#include "runtime/core/closure.h"

/* One worker's table of per-worker resources, indexed by coord_pw uid. */
struct coord_res_slot {
	uint64_t uid;
	uint32_t creator;
	void *res;
	int code; /* 0 made, <0 creation failed (cached: later users fail too) */
	char msg[COORD_ERRMSG_LEN];
};

struct coord_exec_env {
	const struct coord_registry *reg;
	int worker;
	struct coord_ps *ps; /* the ps tasks its functions reach (runtime/ps/ps.h) */
	uint64_t sess;	     /* its coordinator's session: keys updates (ps.h), 0: none */
	struct coord_res_slot *res;
	uint32_t nres, capres;
};

/* A per-worker argument as a worker sees it: which resource, made how. */
struct coord_pw_ref {
	uint64_t uid;
	uint32_t creator; /* registry index of the creator on this worker */
	uint32_t len;
	const void *args;
};

/*
 * The inputs of a call (B1) as a worker reads them: input @i's bytes from
 * @src, which is a closure (inproc: the values in place) or a REQ record's
 * packed input section (transport/wire/wire.c); struct coord_in_cursor and
 * coord_input_get_t are in runtime/util/util.h, shared with the wire layer.
 */
/* Input @i of consumer closure @src (a coord_input_get_t; cursor unused). */
COORD_HIDDEN const void *coord_closure_input(const void *src, uint32_t i, uint32_t *len,
					     struct coord_in_cursor *cur);

/* One call to run on a worker, whatever carried it there. */
struct coord_exec_call {
	uint64_t id;
	uint32_t fn; /* registry index on this worker */
	uint32_t attempt;
	const void *args;
	uint32_t len;
	unsigned npw;
	struct coord_pw_ref pw[COORD_MAX_PW];
	uint32_t nin; /* inputs (B1), read through in_get(in_src, ...) */
	coord_input_get_t in_get;
	const void *in_src;
};

/* Where a function's result bytes go: a closure (inproc) or a frame. */
typedef void *(*coord_result_buf_t)(void *sink, size_t len);

struct coord_ctx {
	struct coord_exec_env *env;
	const struct coord_exec_call *call;
	coord_result_buf_t result_buf;
	void *sink;
	void *pw[COORD_MAX_PW];
	int ps_failed;	 /* COORD_CAUSE_PS(task) of a ps it could not reach, or 0 */
	uint32_t ps_seq; /* updates keyed so far (runtime/ps/ps.h "At most once") */
	struct coord_in_cursor in_cur;
	int has_msg;
	char msg[COORD_ERRMSG_LEN];
};

/*
 * coord_exec() - run @call on @env's worker: make missing per-worker
 * resources first (S9), then call the function; its result goes through
 * @result_buf(@sink, len).  Returns the function's code, or COORD_EINPUT
 * with *cause and @ctx->msg set, or COORD_ENOFN for an index that is not a
 * function here.  The common call (a known function, no per-worker
 * arguments) runs inline here; the rest in coord_exec_slow().
 */
COORD_HIDDEN int coord_exec_slow(struct coord_exec_env *env, const struct coord_exec_call *call,
				 coord_result_buf_t result_buf, void *sink, struct coord_ctx *ctx,
				 int *cause);

/*
 * coord_exec_missing() - @ctx's error for a @what ("function", "resource
 * creator") named @name (NULL: not known) that worker @worker does not
 * have: it names it and says how to serve it.
 */
COORD_HIDDEN void coord_exec_missing(struct coord_ctx *ctx, int worker, const char *what,
				     const char *name);

static inline void coord_exec_ctx_init(struct coord_ctx *ctx, struct coord_exec_env *env,
				       const struct coord_exec_call *call,
				       coord_result_buf_t result_buf, void *sink)
{
	ctx->env = env;
	ctx->call = call;
	ctx->result_buf = result_buf;
	ctx->sink = sink;
	ctx->has_msg = 0;
	ctx->ps_failed = 0;
	ctx->ps_seq = 0;
	ctx->in_cur.i = 0;
	ctx->in_cur.p = NULL;
}

/* Call function @f of @call in @ctx, made by coord_exec_ctx_init(). */
static inline int coord_exec_run(coord_fn_t f, const struct coord_exec_call *call,
				 struct coord_ctx *ctx, int *cause)
{
	int r = f(ctx, call->args, call->len);

	if (likely(r >= 0))
		return 0;
	if (ctx->ps_failed) {
		/* It failed after a ps could not be reached: a ps failure
		 * (S11), whatever code the function passed on. */
		*cause = ctx->ps_failed;
		return COORD_EUNAVAILABLE;
	}
	return r;
}

static inline int coord_exec(struct coord_exec_env *env, const struct coord_exec_call *call,
			     coord_result_buf_t result_buf, void *sink, struct coord_ctx *ctx,
			     int *cause)
{
	const struct coord_registry *reg = env->reg;

	if (unlikely(call->npw || call->fn >= reg->n || !reg->fns[call->fn].fn))
		return coord_exec_slow(env, call, result_buf, sink, ctx, cause);
	coord_exec_ctx_init(ctx, env, call, result_buf, sink);
	*cause = 0;
	return coord_exec_run(reg->fns[call->fn].fn, call, ctx, cause);
}

/* coord_exec_res_release() - S9: destroy @env's component of resource @uid
 * (its destroy callback), if it has one. */
COORD_HIDDEN void coord_exec_res_release(struct coord_exec_env *env, uint64_t uid);
COORD_HIDDEN void coord_exec_env_fini(struct coord_exec_env *env);

#endif /* COORD_RUNTIME_CORE_EXEC_H */
