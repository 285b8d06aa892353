/*
 * tests/fuzz/fuzz_flags.c - libFuzzer target for the flag parser (tools/opts.c, mpt_cli_parse): the input is
 * split at NUL bytes into argv words ("--lr\0 0.1\0--epochs\0 3"), and parsed for every command. A usage error
 * is fine (exit code 2, one line on stderr); a crash or a sanitizer report is a bug. tests/fuzz/run.sh runs it
 * with -close_fd_mask=3 so that the parser's messages do not flood the log. Seed corpus: corpus/flags/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    char *words[130];
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    words[argc++] = "fuzz";
    for (size_t i = 0; i <= size && argc < 129; i += strlen(text + i) + 1) words[argc++] = text + i;
    words[argc] = NULL;
    const mpt_cmd_mask cmds[] = {MPT_CMD_TRAIN, MPT_CMD_COMPARE, MPT_CMD_EVAL, MPT_CMD_INFO};
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
        char *argv[130];
        memcpy(argv, words, sizeof argv); /* getopt_long permutes argv */
        mpt_cli_opts o;
        mpt_cli_opts_default(&o);
        (void)mpt_cli_parse(argc, argv, cmds[k], &o);
    }
    free(text);
    return 0;
}
