#!/usr/bin/python3
"""bench/speedrun_pytorch.py - the recipe of `mptrain speedrun` in PyTorch, timed the way mptrain speedrun times
itself, for the side-by-side of issue 34 C (docs/speedrun.md).

The recipe is read from mptrain itself (`mptrain speedrun --print-recipe`, --mptrain PATH), so both programs train one
recipe: the network spec, optimizer, learning rate, schedule, batch size and epochs. An option of the recipe this
script does not implement is an error, never ignored.

What is the same as mptrain (tools/run.c, models/spec.c, engine/optim/schedule.h, engine/layers/batchnorm.c):
  - the network: the spec's layers as torch.nn modules (conv -> Conv2d, batchnorm -> BatchNorm2d/1d with eps and
    momentum, relu, maxpool -> MaxPool2d, flatten, linear -> Linear, ...), PyTorch's default initialisation (which
    mptrain copies: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, gamma 1 and beta 0);
  - the data: Fashion-MNIST's four IDX .gz files, pixels / 255, all of it on the device before the clock starts;
  - an epoch: a fresh random permutation, batches of B in that order, the last partial batch kept (60000 / 128: 468
    batches and one of 96, as DataLoader(drop_last=False)); mptrain pads that batch with rows its loss and batch norm
    leave out, which is the same arithmetic;
  - loss: mean softmax cross-entropy in FP32 over the batch;
  - optimizer: Adam (betas, eps, weight decay from the recipe), the learning rate of every step from mptrain's
    schedule (constant, step, or cosine with linear warm-up: lr(t) = min + (base - min) (1 + cos(pi (t - w) / (T -
    w))) / 2 after a warm-up lr(t) = base (t + 1) / w; T = epochs x batches per epoch);
  - one evaluation, after the last epoch, on the 10000 test images, batch norm from its running statistics;
  - the clock: the time to result runs from the start of training (data on the device, model built, after an untimed
    warm-up) to the final accuracy on the host, the epochs' permutations and the evaluation inside it.
What differs: the initial weights and the batch order come from torch's generator, not mptrain's Philox streams, so
runs agree in distribution, not bit for bit: compare means over seeds.

Precisions: fp32 (TF32 off), tf32 (CUDA: allow_tf32 for matmul and cuDNN), bf16 (torch.autocast bfloat16 around
forward and loss), fp16 (CUDA: autocast float16 + GradScaler(init 2^16, growth interval 2000), mptrain's dynamic loss
scale). Modes (--modes), PyTorch at its fastest where it can be:
  eager    the plain loop, Adam's default (foreach) implementation
  fused    CUDA: Adam(fused=True)
  graph    CUDA: the whole step (forward, backward, Adam(capturable=True)) captured once as a CUDA Graph and replayed
           (torch.cuda.graph; the learning rate a device tensor updated before each replay); the last partial batch
           runs eagerly. fp16 is not captured (GradScaler's step syncs with the host): skipped, and said so
  compile  CUDA, torch >= 2: torch.compile(model, mode=--compile-mode, default "default": inductor's kernels; "max-
           autotune-no-cudagraphs" searches for minutes) with Adam(fused=True)
Untimed, once per precision and mode: eager and fused train --warmup-steps steps on a throw-away model (cuDNN's
algorithm search, the allocator); graph captures the step, compile compiles the model (every batch shape of the
timed region). Each seed then re-initialises the same model in place (reset_parameters in construction order after
torch.manual_seed(seed): the weights a fresh model of that seed has; batch-norm statistics, gradients and Adam's state
zeroed), so captured graphs and compiled code are reused. This is more than mptrain gets: its untimed warm-up is a
throw-away network, and its own step graph is recorded inside the timed region (its second step).

Output: one JSON line per run on stdout, then a summary per (precision, mode): mean test accuracy with its 95% t
interval, the seeds at or above 90%, the time to result (host clock, CPU time; on CUDA also CUDA events from the first
step to the end of the evaluation). --json FILE writes all of it. The CPU here (Debian's python3-torch 1.13) has eager
fp32 and bf16 only.

Usage: /usr/bin/python3 bench/speedrun_pytorch.py [--mptrain build/tools/mptrain] [--device cpu|cuda]
       [--precisions fp32,bf16] [--modes eager,fused,graph,compile] [--seeds 10] [--threads N] [--data DIR]
       [--limit-train N] [--limit-test N] [--warmup-steps 5] [--json FILE]
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
TARGET = 90.0
COMPILE_MODE = "default"  # --compile-mode: torch.compile's mode ("max-autotune-no-cudagraphs" searches kernels for minutes)
# t_{0.975, df} for df = 1..30 (any table of Student's t); beyond 30 the normal 1.96 is within 2% of it
T975 = [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
        2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
        2.0518, 2.0484, 2.0452, 2.0423]


def process_age_s():
    """Seconds since this process started (/proc/self/stat field 22 against CLOCK_BOOTTIME), or None."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, AttributeError):
        return None


