/* tools/mptrain.c - the mptrain command (placeholder until issue #4 lands the CLI). */
#include <stdio.h>
#include "engine/backend.h"
int main(void) {
    char msg[256];
    int ok = mpt_cuda_available(msg, sizeof msg);
    printf("mptrain: GPU: %s%s\n", ok ? "" : "", msg);
    return 0;
}
