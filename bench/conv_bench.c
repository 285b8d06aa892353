/*
 * bench/conv_bench.c - time per batch of each convolution pass on LeNet-5's two layers (batch 128): mptrain's CPU
 * convolution (kernels/cpu/conv.c: im2col + the CPU GEMM per image) in each math mode, against oneDNN's own
 * convolution primitives in FP32 (what issue 25 asks: "through oneDNN's convolution primitives where faster than
 * im2col + GEMM").
 *
 *   mptrain <math>   be->conv2d_forward / _backward_data / _backward_filter on the backend (engine: the default,
 *                    or MPT_CPU_ENGINE=openblas), data in NCHW / KCRS as the layers keep it.
 *   dnnl nchw        oneDNN convolution primitives (forward_training, backward_data, backward_weights with the bias
 *                    gradient) on plain NCHW/OIHW memory: no reorder needed, but oneDNN's fast kernels do not take
 *                    plain layouts for these shapes (it picks its GEMM-based implementation).
 *   dnnl blocked     the same with format_tag_any, so oneDNN picks its blocked layouts (nChw16c, ...) and direct JIT
 *                    kernels; "+reorders" adds what a layer keeping NCHW tensors would pay each pass to reorder
 *                    every operand into the primitive's layout and the result back (the weights change every step,
 *                    so they are reordered too).
 * The first layer's backward-data pass is timed though LeNet-5 does not run it (its input needs no gradient).
 * Times are the median of 7 samples of 10 calls each, on the calling thread's CPU clock by default (the process's
 * with --threads > 1: then it is the CPU time of all threads, not the wall time), in ms per batch.
 *
 * Usage: build-bench/bench/conv_bench [--threads N]   (built only with oneDNN; numbers in docs/benchmarks.md)
 */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/backend.h"
#include "kernels/cpu/onednn.h"

enum { SAMPLES = 7, CALLS = 10 };

#define CK(call)                                                                                                  \
    do {                                                                                                          \
        dnnl_status_t s_ = (call);                                                                                \
        if (s_ != dnnl_success) {                                                                                 \
            fprintf(stderr, "conv_bench: %s failed (%d)\n", #call, (int)s_);                                      \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

static clockid_t bench_clock = CLOCK_THREAD_CPUTIME_ID;

typedef void (*bench_fn)(void *ctx, int pass);

/* Median over SAMPLES of the mean time of CALLS calls of fn(ctx, pass), in ms. */
static double time_ms(bench_fn fn, void *ctx, int pass) {
    double t[SAMPLES];
    fn(ctx, pass); /* warm: caches, oneDNN's first-call set-up */
    for (int s = 0; s < SAMPLES; s++) {
        double t0 = bench_now_s(bench_clock);
        for (int i = 0; i < CALLS; i++) fn(ctx, pass);
        t[s] = (bench_now_s(bench_clock) - t0) / CALLS * 1e3;
    }
    return bench_median(t, SAMPLES);
}

static void fill(void *p, mpt_dtype t, int64_t n, unsigned salt) {
    for (int64_t i = 0; i < n; i++)
        mpt_store_f32(p, t, i, (float)(((uint64_t)i * 2654435761u + salt) % 1000) / 1000.0f - 0.5f);
}

/* ---- mptrain's convolution ---- */
typedef struct mpt_ctx {
    mpt_backend *be;
    mpt_conv_args a;
} mpt_ctx;

static void mpt_pass(void *ctx, int pass) {
    mpt_ctx *c = ctx;
    if (pass == 0) c->be->conv2d_forward(c->be, &c->a);
    else if (pass == 1) c->be->conv2d_backward_data(c->be, &c->a);
    else c->be->conv2d_backward_filter(c->be, &c->a);
}

static void bench_mptrain(mpt_backend *be, mpt_conv_shape s, mpt_math m, double ms[3]) {
    const mpt_dtype t = m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
    const size_t es = mpt_dtype_size(t);
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    mpt_ctx c = {.be = be};
    void *x = malloc((size_t)nx * es), *w = malloc((size_t)nw * es), *b = malloc((size_t)s.K * es);
    void *y = malloc((size_t)ny * es), *dy = malloc((size_t)ny * es), *dx = malloc((size_t)nx * es);
    float *dw = malloc((size_t)nw * sizeof(float)), *db = malloc((size_t)s.K * sizeof(float));
    if (!x || !w || !b || !y || !dy || !dx || !dw || !db) exit(1);
    fill(x, t, nx, 1);
    fill(w, t, nw, 2);
    fill(b, t, s.K, 3);
    fill(dy, t, ny, 4);
    c.a.s = s;
    c.a.math = m;
    c.a.dtype = t;
    c.a.x = x;
    c.a.w = w;
    c.a.bias = b;
    c.a.y = y;
    c.a.dy = dy;
    c.a.dx = dx;
    c.a.dw = dw;
    c.a.db = db;
    c.a.tag = "conv_bench";
    if (mpt_backend_reserve_workspace(be, be->conv2d_workspace(be, &c.a)) != MPT_OK) exit(1);
    for (int p = 0; p < 3; p++) ms[p] = time_ms(mpt_pass, &c, p);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
}

/* ---- oneDNN's convolution primitives ---- */
static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* A primitive with its arguments, and the reorders a NCHW layer would run around it. */
typedef struct dnnl_call {
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[5];
    int nargs;
    dnnl_primitive_t reorder[4];
    dnnl_memory_t rsrc[4], rdst[4];
    int nreorders;
} dnnl_call;

typedef struct dnnl_ctx {
    dnnl_call call[3];
    int with_reorders;
} dnnl_ctx;

static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    CK(dnnl_memory_get_data_handle(m, &p));
    fill(p, MPT_DTYPE_F32, (int64_t)(dnnl_memory_desc_get_size(md) / sizeof(float)), 5);
    return m;
}

/* The primitive's memory for argument `arg` of layout `md`; if md is not the plain `plain`, a reorder from (input)
 * or to (output) a plain buffer is added to the call. */
static dnnl_memory_t arg_mem(dnnl_call *c, const dnnl_memory_desc_t *md, const dnnl_memory_desc_t *plain, int input) {
    dnnl_memory_t m = mem(md);
    if (!dnnl_memory_desc_equal(md, plain)) {
        dnnl_memory_t p = mem(plain);
        dnnl_primitive_desc_t rpd;
        int r = c->nreorders++;
        CK(dnnl_reorder_primitive_desc_create(&rpd, input ? plain : md, eng, input ? md : plain, eng, NULL));
        CK(dnnl_primitive_create(&c->reorder[r], rpd));
        CK(dnnl_primitive_desc_destroy(rpd));
        c->rsrc[r] = input ? p : m;
        c->rdst[r] = input ? m : p;
    }
    return m;
}

static void dnnl_pass(void *ctx, int pass) {
    dnnl_ctx *d = ctx;
    dnnl_call *c = &d->call[pass];
    if (d->with_reorders) /* inputs are reordered before, outputs after; one stream, in order, so run all first */
        for (int r = 0; r < c->nreorders; r++) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, c->rsrc[r]}, {DNNL_ARG_TO, c->rdst[r]}};
            CK(dnnl_primitive_execute(c->reorder[r], strm, 2, ra));
        }
    CK(dnnl_primitive_execute(c->prim, strm, c->nargs, c->args));
    CK(dnnl_stream_wait(strm));
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
    const char *s = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s;
}

