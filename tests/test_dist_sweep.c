/*
 * tests/test_dist_sweep.c - `mpirun -np 2 mptrain compare` and `mpirun -np 2 mptrain lab` against the same
 * command in one process (meson suite 'mpi'; tools/sweep.c deals the runs out round-robin):
 *  - compare (one seed, four precisions; and --seeds 2): report.md, compare.json and the curves are the
 *    single-process files once the timing cells and the output path are masked, and every run trained
 *    bit-identically (metrics.csv byte for byte and the checkpoints' tensors and settings, but for each run's own
 *    run_id; epochs.csv but its timing columns);
 *  - lab noise --quick: index.md and the lesson's report.md the same, every run's metrics.csv byte for byte (but
 *    the run_id);
 *  - a run that fails on rank 1 (its metrics.csv cannot be created) fails the job: nonzero exit, one line naming
 *    rank 1, the run and the error, no report.md or compare.json (an earlier job's report is removed first), and
 *    the run's directory marked FAILED;
 *  - `train` under mpirun without --data-parallel is refused;
 *  - ranks started with another plan or setting (compare: --precisions, --lr, --seed, --model; lab: --quick) stop
 *    before any run, with exit 2 and one line naming the setting and both values (issue 36: a longer --precisions on
 *    rank 1 hung the job for good, the others wrote a report crediting rank 1's runs to rank 0's settings);
 *  - a rank stopped (SIGSTOP) while the other waits for its runs ends the job after --comm-timeout and the grace
 *    period, with a line naming rank 1 and what rank 0 waited for (it waited for good).
 * Expected values come from the single-process run, never from the code under test's own N = 2 output.
 * Skipped (exit 77) when Fashion-MNIST is not installed (Debian: dataset-fashion-mnist).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/checkpoint.h"
#include "harness.h"
#include "mpt_config.h"
#define TESTS_TMP_PREFIX "mpt_test_dist_sweep"
#include "tmpdir.h"
#include "mpirun.h"

/* s with every occurrence of `from` replaced by `to` (malloc'd; frees s). */
static char *replace_all(char *s, const char *from, const char *to) {
    size_t lf = strlen(from), lt = strlen(to), count = 0;
    for (const char *p = s; (p = strstr(p, from)); p += lf) count++;
    char *r = malloc(strlen(s) + count * lt + 1), *w = r;
    const char *p = s, *q;
    while ((q = strstr(p, from))) {
        memcpy(w, p, (size_t)(q - p)), w += q - p;
        memcpy(w, to, lt), w += lt;
        p = q + lf;
    }
    strcpy(w, p);
    free(s);
    return r;
}

/* A Markdown file with the output directory written as OUT, every cell of a timing column (header "s/epoch",
 * "samples/s" or "time") written as T, and the "Machine load:" line (the load average while the runs trained)
 * written as LOAD. */
static char *masked_md(const char *path, const char *out) {
    char *s = slurp(path);
    ck_assert_msg(s != NULL, "%s: %s", path, strerror(errno));
    s = replace_all(s, out, "OUT");
    size_t cap = strlen(s) + 1;
    char *r = malloc(cap * 2), *w = r;
    int mask[64] = {0}, in_table = 0;
    for (char *line = s; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (line[0] != '|') in_table = 0;
        if (strncmp(line, "Machine load:", 13) == 0) {
            w += sprintf(w, "LOAD");
        } else if (line[0] == '|' && !in_table) { /* a header row: which columns are timings */
            in_table = 1;
            memset(mask, 0, sizeof mask);
            int col = 0;
            for (size_t i = 1; i < len && col < 64; col++) {
                size_t j = i;
                while (j < len && line[j] != '|') j++;
                char cell[256];
                snprintf(cell, sizeof cell, "%.*s", (int)(j - i), line + i);
                mask[col] = strstr(cell, "s/epoch") || strstr(cell, "samples/s") || strstr(cell, "time");
                i = j + 1;
            }
            memcpy(w, line, len), w += len;
        } else if (line[0] == '|') {
            int col = 0;
            *w++ = '|';
            for (size_t i = 1; i < len; col++) {
                size_t j = i;
                while (j < len && line[j] != '|') j++;
                if (col < 64 && mask[col] && strncmp(line + i, "---", 3) != 0) w += sprintf(w, " T ");
                else memcpy(w, line + i, j - i), w += j - i;
                if (j < len) *w++ = '|';
                i = j + 1;
            }
        } else {
            memcpy(w, line, len), w += len;
        }
        if (end) *w++ = '\n';
        line = end ? end + 1 : line + len;
    }
    *w = 0;
    free(s);
    return r;
}

