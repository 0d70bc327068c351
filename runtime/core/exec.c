// SPDX-License-Identifier: MIT
/*
 * runtime/core/exec.c - running a closure on a worker: per-worker resources (S8,
 * S9) and the ctx API that user functions call.
 *
 * One coord_exec_env per worker, used only by the thread that runs that
 * worker's closures: no synchronization inside.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/internal.h"

static struct coord_res_slot *res_slot(struct coord_exec_env *env, uint64_t uid)
{
	for (uint32_t i = 0; i < env->nres; i++)
		if (env->res[i].uid == uid)
			return &env->res[i];
	if (env->nres == env->capres) {
		uint32_t cap = env->capres ? env->capres * 2 : 8;
		struct coord_res_slot *s = realloc(env->res, cap * sizeof(*s));

		if (!s)
			return NULL;
		env->res = s;
		env->capres = cap;
	}
	memset(&env->res[env->nres], 0, sizeof(env->res[0]));
	env->res[env->nres].uid = uid;
	env->res[env->nres].code = 1; /* not made yet */
	return &env->res[env->nres++];
}

void coord_exec_missing(struct coord_ctx *ctx, int worker, const char *what, const char *name)
{
	if (name)
		snprintf(ctx->msg, sizeof(ctx->msg),
			 "worker %d has no %s '%.64s'; serve it with --fns LIB that registers it",
			 worker, what, name);
	else
		snprintf(ctx->msg, sizeof(ctx->msg),
			 "worker %d has no %s with that id (not in the coordinator's function "
			 "table)",
			 worker, what);
	ctx->has_msg = 1;
}

/* Make (lazily, once per worker life) the resource of @pw; 0 or its error. */
static int res_get(struct coord_exec_env *env, struct coord_ctx *ctx, const struct coord_pw_ref *pw,
		   void **res)
{
	const struct coord_fn_entry *f;
	struct coord_res_slot *s;
	struct coord_ctx cctx;
	int r;

	if (pw->creator >= env->reg->n || !env->reg->fns[pw->creator].create) {
		coord_exec_missing(ctx, env->worker, "resource creator",
				   pw->creator < env->reg->n ? env->reg->fns[pw->creator].name
							     : NULL);
		return COORD_ENOFN;
	}
	f = &env->reg->fns[pw->creator];
	s = res_slot(env, pw->uid);
	if (!s)
		return COORD_ENOMEM;
	if (s->code == 1) {
		memset(&cctx, 0, sizeof(cctx));
		cctx.env = env;
		cctx.call = ctx->call;
		s->res = NULL;
		s->creator = pw->creator;
		r = f->create(&cctx, pw->args, pw->len, &s->res);
		s->code = r < 0 ? r : 0;
		if (r < 0)
			snprintf(s->msg, sizeof(s->msg), "%s",
				 cctx.has_msg ? cctx.msg : coord_strerror(r));
	}
	if (s->code < 0) {
		snprintf(ctx->msg, sizeof(ctx->msg),
			 "input error: per-worker resource '%.40s' failed on worker %d: %.100s",
			 f->name, env->worker, s->msg);
		ctx->has_msg = 1;
		return s->code;
	}
	*res = s->res;
	return 0;
}

int coord_exec_slow(struct coord_exec_env *env, const struct coord_exec_call *call,
		    coord_result_buf_t result_buf, void *sink, struct coord_ctx *ctx, int *cause)
{
	int r;

	coord_exec_ctx_init(ctx, env, call, result_buf, sink);
	*cause = 0;
	if (call->fn >= env->reg->n || !env->reg->fns[call->fn].fn) {
		coord_exec_missing(ctx, env->worker, "function",
				   call->fn < env->reg->n ? env->reg->fns[call->fn].name : NULL);
		return COORD_ENOFN;
	}
	/* S8/S9: the per-worker argument becomes this worker's component, made
	 * before the function runs; a failure is an INPUT error wrapping it. */
	for (unsigned i = 0; i < call->npw; i++) {
		r = res_get(env, ctx, &call->pw[i], &ctx->pw[i]);
		if (r < 0) {
			*cause = r;
			return COORD_EINPUT;
		}
	}
	return coord_exec_run(env->reg->fns[call->fn].fn, call, ctx, cause);
}

void coord_exec_res_release(struct coord_exec_env *env, uint64_t uid)
{
	for (uint32_t i = 0; i < env->nres; i++) {
		struct coord_res_slot *s = &env->res[i];

		if (s->uid != uid)
			continue;
		if (s->code == 0 && env->reg->fns[s->creator].destroy)
			env->reg->fns[s->creator].destroy(s->res);
		*s = env->res[--env->nres]; /* order does not matter */
		return;
	}
}

void coord_exec_env_fini(struct coord_exec_env *env)
{
	for (uint32_t i = 0; i < env->nres; i++) {
		const struct coord_fn_entry *f = &env->reg->fns[env->res[i].creator];

		if (env->res[i].code == 0 && f->destroy)
			f->destroy(env->res[i].res);
	}
	free(env->res);
	env->res = NULL;
	env->nres = env->capres = 0;
}

int coord_ctx_set_result(struct coord_ctx *ctx, const void *p, size_t len)
{
	void *buf = coord_ctx_result_buf(ctx, len);

	if (!buf && len)
		return COORD_ENOMEM;
	if (len == sizeof(uint64_t))
		memcpy(buf, p, sizeof(uint64_t)); /* the common small value: one store */
	else if (len)
		memcpy(buf, p, len);
	return 0;
}

void *coord_ctx_result_buf(struct coord_ctx *ctx, size_t len)
{
	return ctx->result_buf ? ctx->result_buf(ctx->sink, len) : NULL;
}

int coord_ctx_fail(struct coord_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
	va_end(ap);
	ctx->has_msg = 1;
	return code < 0 ? code : COORD_EINVAL;
}

unsigned coord_ctx_attempt(const struct coord_ctx *ctx)
{
	return ctx->call ? ctx->call->attempt : 1;
}

int coord_ctx_worker(const struct coord_ctx *ctx)
{
	return ctx->env->worker;
}

uint64_t coord_ctx_closure(const struct coord_ctx *ctx)
{
	return ctx->call ? ctx->call->id : COORD_NO_CLOSURE;
}

void *coord_ctx_per_worker(const struct coord_ctx *ctx, unsigned i)
{
	return ctx->call && i < ctx->call->npw ? ctx->pw[i] : NULL;
}

unsigned coord_ctx_num_per_worker(const struct coord_ctx *ctx)
{
	return ctx->call ? ctx->call->npw : 0;
}

unsigned coord_ctx_num_inputs(const struct coord_ctx *ctx)
{
	return ctx->call ? ctx->call->nin : 0;
}

const void *coord_ctx_input(struct coord_ctx *ctx, unsigned i, size_t *len)
{
	uint32_t n = 0;
	const void *p = NULL;

	if (ctx->call && i < ctx->call->nin)
		p = ctx->call->in_get(ctx->call->in_src, i, &n, &ctx->in_cur);
	if (len)
		*len = n;
	return n ? p : NULL;
}