static void bench_dnnl(mpt_conv_shape s, int blocked, int with_reorders, double ms[3], const char *impl[3]) {
    dnnl_dims_t sd = {s.N, s.C, s.H, s.W}, wd = {s.K, s.C, s.R, s.S}, bd = {s.K}, dd = {s.N, s.K, s.P, s.Q};
    dnnl_dims_t st = {s.stride_h, s.stride_w}, pad = {s.pad_h, s.pad_w};
    dnnl_memory_desc_t smd, wmd, bmd, dmd, sp, wp, dp;
    const dnnl_format_tag_t any = dnnl_format_tag_any;
    CK(dnnl_memory_desc_init_by_tag(&sp, 4, sd, dnnl_f32, dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&wp, 4, wd, dnnl_f32, dnnl_oihw));
    CK(dnnl_memory_desc_init_by_tag(&dp, 4, dd, dnnl_f32, dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, blocked ? any : dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, blocked ? any : dnnl_oihw));
    CK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, blocked ? any : dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x));
    dnnl_convolution_desc_t fd, bdd, bwd;
    CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &smd, &wmd, &bmd, &dmd,
                                          st, pad, pad));
    CK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &smd, &wmd, &dmd, st, pad, pad));
    CK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &smd, &wmd, &bmd, &dmd, st, pad,
                                                   pad));
    dnnl_primitive_attr_t attr; /* strict FP32: no implicit down-conversion */
    CK(dnnl_primitive_attr_create(&attr));
    CK(dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict));
    dnnl_primitive_desc_t pd[3];
    CK(dnnl_primitive_desc_create(&pd[0], &fd, attr, eng, NULL));
    CK(dnnl_primitive_desc_create(&pd[1], &bdd, attr, eng, pd[0]));
    CK(dnnl_primitive_desc_create(&pd[2], &bwd, attr, eng, pd[0]));
    dnnl_ctx d = {.with_reorders = with_reorders};
    for (int p = 0; p < 3; p++) {
        dnnl_call *c = &d.call[p];
        impl[p] = impl_of(pd[p]);
        CK(dnnl_primitive_create(&c->prim, pd[p]));
        const_dnnl_primitive_desc_t q = pd[p];
#define MD(what) dnnl_primitive_desc_query_md(q, what, 0)
        if (p == 0) {
            c->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, arg_mem(c, MD(dnnl_query_src_md), &sp, 1)};
            c->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, arg_mem(c, MD(dnnl_query_weights_md), &wp, 1)};
            c->args[2] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&bmd)};
            c->args[3] = (dnnl_exec_arg_t){DNNL_ARG_DST, arg_mem(c, MD(dnnl_query_dst_md), &dp, 0)};
            c->nargs = 4;
        } else if (p == 1) {
            c->args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, arg_mem(c, MD(dnnl_query_diff_dst_md), &dp, 1)};
            c->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, arg_mem(c, MD(dnnl_query_weights_md), &wp, 1)};
            c->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, arg_mem(c, MD(dnnl_query_diff_src_md), &sp, 0)};
            c->nargs = 3;
        } else {
            c->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, arg_mem(c, MD(dnnl_query_src_md), &sp, 1)};
            c->args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, arg_mem(c, MD(dnnl_query_diff_dst_md), &dp, 1)};
            c->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, arg_mem(c, MD(dnnl_query_diff_weights_md), &wp, 0)};
            c->args[3] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, mem(&bmd)};
            c->nargs = 4;
        }
