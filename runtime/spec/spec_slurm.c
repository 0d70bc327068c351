// SPDX-License-Identifier: MIT
/*
 * runtime/spec/spec_slurm.c - Slurm host lists and the Slurm cluster resolver.
 *
 * A host list is items separated by commas outside brackets; an item is
 * literal text and up to HL_GROUPS bracket groups, each a comma list of
 * numbers and lo-hi ranges.  An item expands to the cartesian product of its
 * groups, the last group varying fastest (Slurm's order).  Everything is
 * bounded before anything is allocated: the item's expansion count is
 * computed first and checked against the caller's maximum, so
 * `node[0-999999999]` fails without building a billion names.
 *
 * The resolver lays out SLURM_NTASKS tasks node by node, port_base + k for a
 * node's k-th task, and hands consecutive ranks to the jobs sorted by name,
 * as TensorFlow's SlurmClusterResolver does.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/spec.h>

#include "runtime/util/abi.h"
#include "runtime/spec/spec_pvt.h"

#define HL_GROUPS 8
#define HL_DIGITS 9 /* numbers below 1e9 fit an unsigned long */

struct hl_range {
	unsigned long lo, hi;
	int width;
};

struct hl_group {
	const char *text; /* the literal before the bracket */
	size_t text_len;
	struct hl_range *r;
	size_t nr;
	size_t count; /* product of the ranges' sizes, <= max */
};

static bool host_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

/* Parse one number of a range list at *p, at most HL_DIGITS digits. */
static int hl_number(const char **p, const char *end, unsigned long *v, int *width,
		     struct coord_error *err)
{
	const char *s = *p;

	*v = 0;
	while (*p < end && isdigit((unsigned char)**p) && *p - s < HL_DIGITS) {
		*v = *v * 10 + (unsigned long)(**p - '0');
		(*p)++;
	}
	if (*p == s)
		return coord_seterr(err, COORD_EINVAL,
				    "host list: expected a number in "
				    "brackets at '%.20s'",
				    s);
	if (*p < end && isdigit((unsigned char)**p))
		return coord_seterr(err, COORD_EINVAL,
				    "host list: number '%.20s' has more "
				    "than %d digits",
				    s, HL_DIGITS);
	*width = (int)(*p - s);
	return 0;
}

/* Parse the range list between @s and @end (brackets excluded) into @g. */
static int hl_ranges(const char *s, const char *end, size_t max, struct hl_group *g,
		     struct coord_error *err)
{
	size_t cap = 1;
	int r;

	/* One range per comma + 1: the text bounds the count. */
	for (const char *p = s; p < end; p++)
		cap += *p == ',';
	g->r = calloc(cap, sizeof(*g->r));
	if (!g->r)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a host list");
	g->count = 0;
	while (g->nr < cap) {
		struct hl_range *x = &g->r[g->nr];
		int w;

		r = hl_number(&s, end, &x->lo, &x->width, err);
		if (r < 0)
			return r;
		x->hi = x->lo;
		if (s < end && *s == '-') {
			s++;
			r = hl_number(&s, end, &x->hi, &w, err);
			if (r < 0)
				return r;
			if (x->hi < x->lo)
				return coord_seterr(err, COORD_EINVAL,
						    "host list: range %lu-%lu "
						    "runs backwards",
						    x->lo, x->hi);
		}
		g->nr++;
		if (x->hi - x->lo >= max || g->count + (x->hi - x->lo + 1) > max)
			return coord_seterr(err, COORD_EINVAL, "host list: more than %zu hosts",
					    max);
		g->count += x->hi - x->lo + 1;
		if (s == end)
			return 0;
		if (*s != ',')
			return coord_seterr(err, COORD_EINVAL,
					    "host list: unexpected '%c' in "
					    "brackets",
					    isprint((unsigned char)*s) ? *s : '?');
		s++;
	}
	return coord_seterr(err, COORD_EINVAL, "host list: trailing ',' in brackets");
}

static void hl_groups_free(struct hl_group *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(g[i].r);
}

