/*
 * tests/test_cuda_require.c - the cuda suite's skip/fail rule (tests/test_cuda.c), checked where it can be: on a
 * machine without a usable GPU. Suite 'unit'.
 *
 * test_cuda skips (exit 77) only when the machine has no GPU (no NVIDIA driver, or one that reports no device;
 * also a GPU older than compute capability 8.0); every other CUDA error fails (exit 1), and with
 * MPT_REQUIRE_CUDA=1 (set by bench/gpu.sh) every case without a usable GPU fails, naming the reason. This
 * program runs the built $MPT_BUILD_ROOT/tests/test_cuda both ways and checks the exit status and the reason
 * it prints against mpt_cuda_probe(); the same for test_cuda_graph, test_nccl, test_cuda_fp8 and test_cuda_tc (all
 * start with tests/cuda_gate.h). On a machine with a
 * usable GPU the cuda suite itself is the check; here
 * only the probe's agreement with mpt_cuda_available() is tested.
 * The CUDA backend module (engine/cuda_loader.c): a build that configured it loads it (its libraries are on
 * the build machine); a build without it reports MPT_CUDA_NOT_BUILT, which the cuda suite treats as a
 * machine without a GPU (skip, or fail under MPT_REQUIRE_CUDA=1).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"
#include "harness.h"
#include "engine/cuda_backend.h"
#include "mpt_config.h"

#define TESTS_OUT_BUF (1 << 14)
#include "run_capture.h"

/* The programs of the cuda suite, all bound by the same rule. */
static const char *const cuda_programs[] = {"test_cuda", "test_cuda_graph", "test_nccl", "test_cuda_fp8",
                                            "test_cuda_tc"};

/* Runs the cuda suite's program `prog` with MPT_REQUIRE_CUDA set to `require` (NULL: unset); its stdout and stderr
 * land in out_buf. Returns the exit status, or 128 + signal. */
static int run_test_cuda(const char *prog, const char *require) {
    char path[1024];
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(path, sizeof path, "%s/tests/%s", root ? root : "..", prog);
    char *const args[] = {(char *)prog, NULL};
    return run_capture(path, args, "MPT_REQUIRE_CUDA", require);
}

START_TEST(test_module_loads_where_built) {
    mpt_cuda_module_state m;
    int loadable = mpt_cuda_module_status(&m);
    ck_assert_int_eq(loadable, m.loadable);
    char why[512];
    mpt_cuda_probe_result r = mpt_cuda_probe(why, sizeof why);
#ifdef MPT_HAVE_CUDA
    ck_assert_msg(m.built, "mpt_config.h says the CUDA backend was built, the loader does not");
    ck_assert_msg(m.loadable, "the CUDA backend module of this build does not load: %s: %s", m.path, m.why);
    ck_assert_msg(strstr(m.path, "libmptrain-cuda.so") != NULL, "loaded %s", m.path);
    ck_assert_int_ne(r, MPT_CUDA_NOT_BUILT);
#else
    ck_assert_msg(!m.built, "a build without -Dcuda says the CUDA backend was built");
    if (!m.path[0]) {
        ck_assert_int_eq(r, MPT_CUDA_NOT_BUILT);
        ck_assert_msg(strstr(why, "-Dcuda=enabled") != NULL, "the reason does not say how to get CUDA: %s", why);
    }
#endif
}
END_TEST

/* The module exports its entry point and nothing else (kernels/cuda/module.cu). A function it exported under the
 * name of one of the engine's forwarders (engine/cuda_loader.c) would be interposed by the forwarder: the module's
 * table then points back at the forwarder, which calls the table again. That was mpt_backend_cuda_create on the
 * first GPU run (2026-11-26): a busy loop, every GPU test and `train --device cuda` hung. */