#undef MD
        ms[p] = time_ms(dnnl_pass, &d, p);
    }
    /* the primitives and memories live until exit: a benchmark of a few shapes */
    CK(dnnl_primitive_attr_destroy(attr));
}

int main(int argc, char **argv) {
    int threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("Usage: conv_bench [--threads N]\n"
                   "Time per batch of each convolution pass on LeNet-5's two layers (batch 128): mptrain's CPU convolution\n"
                   "per math mode against oneDNN's primitives (plain and blocked layouts), median of 7 samples, CPU clock.\n");
            return 0;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || mpt_cpu_set_threads(threads) != threads) {
        fprintf(stderr, "conv_bench: --threads %d refused\n", threads);
        return 2;
    }
    if (threads > 1) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    mpt_onednn_set_threads(threads);
    if (!mpt_onednn_available()) {
        fprintf(stderr, "conv_bench: oneDNN is not available\n");
        return 1;
    }
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    printf("conv_bench: %d thread(s), %s CPU clock, ms per batch (median of %d x %d calls); load %.2f; oneDNN %s "
           "(%s); mptrain engine %s\n",
           threads, threads > 1 ? "process" : "thread", SAMPLES, CALLS, bench_load_avg(), mpt_onednn_version(),
           mpt_onednn_isa(), getenv("MPT_CPU_ENGINE") ? getenv("MPT_CPU_ENGINE") : "default");
    mpt_conv_shape shapes[2] = {
        {.N = 128, .C = 1, .H = 28, .W = 28, .K = 6, .R = 5, .S = 5, .pad_h = 2, .pad_w = 2, .stride_h = 1,
         .stride_w = 1},
        {.N = 128, .C = 6, .H = 14, .W = 14, .K = 16, .R = 5, .S = 5, .stride_h = 1, .stride_w = 1},
    };
    const char *names[2] = {"c1 1->6 5x5 pad 2, 28x28", "c2 6->16 5x5, 14x14"};
    mpt_backend *be = mpt_backend_cpu_create();
    const mpt_math maths[4] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_F16, MPT_MATH_BF16};
    for (int i = 0; i < 2; i++) {
        mpt_conv_shape s = shapes[i];
        s.P = (s.H + 2 * s.pad_h - s.R) / s.stride_h + 1;
        s.Q = (s.W + 2 * s.pad_w - s.S) / s.stride_w + 1;
        printf("\n%s, batch %d: %.1f MFLOP per pass\n", names[i], s.N,
               2e-6 * s.N * s.K * s.P * s.Q * s.C * s.R * s.S);
        printf("%-26s %9s %9s %9s   %s\n", "", "forward", "bwd data", "bwd filt", "oneDNN implementation");
        double ms[3];
        for (int m = 0; m < 4; m++) {
            bench_mptrain(be, s, maths[m], ms);
            printf("mptrain %-18s %9.3f %9.3f %9.3f\n", mpt_math_name(maths[m]), ms[0], ms[1], ms[2]);
        }
        const char *impl[3];
        bench_dnnl(s, 0, 0, ms, impl);
        printf("%-26s %9.3f %9.3f %9.3f   %s / %s / %s\n", "dnnl f32 nchw", ms[0], ms[1], ms[2], impl[0], impl[1],
               impl[2]);
        bench_dnnl(s, 1, 0, ms, impl);
        printf("%-26s %9.3f %9.3f %9.3f   %s / %s / %s\n", "dnnl f32 blocked", ms[0], ms[1], ms[2], impl[0],
               impl[1], impl[2]);
        bench_dnnl(s, 1, 1, ms, impl);
        printf("%-26s %9.3f %9.3f %9.3f\n", "dnnl f32 blocked+reorders", ms[0], ms[1], ms[2]);
    }
    mpt_backend_free(&be);
    return 0;
}
