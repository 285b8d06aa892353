/*
 * tools/main.c - the mptrain command: `mptrain COMMAND [options]`, dispatching to the commands of tools/.
 * The file list and the exit codes are in tools/cli.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "mpt_config.h"
#include "tools/cli.h"
#include "tools/lab/lab.h"

static void print_usage(FILE *f) {
    fprintf(f,
            "Usage: mptrain COMMAND [options]\n"
            "Mixed-precision (FP32/TF32/FP16/BF16/FP8) training of small networks, with FP32 master weights\n"
            "and dynamic loss scaling, on the CPU (Tensor Core numerics emulated) or an NVIDIA GPU.\n"
            "\n"
            "Commands:\n"
            "  train     train one model in one precision\n"
            "  compare   train one model in several precisions from the same start (--seeds: several seeds,\n"
            "            confidence intervals and verdicts); write report.md and convergence.png\n"
            "  eval      test loss and accuracy of a checkpoint\n"
            "  info      library versions, the GPU, NVIDIA_TF32_OVERRIDE\n"
            "  lab       the lessons of mixed precision as experiments on Fashion-MNIST (start here)\n"
            "  formats   a number in FP32, TF32, BF16, FP16, FP8 and E8M0 as training rounds it; the formats' table\n"
            "\n"
            "`mptrain COMMAND --help` lists a command's options. `mptrain --version` prints the version.\n"
            "\n"
            "Examples:\n"
            "  mptrain train --model mlp --precision fp16 --epochs 3\n"
            "  mptrain compare --model lenet5 --epochs 2 --precisions fp32,fp16,bf16\n"
            "  mptrain eval --checkpoint runs/mlp-fp16/checkpoint.safetensors\n");
}

static int run_command(int argc, char **argv);

/* The CPU backend's GEMMs and element-wise passes run on OpenMP threads (libgomp). How a thread waits between
 * parallel regions decides much of a 2-thread step on a VM, and the right answer depends on whether the cores are
 * free:
 *   - busy cores: a thread that spins takes the core its partner needs, and every parallel GEMM waits for a time
 *     slice (mlp fp32, 200 steps on 2 threads at load average 10: 19.7 s spinning for libgomp's default, 1.8 s
 *     passive; at load 2.7 with 3 busy loops beside it, spinning 3000 rounds took 1.30-1.70x passive's time);
 *   - free cores: a thread that sleeps at once (passive) is woken through the kernel for every region, dozens per
 *     step (2 threads at load 0.35-0.59: spinning 3000 rounds first took 0.77-0.89x passive's training time for
 *     mlp fp32, tf32 and native bf16 and lenet5 fp32 and fp16, for 1-4% more CPU time; bench/ab.py,
 *     docs/benchmarks.md).
 * libgomp reads its wait settings only when it is loaded, before main: so when the environment sets neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT, mptrain looks at how many other threads are running now (the running count of
 * /proc/loadavg, less itself, the least of 4 samples 2 ms apart: a momentary process does not count, a busy one
 * does), sets GOMP_SPINCOUNT=3000 (spin about that many rounds, then sleep) if at most a quarter of the cores are
 * taken (none of 2 or 3, 1 of 4 ...), else OMP_WAIT_POLICY=passive, and executes itself again, once. (The load
 * average would lag: after another 2-thread program it reads "busy" for minutes.) Results do not depend on it (the
 * same bits either way); an exec that fails leaves libgomp's default and changes nothing else. */
#ifdef MPT_HAVE_ONEDNN
/* Threads of this process in state R (running or runnable): OpenBLAS starts its workers when it is loaded. */
static long own_running(void) {
    long n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *paren = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
        if (paren && paren[1] == ' ' && paren[2] == 'R') n++;
    }
    closedir(d);
    return n;
}

/* Runnable threads of other processes now: /proc/loadavg's running count less this process's, the least of 4
 * samples 2 ms apart; -1 if unknown. */
static long others_running(void) {
    long least = -1;
    for (int k = 0; k < 4; k++) {
        if (k) nanosleep(&(struct timespec){0, 2000000}, NULL);
        FILE *f = fopen("/proc/loadavg", "r");
        long run = -1, total;
        if (f) {
            if (fscanf(f, "%*f %*f %*f %ld/%ld", &run, &total) != 2) run = -1;
            fclose(f);
        }
        if (run < 1) return -1;
        long others = run - own_running();
        if (others < 0) others = 0;
        if (least < 0 || others < least) least = others;
    }
    return least;
}
#endif

