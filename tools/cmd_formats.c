/*
 * tools/cmd_formats.c - `mptrain formats [--fp8-saturate on|off] [--int-scale S] [--] [VALUE...]`: each value's bits,
 * rounded value and error in FP32, TF32, BF16, FP16, FP8 E4M3 / E5M2 and E8M0, and its code, value and error in INT8
 * and INT4 at a scale (from the values' amax, or --int-scale), through the engine's conversions (tools/formats.h),
 * then the tables of the formats' constants.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/formats.h"

static const char *default_values[] = {"3.14159265", "0.1", "65504", "65536", "1e-5", "1e-8", "500"};

static void print_help(FILE *f) {
    fprintf(f, "Usage: mptrain formats [--fp8-saturate on|off] [--int-scale S] [--] [VALUE...]\n"
               "Shows each VALUE (default: 3.14159265 0.1 65504 65536 1e-5 1e-8 500) in FP32, TF32, BF16, FP16, the\n"
               "OCP FP8 formats E4M3 and E5M2, and E8M0 (the power-of-two scale of an MX block): its bits (sign |\n"
               "exponent | mantissa), the value after rounding to nearest even, the absolute and relative error, and\n"
               "whether it overflowed, saturated, became subnormal or flushed to zero. Beside them the integer formats\n"
               "INT8 and INT4 (symmetric, two's complement, codes -127..127 / -7..7) with a scale s: the code\n"
               "q = clamp(round_half_even(x / s), -qmax, qmax), its bits, the value q * s and its error, and whether x / s\n"
               "was a tie, clamped or became 0. The scale is one for all the values, from their largest magnitude:\n"
               "s = amax / 127 (INT8), amax / 7 (INT4), which clamps nothing; --int-scale S sets it instead, and values\n"
               "past (qmax + 1/2) S clamp. Then the tables of the formats: bits, largest finite, smallest normal,\n"
               "smallest subnormal, unit roundoff, decimal digits; for the integer formats the codes, the grid step and\n"
               "the error bound. The conversions are the engine's own (engine/numerics.h), so this is what training and\n"
               "`mptrain eval --quantize` do: a value becomes FP32 first, the narrower formats round that FP32. (FP8 is\n"
               "used with a scale per tensor or per block: what FP8 holds is x * s.) A VALUE is decimal (6.1e-5) or a C\n"
               "hexadecimal float (0x1p-14: exactly 2^-14); a negative one may stand alone (-5) or follow --, which\n"
               "ends the options as in getopt.\n"
               "\nOptions:\n"
               "  --fp8-saturate on|off     FP8 overflow: on (default; CUDA's __NV_SATFINITE, TransformerEngine's casts)\n"
               "                            clamps to +-448 / +-57344; off gives NaN (E4M3) / inf (E5M2), as ml_dtypes'\n"
               "                            casts do\n"
               "  --int-scale S             the scale of INT8 and INT4, a finite number > 0 (default: from the values'\n"
               "                            amax, amax / 127 and amax / 7)\n"
               "  --help                    show this help\n");
}

/* What became of the value in an integer format. */
static const char *int_status_text(const mpt_int_format_desc *d, const mpt_fmt_int_value *v, char *buf, size_t len) {
    if (v->clamped)
        snprintf(buf, len, "clamped to q = %d (|x / s| = %.9g is past %d.5)", (int)v->q, fabs((double)v->ratio), d->qmax);
    else if (v->zeroed)
        snprintf(buf, len, "became 0 (|x / s| = %.3g <= 1/2: below half a grid step)", fabs((double)v->ratio));
    else if (v->tie)
        snprintf(buf, len, "q = %d: x / s = %.9g is a tie, rounded to even", (int)v->q, (double)v->ratio);
    else snprintf(buf, len, "q = %d%s", (int)v->q, v->exact ? ", exact" : "");
    return buf;
}

/* What became of the value, from the format's row: saturation names the largest finite value and what the
 * non-saturating cast would give (NaN where the format has no inf). */
