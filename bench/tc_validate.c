/*
 * bench/tc_validate.c - checks the Tensor Core summation models (kernels/cpu/tc_accum.h) bit for bit against the
 * inner products Khattak and Mikaitis measured on NVIDIA GPUs ("Accurate Models of NVIDIA Tensor Cores", arXiv
 * 2512.07004), published in their repository github.com/north-numerical-computing/MATLAB-tensor-core (BSD-2-Clause)
 * under model_validation/<GPU>/<format>/. The files are read from a checkout given with --dir; none is part of
 * mptrain (docs/numerics.md says why).
 *
 * The published layout, one vector per line (what the repository's Validate_TC_models.m, readHexFloatFile.m and
 * readIeeeFloatsFromFile.m read):
 *   a_<GPU>_<format>.txt, b_<GPU>_<format>.txt  K operands per line, each the FP32 encoding of a value of the format
 *                                               as 8 hex digits, separated by blanks (K: 4 to 32, per folder)
 *   c_<GPU>_fp32.txt                            the FP32 accumulator c, as 32 binary digits
 *   d_<GPU>_fp32.txt, d_<GPU>_fp16.txt          the GPU's d = c + sum_k a_k b_k (FP16 outputs encoded as FP32), as
 *                                               32 binary digits; an FP16 output started from c rounded to FP16
 * Folders: V100, A100, A2, Ada, L40S, H100, H200, B200 with fp16, bf16, tf32, E4M3, E5M2 (those that were measured).
 * The H100 and H200 FP8 measurements ran WGMMA with a zero accumulator: their c files are not used (c = +0), as in
 * Validate_TC_models.m. FP8 with an FP16 output is not modelled: those files are listed and skipped.
 *
 * For each GPU, format and output it prints "matched / total" (bit-identical outputs; two NaNs match), and for the
 * first mismatches (--show) the line, the inputs and both results in hex. Exit status: 0 when every modelled vector
 * matched, 1 when some did not, 2 on a usage error or a missing or malformed file (the message names the file, the
 * line and what was expected).
 *
 * Usage: tc_validate --dir DIR [--gpu NAME] [--format fp16|bf16|tf32|e4m3|e5m2] [--show N]
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "kernels/cpu/tc_accum.h"
#include "engine/numerics.h"

/* A folder of the repository's model_validation/ and the model that describes its GPU. */
typedef struct gpu_dir {
    const char *name;   /* the folder, as the repository spells it */
    mpt_tc_model model; /* the row set (kernels/cpu/tc_accum.c says which GPUs share one) */
    int fp8_c_zero;     /* FP8 measured with a zero accumulator (WGMMA): c = +0 */
} gpu_dir;

static const gpu_dir gpus[] = {
    {.name = "V100", .model = MPT_TC_MODEL_V100}, {.name = "A100", .model = MPT_TC_MODEL_A100},
    {.name = "A2", .model = MPT_TC_MODEL_A100},   {.name = "Ada", .model = MPT_TC_MODEL_ADA},
    {.name = "L40S", .model = MPT_TC_MODEL_ADA},  {.name = "H100", .model = MPT_TC_MODEL_H100, .fp8_c_zero = 1},
    {.name = "H200", .model = MPT_TC_MODEL_H100, .fp8_c_zero = 1}, {.name = "B200", .model = MPT_TC_MODEL_B200},
};
enum { N_GPUS = (int)(sizeof gpus / sizeof gpus[0]) };

/* The format folders as the repository spells them. */
static const char *const format_dirs[] = {
    [MPT_TC_FORMAT_FP16] = "fp16", [MPT_TC_FORMAT_BF16] = "bf16", [MPT_TC_FORMAT_TF32] = "tf32",
    [MPT_TC_FORMAT_E4M3] = "E4M3", [MPT_TC_FORMAT_E5M2] = "E5M2",
};
_Static_assert(sizeof format_dirs / sizeof format_dirs[0] == MPT_TC_FORMAT_COUNT, "a folder per mpt_tc_format");

