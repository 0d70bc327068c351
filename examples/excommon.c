// SPDX-License-Identifier: MIT
/*
 * examples/excommon.c - local server processes, kills and the progress
 * line shared by the example main jobs (excommon.h).  A local process is
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
#include <time.h>
#include <unistd.h>

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