static void expect_same_md(const char *a, const char *out_a, const char *b, const char *out_b) {
    char *x = masked_md(a, out_a), *y = masked_md(b, out_b);
    ck_assert_msg(strcmp(x, y) == 0, "%s and %s differ beyond timings:\n---\n%s\n---\n%s", a, b, x, y);
    free(x);
    free(y);
}

/* JSON without its timing keys, with the output directory written as OUT in every string. */
static void scrub_json(json_t *j, const char *out) {
    static const char *const timing[] = {"time_per_epoch_s", "time_per_epoch_cpu_s", "samples_per_s", "epoch_s"};
    if (json_is_object(j)) {
        for (size_t i = 0; i < sizeof timing / sizeof timing[0]; i++) json_object_del(j, timing[i]);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (json_is_string(v)) {
                char *s = replace_all(strdup(json_string_value(v)), out, "OUT");
                json_object_set_new(j, k, json_string(s));
                free(s);
            } else {
                scrub_json(v, out);
            }
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) scrub_json(v, out);
    }
}

static void expect_same_json(const char *a, const char *out_a, const char *b, const char *out_b) {
    json_error_t e;
    json_t *x = json_load_file(a, 0, &e), *y = json_load_file(b, 0, &e);
    ck_assert_msg(x && y, "cannot read %s or %s: %s", a, b, e.text);
    scrub_json(x, out_a);
    scrub_json(y, out_b);
    char *sx = json_dumps(x, JSON_SORT_KEYS | JSON_INDENT(1)), *sy = json_dumps(y, JSON_SORT_KEYS | JSON_INDENT(1));
    ck_assert_msg(strcmp(sx, sy) == 0, "%s and %s differ beyond timings and paths", a, b);
    free(sx);
    free(sy);
    json_decref(x);
    json_decref(y);
}