/* Sets the wait policy in the environment; returns 1 when it did (libgomp reads it only when loaded: the process must
 * execute itself again for it to apply). */
static int omp_wait_policy(void) {
#ifdef MPT_HAVE_ONEDNN
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), others = others_running();
    const int idle = cores >= 2 && others >= 0 && others <= cores / 4;
    if ((idle ? setenv("GOMP_SPINCOUNT", "3000", 1) : setenv("OMP_WAIT_POLICY", "passive", 1)) != 0) return 0;
    char why[96]; /* for `mptrain info` */
    if (others >= 0)
        snprintf(why, sizeof why, "%ld runnable threads of other processes on %ld cores at start", others, cores);
    else snprintf(why, sizeof why, "/proc/loadavg unreadable: the cores taken as busy");
    if (setenv("MPT_OMP_WAIT_CHOSEN", why, 1) != 0) return 0;
    return 1;
#else
    return 0;
#endif
}

/* OpenBLAS's core on CPUs it does not recognise. Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) picks its kernels from the
 * CPU model it knows; on a newer Intel Xeon (avx512_fp16, Sapphire Rapids and later) it fell back to its Prescott
 * (SSE3) kernels: 22-32 GFLOP/s where Cooperlake's reach 126 (issue 32; STYLE.md's build notes). When OpenBLAS runs
 * the CPU backend's GEMMs (a build without oneDNN, or MPT_CPU_ENGINE=openblas) and the user set no
 * OPENBLAS_CORETYPE, mptrain compares the core OpenBLAS detected with the best one 0.3.21 has for the instructions
 * this CPU reports (GCC's __builtin_cpu_supports: CPUID and the OS's XSAVE state): Cooperlake for AVX512-BF16 with
 * AVX512F/BW/DQ/VL, SkylakeX for AVX512F/BW/DQ/VL, Haswell for AVX2 + FMA, Sandybridge for AVX. A detected core of a
 * lower class (Prescott, Core2, Nehalem ...) is replaced through OPENBLAS_CORETYPE, which OpenBLAS reads when it is
 * loaded, so the process executes itself again (with the wait policy above, once). A core it names that this table
 * does not know is left alone. The unit suite passes under each of these cores with MPT_CPU_ENGINE=openblas on the
 * development VM (docs/benchmarks.md). MPT_TEST_OPENBLAS_DETECTED (tests) stands in for the detected core. */
static int core_class(const char *name) {
    static const struct {
        const char *name;
        int cls;
    } known[] = {{"Cooperlake", 5}, {"SapphireRapids", 5}, {"SkylakeX", 4}, {"Haswell", 3}, {"Zen", 3},
                 {"Excavator", 3}, {"Steamroller", 3}, {"Sandybridge", 2}, {"Bulldozer", 2}, {"Piledriver", 2},
                 {"Prescott", 1}, {"Core2", 1}, {"Penryn", 1}, {"Dunnington", 1}, {"Nehalem", 1}, {"Atom", 1},
                 {"Katmai", 1}, {"Coppermine", 1}, {"Northwood", 1}, {"Banias", 1}, {"Athlon", 1}, {"Opteron", 1},
                 {"Opteron(SSE3)", 1}, {"Barcelona", 1}, {"Nano", 1}, {"Bobcat", 1}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(name, known[i].name) == 0) return known[i].cls;
    return 0;
}

