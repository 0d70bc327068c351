// SPDX-License-Identifier: MIT
/*
 * tests/test_pkg.c - what a program embedding libcoord sees of the package
 * (issue 26): the version macros against meson's project version and
 * coord_version().
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <coord/coord.h>

/* The headers, the library and meson.build agree on the version. */
static void test_version(void **state)
{
	char want[32];

	(void)state;
	snprintf(want, sizeof(want), "%d.%d.%d", COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
		 COORD_VERSION_PATCH);
	assert_string_equal(want, COORD_VERSION_STRING);
	assert_string_equal(COORD_VERSION_STRING, T_MESON_VERSION);
	assert_string_equal(coord_version(), T_MESON_VERSION);
	assert_true(COORD_VERSION_AT_LEAST(0, 0, 0));
	assert_true(COORD_VERSION_AT_LEAST(COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
					   COORD_VERSION_PATCH));
	assert_false(COORD_VERSION_AT_LEAST(COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
					    COORD_VERSION_PATCH + 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
