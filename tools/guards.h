/*
 * tools/guards.h - the process guards of the mptrain command: what a signal does to a run, and what keeps a process
 * under a memory limit from hanging or crashing without a word (tools/guards.c).
 *
 * Signals (train, compare and lab; README "Signals", docs/checkpoints.md): the first SIGINT, SIGTERM, SIGHUP (a closed terminal), SIGQUIT,
 * SIGALRM or SIGPIPE asks the training run to finish its current step, publish its checkpoint, CSVs and summary
 * (marked interrupted) and end with exit status 128 + the signal (130, 143, 129, 131, 142, 141), as users of cluster
 * schedulers expect (SIGTERM before preemption); a second one (but SIGPIPE) stops at once (the default action: the
 * files already published are complete, the run's temporary files are removed by the next run on the directory).
 * SIGPIPE (stdout or stderr was a pipe whose reader went away: `mptrain train | head -1`) stops the same way: the run
 * is resumable bit for bit, so stopping costs nothing but the restart, while carrying on would train unseen and end
 * in "writing to standard output failed" all the same; the later writes to the pipe fail quietly and do not count
 * as a second signal. SIGUSR1 writes a checkpoint (with the CSVs up to it) after the current step and the run goes
 * on. eval, info and formats keep the default actions: they have nothing to save.
 * Memory limits: OpenBLAS 0.3.21 and oneDNN 2.6.3 fail badly when an allocation fails (a retry loop, a fault); the
 * guards turn each into one line on stderr and exit status 1.
 */
#ifndef MPT_TOOLS_GUARDS_H
#define MPT_TOOLS_GUARDS_H

#include "engine/status.h"

/* The exit status of a process a guard ends (tools/cli.h's MPT_CLI_EXIT_FAIL: a failure while running). */
#define MPT_GUARD_EXIT_FAIL 1

/* Installs the handlers of the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGPIPE) and of SIGUSR1 for
 * train, compare and lab: the first stop signal is recorded (and said on stderr) for the training run to stop after
 * its current step, saving everything; a second one (but SIGPIPE) stops at once. SIGUSR1 is recorded for
 * mpt_guard_save_asked. */
void mpt_guard_stop_install(void);

/* The signal that asked for a stop, or 0. */
int mpt_guard_stop_signal(void);

/* The command's runs are over (its files published; an MPI job's ranks about to finalise): a stop signal from here on
 * has nothing to stop and is not announced (mpirun sends SIGTERM to the ranks still finalising when one has ended with
 * an error); it still ends the process as 128 + the signal. */
void mpt_guard_stop_done(void);

/* Whether SIGUSR1 arrived since the last call (the flag is cleared): the run then writes a checkpoint. */
int mpt_guard_save_asked(void);

/* "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGPIPE", "SIGUSR1"; "a signal" for others. */
const char *mpt_guard_signal_name(int sig);

/* Under a memory limit (ulimit -v or -d), when OpenBLAS runs the CPU backend's GEMMs (no oneDNN in the build, or
 * MPT_CPU_ENGINE=openblas), makes every OpenBLAS thread allocate its GEMM buffer now, with one small GEMM, before
 * the run's own allocations take the room: OpenBLAS 0.3.21's blas_memory_alloc retries forever when
 * an allocation fails (OpenBLAS issue 5289, fixed in 0.3.30), in a GEMM and in exit()'s join of its threads alike.
 * When it cannot within 10 s, the process says why on stderr and ends with exit status 1 without joining them.
 * Call after mpt_cpu_set_threads and before loading data. Without a limit it does nothing. */
mpt_status mpt_guard_blas_ready(void);

/* Whether an address-space or data-segment limit is set (ulimit -v, -d): main then ends every exit with _exit
 * (on_exit), so that no exit joins an OpenBLAS thread looping in blas_memory_alloc. */
int mpt_guard_memory_limited(void);

/* Under a memory limit (ulimit -v, -d), turns a memory fault (SIGSEGV, SIGBUS) into one line on stderr that names
 * the limit, and exit status 1: oneDNN 2.6.3 (Debian's libdnnl2) crashes in dnnl_primitive_create, creating a
 * JIT kernel, when the address space is used up (`compare` under ulimit -v 128 MiB, 1 thread, did; gdb showed the
 * fault inside libdnnl). A fault is not recoverable, so the process ends at once; the files already
 * published stay complete. Without a limit it does nothing: a crash stays a crash, with its core. */
void mpt_guard_memory_crash_report(void);

#endif
