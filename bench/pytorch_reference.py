#!/usr/bin/python3
"""bench/pytorch_reference.py - the PyTorch side of bench/run.sh: trains the same models as `mptrain train`
with the same settings, in one or more of PyTorch's execution modes, and prints one JSON line per mode with its
timings and final test metrics (each line as soon as its mode has finished, so a killed process keeps them).

What is the same as mptrain (tools/run.c, models/models.c, datasets/loader.h):
  - models: mlp 784-512-512-10 with ReLU; lenet5 conv 6@5x5 pad 2, relu, maxpool 2, conv 16@5x5, relu,
    maxpool 2, flatten, 120, relu, 84, relu, 10; cnn (PyTorch examples/mnist: conv 32@3x3, conv 64@3x3,
    maxpool 2, dropout 0.25, 128, dropout 0.5, 10). PyTorch's default initialisation (mptrain copies it).
  - data: the four Fashion-MNIST IDX .gz files, read here with gzip + numpy; pixels / 255 (mptrain does not
    standardise unless --standardize); all of it preloaded as one tensor on the device (no DataLoader).
  - one epoch = a fresh random permutation of the 60000 training rows, batches of B in that order, the last
    partial batch kept (60000 / 128 -> 468 full batches and one of 96; DataLoader(drop_last=False)).
  - loss: mean softmax cross-entropy over the batch, computed in FP32 (the logits are cast to FP32 first,
    as mptrain's softmax_xent always is).
  - optimizer: Adam (default lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay), or SGD/AdamW.
  - what is timed: the training steps of each epoch (batch indexing, forward, backward, optimizer step);
    the permutation is drawn before the clock starts and the test evaluation after it stops, like mptrain's
    epoch timer. samples/s = training rows / training seconds.
The shuffle order and initial weights come from torch's generator, not mptrain's Philox streams, so the two
runs see different (equally random) orders and initial weights: accuracies agree statistically, not bitwise.

Precisions (--precision):
  fp32   plain FP32 (on CUDA: TF32 off for matmul and cuDNN)
  tf32   CUDA only: torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = True
  bf16   torch.autocast(device, dtype=torch.bfloat16) around the forward pass and the loss
  fp16   CUDA only: torch.autocast(device, dtype=torch.float16) + GradScaler (init 2^16,
         growth interval 2000, as mptrain's dynamic loss scale)
Modes (--mode, one or a comma-separated list run one after the other in this process, each from the same seed:
the same initial weights and shuffles; issue 31: the peer at its best):
  eager    what every earlier run measured: the default (foreach) Adam, GradScaler for fp16, the batch gathered by
           indexing, the last partial batch as it is (96 rows)
  fused    the same with torch.optim.Adam(fused=True) (one fused kernel for all parameters; with a GradScaler the
           fused step reads found_inf on the device instead of syncing the host)
  graph    the whole training step captured once as a CUDA Graph (torch.cuda.graph) and replayed: fused Adam with
           capturable=True, the GradScaler's scale/step/update inside the capture for fp16 (--graph-scope step) or,
           as PyTorch's CUDA Graphs notes show for AMP, forward and backward captured and scaler.step/update run
           eagerly after each replay (--graph-scope fwd-bwd). Warm-up on a side stream (3 steps), then the model,
           the optimizer state and the scaler are restored to their initial values, so the replays train from the
           same weights as the other modes. Static shapes: each step copies the batch's row indices into the
           graph's index buffer (one device-to-device copy) and the graph gathers the rows; the last batch is padded
           to B rows whose labels are ignore_index (the loss is the mean over the valid rows, as mptrain pads it)
  compile  the model compiled by torch.compile(mode="max-autotune") (forward and backward; the optimizer is fused
           Adam, eager), padded batches as in graph mode (one shape, no recompilation). Compilation happens in the
           warm-up (forward and backward on the real model, gradients discarded; prepare_s); a torch without
           torch.compile, or one whose compilation fails (no Triton, no C compiler), prints a line with
           "status": "unavailable" and the reason, and the other modes still run
Source of the graph recipe: PyTorch's "CUDA Graphs" notes (docs.pytorch.org/docs/stable/notes/cuda.html, "Whole-
network capture", "Usage with torch.cuda.amp"); of the compile mode: torch.compile's documentation (modes).
On a CPU-only torch (Debian's 1.13) eager runs on the CPU; graph needs --device cuda (a usage error otherwise),
and fused or compile that this torch cannot run print an "unavailable" line naming the reason.

Timing: CPU: time.perf_counter around each epoch. CUDA: --warmup-steps steps on a throw-away copy of the
model first (cuDNN/cuBLAS heuristics, allocator, autocast caches), then CUDA events recorded at the start and
end of each epoch, read after one synchronize at the epoch's end (epoch_times_s; the host clock of the same
epochs, up to that synchronize, is epoch_host_times_s, as mptrain's epoch_times_s beside its epoch_gpu_times_s).

Threads (CPU): --threads N calls torch.set_num_threads(N); set OMP_NUM_THREADS to the same value in the
environment (bench/run.sh does) so that OpenMP's pool matches. Source of the AMP recipe: PyTorch's
"Automatic Mixed Precision examples" (torch.cuda.amp, torch.autocast) documentation.

Output: one JSON line per mode on stdout ("mode", "status": ok | unavailable | failed, "reason", the epoch times
and metrics); progress on stderr. Exit status 0 when every mode ran or was unavailable, 1 when one failed, 2 for
a usage error.

Usage: /usr/bin/python3 bench/pytorch_reference.py --model mlp --precision fp32 --epochs 5 [--device cpu]
       [--mode eager[,fused,graph,compile]] [--graph-scope step|fwd-bwd] [--threads 1] [--batch-size 128]
       [--lr 1e-3] [--seed 0] [--data DIR] [--limit-train N] [--limit-test N]
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import re
import resource
import statistics
import struct
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
IDX_DTYPES = {0x08: np.uint8}


def read_idx_gz(path):
    """Reads a gzip-compressed IDX file (LeCun's MNIST format: magic 0x0000 <type> <ndim>, big-endian u32
    dims, then the data). Returns a numpy array; raises ValueError naming the file on a malformed header."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    count = int(np.prod(dims))
    off = 4 + 4 * ndim
    if len(raw) - off != count:
        raise ValueError(f"{path}: header says {dims} = {count} bytes, the file has {len(raw) - off}")
    return np.frombuffer(raw, dtype=np.uint8, offset=off).reshape(dims)


