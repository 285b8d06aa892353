/*
 * tests/hostile/test_hostile.c - hostile inputs and faults (issue 13): the mptrain command run as an attacker or
 * a careless user would, through fork/exec of the built binary ($MPT_BUILD_ROOT/tools/mptrain), each case a
 * regression test of one fix. Every rejection must be exit status 1 (2 for usage), one line of printable
 * text that names the file or flag, and no crash (no exit status >= 128: abort, signal, sanitizer).
 *
 *  - checkpoints: metadata numbers finite as doubles but not as FP32 (1e39), counters outside int32 or their
 *    range, impossible state (exp_avg_sq < 0, inv_scale != 1/scale, epoch 10^15, batch 10^9, precision
 *    disagreeing with the config, nesterov with adam), a FIFO, an 8 GiB sparse file, a tensor name holding
 *    a newline and terminal escapes; the writer refuses non-finite masters and keeps the previous file;
 *  - datasets: a FIFO, a directory and a symbolic link loop where an IDX file should be; headers that disagree
 *    (labels claiming 2^32-1 items, images claiming 65536 x 256 x 256, 32 x 32 images) are rejected before any
 *    payload is inflated;
 *  - outputs: metrics.csv, epochs.csv and stdout on /dev/full (a full disk) fail the run naming the file; a
 *    stopped and resumed run writes the straight run's CSVs (timings aside); --threads cannot change on resume;
 *  - small defects: the --device cuda and info messages, the progress bar within $COLUMNS, report.md under
 *    NVIDIA_TF32_OVERRIDE=0, the warning when most steps are skipped.
 *
 * A test of several cases checks them all and names each one that failed, so that each case is seen to fail
 * before its fix. "Before any payload is loaded" is measured, not inferred from the message: the child's peak
 * resident set (wait4's ru_maxrss) stays under half the payload behind the header. Every test fails against
 * the code before the fixes (tests/hostile/README.md: how each failed, and how to rerun that).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "datasets/idx.h"
#include "datasets/synthetic.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "harness.h"
#include "mpt_config.h"
#define TESTS_TMP_PREFIX "mpt_test_hostile"
#include "tmpdir.h"

/* ---- running the binary ------------------------------------------------------------------------------------ */

static char out_buf[1 << 17]; /* the last run's stdout, then its stderr */
static size_t out_len;
static char err_buf[1 << 14];  /* the last run's stderr alone */
static size_t err_len;
static long peak_rss_kib;      /* the last run's peak resident set (getrusage's ru_maxrss), KiB */

static const char *mptrain_path(void) {
    static char p[1024];
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(p, sizeof p, "%s/tools/mptrain", root ? root : ".");
    return p;
}

/* Runs mptrain with args (NULL-terminated, args[0] = "mptrain"); env: NULL-terminated "K=V" strings set in the
 * child (or NULL); stdout_file: where stdout goes instead of the capture (or NULL). stdout then stderr land in
 * out_buf, stderr alone in err_buf. The child is killed after 60 s. Returns the exit status, or 128 + signal. */
static int run_env(char *const *args, char *const *env, const char *stdout_file) {
    int fd[2];
    ck_assert(pipe(fd) == 0);
    FILE *errf = tmpfile();
    ck_assert(errf != NULL);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        dup2(fileno(errf), STDERR_FILENO);
        if (stdout_file) {
            int o = open(stdout_file, O_WRONLY);
            if (o < 0 || dup2(o, STDOUT_FILENO) < 0) _exit(126);
        }
        close(fd[0]);
        close(fd[1]);
        for (char *const *e = env; e && *e; e++) putenv(*e);
        alarm(60);
        execv(mptrain_path(), args);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd[0], out_buf + n, sizeof out_buf - 1 - n)) > 0) n += (size_t)k;
    char sink[4096];
    while (read(fd[0], sink, sizeof sink) > 0) {
    }
    close(fd[0]);
    int status = 0;
    struct rusage ru;
    ck_assert(wait4(pid, &status, 0, &ru) == pid);
    peak_rss_kib = ru.ru_maxrss;
    rewind(errf);
    err_len = fread(err_buf, 1, sizeof err_buf - 1, errf);
    err_buf[err_len] = '\0';
    fclose(errf);
    size_t k2 = err_len < sizeof out_buf - 1 - n ? err_len : sizeof out_buf - 1 - n;
    memcpy(out_buf + n, err_buf, k2);
    n += k2;
    out_buf[n] = '\0';
    out_len = n;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

#define MAX_ARGS 64
static int run_va(char *const *env, const char *stdout_file, const char *first, va_list ap) {
    char *args[MAX_ARGS];
    int n = 0;
    args[n++] = (char *)"mptrain";
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        ck_assert(n < MAX_ARGS - 1);
        args[n++] = (char *)a;
    }
    args[n] = NULL;
    return run_env(args, env, stdout_file);
}

static int run(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    int rc = run_va(NULL, NULL, first, ap);
    va_end(ap);
    return rc;
}

static int run_with_env(char *const *env, const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    int rc = run_va(env, NULL, first, ap);
    va_end(ap);
    return rc;
}

/* Why the last run was not a clean rejection, or NULL when it was: the exit status, exactly one line on stderr,
 * printable (no control byte but the final newline), and it contains `needle`. */
