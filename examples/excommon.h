/* SPDX-License-Identifier: MIT */
/*
 * examples/excommon.h - what the example main jobs (trainer, recommender)
 * share: local coord-worker / coord-ps processes for --local and their
 * SIGKILL-and-restart for --kill-worker-every, and a progress line that
 * fits the terminal with percentiles from coord_metrics().
 */
#ifndef COORD_EXAMPLES_EXCOMMON_H
#define COORD_EXAMPLES_EXCOMMON_H

#include <stddef.h>

#include <coord/coord.h>

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

#endif
