// SPDX-License-Identifier: MIT
/*
 * examples/excommon.c - what the example main jobs share (excommon.h):
 * local server processes, kills, checkpoints, the progress line, the
 * common options, a run's set-up and the training loop.  A local process is
 * never outlived (PR_SET_PDEATHSIG) and never signalled once its restart
 * failed (pid -1: kill(-1) would reach every process of the user).
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <getopt.h>
#include <time.h>
#include <unistd.h>

#include <coord/spec.h>
#include <coord/var.h>

#include "excommon.h"

#define MAX_PROCS 64

struct proc {
	pid_t pid;
	unsigned port;
	int is_ps;
	unsigned task;
};

static struct proc procs[MAX_PROCS];
static unsigned nworkers;
static unsigned nprocs;
static char worker_bin[PATH_MAX], ps_bin[PATH_MAX], fns_lib[PATH_MAX];
static const char *ckpt_root;

double ex_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Paths of the servers: $COORD_WORKER_BIN etc., else beside this binary. */
static void find_binaries(const char *lib)
{
	char self[PATH_MAX], *dir;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	self[n > 0 ? n : 0] = 0;
	dir = dirname(self);
	snprintf(worker_bin, sizeof(worker_bin), "%s",
		 getenv("COORD_WORKER_BIN") ? getenv("COORD_WORKER_BIN") : "");
	if (!worker_bin[0])
		snprintf(worker_bin, sizeof(worker_bin), "%s/../tools/coord-worker", dir);
	snprintf(ps_bin, sizeof(ps_bin), "%s",
		 getenv("COORD_PS_BIN") ? getenv("COORD_PS_BIN") : "");
	if (!ps_bin[0])
		snprintf(ps_bin, sizeof(ps_bin), "%s/../tools/coord-ps", dir);
	snprintf(fns_lib, sizeof(fns_lib), "%s/%s", dir, lib);
}

