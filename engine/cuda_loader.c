/*
 * engine/cuda_loader.c - finds and loads the CUDA backend module (libmptrain-cuda.so) on first use, and the
 * forwarders that give engine/backend.h's and engine/cuda_backend.h's CUDA functions their meaning
 * through it (interface: engine/cuda_module.h).
 *
 * Nothing here needs CUDA: a CPU-only build, or a CUDA build copied to a machine without CUDA libraries, runs
 * the CPU backend and reports why the CUDA one is not usable. The module is looked for, in this order:
 *   1. $MPT_CUDA_MODULE, a path to the file (if set, nothing else is tried);
 *   2. libmptrain-cuda.so next to the running program (/proc/self/exe);
 *   3. the directory mptrain/ next to libmptrain.so, when the program uses the shared library (dladdr);
 *   4. <program's directory>/../<libdir>/mptrain, the installed layout relative to an installed mptrain
 *      (MPT_CUDA_MODULE_REL_DIR), so an installation moved or staged elsewhere (meson install --destdir)
 *      finds its own module;
 *   5. the build tree's kernels/cuda (MPT_CUDA_MODULE_BUILD_DIR, for programs run from the build directory);
 *   6. <prefix>/<libdir>/mptrain (MPT_CUDA_MODULE_INSTALL_DIR, where `meson install` puts it).
 * The first file that exists is loaded (RTLD_NOW | RTLD_LOCAL); its failure to load is reported, not skipped
 * over, so a broken install is never mistaken for a missing one. Pattern: ggml's ggml_backend_load_best.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/cuda_module.h"
#include "mpt_config.h"

#define MPT_CUDA_MODULE_FILE "libmptrain-cuda.so"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static mpt_cuda_module_state state;
static const mpt_cuda_module_api *api;

/* Writes dir/MPT_CUDA_MODULE_FILE into path (without "..", when it exists); returns 1 if that file exists. */
static int candidate(const char *dir, char *path, size_t len) {
    int n = snprintf(path, len, "%s/%s", dir, MPT_CUDA_MODULE_FILE);
    if (n <= 0 || (size_t)n >= len || access(path, F_OK) != 0) return 0;
    char real[PATH_MAX];
    if (realpath(path, real) && strlen(real) < len) memcpy(path, real, strlen(real) + 1);
    return 1;
}

/* Writes into dir (len bytes) the directory of the shared object that holds this code, when that is not
 * the program itself (libmptrain.so); returns 0 when the code is part of the program (static link). */