static const char *rejection_problem(int rc, int want_rc, const char *needle) {
    static char why[4096];
    if (rc != want_rc) {
        snprintf(why, sizeof why, "exit status %d, expected %d; stderr: %.1500s", rc, want_rc, err_buf);
        return why;
    }
    if (err_len == 0 || err_buf[err_len - 1] != '\n') {
        snprintf(why, sizeof why, "stderr does not end in a newline: %.1500s", err_buf);
        return why;
    }
    for (size_t i = 0; i + 1 < err_len; i++)
        if ((unsigned char)err_buf[i] < 0x20 || err_buf[i] == 0x7f) {
            snprintf(why, sizeof why, "byte 0x%02x at %zu in an error message (expected one printable line): %.1500s",
                     (unsigned char)err_buf[i], i, err_buf);
            return why;
        }
    if (strstr(err_buf, needle) == NULL) {
        snprintf(why, sizeof why, "expected '%s' in: %.1500s", needle, err_buf);
        return why;
    }
    return NULL;
}

static void assert_rejected(int rc, int want_rc, const char *needle) {
    const char *why = rejection_problem(rc, want_rc, needle);
    ck_assert_msg(why == NULL, "%s", why);
}

/* Why the last run loaded a payload of payload_mib MiB that its headers should have refused, or NULL: a
 * rejection from the headers alone keeps the peak resident set under half the payload (mptrain alone, on the
 * CPU, peaks near 10 MiB). */
static const char *payload_problem(int payload_mib) {
    static char why[256];
    if (peak_rss_kib < (long)payload_mib * 512) return NULL;
    snprintf(why, sizeof why, "peak resident set %ld KiB: the %d MiB payload was loaded before the headers were "
             "checked", peak_rss_kib, payload_mib);
    return why;
}

/* The cases of one test that were not rejected cleanly, each named, so that a failure lists them all (a test
 * of many cases must fail for each of them before its fix, not just for the first). */
typedef struct {
    char text[6144];
    size_t len;
    int n;
} case_problems;

static void note_case(case_problems *p, const char *name, const char *why) {
    if (!why) return;
    p->n++;
    int k = snprintf(p->text + p->len, sizeof p->text - p->len, "\n  [%s] %.300s", name, why);
    if (k > 0) p->len = p->len + (size_t)k < sizeof p->text ? p->len + (size_t)k : sizeof p->text - 1;
}

static void assert_no_problems(const case_problems *p, int n_cases) {
    ck_assert_msg(p->n == 0, "%d of %d cases not rejected cleanly:%s", p->n, n_cases, p->text);
}

/* ---- fixtures ------------------------------------------------------------------------------------------------ */

#define SYN_TRAIN 200
#define SYN_TEST 50

static const char *make_data(const char *name) {
    const char *dir = tmp_path(name);
    ck_assert(mkdir(dir, 0755) == 0);
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, 784, 10, 42), MPT_OK);
    ck_assert_msg(mpt_mnist_save(dir, &d, 0) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    return dir;
}

static void read_file(const char *path, char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    ck_assert(n >= 0 && fseek(f, 0, SEEK_SET) == 0);
    *buf = malloc((size_t)n + 1);
    ck_assert(*buf && fread(*buf, 1, (size_t)n, f) == (size_t)n);
    (*buf)[n] = '\0';
    *len = (size_t)n;
    fclose(f);
}

/* A checkpoint of a short adam mlp run (fp16, so the loss scaler is dynamic): dir/ckpt/checkpoint.safetensors. */
static const char *make_checkpoint(const char *data) {
    const char *out = tmp_path("ckpt");
    int rc = run("train", "--model", "mlp", "--precision", "fp16", "--epochs", "1", "--batch-size", "50", "--data",
                 data, "--out", out, "--progress", "off", "--max-steps", "2", NULL);
    ck_assert_msg(rc == 0, "training the fixture failed:\n%s", out_buf);
    return tmp_path("ckpt/checkpoint.safetensors");
}

/* Rewrites checkpoint src into dst with metadata JSON object `key`'s field `field` replaced by the JSON text
 * `value` (field NULL: the whole metadata value becomes `value` as a string), and tensor `tensor`'s element 0
 * (F32) set to `x` when tensor is not NULL. */
