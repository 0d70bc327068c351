/* SPDX-License-Identifier: MIT */
/*
 * examples/excommon.h - what the example main jobs (trainer, recommender)
 * share: their common options, the run's set-up (registry, checkpoint dir,
 * local or given cluster, coordinator), the training loop (a window of steps
 * in flight, a join per epoch, kills and checkpoints), local coord-worker /
 * coord-ps processes for --local and their SIGKILL-and-restart for
 * --kill-worker-every, and a progress line that fits the terminal with
 * percentiles from coord_metrics().  An example keeps its model, its own
 * options, its --help text and what it prints.
 */
#ifndef COORD_EXAMPLES_EXCOMMON_H
#define COORD_EXAMPLES_EXCOMMON_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include <coord/coord.h>

struct option;

/* CLOCK_MONOTONIC in seconds. */
double ex_now_s(void);

/*
 * ex_local_start() - start @nw coord-worker processes serving @fns_lib (a
 * file name beside this binary, e.g. "libtrainer_fns.so") and @nps coord-ps
 * processes (with --ckpt-root @ckpt_root when not NULL; it must outlive
 * them) on loopback; $COORD_WORKER_BIN / $COORD_PS_BIN override the tools'
 * paths.  Return: the cluster's spec as JSON (free() it), or NULL with a
 * message on stderr (nothing left running).
 */
char *ex_local_start(const char *fns_lib, unsigned nw, unsigned nps, const char *ckpt_root);

/* ex_local_stop() - SIGTERM every local process and reap it. */
void ex_local_stop(void);

/*
 * ex_kill_one_worker() - SIGKILL a random local worker and restart it on
 * its port (on a terminal the message takes the progress line's place).
 */
void ex_kill_one_worker(int quiet);

/*
 * ex_all_back() - every one of @kills kills so far seen as a loss and no
 * worker down: the time for the next kill, or the end of a kill demo.
 */
int ex_all_back(struct coord *c, unsigned kills);

/*
 * --kill-worker-every SEC [--kills N]: a kill every @every seconds, each
 * once the one before was seen lost and recovered (ex_all_back()).  In a
 * demo (no --epochs given) only @want kills, and the run goes on (a whole
 * epoch at a time: ex_kills_more()) until they are all back, for at most
 * @grace seconds more than they take.
 */
struct ex_kills {
	double every, next, until;
	unsigned done, want;
	int demo, quiet;
	double at[64]; /* when the first kills were made (ex_now_s()) */
};

void ex_kills_init(struct ex_kills *k, double every, unsigned want, int demo, double grace,
		   int quiet);
/* Between steps: kill one worker if it is time. */
void ex_kills_tick(struct ex_kills *k, struct coord *c);
/* At the end of the planned epochs: does the demo need more? */
int ex_kills_more(const struct ex_kills *k, struct coord *c);

/*
 * --ckpt-dir: ex_ckpt_dir() makes @dir and puts its absolute path in @abs
 * (PATH_MAX bytes: the local coord-ps tasks' --ckpt-root too); 0 or -1 with
 * a message.  ex_ckpt_resume() restores the newest checkpoint there, whole,
 * onto however many ps tasks run now: 0 with *@start its step (0 when there
 * is none), or < 0 with the reason printed (nothing restored, the
 * checkpoint left as it is).  ex_ckpt_save() saves step @step (after a
 * join, for an exact snapshot) and says so.
 */
int ex_ckpt_dir(const char *dir, char *abs);
int ex_ckpt_resume(struct coord *c, const char *dir, uint64_t *start, int quiet,
		   struct coord_error *err);
int ex_ckpt_save(struct coord *c, const char *dir, uint64_t step, int quiet,
		 struct coord_error *err);

/* A coord_log_fn_t that first erases the progress line (on a terminal). */
void ex_log_over_progress(int level, const char *msg, void *arg);

/* The terminal's width: TIOCGWINSZ on stdout, else $COLUMNS, else 80. */
int ex_term_cols(void);

#define EX_MAX_FIELDS 16

/*
 * ex_fit_line() - compose @n (<= EX_MAX_FIELDS) fields into @line of at most
 * @cols - 1 columns (the last column would wrap on some terminals): those of
 * highest priority (@prio 0 first, at most EX_MAX_FIELDS) that fit, in
 * their order, an empty one never, then in front a bar [###   ] of what
 * room is left (8 to 26 columns, or none) filled to @frac.
 */
void ex_fit_line(char *line, size_t cap, int cols, double frac, const char *const *fields,
		 const int *prio, int n);

/*
 * A latency window: @win = now less the snapshot of two turns (a second
 * each) ago, or all since the start while that has fewer than 8 samples.
 */
struct ex_window {
	double last_turn;
	struct coord_hist old, older, win;
};

void ex_window_update(struct ex_window *w, const struct coord_hist *now, double t);

/*
 * The options both examples take (their --help says what they mean).  The
 * example sets its defaults first (ex_opts_defaults(), then its own).
 */
struct ex_opts {
	const char *prog; /* for messages: "trainer", "recommender" */
	const char *transport, *spec, *ckpt_dir;
	unsigned workers, ps, local, epochs, steps, batch, ckpt_every, kills;
	int epochs_set; /* --epochs given: no longer for --kill-worker-every */
	int quiet;
	double kill_every;
	uint64_t seed;
};