/* The @k-th name of group @g's ranges, printed into @buf. */
static int hl_value(const struct hl_group *g, size_t k, char *buf, size_t len)
{
	for (size_t i = 0; i < g->nr; i++) {
		size_t n = g->r[i].hi - g->r[i].lo + 1;

		if (k < n)
			return snprintf(buf, len, "%0*lu", g->r[i].width, g->r[i].lo + k);
		k -= n;
	}
	return -1; /* unreachable: k < g->count */
}

/*
 * Expand the item [@s, @end) and append its hosts to @hosts (room for @max,
 * *@n used).
 */
static int hl_item(const char *s, const char *end, char **hosts, size_t *n, size_t max,
		   struct coord_error *err)
{
	struct hl_group g[HL_GROUPS + 1];
	size_t ng = 0, total = 1, tail_len;
	/* tail: the literal after the last group (the whole item without one). */
	const char *p = s, *tail = s;
	int r = 0;

	memset(g, 0, sizeof(g));
	if (s == end)
		return coord_seterr(err, COORD_EINVAL, "host list: empty host name");
	/* Each pass consumes one "text[ranges]" group; the text is bounded. */
	while (p < end) {
		const char *t = p, *close;

		while (p < end && host_char(*p))
			p++;
		if (p == end)
			break;
		if (*p != '[') {
			r = coord_seterr(err, COORD_EINVAL,
					 "host list: unexpected '%c' in a "
					 "host name",
					 isprint((unsigned char)*p) ? *p : '?');
			goto out;
		}
		if (ng == HL_GROUPS) {
			r = coord_seterr(err, COORD_EINVAL,
					 "host list: more than %d bracket "
					 "groups in one name",
					 HL_GROUPS);
			goto out;
		}
		close = memchr(p, ']', (size_t)(end - p));
		if (!close) {
			r = coord_seterr(err, COORD_EINVAL, "host list: '[' without ']'");
			goto out;
		}
		g[ng].text = t;
		g[ng].text_len = (size_t)(p - t);
		r = hl_ranges(p + 1, close, max, &g[ng], err);
		ng++;
		if (r < 0)
			goto out;
		if (total > (max - *n) / g[ng - 1].count) {
			r = coord_seterr(err, COORD_EINVAL, "host list: more than %zu hosts", max);
			goto out;
		}
		total *= g[ng - 1].count;
		p = close + 1;
		tail = p;
	}
	tail_len = (size_t)(end - tail);
	if (total > max - *n) {
		r = coord_seterr(err, COORD_EINVAL, "host list: more than %zu hosts", max);
		goto out;
	}
	/* total <= max: one name per pass. */
	for (size_t k = 0; k < total; k++) {
		char name[COORD_HOST_NAME_MAX + 1];
		size_t len = 0, rest = k;
		size_t digit[HL_GROUPS];

		/* Mixed radix, last group fastest. */
		for (size_t i = ng; i-- > 0;) {
			digit[i] = rest % g[i].count;
			rest /= g[i].count;
		}
		for (size_t i = 0; i < ng; i++) {
			char num[HL_DIGITS + 2];
			int w = hl_value(&g[i], digit[i], num, sizeof(num));

			if (w < 0 || len + g[i].text_len + (size_t)w > COORD_HOST_NAME_MAX)
				goto too_long;
			memcpy(name + len, g[i].text, g[i].text_len);
			len += g[i].text_len;
			memcpy(name + len, num, (size_t)w);
			len += (size_t)w;
		}
		if (len + tail_len > COORD_HOST_NAME_MAX)
			goto too_long;
		memcpy(name + len, tail, tail_len);
		len += tail_len;
		name[len] = '\0';
		hosts[*n] = strdup(name);
		if (!hosts[*n]) {
			r = coord_seterr(err, COORD_ENOMEM, "no memory for a host list");
			goto out;
		}
		(*n)++;
	}
	goto out;
too_long:
	r = coord_seterr(err, COORD_EINVAL, "host list: a host name is longer than %d",
			 COORD_HOST_NAME_MAX);
out:
	hl_groups_free(g, ng);
	return r;
}

void coord_hostlist_free(char **hosts, size_t n)
{
	if (!hosts)
		return;
	for (size_t i = 0; i < n; i++)
		free(hosts[i]);
	free(hosts);
}

int coord_hostlist_expand(const char *list, size_t max, char ***hosts, size_t *n,
			  struct coord_error *err)
{
	const char *s = list, *p;
	char **out;
	size_t used = 0;
	int depth = 0, r = 0;

