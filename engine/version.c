/*
 * engine/version.c - the library's version at run time (engine/api.h): the Meson project version that the
 * library was built with, which may differ from the headers a program was compiled against.
 */
#include "engine/api.h"

const char *mpt_version(void) { return MPT_VERSION_STRING; }

int mpt_version_number(void) { return MPT_VERSION_NUMBER; }
