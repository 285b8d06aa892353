/*
 * models/spec.c - a network written as text: the parser, its canonical form and the plan (every layer's shapes),
 * checked before any graph exists (models/models.h has the layers and their PyTorch counterparts).
 *
 * Grammar (whitespace anywhere between tokens; `#` to the end of a line is a comment; one comma may end the text):
 *   spec  := layer ("," layer)* [","]
 *   layer := kind ["(" [arg ("," arg)*] ")"]
 *   arg   := value | key "=" value        (positional arguments first, in the order of the layer's table below)
 *   value := a number, or for name= an identifier [A-Za-z_][A-Za-z0-9_]*
 * Every error is MPT_ERR_ARG with one line: the character position (1-based) and layer number, the token found there
 * and what was expected. Numbers are read whole (strtod; an integer argument must be an integer) and checked against
 * the argument's range.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

typedef enum { ARG_INT, ARG_FLOAT } arg_type;

typedef struct arg_def {
    const char *key, *alias; /* the PyTorch name and the short one (NULL: none) */
    arg_type type;
    int required;
    double lo, hi;           /* allowed range (inclusive; hi_open excludes hi) */
    int hi_open;
    double def;              /* default when not required (-1 for "the kernel", pools' stride) */
    int positional;          /* printed positionally in the canonical text (required ones always are) */
} arg_def;

typedef struct kind_def {
    const char *name, *alias; /* spec names */
    const char *prefix;       /* default layer name's prefix */
    int n_args;
    arg_def args[4];
} kind_def;

#define BIG 65536.0

static const kind_def kinds[MPT_LAYER_COUNT] = {
    [MPT_LAYER_CONV] = {"conv", "conv2d", "conv", 4,
                        {{"out_channels", NULL, ARG_INT, 1, 1, BIG, 0, 0},
                         {"kernel", "kernel_size", ARG_INT, 1, 1, 1024, 0, 0},
                         {"stride", NULL, ARG_INT, 0, 1, 1024, 0, 1},
                         {"pad", "padding", ARG_INT, 0, 0, 1024, 0, 0}}},
    [MPT_LAYER_LINEAR] = {"linear", NULL, "fc", 1, {{"out_features", "out", ARG_INT, 0, 1, BIG * 16, 0, 0, 1}}},
    [MPT_LAYER_MAXPOOL] = {"maxpool", "maxpool2d", "pool", 2,
                           {{"kernel", "kernel_size", ARG_INT, 1, 1, 1024, 0, 0},
                            {"stride", NULL, ARG_INT, 0, 1, 1024, 0, -1}}},
    [MPT_LAYER_AVGPOOL] = {"avgpool", "avgpool2d", "avgpool", 2,
                           {{"kernel", "kernel_size", ARG_INT, 1, 1, 1024, 0, 0},
                            {"stride", NULL, ARG_INT, 0, 1, 1024, 0, -1}}},
    [MPT_LAYER_GLOBALAVGPOOL] = {"globalavgpool", NULL, "gap", 0, {{0}}},
    [MPT_LAYER_FLATTEN] = {"flatten", NULL, "flatten", 0, {{0}}},
    [MPT_LAYER_DROPOUT] = {"dropout", NULL, "dropout", 1, {{"p", NULL, ARG_FLOAT, 0, 0, 1, 1, 0.5, 1}}},
    [MPT_LAYER_BATCHNORM] = {"batchnorm", NULL, "bn", 2,
                             {{"eps", NULL, ARG_FLOAT, 0, 1e-30, 1, 0, 1e-5},
                              {"momentum", NULL, ARG_FLOAT, 0, 0, 1, 0, 0.1}}},
    [MPT_LAYER_LAYERNORM] = {"layernorm", NULL, "ln", 1, {{"eps", NULL, ARG_FLOAT, 0, 1e-30, 1, 0, 1e-5}}},
    [MPT_LAYER_RELU] = {"relu", NULL, "relu", 0, {{0}}},
    [MPT_LAYER_GELU] = {"gelu", NULL, "gelu", 0, {{0}}},
    [MPT_LAYER_TANH] = {"tanh", NULL, "tanh", 0, {{0}}},
    [MPT_LAYER_SIGMOID] = {"sigmoid", NULL, "sigmoid", 0, {{0}}},
    [MPT_LAYER_LEAKYRELU] = {"leakyrelu", NULL, "leakyrelu", 1,
                             {{"negative_slope", NULL, ARG_FLOAT, 0, -1e6, 1e6, 0, 0.01, 1}}},
};
_Static_assert(sizeof kinds / sizeof kinds[0] == MPT_LAYER_COUNT, "one row per mpt_layer_kind");