	if (!list || !*list)
		return coord_seterr(err, COORD_EINVAL, "host list: empty");
	if (max == 0 || max > COORD_HOSTLIST_MAX)
		max = COORD_HOSTLIST_MAX;
	out = calloc(max, sizeof(*out));
	if (!out)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a host list");
	/* One pass over the text; items end at a comma outside brackets. */
	for (p = list;; p++) {
		if (*p == '[') {
			if (depth++) {
				r = coord_seterr(err, COORD_EINVAL, "host list: nested '['");
				break;
			}
		} else if (*p == ']') {
			if (!depth--) {
				r = coord_seterr(err, COORD_EINVAL, "host list: ']' without '['");
				break;
			}
		} else if ((*p == ',' && !depth) || *p == '\0') {
			if (depth) {
				r = coord_seterr(err, COORD_EINVAL, "host list: '[' without ']'");
				break;
			}
			r = hl_item(s, p, out, &used, max, err);
			if (r < 0 || *p == '\0')
				break;
			s = p + 1;
		}
	}
	if (r < 0) {
		coord_hostlist_free(out, used);
		return r;
	}
	*hosts = out;
	*n = used;
	return 0;
}

/* A decimal unsigned value of @s as a whole, at most @max. */
static int parse_uint(const char *s, unsigned long max, unsigned long *v)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return COORD_EINVAL;
	errno = 0;
	*v = strtoul(s, &end, 10);
	if (errno || *end || *v > max)
		return COORD_EINVAL;
	return 0;
}

int coord_slurm_tasks_per_node(const char *s, unsigned *counts, size_t nnodes,
			       struct coord_error *err)
{
	size_t used = 0;
	const char *p = s;

	/* Items "N" or "N(xM)", separated by commas; each fills >= 1 node. */
	while (p && *p && used < nnodes) {
		unsigned long c = 0, rep = 1;
		char *end;

		if (!isdigit((unsigned char)*p))
			break;
		c = strtoul(p, &end, 10);
		if (c > COORD_SPEC_MAX_INDEX)
			break;
		p = end;
		if (*p == '(') {
			if (p[1] != 'x' || !isdigit((unsigned char)p[2]))
				break;
			rep = strtoul(p + 2, &end, 10);
			if (*end != ')' || rep == 0 || rep > nnodes - used)
				break;
			p = end + 1;
		}
		for (unsigned long i = 0; i < rep; i++)
			counts[used++] = (unsigned)c;
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			break; /* junk or a trailing ',': refused below */
	}
	if (!p || *p || used != nnodes)
		return coord_seterr(err, COORD_EINVAL,
				    "SLURM_TASKS_PER_NODE '%.60s' does not "
				    "give a count for each of the %zu nodes",
				    s ? s : "", nnodes);
	return 0;
}

static int env_uint(const char *name, unsigned long max, bool required, unsigned long *v,
		    struct coord_error *err)
{
	const char *s = getenv(name);

	if (!s) {
		if (required)
			return coord_seterr(err, COORD_EINVAL, "slurm: %s is not set", name);
		return 1;
	}
	if (parse_uint(s, max, v) < 0)
		return coord_seterr(err, COORD_EINVAL,
				    "slurm: %s='%.40s' is not an integer in "
				    "0..%lu",
				    name, s, max);
	return 0;
}

static void slurm_opts_defaults(struct coord_slurm_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->port_base = 8888;
}

/* A struct that can grow (runtime/abi.h); its size first published (0.1.0). */
#define SLURM_OPTS_SIZE_0                                                                          \
	(offsetof(struct coord_slurm_opts, njobs) + sizeof(((struct coord_slurm_opts *)0)->njobs))

void coord_slurm_opts_init_size(struct coord_slurm_opts *opts, size_t size)
{
	struct coord_slurm_opts d;

	slurm_opts_defaults(&d);
	coord_struct_init(opts, size, &d, sizeof(d));
}

int coord_slurm_opts_in(struct coord_slurm_opts *out, const struct coord_slurm_opts *in,
			struct coord_error *err)
{
	slurm_opts_defaults(out);
	return coord_struct_in(out, sizeof(*out), in, SLURM_OPTS_SIZE_0, "coord_slurm_opts", err);
}

