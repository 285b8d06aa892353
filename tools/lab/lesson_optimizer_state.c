/*
 * tools/lab/lesson_optimizer_state.c - lesson `optimizer-state`: Adam's moments in FP32, BF16 and FP16.
 *
 * Plan (bf16 training with FP32 master weights, Adam; 1 and 3 at seed 0, 2 over seeds):
 *   1. the mechanism, over the first two steps: the same training stopped after one step and after two
 *      (--max-steps 1 and 2) with the moments m (exp_avg) and v (exp_avg_sq) stored in FP32, BF16 and FP16
 *      (--optimizer-state). From the one-step run's checkpoint: of the entries whose stored m is nonzero (their
 *      first gradient was not zero), the share whose stored v is 0. From the runs' FP32 masters: the size of the
 *      second update |w2 - w1| over the same entries (median, largest, and the share above 10 lr). Adam computes
 *      each step's m and v in FP32 and stores them rounded (engine/numerics.h, mpt_elem_adam): the first step
 *      still sees the exact v = 0.001 g^2 and moves every weight by about lr; the stored v is what the next step
 *      starts from. With the stored v at 0, the next step's v is just 0.001 g2^2, and where this step's gradient
 *      g2 is 0 or small (a unit that a ReLU switched off for this batch) the update lr * m_hat / (sqrt(v_hat) + eps)
 *      divides the remembered m by eps = 1e-8 instead of by the remembered sqrt(v): updates of lr * m_hat / eps.
 *   2. the outcome: the three runs trained to the end (seed 0: loss logged every step): final test accuracy, the
 *      last epoch's training loss, the steps skipped (a step whose gradients are inf/NaN is skipped) and the training
 *      loss per step (log axis). The three whole runs also train with seeds 1..N-1 (`seeds`; independent runs, one
 *      batch), and the accuracy's paired differences BF16 - FP32 and FP16 - FP32 moments give 95% t intervals and
 *      verdicts against the margin of `mptrain compare --seeds` (tools/stats.h): one seed's gap is inside the
 *      seed-to-seed noise (the noise lesson), so it cannot be attributed to the storage.
 *   3. the sequence, measured step by step where the FP16-moment run failed: the same run stopped after each of
 *      its first steps (--max-steps k, up to its first skipped step): after which step the stored state first
 *      held inf/NaN (the checkpoint writer refuses it and names the tensor), after which a master weight did (the
 *      run's final masters), the gradients implied by consecutive stored m (g_k = (m_k - beta1 m_{k-1}) /
 *      (1 - beta1), within FP16's rounding of m), and from the whole run's metrics.csv the first skipped step and
 *      whether the loss stayed finite. The report says the sequence as measured (tools/sentences.h).
 * v = (1 - beta2) g^2 = 0.001 g^2 after the first step is below FP16's smallest subnormal 2^-24 (6.0e-8) for
 * |g| < 7.7e-3 and rounds to 0 for 0.001 g^2 <= 2^-25, |g| <= 5.5e-3 (computed in the report from beta2); BF16 has
 * FP32's exponent range.
 * Criterion: the effect (FP16 moments hurt, BF16 moments do not) is observed when, over the seeds, FP16 - FP32
 * moments' verdict is worse (the interval below minus the margin) and BF16 - FP32 moments' is equivalent (the
 * interval within plus and minus the margin: two one-sided tests). "Not worse" would not do for BF16: an interval
 * too wide to resolve anything is not worse either. Equivalence within the default 0.3 pp needs seeds: at the --quick
 * size the BF16 - FP32 differences have an sd of about 0.23 pp (16 seeds, 2026-11-28), and the first 7 of them
 * were the fewest that decided; hence 10 seeds by default (interval [-0.06, 0.20] pp), at about 0.2 s of CPU time
 * per run. A build without GSL has no interval, so there the conclusion is "not observed" and says why.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/numerics.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"

#define N_STATES 3
static const char *const states[N_STATES] = {"fp32", "bf16", "fp16"};
#define MAX_LOOK 12 /* steps of the FP16-moment run examined one by one, at most */
#define MAX_SEEDS 16