static int openblas_core(void) {
    if (getenv("OPENBLAS_CORETYPE") || !mpt_cpu_gemm_on_openblas()) return 0;
    const char *test = getenv("MPT_TEST_OPENBLAS_DETECTED");
    const char *detected = test && *test ? test : openblas_get_corename();
    if (!detected) return 0;
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const char *best = NULL, *feature = NULL;
    int cls = 0;
    if (avx512 && __builtin_cpu_supports("avx512bf16")) best = "Cooperlake", feature = "avx512_bf16", cls = 5;
    else if (avx512) best = "SkylakeX", feature = "avx512f/bw/dq/vl", cls = 4;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = "Haswell", feature = "avx2", cls = 3;
    else if (__builtin_cpu_supports("avx")) best = "Sandybridge", feature = "avx", cls = 2;
    const int have = core_class(detected);
    if (!best || have == 0 || have >= cls) return 0;
    char why[160]; /* for `mptrain info` */
    snprintf(why, sizeof why, "OpenBLAS detected %.40s; this CPU has %s, whose best OpenBLAS 0.3.21 kernels are %s's",
             detected, feature, best);
    if (setenv("OPENBLAS_CORETYPE", best, 1) != 0 || setenv("MPT_OPENBLAS_CORE_CHOSEN", why, 1) != 0) return 0;
    return 1;
}
/* Descriptors 0-2 that the caller closed (`mptrain train ... >&-`) are opened on /dev/null: otherwise the next
 * file mptrain opens (metrics.csv) would get descriptor 1 and receive every printed line. open() returns the
 * lowest free descriptor, so each open fills the lowest closed one. */
static void reopen_closed_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* the lower ones are open by now, so this gets fd; failing, there is nowhere to say so, and going on
         * would write the program's lines into its data files */
        if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) _exit(MPT_CLI_EXIT_FAIL);
    }
}

static void exit_without_joining(int status, void *arg) {
    (void)arg;
    fflush(NULL);
    _exit(status);
}

/* Every command's output goes through stdout: a write that failed (a full disk, a closed pipe) must not
 * end in exit status 0. */
int main(int argc, char **argv) {
    reopen_closed_std_fds();
    /* Under a memory limit (ulimit -v, -d) every OpenBLAS worker allocates its buffer when it starts, and one that
     * cannot loops in blas_memory_alloc for good (OpenBLAS 0.3.21): any exit() would then hang joining it, ours and
     * the ones libraries call (libgomp's when it cannot create a thread). on_exit's handler runs before the
     * libraries' destructors: it flushes and ends the process with the same status, without the join. */
    if (mpt_guard_memory_limited()) on_exit(exit_without_joining, NULL);
    /* settings the libraries read only when they are loaded: chosen now, applied by executing again (once: both are
     * then set in the environment) */
    const int policy = omp_wait_policy(), core = openblas_core();
    if (policy || core) execv("/proc/self/exe", argv); /* failing, the libraries' defaults stay: nothing else */
    mpt_guard_memory_crash_report(); /* under a memory limit: a library's unchecked allocation said as such */
    int rc = run_command(argc, argv);
    if (rc == 0 && mpt_guard_stop_signal()) rc = 128 + mpt_guard_stop_signal(); /* asked to stop after the work was done */
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    if (bad && mpt_guard_stop_signal() == SIGPIPE) { /* the pipe's reader went away: the stop line said so */
    } else if (bad) {
        fprintf(stderr, "mptrain: writing to standard output failed: %s\n", strerror(errno ? errno : EIO));
        rc = rc ? rc : MPT_CLI_EXIT_FAIL;
    }
    /* Out of memory: exit() would join OpenBLAS's threads, and one may loop for good in blas_memory_alloc
     * (OpenBLAS 0.3.21 retries a failed allocation forever). Everything is written and closed by now. */
    if (mpt_cli_failed_nomem()) {
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}

static int run_command(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return MPT_CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("mptrain %s (GPU architectures built: %s, PTX %s)\n", MPT_VERSION, MPT_CUDA_ARCH, MPT_CUDA_PTX_ARCH);
        return 0;
    }
    /* commands that train stop gracefully on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM and SIGPIPE, and save a
     * checkpoint on SIGUSR1 (tools/guards.h) */
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "compare") == 0 || strcmp(cmd, "lab") == 0) mpt_guard_stop_install();
    if (strcmp(cmd, "train") == 0) return mpt_cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0) return mpt_cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return mpt_cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return mpt_cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "formats") == 0) return mpt_cmd_formats(argc - 1, argv + 1);
    if (strcmp(cmd, "lab") == 0) return mpt_cmd_lab(argc - 1, argv + 1);
    char esc[256];
    fprintf(stderr, "mptrain: unknown command '%s' (expected train, compare, eval, info, formats or lab; see mptrain --help)\n",
            mpt_cli_echo(esc, sizeof esc, cmd));
    return MPT_CLI_EXIT_USAGE;
}
