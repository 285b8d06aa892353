/*
 * kernels/cpu/onednn.c - oneDNN matmul primitives for the CPU GEMM (contract and numerics: kernels/cpu/onednn.h).
 *
 * One process-wide CPU engine and a cache of primitives keyed by everything that shapes them (transposes, M, N, K,
 * operand dtype, alpha, beta, thread count). Only mpt_onednn_gemm_prepare (graph build) adds to it; the step's
 * calls (mpt_onednn_gemm_lookup, mpt_onednn_gemm_run) only read it and abort on a GEMM that was not prepared. The
 * table grows (doubling, at prepare) so that every prepared GEMM stays in it for the life of the process; a GEMM
 * oneDNN refused at prepare is kept as refused, so the step knows to run it on OpenBLAS.
 * A GEMM runs on the OpenMP threads set (mpt_onednn_set_threads), or on one thread when it is small
 * (ONEDNN_PARALLEL_MIN_MNK): a fixed rule of the shape, so results stay deterministic.
 * Several host threads may run GEMMs at once (the convolutions run their per-image GEMMs on the OpenMP threads):
 * each call takes a free "lane", which has its own stream and, in every cached primitive, its own memory objects,
 * whose data handles are pointed at the caller's buffers on every call, so a call creates no oneDNN object. Lanes
 * up to the thread count at prepare time are made then (more memory objects, once, if more calls ever run at once,
 * which takes more threads than the graph was built with); a read-write lock guards the cache (calls share it,
 * preparing takes it alone).
 *
 * Every oneDNN call is checked: a failure while preparing marks the GEMM refused and returns "not available" to
 * gemm.c (which then uses OpenBLAS for that shape), a failure while running aborts naming the call, file and line
 * (ONEDNN_CHECK).
 * Built only with the Meson feature 'onednn'; kernels/cpu/onednn_none.c stands in without it.
 */
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/status.h"
#include "kernels/cpu/onednn.h"

#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP
#error "kernels/cpu/onednn.c sets oneDNN's threads through OpenMP: this oneDNN is not built with the OpenMP runtime"
#endif

/* libgomp's (Debian's oneDNN links it); declared here so that this file needs no -fopenmp. */
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);

#define ONEDNN_CHECK(call)                                                                                        \
    do {                                                                                                          \
        dnnl_status_t st_ = (call);                                                                               \
        MPT_ASSERTF(st_ == dnnl_success, "oneDNN call failed: %s: %s", #call, dnnl_status2str(st_));              \
    } while (0)

enum { CACHE_SLOTS_MIN = 256 }; /* the table's first size (a power of two); it doubles when half full */
enum { MAX_LANES = 16 };     /* host threads that may run GEMMs at once (OpenMP thread numbers 0..15) */

/* GEMMs with M*N*K below this run on one thread: an OpenMP fork/join costs microseconds (tens of them when the
 * machine is loaded and the second thread waits for a core), more than a small product gains from a second core.
 * 2^21 multiply-adds take ~10 us on one core at oneDNN's FP32 rate here. OpenBLAS has the same kind of rule
 * (interface/gemm.c: one thread up to M*N*K = 262144 by default). */
static const double ONEDNN_PARALLEL_MIN_MNK = 2097152.0;

typedef struct gemm_key {
    int trans_a, trans_b;
    int64_t M, N, K;
    int ab_dtype;
    uint32_t alpha_bits, beta_bits;
    int threads;
} gemm_key;

typedef struct lane_mem {
    dnnl_memory_t a, b, c, scratch; /* scratch NULL when the primitive needs none; a NULL: lane not made yet */
} lane_mem;

typedef struct gemm_entry {
    int used;
    int refused; /* oneDNN has no primitive for key (prepare failed): the GEMM runs on OpenBLAS; prim is NULL */
    gemm_key key;
    dnnl_primitive_t prim;
    lane_mem lane[MAX_LANES];
    dnnl_memory_desc_t a_md, b_md, c_md, sp_md;
    size_t scratch_bytes;
    const char *impl; /* owned by the primitive descriptor, which the primitive keeps */
    dnnl_primitive_desc_t pd;
} gemm_entry;

static struct {
    pthread_once_t once;
    pthread_rwlock_t lock; /* the cache: read to look up and run, write to create */
    int ok;
    dnnl_engine_t engine;
    dnnl_stream_t stream[MAX_LANES]; /* one per lane */
    gemm_entry *slots; /* [n_slots], open addressing */
    int n_slots, n_used;
    int64_t created;
    char version[32];
} g_dnnl = {PTHREAD_ONCE_INIT, PTHREAD_RWLOCK_INITIALIZER, 0, NULL, {NULL}, NULL, 0, 0, 0, "none"};

static void dnnl_init_once(void) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(g_dnnl.version, sizeof g_dnnl.version, "%d.%d.%d", v->major, v->minor, v->patch);
    g_dnnl.slots = calloc(CACHE_SLOTS_MIN, sizeof *g_dnnl.slots);
    if (!g_dnnl.slots) return;
    g_dnnl.n_slots = CACHE_SLOTS_MIN;
    if (dnnl_engine_create(&g_dnnl.engine, dnnl_cpu, 0) != dnnl_success) return;
    for (int l = 0; l < MAX_LANES; l++)
        if (dnnl_stream_create(&g_dnnl.stream[l], g_dnnl.engine, dnnl_stream_default_flags) != dnnl_success) return;
    g_dnnl.ok = 1;
}