AGE_AT_IMPORT = process_age_s()  # the interpreter and `import torch`

# ---- the recipe ------------------------------------------------------------------------------------------------------

RECIPE_KEYS = {"model", "optimizer", "lr", "lr-schedule", "warmup-steps", "min-lr", "step-size", "gamma", "batch-size",
               "epochs", "weight-decay", "beta1", "beta2", "eps", "standardize"}


def read_recipe(mptrain):
    """The options `mptrain speedrun --print-recipe` prints, as a dict with mptrain's defaults filled in."""
    try:
        out = subprocess.run([mptrain, "speedrun", "--print-recipe"], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        sys.exit(f"speedrun_pytorch.py: --mptrain {mptrain}: cannot read the recipe ({e})")
    words = shlex.split(out)
    r = {"optimizer": "adam", "lr": "1e-3", "lr-schedule": "constant", "warmup-steps": "0", "min-lr": "0",
         "step-size": "1000", "gamma": "0.1", "batch-size": "128", "epochs": "5", "weight-decay": "0", "beta1": "0.9",
         "beta2": "0.999", "eps": "1e-8", "model": "mlp", "standardize": None, "given": set()}
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--") or w[2:] not in RECIPE_KEYS:
            sys.exit(f"speedrun_pytorch.py: the recipe has '{w}', which this script does not implement: add it here "
                     "before comparing")
        if w == "--standardize":
            r["standardize"] = "on"
            i += 1
            continue
        r[w[2:]] = words[i + 1]
        r["given"].add(w[2:])
        i += 2
    if r["optimizer"] not in ("adam", "adamw"):
        sys.exit(f"speedrun_pytorch.py: the recipe's optimizer {r['optimizer']} is not implemented here")
    r["text"] = out.strip()
    return r


def parse_spec(spec):
    """mptrain's layer spec (models/models.h) as [(kind, positional args, keyword args)]."""
    layers, depth, cur = [], 0, ""
    for ch in spec + ",":
        if ch == "," and depth == 0:
            if cur.strip():
                layers.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out = []
    for l in layers:
        name, pos, kw = l, [], {}
        if "(" in l:
            name, args = l[:l.index("(")], l[l.index("(") + 1:-1]
            for a in filter(None, (x.strip() for x in args.split(","))):
                if "=" in a:
                    k, v = a.split("=", 1)
                    kw[k.strip()] = v.strip()
                else:
                    pos.append(a)
        out.append((name.strip(), pos, kw))
    return out


def build_net(spec, shape=(1, 28, 28), classes=10):
    """The spec's network as nn.Sequential, shapes tracked as mptrain plans them (models/spec.c)."""
    c, h, w = shape
    flat = None  # features once flattened
    mods = []
    layers = parse_spec(spec)
    for i, (kind, pos, kw) in enumerate(layers):
        last = i == len(layers) - 1
        if kind == "conv":
            out, k = int(pos[0]), int(pos[1] if len(pos) > 1 else kw.get("kernel", kw.get("kernel_size")))
            stride = int(pos[2] if len(pos) > 2 else kw.get("stride", 1))
            pad = int(pos[3] if len(pos) > 3 else kw.get("pad", kw.get("padding", 0)))
            mods.append(nn.Conv2d(c, out, k, stride=stride, padding=pad))
            c, h, w = out, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        elif kind in ("maxpool", "avgpool"):
            k = int(pos[0])
            stride = int(pos[1] if len(pos) > 1 else kw.get("stride", k))
            mods.append((nn.MaxPool2d if kind == "maxpool" else nn.AvgPool2d)(k, stride))
            h, w = (h - k) // stride + 1, (w - k) // stride + 1
        elif kind == "globalavgpool":
            mods.append(nn.AdaptiveAvgPool2d(1))
            h = w = 1
        elif kind == "flatten":
            mods.append(nn.Flatten())
            flat = c * h * w
        elif kind == "linear":
            out = int(pos[0]) if pos else (classes if last else None)
            if out is None:
                sys.exit(f"speedrun_pytorch.py: linear without a width before the last layer in {spec}")
            mods.append(nn.Linear(flat, out))
            flat = out
        elif kind == "batchnorm":
            eps, mom = float(kw.get("eps", 1e-5)), float(kw.get("momentum", 0.1))
            mods.append(nn.BatchNorm1d(flat, eps=eps, momentum=mom) if flat is not None
                        else nn.BatchNorm2d(c, eps=eps, momentum=mom))
        elif kind == "layernorm":
            norm = [flat] if flat is not None else [c, h, w]
            mods.append(nn.LayerNorm(norm, eps=float(kw.get("eps", 1e-5))))
        elif kind == "dropout":
            mods.append(nn.Dropout(float(pos[0] if pos else kw.get("p", 0.5))))
        elif kind in ("relu", "gelu", "tanh", "sigmoid"):
            mods.append({"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[kind]())
        elif kind == "leakyrelu":
            mods.append(nn.LeakyReLU(float(pos[0] if pos else kw.get("negative_slope", 0.01))))
        else:
            sys.exit(f"speedrun_pytorch.py: layer '{kind}' of the recipe's spec is not implemented here")
    return nn.Sequential(*mods)


def lr_at(r, t, total):
    """mptrain's learning rate of 0-based step t (engine/optim/schedule.h), in FP64."""
    base, kind = float(r["lr"]), r["lr-schedule"]
    if kind == "constant":
        return base
    if kind == "step":
        return base * float(r["gamma"]) ** (t // int(r["step-size"]))
    w, lo = int(r["warmup-steps"]), float(r["min-lr"])
    if t < w:
        return base * (t + 1) / w
    if t >= total:
        return lo
    return lo + (base - lo) * (1 + math.cos(math.pi * (t - w) / (total - w))) / 2


# ---- data ------------------------------------------------------------------------------------------------------------

# the Fashion-MNIST tensors as pytorch_reference.py loads them (this script's folder is on sys.path when it runs)
from pytorch_reference import load_fashion_mnist  # noqa: E402


# ---- one run -------------------------------------------------------------------------------------------------------

class Trainer:
    """The model, optimizer and one step in a precision and mode."""

    def __init__(self, r, precision, mode, device, total_steps):
        self.r, self.precision, self.mode, self.device = r, precision, mode, device
        self.model = build_net(r["model"]).to(device)
        self.net = self.model
        if mode == "compile":
            self.net = torch.compile(self.model, mode=COMPILE_MODE)
        self.amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.total = total_steps
        kw = dict(betas=(float(r["beta1"]), float(r["beta2"])), eps=float(r["eps"]),
                  weight_decay=float(r["weight-decay"]))
        opt = torch.optim.AdamW if r["optimizer"] == "adamw" else torch.optim.Adam
        if r["optimizer"] == "adamw" and "weight-decay" not in r["given"]:  # mptrain's adamw default, PyTorch's too
            kw["weight_decay"] = 0.01
        self.lr_t = None
        if mode == "graph":
            self.lr_t = torch.tensor(lr_at(r, 0, total_steps), device=device)
            self.opt = opt(self.model.parameters(), lr=self.lr_t, capturable=True, foreach=True, **kw)
        elif mode in ("fused", "compile"):
            self.opt = opt(self.model.parameters(), lr=lr_at(r, 0, total_steps), fused=True, **kw)
        else:
            self.opt = opt(self.model.parameters(), lr=lr_at(r, 0, total_steps), **kw)
        self.scaler = None
        if precision == "fp16":
            self.scaler_kw = dict(init_scale=65536.0, growth_interval=2000)
            try:
                self.scaler = torch.amp.GradScaler("cuda", **self.scaler_kw)
                self.scaler_kw["device"] = "cuda"
            except (AttributeError, TypeError):
                self.scaler = torch.cuda.amp.GradScaler(**self.scaler_kw)
        self.graph = None

    def set_lr(self, t):
        v = lr_at(self.r, t, self.total)
        if self.lr_t is not None:
            self.lr_t.fill_(v)
        else:
            for g in self.opt.param_groups:
                g["lr"] = v

    def loss(self, x, y):
        if self.amp is None:
            return F.cross_entropy(self.net(x).float(), y)
        with torch.autocast(self.device.type, dtype=self.amp):
            logits = self.net(x)
        return F.cross_entropy(logits.float(), y)

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=self.graph is None and self.mode != "graph")
        loss = self.loss(x, y)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()

    def capture(self, xs, ys, warm=3):
        """graph mode: warm up on a side stream, then record one step on the static batch (xs, ys)."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warm):
                self.step(xs, ys)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=False)
        with torch.cuda.graph(self.graph):
            self.step(xs, ys)

    def reinit(self, seed):
        """The state a fresh Trainer built after torch.manual_seed(seed) has, written in place (the same tensors: a
        captured graph and a compiled model keep reading them): each module's reset_parameters in construction order
        (so the same random draws), batch norm's running statistics, gradients and Adam's state zeroed, a new
        GradScaler."""
        torch.manual_seed(seed)
        with torch.no_grad():
            for m in self.model:
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.reset_running_stats()
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            for st in self.opt.state.values():
                for v in st.values():
                    if torch.is_tensor(v):
                        v.zero_()
        if self.scaler is not None:
            self.scaler = type(self.scaler)(**self.scaler_kw)
        self.set_lr(0)


@torch.no_grad()
def evaluate(tr, x, y, batch):
    tr.model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for i in range(0, x.shape[0], batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        if tr.amp is None:
            logits = tr.net(xb)
        else:
            with torch.autocast(tr.device.type, dtype=tr.amp):
                logits = tr.net(xb)
        correct += (logits.argmax(1) == yb).sum()
    acc = correct.item() / x.shape[0]  # the result on the host: the clock stops after this
    tr.model.train()
    return acc


TRAINERS = {}  # (precision, mode) -> Trainer: captured or compiled once, re-initialised per seed


def run_one(args, r, data, seed, precision, mode, device):
    xtr, ytr, xte, yte = data
    B, epochs, n = int(r["batch-size"]), int(r["epochs"]), xtr.shape[0]
    nb = (n + B - 1) // B
    total = epochs * nb
    cuda = device.type == "cuda"
    if cuda:
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    mean, inv_std = 0.0, 1.0
    if r["standardize"]:
        mean, inv_std = xtr.mean().item(), 1.0 / xtr.std(unbiased=False).item()
    norm = (lambda x: (x - mean) * inv_std) if r["standardize"] else (lambda x: x)

    t_setup = time.perf_counter()
    key = (precision, mode)
    if key not in TRAINERS:  # the untimed warm-up, once per precision and mode (docstring)
        if mode in ("eager", "fused") and args.warmup_steps > 0:  # a throw-away model
            w = Trainer(r, precision, mode, device, total)
            for i in range(args.warmup_steps):
                lo = i * B % n
                w.step(norm(xtr[lo:lo + B]), ytr[lo:lo + B])
            if cuda:
                torch.cuda.synchronize()
            del w
        tr = Trainer(r, precision, mode, device, total)
        tr.static_x, tr.static_y = norm(xtr[:B]).clone(), ytr[:B].clone()
        if mode == "graph":
            tr.capture(tr.static_x, tr.static_y)
        elif mode == "compile":  # every shape the timed region meets: full and last batches, training and evaluation
            eb = args.eval_batch or B
            for _ in range(max(args.warmup_steps, 3)):
                tr.step(tr.static_x, tr.static_y)
            if n % B:
                tr.step(norm(xtr[:n % B]), ytr[:n % B])
            ne = min(xte.shape[0], eb + xte.shape[0] % eb)
            evaluate(tr, norm(xte[:ne]), yte[:ne], eb)
        TRAINERS[key] = tr
    tr = TRAINERS[key]
    tr.reinit(seed)
    if cuda:
        torch.cuda.synchronize()
    setup_s = time.perf_counter() - t_setup

    gen = torch.Generator().manual_seed(seed)
    ev0 = ev1 = None
    if cuda:
        torch.cuda.synchronize()
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, c0 = time.perf_counter(), time.process_time()
    if cuda:
        ev0.record()
    epoch_s, it = [], 0
    for e in range(epochs):
        te = time.perf_counter()
        perm = torch.randperm(n, generator=gen).to(device)
        for b in range(nb):
            idx = perm[b * B:(b + 1) * B]
            tr.set_lr(it)
            if tr.graph is not None and idx.shape[0] == B:
                if r["standardize"]:
                    tr.static_x.copy_(norm(xtr[idx]))
                else:
                    torch.index_select(xtr, 0, idx, out=tr.static_x)
                torch.index_select(ytr, 0, idx, out=tr.static_y)
                tr.graph.replay()
            else:
                tr.step(norm(xtr[idx]), ytr[idx])
            it += 1
        if cuda:
            torch.cuda.synchronize()
        epoch_s.append(time.perf_counter() - te)
    te = time.perf_counter()
    acc = evaluate(tr, norm(xte), yte, args.eval_batch or B)
    eval_s = time.perf_counter() - te
    result_s, result_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    gpu_s = None
    if cuda:
        ev1.record()
        ev1.synchronize()
        gpu_s = ev0.elapsed_time(ev1) / 1000.0
    return {"impl": "pytorch", "torch": torch.__version__, "precision": precision, "mode": mode, "seed": seed,
            "device": str(device) if not cuda else torch.cuda.get_device_name(0),
            "threads": torch.get_num_threads() if not cuda else None, "batch_size": B, "epochs": epochs,
            "steps": it, "final_test_accuracy": acc, "time_to_result_s": result_s,
            "time_to_result_cpu_s": result_cpu_s, "time_to_result_gpu_events_s": gpu_s, "epoch_times_s": epoch_s,
            "final_eval_s": eval_s, "untimed_setup_s": setup_s,
            "untimed_warmup": "throw-away model, %d steps, once per precision and mode" % args.warmup_steps
            if mode in ("eager", "fused") else "%s once per precision and mode, the model re-initialised in place per "
            "seed" % ("captured" if mode == "graph" else "compiled")}


def summarize(rows):
    acc = [100.0 * x["final_test_accuracy"] for x in rows]
    n, m = len(acc), statistics.mean(acc)
    out = {"n": n, "mean_acc_pct": m, "seeds_at_target": sum(a >= TARGET for a in acc)}
    if n >= 2:
        sd = statistics.stdev(acc)
        half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * sd / math.sqrt(n)
        out.update(sd=sd, ci_low=m - half, ci_high=m + half)
    for k in ("time_to_result_s", "time_to_result_cpu_s", "time_to_result_gpu_events_s"):
        v = [x[k] for x in rows if x[k] is not None]
        if v:
            out[k] = {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else None,
                      "min": min(v), "max": max(v)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mptrain", default="build/tools/mptrain", help="the mptrain whose recipe is trained")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--modes", default="eager", help="eager,fused,graph,compile (CUDA for all but eager)")
    ap.add_argument("--seeds", default="10", help="N (seeds 0..N-1) or a list 0,3,7")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU; 0 = torch's default)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--limit-train", type=int, default=0)
    ap.add_argument("--limit-test", type=int, default=0)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--eval-batch", type=int, default=0, help="evaluation batch (default: the recipe's batch size, "
                    "as mptrain evaluates)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode of --modes compile")
    ap.add_argument("--json", default="", help="write every run and the summary here")
    args = ap.parse_args()
    global COMPILE_MODE
    COMPILE_MODE = args.compile_mode
    seeds = list(range(int(args.seeds))) if "," not in args.seeds else [int(s) for s in args.seeds.split(",")]
    precisions, modes = args.precisions.split(","), args.modes.split(",")
    for p in precisions:
        if p not in ("fp32", "tf32", "bf16", "fp16"):
            ap.error(f"--precisions: unknown precision '{p}'")
        if args.device == "cpu" and p in ("tf32", "fp16"):
            ap.error(f"--precisions {p} needs --device cuda (PyTorch has no TF32 on the CPU; CPU autocast is bf16)")
    for m in modes:
        if m not in ("eager", "fused", "graph", "compile"):
            ap.error(f"--modes: unknown mode '{m}'")
        if m != "eager" and args.device == "cpu":
            ap.error(f"--modes {m} needs --device cuda (fused Adam, CUDA Graphs; torch.compile is not in torch 1.13)")
        if m == "compile" and not hasattr(torch, "compile"):
            ap.error(f"--modes compile needs torch >= 2.0 (this is {torch.__version__})")
    combos = [(p, m) for p in precisions for m in modes if not (m == "graph" and p == "fp16")]
    if "graph" in modes and "fp16" in precisions:
        print("speedrun_pytorch.py: fp16 is not run in --modes graph: GradScaler's step reads found_inf on the host, "
              "which a CUDA Graph cannot capture (fp16 runs in the other modes)", file=sys.stderr)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"speedrun_pytorch.py: --device cuda: no usable GPU (torch {torch.__version__})")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    r = read_recipe(args.mptrain)
    print(f"recipe (from {args.mptrain} speedrun --print-recipe): {r['text']}", file=sys.stderr, flush=True)
    t_load = time.perf_counter()
    data = tuple(t.to(device) for t in load_fashion_mnist(args.data, args.limit_train, args.limit_test))
    load_s = time.perf_counter() - t_load
    rows = []
    for seed in seeds:
        for p, m in combos:
            x = run_one(args, r, data, seed, p, m, device)
            rows.append(x)
            print(json.dumps(x), flush=True)
    summary = {}
    print("\n| precision | mode | mean test acc (%) [95% CI] | seeds >= 90% | time to result, host (s) | CPU (s) |"
          "\n|---|---|---:|---:|---:|---:|")
    for p, m in combos:
        s = summarize([x for x in rows if x["precision"] == p and x["mode"] == m])
        summary[f"{p}/{m}"] = s
        ci = f" [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" if "ci_low" in s else ""
        print(f"| {p} | {m} | {s['mean_acc_pct']:.2f}{ci} | {s['seeds_at_target']} of {s['n']} | "
              f"{s['time_to_result_s']['mean']:.3f} | {s['time_to_result_cpu_s']['mean']:.3f} |")
    proc = {"process_start_to_torch_imported_s": AGE_AT_IMPORT, "data_load_s": load_s, "whole_s": process_age_s()}
    print(f"\nprocess: {json.dumps(proc)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"recipe": r["text"], "runs": rows, "summary": summary, "process": proc,
                       "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
