/*
 * tests/fuzz/fuzz_io.h - shared by the libFuzzer targets: the readers under test take a path, so each input
 * is written to one scratch file per process (in $TMPDIR or /tmp) before the reader is called.
 */
#ifndef MPT_FUZZ_IO_H
#define MPT_FUZZ_IO_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes data[0..size) to a scratch file named after `tag` and this process and returns its path (static
 * storage); aborts when the file cannot be written, which is a fault of the fuzzing machine, not the input. */
static const char *mpt_fuzz_file(const char *tag, const uint8_t *data, size_t size) {
    static char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/mpt-fuzz-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), tag);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

#endif /* MPT_FUZZ_IO_H */
