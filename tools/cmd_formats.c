/*
 * tools/cmd_formats.c - `mptrain formats [--fp8-saturate on|off] [VALUE...]`: each value's bits, rounded value and
 * error in FP32, TF32, BF16, FP16, FP8 E4M3 / E5M2 and E8M0, through the engine's conversions (tools/formats.h),
 * then the table of the formats' constants.
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
    fprintf(f, "Usage: mptrain formats [--fp8-saturate on|off] [VALUE...]\n"
               "Shows each VALUE (default: 3.14159265 0.1 65504 65536 1e-5 1e-8 500) in FP32, TF32, BF16, FP16, the\n"
               "OCP FP8 formats E4M3 and E5M2, and E8M0 (the power-of-two scale of an MX block): its bits (sign |\n"
               "exponent | mantissa), the value after rounding to nearest even, the absolute and relative error, and\n"
               "whether it overflowed, saturated, became subnormal or flushed to zero. Then the table of the formats:\n"
               "bits, largest finite, smallest normal, smallest subnormal, unit roundoff, decimal digits. The\n"
               "conversions are the engine's own (engine/numerics.h), so this is what training does: a value becomes\n"
               "FP32 first, the narrower formats round that FP32. (FP8 is used with a scale per tensor or per block:\n"
               "what FP8 holds is x * s.)\n"
               "\nOptions:\n"
               "  --fp8-saturate on|off     FP8 overflow: on (default; CUDA's __NV_SATFINITE, TransformerEngine's casts)\n"
               "                            clamps to +-448 / +-57344; off gives NaN (E4M3) / inf (E5M2), as ml_dtypes'\n"
               "                            casts do\n"
               "  --help                    show this help\n");
}

static const char *status_text(mpt_fmt f, const mpt_fmt_value *v) {
    if (v->unrepresentable) return v->value > 0.0 ? "no zero in E8M0: its smallest code, 2^-127" : "negative: NaN (E8M0 has no sign)";
    if (v->saturated)
        return f == MPT_FMT_E4M3 ? "overflow -> saturated to 448 (non-saturating: NaN)"
                                 : "overflow -> saturated to 57344 (non-saturating: inf)";
    if (v->overflow) return f == MPT_FMT_E4M3 ? "overflow -> NaN (E4M3 has no inf)" : "overflow -> inf";
    if (v->flushed) return "flushed to zero (below half the smallest subnormal)";
    if (v->subnormal) return v->exact ? "subnormal, exact" : "subnormal (fewer significant bits)";
    return v->exact ? "exact" : "rounded";
}

static void print_value(const char *text, double x, int sat) {
    char esc[256]; /* the argument as given, cut to a readable length */
    printf("%s  (as a double: %.17g)\n", mpt_cli_echo(esc, sizeof esc, text), x);
    printf("  %-9s %-38s %-10s %-24s %-10s %-10s %s\n", "format", "sign | exponent | mantissa", "hex", "value after RNE",
           "abs error", "rel error", "");
    for (int f = 0; f < MPT_FMT_COUNT; f++) {
        mpt_fmt_info info;
        mpt_fmt_describe((mpt_fmt)f, &info);
        mpt_fmt_value v;
        mpt_fmt_convert((mpt_fmt)f, x, sat, &v);
        char bits[64], hex[16], val[32], ae[16], re[16];
        mpt_fmt_bits_text((mpt_fmt)f, v.bits, bits, sizeof bits);
        int digits = (info.sign_bits + info.exp_bits + info.man_bits + 3) / 4;
        snprintf(hex, sizeof hex, "0x%0*x", digits, (unsigned)v.bits);
        snprintf(val, sizeof val, "%.9g", v.value);
        if (isnan(v.value)) snprintf(ae, sizeof ae, "-");
        else snprintf(ae, sizeof ae, "%.3g", v.abs_err);
        if (isfinite(v.rel_err)) snprintf(re, sizeof re, "%.3g", v.rel_err);
        else snprintf(re, sizeof re, "-");
        printf("  %-9s %-38s %-10s %-24s %-10s %-10s %s\n", info.name, bits, hex, val, ae, re, status_text((mpt_fmt)f, &v));
    }
    printf("\n");
}

static void print_table(void) {
    printf("| format | bits (sign/exp/mantissa) | largest finite | smallest normal | smallest subnormal | "
           "unit roundoff | decimal digits |\n|---|---|---:|---:|---:|---:|---:|\n");
    for (int f = 0; f < MPT_FMT_COUNT; f++) {
        mpt_fmt_info i;
        mpt_fmt_describe((mpt_fmt)f, &i);
        char sub[48];
        if (f == MPT_FMT_E8M0) snprintf(sub, sizeof sub, "none");
        else snprintf(sub, sizeof sub, "%.6g (2^%d)", i.min_subnormal, ilogb(i.min_subnormal));
        printf("| %s | %d (%d/%d/%d)%s | %.6g | %.6g (2^%d) | %s | %.3g (2^-%d) | %.2f |\n", i.name,
               i.sign_bits + i.exp_bits + i.man_bits, i.sign_bits, i.exp_bits, i.man_bits,
               f == MPT_FMT_TF32 ? ", stored in 32" : "", i.max_finite, i.min_normal, ilogb(i.min_normal), sub,
               i.unit_roundoff, i.man_bits + 1, i.digits);
    }
    printf("\nUnit roundoff u = 2^-p (p = mantissa bits + 1): rounding to nearest changes a normal number by at most a\n"
           "relative u. TF32 has FP16's precision and FP32's range; BF16 has FP32's range with 8 significant bits;\n"
           "FP16 has 11 significant bits but a range of 2^-24 .. 65504, which is why fp16 training scales the loss.\n"
           "TF32's subnormals are FP32's with 10 mantissa bits, as the engine rounds them (hardware may flush them).\n"
           "FP8 (OCP v1.0) is used with a scale per tensor (TransformerEngine) or per block (OCP MX): its range alone\n"
           "is far too narrow. E4M3 has no inf: a non-saturating overflow is NaN. E8M0 holds the power-of-two scale\n"
           "of an MX block of 32 elements (OCP MX v1.0); it has no sign, no zero and no mantissa.\n");
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
    int n = 0, sat = 1;
    double xs[256];
    const char *texts[256];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return 0;
        }
        char esc[256];
        if (strncmp(argv[i], "--fp8-saturate", 14) == 0 && (argv[i][14] == '\0' || argv[i][14] == '=')) {
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
        if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "mptrain formats: unknown option '%s' (see mptrain formats --help)\n",
                    mpt_cli_echo(esc, sizeof esc, argv[i]));
            return MPT_CLI_EXIT_USAGE;
        }
        if (n == 256) {
            fprintf(stderr, "mptrain formats: at most 256 values, found more\n");
            return MPT_CLI_EXIT_USAGE;
        }
        if (parse_value(argv[i], &xs[n]) != 0) {
            fprintf(stderr, "mptrain formats: expected a finite decimal number such as 3.14 or 1e-5, found '%s'\n",
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
    for (int i = 0; i < n; i++) print_value(texts[i], xs[i], sat);
    print_table();
    return 0;
}