const char *mpt_layer_kind_name(mpt_layer_kind k) { return (unsigned)k < MPT_LAYER_COUNT ? kinds[k].name : "?"; }

/* Names a layer may not take: the graph's own tensors (engine/graph.h, engine/train.c). */
static const char *const reserved[] = {"input", "loss", "labels", "n_correct", "data", "amp"};

/* ---- the cursor ------------------------------------------------------------------------------------------ */

typedef struct cursor {
    const char *s, *p; /* the text, the position */
    int layer;         /* 1-based number of the layer being read */
} cursor;

static void skip_space(cursor *c) {
    for (;;) {
        while (*c->p && isspace((unsigned char)*c->p)) c->p++;
        if (*c->p != '#') return;
        while (*c->p && *c->p != '\n') c->p++;
    }
}

/* The token at the cursor, for messages: an identifier or number, one other character, or "the end". */
static const char *token_text(const cursor *c, char *buf, size_t len) {
    const char *p = c->p;
    if (!*p) return "the end of the spec";
    size_t n = 0;
    if (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-' || *p == '+')
        while (p[n] && (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '.' || p[n] == '-' || p[n] == '+') &&
               n < 32)
            n++;
    else
        n = 1;
    snprintf(buf, len, "'%.*s'", (int)n, p);
    return buf;
}

/* MPT_ERR_ARG: "at character N (layer L), found TOKEN: expected WHAT". */
static mpt_status expected(const cursor *c, const char *what) {
    char tok[48];
    return mpt_errorf(MPT_ERR_ARG, "at character %d (layer %d), found %s: expected %s", (int)(c->p - c->s) + 1,
                      c->layer, token_text(c, tok, sizeof tok), what);
}

static int read_ident(cursor *c, char *buf, size_t len) {
    const char *p = c->p;
    if (!(isalpha((unsigned char)*p) || *p == '_')) return 0;
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    if (n >= len) return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    c->p += n;
    return 1;
}

/* The list of a kind's arguments for messages: "out_channels, kernel, stride, pad". */
static const char *arg_list(const kind_def *k, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < k->n_args && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", k->args[i].key);
    return buf;
}

static const char *kind_list(char *buf, size_t len) {
    size_t n = 0;
    for (int i = 0; i < MPT_LAYER_COUNT && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", kinds[i].name);
    return buf;
}

static int find_kind(const char *name) {
    for (int i = 0; i < MPT_LAYER_COUNT; i++)
        if (strcmp(name, kinds[i].name) == 0 || (kinds[i].alias && strcmp(name, kinds[i].alias) == 0)) return i;
    return -1;
}

static int find_arg(const kind_def *k, const char *key) {
    for (int i = 0; i < k->n_args; i++)
        if (strcmp(key, k->args[i].key) == 0 || (k->args[i].alias && strcmp(key, k->args[i].alias) == 0)) return i;
    return -1;
}

/* Sets argument a of layer l to v (checked). */
static void set_arg(mpt_model_layer *l, int a, double v) {
    switch (l->kind) {
    case MPT_LAYER_CONV:
        if (a == 0) l->out = (int)v;
        else if (a == 1) l->kernel = (int)v;
        else if (a == 2) l->stride = (int)v;
        else l->pad = (int)v;
        break;
    case MPT_LAYER_LINEAR: l->out = (int)v; break;
    case MPT_LAYER_MAXPOOL:
    case MPT_LAYER_AVGPOOL:
        if (a == 0) l->kernel = (int)v;
        else l->stride = (int)v;
        break;
    case MPT_LAYER_DROPOUT: l->p = (float)v; break;
    case MPT_LAYER_BATCHNORM:
        if (a == 0) l->eps = (float)v;
        else l->momentum = (float)v;
        break;
    case MPT_LAYER_LAYERNORM: l->eps = (float)v; break;
    case MPT_LAYER_LEAKYRELU: l->slope = (float)v; break;
    default: break;
    }
}

static double get_arg(const mpt_model_layer *l, int a) {
    switch (l->kind) {
    case MPT_LAYER_CONV: return a == 0 ? l->out : a == 1 ? l->kernel : a == 2 ? l->stride : l->pad;
    case MPT_LAYER_LINEAR: return l->out;
    case MPT_LAYER_MAXPOOL:
    case MPT_LAYER_AVGPOOL: return a == 0 ? l->kernel : l->stride;
    case MPT_LAYER_DROPOUT: return l->p;
    case MPT_LAYER_BATCHNORM: return a == 0 ? l->eps : l->momentum;
    case MPT_LAYER_LAYERNORM: return l->eps;
    case MPT_LAYER_LEAKYRELU: return l->slope;
    default: return 0;
    }
}

/* The defaults of a kind's layer (pools' stride 0: the kernel). */
static void set_defaults(mpt_model_layer *l) {
    const kind_def *k = &kinds[l->kind];
    for (int a = 0; a < k->n_args; a++)
        if (!k->args[a].required) set_arg(l, a, k->args[a].def < 0 ? 0 : k->args[a].def);
}

/* A number argument: the whole token must be the number, of the argument's type and range. */
static mpt_status read_value(cursor *c, const kind_def *k, const arg_def *d, double *out) {
    char what[160];
    if (d->type == ARG_INT)
        snprintf(what, sizeof what, "an integer in [%.0f, %.0f] for %s's %s", d->lo, d->hi, k->name, d->key);
    else
        snprintf(what, sizeof what, "a number in [%g, %g%s for %s's %s", d->lo, d->hi, d->hi_open ? ")" : "]", k->name,
                 d->key);
    errno = 0;
    char *end = NULL;
    double v = strtod(c->p, &end);
    if (end == c->p || errno == ERANGE || !isfinite(v)) return expected(c, what);
    const int next_ok = !*end || isspace((unsigned char)*end) || *end == ',' || *end == ')' || *end == '#';
    const int in_range = v >= d->lo && (d->hi_open ? v < d->hi : v <= d->hi);
    if (!next_ok || !in_range || (d->type == ARG_INT && v != floor(v))) return expected(c, what);
    c->p = end;
    *out = v;
    return MPT_OK;
}

static int valid_name(const char *s) {
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(s, reserved[i]) == 0) return 0;
    return 1;
}

static mpt_status parse_layer(cursor *c, mpt_model_layer *l) {
    char word[64], buf[256], what[320];
    skip_space(c);
    const char *start = c->p;
    if (!read_ident(c, word, sizeof word)) {
        snprintf(what, sizeof what, "a layer (%s)", kind_list(buf, sizeof buf));
        return expected(c, what);
    }
    int k = find_kind(word);
    if (k < 0) {
        c->p = start;
        snprintf(what, sizeof what, "a layer (%s)", kind_list(buf, sizeof buf));
        return expected(c, what);
    }
    memset(l, 0, sizeof *l);
    l->kind = (mpt_layer_kind)k;
    l->pos = c->layer;
    set_defaults(l);
    const kind_def *kd = &kinds[k];
    skip_space(c);
    if (*c->p != '(') {
        for (int a = 0; a < kd->n_args; a++)
            if (kd->args[a].required) {
                snprintf(what, sizeof what, "'(' and %s's arguments (%s)", kd->name, arg_list(kd, buf, sizeof buf));
                return expected(c, what);
            }
        return MPT_OK;
    }
    c->p++;
    int given[4] = {0}, positional = 0, keyword = 0;
    skip_space(c);
    if (*c->p == ')') {
        c->p++;
    } else {
        for (;;) {
            skip_space(c);
            const char *argstart = c->p;
            char key[64];
            int a = -1;
            if (read_ident(c, key, sizeof key)) {
                skip_space(c);
                if (*c->p != '=') {
                    c->p = argstart;
                    snprintf(what, sizeof what, "a value or key=value for %s (%s%sname)", kd->name,
                             arg_list(kd, buf, sizeof buf), kd->n_args ? ", " : "");
                    return expected(c, what);
                }
                c->p++;
                skip_space(c);
                keyword = 1;
                if (strcmp(key, "name") == 0) {
                    const char *vs = c->p;
                    if (l->named) {
                        c->p = argstart;
                        return expected(c, "each argument once (name given twice)");
                    }
                    if (!read_ident(c, l->name, sizeof l->name) || !valid_name(l->name)) {
                        c->p = vs;
                        return expected(c, "a layer name: a letter or _, then letters, digits or _, at most 31, not "
                                           "input, loss, labels, n_correct, data or amp");
                    }
                    l->named = 1;
                } else {
                    a = find_arg(kd, key);
                    if (a < 0) {
                        c->p = argstart;
                        snprintf(what, sizeof what, "an argument of %s (%s%sname)", kd->name,
                                 arg_list(kd, buf, sizeof buf), kd->n_args ? ", " : "");
                        return expected(c, what);
                    }
                    if (given[a]) {
                        c->p = argstart;
                        snprintf(what, sizeof what, "each argument once (%s given twice)", kd->args[a].key);
                        return expected(c, what);
                    }
                }
            } else {
                if (keyword) {
                    snprintf(what, sizeof what, "key=value (positional arguments come first, in the order %s)",
                             arg_list(kd, buf, sizeof buf));
                    return expected(c, what);
                }
                if (positional >= kd->n_args) {
                    snprintf(what, sizeof what, "')': %s takes %d argument%s (%s%sname=)", kd->name, kd->n_args,
                             kd->n_args == 1 ? "" : "s", arg_list(kd, buf, sizeof buf), kd->n_args ? ", " : "");
                    return expected(c, what);
                }
                a = positional++;
            }
            if (a >= 0) {
                double v = 0.0;
                MPT_TRY(read_value(c, kd, &kd->args[a], &v));
                set_arg(l, a, v);
                given[a] = 1;
            }
            skip_space(c);
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p == ')') {
                c->p++;
                break;
            }
            return expected(c, "',' or ')'");
        }
    }
    for (int a = 0; a < kd->n_args; a++)
        if (kd->args[a].required && !given[a]) {
            snprintf(what, sizeof what, "%s's argument %s (%s takes %s)", kd->name, kd->args[a].key, kd->name,
                     arg_list(kd, buf, sizeof buf));
            c->p--; /* at the ')' */
            return expected(c, what);
        }
    return MPT_OK;
}