static const char *status_text(mpt_format f, const mpt_fmt_value *v, char *buf, size_t len) {
    const mpt_format_desc *d = mpt_format_info(f);
    const char *over = d->special == MPT_SPECIAL_FN ? "NaN" : "inf";
    if (v->unrepresentable) return v->value > 0.0 ? "no zero in E8M0: its smallest code, 2^-127" : "negative: NaN (E8M0 has no sign)";
    if (d->special == MPT_SPECIAL_E8M0) {
        if (v->saturated) return "overflow -> clamped to the largest code 2^127 (past 1.5 * 2^127; no inf, 0xff is NaN)";
        if (v->overflow) return "overflow -> NaN (inf in FP32 already; E8M0 has no inf)";
        if (v->raised) return "underflow -> raised to the smallest code 2^-127 (below 0.75 * 2^-127; no zero)";
    }
    if (v->saturated) {
        snprintf(buf, len, "overflow -> saturated to %g (non-saturating: %s)", d->max_finite, over);
        return buf;
    }
    if (v->overflow) {
        if (d->special != MPT_SPECIAL_FN) return "overflow -> inf";
        snprintf(buf, len, "overflow -> NaN (%s has no inf)", d->short_name);
        return buf;
    }
    if (v->flush_tie) return "flushed to zero (exactly half the smallest subnormal: a tie, rounded to even, 0)";
    if (v->flushed) return "flushed to zero (below half the smallest subnormal)";
    if (v->subnormal) return v->exact ? "subnormal, exact" : "subnormal (fewer significant bits)";
    return v->exact ? "exact" : "rounded";
}

static void print_value(const char *text, double x, int sat, const float int_scale[MPT_INT_FORMAT_COUNT]) {
    char esc[256]; /* the argument as given, cut to a readable length */
    printf("%s  (as a double: %.17g)\n", mpt_cli_echo(esc, sizeof esc, text), x);
    printf("  %-9s %-38s %-10s %-24s %-10s %-10s %s\n", "format", "sign | exponent | mantissa", "hex", "value after RNE",
           "abs error", "rel error", "");
    for (int f = 0; f < MPT_FORMAT_COUNT; f++) {
        const mpt_format_desc info = *mpt_format_info((mpt_format)f);
        mpt_fmt_value v;
        mpt_fmt_convert((mpt_format)f, x, sat, &v);
        char bits[64], hex[16], val[32], ae[16], re[16], st[96];
        mpt_fmt_bits_text((mpt_format)f, v.bits, bits, sizeof bits);
        int digits = (info.sign_bits + info.exp_bits + info.man_bits + 3) / 4;
        snprintf(hex, sizeof hex, "0x%0*x", digits, (unsigned)v.bits);
        snprintf(val, sizeof val, "%.9g", v.value);
        if (isnan(v.value)) snprintf(ae, sizeof ae, "-");
        else snprintf(ae, sizeof ae, "%.3g", v.abs_err);
        if (isfinite(v.rel_err)) snprintf(re, sizeof re, "%.3g", v.rel_err);
        else snprintf(re, sizeof re, "-");
        printf("  %-9s %-38s %-10s %-24s %-10s %-10s %s\n", info.name, bits, hex, val, ae, re, status_text((mpt_format)f, &v, st, sizeof st));
    }
    for (int f = 0; f < MPT_INT_FORMAT_COUNT; f++) {
        const mpt_int_format_desc *d = mpt_int_format_info((mpt_int_format)f);
        mpt_fmt_int_value v;
        mpt_fmt_int_convert((mpt_int_format)f, x, int_scale[f], &v);
        char bits[64], hex[16], val[32], ae[16], re[16], st[128];
        mpt_fmt_int_bits_text((mpt_int_format)f, v.bits, bits, sizeof bits);
        snprintf(hex, sizeof hex, "0x%0*x", (d->bits + 3) / 4, (unsigned)v.bits);
        snprintf(val, sizeof val, "%.9g", v.value);
        snprintf(ae, sizeof ae, "%.3g", v.abs_err);
        if (isfinite(v.rel_err)) snprintf(re, sizeof re, "%.3g", v.rel_err);
        else snprintf(re, sizeof re, "-");
        printf("  %-9s %-38s %-10s %-24s %-10s %-10s %s\n", d->name, bits, hex, val, ae, re,
               int_status_text(d, &v, st, sizeof st));
    }
    printf("\n");
}