static void forge(const char *src, const char *dst, const char *key, const char *field, const char *value,
                  const char *tensor, float x) {
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(src, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    int n = mpt_checkpoint_n_tensors(c), nm = mpt_checkpoint_n_meta(c);
    mpt_checkpoint_tensor *t = calloc((size_t)n, sizeof *t);
    mpt_checkpoint_meta *m = calloc((size_t)nm, sizeof *m);
    char *repl = NULL;
    void **copies = calloc((size_t)n, sizeof *copies);
    int k = 0;
    for (int i = 0; i < n; i++) {
        t[i] = *mpt_checkpoint_tensor_at(c, i);
        size_t nb = (size_t)mpt_checkpoint_tensor_nbytes(&t[i]);
        copies[i] = malloc(nb ? nb : 1);
        memcpy(copies[i], t[i].data, nb);
        if (tensor && strcmp(t[i].name, tensor) == 0) memcpy(copies[i], &x, sizeof x);
        t[i].data = copies[i];
    }
    for (int i = 0; i < nm; i++) {
        mpt_checkpoint_meta e = mpt_checkpoint_meta_at(c, i);
        if (strcmp(e.key, "crc32") == 0) continue;
        if (key && strcmp(e.key, key) == 0) {
            if (field) {
                json_t *j = json_loads(e.value, 0, NULL);
                ck_assert(j != NULL);
                json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
                ck_assert_msg(v != NULL, "bad JSON value %s", value);
                json_object_set_new(j, field, v);
                repl = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
                json_decref(j);
                e.value = repl;
            } else {
                e.value = value;
            }
        }
        m[k++] = e;
    }
    ck_assert_msg(mpt_checkpoint_save(dst, t, n, m, k) == MPT_OK, "%s", mpt_last_error());
    for (int i = 0; i < n; i++) free(copies[i]);
    free(copies);
    free(repl);
    free(t);
    free(m);
    mpt_checkpoint_close(&c);
}

/* Resumes from ckpt (one more epoch): why that was not a clean rejection containing needle, or NULL. */
static const char *resume_problem(const char *data, const char *ckpt, const char *needle) {
    int rc = run("train", "--resume", ckpt, "--data", data, "--out", tmp_path("resumed"), "--progress", "off",
                 "--epochs", "2", "--device", "cpu", NULL);
    return rejection_problem(rc, 1, needle);
}

/* ---- checkpoints ----------------------------------------------------------------------------------------------- */

START_TEST(test_ckpt_metadata_numbers) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *ck = make_checkpoint(data);
    const char *bad = tmp_path("bad.safetensors");
    static const struct { const char *key, *field, *value, *needle; } cases[] = {
        {"scaler", "scale", "1e39", "not a finite FP32 value"},
        {"state", "inv_std", "1e39", "not a finite FP32 value"},
        {"scaler", "steps_taken", "-1", "steps_taken -1 is outside"},
        {"scaler", "steps_taken", "2147483647", "steps_taken 2147483647 is outside"},
        {"scaler", "steps_taken", "4294967296", "steps_taken 4294967296 is outside"},
        {"scaler", "steps_skipped", "2", "should equal the iteration"},
        {"scaler", "inv_scale", "0.25", "not 1/scale in FP32"},
        {"scaler", "found_inf", "1", "found_inf 1 is outside"},
        {"state", "epoch", "1000000000000000", "epoch 1000000000000000 is outside"},
        {"state", "batch", "1000000000", "not within this data"},
        {"state", "iteration", "3", "not within this data"},
        {"state", "best_test_acc", "2", "best_test_acc 2 is outside"},
    };
    case_problems p = {0};
    const int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.%s = %s", cases[i].key, cases[i].field, cases[i].value);
        forge(ck, bad, cases[i].key, cases[i].field, cases[i].value, NULL, 0.0f);
        note_case(&p, name, resume_problem(data, bad, cases[i].needle));
    }
    rm_tmpdir();
    assert_no_problems(&p, n);
}
END_TEST

START_TEST(test_ckpt_impossible_state) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *ck = make_checkpoint(data);
    const char *bad = tmp_path("bad.safetensors");
    case_problems p = {0};
    forge(ck, bad, NULL, NULL, NULL, "fc1.weight:exp_avg_sq", -1.0f);
    note_case(&p, "exp_avg_sq -1", resume_problem(data, bad, "never negative"));
    forge(ck, bad, "precision", NULL, "bf16", NULL, 0.0f);
    note_case(&p, "precision bf16 in an fp16 run",
              resume_problem(data, bad, "metadata \"precision\" is 'bf16' but the config says 'fp16'"));
    forge(ck, bad, "config", "nesterov", "\"on\"", NULL, 0.0f);
    note_case(&p, "nesterov with adam (resume)", resume_problem(data, bad, "--nesterov needs --optimizer sgd"));
    /* eval reads the same checks */
    int rc = run("eval", "--checkpoint", bad, "--data", data, "--device", "cpu", NULL);
    note_case(&p, "nesterov with adam (eval)", rejection_problem(rc, 1, "--nesterov needs --optimizer sgd"));
    /* found by tests/hostile/campaign.py: the generators' seeds disagreeing with the config's, and a validation
     * split holding every training image */
    forge(ck, bad, "rng", "seed", "\"abc\"", NULL, 0.0f);
    note_case(&p, "rng seed 'abc'", resume_problem(data, bad, "metadata \"rng\": seed is 'abc', but the config's"));
    forge(ck, bad, "state", "n_val", "1000", NULL, 0.0f);
    note_case(&p, "n_val 1000 of 200", resume_problem(data, bad, "n_val 1000 is outside [0, 199]"));
    rm_tmpdir();
    assert_no_problems(&p, 6);
}
END_TEST

/* The step counters of --nonfinite apply: a step applied with non-finite gradients is a taken step, counted again
 * in steps_nonfinite (engine/amp/scaler.h), so steps_taken + steps_skipped == iteration. A checkpoint of such a
 * run whose weights stayed finite resumes (the reader once demanded taken + skipped + nonfinite == iteration and
 * refused it); counters no run can reach are refused, naming the field. The writer's refusal of non-finite
 * weights is test_cli's test_nonfinite_apply. */