static void expect_same_bytes(const char *a, const char *b) {
    char *x = slurp(a), *y = slurp(b);
    ck_assert_msg(x && y, "cannot read %s or %s", a, b);
    ck_assert_msg(strcmp(x, y) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* epochs.csv without its timing columns (train_s, eval_s, samples_per_s: the 8th to 10th). */
static void expect_same_epochs(const char *a, const char *b) {
    char *x = slurp(a), *y = slurp(b);
    ck_assert_msg(x && y, "cannot read %s or %s", a, b);
    ck_assert_msg(strncmp(x, "epoch,step,train_loss,test_loss,test_acc,val_loss,val_acc,train_s,eval_s,samples_per_s,",
                          87) == 0, "%s: unexpected columns", a);
    char *sx = NULL, *sy = NULL;
    for (char *lx = strtok_r(x, "\n", &sx), *ly = strtok_r(y, "\n", &sy); lx || ly;
         lx = strtok_r(NULL, "\n", &sx), ly = strtok_r(NULL, "\n", &sy)) {
        ck_assert_msg(lx && ly, "%s and %s have different row counts", a, b);
        char *fx = NULL, *fy = NULL;
        int col = 0;
        for (char *cx = strtok_r(lx, ",", &fx), *cy = strtok_r(ly, ",", &fy); cx || cy;
             cx = strtok_r(NULL, ",", &fx), cy = strtok_r(NULL, ",", &fy), col++) {
            ck_assert_msg(cx && cy, "%s and %s: different column counts", a, b);
            if (col < 7 || (col > 9 && col != 12)) /* nor run_id: two jobs, two runs */
                ck_assert_msg(strcmp(cx, cy) == 0, "%s column %d: %s vs %s", a, col + 1, cx, cy);
        }
    }
    free(x);
    free(y);
}

/* A CSV's text with the last column of every line (run_id: each job's runs have their own) cut off. */
static char *without_last_column(char *text) {
    char *o = text;
    for (char *line = text, *next; *line; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        char *comma = NULL;
        for (char *c = line; c < next; c++)
            if (*c == ',') comma = c;
        size_t keep = comma ? (size_t)(comma - line) : (size_t)(next - line);
        memmove(o, line, keep);
        o += keep;
        if (next[-1] == '\n') *o++ = '\n';
    }
    *o = '\0';
    return text;
}

/* Two checkpoints with the same tensors byte for byte and the same metadata, but for the checksum and the run's
 * id in "state" (each job's runs have their own). */
static void expect_same_checkpoint(const char *a, const char *b) {
    mpt_checkpoint *x = NULL, *y = NULL;
    ck_assert_msg(mpt_checkpoint_open(a, NULL, 0, &x) == MPT_OK, "%s", mpt_last_error());
    ck_assert_msg(mpt_checkpoint_open(b, NULL, 0, &y) == MPT_OK, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_checkpoint_n_tensors(x), mpt_checkpoint_n_tensors(y));
    for (int i = 0; i < mpt_checkpoint_n_tensors(x); i++) {
        const mpt_checkpoint_tensor *tx = mpt_checkpoint_tensor_at(x, i), *ty = mpt_checkpoint_find(y, tx->name);
        ck_assert_msg(ty != NULL, "%s lacks %s", b, tx->name);
        int64_t n = mpt_checkpoint_tensor_nbytes(tx);
        ck_assert_msg(n == mpt_checkpoint_tensor_nbytes(ty) && memcmp(tx->data, ty->data, (size_t)n) == 0,
                      "%s and %s: tensor %s differs", a, b, tx->name);
    }
    ck_assert_int_eq(mpt_checkpoint_n_meta(x), mpt_checkpoint_n_meta(y));
    for (int i = 0; i < mpt_checkpoint_n_meta(x); i++) {
        mpt_checkpoint_meta m = mpt_checkpoint_meta_at(x, i);
        const char *other = mpt_checkpoint_meta_get(y, m.key);
        ck_assert_msg(other != NULL, "%s lacks metadata %s", b, m.key);
        if (strcmp(m.key, "crc32") == 0) continue;
        if (strcmp(m.key, "state") == 0) {
            json_t *sx = json_loads(m.value, 0, NULL), *sy = json_loads(other, 0, NULL);
            ck_assert(sx && sy);
            json_object_del(sx, "run_id");
            json_object_del(sy, "run_id");
            ck_assert_msg(json_equal(sx, sy), "%s and %s: state differs", a, b);
            json_decref(sx);
            json_decref(sy);
            continue;
        }
        ck_assert_msg(strcmp(m.value, other) == 0, "%s and %s: metadata %s differs", a, b, m.key);
    }
    mpt_checkpoint_close(&x);
    mpt_checkpoint_close(&y);
}

/* Every run trained the same way: metrics.csv byte for byte (run ids aside), epochs.csv but its timings, the
 * checkpoints' tensors and settings. */
static void expect_same_run(const char *dir_a, const char *dir_b) {
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/metrics.csv", dir_a);
    snprintf(b, sizeof b, "%s/metrics.csv", dir_b);
    char *x = slurp(a), *y = slurp(b);
    ck_assert_msg(x && y, "cannot read %s or %s", a, b);
    ck_assert_msg(strcmp(without_last_column(x), without_last_column(y)) == 0, "%s and %s differ", a, b);
    free(x);
    free(y);
    snprintf(a, sizeof a, "%s/epochs.csv", dir_a);
    snprintf(b, sizeof b, "%s/epochs.csv", dir_b);
    expect_same_epochs(a, b);
    snprintf(a, sizeof a, "%s/checkpoint.safetensors", dir_a);
    snprintf(b, sizeof b, "%s/checkpoint.safetensors", dir_b);
    expect_same_checkpoint(a, b);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* --cpu-kernels emulate: compare's default, auto, keeps the kernel set a timing chose, and the one- and two-rank jobs
 * are compared bit for bit */
#define COMMON "--model", "mlp", "--epochs", "1", "--limit-train", "512", "--limit-test", "256", "--device", "cpu", \
               "--threads", "1", "--data", MPT_DEFAULT_DATA_DIR, "--progress", "off", "--cpu-kernels", "emulate"

START_TEST(compare_two_ranks_write_the_single_process_tables) {
    make_tmpdir();
    char *one = strdup(tmp_path("one")), *two = strdup(tmp_path("two"));
    const char *a1[] = {"compare", COMMON, "--precisions", "fp32,tf32,fp16,bf16", "--out", one, NULL};
    const char *a2[] = {"compare", COMMON, "--precisions", "fp32,tf32,fp16,bf16", "--out", two, NULL};
    ck_assert_int_eq(run_mptrain(0, a1), 0);
    ck_assert_msg(run_mptrain(2, a2) == 0, "mpirun -np 2 mptrain compare failed (see %s)", tmp_path("log"));
    ck_assert(log_contains("rank 1 of 2: trains run(s) 2, 4 of 4 (round-robin)"));
    expect_same_md(tmp_path("one/report.md"), one, tmp_path("two/report.md"), two);
    expect_same_json(tmp_path("one/compare.json"), one, tmp_path("two/compare.json"), two);
    const char *precs[] = {"fp32", "tf32", "fp16", "bf16"};
    for (int p = 0; p < 4; p++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", one, precs[p]);
        snprintf(b, sizeof b, "%s/%s", two, precs[p]);
        expect_same_run(a, b);
    }
    free(one);
    free(two);
    rm_tmpdir();
}
END_TEST

START_TEST(compare_seeds_two_ranks_write_the_single_process_statistics) {
    make_tmpdir();
    char *one = strdup(tmp_path("one")), *two = strdup(tmp_path("two"));
    const char *a1[] = {"compare", COMMON, "--precisions", "fp32,bf16", "--seeds", "2", "--out", one, NULL};
    const char *a2[] = {"compare", COMMON, "--precisions", "fp32,bf16", "--seeds", "2", "--out", two, NULL};
    ck_assert_int_eq(run_mptrain(0, a1), 0);
    ck_assert_msg(run_mptrain(2, a2) == 0, "mpirun -np 2 mptrain compare --seeds 2 failed (see %s)", tmp_path("log"));
    expect_same_md(tmp_path("one/report.md"), one, tmp_path("two/report.md"), two);
    expect_same_json(tmp_path("one/compare.json"), one, tmp_path("two/compare.json"), two);
    const char *curves[] = {"fp32_steps", "fp32_epochs", "bf16_steps", "bf16_epochs"};
    for (int i = 0; i < 4; i++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/curves/%s.csv", one, curves[i]);
        snprintf(b, sizeof b, "%s/curves/%s.csv", two, curves[i]);
        expect_same_bytes(a, b);
    }
    const char *runs[] = {"seed-0/fp32", "seed-0/bf16", "seed-1/fp32", "seed-1/bf16"};
    for (int i = 0; i < 4; i++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", one, runs[i]);
        snprintf(b, sizeof b, "%s/%s", two, runs[i]);
        expect_same_run(a, b);
    }
    free(one);
    free(two);
    rm_tmpdir();
}
END_TEST

START_TEST(lab_lesson_two_ranks_writes_the_single_process_report) {
    make_tmpdir();
    char *one = strdup(tmp_path("one")), *two = strdup(tmp_path("two"));
    const char *a1[] = {"lab", "--quick", "--threads", "1", "--data", MPT_DEFAULT_DATA_DIR, "--out", one, "noise",
                        "--param", "seeds=2", NULL};
    const char *a2[] = {"lab", "--quick", "--threads", "1", "--data", MPT_DEFAULT_DATA_DIR, "--out", two, "noise",
                        "--param", "seeds=2", NULL};
    ck_assert_int_eq(run_mptrain(0, a1), 0);
    ck_assert_msg(run_mptrain(2, a2) == 0, "mpirun -np 2 mptrain lab noise failed (see %s)", tmp_path("log"));
    ck_assert(log_contains("[rank 1: fp16-seed0]")); /* run 2 of the lesson's six trained on rank 1 */
    expect_same_md(tmp_path("one/index.md"), one, tmp_path("two/index.md"), two);
    expect_same_md(tmp_path("one/noise/report.md"), one, tmp_path("two/noise/report.md"), two);
    const char *precs[] = {"fp32", "fp16", "bf16"};
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 3; p++) {
            char a[600], b[600];
            snprintf(a, sizeof a, "%s/noise/%s-seed%d", one, precs[p], k);
            snprintf(b, sizeof b, "%s/noise/%s-seed%d", two, precs[p], k);
            expect_same_run(a, b);
        }
    free(one);
    free(two);
    rm_tmpdir();
}
END_TEST

START_TEST(a_run_failing_on_rank_1_fails_the_job_and_leaves_no_result) {
    make_tmpdir();
    char *out = strdup(tmp_path("out"));
    /* run 2 (fp16, rank 1) cannot create its metrics.csv: a directory holds the name */
    ck_assert_int_eq(mkdir(out, 0755), 0);
    ck_assert_int_eq(mkdir(tmp_path("out/fp16"), 0755), 0);
    ck_assert_int_eq(mkdir(tmp_path("out/fp16/metrics.csv"), 0755), 0);
    FILE *old = fopen(tmp_path("out/report.md"), "w"); /* an earlier job's report */
    ck_assert(old != NULL);
    fputs("# an earlier report\n", old);
    fclose(old);
    const char *a[] = {"compare", COMMON, "--precisions", "fp32,fp16", "--out", out, NULL};
    ck_assert_int_ne(run_mptrain(2, a), 0);
    char want[800];
    snprintf(want, sizeof want, "mptrain compare: rank 1 of 2, run 2 of 2 'fp16' (%s/fp16): %s/fp16/metrics.csv: "
                                "a directory in place of an output, expected a regular file; remove it or choose "
                                "another --out\n", out, out);
    ck_assert_msg(log_contains(want), "the log (%s) lacks the line: %s", tmp_path("log"), want);
    ck_assert(!exists(tmp_path("out/report.md")));
    ck_assert(!exists(tmp_path("out/compare.json")));
    ck_assert(!exists(tmp_path("out/convergence.png")));
    char *mark = slurp(tmp_path("out/fp16/FAILED"));
    ck_assert_msg(mark && strstr(mark, "rank 1: ") && strstr(mark, "a directory in place"), "FAILED mark: %s",
                  mark ? mark : "(none)");
    free(mark);
    free(out);
    rm_tmpdir();
}
END_TEST

START_TEST(train_under_mpirun_needs_data_parallel) {
    make_tmpdir();
    const char *a[] = {"train", COMMON, "--max-steps", "2", "--out", tmp_path("o"), NULL};
    ck_assert_int_ne(run_mptrain(2, a), 0);
    ck_assert_msg(log_lines_starting("mptrain train: started as one of 2 MPI ranks without --data-parallel") == 1,
                  "not said once, by rank 0 (see %s)", tmp_path("log"));
    ck_assert(!exists(tmp_path("o/metrics.csv")));
    rm_tmpdir();
}
END_TEST

START_TEST(ranks_with_another_plan_stop_with_one_line) {
    make_tmpdir();
    const char *out = tmp_path("o");
    static const struct { const char *flag, *value, *want; } cases[] = {
        {"--precisions", "fp32,bf16,fp16", "the ranks disagree on --precisions: rank 1: fp32,bf16,fp16, rank 0: fp32,bf16 "},
        {"--lr", "0.1", "the ranks disagree on --lr: rank 1: 0.1, rank 0: 0.001 "},
        {"--seed", "3", "the ranks disagree on --seed: rank 1: 3, rank 0: 0 "},
        {"--model", "lenet5", "the ranks disagree on --model: rank 1: lenet5, rank 0: mlp "},
    };
    char failures[4096] = "";
    size_t fl = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *a0[] = {"compare", COMMON, "--max-steps", "2", "--telemetry", "0", "--precisions", "fp32,bf16",
                            "--out", out, NULL};
        const char *a1[] = {"compare", COMMON, "--max-steps", "2", "--telemetry", "0", "--precisions", "fp32,bf16",
                            "--out", out, cases[i].flag, cases[i].value, NULL};
        double secs = 0.0;
        int rc = run_two_commands(a0, a1, 120, &secs);
        char want[256];
        snprintf(want, sizeof want, "mptrain compare: %s", cases[i].want);
        const char *why = one_line_stop_problem(rc, secs, want);
        if (!why && (exists(tmp_path("o/fp32/metrics.csv")) || exists(tmp_path("o/report.md")))) why = "a run trained";
        if (why) note_failure(failures, sizeof failures, &fl, cases[i].flag, why, rc, secs);
    }
    /* lab: the lessons' sizes (--quick) on rank 0 only */
    const char *l0[] = {"lab", "--quick", "--device", "cpu", "--threads", "1", "--data", MPT_DEFAULT_DATA_DIR, "--out",
                        out, "noise", NULL};
    const char *l1[] = {"lab", "--device", "cpu", "--threads", "1", "--data", MPT_DEFAULT_DATA_DIR, "--out", out, "noise",
                        NULL};
    double secs = 0.0;
    int rc = run_two_commands(l0, l1, 120, &secs);
    const char *why =
        one_line_stop_problem(rc, secs, "mptrain lab: the ranks disagree on --quick: rank 1: off, rank 0: on ");
    if (why) note_failure(failures, sizeof failures, &fl, "lab --quick", why, rc, secs);
    ck_assert_msg(fl == 0, "ranks with another plan:%s", failures);
    rm_tmpdir();
}
END_TEST

/* A compare job that cannot start keeps an earlier job's results in --out: rank 1 given a --data that does not exist,
 * and ranks that disagree on --lr. Rank 0 removed the earlier report.md (and runs) before the ranks had agreed to
 * start; it now does so once every rank is ready and agrees (tools/sweep.h: mpt_sweep.start). */
START_TEST(a_compare_that_cannot_start_keeps_the_earlier_results) {
    make_tmpdir();
    const char *out = tmp_path("o");
    ck_assert_int_eq(mkdir(out, 0755), 0);
    static const char earlier[] = "# an earlier report\n";
    char failures[4096] = "";
    size_t fl = 0;
    static const struct { const char *flag, *value; int want_rc; } cases[] = {
        {"--data", NULL, 1}, /* a directory that does not exist, on rank 1 */
        {"--lr", "0.1", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *old = fopen(tmp_path("o/report.md"), "w");
        ck_assert(old != NULL);
        fputs(earlier, old);
        ck_assert_int_eq(fclose(old), 0);
        const char *value = cases[i].value ? cases[i].value : tmp_path("no-such-data");
        const char *a0[] = {"compare", COMMON, "--max-steps", "2", "--telemetry", "0", "--precisions", "fp32,bf16",
                            "--out", out, NULL};
        const char *a1[] = {"compare", COMMON, "--max-steps", "2", "--telemetry", "0", "--precisions", "fp32,bf16",
                            "--out", out, cases[i].flag, value, NULL};
        double secs = 0.0;
        int rc = run_two_commands(a0, a1, 120, &secs);
        char *report = slurp(tmp_path("o/report.md"));
        const char *why = rc != cases[i].want_rc                 ? "another exit status"
                          : !report || strcmp(report, earlier) != 0 ? "the earlier report.md was removed or changed"
                          : exists(tmp_path("o/fp32/metrics.csv"))   ? "a run trained"
                                                                     : NULL;
        free(report);
        if (why) note_failure(failures, sizeof failures, &fl, cases[i].flag, why, rc, secs);
    }
    ck_assert_msg(fl == 0, "a compare that cannot start:%s", failures);
    rm_tmpdir();
}
END_TEST

/* A compare whose rank 1 is stopped while rank 0, its own runs done, waits for rank 1's: the wait is bounded. With
 * --comm-timeout 3 rank 0 asks rank 1 where it is after 3 s, gets no answer within the grace period (10 s), names
 * rank 1 and what it waited for, and ends the job. */
START_TEST(a_stopped_rank_ends_a_compare_within_comm_timeout) {
    make_tmpdir();
    char *out = strdup(tmp_path("o"));
    char exe[1024], log[600];
    mptrain_path(exe, sizeof exe);
    snprintf(log, sizeof log, "%s/log", tmpdir);
    /* rank 0 trains fp32 for 2 steps; rank 1 trains bf16 for long enough to be stopped mid-run */
    const char *argv[] = {"timeout", "120", "mpirun", "--oversubscribe", "-np", "2", exe, "compare", COMMON,
                          "--epochs", "40", "--telemetry", "0", "--precisions", "fp32,bf16", "--comm-timeout", "3",
                          "--out", out, NULL};
    /* rank 1 has started its run once it holds the run's directory (its lock file): its CSVs are published with
     * the checkpoint at the end of the run, too late (rank 1 then finished training before it was stopped) */
    char lock[700];
    snprintf(lock, sizeof lock, "%s/bf16/.mptrain.lock", out);
    double secs = 0.0;
    int rc = run_stopping_rank_1(argv, lock, out, 0, &secs);
    ck_assert_msg(rc != 124, "the job hung with rank 1 stopped: still running after 120 s (see %s)", log);
    ck_assert_msg(rc != 0, "exit 0 with rank 1 stopped (see %s)", log);
    ck_assert_msg(log_contains("mptrain: rank 0 of 2: waiting for the end of every rank's runs") &&
                      log_contains("rank 1 did not answer within 10 s (stopped, hung or dead)"),
                  "no line naming rank 1 and what rank 0 waited for (see %s)", log);
    ck_assert_msg(secs < 100.0, "the job took %.1f s", secs);
    free(out);
    rm_tmpdir();
}
END_TEST

int main(void) {
    if (skip_without_fashion_mnist("test_dist_sweep")) return 77;
    Suite *s = suite_create("dist_sweep");
    TCase *tc = tcase_create("mpirun -np 2 mptrain compare / lab");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, compare_two_ranks_write_the_single_process_tables);
    tcase_add_test(tc, compare_seeds_two_ranks_write_the_single_process_statistics);
    tcase_add_test(tc, lab_lesson_two_ranks_writes_the_single_process_report);
    tcase_add_test(tc, a_run_failing_on_rank_1_fails_the_job_and_leaves_no_result);
    tcase_add_test(tc, train_under_mpirun_needs_data_parallel);
    tcase_add_test(tc, ranks_with_another_plan_stop_with_one_line);
    tcase_add_test(tc, a_compare_that_cannot_start_keeps_the_earlier_results);
    tcase_add_test(tc, a_stopped_rank_ends_a_compare_within_comm_timeout);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