static void usage(FILE *f) {
    fprintf(f,
            "Usage: tc_validate --dir DIR [--gpu NAME] [--format FMT] [--show N]\n"
            "Checks mptrain's Tensor Core summation models bit for bit against the GPU measurements published in\n"
            "github.com/north-numerical-computing/MATLAB-tensor-core (model_validation/<GPU>/<format>/).\n"
            "  --dir DIR     a checkout of that repository, or its model_validation folder\n"
            "  --gpu NAME    only this GPU's folder: V100, A100, A2, Ada, L40S, H100, H200, B200 (any case)\n"
            "  --format FMT  only this input format: fp16, bf16, tf32, e4m3, e5m2\n"
            "  --show N      print the first N mismatches of each set in hex (default 5)\n"
            "  -h, --help    this text\n"
            "Prints, per GPU, format and output, the vectors matched / total. Exit status 0: all matched; 1: some\n"
            "did not; 2: usage error, or a file missing or malformed.\n");
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A file read into lines: blank lines are skipped (as the repository's readers do); line numbers kept. */
typedef struct text {
    char **line;
    long *lineno;
    long n;
} text;

static void text_free(text *t) {
    for (long i = 0; i < t->n; i++) free(t->line[i]);
    free(t->line);
    free(t->lineno);
    memset(t, 0, sizeof *t);
}

static int text_read(const char *path, text *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tc_validate: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t cap = 0;
    long no = 0, alloc = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        no++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
            buf[--len] = '\0';
        const char *s = buf + strspn(buf, " \t");
        if (*s == '\0') continue;
        if (t->n == alloc) {
            alloc = alloc ? 2 * alloc : 8192;
            char **nl = realloc(t->line, (size_t)alloc * sizeof *nl);
            long *nn = realloc(t->lineno, (size_t)alloc * sizeof *nn);
            if (nl) t->line = nl;
            if (nn) t->lineno = nn;
            if (!nl || !nn) {
                fprintf(stderr, "tc_validate: out of memory reading %s\n", path);
                rc = -1;
                break;
            }
        }
        t->line[t->n] = strdup(s);
        t->lineno[t->n] = no;
        if (!t->line[t->n]) {
            fprintf(stderr, "tc_validate: out of memory reading %s\n", path);
            rc = -1;
            break;
        }
        t->n++;
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "tc_validate: error reading %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    free(buf);
    fclose(f);
    if (rc == 0 && t->n == 0) {
        fprintf(stderr, "tc_validate: %s holds no vectors\n", path);
        rc = -1;
    }
    if (rc != 0) text_free(t);
    return rc;
}

/* Whether the FP32 value x is a value of format f (NaN and infinities count as values: the model handles them). */
static int in_format(float x, mpt_tc_format f) {
    if (!mpt_is_finite(x)) return 1;
    switch (f) {
    case MPT_TC_FORMAT_FP16: return mpt_f16_to_f32(mpt_f32_to_f16(x)) == x;
    case MPT_TC_FORMAT_BF16: return (mpt_f32_bits(x) & 0xffffu) == 0;
    case MPT_TC_FORMAT_TF32: return (mpt_f32_bits(x) & 0x1fffu) == 0;
    case MPT_TC_FORMAT_E4M3: return mpt_e4m3_to_f32(mpt_f32_to_e4m3(x)) == x;
    case MPT_TC_FORMAT_E5M2: return mpt_e5m2_to_f32(mpt_f32_to_e5m2(x)) == x;
    default: return 0;
    }
}

/* The operands of a/b file `path`: *K per line (from the first line), values of format f, into a new [n, K]
 * array of FP32 bit patterns. */
static uint32_t *read_operands(const char *path, const text *t, mpt_tc_format f, int *K) {
    *K = 0;
    for (const char *s = t->line[0]; *s;) {
        s += strspn(s, " \t");
        if (!*s) break;
        (*K)++;
        s += strcspn(s, " \t");
    }
    if (*K < 1 || *K > 4096) {
        fprintf(stderr, "tc_validate: %s line %ld: %d operands (expected 1 to 4096)\n", path, t->lineno[0], *K);
        return NULL;
    }
    uint32_t *v = malloc((size_t)t->n * (size_t)*K * sizeof *v);
    if (!v) {
        fprintf(stderr, "tc_validate: out of memory for %s\n", path);
        return NULL;
    }
    for (long i = 0; i < t->n; i++) {
        const char *s = t->line[i];
        int k = 0;
        while (1) {
            s += strspn(s, " \t");
            if (!*s) break;
            const size_t len = strcspn(s, " \t");
            if (k == *K) {
                fprintf(stderr, "tc_validate: %s line %ld: more than the %d operands of line %ld\n", path,
                        t->lineno[i], *K, t->lineno[0]);
                free(v);
                return NULL;
            }
            uint32_t u = 0;
            int ok = len == 8;
            for (size_t j = 0; ok && j < len; j++) {
                const char ch = s[j];
                const int d = ch >= '0' && ch <= '9'   ? ch - '0'
                              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                       : -1;
                ok = d >= 0;
                u = u << 4 | (uint32_t)(d < 0 ? 0 : d);
            }
            if (!ok) {
                fprintf(stderr, "tc_validate: %s line %ld: operand %d '%.*s' is not 8 hex digits (an FP32 encoding)\n",
                        path, t->lineno[i], k + 1, (int)(len > 40 ? 40 : len), s);
                free(v);
                return NULL;
            }
            if (!in_format(mpt_bits_f32(u), f)) {
                fprintf(stderr, "tc_validate: %s line %ld: operand %d %08x is not a value of %s\n", path, t->lineno[i],
                        k + 1, (unsigned)u, mpt_tc_format_info_of(f)->name);
                free(v);
                return NULL;
            }
            v[i * *K + k++] = u;
            s += len;
        }
        if (k != *K) {
            fprintf(stderr, "tc_validate: %s line %ld: %d operands, line %ld has %d\n", path, t->lineno[i], k,
                    t->lineno[0], *K);
            free(v);
            return NULL;
        }
    }
    return v;
}

/* The values of a c/d file: one FP32 encoding per line as 32 binary digits; n of them (a's vector count). */
static uint32_t *read_words(const char *path, const text *t, long n) {
    if (t->n != n) {
        fprintf(stderr, "tc_validate: %s: %ld values, expected %ld (one per vector of the a file)\n", path, t->n, n);
        return NULL;
    }
    uint32_t *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        fprintf(stderr, "tc_validate: out of memory for %s\n", path);
        return NULL;
    }
    for (long i = 0; i < n; i++) {
        const char *s = t->line[i];
        uint32_t u = 0;
        int ok = strlen(s) == 32;
        for (int j = 0; ok && j < 32; j++) {
            ok = s[j] == '0' || s[j] == '1';
            u = u << 1 | (uint32_t)(s[j] == '1');
        }
        if (!ok) {
            fprintf(stderr, "tc_validate: %s line %ld: '%.40s' is not 32 binary digits (an FP32 encoding)\n", path,
                    t->lineno[i], s);
            free(v);
            return NULL;
        }
        v[i] = u;
    }
    return v;
}

static int same_bits(uint32_t x, uint32_t y) {
    const int xnan = (x & 0x7fffffffu) > 0x7f800000u, ynan = (y & 0x7fffffffu) > 0x7f800000u;
    return x == y || (xnan && ynan);
}

typedef struct tally {
    long matched, total, sets, sets_failed, skipped;
} tally;

/* One folder (GPU g, format f): every d file of it. Returns 0, or -1 on a file error. */
static int check_folder(const char *root, const gpu_dir *g, mpt_tc_format f, int show, tally *tl) {
    char dir[4352], pa[4608], pb[4608], pc[4608], pd[4608]; /* root is below 4096 bytes (main) */
    snprintf(dir, sizeof dir, "%s/%s/%s", root, g->name, format_dirs[f]);
    snprintf(pa, sizeof pa, "%s/a_%s_%s.txt", dir, g->name, format_dirs[f]);
    snprintf(pb, sizeof pb, "%s/b_%s_%s.txt", dir, g->name, format_dirs[f]);
    snprintf(pc, sizeof pc, "%s/c_%s_fp32.txt", dir, g->name);
    const int fp8 = mpt_tc_format_info_of(f)->family == MPT_TC_FAMILY_FP8;
    const int c_zero = fp8 && g->fp8_c_zero;
    text ta = {0}, tb = {0}, tc = {0};
    uint32_t *A = NULL, *B = NULL, *C = NULL;
    int K = 0, Kb = 0, rc = -1;
    if (text_read(pa, &ta) || text_read(pb, &tb) || (!c_zero && text_read(pc, &tc))) goto out;
    if (!(A = read_operands(pa, &ta, f, &K)) || !(B = read_operands(pb, &tb, f, &Kb))) goto out;
    if (tb.n != ta.n || Kb != K) {
        fprintf(stderr, "tc_validate: %s holds %ld vectors of %d operands, %s %ld of %d\n", pb, tb.n, Kb, pa, ta.n, K);
        goto out;
    }
    if (!c_zero && !(C = read_words(pc, &tc, ta.n))) goto out;
    rc = 0;
    for (int o = 0; o < MPT_TC_OUT_COUNT && rc == 0; o++) {
        const char *oname = mpt_tc_out_info_of((mpt_tc_out)o)->name;
        snprintf(pd, sizeof pd, "%s/d_%s_%s.txt", dir, g->name, oname);
        if (!is_file(pd)) continue;
        mpt_tc_op op;
        if (mpt_tc_op_init(&op, g->model, f, f, (mpt_tc_out)o) != 0) {
            printf("%-5s %-5s -> %-5s  not modelled (%s has no such row): skipped\n", g->name,
                   mpt_tc_format_info_of(f)->name, oname, mpt_tc_model_name(g->model));
            tl->skipped++;
            continue;
        }
        text td = {0};
        uint32_t *D = NULL;
        if (text_read(pd, &td) || !(D = read_words(pd, &td, ta.n))) {
            text_free(&td);
            rc = -1;
            break;
        }
        long ok = 0, shown = 0;
        float a[4096], b[4096];
        for (long i = 0; i < ta.n; i++) {
            for (int k = 0; k < K; k++) a[k] = mpt_bits_f32(A[i * K + k]), b[k] = mpt_bits_f32(B[i * K + k]);
            const float c = c_zero ? 0.0f : mpt_bits_f32(C[i]);
            const uint32_t got = mpt_f32_bits(mpt_tc_dot(&op, c, a, 1, b, 1, K));
            if (same_bits(got, D[i])) {
                ok++;
                continue;
            }
            if (shown++ >= show) continue;
            printf("  mismatch, %s line %ld:\n    a =", pa, ta.lineno[i]);
            for (int k = 0; k < K; k++) printf(" %08x", (unsigned)A[i * K + k]);
            printf("\n    b =");
            for (int k = 0; k < K; k++) printf(" %08x", (unsigned)B[i * K + k]);
            printf("\n    c = %08x%s   GPU d = %08x   model d = %08x\n", c_zero ? 0u : (unsigned)C[i],
                   c_zero ? " (+0: WGMMA)" : "", (unsigned)D[i], (unsigned)got);
        }
        printf("%-5s %-5s -> %-5s  model %-18s K %2d%s: %ld / %ld matched\n", g->name, mpt_tc_format_info_of(f)->name,
               oname, op.p->name, K, c_zero ? ", c = +0" : "", ok, ta.n);
        tl->matched += ok;
        tl->total += ta.n;
        tl->sets++;
        tl->sets_failed += ok != ta.n;
        free(D);
        text_free(&td);
    }
out:
    free(A), free(B), free(C);
    text_free(&ta), text_free(&tb), text_free(&tc);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *gpu = NULL, *fmt = NULL;
    int show = 5;
    static const struct option longopts[] = {{"dir", required_argument, NULL, 'd'},
                                             {"gpu", required_argument, NULL, 'g'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"show", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': dir = optarg; break;
        case 'g': gpu = optarg; break;
        case 'f': fmt = optarg; break;
        case 's': {
            char *end;
            errno = 0;
            const long v = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v > 1000000) {
                fprintf(stderr, "tc_validate: --show '%s': expected a count from 0 to 1000000\n", optarg);
                return 2;
            }
            show = (int)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tc_validate: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!dir) {
        fprintf(stderr, "tc_validate: --dir is required (a checkout of north-numerical-computing/MATLAB-tensor-core)\n");
        usage(stderr);
        return 2;
    }
    int only_fmt = -1, only_gpu = -1;
    if (fmt && (only_fmt = mpt_tc_format_parse(fmt)) < 0) {
        fprintf(stderr, "tc_validate: --format '%s': expected fp16, bf16, tf32, e4m3 or e5m2\n", fmt);
        return 2;
    }
    if (gpu) {
        for (int i = 0; i < N_GPUS; i++)
            if (strcasecmp(gpu, gpus[i].name) == 0) only_gpu = i;
        if (only_gpu < 0) {
            fprintf(stderr, "tc_validate: --gpu '%s': expected V100, A100, A2, Ada, L40S, H100, H200 or B200\n", gpu);
            return 2;
        }
    }
    char root[4096];
    if (strlen(dir) > 4000) {
        fprintf(stderr, "tc_validate: --dir: a path of %zu bytes is too long\n", strlen(dir));
        return 2;
    }
    snprintf(root, sizeof root, "%s/model_validation", dir);
    if (!is_dir(root)) snprintf(root, sizeof root, "%s", dir);
    if (!is_dir(root)) {
        fprintf(stderr, "tc_validate: --dir %s: no such folder\n", dir);
        return 2;
    }
    tally tl = {0};
    int found = 0;
    for (int gi = 0; gi < N_GPUS; gi++) {
        if (only_gpu >= 0 && gi != only_gpu) continue;
        for (int f = 0; f < MPT_TC_FORMAT_COUNT; f++) {
            if (only_fmt >= 0 && f != only_fmt) continue;
            char sub[4352];
            snprintf(sub, sizeof sub, "%s/%s/%s", root, gpus[gi].name, format_dirs[f]);
            if (!is_dir(sub)) continue;
            found++;
            if (check_folder(root, &gpus[gi], (mpt_tc_format)f, show, &tl) != 0) return 2;
        }
    }
    if (!found) {
        fprintf(stderr, "tc_validate: no <GPU>/<format> folder under %s%s%s%s%s (expected e.g. H100/fp16)\n", root,
                gpu ? " for GPU " : "", gpu ? gpu : "", fmt ? " in format " : "", fmt ? fmt : "");
        return 2;
    }
    printf("total: %ld / %ld vectors matched in %ld sets (%ld sets with mismatches, %ld not modelled)\n", tl.matched,
           tl.total, tl.sets, tl.sets_failed, tl.skipped);
    return tl.sets_failed ? 1 : 0;
}