START_TEST(test_ckpt_nonfinite_counters) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *skip_ck = make_checkpoint(data);
    const char *out = tmp_path("apply");
    int rc = run("train", "--model", "mlp", "--precision", "fp32", "--nonfinite", "apply", "--epochs", "1",
                 "--batch-size", "50", "--data", data, "--out", out, "--progress", "off", "--max-steps", "2", NULL);
    ck_assert_msg(rc == 0, "training the --nonfinite apply fixture failed:\n%s", out_buf);
    const char *apply_ck = tmp_path("apply/checkpoint.safetensors");
    const char *bad = tmp_path("bad.safetensors"), *bad2 = tmp_path("bad2.safetensors");
    case_problems p = {0};
    forge(apply_ck, bad, "scaler", "steps_nonfinite", "1", NULL, 0.0f);
    rc = run("train", "--resume", bad, "--data", data, "--out", tmp_path("resumed"), "--progress", "off",
             "--epochs", "2", "--device", "cpu", NULL);
    static char why[2048];
    snprintf(why, sizeof why, "exit status %d, expected 0: %.1500s", rc, err_buf);
    note_case(&p, "apply, steps_nonfinite 1 of 2 taken (resumes)", rc == 0 ? NULL : why);
    forge(apply_ck, bad, "scaler", "steps_nonfinite", "3", NULL, 0.0f);
    note_case(&p, "apply, steps_nonfinite 3 of 2 taken", resume_problem(data, bad, "steps_nonfinite 3 is outside [0, 2]"));
    forge(apply_ck, bad2, "scaler", "steps_taken", "1", NULL, 0.0f);
    forge(bad2, bad, "scaler", "steps_skipped", "1", NULL, 0.0f);
    note_case(&p, "apply, steps_skipped 1", resume_problem(data, bad, "--nonfinite apply never skips a step"));
    forge(skip_ck, bad, "scaler", "steps_nonfinite", "1", NULL, 0.0f);
    note_case(&p, "skip, steps_nonfinite 1",
              resume_problem(data, bad, "--nonfinite skip never applies non-finite gradients to a step"));
    rm_tmpdir();
    assert_no_problems(&p, 4);
}
END_TEST

START_TEST(test_ckpt_hostile_name_is_one_escaped_line) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *ck = make_checkpoint(data);
    const char *bad = tmp_path("bad.safetensors");
    /* the checkpoint plus a tensor whose name forges a second output line in red */
    mpt_checkpoint *c = NULL;
    ck_assert(mpt_checkpoint_open(ck, NULL, 0, &c) == MPT_OK);
    int n = mpt_checkpoint_n_tensors(c), nm = mpt_checkpoint_n_meta(c), k = 0;
    mpt_checkpoint_tensor *t = calloc((size_t)n + 1, sizeof *t);
    mpt_checkpoint_meta *m = calloc((size_t)nm, sizeof *m);
    for (int i = 0; i < n; i++) t[i] = *mpt_checkpoint_tensor_at(c, i);
    for (int i = 0; i < nm; i++)
        if (strcmp(mpt_checkpoint_meta_at(c, i).key, "crc32") != 0) m[k++] = mpt_checkpoint_meta_at(c, i);
    float x = 1.0f;
    t[n] = (mpt_checkpoint_tensor){.name = "evil\n\033[31mmptrain eval: all good", .dtype = MPT_DTYPE_F32, .ndim = 1,
                                   .shape = {1}, .data = &x};
    ck_assert_msg(mpt_checkpoint_save(bad, t, n + 1, m, k) == MPT_OK, "%s", mpt_last_error());
    mpt_checkpoint_close(&c);
    free(t);
    free(m);
    int rc = run("eval", "--checkpoint", bad, "--data", data, NULL);
    assert_rejected(rc, 1, "evil\\x0a\\x1b[31mmptrain eval: all good");
    (void)ck;
    rm_tmpdir();
}
END_TEST

START_TEST(test_ckpt_special_files) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *fifo = tmp_path("fifo.safetensors");
    ck_assert(mkfifo(fifo, 0644) == 0);
    case_problems p = {0};
    int rc = run("eval", "--checkpoint", fifo, "--data", data, "--device", "cpu", NULL);
    note_case(&p, "a FIFO", rejection_problem(rc, 1, "expected a regular file, found a FIFO"));
    rc = run("eval", "--checkpoint", tmpdir, "--data", data, "--device", "cpu", NULL);
    note_case(&p, "a directory", rejection_problem(rc, 1, "found a directory"));
    rm_tmpdir();
    assert_no_problems(&p, 2);
}
END_TEST