/* Lanes in use: a call takes the first free one (an atomic flag each) and gives it back when it returns, so calls
 * that run at once never share memory objects or a stream, whichever threads (and whichever OpenMP runtime: a clang
 * build's libomp beside oneDNN's libgomp) they come from. */
static atomic_flag lane_busy[MAX_LANES] = {ATOMIC_FLAG_INIT};

static int lane_acquire(void) {
    for (;;)
        for (int l = 0; l < MAX_LANES; l++)
            if (!atomic_flag_test_and_set_explicit(&lane_busy[l], memory_order_acquire)) return l;
}

static void lane_release_busy(int l) { atomic_flag_clear_explicit(&lane_busy[l], memory_order_release); }

int mpt_onednn_available(void) {
    pthread_once(&g_dnnl.once, dnnl_init_once);
    return g_dnnl.ok;
}

const char *mpt_onednn_version(void) {
    pthread_once(&g_dnnl.once, dnnl_init_once);
    return g_dnnl.version;
}

/* dnnl_cpu_isa2str's name without its "cpu_isa_" prefix ("avx512_core_bf16"). */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    const char *s = dnnl_cpu_isa2str(isa);
    return strncmp(s, "cpu_isa_", 8) == 0 ? s + 8 : s;
}

const char *mpt_onednn_isa(void) {
    if (!mpt_onednn_available()) return "none";
    return isa_name(dnnl_get_effective_cpu_isa());
}

int mpt_onednn_native_bf16(char *why, size_t n) {
    if (!mpt_onednn_available()) {
        if (why) snprintf(why, n, "oneDNN could not create its CPU engine");
        return 0;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    /* The ISA values are bit sets: each includes the bits of the ones it extends. */
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16)
        return 1;
    if (why)
        snprintf(why, n, "this CPU has no BF16 dot-product units oneDNN uses (its ISA is %s; native BF16 needs "
                 "avx512_core_bf16 or avx512_core_amx)", isa_name(isa));
    return 0;
}

void mpt_onednn_set_threads(int n) {
    MPT_ASSERTF(n >= 1, "mpt_onednn_set_threads: %d threads", n);
    omp_set_num_threads(n);
}

int mpt_onednn_threads(void) { return omp_get_max_threads(); }

