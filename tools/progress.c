/* tools/progress.c - the progress bar of a training run (tools/progress.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "tools/progress.h"

int mpt_progress_columns(void) {
    const char *env = getenv("COLUMNS");
    char *end = NULL;
    long c = env ? strtol(env, &end, 10) : 0;
    if (env && end != env && *end == '\0' && c > 0 && c < 10000) return (int)c;
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

void mpt_progress_line(char *out, size_t cap, int columns, const char *label, int64_t epoch, int epochs, int64_t b,
                       int64_t nb, float loss, float scale, int skipped) {
    char head[160], tail[160];
    snprintf(head, sizeof head, "%sepoch %lld/%d ", label, (long long)epoch + 1, epochs);
    snprintf(tail, sizeof tail, " %lld/%lld  loss %.4f  scale %g  skipped %d", (long long)b + 1, (long long)nb,
             (double)loss, (double)scale, skipped);
    int avail = columns - 1, hl = (int)strlen(head), tl = (int)strlen(tail);
    int width = avail - hl - tl - 2; /* the brackets */
    if (width > 30) width = 30;
    char bar[40] = "";
    if (width >= 5) {
        int fill = (int)((double)(b + 1) / (double)nb * width);
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[width] = '\0';
        snprintf(out, cap, "%s[%s]%s", head, bar, tail);
    } else {
        snprintf(out, cap, "%s%s", head, tail + 1);
    }
    if (avail >= 0 && (size_t)avail < cap) out[avail] = '\0';
}

void mpt_progress_draw(const char *label, int64_t epoch, int epochs, int64_t b, int64_t nb, float loss, float scale,
                       int skipped) {
    char line[512];
    mpt_progress_line(line, sizeof line, mpt_progress_columns(), label, epoch, epochs, b, nb, loss, scale, skipped);
    printf("\r\033[K%s", line);
    fflush(stdout);
}