START_TEST(test_ckpt_sparse_file) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *ck = make_checkpoint(data);
    int rc;
    /* a valid checkpoint grown to 8 GiB (sparse): rejected from its header, without reading the 8 GiB */
    const char *big = tmp_path("big.safetensors");
    char *buf;
    size_t len;
    read_file(ck, &buf, &len);
    FILE *f = fopen(big, "wb");
    ck_assert(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0);
    free(buf);
    ck_assert(truncate(big, (off_t)8 << 30) == 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = run("eval", "--checkpoint", big, "--data", data, "--device", "cpu", NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_rejected(rc, 1, "trailing bytes");
    ck_assert_msg(s < 5.0, "rejecting the 8 GiB sparse file took %.1f s (the data must not be read)", s);
    const char *why = payload_problem(512); /* under 256 MiB resident: not read */
    ck_assert_msg(why == NULL, "%s", why);
    rm_tmpdir();
}
END_TEST

/* A run whose masters become infinite (SGD with a weight decay of 1e38) must not overwrite the previous
 * checkpoint: the writer refuses, naming the tensor. */
START_TEST(test_ckpt_writer_refuses_nonfinite_masters) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *ck = make_checkpoint(data);
    char *before, *after;
    size_t lb, la;
    read_file(ck, &before, &lb);
    int rc = run("train", "--model", "mlp", "--optimizer", "sgd", "--lr", "1000", "--weight-decay", "1e38",
                 "--epochs", "1", "--batch-size", "50", "--max-steps", "2", "--data", data, "--out", tmp_path("ckpt"),
                 "--progress", "off", NULL);
    /* the run itself completes (its numbers are reported), but says the checkpoint was not written */
    ck_assert_msg(rc == 0, "exit status %d, expected 0; output:\n%s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "warning: checkpoint not written: ") != NULL, "no warning in:\n%s", out_buf);
    ck_assert_msg(strstr(out_buf, "not saved: tensor fc") != NULL, "expected the tensor named in:\n%s", out_buf);
    read_file(ck, &after, &la);
    ck_assert_msg(la == lb && memcmp(before, after, lb) == 0, "the previous checkpoint changed");
    free(before);
    free(after);
    rm_tmpdir();
}
END_TEST

/* ---- datasets --------------------------------------------------------------------------------------------------- */

/* Trains on data (CPU: no CUDA module mapped, so the peak RSS is mptrain's own): why that was not a clean
 * rejection containing needle, or NULL. */
static const char *train_problem(const char *data, const char *needle) {
    int rc = run("train", "--data", data, "--epochs", "1", "--out", tmp_path("out"), "--progress", "off", "--device",
                 "cpu", NULL);
    return rejection_problem(rc, 1, needle);
}

START_TEST(test_data_special_files) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *f = tmp_path("data/train-images-idx3-ubyte");
    case_problems p = {0};
    ck_assert(unlink(f) == 0 && mkfifo(f, 0644) == 0);
    note_case(&p, "a FIFO", train_problem(data, "expected an IDX file, found a FIFO"));
    ck_assert(unlink(f) == 0 && mkdir(f, 0755) == 0);
    note_case(&p, "a directory", train_problem(data, "expected an IDX file, found a directory"));
    ck_assert(rmdir(f) == 0 && symlink("loop-b", f) == 0 && symlink("train-images-idx3-ubyte",
                                                                     tmp_path("data/loop-b")) == 0);
    note_case(&p, "a symbolic link loop", train_problem(data, "symbolic link loop"));
    /* --data itself a regular file (found by tests/hostile/campaign.py: "not a directory (not a directory)") */
    note_case(&p, "--data a regular file", train_problem(tmp_path("data/t10k-labels-idx1-ubyte"),
                                                         "expected a directory with the four Fashion-MNIST IDX files, "
                                                         "found a regular file"));
    rm_tmpdir();
    assert_no_problems(&p, 4);
}
END_TEST

/* Writes a gzip IDX file: header (ndim, dims) then payload_bytes zero bytes. */
static void write_gz_idx(const char *path, int ndim, const uint32_t *dims, int64_t payload_bytes) {
    gzFile gz = gzopen(path, "wb1");
    ck_assert(gz != NULL);
    uint8_t hdr[16] = {0, 0, 8, (uint8_t)ndim};
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) hdr[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    ck_assert(gzwrite(gz, hdr, (unsigned)(4 + 4 * ndim)) == 4 + 4 * ndim);
    static uint8_t zeros[1 << 20];
    for (int64_t off = 0; off < payload_bytes; off += (int64_t)sizeof zeros) {
        unsigned k = (unsigned)(payload_bytes - off < (int64_t)sizeof zeros ? payload_bytes - off : (int64_t)sizeof zeros);
        ck_assert(gzwrite(gz, zeros, k) == (int)k);
    }
    ck_assert(gzclose(gz) == Z_OK);
}