/* What the first step left in the moments, and the size of the second update. */
typedef struct first_step {
    int64_t moved;        /* entries whose stored m is nonzero after step 1 */
    int64_t v_zero;       /* of those, entries whose stored v is 0 */
    double update_median; /* |w2 - w1| over the moved entries */
    double update_max;
    int64_t update_big;   /* of the moved entries, those with |w2 - w1| > 10 lr */
} first_step;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads tensor t of the checkpoint widened to FP32 into a new array (free it). */
static mpt_status read_f32(const mpt_checkpoint *ck, const mpt_checkpoint_tensor *t, float **out, int64_t *n) {
    int64_t cnt = 1;
    for (int d = 0; d < t->ndim; d++) cnt *= t->shape[d];
    size_t esz = mpt_dtype_size(t->dtype);
    void *raw = malloc((size_t)cnt * esz + 1);
    float *v = malloc((size_t)cnt * sizeof *v + 1);
    if (!raw || !v) {
        free(raw);
        free(v);
        return mpt_errorf(MPT_ERR_NOMEM, "lab optimizer-state: no memory for %s", t->name);
    }
    mpt_status s = mpt_checkpoint_read(ck, t->name, raw, (size_t)cnt * esz);
    for (int64_t i = 0; s == MPT_OK && i < cnt; i++) v[i] = mpt_load_f32(raw, t->dtype, i);
    free(raw);
    if (s != MPT_OK) {
        free(v);
        return s;
    }
    *out = v;
    *n = cnt;
    return MPT_OK;
}

/* The first step's moments (the checkpoint of run, r1 its result) and the second update (w2 - w1: r2, the run
 * stopped after two steps, against r1; masters concatenated in parameter order, the order of the checkpoint's
 * master tensors). lr: the learning rate. */
static mpt_status read_first_step(const mpt_lab_ctx *c, const char *run, const mpt_run_result *r1,
                                  const mpt_run_result *r2, double lr, first_step *fs) {
    const mpt_run_result *r = r1;
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/%s", c->dir, run, MPT_CLI_CHECKPOINT_FILE);
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(path, NULL, 0, &ck));
    memset(fs, 0, sizeof fs[0]);
    double *upd = malloc((size_t)r->n_master * sizeof *upd + 1);
    mpt_status s = upd ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab optimizer-state: no memory");
    if (s == MPT_OK && r2->n_master != r1->n_master)
        s = mpt_errorf(MPT_ERR_SHAPE, "lab optimizer-state: the one- and two-step runs have %lld and %lld masters",
                       (long long)r1->n_master, (long long)r2->n_master);
    int64_t off = 0, n_upd = 0;
    for (int i = 0; s == MPT_OK && i < mpt_checkpoint_n_tensors(ck); i++) {
        const mpt_checkpoint_tensor *w = mpt_checkpoint_tensor_at(ck, i);
        if (strchr(w->name, ':')) continue; /* optimizer state; the masters are the tensors without a ':' */
        char mn[256], vn[256];
        snprintf(mn, sizeof mn, "%s:exp_avg", w->name);
        snprintf(vn, sizeof vn, "%s:exp_avg_sq", w->name);
        const mpt_checkpoint_tensor *mt = mpt_checkpoint_find(ck, mn), *vt = mpt_checkpoint_find(ck, vn);
        if (!mt || !vt) {
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: no %s / %s (the lesson needs Adam)", path, mn, vn);
            break;
        }
        float *m = NULL, *v = NULL, *x = NULL;
        int64_t nm = 0, nv = 0, nx = 0;
        s = read_f32(ck, mt, &m, &nm);
        if (s == MPT_OK) s = read_f32(ck, vt, &v, &nv);
        if (s == MPT_OK) s = read_f32(ck, w, &x, &nx);
        /* the checkpoint lists the masters in parameter order (sorted by offset, written in that order): the
         * same order as r's concatenated masters, which the final values confirm */
        int same = s == MPT_OK && nm == nv && nm == nx && off + nm <= r->n_master;
        for (int64_t k = 0; same && k < nx; k++) same = x[k] == r->final_master[off + k];
        if (s == MPT_OK && !same)
            s = mpt_errorf(MPT_ERR_SHAPE, "%s: %s does not match the run's final master weights at offset %lld", path,
                           w->name, (long long)off);
        for (int64_t k = 0; s == MPT_OK && k < nm; k++) {
            if (m[k] == 0.0f) continue;
            fs->moved++;
            fs->v_zero += v[k] == 0.0f;
            double u = fabs((double)r2->final_master[off + k] - (double)r1->final_master[off + k]);
            fs->update_big += u > 10.0 * lr;
            upd[n_upd++] = u;
        }
        off += nm;
        free(m);
        free(v);
        free(x);
    }
    mpt_checkpoint_close(&ck);
    if (s == MPT_OK && n_upd > 0) {
        qsort(upd, (size_t)n_upd, sizeof *upd, cmp_double);
        fs->update_median = n_upd % 2 ? upd[n_upd / 2] : 0.5 * (upd[n_upd / 2 - 1] + upd[n_upd / 2]);
        fs->update_max = upd[n_upd - 1];
    }
    free(upd);
    return s;
}

