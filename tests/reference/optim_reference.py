#!/usr/bin/python3
"""tests/reference/optim_reference.py - PyTorch reference trajectories for tests/test_optim.c.

Runs 5 steps of torch.optim.SGD (plain; momentum; nesterov; weight decay; dampening; with
torch.nn.utils.clip_grad_norm_), Adam (default; L2 weight decay with other betas/eps) and AdamW (weight decay;
with clipping) on two FP32 parameter tensors (w: 16 elements, b: 5) with fixed per-step gradients, and writes a
C header with the inputs and every step's parameters and optimizer state as hex floats (exact).

Inputs are closed-form values rounded to FP32 here and stored in the header, so the C test reads the very same
bits and needs no Python. Every hyper-parameter is rounded to FP32 before PyTorch sees it, because mptrain keeps
hyper-parameters as FP32 (mpt_optim_hparams): with beta2 = 0.999 as a Python float, 1 - beta2 alone would differ
by 1.3e-5 relative from 1 - (float)0.999. PyTorch runs its single-tensor CPU path (foreach=False).

Usage (Debian: apt-get install python3-torch):
    /usr/bin/python3 tests/reference/optim_reference.py > tests/reference/optim_reference.h
"""
import math
import struct
import sys

import torch

STEPS = 5
NW, NB = 16, 5
N = NW + NB


