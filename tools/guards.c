/*
 * tools/guards.c - the process guards (tools/guards.h): the graceful stop on SIGINT, SIGTERM, SIGHUP, SIGQUIT,
 * SIGALRM and SIGPIPE, the checkpoint on SIGUSR1, the OpenBLAS buffer watchdog and the report of a memory fault
 * under a memory limit.
 */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/backend.h"
#include "tools/guards.h"

/* ---- the graceful stop, the save on demand ------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal, save_asked, work_done;

/* The signals that stop a run gracefully, their names and the line each one's handler writes (prepared here: a
 * handler may only write(2) what is ready). */
static const struct stop_sig {
    int sig;
    const char *name, *why;
} stop_sigs[] = {
    {SIGINT, "SIGINT", ""},
    {SIGTERM, "SIGTERM", ""},
    {SIGHUP, "SIGHUP", " (the terminal was closed)"},
    {SIGQUIT, "SIGQUIT", ""},
    {SIGALRM, "SIGALRM", ""},
    {SIGPIPE, "SIGPIPE", " (the reader of standard output or error went away)"},
};
#define N_STOP_SIGS ((int)(sizeof stop_sigs / sizeof stop_sigs[0]))
static char stop_msg[N_STOP_SIGS][200];
static size_t stop_len[N_STOP_SIGS];

static int stop_index(int sig) {
    for (int i = 0; i < N_STOP_SIGS; i++)
        if (stop_sigs[i].sig == sig) return i;
    return -1;
}

static void on_stop(int sig) {
    if (stop_signal) {
        /* A second signal stops at once, the default action (the published files are complete). Not SIGPIPE:
         * every later write to the closed pipe raises it again, and none of those is the user asking twice. */
        if (sig == SIGPIPE) return;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    int i = stop_index(sig);
    if (i >= 0 && !work_done) {
        ssize_t w = write(STDERR_FILENO, stop_msg[i], stop_len[i]); /* async-signal-safe; nothing to do if it fails */
        (void)w;
    }
}

static void on_save(int sig) {
    (void)sig;
    save_asked = 1;
}

void mpt_guard_stop_install(void) {
    const char *lead = isatty(STDERR_FILENO) ? "\n" : ""; /* a terminal: off the line a progress bar may hold */
    for (int i = 0; i < N_STOP_SIGS; i++) {
        int n = snprintf(stop_msg[i], sizeof stop_msg[i], "%smptrain: %s%s: stopping after the current step and saving "
                         "the run%s\n", lead, stop_sigs[i].name, stop_sigs[i].why,
                         stop_sigs[i].sig == SIGPIPE ? "" : " (send it again to stop at once)");
        stop_len[i] = n > 0 && (size_t)n < sizeof stop_msg[i] ? (size_t)n : sizeof stop_msg[i] - 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a read or a wait in progress goes on; the run looks at the flag between steps */
    for (int i = 0; i < N_STOP_SIGS; i++) sigaction(stop_sigs[i].sig, &sa, NULL);
    sa.sa_handler = on_save;
    sigaction(SIGUSR1, &sa, NULL);
}

int mpt_guard_stop_signal(void) { return stop_signal; }

void mpt_guard_stop_done(void) { work_done = 1; }

int mpt_guard_save_asked(void) {
    if (!save_asked) return 0;
    save_asked = 0;
    return 1;
}

const char *mpt_guard_signal_name(int sig) {
    int i = stop_index(sig);
    return i >= 0 ? stop_sigs[i].name : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* ---- memory limits ---------------------------------------------------------------------------------------- */

/* The watchdog of mpt_guard_blas_ready: async-signal-safe, it says why and ends the process without joining the
 * OpenBLAS threads (one of which is the one that loops). */
static char blas_stuck_msg[512];
static size_t blas_stuck_len;
static void on_blas_stuck(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, blas_stuck_msg, blas_stuck_len);
    (void)w;
    _exit(MPT_GUARD_EXIT_FAIL);
}

/* The smaller of the address-space and data-segment limits in bytes (RLIM_INFINITY: none). */
static rlim_t memory_limit(void) {
    rlim_t lim = RLIM_INFINITY;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) lim = rl.rlim_cur;
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < lim) lim = rl.rlim_cur;
    return lim;
}

int mpt_guard_memory_limited(void) { return memory_limit() != RLIM_INFINITY; }

/* The handler of mpt_guard_memory_crash_report: async-signal-safe, on its own stack (static: under the limit there
 * may be no room for one). */
static char crash_msg[512];
static size_t crash_len;
static char crash_stack[1 << 16];
static void on_crash_under_limit(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, crash_msg, crash_len);
    (void)w;
    _exit(MPT_GUARD_EXIT_FAIL);
}

void mpt_guard_memory_crash_report(void) {
    rlim_t lim = memory_limit();
    if (lim == RLIM_INFINITY) return;
    int len = snprintf(crash_msg, sizeof crash_msg,
                       "mptrain: stopped by a memory fault (SIGSEGV or SIGBUS) under the memory limit of %llu MiB "
                       "(ulimit -v / -d): a library crashed on a failed allocation (as oneDNN 2.6's "
                       "dnnl_primitive_create does when no address space is left for a JIT kernel); raise the limit\n",
                       (unsigned long long)(lim >> 20));
    crash_len = len > 0 && (size_t)len < sizeof crash_msg ? (size_t)len : sizeof crash_msg - 1;
    stack_t ss = {.ss_sp = crash_stack, .ss_size = sizeof crash_stack, .ss_flags = 0};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash_under_limit;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | (sigaltstack(&ss, NULL) == 0 ? SA_ONSTACK : 0);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

mpt_status mpt_guard_blas_ready(void) {
    rlim_t lim = memory_limit();
    if (lim == RLIM_INFINITY) return MPT_OK; /* nothing caps the buffers: OpenBLAS allocates them when it needs */
    if (!mpt_cpu_gemm_on_openblas()) return MPT_OK; /* oneDNN's GEMMs: no OpenBLAS buffer */
    int threads = openblas_get_num_threads();
    int len = snprintf(blas_stuck_msg, sizeof blas_stuck_msg,
                       "mptrain: OpenBLAS cannot allocate its GEMM buffers (one per thread, tens of MiB each; %d "
                       "thread(s)) within the memory limit of %llu MiB (ulimit -v / -d), and its allocator retries "
                       "forever (OpenBLAS issue 5289): raise the limit or use --threads 1\n",
                       threads, (unsigned long long)(lim >> 20));
    blas_stuck_len = len > 0 && (size_t)len < sizeof blas_stuck_msg ? (size_t)len : sizeof blas_stuck_msg - 1;
    enum { N = 256 };
    float *a = malloc(3 * (size_t)N * N * sizeof *a);
    if (!a) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes to start OpenBLAS within the memory limit of "
                              "%llu MiB (ulimit -v / -d)", 3 * (size_t)N * N * sizeof *a, (unsigned long long)(lim >> 20));
    for (size_t i = 0; i < 2 * (size_t)N * N; i++) a[i] = 1.0f;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_blas_stuck;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    unsigned prev = alarm(10); /* the GEMM takes milliseconds: 10 s means a thread loops in blas_memory_alloc */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a + N * N, N, 0.0f, a + 2 * N * N, N);
    alarm(prev);
    sigaction(SIGALRM, &old, NULL);
    free(a);
    return MPT_OK;
}