def load_fashion_mnist(data_dir, limit_train, limit_test):
    def p(name):
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            sys.exit(f"{os.path.basename(sys.argv[0])}: {path} is missing (apt-get install dataset-fashion-mnist, "
                     "or --data DIR)")
        return path
    xtr = read_idx_gz(p("train-images-idx3-ubyte.gz"))
    ytr = read_idx_gz(p("train-labels-idx1-ubyte.gz"))
    xte = read_idx_gz(p("t10k-images-idx3-ubyte.gz"))
    yte = read_idx_gz(p("t10k-labels-idx1-ubyte.gz"))
    if limit_train:
        xtr, ytr = xtr[:limit_train], ytr[:limit_train]
    if limit_test:
        xte, yte = xte[:limit_test], yte[:limit_test]
    to_x = lambda a: torch.from_numpy(a.astype(np.float32) / np.float32(255.0)).reshape(-1, 1, 28, 28)
    to_y = lambda a: torch.from_numpy(a.astype(np.int64))
    return to_x(xtr), to_y(ytr), to_x(xte), to_y(yte)


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                             nn.Linear(128, 10))
    raise SystemExit(f"pytorch_reference.py: --model: expected mlp, lenet5 or cnn, found '{name}'")


MODES = ("eager", "fused", "graph", "compile")
INIT_SCALE, GROWTH_INTERVAL = 65536.0, 2000  # mptrain's dynamic loss scale: start 2^16, grow after 2000 clean steps


class ModeUnavailable(Exception):
    """This torch or machine cannot run the mode (the reason is the message); the other modes still run."""


