// SPDX-License-Identifier: MIT
/*
 * runtime/version.c - coord_version(): the library's own version, the one
 * coord/version.h (generated from meson's project version) was made with.
 */
#include <coord/version.h>

const char *coord_version(void)
{
	return COORD_VERSION_STRING;
}
