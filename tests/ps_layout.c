// SPDX-License-Identifier: MIT
/*
 * tests/ps_layout.c - part of test_ps: restores across a change of the ps
 * count (issue 21): 2 to 1, 2 to 3, refused whole, version 1 files, temp
 * files removed by a save.  lay_*: the cluster of @nps ps tasks they run on.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "transport/wire/wire.h"
#include "helpers.h"
#include "ps_tests.h"

/* ---- restores across a change of the ps count (issue 21) --------------------------- */

/*
 * A cluster of @nps ps tasks for the layout tests: inproc, @nps stores in
 * the coordinator; tcp, @nps fresh coord-ps processes confined to lay_root
 * (a restart is a real one: the stores start empty).
 */
static pid_t lay_pid[LAY_MAX];
unsigned lay_port[LAY_MAX];
char lay_root[64], lay_dir[96];

static void lay_stop(void)
{
	for (unsigned i = 0; i < LAY_MAX; i++)
		if (lay_pid[i] > 0) {
			t_reap(lay_pid[i]);
			lay_pid[i] = 0;
		}
}

pid_t lay_spawn(unsigned task, const char *root, unsigned *port)
{
	char t[16];
	char *argv[] = {
		getenv("COORD_PS_BIN"), "--listen",   "127.0.0.1:0", "--task", t, "--log", "error",
		"--ckpt-root",		(char *)root, NULL
	};

	snprintf(t, sizeof(t), "%u", task);
	return argv[0] ? t_spawn(argv, "coord-ps", port) : -1;
}

struct coord *lay_make(unsigned nps)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	struct coord_error err;
	struct coord *c = NULL;
	char json[1024], *w;
	size_t k;

	t_opts(&o, reg);
	if (strcmp(t_transport, "tcp") != 0) {
		o.inproc_workers = 1;
		o.inproc_ps = nps;
		assert_int_equal(coord_create(NULL, &o, &c, &err), 0);
		return c;
	}
	lay_stop();
	for (unsigned i = 0; i < nps; i++) {
		lay_pid[i] = lay_spawn(i, lay_root, &lay_port[i]);
		assert_true(lay_pid[i] > 0);
	}
	w = t_spec_json(NW);
	w[strlen(w) - 1] = 0; /* drop the closing brace */
	k = (size_t)snprintf(json, sizeof(json), "%s, \"ps\": [", w);
	for (unsigned i = 0; i < nps; i++)
		k += (size_t)snprintf(json + k, sizeof(json) - k, "%s\"127.0.0.1:%u\"",
				      i ? "," : "", lay_port[i]);
	snprintf(json + k, sizeof(json) - k, "]}");
	free(w);
	assert_int_equal(coord_spec_parse(json, &spec, &err), 0);
	if (coord_create(spec, &o, &c, &err) != 0)
		fail_msg("create: %s", err.msg);
	coord_spec_destroy(spec);
	return c;
}

void lay_destroy(struct coord *c)
{
	coord_destroy(c);
	lay_stop();
}

int lay_setup(void **state)
{
	(void)state;
	snprintf(lay_root, sizeof(lay_root), "/tmp/coord-lay-XXXXXX");
	if (!mkdtemp(lay_root))
		return -1;
	snprintf(lay_dir, sizeof(lay_dir), "%s/ck", lay_root);
	return mkdir(lay_dir, 0755);
}

int lay_teardown(void **state)
{
	char cmd[128];

	(void)state;
	lay_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", lay_root);
	(void)!system(cmd);
	return 0;
}

/* Variable i of the layout tests: its name, shape, and values for @seed. */
static void lay_var(unsigned i, char *name, unsigned *ndim, uint64_t *dims)
{
	snprintf(name, 32, "lay/v%u", i);
	*ndim = i % 3;
	dims[0] = 1 + i % 5;
	dims[1] = 2 + i % 4;
}

static uint64_t lay_nelem(unsigned ndim, const uint64_t *dims)
{
	uint64_t n = 1;

	for (unsigned d = 0; d < ndim; d++)
		n *= dims[d];
	return n;
}

static void lay_vals(unsigned i, unsigned seed, float *v, uint64_t n)
{
	uint32_t x = 2654435761u * (i + 1) + seed * 40503u;

	for (uint64_t k = 0; k < n; k++) {
		x = x * 1664525u + 1013904223u;
		v[k] = (float)(int32_t)x / 3.0e5f; /* every bit pattern differs */
	}
}