START_TEST(test_module_exports_only_its_entry) {
    mpt_cuda_module_state m;
    if (!mpt_cuda_module_status(&m)) return; /* no module: nothing to check (test_module_loads_where_built says why) */
    void *h = dlopen(m.path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "%s is loaded but dlopen(RTLD_NOLOAD) does not find it: %s", m.path, dlerror());
    ck_assert_msg(dlsym(h, "mpt_cuda_module_get") != NULL, "%s does not export mpt_cuda_module_get", m.path);
    static const char *const forwarded[] = {"mpt_backend_cuda_create", "mpt_cuda_available", "mpt_cuda_probe",
                                            "mpt_cuda_device_info", "mpt_cuda_set_device", "mpt_cuda_rng_uniform",
                                            "mpt_cuda_nccl_available", "mpt_cuda_nccl_allreduce",
                                            "mpt_cuda_gemm_record_count", "mpt_cuda_library_versions"};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        ck_assert_msg(dlsym(h, forwarded[i]) == NULL,
                      "%s exports %s: the program's forwarder of that name would interpose it (engine/api.h.in, "
                      "MPT_BUILDING_CUDA_MODULE)", m.path, forwarded[i]);
    dlclose(h);
}
END_TEST

/* NCCL is loaded lazily (kernels/cuda/nccl.cu): loading the CUDA module and probing the GPU map no libnccl, so a
 * machine without NCCL runs the CUDA backend; the first data-parallel use (mpt_cuda_nccl_available) loads it. With
 * the module linked against libnccl.so.2 (as it was) NCCL is mapped as soon as the module is. */
START_TEST(test_module_loads_nccl_only_when_asked) {
    mpt_cuda_module_state m;
    if (!mpt_cuda_module_status(&m)) return; /* no module: nothing to check */
    char why[512];
    mpt_cuda_probe(why, sizeof why);
    void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
    ck_assert_msg(h == NULL, "libnccl.so.2 is mapped after loading %s and probing the GPU, before any data-parallel "
                  "use: the module links NCCL instead of loading it when asked", m.path);
#ifdef MPT_HAVE_NCCL
    if (mpt_cuda_nccl_available()) { /* NCCL is installed here: now it is mapped */
        h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
        ck_assert_msg(h != NULL, "mpt_cuda_nccl_available() said yes, but no libnccl.so.2 is mapped");
        dlclose(h);
    } else {
        ck_assert_msg(strstr(mpt_last_error(), "NCCL could not be loaded") != NULL, "no reason: %s", mpt_last_error());
    }
#else
    ck_assert_int_eq(mpt_cuda_nccl_available(), 0);
    ck_assert_msg(strstr(mpt_last_error(), "built without NCCL") != NULL, "the reason: %s", mpt_last_error());
#endif
}
END_TEST

/* A NCCL that cannot be found: mpt_cuda_nccl_available() says so, naming the file and the variable, and the module
 * goes on working (its library report names NCCL's absence). */
START_TEST(test_nccl_missing_is_reported) {
    setenv("MPT_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    mpt_cuda_module_state m;
    if (!mpt_cuda_module_status(&m)) return;
    ck_assert_int_eq(mpt_cuda_nccl_available(), 0);
#ifdef MPT_HAVE_NCCL
    ck_assert_msg(strstr(mpt_last_error(), "/nonexistent/libnccl.so.2") && strstr(mpt_last_error(), "MPT_NCCL_LIBRARY"),
                  "the reason does not name the file and MPT_NCCL_LIBRARY: %s", mpt_last_error());
#endif
    char versions[8192];
    ck_assert(mpt_cuda_library_versions(versions, sizeof versions));
    const char *line = strstr(versions, "  NCCL                ");
    ck_assert_msg(line != NULL, "no NCCL line: %s", versions);
    ck_assert_msg(strncmp(line + 22, "not ", 4) == 0, "NCCL is reported loaded: %s", versions);
    char why[512];
    ck_assert_int_ne(mpt_cuda_probe(why, sizeof why), MPT_CUDA_NOT_BUILT);
    unsetenv("MPT_NCCL_LIBRARY");
}
END_TEST

/* The module's library report (mptrain info): for each CUDA library the version loaded at run time, then on the next
 * line the file it came from, which must exist (realpath of the loaded object); NCCL's too when it is loadable. */
START_TEST(test_library_files_are_reported) {
    mpt_cuda_module_state m;
    if (!mpt_cuda_module_status(&m)) return;
    char versions[8192];
    ck_assert(mpt_cuda_library_versions(versions, sizeof versions));
    static const char *const libs[] = {"CUDA runtime", "cuBLASLt", "cuDNN", "cuRAND", "NCCL"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "  %-20s", libs[i]);
        const char *line = strstr(versions, key);
        ck_assert_msg(line != NULL, "no %s line: %s", libs[i], versions);
        if (strcmp(libs[i], "NCCL") == 0 && (!mpt_cuda_nccl_available() || strstr(line, "not ") == line + 22))
            continue; /* not loadable here (its line says why), or not built in */
        const char *next = strchr(line, '\n');
        ck_assert_msg(next && strncmp(next + 1, "                      /", 23) == 0,
                      "%s: no file on the line after its version: %s", libs[i], versions);
        char path[4096];
        size_t n = strcspn(next + 23, "\n");
        ck_assert(n < sizeof path);
        memcpy(path, next + 23, n);
        path[n] = '\0';
        ck_assert_msg(access(path, F_OK) == 0, "%s: the file reported, %s, does not exist", libs[i], path);
    }
}
END_TEST

