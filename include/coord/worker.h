/* SPDX-License-Identifier: MIT */
/*
 * coord/worker.h - the side of coord that user functions see.
 *
 * Functions are not shipped as code.  Both the coordinator and every worker
 * build the same registry of C functions by name; the coordinator schedules
 * by id (resolved once with coord_fn_lookup()) and a worker runs the function
 * registered under that name.
 *
 * A function:
 *
 *	static int add(struct coord_ctx *ctx, const void *args, size_t len)
 *	{
 *		const int64_t *ab = args;
 *		int64_t sum;
 *
 *		if (len != 2 * sizeof(int64_t))
 *			return coord_ctx_fail(ctx, COORD_EINVAL, "want two int64");
 *		sum = ab[0] + ab[1];
 *		return coord_ctx_set_result(ctx, &sum, sizeof(sum));
 *	}
 *
 * returns 0 (its result, if any, set through the ctx) or a negative code,
 * which fails the closure with that code (an application error: fatal per S3).
 */
#ifndef COORD_WORKER_H
#define COORD_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>

#ifdef __cplusplus
extern "C" {
#endif

struct coord_ctx;
struct coord_registry;

/** A registered function.  @args is borrowed for the duration of the call. */
typedef int (*coord_fn_t)(struct coord_ctx *ctx, const void *args, size_t len);

/**
 * A per-worker resource creator (S9).  Runs on a worker the first time a
 * closure there needs the resource, and again after that worker recovers.
 * On success it stores the resource in *@res and returns 0; on failure it
 * returns a negative code (message through coord_ctx_fail()), and every
 * closure that needed the resource fails with COORD_EINPUT wrapping it.
 */
typedef int (*coord_res_create_t)(struct coord_ctx *ctx, const void *args, size_t len, void **res);
/** Frees a resource made by a coord_res_create_t; called on the worker. */
typedef void (*coord_res_destroy_t)(void *res);

/* Longest function name, terminating NUL included. */
#define COORD_FN_NAME_MAX 64

/**
 * coord_registry_create() - an empty registry.
 * @out: caller frees with coord_registry_destroy() after every coordinator
 *       and worker that uses it is destroyed.
 *
 * Return: 0; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_registry_create(struct coord_registry **out);

/** coord_registry_destroy() - free a registry; NULL is ignored. */
COORD_API void coord_registry_destroy(struct coord_registry *reg);

/**
 * coord_registry_add() - register @fn under @name.
 * @name: copied; at most COORD_FN_NAME_MAX - 1 bytes.
 *
 * Concurrency: not with any other use of @reg; register everything before
 * handing the registry to coord_create().
 *
 * Return: 0; COORD_EINVAL for a NULL @fn, an empty or too long name, or a
 * name that is already registered; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_registry_add(struct coord_registry *reg, const char *name,
						 coord_fn_t fn);

/**
 * coord_registry_add_resource() - register a per-worker resource creator.
 * @destroy: may be NULL.
 *
 * Same rules as coord_registry_add(); creators and functions share one name
 * space.
 */
COORD_API COORD_NODISCARD int coord_registry_add_resource(struct coord_registry *reg,
							  const char *name,
							  coord_res_create_t create,
							  coord_res_destroy_t destroy);

/**
 * coord_ctx_set_result() - copy @len bytes at @p as the closure's result.
 *
 * May be called more than once; the last call wins.  No malloc for results
 * up to the inline size; larger results come from pooled size classes.
 *
 * Return: 0; COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_ctx_set_result(struct coord_ctx *ctx, const void *p,
						   size_t len);

/**
 * coord_ctx_result_buf() - a buffer of @len bytes that becomes the result;
 * write into it before returning.  Saves a copy for large results.
 *
 * Return: the buffer, or NULL when out of memory.
 */
COORD_API void *coord_ctx_result_buf(struct coord_ctx *ctx, size_t len);

/**
 * coord_ctx_fail() - record an error message and return @code, so a
 * function can `return coord_ctx_fail(ctx, -EIO, "disk %d", n);`.
 * @code: negative; a non-negative code is turned into COORD_EINVAL.
 */
COORD_API int coord_ctx_fail(struct coord_ctx *ctx, int code, const char *fmt, ...)
	COORD_PRINTF(3, 4);

/**
 * coord_ctx_num_inputs() - how many RemoteValue inputs the running closure
 * was scheduled with (struct coord_call.inputs, B1); 0 for none.
 *
 * Concurrency: the function's own thread, during the call.
 */
COORD_API unsigned coord_ctx_num_inputs(const struct coord_ctx *ctx);

/**
 * coord_ctx_input() - the value of input @i (B1).
 * @ctx: the running closure's context.
 * @i:   0 .. coord_ctx_num_inputs() - 1.
 * @len: optional; the value's length in bytes.
 *
 * Every input is READY with a value when the function runs (a failed or
 * cancelled input fails or cancels the closure before it is queued).  The
 * bytes are borrowed for the duration of the call: in place in the input's
 * RemoteValue (inproc) or in the request frame (tcp); do not write them.
 * Reading the inputs in order is O(1) each; random order over tcp walks
 * the frame from the start.
 *
 * Concurrency: the function's own thread, during the call.
 * Return: the bytes (NULL for an empty value, *@len 0), or NULL with *@len
 * 0 for @i out of range.
 */
COORD_API const void *coord_ctx_input(struct coord_ctx *ctx, unsigned i, size_t *len);

/** coord_ctx_attempt() - 1 on the first run of this closure, 2 after one put-back... (B8). */
COORD_API unsigned coord_ctx_attempt(const struct coord_ctx *ctx);

/** coord_ctx_worker() - the index of the worker running the function. */
COORD_API int coord_ctx_worker(const struct coord_ctx *ctx);

/** coord_ctx_closure() - the closure's sequence number (same as coord_rv_id()). */
COORD_API uint64_t coord_ctx_closure(const struct coord_ctx *ctx);

/**
 * coord_ctx_per_worker() - this worker's component of the closure's @i-th
 * per-worker argument (S8): the resource the creator made on this worker.
 *
 * Return: the resource, or NULL if @i is out of range.
 */
COORD_API void *coord_ctx_per_worker(const struct coord_ctx *ctx, unsigned i);

/** coord_ctx_num_per_worker() - how many per-worker arguments the closure has. */
COORD_API unsigned coord_ctx_num_per_worker(const struct coord_ctx *ctx);

/* --- serving functions to coordinators over the network ------------------ */

/**
 * struct coord_server_opts - options of coord_worker_serve(); fill with
 * coord_server_opts_init().
 * @size:       sizeof(struct coord_server_opts) as the program was compiled;
 *              set by coord_server_opts_init().  The struct grows only at its
 *              end, as struct coord_opts (coord/coord.h) does.
 * @registry:   the functions to serve (required); borrowed for the call.
 * @listen:     "host:port" to listen on; port 0 picks a free one.  Without a
 *              cluster key only loopback addresses are allowed (B5).
 * @key_file:   the cluster key file; NULL means $COORD_CLUSTER_KEY_FILE, then
 *              $COORD_CLUSTER_KEY (hex), then none.
 * @max_frame:  the largest frame accepted, bytes (default 16 MiB).
 * @handshake_ms: time a new peer has to complete the handshake (5000).
 * @partial_ms: time a peer has to finish a frame it started (10000): a peer
 *              that sends half a frame and stops is closed.
 * @stop_fd:    the server returns once this descriptor is readable (a pipe
 *              or eventfd written from a SIGTERM handler, say); -1 = never.
 * @on_listen:  called once listening, with the bound port and @arg.
 * @task:       coord_ps_serve() only: this ps task's index; peers that ask
 *              for another are refused.  -1 (default): take the peer's.
 * @transport:  "tcp" (default) or "rdma" (an RC queue pair per connection,
 *              rdma_cm on @listen, which must be an address of an RDMA
 *              device; fails with the reason in a build without verbs, where
 *              the rdma provider libcoord-rdma.so cannot be loaded, or on a
 *              host without an RDMA device).
 * @ckpt_root:  coord_ps_serve() only: the directory checkpoints must lie
 *              under (coord/var.h); NULL (default): the working directory.
 * @max_handshakes: tcp: peers that may be in the handshake at once (default
 *              1024); a connection beyond them is refused at once (an ERROR
 *              frame saying so; logged at most once a second).  A peer in
 *              the handshake holds at most a few KiB of the server's memory:
 *              its frames may not exceed 4 KiB until it is authenticated.
 * @idle_ms:    tcp: an authenticated connection that has received nothing
 *              for this long, with nothing of its running, is closed with an
 *              ERROR frame saying so (default 300000; 0: never).  A
 *              coordinator's heartbeats (heartbeat_ms, default 1000) keep
 *              its connections open: the limit is at least 4 times the
 *              interval it announced.  With heartbeats off, a coordinator
 *              idle that long loses the connection and reconnects (S10);
 *              a worker's or coordinator's ps connection dials again on
 *              its next use.
 */
struct coord_server_opts {
	size_t size;
	const struct coord_registry *registry;
	const char *listen;
	const char *key_file;
	uint32_t max_frame;
	int handshake_ms;
	int partial_ms;
	int stop_fd;
	void (*on_listen)(unsigned port, void *arg);
	void *arg;
	int task;
	const char *transport;
	const char *ckpt_root;
	unsigned max_handshakes;
	int idle_ms;
};

/**
 * coord_server_opts_init_size() - fill the first @size bytes at @o with the
 * defaults and @o->size with @size; what coord_server_opts_init() calls.
 * @o:    the caller's options.
 * @size: sizeof(*@o) as the caller was compiled.
 */
COORD_API void coord_server_opts_init_size(struct coord_server_opts *o, size_t size);

/**
 * coord_server_opts_init() - defaults as documented above, and the size
 * (coord/var.h has coord_ps_serve()).
 * @o: the caller's options.
 */
static inline void coord_server_opts_init(struct coord_server_opts *o)
{
	coord_server_opts_init_size(o, sizeof(*o));
}

/**
 * coord_worker_serve() - serve the registry's functions to coordinators.
 *
 * Each accepted connection, once it passes the handshake (version, role,
 * cluster key), is one worker of the coordinator that opened it, with its
 * own per-worker resources; it runs that coordinator's closures in order
 * and sends the results back in batches.  A peer that is not coord, speaks
 * another version, lacks the key, or sends a malformed frame gets an ERROR
 * frame when possible, its connection is closed and the reason logged; the
 * server keeps serving everyone else.
 *
 * Concurrency: blocks the calling thread until @o->stop_fd is readable; a
 * small pool (one thread per CPU, more while closures run long) runs every
 * handshake and serves every connection, and the calling thread accepts
 * them.  At start the process's soft descriptor limit (RLIMIT_NOFILE) is
 * raised to its hard limit (logged).  Return: 0 after a
 * stop; COORD_EINVAL for bad options (as coord_create()); a negative code if
 * it cannot listen.
 */
COORD_API COORD_NODISCARD int coord_worker_serve(const struct coord_server_opts *o,
						 struct coord_error *err);

/*
 * A shared object given to coord-worker (--fns) registers its functions
 * through this exported entry point (the same table the coordinator uses):
 *
 *	int coord_register_fns(struct coord_registry *reg);
 */
#define COORD_REGISTER_FNS_SYMBOL "coord_register_fns"
typedef int (*coord_register_fns_t)(struct coord_registry *reg);

#ifdef __cplusplus
}
#endif
#endif /* COORD_WORKER_H */