def f32(x):
    """x rounded to the nearest FP32 value (as a Python float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def p0_value(i):
    return f32(0.8 * math.sin(0.37 * i + 0.5) + 0.05 * i - 0.3)


def grad_value(k, i):
    """Gradient of element i at step k (0-based): magnitudes 1e-2..1e2, one tiny element (eps-dominated in
    Adam), an exact zero at one step."""
    if i == 3:
        return f32(1e-9 * (1.0 + 0.5 * math.sin(k + 1.0)))
    if i == 7 and k == 2:
        return 0.0
    return f32(math.cos(1.3 * i + 0.7 * (k + 1)) * 10.0 ** ((i % 5) - 2))


P0 = [p0_value(i) for i in range(N)]
GRADS = [[grad_value(k, i) for i in range(N)] for k in range(STEPS)]

# name, kind, lr, momentum, dampening, weight_decay, nesterov, beta1, beta2, eps, max_norm (0: no clipping)
CASES = [
    ("sgd", "sgd", 0.1, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0),
    ("sgd_momentum", "sgd", 0.05, 0.9, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0),
    ("sgd_nesterov", "sgd", 0.05, 0.9, 0.0, 0.0, 1, 0.0, 0.0, 0.0, 0.0),
    ("sgd_weight_decay", "sgd", 0.05, 0.9, 0.0, 0.01, 0, 0.0, 0.0, 0.0, 0.0),
    ("sgd_dampening", "sgd", 0.05, 0.8, 0.3, 0.05, 0, 0.0, 0.0, 0.0, 0.0),
    ("sgd_clip", "sgd", 0.05, 0.9, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 1.0),
    ("adam", "adam", 0.01, 0.0, 0.0, 0.0, 0, 0.9, 0.999, 1e-8, 0.0),
    ("adam_l2", "adam", 0.01, 0.0, 0.0, 0.1, 0, 0.8, 0.99, 1e-6, 0.0),
    ("adamw", "adamw", 0.01, 0.0, 0.0, 0.1, 0, 0.9, 0.999, 1e-8, 0.0),
    ("adamw_clip", "adamw", 0.01, 0.0, 0.0, 0.01, 0, 0.9, 0.999, 1e-8, 0.5),
]


def run_case(case):
    name, kind, lr, mom, damp, wd, nest, b1, b2, eps, max_norm = case
    lr, mom, damp, wd, b1, b2, eps, max_norm = map(f32, (lr, mom, damp, wd, b1, b2, eps, max_norm))
    w = torch.nn.Parameter(torch.tensor(P0[:NW], dtype=torch.float32))
    b = torch.nn.Parameter(torch.tensor(P0[NW:], dtype=torch.float32))
    params = [w, b]
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=mom, dampening=damp, weight_decay=wd,
                              nesterov=bool(nest), foreach=False)
        keys = ["momentum_buffer"]
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
        keys = ["exp_avg", "exp_avg_sq"]
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
        keys = ["exp_avg", "exp_avg_sq"]

    def snapshot():
        p = torch.cat([w.detach(), b.detach()]).tolist()
        st = []
        for key in keys:
            parts = []
            for q in params:
                s = opt.state.get(q, {})
                t = s.get(key)
                parts.append(t.detach() if t is not None else torch.zeros_like(q.detach()))
            st.append(torch.cat(parts).tolist())
        while len(st) < 2:
            st.append([0.0] * N)
        return p, st[0], st[1]

    ps, ms, vs, coefs = [], [], [], []
    p, m, v = snapshot()
    ps.append(p), ms.append(m), vs.append(v)
    for k in range(STEPS):
        g = torch.tensor(GRADS[k], dtype=torch.float32)
        w.grad = g[:NW].clone()
        b.grad = g[NW:].clone()
        coef = 1.0
        if max_norm > 0:
            total = torch.nn.utils.clip_grad_norm_(params, max_norm)
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0).item()  # clip_grad_norm_'s own expression
        opt.step()
        p, m, v = snapshot()
        ps.append(p), ms.append(m), vs.append(v)
        coefs.append(coef)
    hp = dict(kind=kind, lr=lr, mom=mom, damp=damp, wd=wd, nest=nest, b1=b1, b2=b2, eps=eps, max_norm=max_norm)
    return name, hp, ps, ms, vs, coefs


def hexf(x):
    """Exact C hex-float literal of the FP32 value x, trailing zero digits dropped (0x1.8p+0f)."""
    x = f32(x)
    if x == 0.0:
        return "-0.0f" if math.copysign(1.0, x) < 0 else "0.0f"
    mant, exp = float.hex(x).split("p")
    mant = mant.rstrip("0").rstrip(".")
    return mant + "p" + exp + "f"


def arr(vals, indent):
    out, line = [], indent
    for i, x in enumerate(vals):
        item = hexf(x) + ("," if i + 1 < len(vals) else "")
        if len(line) + len(item) + 1 > 116:
            out.append(line.rstrip())
            line = indent
        line += item + " "
    out.append(line.rstrip())
    return "\n".join(out)


def main():
    torch.set_num_threads(1)
    w = sys.stdout.write
    w("/* tests/reference/optim_reference.h - GENERATED by tests/reference/optim_reference.py with PyTorch %s\n"
      " * (single-tensor CPU path, foreach=False). Do not edit: rerun the script. Values are FP32, as exact hex floats.\n"
      " * optref_p0: initial parameters (w = [0, %d), b = [%d, %d)); optref_grad[k]: gradient of step k+1;\n"
      " * optref_cases[c].p/m/v[k]: parameters and optimizer state after k steps (k = 0: initial). m is the SGD\n"
      " * momentum buffer or Adam's exp_avg, v Adam's exp_avg_sq (zero where the optimizer keeps none);\n"
      " * clip_coef[k]: PyTorch's clip coefficient min(1, max_norm / (total_norm + 1e-6)) of step k+1. */\n"
      % (torch.__version__, NW, NW, N))
    w("#ifndef MPT_TESTS_OPTIM_REFERENCE_H\n#define MPT_TESTS_OPTIM_REFERENCE_H\n\n")
    w("#define OPTREF_STEPS %d\n#define OPTREF_NW %d\n#define OPTREF_NB %d\n#define OPTREF_N %d\n\n" % (STEPS, NW, NB, N))
    w("static const float optref_p0[OPTREF_N] = {\n%s\n};\n\n" % arr(P0, "    "))
    w("static const float optref_grad[OPTREF_STEPS][OPTREF_N] = {\n")
    for k in range(STEPS):
        w("    {\n%s\n    },\n" % arr(GRADS[k], "        "))
    w("};\n\n")
    w("typedef struct optref_case {\n"
      "    const char *name;\n"
      "    const char *kind;      /* \"sgd\", \"adam\", \"adamw\" */\n"
      "    float lr, momentum, dampening, weight_decay;\n"
      "    int nesterov;\n"
      "    float beta1, beta2, eps;\n"
      "    float max_norm;        /* clip_grad_norm_ over w and b before each step; 0: no clipping */\n"
      "    float clip_coef[OPTREF_STEPS];\n"
      "    float p[OPTREF_STEPS + 1][OPTREF_N];\n"
      "    float m[OPTREF_STEPS + 1][OPTREF_N];\n"
      "    float v[OPTREF_STEPS + 1][OPTREF_N];\n"
      "} optref_case;\n\n")
    w("static const optref_case optref_cases[] = {\n")
    for case in CASES:
        name, hp, ps, ms, vs, coefs = run_case(case)
        w("    {\n        .name = \"%s\", .kind = \"%s\",\n" % (name, hp["kind"]))
        w("        .lr = %s, .momentum = %s, .dampening = %s, .weight_decay = %s, .nesterov = %d,\n"
          % (hexf(hp["lr"]), hexf(hp["mom"]), hexf(hp["damp"]), hexf(hp["wd"]), hp["nest"]))
        w("        .beta1 = %s, .beta2 = %s, .eps = %s, .max_norm = %s,\n"
          % (hexf(hp["b1"]), hexf(hp["b2"]), hexf(hp["eps"]), hexf(hp["max_norm"])))
        w("        .clip_coef = {%s},\n" % ", ".join(hexf(c) for c in coefs))
        for field, rows in (("p", ps), ("m", ms), ("v", vs)):
            w("        .%s = {\n" % field)
            for row in rows:
                w("            {\n%s\n            },\n" % arr(row, "                "))
            w("        },\n")
        w("    },\n")
    w("};\n\n#define OPTREF_NCASES ((int)(sizeof optref_cases / sizeof optref_cases[0]))\n\n#endif\n")


if __name__ == "__main__":
    main()