static int cmp_sjob(const void *a, const void *b)
{
	return strcmp(((const struct coord_slurm_job *)a)->name,
		      ((const struct coord_slurm_job *)b)->name);
}

/* Per-node task counts for @ntasks tasks over @nnodes nodes. */
static int layout(const struct coord_slurm_opts *o, unsigned long ntasks, unsigned *counts,
		  size_t nnodes, struct coord_error *err)
{
	unsigned long tpn = o->tasks_per_node, left = ntasks, cap = 0;
	const char *list;
	int r;

	if (!tpn) {
		r = env_uint("SLURM_NTASKS_PER_NODE", COORD_SPEC_MAX_INDEX + 1ul, false, &tpn, err);
		if (r < 0)
			return r;
		if (r > 0)
			tpn = 0;
	}
	list = getenv("SLURM_TASKS_PER_NODE");
	if (!tpn && list) {
		r = coord_slurm_tasks_per_node(list, counts, nnodes, err);
		if (r < 0)
			return r;
	} else {
		if (!tpn)
			tpn = (ntasks + nnodes - 1) / nnodes;
		for (size_t i = 0; i < nnodes; i++)
			counts[i] = (unsigned)(tpn < COORD_SPEC_MAX_INDEX ? tpn
									  : COORD_SPEC_MAX_INDEX);
	}
	/* Fill nodes in order; a node gets no more than its count. */
	for (size_t i = 0; i < nnodes; i++) {
		if (counts[i] > left)
			counts[i] = (unsigned)left;
		left -= counts[i];
		cap += counts[i];
	}
	if (cap < ntasks)
		return coord_seterr(err, COORD_EINVAL,
				    "slurm: %zu nodes hold %lu tasks, fewer "
				    "than SLURM_NTASKS=%lu",
				    nnodes, cap, ntasks);
	return 0;
}

/* The Slurm environment: the node list, SLURM_NTASKS and this process's
 * SLURM_PROCID, a rank of them. */
static int slurm_env(const char **nodelistp, unsigned long *ntasksp, unsigned long *procidp,
		     struct coord_error *err)
{
	const char *nodelist;
	unsigned long ntasks, procid;
	int r;

	nodelist = getenv("SLURM_JOB_NODELIST");
	if (!nodelist)
		nodelist = getenv("SLURM_NODELIST");
	if (!nodelist)
		return coord_seterr(err, COORD_EINVAL, "slurm: SLURM_JOB_NODELIST is not set");
	r = env_uint("SLURM_NTASKS", COORD_SPEC_MAX_INDEX + 1ul, true, &ntasks, err);
	if (r < 0)
		return r;
	r = env_uint("SLURM_PROCID", COORD_SPEC_MAX_INDEX, true, &procid, err);
	if (r < 0)
		return r;
	if (ntasks == 0 || procid >= ntasks)
		return coord_seterr(err, COORD_EINVAL,
				    "slurm: SLURM_PROCID=%lu is not a rank of "
				    "SLURM_NTASKS=%lu",
				    procid, ntasks);
	*nodelistp = nodelist;
	*ntasksp = ntasks;
	*procidp = procid;
	return 0;
}

/*
 * The spec of @opts->njobs @jobs (sorted by name): ranks 0..ntasks-1 in node
 * order, @counts[n] of them on @hosts[n] at port_base + their slot there,
 * handed to the jobs in turn; @self (if any) names rank @procid's task.
 * *@sp: the spec, to destroy on failure too.
 */
static int build_spec(const struct coord_slurm_opts *opts, const struct coord_slurm_job *jobs,
		      char **hosts, size_t nhosts, const unsigned *counts, unsigned long procid,
		      struct coord_task_id *self, struct coord_spec **sp, struct coord_error *err)
{
	struct coord_spec *s = NULL;
	unsigned long rank = 0;
	size_t node = 0, slot = 0;
	int r;