static int library_dir(const char *exe_dir, char *dir, size_t len) {
    Dl_info info;
    if (!dladdr((void *)&mpt_cuda_module_status, &info) || !info.dli_fname || !strchr(info.dli_fname, '/'))
        return 0;
    snprintf(dir, len, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    *slash = '\0';
    return strcmp(dir, exe_dir) != 0;
}

/* The first existing module file in the search order into state.path; 0 (and state.why) if none. */
static int find_module(void) {
    const char *env = getenv("MPT_CUDA_MODULE");
    if (env && env[0]) {
        snprintf(state.path, sizeof state.path, "%s", env);
        if (access(env, F_OK) == 0) return 1;
        snprintf(state.why, sizeof state.why, "MPT_CUDA_MODULE=%s: no such file", env);
        return 0;
    }
    char exe[PATH_MAX] = "", dir[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        if (candidate(exe, state.path, sizeof state.path)) return 1;
    }
    char lib[PATH_MAX];
    if (library_dir(exe, lib, sizeof lib)) {
        snprintf(dir, sizeof dir, "%s/mptrain", lib);
        if (candidate(dir, state.path, sizeof state.path)) return 1;
    }
    const char *rel_dir = MPT_CUDA_MODULE_REL_DIR; /* "" when libdir is absolute (a variable: clang warns on a
                                                      literal's character as an operand of &&) */
    if (n > 0 && rel_dir[0] != '\0') {
        snprintf(dir, sizeof dir, "%s/../%s", exe, rel_dir);
        if (candidate(dir, state.path, sizeof state.path)) return 1;
    }
    if (candidate(MPT_CUDA_MODULE_BUILD_DIR, state.path, sizeof state.path)) return 1;
    if (candidate(MPT_CUDA_MODULE_INSTALL_DIR, state.path, sizeof state.path)) return 1;
    state.path[0] = '\0';
    snprintf(state.why, sizeof state.why,
             "no %s next to the program (%.900s), next to libmptrain, in %s or in %s "
             "(set MPT_CUDA_MODULE to its path)",
             MPT_CUDA_MODULE_FILE, n > 0 ? exe : "?", MPT_CUDA_MODULE_BUILD_DIR, MPT_CUDA_MODULE_INSTALL_DIR);
    return 0;
}

/* The module finds the engine functions it calls in the process's global scope. A program that loaded
 * libmptrain.so itself with dlopen(RTLD_LOCAL) (Python's ctypes does) kept them out of it: reopening the
 * already loaded library with RTLD_GLOBAL puts them there (the handle stays open, as the library must). In a
 * program that links libmptrain statically this changes nothing: it exports them itself (-Wl,--export-dynamic). */
static void make_engine_global(void) {
    Dl_info info;
    if (dladdr((void *)&mpt_cuda_module_status, &info) && info.dli_fname && info.dli_fname[0])
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
}

static void load_module(void) {
#ifdef MPT_HAVE_CUDA
    state.built = 1;
#endif
    if (!find_module()) return;
    make_engine_global();
    void *h = dlopen(state.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(state.why, sizeof state.why, "cannot load it: %s", e ? e : "dlopen failed");
        return;
    }
    mpt_cuda_module_entry_fn entry;
    *(void **)&entry = dlsym(h, MPT_CUDA_MODULE_ENTRY);
    if (!entry) {
        snprintf(state.why, sizeof state.why, "no symbol %s: not an mptrain CUDA module", MPT_CUDA_MODULE_ENTRY);
        dlclose(h);
        return;
    }
    api = entry(MPT_CUDA_MODULE_ABI);
    if (!api) {
        snprintf(state.why, sizeof state.why, "built for another mptrain version (module ABI %d wanted)",
                 MPT_CUDA_MODULE_ABI);
        dlclose(h);
        return;
    }
    state.loadable = 1; /* the handle stays open until the process exits: backends created from it live on */
}

int mpt_cuda_module_status(mpt_cuda_module_state *out) {
    pthread_once(&load_once, load_module);
    if (out) *out = state;
    return state.loadable;
}

/* The module's table, or NULL. */
static const mpt_cuda_module_api *module(void) {
    pthread_once(&load_once, load_module);
    return api;
}

/* Says why there is no module, in the words of the probe. */
static mpt_cuda_probe_result no_module(char *msg, size_t len) {
    if (state.built || state.path[0]) {
        if (msg) snprintf(msg, len, "CUDA backend module %s: %s", state.path[0] ? state.path : "not found", state.why);
        return MPT_CUDA_BROKEN;
    }
    if (msg)
        snprintf(msg, len, "this mptrain was built without the CUDA backend (Meson -Dcuda=disabled, or no CUDA "
                           "toolkit found): install the CUDA toolkit and cuDNN 9 and rebuild with -Dcuda=enabled");
    return MPT_CUDA_NOT_BUILT;
}

mpt_cuda_probe_result mpt_cuda_probe(char *msg, size_t len) {
    const mpt_cuda_module_api *m = module();
    return m ? m->probe(msg, len) : no_module(msg, len);
}

int mpt_cuda_available(char *msg, size_t len) { return mpt_cuda_probe(msg, len) == MPT_CUDA_USABLE; }

int mpt_cuda_device_info(char *buf, size_t len) {
    const mpt_cuda_module_api *m = module();
    if (m) return m->device_info(buf, len);
    no_module(buf, len);
    return 0;
}

mpt_backend *mpt_backend_cuda_create(void) {
    const mpt_cuda_module_api *m = module();
    if (m) return m->backend_create();
    char why[4096];
    no_module(why, sizeof why);
    mpt_errorf(MPT_ERR_DEVICE, "no CUDA backend: %s", why);
    return NULL;
}

/* The functions below take a backend created by mpt_backend_cuda_create, which exists only if the module
 * loaded: module() is never NULL in them. */
void mpt_cuda_rng_uniform(mpt_backend *be, float *out, size_t n, uint64_t seed, uint64_t offset) {
    module()->rng_uniform(be, out, n, seed, offset);
}

int mpt_cuda_gemm_record_count(mpt_backend *be) { return module()->gemm_record_count(be); }

int mpt_cuda_gemm_record_get(mpt_backend *be, int i, mpt_cuda_gemm_record *out) {
    return module()->gemm_record_get(be, i, out);
}

void mpt_cuda_print_gemm_records(mpt_backend *be, FILE *f) { module()->print_gemm_records(be, f); }

int mpt_cuda_conv_record_count(mpt_backend *be) { return module()->conv_record_count(be); }

int mpt_cuda_conv_record_get(mpt_backend *be, int i, mpt_cuda_conv_record *out) {
    return module()->conv_record_get(be, i, out);
}

void mpt_cuda_print_conv_records(mpt_backend *be, FILE *f) { module()->print_conv_records(be, f); }

void mpt_cuda_fp8_convert_check(mpt_backend *be, const float *x, int64_t n, uint8_t *ours, uint8_t *cuda, int kind,
                                int e5m2, int saturate) {
    module()->fp8_convert_check(be, x, n, ours, cuda, kind, e5m2, saturate);
}

static const char *const opt_in_vars[] = MPT_CUDA_OPT_IN_VARS;
_Static_assert(sizeof opt_in_vars / sizeof *opt_in_vars == MPT_CUDA_OPT_IN_COUNT,
               "MPT_CUDA_OPT_IN_VARS and mpt_cuda_opt_in list the same paths");

int64_t mpt_cuda_opt_in_calls(mpt_backend *be, int k) {
    return k < 0 || k >= MPT_CUDA_OPT_IN_COUNT ? -1 : module()->opt_in_calls(be, k);
}

int mpt_cuda_opt_in_on(char *buf, size_t len) {
    int n = 0;
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < MPT_CUDA_OPT_IN_COUNT; i++) {
        const char *v = getenv(opt_in_vars[i]);
        if (!v || strcmp(v, "1") != 0) continue;
        if (used < len) used += (size_t)snprintf(buf + used, len - used, "%s%s", n ? ", " : "", opt_in_vars[i]);
        n++;
    }
    return n;
}