int64_t mpt_onednn_primitives_created(void) {
    pthread_rwlock_rdlock(&g_dnnl.lock);
    int64_t n = g_dnnl.created;
    pthread_rwlock_unlock(&g_dnnl.lock);
    return n;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static gemm_key key_of(const mpt_onednn_gemm *g) {
    gemm_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
    k.trans_a = g->trans_a;
    k.trans_b = g->trans_b;
    k.M = g->M;
    k.N = g->N;
    k.K = g->K;
    k.ab_dtype = (int)g->ab_dtype;
    k.alpha_bits = float_bits(g->alpha);
    k.beta_bits = float_bits(g->beta);
    const int max = omp_get_max_threads();
    k.threads = (double)g->M * (double)g->N * (double)g->K < ONEDNN_PARALLEL_MIN_MNK ? 1 : max;
    return k;
}

static uint64_t key_hash(const gemm_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Row-major [rows, cols] stored as given (trans 0) or as the transpose of a stored [cols, rows] (trans 1). */
static dnnl_status_t md_2d(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static void lane_release(lane_mem *m) {
    if (m->a) dnnl_memory_destroy(m->a);
    if (m->b) dnnl_memory_destroy(m->b);
    if (m->c) dnnl_memory_destroy(m->c);
    if (m->scratch) dnnl_memory_destroy(m->scratch);
    memset(m, 0, sizeof *m);
}

/* The memory objects of lane l of e (once); 0 on a oneDNN failure. Called with the write lock held. */
static int lane_create(gemm_entry *e, int l) {
    lane_mem *m = &e->lane[l];
    if (m->a) return 1;
    int ok = dnnl_memory_create(&m->a, &e->a_md, g_dnnl.engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&m->b, &e->b_md, g_dnnl.engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&m->c, &e->c_md, g_dnnl.engine, DNNL_MEMORY_NONE) == dnnl_success &&
             (e->scratch_bytes == 0 ||
              dnnl_memory_create(&m->scratch, &e->sp_md, g_dnnl.engine, DNNL_MEMORY_NONE) == dnnl_success);
    if (!ok) lane_release(m);
    return ok;
}

static void entry_release(gemm_entry *e) {
    for (int l = 0; l < MAX_LANES; l++) lane_release(&e->lane[l]);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->pd) dnnl_primitive_desc_destroy(e->pd);
    memset(e, 0, sizeof *e);
}

/* Creates the primitive and its memory objects into e; 0 on any oneDNN failure (e left empty). */
static int entry_create(gemm_entry *e, const gemm_key *k) {
    memset(e, 0, sizeof *e);
    const dnnl_data_type_t dt = k->ab_dtype == (int)MPT_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    float alpha, beta;
    memcpy(&alpha, &k->alpha_bits, sizeof alpha);
    memcpy(&beta, &k->beta_bits, sizeof beta);
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int ok = md_2d(&a_md, k->M, k->K, k->trans_a, dt) == dnnl_success &&
             md_2d(&b_md, k->K, k->N, k->trans_b, dt) == dnnl_success &&
             md_2d(&c_md, k->M, k->N, 0, dnnl_f32) == dnnl_success &&
             dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
             dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict) == dnnl_success;
    if (ok && alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok) { /* oneDNN sizes the primitive's parallel work for the thread count it sees now */
        const int max = omp_get_max_threads();
        if (k->threads != max) omp_set_num_threads(k->threads);
        ok = dnnl_primitive_desc_create(&e->pd, &desc, attr, g_dnnl.engine, NULL) == dnnl_success;
        if (k->threads != max) omp_set_num_threads(max);
    }
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (ok) {
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
        e->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
        if (sp) e->sp_md = *sp;
        e->a_md = a_md;
        e->b_md = b_md;
        e->c_md = c_md;
        ok = dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &e->impl) == dnnl_success &&
             dnnl_primitive_create(&e->prim, e->pd) == dnnl_success;
        /* the lanes of every thread that may call it (a convolution's per-image loop runs on all of them) */
        int lanes = omp_get_max_threads();
        if (lanes > MAX_LANES) lanes = MAX_LANES;
        for (int l = 0; ok && l < lanes; l++) ok = lane_create(e, l);
    }
    if (!ok) {
        entry_release(e);
        return 0;
    }
    e->key = *k;
    e->used = 1;
    g_dnnl.created++;
    return 1;
}

/* The cache slot of k: the entry holding it, or the empty slot where it belongs (the table is never more than
 * half full). Called with the lock held. */