static mpt_status parse_spec(const char *text, mpt_model_plan *out) {
    memset(out, 0, sizeof *out);
    cursor c = {text, text, 1};
    skip_space(&c);
    if (!*c.p) return expected(&c, "a layer: the spec is empty");
    for (;;) {
        if (out->n == MPT_MODEL_MAX_LAYERS) {
            char what[64];
            snprintf(what, sizeof what, "the end: at most %d layers", MPT_MODEL_MAX_LAYERS);
            return expected(&c, what);
        }
        MPT_TRY(parse_layer(&c, &out->layer[out->n]));
        out->n++;
        skip_space(&c);
        if (!*c.p) break;
        if (*c.p != ',') return expected(&c, "',' between layers, or the end");
        c.p++;
        c.layer++;
        skip_space(&c);
        if (!*c.p) break; /* one trailing comma */
    }
    /* a linear layer without its width is the last layer's privilege (the class count) */
    for (int i = 0; i < out->n; i++)
        if (out->layer[i].kind == MPT_LAYER_LINEAR && out->layer[i].out == 0 && i != out->n - 1)
            return mpt_errorf(MPT_ERR_ARG, "layer %d (linear): expected its width, linear(out_features): only the last "
                              "layer may leave it to the class count", i + 1);
    /* names: given, or the kind's prefix and, when the kind occurs more than once, its number */
    int count[MPT_LAYER_COUNT] = {0}, seen[MPT_LAYER_COUNT] = {0};
    for (int i = 0; i < out->n; i++) count[out->layer[i].kind]++;
    for (int i = 0; i < out->n; i++) {
        mpt_model_layer *l = &out->layer[i];
        int k = ++seen[l->kind];
        if (l->named) continue;
        if (count[l->kind] > 1) snprintf(l->name, sizeof l->name, "%s%d", kinds[l->kind].prefix, k);
        else snprintf(l->name, sizeof l->name, "%s", kinds[l->kind].prefix);
    }
    for (int i = 0; i < out->n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(out->layer[i].name, out->layer[j].name) == 0)
                return mpt_errorf(MPT_ERR_ARG, "layer %d (%s): the name '%s' is layer %d's already: expected names that "
                                  "differ (give name=...)", i + 1, kinds[out->layer[i].kind].name, out->layer[i].name,
                                  j + 1);
    return MPT_OK;
}

