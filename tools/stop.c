/*
 * tools/stop.c - a graceful stop on SIGINT and SIGTERM (tools/cli.h): the first signal asks the training run to
 * finish its current step, publish its checkpoint, CSVs and summary (marked interrupted) and end with exit status
 * 128 + the signal (130, 143), as users of cluster schedulers expect (SIGTERM before preemption); a second signal
 * stops at once (the default action: the files already published are complete, the run's temporary files are
 * removed by the next run on the directory).
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) {
    if (stop_signal) { /* the second one: stop at once */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    static const char int_msg[] = "\nmptrain: SIGINT: stopping after the current step and saving the run (send it "
                                  "again to stop at once)\n";
    static const char term_msg[] = "\nmptrain: SIGTERM: stopping after the current step and saving the run (send it "
                                   "again to stop at once)\n";
    const char *m = sig == SIGINT ? int_msg : term_msg;
    size_t n = sig == SIGINT ? sizeof int_msg - 1 : sizeof term_msg - 1;
    ssize_t w = write(STDERR_FILENO, m, n); /* async-signal-safe; nothing to do if it fails */
    (void)w;
}

void mpt_guard_stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a read or a wait in progress goes on; the run looks at the flag between steps */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int mpt_guard_stop_signal(void) { return stop_signal; }

const char *mpt_guard_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