START_TEST(test_data_headers_checked_before_payload) {
    make_tmpdir();
    const char *data = make_data("data");
    case_problems p = {0};
    /* labels claiming 2^32-1 items, with 256 MiB of payload behind the claim */
    ck_assert(unlink(tmp_path("data/train-labels-idx1-ubyte")) == 0);
    write_gz_idx(tmp_path("data/train-labels-idx1-ubyte.gz"), 1, (uint32_t[]){0xffffffffu}, (int64_t)256 << 20);
    note_case(&p, "labels claiming 2^32-1 items", train_problem(data, "200 images but"));
    note_case(&p, "labels claiming 2^32-1 items: memory", payload_problem(256));
    ck_assert(unlink(tmp_path("data/train-labels-idx1-ubyte.gz")) == 0);
    /* images claiming 65536 x 256 x 256 (4 GiB), 256 MiB of it there */
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, 784, 10, 42), MPT_OK);
    mpt_idx lab = {.ndim = 1, .dims = {SYN_TRAIN, 1, 1}, .nbytes = SYN_TRAIN, .data = d.train_labels};
    ck_assert(mpt_idx_save(tmp_path("data/train-labels-idx1-ubyte"), &lab, 0) == MPT_OK);
    mpt_mnist_free(&d);
    ck_assert(unlink(tmp_path("data/train-images-idx3-ubyte")) == 0);
    write_gz_idx(tmp_path("data/train-images-idx3-ubyte.gz"), 3, (uint32_t[]){65536, 256, 256}, (int64_t)256 << 20);
    note_case(&p, "images claiming 65536 x 256 x 256", train_problem(data, "65536 images but"));
    note_case(&p, "images claiming 65536 x 256 x 256: memory", payload_problem(256));
    rm_tmpdir();
    assert_no_problems(&p, 4);
}
END_TEST

/* 32 x 32 images are refused from the header: 64 MiB of them are never loaded (before the fix they were loaded,
 * then refused, and leaked). */
START_TEST(test_data_32x32_rejected_from_header) {
    make_tmpdir();
    const char *dir = tmp_path("d32");
    ck_assert(mkdir(dir, 0755) == 0);
    char p0[600], p1[600], p2[600], p3[600];
    snprintf(p0, sizeof p0, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(p1, sizeof p1, "%s/train-labels-idx1-ubyte.gz", dir);
    snprintf(p2, sizeof p2, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(p3, sizeof p3, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_gz_idx(p0, 3, (uint32_t[]){65536, 32, 32}, (int64_t)64 << 20);
    write_gz_idx(p1, 1, (uint32_t[]){65536}, 65536);
    write_gz_idx(p2, 3, (uint32_t[]){SYN_TEST, 32, 32}, SYN_TEST * 1024);
    write_gz_idx(p3, 1, (uint32_t[]){SYN_TEST}, SYN_TEST);
    case_problems p = {0};
    note_case(&p, "32 x 32 images", train_problem(dir, "images are 32 x 32, expected 28 x 28"));
    note_case(&p, "32 x 32 images: memory", payload_problem(64));
    rm_tmpdir();
    assert_no_problems(&p, 2);
}
END_TEST

/* ---- outputs ----------------------------------------------------------------------------------------------------- */

START_TEST(test_full_disk) {
    make_tmpdir();
    const char *data = make_data("data");
    static const char *files[] = {"metrics.csv", "epochs.csv", "summary.json"};
    case_problems p = {0};
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "full%d", i);
        const char *out = tmp_path(name);
        ck_assert(mkdir(out, 0755) == 0);
        snprintf(name, sizeof name, "full%d/%s", i, files[i]);
        ck_assert(symlink("/dev/full", tmp_path(name)) == 0);
        int rc = run("train", "--data", data, "--epochs", "1", "--batch-size", "50", "--out", out, "--progress", "off",
                     "--device", "cpu", NULL);
        char needle[128];
        snprintf(needle, sizeof needle, "%s: ", files[i]);
        const char *why = rejection_problem(rc, 1, needle);
        if (!why && !strstr(err_buf, "No space left on device")) why = "ENOSPC not named";
        note_case(&p, files[i], why);
    }
    /* stdout itself */
    char *args[] = {"mptrain", "info", NULL};
    int rc = run_env(args, NULL, "/dev/full");
    note_case(&p, "info > /dev/full", rejection_problem(rc, 1, "standard output"));
    /* compare's report.md, written as report.md.tmp and renamed (found by tests/hostile/campaign.py: its
     * reason read "Success") */
    const char *cmp = tmp_path("fullc");
    ck_assert(mkdir(cmp, 0755) == 0 && symlink("/dev/full", tmp_path("fullc/report.md.tmp")) == 0);
    rc = run("compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--precisions", "fp32,bf16", "--out",
             cmp, "--progress", "off", "--device", "cpu", "--telemetry", "0", NULL);
    const char *why = rejection_problem(rc, 1, "report.md: cannot write (");
    /* the reason is the failed write's, or none: not a stale errno ("Success"), nor fsync's EINVAL on a device */
    if (!why && !strstr(err_buf, "(No space left on device)") && !strstr(err_buf, "stdio kept no reason"))
        why = "the reason given is not the failed write's";
    note_case(&p, "compare's report.md", why);
    rm_tmpdir();
    assert_no_problems(&p, 5);
}
END_TEST

/* The CSV's lines with the columns in drop (0-based, -1 terminated) blanked. */
static char *csv_without(const char *path, const int *drop) {
    char *buf;
    size_t len;
    read_file(path, &buf, &len);
    char *out = calloc(len + 1, 1), *o = out;
    int col = 0, skip = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = buf[i];
        if (ch == ',' || ch == '\n') {
            *o++ = ch;
            col = ch == ',' ? col + 1 : 0;
            skip = 0;
            for (const int *d = drop; *d >= 0; d++) skip |= *d == col;
            continue;
        }
        if (!skip) *o++ = ch;
    }
    free(buf);
    return out;
}