mpt_status mpt_model_parse(const char *model, mpt_model_plan *out) {
    if (!model) return mpt_errorf(MPT_ERR_ARG, "no model");
    const char *spec = mpt_model_spec_of(model);
    return parse_spec(spec ? spec : model, out);
}

/* The shortest %g of v that reads back as the same float. */
static void fmt_float(char *buf, size_t len, double v) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if ((float)strtod(buf, NULL) == (float)v) return;
    }
}

const char *mpt_model_layer_text(const mpt_model_layer *l, char *buf, size_t len) {
    const kind_def *k = &kinds[l->kind];
    size_t n = (size_t)snprintf(buf, len, "%s", k->name);
    int any = 0;
    for (int a = 0; a < k->n_args && n < len; a++) {
        const arg_def *d = &k->args[a];
        double v = get_arg(l, a);
        if (l->kind == MPT_LAYER_LINEAR && v == 0) continue; /* the class count */
        if (!d->required) {
            if (d->def < 0 && v == 0) continue; /* pools: stride not given, the kernel */
            double def = d->def < 0 ? (double)l->kernel : d->def;
            if (d->type == ARG_FLOAT ? (float)v == (float)def : v == def) continue;
        }
        char num[32];
        if (d->type == ARG_INT) snprintf(num, sizeof num, "%d", (int)v);
        else fmt_float(num, sizeof num, v);
        const int pos = d->required || d->positional;
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s%s%s", any ? "," : "(", pos ? "" : d->key,
                              pos ? "" : "=", num);
        any = 1;
    }
    if (l->named && n < len) {
        n += (size_t)snprintf(buf + n, len - n, "%sname=%s", any ? "," : "(", l->name);
        any = 1;
    }
    if (any && n < len) snprintf(buf + n, len - n, ")");
    return buf;
}