def make_optimizer(args, params, mode):
    """The optimizer of a mode: eager uses torch's default implementation (foreach on CUDA); fused, graph and compile
    ask for the fused kernel (graph also for capturable state, so that its step counter lives on the device)."""
    kw = {}
    if mode != "eager":
        kw["fused"] = True
    if mode == "graph":
        kw["capturable"] = True
    try:
        if args.optimizer == "adam":
            return torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, **kw)
        if args.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **kw)
        return torch.optim.SGD(params, lr=args.lr, **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        raise ModeUnavailable(f"torch {torch.__version__}: {args.optimizer}({', '.join(f'{k}=True' for k in kw)}) "
                              f"raised {type(e).__name__}: {first_line(e)}")


def make_scaler(args):
    if args.precision != "fp16":
        return None
    try:  # torch >= 2.3 spells it torch.amp.GradScaler("cuda"); torch.cuda.amp.GradScaler is deprecated
        return torch.amp.GradScaler("cuda", init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler(init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)


def first_line(e):
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


class Step:
    """One training step in the chosen precision and mode; __call__(x, y) returns nothing (no host sync).
    self.model is the module that holds the parameters (evaluation uses it); self.fwd is what the step calls
    (the compiled module in compile mode)."""

    def __init__(self, args, model, device, mode):
        self.model = model
        self.fwd = model
        self.mode = mode
        self.opt = make_optimizer(args, model.parameters(), mode)
        self.device_type = device.type
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
        self.scaler = make_scaler(args)

    def autocast(self, cache=True):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.amp_dtype, cache_enabled=cache)

    def forward_loss(self, x, y, cache=True):
        with self.autocast(cache):
            logits = self.fwd(x)
        return F.cross_entropy(logits.float(), y)  # ignore_index -100: the padding rows of graph / compile mode

    def backward_step(self, loss):
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()

    def __call__(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        self.backward_step(self.forward_loss(x, y))


class GraphStep(Step):
    """The whole step as one CUDA Graph (PyTorch's "Whole-network capture"): static index and mask buffers, the
    gather inside the graph. capture() warms up on a side stream, restores the initial state, records."""

    def __init__(self, args, model, device, mode, xtr, ytr):
        super().__init__(args, model, device, mode)
        self.scope = args.graph_scope
        self.xtr, self.ytr = xtr, ytr
        B = args.batch_size
        self.static_idx = torch.zeros(B, dtype=torch.int64, device=device)
        self.static_mask = torch.ones(B, dtype=torch.bool, device=device)
        self.graph = None

    def body(self):
        x = self.xtr.index_select(0, self.static_idx)
        y = torch.where(self.static_mask, self.ytr.index_select(0, self.static_idx), torch.full_like(self.static_idx, -100))
        loss = self.forward_loss(x, y, cache=False)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        elif self.scope == "step":
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.scaler.scale(loss).backward()

    def capture(self, idx_batches, warm=3):
        """Warm-up steps on a side stream (real batches), then the recording; the parameters, the optimizer state and
        the scaler are put back to their values before the warm-up, so the replays start where the other modes do."""
        params = [p for p in self.model.parameters()]
        saved = [p.detach().clone() for p in params]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(warm):
                self.static_idx.copy_(idx_batches[i % len(idx_batches)])
                self.opt.zero_grad(set_to_none=True)
                self.body()
                if self.scaler is not None and self.scope != "step":
                    self.scaler.step(self.opt)
                    self.scaler.update()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's pool, refilled by each replay
        with torch.cuda.graph(self.graph):
            self.body()
        with torch.no_grad():
            for p, v in zip(params, saved):
                p.copy_(v)
            for st in self.opt.state.values():
                for v in st.values():
                    if torch.is_tensor(v):
                        v.zero_()  # exp_avg, exp_avg_sq, and the capturable step counter
            if self.scaler is not None:
                self.scaler._scale.fill_(INIT_SCALE)
                self.scaler._growth_tracker.zero_()
        torch.cuda.synchronize()

    def replay(self, idx, mask):
        self.static_idx.copy_(idx)
        self.static_mask.copy_(mask)
        self.graph.replay()
        if self.scaler is not None and self.scope != "step":
            self.scaler.step(self.opt)
            self.scaler.update()


def padded_batches(perm, nb, B, device):
    """The epoch's row order padded to nb * B rows (row 0 repeated) and the mask of the real rows."""
    n = perm.shape[0]
    idx = torch.zeros(nb * B, dtype=torch.int64, device=device)
    idx[:n] = perm
    mask = torch.zeros(nb * B, dtype=torch.bool, device=device)
    mask[:n] = True
    return idx, mask


@torch.no_grad()
def evaluate(step, x, y, batch):
    """Mean cross-entropy and accuracy over (x, y), in the run's precision, model in eval mode."""
    step.model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, x.shape[0], batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        with step.autocast():
            logits = step.model(xb)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    step.model.train()
    return loss_sum / x.shape[0], correct / x.shape[0]


def warm_up(args, device, xtr, ytr):
    """--warmup-steps eager steps on a throw-away model (cuDNN/cuBLAS heuristics, allocator, autocast caches)."""
    n, B = xtr.shape[0], args.batch_size
    torch.manual_seed(args.seed + 1)
    warm = Step(args, build_model(args.model).to(device), device, "eager")
    for _ in range(args.warmup_steps):
        idx = torch.randint(0, n, (B,), device=device)
        warm(xtr[idx], ytr[idx])
    torch.cuda.synchronize()


def run_mode(args, mode, device, data):
    """Trains args.epochs epochs in one mode from seed args.seed; returns the JSON record."""
    xtr, ytr, xte, yte, load_s = data
    n, B = xtr.shape[0], args.batch_size
    nb = (n + B - 1) // B
    cuda = device.type == "cuda"
    if mode == "compile" and not hasattr(torch, "compile"):
        raise ModeUnavailable(f"torch {torch.__version__} has no torch.compile (it needs torch >= 2.0)")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        if args.warmup_steps > 0:
            warm_up(args, device, xtr, ytr)
    torch.manual_seed(args.seed)
    model = build_model(args.model).to(device)
    gen = torch.Generator().manual_seed(args.seed)
    prep_s, scope = 0.0, None
    t_prep = time.perf_counter()
    if mode == "graph":
        step = GraphStep(args, model, device, mode, xtr, ytr)
        scope = "whole step" if step.scope == "step" or step.scaler is None else "forward and backward (scaler step eager)"
        first = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + 2)).to(device)
        try:
            step.capture([first[i * B:(i + 1) * B] for i in range(min(3, n // B))] or [first[:B]])
        except Exception as e:  # a capture that fails is a result: the row says why
            raise ModeUnavailable(f"CUDA Graph capture ({scope}) failed: {type(e).__name__}: {first_line(e)}")
    else:
        step = Step(args, model, device, mode)
        if mode == "compile":
            try:
                step.fwd = torch.compile(model, mode="max-autotune")
                idx = torch.arange(B, device=device) % n
                for _ in range(3):  # compiles forward and backward; the gradients are discarded, the weights untouched
                    step.forward_loss(xtr[idx], ytr[idx]).backward()
                    step.opt.zero_grad(set_to_none=True)
                if cuda:
                    torch.cuda.synchronize()
            except Exception as e:
                raise ModeUnavailable(f"torch.compile(mode='max-autotune') failed on this machine: "
                                      f"{type(e).__name__}: {first_line(e)}")
            torch.manual_seed(args.seed)  # dropout (cnn) draws from here: the same stream as the other modes
    prep_s = time.perf_counter() - t_prep
    padded = mode in ("graph", "compile")
    epoch_s, host_s, cpu_s, test_loss, test_acc = [], [], [], math.nan, math.nan
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=gen).to(device)
        if padded:
            pidx, pmask = padded_batches(perm, nb, B, device)
        if cuda:
            torch.cuda.synchronize()
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        t0, c0 = time.perf_counter(), time.process_time()
        if mode == "graph":
            for b in range(nb):
                step.replay(pidx[b * B:(b + 1) * B], pmask[b * B:(b + 1) * B])
        elif padded:
            for b in range(nb):
                idx, mask = pidx[b * B:(b + 1) * B], pmask[b * B:(b + 1) * B]
                step(xtr[idx], torch.where(mask, ytr[idx], torch.full_like(idx, -100)))
        else:
            for b in range(nb):
                idx = perm[b * B:(b + 1) * B]
                step(xtr[idx], ytr[idx])
        if cuda:
            ev1.record()
            ev1.synchronize()
            host_s.append(time.perf_counter() - t0)
            epoch_s.append(ev0.elapsed_time(ev1) / 1000.0)
        else:
            host_s.append(time.perf_counter() - t0)
            epoch_s.append(host_s[-1])
        cpu_s.append(time.process_time() - c0)
        test_loss, test_acc = evaluate(step, xte, yte, args.eval_batch)
        print(f"{mode}: epoch {epoch + 1}/{args.epochs}  test loss {test_loss:.4f}  test acc {100 * test_acc:.2f}%  "
              f"{n / epoch_s[-1]:.0f} samples/s  {epoch_s[-1]:.3f} s", file=sys.stderr, flush=True)
    med = statistics.median(epoch_s)
    return {
        "impl": "pytorch",
        "mode": mode,
        "status": "ok",
        "graph_scope": scope,
        "prepare_s": prep_s,  # graph: warm-up + capture; compile: compilation (3 forward + backward calls)
        "torch": torch.__version__,
        "blas": blas_facts() if not cuda else None,
        "model": args.model,
        "precision": args.precision,
        "device": args.device if not cuda else torch.cuda.get_device_name(0),
        "threads": torch.get_num_threads() if not cuda else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "batch_size": B,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "seed": args.seed,
        "epochs": args.epochs,
        "n_train": n,
        "steps_per_epoch": nb,
        "load_s": load_s,
        "epoch_times_s": epoch_s,  # cuda: CUDA events (ms / 1000); cpu: host clock
        "epoch_host_times_s": host_s,  # host clock (time.perf_counter) to the end of the same epochs
        "epoch_cpu_times_s": cpu_s,  # user + system CPU time of the process's threads (time.process_time), same epochs
        "time_per_epoch_median_s": med,
        "samples_per_s_median": n / med,
        "final_test_accuracy": test_acc,
        "final_test_loss": test_loss,
        "final_loss_scale": step.scaler.get_scale() if step.scaler is not None else None,
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


# oneDNN 2.x's dnnl_cpu_isa_t values (dnnl_types.h), the ones an x86 CPU of this decade reports
ONEDNN_ISA = {0x0: "all", 0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0x407: "avx2_vnni", 0x27: "avx512_core",
              0x67: "avx512_core_vnni", 0xe7: "avx512_core_bf16", 0x3e7: "avx512_core_amx"}


def blas_facts():
    """Which libraries run this torch's CPU GEMMs, read from the process itself (issue 32 D): torch's BLAS_INFO
    (torch.__config__.show()), and for each GEMM library mapped into the process its version and kernels: OpenBLAS's
    openblas_get_config()/openblas_get_corename() (the core OpenBLAS picked, or OPENBLAS_CORETYPE's), oneDNN's
    dnnl_get_effective_cpu_isa(). Debian's torch 1.13 runs FP32 matmuls on the system BLAS (OpenBLAS through
    libblas.so.3) and bf16 autocast matmuls on oneDNN (mkldnn). Returns a dict; a library that cannot be asked is
    left out, never guessed."""
    import ctypes
    torch.ones(8, 8) @ torch.ones(8, 8)  # the BLAS is mapped by now
    facts = {"OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), "mkldnn": torch.backends.mkldnn.is_available()}
    m = re.search(r"\bBLAS_INFO=([^,\s]+)", torch.__config__.show())
    if m:
        facts["torch_blas_info"] = m.group(1)
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({ln.split()[-1] for ln in f if ".so" in ln and ("blas" in ln or "dnnl" in ln)})
    except OSError:
        libs = []
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if "openblas_core" not in facts and hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = lib.openblas_get_config.restype = ctypes.c_char_p
            facts["openblas_library"] = path
            facts["openblas_core"] = lib.openblas_get_corename().decode()
            facts["openblas_config"] = lib.openblas_get_config().decode()
        if "onednn_isa" not in facts and hasattr(lib, "dnnl_get_effective_cpu_isa"):
            lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
            isa = lib.dnnl_get_effective_cpu_isa()
            facts["onednn_library"] = path
            facts["onednn_isa"] = ONEDNN_ISA.get(isa, hex(isa))
    return facts


def parse_modes(ap, text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        ap.error(f"--mode: expected a comma-separated list of {', '.join(MODES)}, found '{text}'")
    if len(set(modes)) != len(modes):
        ap.error(f"--mode: '{text}' names a mode twice")
    return modes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "lenet5", "cnn"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--mode", default="eager", help="eager, fused, graph, compile, or a comma-separated list of them "
                    "(run one after the other, one JSON line each; default eager)")
    ap.add_argument("--graph-scope", default="step", choices=["step", "fwd-bwd"],
                    help="graph mode with fp16: capture the GradScaler's step and update too (step, default) or only "
                    "forward and backward, running scaler.step/update eagerly after each replay (fwd-bwd)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU; 0 = torch's default)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--limit-train", type=int, default=0, help="train on the first N images (0 = all)")
    ap.add_argument("--limit-test", type=int, default=0, help="evaluate on the first N test images (0 = all)")
    ap.add_argument("--warmup-steps", type=int, default=30, help="CUDA: untimed steps on a throw-away model")
    ap.add_argument("--eval-batch", type=int, default=1000)
    ap.add_argument("--blas-info", action="store_true",
                    help="print which libraries run this torch's CPU GEMMs (one JSON line: OpenBLAS's core, oneDNN's ISA) "
                    "and exit")
    args = ap.parse_args()
    if args.blas_info:
        print(json.dumps(blas_facts()), flush=True)
        return 0
    if args.epochs < 1 or args.batch_size < 1:
        ap.error("--epochs and --batch-size must be >= 1")
    if args.limit_train < 0 or args.limit_test < 0 or args.warmup_steps < 0 or args.eval_batch < 1:
        ap.error("--limit-train, --limit-test and --warmup-steps must be >= 0, --eval-batch >= 1")
    modes = parse_modes(ap, args.mode)
    if "graph" in modes and args.device != "cuda":
        ap.error("--mode graph needs --device cuda: a CUDA Graph records GPU work (CPU runs: eager, fused, compile)")

    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("pytorch_reference.py: --device cuda: torch.cuda.is_available() is False "
                     f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}): this torch or machine has "
                     "no usable GPU; the GPU modes (fused, graph, compile on CUDA) need one")
        tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    elif args.precision in ("tf32", "fp16"):
        sys.exit(f"pytorch_reference.py: --precision {args.precision} needs --device cuda "
                 "(PyTorch has no TF32 on the CPU, and CPU autocast only supports bfloat16)")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    t_load = time.perf_counter()
    xtr, ytr, xte, yte = load_fashion_mnist(args.data, args.limit_train, args.limit_test)
    xtr, ytr, xte, yte = (t.to(device) for t in (xtr, ytr, xte, yte))
    data = (xtr, ytr, xte, yte, time.perf_counter() - t_load)
    if xtr.shape[0] < args.batch_size and ("graph" in modes or "compile" in modes):
        ap.error(f"--batch-size {args.batch_size} is larger than the {xtr.shape[0]} training images")

    rc = 0
    for mode in modes:
        try:
            rec = run_mode(args, mode, device, data)
        except ModeUnavailable as e:
            rec = {"impl": "pytorch", "mode": mode, "status": "unavailable", "reason": str(e), "model": args.model,
                   "precision": args.precision, "torch": torch.__version__}
            print(f"pytorch_reference.py: --mode {mode}: unavailable: {e}", file=sys.stderr, flush=True)
        except Exception as e:  # one mode's failure must not cost the others their results
            traceback.print_exc()
            rec = {"impl": "pytorch", "mode": mode, "status": "failed", "reason": f"{type(e).__name__}: {first_line(e)}",
                   "model": args.model, "precision": args.precision, "torch": torch.__version__}
            rc = 1
        print(json.dumps(rec), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