/* mpt_backend_cuda_create returns (a backend, or NULL with a reason) instead of looping: on a machine without a GPU
 * it must say why; on one with a GPU it must give a backend. The tcase's timeout bounds a loop. */
START_TEST(test_backend_create_returns) {
    char why[512];
    mpt_cuda_probe_result r = mpt_cuda_probe(why, sizeof why);
    mpt_backend *be = mpt_backend_cuda_create();
    if (r == MPT_CUDA_USABLE) {
        ck_assert_msg(be != NULL, "a usable GPU (%s), but no backend: %s", why, mpt_last_error());
        mpt_backend_free(&be);
    } else {
        ck_assert_msg(be == NULL, "no usable GPU (%s), but a backend was created", why);
        ck_assert_msg(strstr(mpt_last_error(), why) != NULL || strstr(mpt_last_error(), "CUDA") != NULL,
                      "the error does not say why: %s", mpt_last_error());
    }
}
END_TEST

START_TEST(test_skip_or_fail) {
    char why[512];
    mpt_cuda_probe_result r = mpt_cuda_probe(why, sizeof why);
    char again[512];
    ck_assert_int_eq(mpt_cuda_available(again, sizeof again), r == MPT_CUDA_USABLE);
    ck_assert_str_eq(why, again);
    ck_assert_msg(why[0] != '\0', "the probe gave no description");
    if (r == MPT_CUDA_USABLE) return; /* the cuda suite runs for real here */

    for (size_t k = 0; k < sizeof cuda_programs / sizeof cuda_programs[0]; k++) {
        const char *prog = cuda_programs[k];
        int rc = run_test_cuda(prog, NULL);
        if (r == MPT_CUDA_BROKEN) {
            ck_assert_msg(rc == 1, "%s: a broken CUDA setup (%s) must fail the cuda suite, exit %d: %s", prog, why, rc,
                          out_buf);
            ck_assert_msg(strstr(out_buf, "FAILED") && strstr(out_buf, why), "%s: the failure does not name the reason: %s",
                          prog, out_buf);
        } else {
            ck_assert_msg(rc == 77, "%s: no GPU (%s): the cuda suite must skip (77), exit %d: %s", prog, why, rc, out_buf);
            ck_assert_msg(strstr(out_buf, "skipped") && strstr(out_buf, why), "%s: the skip does not name the reason: %s",
                          prog, out_buf);
        }
        rc = run_test_cuda(prog, "1");
        ck_assert_msg(rc == 1, "%s: MPT_REQUIRE_CUDA=1 without a usable GPU must fail the cuda suite, exit %d: %s", prog,
                      rc, out_buf);
        ck_assert_msg(strstr(out_buf, "MPT_REQUIRE_CUDA=1") && strstr(out_buf, why),
                      "%s: the failure does not name MPT_REQUIRE_CUDA and the reason (%s): %s", prog, why, out_buf);
        rc = run_test_cuda(prog, "0"); /* only "1" requires a GPU */
        ck_assert_msg(rc == (r == MPT_CUDA_BROKEN ? 1 : 77), "%s: MPT_REQUIRE_CUDA=0: exit %d: %s", prog, rc, out_buf);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuda_require");
    TCase *tc = tcase_create("probe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_module_loads_where_built);
    tcase_add_test(tc, test_module_exports_only_its_entry);
    tcase_add_test(tc, test_module_loads_nccl_only_when_asked);
    tcase_add_test(tc, test_nccl_missing_is_reported);
    tcase_add_test(tc, test_library_files_are_reported);
    tcase_add_test(tc, test_backend_create_returns);
    tcase_add_test(tc, test_skip_or_fail);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