int mpt_cuda_library_versions(char *buf, size_t len) {
    const mpt_cuda_module_api *m = module();
    if (!m) return 0;
    m->library_versions(buf, len);
    return 1;
}

/* Data-parallel over NCCL. set_device and nccl_available work without a backend (no module: an error / 0); the
 * rest take a CUDA backend or a communicator, which exist only if the module loaded. */
mpt_status mpt_cuda_set_device(int ordinal) {
    const mpt_cuda_module_api *m = module();
    if (m) return m->set_device(ordinal);
    char why[4096];
    no_module(why, sizeof why);
    return mpt_errorf(MPT_ERR_DEVICE, "no CUDA backend: %s", why);
}

int mpt_cuda_nccl_available(void) {
    const mpt_cuda_module_api *m = module();
    if (m) return m->nccl_available();
    char why[4096];
    no_module(why, sizeof why);
    mpt_errorf(MPT_ERR_DEVICE, "no CUDA backend: %s", why);
    return 0;
}

mpt_status mpt_cuda_nccl_unique_id(unsigned char id[MPT_NCCL_ID_BYTES]) {
    const mpt_cuda_module_api *m = module();
    if (m) return m->nccl_unique_id(id);
    char why[4096];
    no_module(why, sizeof why);
    return mpt_errorf(MPT_ERR_DEVICE, "no CUDA backend: %s", why);
}

mpt_status mpt_cuda_nccl_comm_create(mpt_backend *be, mpt_nccl_comm **out, const unsigned char id[MPT_NCCL_ID_BYTES],
                                     int nranks, int rank, int64_t max_elems) {
    return module()->nccl_comm_create(be, out, id, nranks, rank, max_elems);
}

void mpt_cuda_nccl_comm_free(mpt_nccl_comm **c) {
    if (*c) module()->nccl_comm_free(c);
}

void mpt_cuda_nccl_comm_abort(mpt_nccl_comm **c) {
    if (*c) module()->nccl_comm_abort(c);
}

void mpt_cuda_nccl_allreduce(mpt_backend *be, mpt_nccl_comm *c, float *const *bufs, const int64_t *counts, int n_bufs,
                             mpt_dtype wire, float weight) {
    module()->nccl_allreduce(be, c, bufs, counts, n_bufs, wire, weight);
}

int mpt_cuda_nccl_poll(mpt_backend *be, mpt_nccl_comm *c) { return module()->nccl_poll(be, c); }