/* Create the LAY_VARS variables with values of @seed, or set them. */
void lay_fill(struct coord *c, unsigned seed)
{
	for (unsigned i = 0; i < LAY_VARS; i++) {
		char name[32];
		unsigned ndim;
		uint64_t dims[2];
		float v[32];
		coord_var_t h;

		lay_var(i, name, &ndim, dims);
		lay_vals(i, seed, v, lay_nelem(ndim, dims));
		assert_int_equal(coord_var_create(c, name, ndim, dims, NULL, &h, NULL), 0);
		assert_int_equal(coord_var_assign(c, h, 0, lay_nelem(ndim, dims), v, NULL), 0);
	}
}

/* Every variable holds exactly the values of @seed (absent if @seed < 0),
 * on the task its name places on now. */
static void lay_check(struct coord *c, int seed)
{
	unsigned nps = coord_num_ps(c);

	for (unsigned i = 0; i < LAY_VARS; i++) {
		char name[32];
		unsigned ndim;
		uint64_t dims[2], n;
		float want[32], got[32];
		struct coord_var_shape sh;
		coord_var_t h;

		lay_var(i, name, &ndim, dims);
		n = lay_nelem(ndim, dims);
		if (seed < 0) {
			assert_int_equal(coord_var_lookup(c, name, &h, NULL, NULL), -ENOENT);
			continue;
		}
		assert_int_equal(coord_var_lookup(c, name, &h, &sh, NULL), 0);
		assert_int_equal(sh.ndim, ndim);
		assert_int_equal(sh.nelem, n);
		assert_int_equal(coord_var_task(h),
				 (unsigned)(coord_var_fnv1a64(name, strlen(name)) % nps));
		lay_vals(i, (unsigned)seed, want, n);
		assert_int_equal(coord_var_read(c, h, 0, n, got, NULL), 0);
		assert_memory_equal(got, want, n * sizeof(float)); /* bit for bit */
	}
}

/* Save steps 5 (seed 1) and 10 (seed 2) from @from ps tasks. */
void lay_save(unsigned from)
{
	struct coord *c = lay_make(from);
	struct coord_error err;

	lay_fill(c, 1);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 5, &err), 0);
	lay_fill(c, 2);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 10, &err), 0);
	lay_destroy(c);
}

static void relayout(unsigned from, unsigned to)
{
	struct coord_error err;
	struct coord *c;
	uint64_t step = 0;
	char note[64];

	lay_save(from);
	c = lay_make(to);
	lay_check(c, -1);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 10);
	snprintf(note, sizeof(note), "saved by %u ps tasks, re-placed onto %u", from, to);
	if (!strstr(err.msg, note))
		fail_msg("no '%s' in: %s", note, err.msg);
	lay_check(c, 2);
	/* and it saves and restores in the new layout */
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 11, &err), 0);
	lay_fill(c, 3);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 11);
	assert_string_equal(err.msg, "");
	lay_check(c, 2);
	lay_destroy(c);
}

void test_restore_2_to_1(void **state)
{
	(void)state;
	relayout(2, 1);
}

void test_restore_2_to_3(void **state)
{
	(void)state;
	relayout(2, 3);
}

/* Flip a byte of @dir/ps-@t/ckpt-@step.coord, past the header. */
static void lay_corrupt(unsigned t, uint64_t step)
{
	char p[160];
	uint8_t b;
	int fd;

	snprintf(p, sizeof(p), "%s/ps-%u/ckpt-%llu.coord", lay_dir, t, (unsigned long long)step);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, 60), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, 60), 1);
	close(fd);
}