static gemm_entry *cache_slot(const gemm_key *k) {
    const uint64_t h = key_hash(k), mask = (uint64_t)g_dnnl.n_slots - 1;
    for (uint64_t probe = 0;; probe++) {
        gemm_entry *e = &g_dnnl.slots[(h + probe) & mask];
        if (!e->used || memcmp(&e->key, k, sizeof *k) == 0) return e;
    }
}

/* Doubles the table when one more entry would fill it past half (entries move with their primitives and memory
 * objects: they are plain handles). Called with the write lock held; aborts when the host is out of memory (a
 * graph is being built, whose layers abort on that too). */
static void cache_grow_for_one_more(void) {
    if (2 * (g_dnnl.n_used + 1) <= g_dnnl.n_slots) return;
    const int old_n = g_dnnl.n_slots;
    gemm_entry *old = g_dnnl.slots, *fresh = calloc((size_t)old_n * 2, sizeof *fresh);
    MPT_ASSERTF(fresh != NULL, "oneDNN primitive cache: out of host memory growing it to %d entries", old_n * 2);
    g_dnnl.slots = fresh;
    g_dnnl.n_slots = old_n * 2;
    for (int i = 0; i < old_n; i++)
        if (old[i].used) *cache_slot(&old[i].key) = old[i];
    free(old);
}

/* What the cache holds for g (with the current thread count); creates nothing. */
static mpt_onednn_state cache_state(const mpt_onednn_gemm *g, size_t *scratch_bytes) {
    *scratch_bytes = 0;
    if (!mpt_onednn_available() || g->M < 1 || g->N < 1 || g->K < 1) return MPT_ONEDNN_REFUSED;
    if (g->ab_dtype != MPT_DTYPE_F32 && g->ab_dtype != MPT_DTYPE_BF16) return MPT_ONEDNN_REFUSED;
    const gemm_key k = key_of(g);
    pthread_rwlock_rdlock(&g_dnnl.lock);
    const gemm_entry *e = cache_slot(&k);
    mpt_onednn_state st = !e->used ? MPT_ONEDNN_UNPREPARED : e->refused ? MPT_ONEDNN_REFUSED : MPT_ONEDNN_READY;
    if (st == MPT_ONEDNN_READY) *scratch_bytes = e->scratch_bytes;
    pthread_rwlock_unlock(&g_dnnl.lock);
    return st;
}

int mpt_onednn_gemm_prepare(const mpt_onednn_gemm *g, size_t *scratch_bytes) {
    mpt_onednn_state st = cache_state(g, scratch_bytes); /* a graph built again: cached */
    if (st != MPT_ONEDNN_UNPREPARED) return st == MPT_ONEDNN_READY;
    const gemm_key k = key_of(g);
    pthread_rwlock_wrlock(&g_dnnl.lock);
    gemm_entry *e = cache_slot(&k);
    if (!e->used) { /* not made by another thread meanwhile */
        cache_grow_for_one_more();
        e = cache_slot(&k);
        if (!entry_create(e, &k)) { /* remembered as refused: the step runs it on OpenBLAS */
            e->key = k;
            e->used = 1;
            e->refused = 1;
        }
        g_dnnl.n_used++;
    }
    const int ok = !e->refused;
    if (ok) *scratch_bytes = e->scratch_bytes;
    pthread_rwlock_unlock(&g_dnnl.lock);
    return ok;
}

mpt_onednn_state mpt_onednn_gemm_lookup(const mpt_onednn_gemm *g, size_t *scratch_bytes) {
    return cache_state(g, scratch_bytes);
}

void mpt_onednn_gemm_describe(const mpt_onednn_gemm *g, char *buf, size_t n) {
    const gemm_key k = key_of(g);
    snprintf(buf, n, "%lldx%lldx%lld matmul (M x N x K), op(A) %s, op(B) %s, %s operands, alpha %g, beta %g, %d thread%s",
             (long long)g->M, (long long)g->N, (long long)g->K, g->trans_a ? "A^T" : "A", g->trans_b ? "B^T" : "B",
             mpt_dtype_name(g->ab_dtype), (double)g->alpha, (double)g->beta, k.threads, k.threads == 1 ? "" : "s");
}