static double pct(int64_t a, int64_t b) { return b > 0 ? 100.0 * (double)a / (double)b : NAN; }

/* The whole run's metrics.csv (logged every step): the first skipped step (0: none), whether every loss was finite,
 * the largest loss. */
static mpt_status read_losses(const mpt_lab_ctx *c, const char *run, int *first_skip, int *all_finite, double *max) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/metrics.csv", c->dir, run);
    FILE *f = fopen(path, "r");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot read", path);
    char line[512];
    *first_skip = 0, *all_finite = 1, *max = 0.0;
    while (fgets(line, sizeof line, f)) { /* step,epoch,loss,lr,loss_scale,steps_skipped,... */
        if (line[0] < '0' || line[0] > '9') continue;
        char *save = NULL, *tok[6] = {NULL};
        tok[0] = strtok_r(line, ",\n", &save);
        for (int k = 1; k < 6 && tok[k - 1]; k++) tok[k] = strtok_r(NULL, ",\n", &save);
        if (!tok[5]) continue;
        double loss = strtod(tok[2], NULL);
        if (!isfinite(loss)) *all_finite = 0;
        else if (loss > *max) *max = loss;
        if (*first_skip == 0 && atoi(tok[5]) > 0) *first_skip = atoi(tok[0]);
    }
    fclose(f);
    return MPT_OK;
}

/* The stored m of every weight (tensors "<w>:exp_avg", in checkpoint order, concatenated) of a run's checkpoint, or
 * NULL (*n = 0) when the run wrote none. */
static mpt_status read_m(const mpt_lab_ctx *c, const char *run, float **out, int64_t *n) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/%s", c->dir, run, MPT_CLI_CHECKPOINT_FILE);
    *out = NULL, *n = 0;
    mpt_checkpoint *ck = NULL;
    if (mpt_checkpoint_open(path, NULL, 0, &ck) != MPT_OK) return MPT_OK; /* refused: no checkpoint of this step */
    mpt_status s = MPT_OK;
    for (int i = 0; s == MPT_OK && i < mpt_checkpoint_n_tensors(ck); i++) {
        const mpt_checkpoint_tensor *t = mpt_checkpoint_tensor_at(ck, i);
        const char *colon = strchr(t->name, ':');
        if (!colon || strcmp(colon, ":exp_avg") != 0) continue;
        float *v = NULL;
        int64_t k = 0;
        s = read_f32(ck, t, &v, &k);
        float *grown = s == MPT_OK ? realloc(*out, (size_t)(*n + k) * sizeof *grown + 1) : NULL;
        if (s == MPT_OK && !grown) s = mpt_errorf(MPT_ERR_NOMEM, "lab optimizer-state: no memory");
        if (grown) {
            memcpy(grown + *n, v, (size_t)k * sizeof *v);
            *out = grown;
            *n += k;
        }
        free(v);
    }
    mpt_checkpoint_close(&ck);
    if (s != MPT_OK) free(*out), *out = NULL, *n = 0;
    return s;
}

/* The master tensors of a checkpoint (those without ':'), in order, with their element counts: the layout of a run's
 * concatenated final masters. */
typedef struct master_layout {
    int n;
    char name[32][64];
    int64_t count[32];
} master_layout;