/* Start a server; wait for its "... listening on port P" line. */
static int spawn(struct proc *p, unsigned port)
{
	char listen[32], task[16], line[128], fmt[64];
	int fds[2];
	FILE *f;

	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	snprintf(task, sizeof(task), "%u", p->task);
	if (pipe(fds) < 0)
		return -1;
	p->pid = fork();
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the trainer */
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (p->is_ps && ckpt_root)
			execl(ps_bin, ps_bin, "--listen", listen, "--task", task, "--log", "error",
			      "--ckpt-root", ckpt_root, (char *)NULL);
		else if (p->is_ps)
			execl(ps_bin, ps_bin, "--listen", listen, "--task", task, "--log", "error",
			      (char *)NULL);
		else
			execl(worker_bin, worker_bin, "--fns", fns_lib, "--listen", listen, "--log",
			      "error", (char *)NULL);
		fprintf(stderr, "trainer: cannot run %s: %s\n", p->is_ps ? ps_bin : worker_bin,
			strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	snprintf(fmt, sizeof(fmt), "%s listening on port %%u",
		 p->is_ps ? "coord-ps" : "coord-worker");
	if (p->pid < 0 || !f || !fgets(line, sizeof(line), f) || sscanf(line, fmt, &p->port) != 1) {
		if (p->pid > 0)
			kill(p->pid, SIGKILL);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

void ex_local_stop(void)
{
	for (unsigned i = 0; i < nprocs; i++)
		if (procs[i].pid > 0)
			kill(procs[i].pid, SIGTERM);
	for (unsigned i = 0; i < nprocs; i++)
		if (procs[i].pid > 0)
			waitpid(procs[i].pid, NULL, 0);
	nprocs = 0;
}

char *ex_local_start(const char *lib, unsigned nw, unsigned nps, const char *ckpt)
{
	size_t cap = 64 + 32 * (size_t)(nw + nps), off = 0;
	char *json = malloc(cap);

	find_binaries(lib);
	ckpt_root = ckpt;
	nworkers = nw;
	if (!json || nw + nps > MAX_PROCS) {
		fprintf(stderr, "%s: at most %d local processes\n", program_invocation_short_name,
			MAX_PROCS);
		free(json);
		return NULL;
	}
	for (unsigned i = 0; i < nw + nps && i < MAX_PROCS; i++) {
		struct proc *p = &procs[nprocs];

		p->is_ps = i >= nw;
		p->task = p->is_ps ? i - nw : i;
		if (spawn(p, 0) < 0) {
			fprintf(stderr, "%s: could not start %s (build it: ninja -C build)\n",
				program_invocation_short_name, p->is_ps ? ps_bin : worker_bin);
			ex_local_stop();
			free(json);
			return NULL;
		}
		nprocs++;
	}
	off += (size_t)snprintf(json + off, cap - off, "{\"worker\": [");
	for (unsigned i = 0; i < nw; i++)
		off += (size_t)snprintf(json + off, cap - off, "%s\"127.0.0.1:%u\"", i ? ", " : "",
					procs[i].port);
	off += (size_t)snprintf(json + off, cap - off, "], \"ps\": [");
	for (unsigned i = 0; i < nps; i++)
		off += (size_t)snprintf(json + off, cap - off, "%s\"127.0.0.1:%u\"", i ? ", " : "",
					procs[nw + i].port);
	snprintf(json + off, cap - off, "]}");
	return json;
}

void ex_kill_one_worker(int quiet)
{
	struct proc *p = &procs[(unsigned)rand() % (nworkers ? nworkers : 1)];
	/* On a terminal the message takes the progress line's place (erased
	 * with EL); the next draw puts the line back under it. */
	const char *pre = isatty(1) ? "\r\033[K" : "";
	pid_t old = p->pid;

	if (old <= 0) /* its restart failed: nothing to kill (never kill(-1)) */
		return;
	kill(old, SIGKILL);
	waitpid(old, NULL, 0);
	if (spawn(p, p->port) < 0) {
		p->pid = -1;
		fprintf(stderr, "%s%s: worker %u killed; restart on port %u failed\n", pre,
			program_invocation_short_name, p->task, p->port);
		return;
	}
	if (!quiet)
		fprintf(stderr, "%s%s: killed worker %u (pid %d), restarted on port %u\n", pre,
			program_invocation_short_name, p->task, (int)old, p->port);
}

/* On a terminal, coord's log lines (a worker lost...) take the progress
 * line's place as the kill messages do, so that no half-line is left. */
void ex_kills_init(struct ex_kills *k, double every, unsigned want, int demo, double grace,
		   int quiet)
{
	double now = ex_now_s();

	*k = (struct ex_kills){ .every = every,
				.next = every > 0 ? now + every : 0,
				.until = now + grace + want * every,
				.want = want,
				.demo = demo && every > 0,
				.quiet = quiet };
}

void ex_kills_tick(struct ex_kills *k, struct coord *c)
{
	if (!k->next || ex_now_s() < k->next || (k->demo && k->done >= k->want) ||
	    !ex_all_back(c, k->done))
		return;
	ex_kill_one_worker(k->quiet);
	if (k->done < sizeof(k->at) / sizeof(k->at[0]))
		k->at[k->done] = ex_now_s();
	k->done++;
	k->next = ex_now_s() + k->every;
}

int ex_kills_more(const struct ex_kills *k, struct coord *c)
{
	return k->demo && !(k->done >= k->want && ex_all_back(c, k->done)) && ex_now_s() < k->until;
}

int ex_ckpt_dir(const char *dir, char *abs)
{
	mkdir(dir, 0755);
	if (!realpath(dir, abs)) {
		fprintf(stderr, "%s: --ckpt-dir %s: %s\n", program_invocation_short_name, dir,
			strerror(errno));
		return -1;
	}
	return 0;
}

int ex_ckpt_resume(struct coord *c, const char *dir, uint64_t *start, int quiet,
		   struct coord_error *err)
{
	int r = coord_checkpoint_restore(c, dir, start, err);

	if (r == -ENOENT) {
		*start = 0;
		return 0;
	}
	if (r < 0) {
		fprintf(stderr,
			"%s: cannot resume from %s: %s\n"
			"%s: nothing was restored and the checkpoint is left as it is\n",
			program_invocation_short_name, dir, err->msg,
			program_invocation_short_name);
		return r;
	}
	if (!quiet)
		printf("resumed from the checkpoint of step %llu in %s%s%s\n",
		       (unsigned long long)*start, dir, err->msg[0] ? ": " : "", err->msg);
	return 0;
}

int ex_ckpt_save(struct coord *c, const char *dir, uint64_t step, int quiet,
		 struct coord_error *err)
{
	int r = coord_checkpoint_save(c, dir, step, err);

	if (r == 0 && !quiet)
		printf("checkpoint: step %llu saved to %s\n", (unsigned long long)step, dir);
	return r;
}

void ex_log_over_progress(int level, const char *msg, void *arg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	(void)arg;
	fprintf(stderr, "\r\033[Kcoord %s: %s\n", level >= 0 && level < 4 ? names[level] : "log",
		msg);
}

/* Every kill so far seen as a loss, and no worker down: the time for the
 * next one (else it waits, so that each kill is one loss and one recovery). */
int ex_all_back(struct coord *c, unsigned kills)
{
	struct coord_metrics m;

	return coord_metrics(c, &m, NULL, 0) == 0 && m.losses >= kills && m.workers_down == 0;
}

int ex_term_cols(void)
{
	struct winsize ws;
	const char *e = getenv("COLUMNS");

	if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (e && atoi(e) > 0)
		return atoi(e);
	return 80;
}

void ex_fit_line(char *line, size_t cap, int cols, double frac, const char *const *f,
		 const int *prio, int n)
{
	int room = cols - 1, used = 0, keep[EX_MAX_FIELDS] = { 0 }, bar;
	size_t off = 0;

	n = n < EX_MAX_FIELDS ? n : EX_MAX_FIELDS;
	for (int p = 0; p <= EX_MAX_FIELDS; p++)
		for (int i = 0; i < n; i++)
			if (prio[i] == p && f[i][0] &&
			    used + (used ? 1 : 0) + (int)strlen(f[i]) <= room) {
				used += (used ? 1 : 0) + (int)strlen(f[i]);
				keep[i] = 1;
			}
	bar = room - used - 1;
	bar = bar > 26 ? 26 : bar < 8 ? 0 : bar;
	line[0] = 0;
	if (bar) {
		int in = bar - 2, fill = (int)(in * (frac > 1 ? 1 : frac < 0 ? 0 : frac));

		off += (size_t)snprintf(line, cap, "[%.*s%*s]", fill, "########################",
					in - fill, "");
	}
	for (int i = 0; i < n && off < cap; i++)
		if (keep[i])
			off += (size_t)snprintf(line + off, cap - off, "%s%s", off ? " " : "",
						f[i]);
}

void ex_window_update(struct ex_window *w, const struct coord_hist *now, double t)
{
	if (t - w->last_turn >= 1.0) {
		w->older = w->old;
		w->old = *now;
		w->last_turn = t;
	}
	if (coord_hist_sub(&w->win, now, &w->older) < 0 || w->win.count < 8)
		w->win = *now; /* too few yet: since the start */
}

/* ---- the common options ------------------------------------------------------------ */

void ex_opts_defaults(struct ex_opts *o, const char *prog)
{
	*o = (struct ex_opts){ .prog = prog,
			       .transport = "inproc",
			       .workers = 4,
			       .ps = 2,
			       .steps = 200,
			       .kills = 3,
			       .seed = 1 };
}

static const struct option common_lo[] = {
	{ "transport", required_argument, NULL, 't' },
	{ "local", required_argument, NULL, 'L' },
	{ "spec", required_argument, NULL, 's' },
	{ "workers", required_argument, NULL, 'w' },
	{ "ps", required_argument, NULL, 'p' },
	{ "epochs", required_argument, NULL, 'e' },
	{ "steps", required_argument, NULL, 'S' },
	{ "batch", required_argument, NULL, 'b' },
	{ "seed", required_argument, NULL, 'r' },
	{ "ckpt-dir", required_argument, NULL, 'c' },
	{ "ckpt-every", required_argument, NULL, 'C' },
	{ "kill-worker-every", required_argument, NULL, 'k' },
	{ "kills", required_argument, NULL, 'K' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
};

#define NCOMMON (sizeof(common_lo) / sizeof(common_lo[0]))
#define MAX_EXTRA 16

/* One common option; 1 if @ch is not one. */
static int common_opt(struct ex_opts *o, int ch, const char *arg)
{
	switch (ch) {
	case 't':
		o->transport = arg;
		break;
	case 'L':
		o->local = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 's':
		o->spec = arg;
		break;
	case 'w':
		o->workers = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'p':
		o->ps = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'e':
		o->epochs = (unsigned)strtoul(arg, NULL, 10);
		o->epochs_set = 1;
		break;
	case 'S':
		o->steps = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'b':
		o->batch = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'r':
		o->seed = strtoull(arg, NULL, 10);
		break;
	case 'c':
		o->ckpt_dir = arg;
		break;
	case 'C':
		o->ckpt_every = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'k':
		o->kill_every = strtod(arg, NULL);
		break;
	case 'K':
		o->kills = (unsigned)strtoul(arg, NULL, 10);
		break;
	case 'q':
		o->quiet = 1;
		break;
	default:
		return 1;
	}
	return 0;
}

int ex_bad_option(const struct ex_opts *o)
{
	fprintf(stderr, "%s: bad option (see --help)\n", o->prog);
	return -1;
}

int ex_parse(int argc, char **argv, struct ex_opts *o, const struct ex_extra *x)
{
	struct option lo[NCOMMON + MAX_EXTRA + 1];
	size_t n = 0;
	int ch;

	memcpy(lo, common_lo, sizeof(common_lo));
	while (x->lo[n].name && n < MAX_EXTRA) {
		lo[NCOMMON + n] = x->lo[n];
		n++;
	}
	memset(&lo[NCOMMON + n], 0, sizeof(lo[0]));
	while ((ch = getopt_long(argc, argv, "hq", lo, NULL)) != -1) {
		if (ch == 'h') {
			x->usage(stdout);
			exit(0);
		}
		if (ch != '?' &&
		    (common_opt(o, ch, optarg) == 0 || x->opt(x->ctx, ch, optarg) == 0))
			continue;
		x->usage(stderr);
		return -1;
	}
	if (strcmp(o->transport, "tcp") == 0 && !o->spec && !o->local)
		o->local = 4;
	if (o->spec || o->local)
		o->transport = "tcp";
	if (!o->workers || !o->ps || o->ps > 16 || !o->epochs || !o->steps || !o->batch ||
	    (o->kill_every > 0 && !o->local) || !o->kills || o->kills > 1000)
		return ex_bad_option(o);
	return 0;
}

/* ---- a run's set-up ---------------------------------------------------------------- */

int ex_run_start(struct ex_run *run, struct ex_opts *o, int (*reg_fns)(struct coord_registry *),
		 const char *lib)
{
	struct coord_error err = { 0 };
	struct coord_opts co;
	int r = 0;

	signal(SIGPIPE, SIG_IGN);
	if (isatty(1) && !o->quiet)
		coord_set_log_fn(ex_log_over_progress, NULL);
	if (coord_registry_create(&run->reg) || reg_fns(run->reg)) {
		fprintf(stderr, "%s: cannot register the functions\n", o->prog);
		return -1;
	}
	coord_opts_init(&co);
	co.registry = run->reg;
	co.transport = o->transport;
	co.inproc_workers = o->workers;
	co.inproc_ps = o->ps;
	if (o->ckpt_dir) {
		if (ex_ckpt_dir(o->ckpt_dir, run->ckpt_abs) < 0)
			return -1;
		o->ckpt_dir = run->ckpt_abs;
	}
	if (o->local) {
		run->json = ex_local_start(lib, o->local, o->ps,
					   run->ckpt_abs[0] ? run->ckpt_abs : NULL);
		r = run->json ? coord_spec_parse(run->json, &run->spec, &err) : -1;
	} else if (o->spec) {
		r = coord_spec_from_arg(o->spec, &run->spec, NULL, &err);
	}
	if (r == 0)
		r = coord_create(run->spec, &co, &run->c, &err);
	if (r < 0)
		fprintf(stderr, "%s: %s\n", o->prog,
			err.msg[0] ? err.msg : "cannot start the cluster");
	return r;
}

void ex_run_stop(struct ex_run *run)
{
	coord_destroy(run->c);
	coord_spec_destroy(run->spec);
	coord_registry_destroy(run->reg);
	ex_local_stop();
	free(run->json);
}

/* ---- the progress line ------------------------------------------------------------- */

void ex_progress_draw(struct ex_progress *pg, int final, const char *model)
{
	static struct coord_metrics m; /* 11 KiB: the histograms */
	double t = ex_now_s(), dt = t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9;
	char f[EX_NFIELDS][48], line[512];
	const char *fp[EX_NFIELDS];
	int prio[EX_NFIELDS], keep;

	if (pg->quiet || coord_metrics(pg->c, &m, NULL, 0) < 0)
		return;
	/* An epoch's end keeps its line at most once a second, and the last. */
	keep = final && (t - pg->last_line >= 1 || pg->done >= pg->total);
	if (keep)
		pg->last_line = t;
	ex_window_update(&pg->rt, &m.round_trip_ns, t);
	memcpy(prio, pg->prio, sizeof(prio));
	/* Losses come before latency once there are some (--kill-worker-every). */
	prio[EX_F_LOST] = m.losses ? 4 : pg->prio[EX_F_LOST];
	snprintf(f[EX_F_EPOCH], sizeof(f[0]), "epoch %u/%u", pg->epoch, pg->epochs);
	snprintf(f[EX_F_STEP], sizeof(f[0]), "step %llu/%llu", (unsigned long long)pg->done,
		 (unsigned long long)pg->total);
	snprintf(f[EX_F_LOSS], sizeof(f[0]), "loss %.4f", pg->n ? pg->loss / pg->n : 0);
	snprintf(f[EX_F_MODEL], sizeof(f[0]), "%s", model);
	snprintf(f[EX_F_RATE], sizeof(f[0]), "%.0f steps/s", (double)(pg->done - pg->start) / dt);
	snprintf(f[EX_F_UP], sizeof(f[0]), "workers %u/%u up", m.workers_up, m.workers);
	snprintf(f[EX_F_LOST], sizeof(f[0]), "%llu lost, %llu recovered",
		 (unsigned long long)m.losses, (unsigned long long)m.recoveries);
	snprintf(f[EX_F_RT], sizeof(f[0]), "rt p50 %.2f p99 %.2f ms",
		 coord_hist_percentile(&pg->rt.win, 50) / 1e6,
		 coord_hist_percentile(&pg->rt.win, 99) / 1e6);
	if (!pg->rt.win.count)
		f[EX_F_RT][0] = 0; /* no sample yet: left out */
	if (pg->tty) {
		/* \r, the line, then erase what a longer line left (EL, \033[K). */
		for (int i = 0; i < EX_NFIELDS; i++)
			fp[i] = f[i];
		ex_fit_line(line, sizeof(line), ex_term_cols(),
			    (double)pg->done / (pg->total ? pg->total : 1), fp, prio, EX_NFIELDS);
		printf("\r%s\033[K%s", line, keep ? "\n" : "");
		fflush(stdout);
	} else if (keep) {
		printf("%s  %s  train %s  %s%s  %s  %s (%s)  %s\n", f[EX_F_EPOCH], f[EX_F_STEP],
		       f[EX_F_LOSS], pg->model_label, f[EX_F_MODEL], f[EX_F_RATE], f[EX_F_UP],
		       f[EX_F_LOST], f[EX_F_RT]);
		fflush(stdout);
	}
	pg->last_draw = t;
}

/* ---- the training loop ------------------------------------------------------------- */

/* The steps in flight: a ring of RemoteValues, the oldest at @head. */
struct window {
	struct coord_rv *rv[EX_WINDOW_MAX];
	unsigned head, n;
};

/* Take the oldest step's result into the sums (@l->account), and put it. */
static void take_oldest(struct ex_loop *l, struct window *w)
{
	struct coord_rv *rv = w->rv[w->head];
	const void *val;
	size_t len;

	if (coord_rv_fetch(rv, &val, &len, NULL) == 0)
		l->account(l->pg, val, len);
	coord_rv_put(rv);
	w->head = (w->head + 1) % l->window;
	w->n--;
	l->pg->done++;
}

/* One epoch's steps, from *@step to its end; the window is empty after. */
static int run_epoch(struct ex_loop *l, struct coord_call *call, struct window *w, uint64_t *step,
		     struct coord_error *err)
{
	struct ex_progress *pg = l->pg;
	uint64_t epoch_end = (*step / l->o->steps + 1) * l->o->steps;
	int r = 0;

	pg->epoch = (unsigned)(*step / l->o->steps) + 1;
	for (; *step < epoch_end && r == 0; (*step)++) {
		if (w->n == l->window) /* the window is full: take the oldest */
			take_oldest(l, w);
		r = coord_schedule_call(pg->c, call, &w->rv[(w->head + w->n) % l->window], err);
		if (r == 0)
			w->n++;
		if (pg->tty && ex_now_s() - pg->last_draw > 0.1)
			l->draw(pg, 0);
		ex_kills_tick(&l->kills, pg->c);
	}
	while (w->n)
		take_oldest(l, w);
	return r;
}

/*
 * After an epoch's steps (@r: how they went): join, @epoch_done, the line
 * (also after a failure), maybe a checkpoint.
 */
static int end_epoch(struct ex_loop *l, int r, uint64_t step, uint64_t *last_ckpt,
		     struct coord_error *err)
{
	struct ex_progress *pg = l->pg;
	double t_aside;

	if (r == 0)
		r = coord_join(pg->c, err); /* the epoch: every step applied */
	t_aside = ex_now_s();

	if (r == 0 && l->epoch_done)
		r = l->epoch_done(pg, step, err);
	if (r == 0 && step >= pg->total && ex_kills_more(&l->kills, pg->c)) {
		pg->total += l->o->steps; /* one more epoch */
		pg->epochs++;
	}
	l->draw(pg, 1);
	pg->loss = pg->n = pg->aux = 0;
	if (r == 0 && l->o->ckpt_dir &&
	    (step - *last_ckpt >= l->o->ckpt_every || step == pg->total)) {
		r = ex_ckpt_save(pg->c, l->o->ckpt_dir, step, l->o->quiet, err);
		*last_ckpt = step;
	}
	l->aside_s += ex_now_s() - t_aside;
	return r;
}

int ex_train(struct ex_loop *l, uint64_t start_step, uint64_t *end_step, struct coord_error *err)
{
	struct coord_call call = { .args = l->args, .len = l->len, .npw = 1 };
	struct window w = { .n = 0 };
	struct coord_pw *data;
	uint64_t step = start_step, last_ckpt = start_step;
	int r;

	r = coord_fn_lookup(l->pg->c, l->fn, &call.fn, err);
	if (r == 0)
		r = coord_per_worker_create(l->pg->c, l->creator, l->pw_args, l->pw_len, &data,
					    err);
	if (r < 0)
		return r;
	call.pw = &data;
	ex_kills_init(&l->kills, l->o->kill_every, l->o->kills, !l->o->epochs_set, l->grace,
		      l->o->quiet);
	l->pg->done = l->pg->start = start_step;
	l->pg->t0 = ex_now_s();
	while (step < l->pg->total && r == 0) {
		r = run_epoch(l, &call, &w, &step, err);
		r = end_epoch(l, r, step, &last_ckpt, err);
	}
	*end_step = step;
	coord_per_worker_put(data);
	return r;
}
