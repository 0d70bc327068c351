// SPDX-License-Identifier: MIT
/*
 * tests/test_varstore.c - the ps variable store: create/read/assign/
 * assign_add/scatter_add rules and errors, no lost update under concurrent
 * adds, checkpoint round trip, latest pointer, crash leftovers, corrupted
 * checkpoints refused with the store unchanged, placement functions.
 *
 * This file: main(), the test table and the fixtures (stores, directories,
 * files); the tests are in varstore_rules.c and varstore_ckpt.c, linked into
 * the same executable (varstore_tests.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/store/varstore.h"
#include "helpers.h"
#include "varstore_tests.h"

struct coord_varstore *new_store(unsigned keep)
{
	struct coord_varstore_opts o;
	struct coord_varstore *vs = NULL;

	coord_varstore_opts_init(&o);
	o.keep_checkpoints = keep;
	assert_int_equal(coord_varstore_create(&o, &vs, NULL), 0);
	return vs;
}

uint32_t mk(struct coord_varstore *vs, const char *name, unsigned ndim, const uint64_t *dims,
	    const float *init)
{
	struct coord_error e = { 0 };
	uint32_t id = UINT32_MAX;
	int ret = coord_varstore_var_create(vs, name, ndim, dims, init, &id, &e);

	if (ret)
		fail_msg("create %s: %d %s", name, ret, e.msg);
	return id;
}

/* A fresh directory under /tmp, removed by rm_dir(). */
char *mk_dir(void)
{
	char *d = strdup("/tmp/coord-varstore-XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

void rm_dir(char *d)
{
	DIR *dd = opendir(d);
	struct dirent *de;
	char p[512];

	assert_non_null(dd);
	for (int i = 0; i < 10000 && (de = readdir(dd)); i++) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", d, de->d_name);
		unlink(p);
	}
	closedir(dd);
	assert_int_equal(rmdir(d), 0);
	free(d);
}

bool file_exists(const char *dir, const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

void write_file(const char *dir, const char *name, const void *b, size_t len)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

unsigned char *read_file(const char *dir, const char *name, size_t *len)
{
	char p[512];
	unsigned char *b;
	struct stat st;
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	assert_int_equal(stat(p, &st), 0);
	b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	f = fopen(p, "rb");
	assert_non_null(f);
	assert_int_equal(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return b;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varstore_create_rules),
		cmocka_unit_test(test_varstore_read_assign_add),
		cmocka_unit_test(test_varstore_scatter_add_rules),
		cmocka_unit_test(test_varstore_delete),
		cmocka_unit_test(test_varstore_concurrent_assign_add),
		cmocka_unit_test(test_varstore_large_add),
		cmocka_unit_test(test_varstore_concurrent_scatter_add),
		cmocka_unit_test(test_varstore_checkpoint_round_trip),
		cmocka_unit_test(test_varstore_save_during_updates),
		cmocka_unit_test(test_varstore_checkpoint_latest_and_keep),
		cmocka_unit_test(test_varstore_checkpoint_after_crash),
		cmocka_unit_test(test_varstore_live_temp_file_kept),
		cmocka_unit_test(test_varstore_checkpoint_corrupt_refused),
		cmocka_unit_test(test_varstore_prepare_commit),
		cmocka_unit_test(test_varstore_prepare_inconsistent),
		cmocka_unit_test(test_varstore_shard_functions),
		cmocka_unit_test(test_varstore_crc32c),
	};

	t_watchdog(55);
	return cmocka_run_group_tests_name("varstore", tests, NULL, NULL);
}