START_TEST(test_resume_csvs_equal_straight_run) {
    make_tmpdir();
    const char *data = make_data("data");
    const char *common[] = {"--model", "mlp", "--precision", "fp16", "--batch-size", "16", "--data", data,
                            "--progress", "off", "--log-every", "3", "--inject-nonfinite", "5"};
    char *a1[MAX_ARGS], *a2[MAX_ARGS], *a3[MAX_ARGS];
    int n = 0;
    a1[n] = a2[n] = a3[n] = "mptrain", n++;
    a1[n] = a2[n] = "train", n++;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) a1[n] = a2[n] = (char *)common[i], n++;
    int n2 = n;
    a1[n++] = "--epochs", a1[n++] = "2", a1[n++] = "--out", a1[n++] = (char *)tmp_path("straight"), a1[n] = NULL;
    /* stopped at step 8 (inside epoch 1 of 13 batches: not a logged step) and at 20, then finished */
    a2[n2++] = "--epochs", a2[n2++] = "2", a2[n2++] = "--out", a2[n2++] = (char *)tmp_path("split");
    a2[n2++] = "--max-steps", a2[n2++] = "8", a2[n2] = NULL;
    ck_assert_msg(run_env(a1, NULL, NULL) == 0, "%s", out_buf);
    ck_assert_msg(run_env(a2, NULL, NULL) == 0, "%s", out_buf);
    a2[n2 - 1] = "20";
    a2[n2] = "--resume", a2[n2 + 1] = (char *)tmp_path("split/checkpoint.safetensors"), a2[n2 + 2] = NULL;
    ck_assert_msg(run_env(a2, NULL, NULL) == 0, "%s", out_buf);
    int m = 0;
    a3[m++] = "train", a3[m++] = "--resume", a3[m++] = (char *)tmp_path("split/checkpoint.safetensors");
    a3[m++] = "--data", a3[m++] = (char *)data, a3[m++] = "--out", a3[m++] = (char *)tmp_path("split");
    a3[m++] = "--progress", a3[m++] = "off", a3[m++] = "--log-every", a3[m++] = "3", a3[m] = NULL;
    char *a3full[MAX_ARGS];
    a3full[0] = "mptrain";
    for (int i = 0; i <= m; i++) a3full[i + 1] = a3[i];
    ck_assert_msg(run_env(a3full, NULL, NULL) == 0, "%s", out_buf);
    const int none[] = {-1}, timings[] = {7, 8, 9, -1};
    char *s1 = csv_without(tmp_path("straight/metrics.csv"), none), *s2 = csv_without(tmp_path("split/metrics.csv"), none);
    ck_assert_msg(strcmp(s1, s2) == 0, "metrics.csv differs:\nstraight:\n%s\nresumed:\n%s", s1, s2);
    free(s1);
    free(s2);
    s1 = csv_without(tmp_path("straight/epochs.csv"), timings);
    s2 = csv_without(tmp_path("split/epochs.csv"), timings);
    ck_assert_msg(strcmp(s1, s2) == 0, "epochs.csv differs (timings aside):\nstraight:\n%s\nresumed:\n%s", s1, s2);
    free(s1);
    free(s2);
    rm_tmpdir();
}
END_TEST

START_TEST(test_resume_threads_change_refused) {
    make_tmpdir();
    const char *data = make_data("data");
    int rc = run("train", "--data", data, "--epochs", "1", "--batch-size", "50", "--max-steps", "2", "--threads", "1",
                 "--out", tmp_path("t"), "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    rc = run("train", "--resume", tmp_path("t/checkpoint.safetensors"), "--data", data, "--threads", "2", "--out",
             tmp_path("t"), "--progress", "off", NULL);
    assert_rejected(rc, 2, "--threads 2 differs from the 1 thread(s)");
    rm_tmpdir();
}
END_TEST

/* ---- small defects ------------------------------------------------------------------------------------------------ */

/* Without a GPU, --device cuda is refused in one line that says why: a CUDA build's module finds no usable GPU;
 * a CPU-only build (-Dcuda=disabled, or no CUDA toolkit) says it has no CUDA backend and how to get one. */
START_TEST(test_device_cuda_message) {
    char msg[512];
    if (mpt_cuda_available(msg, sizeof msg)) return; /* a GPU: nothing to refuse */
    make_tmpdir();
    const char *data = make_data("data");
    int rc = run("train", "--device", "cuda", "--data", data, "--out", tmp_path("o"), NULL);
#ifdef MPT_HAVE_CUDA
    assert_rejected(rc, 1, "mptrain train: --device cuda: no usable GPU: ");
#else
    assert_rejected(rc, 1, "mptrain train: --device cuda: this mptrain was built without the CUDA backend");
    ck_assert_msg(strstr(err_buf, "install the CUDA toolkit"), "does not say how to get the backend:\n%s", err_buf);
#endif
    ck_assert_msg(strstr(strstr(out_buf, "--device cuda") + 1, "--device cuda") == NULL, "doubled prefix:\n%s", out_buf);
    rc = run("info", NULL);
    ck_assert_int_eq(rc, 0);
    /* the cuda backend's usable line says no and why, once: "usable:   no: <reason>" (or "no (not loadable)") */
    const char *u = strstr(out_buf, "        usable:   ");
    ck_assert_msg(u != NULL, "info has no usable line for the cuda backend:\n%s", out_buf);
    u += strlen("        usable:   ");
    int w = (int)strcspn(u, "\n");
    ck_assert_msg((strncmp(u, "no: ", 4) == 0 && w > 4) || strncmp(u, "no (not loadable)", 17) == 0,
                  "info's usable line does not say no and why: %.*s", w, u);
    ck_assert_msg(memmem(u, (size_t)w, "usable", 6) == NULL, "info repeats itself: usable:   %.*s", w, u);
#ifndef MPT_HAVE_CUDA
    ck_assert_msg(strstr(out_buf, "cuda  built:    no") && strstr(out_buf, "will train on the CPU backend"),
                  "a CPU-only build's info does not say the CUDA backend is not built:\n%s", out_buf);
#endif
    rm_tmpdir();
}
END_TEST