static mpt_status read_layout(const mpt_lab_ctx *c, const char *run, master_layout *L) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/%s", c->dir, run, MPT_CLI_CHECKPOINT_FILE);
    memset(L, 0, sizeof *L);
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(path, NULL, 0, &ck));
    for (int i = 0; i < mpt_checkpoint_n_tensors(ck) && L->n < 32; i++) {
        const mpt_checkpoint_tensor *t = mpt_checkpoint_tensor_at(ck, i);
        if (strchr(t->name, ':')) continue;
        int64_t cnt = 1;
        for (int d = 0; d < t->ndim; d++) cnt *= t->shape[d];
        snprintf(L->name[L->n], sizeof L->name[0], "%s", t->name);
        L->count[L->n++] = cnt;
    }
    mpt_checkpoint_close(&ck);
    return MPT_OK;
}

/* The master tensors of x (laid out as L) that hold inf/NaN, "name: count" joined by ", " into b; *last: one of them
 * is the last layer's (the last two tensors: its weight and bias, which feed the loss). */
static void bad_masters(const master_layout *L, const float *x, int64_t n, char *b, size_t len, int *last) {
    size_t k = 0;
    int64_t off = 0;
    b[0] = '\0';
    *last = 0;
    for (int i = 0; i < L->n && off + L->count[i] <= n; off += L->count[i], i++) {
        int64_t bad = 0;
        for (int64_t j = 0; j < L->count[i]; j++) bad += !isfinite(x[off + j]);
        if (!bad) continue;
        if (k < len) {
            int w = snprintf(b + k, len - k, "%s%s: %lld", k ? ", " : "", L->name[i], (long long)bad);
            k += w > 0 ? (size_t)w : 0;
        }
        *last |= i >= L->n - 2;
    }
}

