/*
 * bench/bench_util.h - the clock, the median and the load average that every benchmark in bench/ reports with
 * (header-only, static functions: each benchmark is one C file). Benchmarks, not tests.
 */
#ifndef MPT_BENCH_UTIL_H
#define MPT_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The clock a benchmark times with: the wall clock, or the CPU time of the process (all its threads). */
static inline clockid_t bench_clock_of(int cpu_time) { return cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC; }

/* Seconds on clock c; exits with a message if the clock cannot be read. */
static inline double bench_now_s(clockid_t c) {
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0) {
        perror("bench: clock_gettime");
        exit(1);
    }
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1); sorts v. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The 1-minute load average (other processes share the cores: read the figures with it in mind), -1 if unknown. */
static inline double bench_load_avg(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

#endif