START_TEST(test_progress_bar_fits_terminal) {
    make_tmpdir();
    const char *data = make_data("data");
    char *env[] = {"COLUMNS=60", NULL};
    int rc = run_with_env(env, "train", "--data", data, "--epochs", "1", "--batch-size", "16", "--log-every", "1",
                          "--progress", "on", "--out", tmp_path("o"), NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    /* every redraw is "\r\033[K<line>": each line at most 59 columns, and the redraws share one line */
    int redraws = 0;
    for (char *p = strstr(out_buf, "\r\033[K"); p; p = strstr(p + 1, "\r\033[K")) {
        char *line = p + 4;
        size_t w = strcspn(line, "\r\n");
        if (w == 0) continue;
        if (strncmp(line, "epoch 1/1 ", 10) != 0 || memmem(line, w, "train loss", 10)) continue; /* the summary */
        redraws++;
        ck_assert_msg(w <= 59, "progress line of %zu columns in a 60-column terminal: %.*s", w, (int)w, line);
        ck_assert_msg(line[w] == '\r', "a progress update ends its line: %.*s", (int)w + 1, line);
    }
    ck_assert_msg(redraws >= 5, "%d progress redraws in:\n%s", redraws, out_buf);
    rm_tmpdir();
}
END_TEST

START_TEST(test_report_tf32_override) {
    make_tmpdir();
    const char *data = make_data("data");
    char *env[] = {"NVIDIA_TF32_OVERRIDE=0", NULL};
    int rc = run_with_env(env, "compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--precisions",
                          "fp32,tf32", "--out", tmp_path("c"), "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    char *rep;
    size_t len;
    read_file(tmp_path("c/report.md"), &rep, &len);
    ck_assert_msg(strstr(rep, "NVIDIA_TF32_OVERRIDE=0 was set") != NULL,
                  "report.md (%zu bytes) does not say NVIDIA_TF32_OVERRIDE=0 was set", len);
    const char *rounded = strstr(rep, "are rounded to TF32");
    ck_assert_msg(rounded == NULL, "report.md still says operands are rounded: ...%.200s",
                  rounded && rounded - rep > 100 ? rounded - 100 : rep);
    ck_assert(strstr(rep, "torch.backends.cudnn.allow_tf32") != NULL);
    ck_assert(strstr(rep, "torch.set_float32_matmul_precision") != NULL);
    free(rep);
    rm_tmpdir();
}
END_TEST

START_TEST(test_warns_when_steps_skipped) {
    make_tmpdir();
    const char *data = make_data("data");
    int rc = run("train", "--data", data, "--precision", "fp16", "--loss-scale", "static:16777216", "--epochs", "2",
                 "--batch-size", "8", "--lr", "0.01", "--out", tmp_path("o"), "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    ck_assert_msg(strstr(out_buf, "steps were skipped") != NULL && strstr(out_buf, "static:16777216") != NULL,
                  "no warning about the skipped steps:\n%s", out_buf);
    rm_tmpdir();
}
END_TEST

int main(void) {
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_ckpt_metadata_numbers);
    tcase_add_test(tc, test_ckpt_impossible_state);
    tcase_add_test(tc, test_ckpt_nonfinite_counters);
    tcase_add_test(tc, test_ckpt_hostile_name_is_one_escaped_line);
    tcase_add_test(tc, test_ckpt_special_files);
    TCase *sparse = tcase_create("sparse"); /* apart: before the fix it reads 8 GiB (CK_RUN_CASE=hostile skips it) */
    tcase_set_timeout(sparse, 240);
    tcase_add_test(sparse, test_ckpt_sparse_file);
    suite_add_tcase(s, sparse);
    tcase_add_test(tc, test_ckpt_writer_refuses_nonfinite_masters);
    tcase_add_test(tc, test_data_special_files);
    tcase_add_test(tc, test_data_headers_checked_before_payload);
    tcase_add_test(tc, test_data_32x32_rejected_from_header);
    tcase_add_test(tc, test_full_disk);
    tcase_add_test(tc, test_resume_csvs_equal_straight_run);
    tcase_add_test(tc, test_resume_threads_change_refused);
    tcase_add_test(tc, test_device_cuda_message);
    tcase_add_test(tc, test_progress_bar_fits_terminal);
    tcase_add_test(tc, test_report_tf32_override);
    tcase_add_test(tc, test_warns_when_steps_skipped);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