static void print_table(void) {
    printf("| format | bits (sign/exp/mantissa) | largest finite | smallest normal | smallest subnormal | "
           "unit roundoff | decimal digits |\n|---|---|---:|---:|---:|---:|---:|\n");
    for (int f = 0; f < MPT_FORMAT_COUNT; f++) {
        const mpt_format_desc i = *mpt_format_info((mpt_format)f);
        char sub[48];
        if (!i.has_subnormals) snprintf(sub, sizeof sub, "none");
        else snprintf(sub, sizeof sub, "%.6g (2^%d)", i.min_subnormal, ilogb(i.min_subnormal));
        printf("| %s | %d (%d/%d/%d)%s | %.6g | %.6g (2^%d) | %s | %.3g (2^-%d) | %.2f |\n", i.name,
               i.sign_bits + i.exp_bits + i.man_bits, i.sign_bits, i.exp_bits, i.man_bits,
               f == MPT_FORMAT_TF32 ? ", stored in 32" : "", i.max_finite, i.min_normal, ilogb(i.min_normal), sub,
               i.unit_roundoff, i.man_bits + 1, mpt_fmt_digits((mpt_format)f));
    }
    printf("\nUnit roundoff u = 2^-p (p = mantissa bits + 1): rounding to nearest changes a normal number by at most a\n"
           "relative u. TF32 has FP16's precision and FP32's range; BF16 has FP32's range with 8 significant bits;\n"
           "FP16 has 11 significant bits but a range of 2^-24 .. 65504, which is why fp16 training scales the loss.\n"
           "TF32's subnormals are FP32's with 10 mantissa bits, as the engine rounds them (hardware may flush them).\n"
           "FP8 (OCP v1.0) is used with a scale per tensor (TransformerEngine) or per block (OCP MX): its range alone\n"
           "is far too narrow. E4M3 has no inf: a non-saturating overflow is NaN. E8M0 holds the power-of-two scale\n"
           "of an MX block of 32 elements (OCP MX v1.0); it has no sign, no zero and no mantissa.\n");
    printf("\n| integer format | bits | codes used | largest | grid step | largest error |\n|---|---|---|---:|---:|---|\n");
    for (int f = 0; f < MPT_INT_FORMAT_COUNT; f++) {
        const mpt_int_format_desc *d = mpt_int_format_info((mpt_int_format)f);
        printf("| %s | %d, two's complement | -%d .. %d (%d unused) | %d s | s | s / 2 up to |x| = %d.5 s; past it, "
               "clamped |\n", d->name, d->bits, d->qmax, d->qmax, d->code_min, d->qmax, d->qmax);
    }
    printf("\nINT8 and INT4 have no exponent: one scale s (FP32) sets a uniform grid, q = clamp(round_half_even(x / s),\n"
           "-qmax, qmax) stands for q * s. The error is absolute, at most s / 2 wherever |x| <= (qmax + 1/2) s, so the\n"
           "relative error grows without bound toward zero (values below s / 2 become 0); a floating-point format's is\n"
           "at most its unit roundoff over its whole normal range. From amax, s = amax / qmax clamps nothing. Inference\n"
           "uses them for weights and activations (one scale per tensor or per output channel: mptrain eval\n"
           "--quantize); training keeps floating point, whose gradients span many binades (docs/numerics.md).\n");
}

/* A finite number, the whole argument. */
static int parse_value(const char *s, double *x) {
    if (!*s || isspace((unsigned char)s[0])) return -1;
    errno = 0;
    char *end = NULL;
    *x = strtod(s, &end);
    if (*end != '\0' || !isfinite(*x)) return -1;
    return 0;
}