/* An impossible restore changes no variable on any task. */
void test_restore_refused_whole(void **state)
{
	uint64_t d1[1] = { 3 }, step = 77;
	float x[3] = { 7, 8, 9 }, got[3];
	struct coord_error err;
	struct coord *c;
	coord_var_t h;

	(void)state;
	lay_save(2);
	/* a corrupt file of one task: nothing anywhere */
	lay_corrupt(1, 10);
	c = lay_make(3);
	assert_int_equal(coord_var_create(c, "keep", 1, d1, x, &h, NULL), 0);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EBADMSG);
	if (!strstr(err.msg, "ps-1/ckpt-10.coord") || !strstr(err.msg, "checksum"))
		fail_msg("unexpected: %s", err.msg);
	assert_int_equal(step, 77);
	lay_check(c, -1);
	assert_int_equal(coord_var_read(c, h, 0, 3, got, NULL), 0);
	assert_memory_equal(got, x, sizeof(x));
	/* fallback: the newest intact step, and it says so */
	assert_int_equal(coord_checkpoint_restore_ex(c, lay_dir, COORD_CKPT_FALLBACK, &step, &err),
			 0);
	assert_int_equal(step, 5);
	assert_int_equal(err.code, 0);
	if (!strstr(err.msg, "fell back to step 5") || !strstr(err.msg, "step 10"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, 1);
	lay_destroy(c);

	/* a shape conflict on one task: nothing anywhere */
	lay_corrupt(1, 10); /* flipped back */
	c = lay_make(3);
	{
		uint64_t d2[2] = { 9, 9 };
		float z[81] = { 0 };
		coord_var_t h2;

		assert_int_equal(coord_var_create(c, "lay/v7", 2, d2, z, &h2, NULL), 0);
		assert_int_equal(coord_var_create(c, "keep", 1, d1, x, &h, NULL), 0);
		assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EEXIST);
		if (!strstr(err.msg, "lay/v7"))
			fail_msg("unexpected: %s", err.msg);
		for (unsigned i = 0; i < LAY_VARS; i++) {
			char name[32];
			coord_var_t hv;

			snprintf(name, sizeof(name), "lay/v%u", i);
			assert_int_equal(coord_var_lookup(c, name, &hv, NULL, NULL),
					 i == 7 ? 0 : -ENOENT);
		}
		assert_int_equal(coord_var_read(c, h2, 0, 81, z, NULL), 0);
		for (unsigned k = 0; k < 81; k++)
			assert_true(z[k] == 0.0f);
		assert_int_equal(coord_var_read(c, h, 0, 3, got, NULL), 0);
		assert_memory_equal(got, x, sizeof(x));
	}
	lay_destroy(c);
	/* a task's file missing: the step is incomplete, refused */
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/ps-1/ckpt-10.coord", lay_dir);
		assert_int_equal(unlink(p), 0);
	}
	c = lay_make(1);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EBADMSG);
	if (!strstr(err.msg, "incomplete"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, -1);
	lay_destroy(c);
}

/* Rewrite a version 2 file as version 1 (no layout in the header). */
static void to_v1(const char *path)
{
	uint8_t *b, *o;
	struct stat st;
	uint32_t crc, one = 1;
	uint64_t size;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size);
	o = malloc((size_t)st.st_size);
	assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	memcpy(o, b, 40);
	memcpy(o + 40, b + 48, (size_t)st.st_size - 48);
	size = (uint64_t)st.st_size - 8;
	memcpy(o + 8, &one, 4);
	memcpy(o + 32, &size, 8);
	crc = coord_crc32c(0, o, size - 4);
	memcpy(o + size - 4, &crc, 4);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(pwrite(fd, o, size, 0), (ssize_t)size);
	close(fd);
	free(b);
	free(o);
}

void test_restore_version1(void **state)
{
	struct coord_error err;
	struct coord *c;
	uint64_t step = 0;

	(void)state;
	lay_save(2);
	for (unsigned t = 0; t < 2; t++) {
		char p[160];

		snprintf(p, sizeof(p), "%s/ps-%u/ckpt-10.coord", lay_dir, t);
		to_v1(p);
	}
	c = lay_make(3);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 10);
	if (!strstr(err.msg, "saved by 2 ps tasks"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, 2);
	lay_destroy(c);
}

/* Temp files of interrupted saves go at the next save into that directory. */
void test_save_removes_temp_files(void **state)
{
	const char *tmp[] = { ".ckpt-10.coord.tmp.999999.0", ".latest.tmp.12.3" };
	char p[192];
	struct coord_error err;
	struct coord *c;
	struct stat st;

	(void)state;
	lay_save(2);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/ps-%u/%s", lay_dir, i, tmp[i]);
		close(open(p, O_CREAT | O_WRONLY, 0644));
	}
	snprintf(p, sizeof(p), "%s/ps-0/.ckpt-1.coord.tmp.x.1", lay_dir); /* not ours */
	close(open(p, O_CREAT | O_WRONLY, 0644));
	c = lay_make(2);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 12, &err), 0);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/ps-%u/%s", lay_dir, i, tmp[i]);
		assert_int_equal(stat(p, &st), -1);
	}
	snprintf(p, sizeof(p), "%s/ps-0/.ckpt-1.coord.tmp.x.1", lay_dir);
	assert_int_equal(stat(p, &st), 0);
	lay_destroy(c);
}