mpt_status mpt_model_canonical(const char *model, char *buf, size_t len) {
    if (model && mpt_model_exists(model)) {
        if (strlen(model) >= len) return mpt_errorf(MPT_ERR_ARG, "model name too long");
        snprintf(buf, len, "%s", model);
        return MPT_OK;
    }
    mpt_model_plan *p = malloc(sizeof *p);
    if (!p) return mpt_errorf(MPT_ERR_NOMEM, "out of memory");
    mpt_status s = parse_spec(model ? model : "", p);
    size_t n = 0;
    for (int i = 0; s == MPT_OK && i < p->n; i++) {
        char one[256];
        mpt_model_layer_text(&p->layer[i], one, sizeof one);
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", i ? "," : "", one);
    }
    free(p);
    if (s == MPT_OK && n >= len)
        s = mpt_errorf(MPT_ERR_ARG, "the spec's canonical text has %zu bytes, more than %zu", n, len - 1);
    return s;
}

/* ---- the plan: shapes --------------------------------------------------------------------------------------- */

static const char *shape_text(char *buf, size_t len, int ndim, const int64_t *s) {
    if (ndim == 4) snprintf(buf, len, "[B, %lld, %lld, %lld]", (long long)s[0], (long long)s[1], (long long)s[2]);
    else snprintf(buf, len, "[B, %lld]", (long long)s[0]);
    return buf;
}

/* MPT_ERR_ARG naming layer l (position, text, name), its input shape and what was wrong. */
static mpt_status shape_error(const mpt_model_layer *l, int ndim, const int64_t *s, const char *why) {
    char t[256], sh[96];
    return mpt_errorf(MPT_ERR_ARG, "layer %d %s (%s): its input is %s; %s", l->pos, mpt_model_layer_text(l, t, sizeof t),
                      l->name, shape_text(sh, sizeof sh, ndim, s), why);
}