	r = coord_spec_new(&s, err);
	for (size_t i = 0; r == 0 && i < opts->njobs; i++) {
		struct spec_job *j;

		r = coord_spec_add_job(s, jobs[i].name, &j, err);
		/* Ranks 0..ntasks-1 in node order; sum == ntasks bounds the loop. */
		for (unsigned k = 0; r == 0 && k < jobs[i].ntasks; k++, rank++, slot++) {
			char addr[COORD_HOST_NAME_MAX + 8];
			unsigned long port;

			while (node < nhosts && slot >= counts[node]) {
				node++;
				slot = 0;
			}
			port = opts->port_base + slot;
			if (node == nhosts || port > 65535) {
				r = coord_seterr(err, COORD_EINVAL,
						 "slurm: rank %lu needs port %lu on %s, above "
						 "65535",
						 rank, port, node < nhosts ? hosts[node] : "?");
				break;
			}
			snprintf(addr, sizeof(addr), "%s:%lu", hosts[node], port);
			r = coord_spec_add_task(j, k, addr, err);
			if (r == 0 && rank == procid && self) {
				snprintf(self->job, sizeof(self->job), "%s", jobs[i].name);
				self->index = k;
			}
		}
	}
	if (r == 0)
		r = coord_spec_seal(s, err);
	*sp = s;
	return r;
}

int coord_spec_resolve_slurm(const struct coord_slurm_opts *opts, struct coord_spec **out,
			     struct coord_task_id *self, struct coord_error *err)
{
	struct coord_slurm_opts defaults, one_job;
	struct coord_slurm_job *jobs = NULL, one = { "worker", 0 };
	struct coord_spec *s = NULL;
	const char *nodelist = NULL;		       /* slurm_env() sets them; NULL and 0 */
	unsigned long ntasks = 0, procid = 0, sum = 0; /* for a false maybe-uninitialized */
	unsigned *counts = NULL;
	char **hosts = NULL;
	size_t nhosts = 0;
	int r;

	if (!out)
		return coord_seterr(err, COORD_EINVAL, "slurm: no out pointer");
	/* NULL: the defaults; else @opts as this library's struct (runtime/abi.h) */
	if (!opts)
		slurm_opts_defaults(&defaults);
	else if (coord_slurm_opts_in(&defaults, opts, err) < 0)
		return COORD_EINVAL;
	opts = &defaults;
	r = slurm_env(&nodelist, &ntasks, &procid, err);
	if (r < 0)
		return r;
	if (opts->port_base == 0 || opts->port_base > 65535)
		return coord_seterr(err, COORD_EINVAL, "slurm: port base %u is not in 1..65535",
				    opts->port_base);
	if (!opts->jobs) {
		one.ntasks = (unsigned)ntasks;
		one_job = *opts;
		one_job.jobs = &one;
		one_job.njobs = 1;
		opts = &one_job;
	}
	if (opts->njobs == 0)
		return coord_seterr(err, COORD_EINVAL, "slurm: no job given");
	r = coord_hostlist_expand(nodelist, COORD_HOSTLIST_MAX, &hosts, &nhosts, err);
	if (r < 0)
		return r;
	r = COORD_ENOMEM;
	counts = calloc(nhosts, sizeof(*counts));
	jobs = calloc(opts->njobs, sizeof(*jobs));
	if (!counts || !jobs) {
		coord_seterr(err, r, "no memory for the Slurm cluster");
		goto out;
	}
	memcpy(jobs, opts->jobs, opts->njobs * sizeof(*jobs));
	for (size_t i = 0; i < opts->njobs; i++) {
		if (!jobs[i].name) {
			r = coord_seterr(err, COORD_EINVAL, "slurm: job %zu has no name", i);
			goto out;
		}
		sum += jobs[i].ntasks;
	}
	if (sum != ntasks) {
		r = coord_seterr(err, COORD_EINVAL,
				 "slurm: the jobs ask for %lu tasks but "
				 "SLURM_NTASKS=%lu",
				 sum, ntasks);
		goto out;
	}
	qsort(jobs, opts->njobs, sizeof(*jobs), cmp_sjob);
	r = layout(opts, ntasks, counts, nhosts, err);
	if (r < 0)
		goto out;
	r = build_spec(opts, jobs, hosts, nhosts, counts, procid, self, &s, err);
out:
	coord_hostlist_free(hosts, nhosts);
	free(counts);
	free(jobs);
	if (r < 0) {
		coord_spec_destroy(s);
		return r;
	}
	*out = s;
	return 0;
}