int mpt_cmd_formats(int argc, char **argv) {
    int n = 0, sat = 1, values_only = 0; /* values_only: after "--" */
    double xs[256], int_scale = 0.0; /* 0: from the values' amax */
    const char *texts[256];
    for (int i = 1; i < argc; i++) {
        if (!values_only && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
            print_help(stdout);
            return 0;
        }
        char esc[256];
        if (!values_only && strncmp(argv[i], "--fp8-saturate", 14) == 0 && (argv[i][14] == '\0' || argv[i][14] == '=')) {
            const char *v = argv[i][14] == '=' ? argv[i] + 15 : (i + 1 < argc ? argv[++i] : NULL);
            if (v && strcmp(v, "on") == 0) sat = 1;
            else if (v && strcmp(v, "off") == 0) sat = 0;
            else {
                fprintf(stderr, "mptrain formats: --fp8-saturate: expected on or off, found '%s'\n",
                        mpt_cli_echo(esc, sizeof esc, v ? v : ""));
                return MPT_CLI_EXIT_USAGE;
            }
            continue;
        }
        if (!values_only && strncmp(argv[i], "--int-scale", 11) == 0 && (argv[i][11] == '\0' || argv[i][11] == '=')) {
            const char *v = argv[i][11] == '=' ? argv[i] + 12 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || parse_value(v, &int_scale) != 0 || !(int_scale > 0.0) || !isfinite((float)int_scale) ||
                (float)int_scale == 0.0f) {
                fprintf(stderr, "mptrain formats: --int-scale: expected a number > 0 that is finite and nonzero in "
                                "FP32 (such as 0.5 or 1e-3), found '%s'\n", mpt_cli_echo(esc, sizeof esc, v ? v : ""));
                return MPT_CLI_EXIT_USAGE;
            }
            continue;
        }
        if (strcmp(argv[i], "--") == 0 && !values_only) { /* getopt's convention: the rest are values (-5 too) */
            values_only = 1;
            continue;
        }
        if (!values_only && argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "mptrain formats: unknown option '%s' (see mptrain formats --help)\n",
                    mpt_cli_echo(esc, sizeof esc, argv[i]));
            return MPT_CLI_EXIT_USAGE;
        }
        if (n == 256) {
            fprintf(stderr, "mptrain formats: at most 256 values, found more\n");
            return MPT_CLI_EXIT_USAGE;
        }
        if (parse_value(argv[i], &xs[n]) != 0) {
            fprintf(stderr, "mptrain formats: expected a finite number such as 3.14, 1e-5 or 0x1p-14 (C's strtod: "
                            "decimal or hexadecimal), found '%s'\n",
                    mpt_cli_echo(esc, sizeof esc, argv[i]));
            return MPT_CLI_EXIT_USAGE;
        }
        texts[n++] = argv[i];
    }
    if (n == 0)
        for (; n < (int)(sizeof default_values / sizeof default_values[0]); n++) {
            texts[n] = default_values[n];
            parse_value(texts[n], &xs[n]);
        }
    printf("FP8 overflow: %s\n\n", sat ? "saturating to +-max (--fp8-saturate on, the default)"
                                       : "non-saturating: NaN in E4M3, inf in E5M2 (--fp8-saturate off)");
    float scale[MPT_INT_FORMAT_COUNT];
    for (int f = 0; f < MPT_INT_FORMAT_COUNT; f++)
        scale[f] = int_scale > 0.0 ? (float)int_scale : mpt_fmt_int_scale((mpt_int_format)f, xs, n);
    if (int_scale > 0.0)
        printf("INT8 / INT4: scale s = %.9g (--int-scale; as FP32 %.9g): values past 127.5 s / 7.5 s clamp\n\n", int_scale,
               (double)scale[0]);
    else {
        double amax = 0.0;
        for (int i = 0; i < n; i++) amax = fmax(amax, fabs((double)(float)xs[i]));
        if (amax > 0.0 && isfinite(amax))
            printf("INT8 / INT4: one scale for all the values, from their amax %.9g: s = amax / 127 = %.9g (INT8), amax "
                   "/ 7 = %.9g (INT4); --int-scale S sets it\n\n", amax, (double)scale[0], (double)scale[1]);
        else /* mpt_int_scale_from_amax's fallback: amax / qmax would be 0 or inf */
            printf("INT8 / INT4: the values' amax is %s in FP32, which gives no scale (amax / 127 would be %s): s falls "
                   "back to %.9g (INT8), %.9g (INT4), as eval --quantize does; --int-scale S sets it\n\n",
                   amax > 0.0 ? "inf" : "0", amax > 0.0 ? "inf" : "0", (double)scale[0], (double)scale[1]);
    }
    for (int i = 0; i < n; i++) print_value(texts[i], xs[i], sat, scale);
    print_table();
    return 0;
}