static int all_finite_f32(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static mpt_status run(mpt_lab_ctx *c) {
    const char *prec;
    MPT_TRY(mpt_lab_param_flag(c, "precision", "bf16", MPT_OPT_PRECISION, &prec));
    double acc[N_STATES], loss[N_STATES];
    int skipped[N_STATES];
    int64_t steps = 0;
    first_step fs[N_STATES];
    const char *lr;
    MPT_TRY(mpt_lab_param_flag(c, "lr", "0.001", MPT_OPT_LR, &lr));
    double lr_v;
    MPT_TRY(mpt_lab_param(c, "lr", 0.001, &lr_v));
    int n_seeds;
    MPT_TRY(mpt_lab_seeds(c, MAX_SEEDS, &n_seeds));
    MPT_LAB_PARAMS_CHECKED(c);
    char name[3 * N_STATES][48];
    const char *fl[3 * N_STATES][13];
    mpt_lab_run runs[3 * N_STATES + N_STATES * (MAX_SEEDS - 1)];
    static mpt_lab_seed_run sr[N_STATES * (MAX_SEEDS - 1)];
    static mpt_run_result res[3 * N_STATES + N_STATES * (MAX_SEEDS - 1)];
    for (int i = 0; i < N_STATES; i++) { /* independent runs: one batch */
        snprintf(name[i], sizeof name[i], "state-%s", states[i]);
        const char *f[] = {"--precision", prec, "--optimizer", "adam", "--lr", lr, "--optimizer-state", states[i],
                           "--log-every", "1", NULL};
        memcpy(fl[i], f, sizeof f);
        runs[i] = (mpt_lab_run){name[i], fl[i]};
        for (int k = 1; k <= 2; k++) {
            int j = k * N_STATES + i;
            snprintf(name[j], sizeof name[0], "%s-%s", k == 1 ? "one-step" : "two-steps", states[i]);
            const char *g[] = {"--precision", prec, "--optimizer", "adam", "--lr", lr, "--optimizer-state", states[i],
                               "--max-steps", k == 1 ? "1" : "2", NULL};
            memcpy(fl[j], g, sizeof g);
            runs[j] = (mpt_lab_run){name[j], fl[j]};
        }
    }
    /* the three whole runs again at seeds 1..n_seeds-1, for the accuracy's paired verdicts (no per-step log) */
    int nr = 3 * N_STATES;
    for (int k = 1; k < n_seeds; k++)
        for (int i = 0; i < N_STATES; i++, nr++) {
            const char *f[] = {"--precision", prec, "--optimizer", "adam", "--lr", lr, "--optimizer-state", states[i],
                               NULL};
            runs[nr] = mpt_lab_seed_run_make(&sr[nr - 3 * N_STATES], name[i], k, f);
        }
    MPT_TRY(mpt_lab_train_batch(c, runs, nr, res));
    double accs[N_STATES][MAX_SEEDS]; /* final test accuracy (percent) per storage and seed */
    for (int k = 1; k < n_seeds; k++)
        for (int i = 0; i < N_STATES; i++) accs[i][k] = 100.0 * res[3 * N_STATES + (k - 1) * N_STATES + i].final_test_acc;
    for (int i = 3 * N_STATES; i < nr; i++) mpt_run_result_free(&res[i]);
    mpt_status s = MPT_OK;
    for (int i = 0; i < N_STATES; i++) {
        acc[i] = accs[i][0] = 100.0 * res[i].final_test_acc;
        loss[i] = res[i].final_train_loss;
        skipped[i] = res[i].steps_skipped;
        steps = res[i].iterations;
        if (s == MPT_OK)
            s = read_first_step(c, name[N_STATES + i], &res[N_STATES + i], &res[2 * N_STATES + i], lr_v, &fs[i]);
    }
    /* the FP16-moment runs stopped after step 1 and 2: the first two of the step-by-step sequence below */
    static char why[MAX_LOOK + 1][320];
    static char bad[MAX_LOOK + 1][200];
    int w_finite[MAX_LOOK + 1], w_last[MAX_LOOK + 1];
    const char *step_run[MAX_LOOK + 1];
    static master_layout layout;
    if (s == MPT_OK) s = read_layout(c, name[N_STATES + 2], &layout); /* the one-step run's checkpoint */
    for (int k = 1; k <= 2; k++) {
        const mpt_run_result *r = &res[k * N_STATES + 2];
        w_finite[k] = all_finite_f32(r->final_master, r->n_master);
        bad_masters(&layout, r->final_master, r->n_master, bad[k], sizeof bad[k], &w_last[k]);
        snprintf(why[k], sizeof why[k], "%s", r->checkpoint_refused ? r->checkpoint_refused_why : "");
        step_run[k] = name[k * N_STATES + 2];
    }
    for (int i = 0; i < 3 * N_STATES; i++) mpt_run_result_free(&res[i]);
    MPT_TRY(s);

    /* 3. the FP16-moment run step by step, up to its first skipped step (MAX_LOOK steps when it skips none) */
    mpt_text_state_seq seq;
    memset(&seq, 0, sizeof seq);
    seq.lr = lr_v;
    seq.update2_max = fs[2].update_max;
    seq.skipped = skipped[2];
    seq.steps = (int)steps;
    MPT_TRY(read_losses(c, "state-fp16", &seq.first_skip, &seq.loss_all_finite, &seq.loss_max));
    int looked = seq.first_skip > 0 ? seq.first_skip : MAX_LOOK;
    looked = looked > MAX_LOOK ? MAX_LOOK : looked > steps ? (int)steps : looked;
    looked = looked < 2 ? 2 : looked;
    seq.looked = looked;
    char sname[MAX_LOOK + 1][48], sk[MAX_LOOK + 1][8];
    const char *sfl[MAX_LOOK + 1][13];
    mpt_lab_run sruns[MAX_LOOK];
    static mpt_run_result sres[MAX_LOOK];
    int ns = 0;
    for (int k = 3; k <= looked; k++, ns++) {
        snprintf(sname[k], sizeof sname[k], "steps-%d-fp16", k);
        snprintf(sk[k], sizeof sk[k], "%d", k);
        const char *g[] = {"--precision", prec, "--optimizer", "adam", "--lr", lr, "--optimizer-state", "fp16",
                           "--max-steps", sk[k], NULL};
        memcpy(sfl[k], g, sizeof g);
        sruns[ns] = (mpt_lab_run){sname[k], sfl[k]};
        step_run[k] = sname[k];
    }
    if (ns > 0) MPT_TRY(mpt_lab_train_batch(c, sruns, ns, sres));
    for (int k = 3; k <= looked; k++) {
        mpt_run_result *r = &sres[k - 3];
        w_finite[k] = all_finite_f32(r->final_master, r->n_master);
        bad_masters(&layout, r->final_master, r->n_master, bad[k], sizeof bad[k], &w_last[k]);
        snprintf(why[k], sizeof why[k], "%s", r->checkpoint_refused ? r->checkpoint_refused_why : "");
        mpt_run_result_free(r);
    }
    float *m_prev = NULL;
    int64_t n_prev = 0;
    const double beta1 = (double)(float)c->base->beta1; /* the optimizer's FP32 beta1 */
    for (int k = 1; k <= looked && s == MPT_OK; k++) {
        if (!seq.weights_nonfinite_step && !w_finite[k]) {
            seq.weights_nonfinite_step = k;
            snprintf(seq.bad_weights, sizeof seq.bad_weights, "%s", bad[k]);
            seq.bad_last = w_last[k];
        }
        const char *t = strstr(why[k], "tensor "), *h = t ? strstr(t, " holds ") : NULL;
        if (!seq.state_nonfinite_step && h && memchr(t, ':', (size_t)(h - t))) { /* "<weight>:<state>" */
            seq.state_nonfinite_step = k;
            t += strlen("tensor ");
            h += strlen(" holds ");
            snprintf(seq.state_tensor, sizeof seq.state_tensor, "%.*s", (int)strcspn(t, " "), t);
            snprintf(seq.state_value, sizeof seq.state_value, "%.*s", (int)strcspn(h, " "), h);
        }
        float *m = NULL;
        int64_t nm = 0;
        s = read_m(c, step_run[k], &m, &nm);
        if (s == MPT_OK && m && m_prev && nm == n_prev && !seq.grad_big_step) {
            double gmax = 0.0; /* g_k = (m_k - beta1 m_{k-1}) / (1 - beta1), m as stored in FP16 */
            for (int64_t i = 0; i < nm; i++)
                gmax = fmax(gmax, fabs(((double)m[i] - beta1 * (double)m_prev[i]) / (1.0 - beta1)));
            if (gmax > 1.0) seq.grad_big_step = k, seq.grad_big_max = gmax;
        }
        free(m_prev);
        m_prev = m, n_prev = nm;
    }
    free(m_prev);
    MPT_TRY(s);
    char seq_text[1600];
    mpt_text_state_sequence(seq_text, sizeof seq_text, &seq);
    double t_sub, t_zero;
    char thresholds[400];
    mpt_text_adam_v_thresholds(thresholds, sizeof thresholds, (double)(float)c->base->beta2, -24, &t_sub, &t_zero);
    /* accuracy over seeds: FP16 and BF16 moments each against FP32 moments, paired by seed */
    mpt_lab_paired p_bf, p_fp;
    MPT_TRY(mpt_lab_compare_paired(c, accs[1], accs[0], n_seeds, &p_bf));
    MPT_TRY(mpt_lab_compare_paired(c, accs[2], accs[0], n_seeds, &p_fp));
    const int fp_worse = mpt_lab_paired_is(&p_fp, MPT_VERDICT_WORSE);
    const int bf_ok = mpt_lab_paired_is(&p_bf, MPT_VERDICT_EQUIVALENT);
    c->observed = fp_worse && bf_ok;
    char pv_fp[600], rd_fp[300], pv_bf[600], rd_bf[300], acc_text[2000] = "";
    mpt_text_paired(pv_fp, sizeof pv_fp, "final test accuracy, FP16 - FP32 moments:", mpt_lab_paired_ci(&p_fp),
                    &p_fp.diff);
    mpt_text_verdict_reading(rd_fp, sizeof rd_fp, "with FP16 moments", mpt_lab_paired_ci(&p_fp));
    mpt_text_paired(pv_bf, sizeof pv_bf, "BF16 - FP32 moments:", mpt_lab_paired_ci(&p_bf), &p_bf.diff);
    mpt_text_verdict_reading(rd_bf, sizeof rd_bf, "with BF16 moments", mpt_lab_paired_ci(&p_bf));
    mpt_lab_append(acc_text, sizeof acc_text, "Over %d seeds, %s: %s; %s: %s (seed 0: FP32 / BF16 / FP16 moments "
                   "%.2f%% / %.2f%% / %.2f%%)", n_seeds, pv_fp, rd_fp, pv_bf, rd_bf, acc[0], acc[1], acc[2]);
    char mech[800];
    snprintf(mech, sizeof mech,
             "after the first step %.1f%% of the FP16 second moments v were stored as 0 where the gradient was not "
             "(FP32: %.1f%%, BF16: %.1f%%); the second update, which divides the remembered m by sqrt(v) + eps, was "
             "up to %.3g and above 10 lr for %.1f%% of those weights (FP32 moments: up to %.3g, %.1f%%)",
             pct(fs[2].v_zero, fs[2].moved), pct(fs[0].v_zero, fs[0].moved), pct(fs[1].v_zero, fs[1].moved),
             fs[2].update_max, pct(fs[2].update_big, fs[2].moved), fs[0].update_max,
             pct(fs[0].update_big, fs[0].moved));
    char outcome[2000];
    if (skipped[2] > 0 || !(loss[2] < 10.0 * loss[0]))
        snprintf(outcome, sizeof outcome, ". Then, step by step: %s; it ended at a training loss of %.3g against "
                 "%.4f: it diverged", seq_text, loss[2], loss[0]);
    else
        snprintf(outcome, sizeof outcome, "; the FP16-moment run skipped no step and ended at a training loss of "
                 "%.4f against %.4f", loss[2], loss[0]);
    /* built in parts (mpt_lab_append): the sequence of the FP16 run alone may run to 1600 characters */
    c->conclusion[0] = '\0';
    if (c->observed) mpt_lab_append(c->conclusion, sizeof c->conclusion, "Observed: ");
    else
        mpt_lab_append(c->conclusion, sizeof c->conclusion, "Not observed: %s. ",
                       !p_fp.have_ci       ? "this build has no GSL: no intervals, so no accuracy verdicts"
                       : !fp_worse && !bf_ok ? "neither half of the criterion held"
                       : !fp_worse           ? "FP16 moments were not resolved as worse than FP32 moments"
                                             : "BF16 moments were not resolved as equivalent to FP32 moments within "
                                               "the margin");
    mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s. How, on seed 0: ", acc_text);
    mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s%s.", mech, outcome);

    FILE *gp = mpt_lab_open(c, "optimizer-state.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 500, "optimizer-state.png");
    fprintf(gp, "set datafile separator ','\nset datafile missing 'nan'\n"
                "set title 'Adam moments stored in FP32, BF16, FP16 (%s training, FP32 masters, seed 0): training loss per step'\n"
                "set xlabel 'step'\nset ylabel 'cross-entropy (log axis)'\nset logscale y 10\n"
                "set format y '10^{%%L}'\nset grid\nset key center right box opaque\nplot ", prec);
    for (int i = 0; i < N_STATES; i++) /* fp32 wide and bf16 dashed on top: where they agree both stay visible */
        fprintf(gp, "%s'state-%s/metrics.csv' using 'step':(column('loss') > 0 ? column('loss') : NaN) with "
                    "linespoints lw %s dt %d pt 7 ps 0.4 lt %d title '%s moments: %.2f%%, %d skipped'",
                i ? ", \\\n     " : "", states[i], i == 0 ? "4" : "1.5", i == 1 ? 2 : 1, i + 1, states[i], acc[i],
                skipped[i]);
    fprintf(gp, "\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "optimizer-state.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_optimizer_state, &f));
    fprintf(f, "Adam keeps two moments per weight: m, a running mean of the gradient, and v, of its square. Stored "
               "in 16 bits they halve the optimizer's memory. v is the fragile one: after the first step it holds "
               "%s. The step is lr * m_hat / (sqrt(v_hat) + eps): with v = 0 it becomes "
               "lr * m_hat / eps, 10^5 m_hat for lr = 10^-3 and eps = 10^-8, instead of about lr. mptrain (like torch.optim) computes "
               "each step's m and v in FP32 and only stores them rounded, so the first step still moves every weight by "
               "about lr; the damage comes from the next steps, which start from the stored v. Where a later "
               "gradient is 0 or small (a unit a ReLU switched off for that batch) the remembered m is divided by "
               "sqrt(0.001 g^2) + eps instead of by the remembered sqrt(v). BF16 keeps FP32's exponent range with 8 "
               "significant bits, so its v is coarse but not zero.\n\n"
               "## How: the first two steps\n\n"
               "The same training stopped after one step and after two (`--max-steps 1`, `--max-steps 2`) with each "
               "storage. v and m are read from the one-step run's checkpoint, the second update w2 - w1 from the FP32 "
               "masters of the two runs. Counted over the entries whose stored m is nonzero after step 1 (their "
               "gradient was not zero); lr = %s.\n\n"
               "| moments | entries with m != 0 | of them v stored as 0 | median second update | largest second update | "
               "second update > 10 lr |\n|---|---:|---:|---:|---:|---:|\n", thresholds, lr);
    for (int i = 0; i < N_STATES; i++)
        fprintf(f, "| %s | %lld | %.2f%% | %.3g | %.3g | %.2f%% |\n", states[i], (long long)fs[i].moved,
                pct(fs[i].v_zero, fs[i].moved), fs[i].update_median, fs[i].update_max,
                pct(fs[i].update_big, fs[i].moved));
    fprintf(f, "\n## Outcome: the whole run\n\n"
               "Seed 0 (the runs `state-<moments>/`, loss logged every step):\n\n"
               "| moments | final test acc | last epoch's train loss | skipped steps (of %lld) |\n|---|---:|---:|---:|\n",
            (long long)steps);
    for (int i = 0; i < N_STATES; i++)
        fprintf(f, "| %s | %.2f%% | %.4g | %d |\n", states[i], acc[i], loss[i], skipped[i]);
    fprintf(f, "\nA skipped step is one whose gradients held inf or NaN (found_inf). What happened in the FP16-moment "
               "run, measured step by step (the same run stopped after each of its first %d steps, `steps-<k>-fp16/` "
               "and the one- and two-step runs: the refusal of a checkpoint names the first non-finite state tensor, "
               "the runs' final masters say whether a weight was non-finite, consecutive stored m give the "
               "gradients; the whole run's `state-fp16/metrics.csv` gives the losses and the skipped steps): %s.\n\n"
               "The plot shows the training loss of every step on a log axis; a run whose loss is not finite at a "
               "step has no point there.\n\n",
            seq.looked, seq_text);
    fprintf(f, "## Accuracy over seeds\n\nOne seed's gap is not a cost: the three whole runs with %d seeds (seed 0: "
               "the runs above; the others `state-<moments>-seed<k>/`, the same training without the per-step log), "
               "a paired design:\n\n", n_seeds);
    const char *arm_names[N_STATES] = {"FP32 moments", "BF16 moments", "FP16 moments"};
    const double *arm_acc[N_STATES] = {accs[0], accs[1], accs[2]};
    mpt_lab_seed_table(f, n_seeds, N_STATES, arm_names, arm_acc);
    fprintf(f, "\n%s.\n\nCriterion for the effect: over the seeds, the verdict of FP16 - FP32 moments is worse (the 95%% "
               "interval of the paired differences lies below minus the margin, %.2g pp) and the verdict of BF16 - "
               "FP32 moments is equivalent (the interval lies within plus and minus the margin): BF16 moments cost no "
               "accuracy at that margin, not merely no cost these seeds could resolve.\n",
            acc_text, c->base->margin);
    return mpt_lab_report_close(c, &mpt_lab_optimizer_state, f, plot_error);
}

const mpt_lab_lesson mpt_lab_optimizer_state = {
    "optimizer-state",
    "Do Adam's moments survive being stored in BF16 (FP32's range) and in FP16, and where FP16's fail, what happens "
    "step by step?",
    "precision=P, the training precision (default bf16); lr=X, Adam's learning rate (default 0.001); seeds=N, seeds "
    "of the whole runs (2..16; default: the lesson's size)",
    run,
    {20000, 10000, 2, 10}, /* full */
    {2000, 1000, 1, 10}, /* --quick: 10 seeds, so that BF16's equivalence within 0.3 pp can be resolved */
    "precision lr seeds",
    "--quick 6 s, full 69 s of CPU time (2-vCPU AMD EPYC, shared, load average 2.3 to 4.6, 2026-11-28)",
};