mpt_status mpt_model_plan_make(const char *model, const mpt_model_input *in, mpt_model_plan *out) {
    MPT_TRY(mpt_model_parse(model, out));
    if (in->channels < 1 || in->height < 1 || in->width < 1 || in->classes < 2)
        return mpt_errorf(MPT_ERR_ARG, "the data's images are %d x %d with %d channels and %d classes: expected at least "
                          "1 x 1 x 1 and 2 classes", in->height, in->width, in->channels, in->classes);
    out->in = *in;
    int ndim = 4;
    int64_t s[3] = {in->channels, in->height, in->width};
    const int64_t max_features = (int64_t)1 << 31;
    for (int i = 0; i < out->n; i++) {
        mpt_model_layer *l = &out->layer[i];
        l->in_ndim = ndim;
        memcpy(l->in_shape, s, sizeof s);
        char why[256];
        switch (l->kind) {
        case MPT_LAYER_CONV: {
            if (ndim != 4) return shape_error(l, ndim, s, "conv takes [B, C, H, W]");
            const int64_t H = s[1] + 2 * l->pad, W = s[2] + 2 * l->pad;
            if (H < l->kernel || W < l->kernel) {
                snprintf(why, sizeof why, "its kernel %d is larger than the padded input %lld x %lld", l->kernel,
                         (long long)H, (long long)W);
                return shape_error(l, ndim, s, why);
            }
            s[0] = l->out;
            s[1] = (H - l->kernel) / l->stride + 1;
            s[2] = (W - l->kernel) / l->stride + 1;
            break;
        }
        case MPT_LAYER_LINEAR:
            if (ndim != 2) return shape_error(l, ndim, s, "linear takes [B, features]: put flatten before it");
            if (l->out == 0) l->out = in->classes; /* the last layer: the head */
            s[0] = l->out;
            break;
        case MPT_LAYER_MAXPOOL:
        case MPT_LAYER_AVGPOOL:
            if (ndim != 4) return shape_error(l, ndim, s, "pooling takes [B, C, H, W]");
            if (l->stride == 0) l->stride = l->kernel;
            if (s[1] < l->kernel || s[2] < l->kernel) {
                snprintf(why, sizeof why, "its kernel %d is larger than the input's %lld x %lld", l->kernel,
                         (long long)s[1], (long long)s[2]);
                return shape_error(l, ndim, s, why);
            }
            s[1] = (s[1] - l->kernel) / l->stride + 1;
            s[2] = (s[2] - l->kernel) / l->stride + 1;
            break;
        case MPT_LAYER_GLOBALAVGPOOL:
            if (ndim != 4) return shape_error(l, ndim, s, "globalavgpool takes [B, C, H, W]");
            s[1] = s[2] = 1;
            break;
        case MPT_LAYER_FLATTEN:
            if (ndim == 4) s[0] = s[0] * s[1] * s[2];
            s[1] = s[2] = 1;
            l->folded = i == 0;
            ndim = 2;
            break;
        case MPT_LAYER_BATCHNORM:
        case MPT_LAYER_LAYERNORM:
        case MPT_LAYER_DROPOUT:
        case MPT_LAYER_RELU:
        case MPT_LAYER_GELU:
        case MPT_LAYER_TANH:
        case MPT_LAYER_SIGMOID:
        case MPT_LAYER_LEAKYRELU:
        case MPT_LAYER_COUNT: break;
        }
        if ((ndim == 4 ? s[0] * s[1] * s[2] : s[0]) >= max_features)
            return shape_error(l, l->in_ndim, l->in_shape, "its output has 2^31 or more features per example");
        l->out_ndim = ndim;
        memcpy(l->out_shape, s, sizeof s);
    }
    if (ndim != 2 || s[0] != in->classes) {
        char sh[96];
        return mpt_errorf(MPT_ERR_ARG, "the network ends in %s, the data has %d classes: expected [B, %d] (end with "
                          "linear, whose width is then the class count, or linear(%d))",
                          shape_text(sh, sizeof sh, ndim, s), in->classes, in->classes, in->classes);
    }
    out->planned = 1;
    return MPT_OK;
}