const char *mpt_onednn_gemm_impl(const mpt_onednn_gemm *g) {
    if (!mpt_onednn_available()) return "none";
    const gemm_key k = key_of(g);
    pthread_rwlock_rdlock(&g_dnnl.lock);
    gemm_entry *e = cache_slot(&k);
    const char *s = e->used && !e->refused ? e->impl : "none";
    pthread_rwlock_unlock(&g_dnnl.lock);
    return s;
}

/* Runs e on lane l (its memory objects and stream). */
static void entry_execute(gemm_entry *e, int l, const void *A, const void *B, float *C, void *scratch,
                          size_t scratch_bytes) {
    MPT_ASSERTF(scratch_bytes >= e->scratch_bytes && (e->scratch_bytes == 0 || scratch != NULL),
                "oneDNN matmul %lldx%lldx%lld: needs %zu bytes of scratchpad, has %zu", (long long)e->key.M,
                (long long)e->key.N, (long long)e->key.K, e->scratch_bytes, scratch_bytes);
    lane_mem *m = &e->lane[l];
    ONEDNN_CHECK(dnnl_memory_set_data_handle(m->a, (void *)A));
    ONEDNN_CHECK(dnnl_memory_set_data_handle(m->b, (void *)B));
    ONEDNN_CHECK(dnnl_memory_set_data_handle(m->c, C));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c},
                               {DNNL_ARG_SCRATCHPAD, m->scratch}};
    int nargs = 3;
    if (m->scratch) {
        ONEDNN_CHECK(dnnl_memory_set_data_handle(m->scratch, scratch));
        nargs = 4;
    }
    const int max = omp_get_max_threads(); /* run on the thread count the primitive was made for */
    if (e->key.threads != max) omp_set_num_threads(e->key.threads);
    ONEDNN_CHECK(dnnl_primitive_execute(e->prim, g_dnnl.stream[l], nargs, args));
    ONEDNN_CHECK(dnnl_stream_wait(g_dnnl.stream[l]));
    if (e->key.threads != max) omp_set_num_threads(max);
}

/* Aborts: g has no primitive to run (never prepared with this thread count, or refused by oneDNN). */
static void run_unprepared(const mpt_onednn_gemm *g, const gemm_entry *e) {
    char what[192];
    mpt_onednn_gemm_describe(g, what, sizeof what);
    MPT_ASSERTF(0, "oneDNN %s: %s", what,
                e->used ? "oneDNN refused it at prepare (run it on OpenBLAS)"
                        : "not prepared: a step creates no primitive (mpt_onednn_gemm_prepare at graph build)");
}

void mpt_onednn_gemm_run(const mpt_onednn_gemm *g, const void *A, const void *B, float *C, void *scratch,
                         size_t scratch_bytes) {
    MPT_ASSERTF(mpt_onednn_available(), "mpt_onednn_gemm_run without oneDNN");
    const gemm_key k = key_of(g);
    const int l = lane_acquire();
    pthread_rwlock_rdlock(&g_dnnl.lock);
    gemm_entry *e = cache_slot(&k);
    if (!e->used || e->refused) run_unprepared(g, e);
    if (e->lane[l].a) { /* the step's path: cached, this lane made at graph build */
        entry_execute(e, l, A, B, C, scratch, scratch_bytes);
        pthread_rwlock_unlock(&g_dnnl.lock);
        lane_release_busy(l);
        return;
    }
    pthread_rwlock_unlock(&g_dnnl.lock);
    /* more calls at once than the graph was built for (more threads): this lane's memory objects, once */
    pthread_rwlock_wrlock(&g_dnnl.lock);
    e = cache_slot(&k);
    MPT_ASSERTF(lane_create(e, l), "oneDNN matmul %lldx%lldx%lld: cannot create its memory objects", (long long)g->M,
                (long long)g->N, (long long)g->K);
    entry_execute(e, l, A, B, C, scratch, scratch_bytes);
    pthread_rwlock_unlock(&g_dnnl.lock);
    lane_release_busy(l);
}