/* inproc, 4 workers, 2 ps, 200 steps an epoch, 3 kills, seed 1. */
void ex_opts_defaults(struct ex_opts *o, const char *prog);

/*
 * An example's own options: @lo (ended by a zero entry; their letters not
 * among the common ones) handled by @opt(@ctx, letter, optarg), 0 or -1.
 */
struct ex_extra {
	const struct option *lo;
	int (*opt)(void *ctx, int ch, const char *arg);
	void *ctx;
	void (*usage)(FILE *f); /* --help (exit 0), and a bad option */
};

/*
 * ex_parse() - the command line into @o and the example's options: --help
 * prints the usage and exits; --transport tcp without --spec means --local 4
 * and --spec or --local mean tcp.  Return: 0; or -1 (usage printed) for an
 * unknown option, or with "PROG: bad option (see --help)" for a value out
 * of the common ranges.  The example checks its own ranges after.
 */
int ex_parse(int argc, char **argv, struct ex_opts *o, const struct ex_extra *x);

/* "PROG: bad option (see --help)" on stderr; -1. */
int ex_bad_option(const struct ex_opts *o);

/*
 * A run: the registry with the example's functions, the checkpoint dir made
 * absolute, the local processes or the given cluster, the coordinator.
 */
struct ex_run {
	struct coord_registry *reg;
	struct coord_spec *spec;
	struct coord *c;
	char *json;		 /* the local cluster's spec */
	char ckpt_abs[PATH_MAX]; /* --ckpt-dir, absolute: the local ps tasks' --ckpt-root too */
};

/*
 * ex_run_start() - ignore SIGPIPE, route coord's log over the progress line
 * on a terminal, register the functions with @reg_fns, make --ckpt-dir (its
 * absolute path put in o->ckpt_dir), start @o->local processes serving
 * @fns_lib or read --spec, and create the coordinator.  Return: 0, or < 0
 * with the reason printed; ex_run_stop() either way.
 */
int ex_run_start(struct ex_run *run, struct ex_opts *o, int (*reg_fns)(struct coord_registry *),
		 const char *fns_lib);
void ex_run_stop(struct ex_run *run);

/* The fields of the progress line, in their order. */
enum {
	EX_F_EPOCH,
	EX_F_STEP,
	EX_F_LOSS,
	EX_F_MODEL,
	EX_F_RATE,
	EX_F_UP,
	EX_F_LOST,
	EX_F_RT,
	EX_NFIELDS
};

/*
 * The progress of a run, drawn as a bar on a terminal (redrawn in place) or
 * a line per epoch: steps, loss, the example's model field (accuracy, AUC),
 * and what the coordinator's metrics say (B7): steps/s, workers up, losses
 * and recoveries, the median and 99th percentile round trip of a step (from
 * schedule to its value) over the last second or two.
 */
struct ex_progress {
	struct coord *c;
	int tty, quiet;
	double t0, last_draw, last_line;
	uint64_t total, done, start;
	double loss, n, aux; /* since the last epoch; aux: the example's own sum */
	unsigned epoch, epochs;
	struct ex_window rt;	 /* step round trips of the last 1-2 s */
	const int *prio;	 /* EX_F_* priorities on a terminal; [EX_F_LOST] while none */
	const char *model_label; /* before the model field on a plain line */
};

/* ex_progress_draw() - draw @pg with @model as its model field; @final: an epoch's end. */
void ex_progress_draw(struct ex_progress *pg, int final, const char *model);

#define EX_WINDOW_MAX 64

/*
 * The training loop of an example: from a start step to the end of
 * --epochs (with --kill-worker-every and no --epochs, on by whole epochs
 * until --kills workers were killed and are back, at most @grace seconds
 * more), one closure @fn per step with the per-worker data of @creator,
 * @window steps in flight, a join per epoch, then @epoch_done, the line,
 * and a checkpoint every --ckpt-every steps and at the end.
 */
struct ex_loop {
	struct ex_progress *pg; /* c, tty, quiet, total, epochs, prio, model_label set */
	const struct ex_opts *o;
	const char *fn, *creator;
	const void *args, *pw_args;
	size_t len, pw_len;
	unsigned window; /* at most EX_WINDOW_MAX */
	double grace;
	/* A step's result (its value, @len bytes): add it to @pg's sums. */
	void (*account)(struct ex_progress *pg, const void *val, size_t len);
	/* Draw the line (ex_progress_draw() with the model field). */
	void (*draw)(struct ex_progress *pg, int final);
	/* After an epoch's join (NULL: nothing): evaluate, keep a point. */
	int (*epoch_done)(struct ex_progress *pg, uint64_t step, struct coord_error *err);
	/* Set by ex_train(): */
	struct ex_kills kills;
	double aside_s; /* after the joins: evaluating, drawing, checkpointing */
};

/* ex_train() - run @l from @start_step; *@end_step: where it stopped.  0 or < 0. */
int ex_train(struct ex_loop *l, uint64_t start_step, uint64_t *end_step, struct coord_error *err);

#endif
