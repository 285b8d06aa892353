#!/usr/bin/python3
"""bench/pytorch_reference.py - the PyTorch side of bench/run.sh: trains the same models as `mptrain train`
with the same settings and prints one JSON line with its timings and final test metrics.

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
Timing: CPU: time.perf_counter around each epoch. CUDA: --warmup-steps steps on a throw-away copy of the
model first (cuDNN/cuBLAS heuristics, allocator, autocast caches), then CUDA events recorded at the start and
end of each epoch, read after one synchronize at the epoch's end (epoch_times_s; the host clock of the same
epochs, up to that synchronize, is epoch_host_times_s, as mptrain's epoch_times_s beside its epoch_gpu_times_s).

Threads (CPU): --threads N calls torch.set_num_threads(N); set OMP_NUM_THREADS to the same value in the
environment (bench/run.sh does) so that OpenMP's pool matches. Source of the AMP recipe: PyTorch's
"Automatic Mixed Precision examples" (torch.cuda.amp, torch.autocast) documentation.

Usage: /usr/bin/python3 bench/pytorch_reference.py --model mlp --precision fp32 --epochs 5 [--device cpu]
       [--threads 1] [--batch-size 128] [--lr 1e-3] [--seed 0] [--data DIR] [--limit-train N] [--limit-test N]
"""
import argparse
import gzip
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

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
            sys.exit(f"pytorch_reference.py: {path} is missing (apt-get install dataset-fashion-mnist, or --data DIR)")
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


def make_optimizer(args, params):
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return torch.optim.SGD(params, lr=args.lr)


class Step:
    """One training step in the chosen precision; __call__(x, y) returns nothing (no host sync)."""

    def __init__(self, args, model, device):
        self.model = model
        self.opt = make_optimizer(args, model.parameters())
        self.device_type = device.type
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
        self.scaler = None
        if args.precision == "fp16":
            try:  # torch >= 2.3 spells it torch.amp.GradScaler("cuda"); torch.cuda.amp.GradScaler is deprecated
                self.scaler = torch.amp.GradScaler("cuda", init_scale=65536.0, growth_interval=2000)
            except (AttributeError, TypeError):
                self.scaler = torch.cuda.amp.GradScaler(init_scale=65536.0, growth_interval=2000)

    def forward_loss(self, x, y):
        if self.amp_dtype is None:
            return F.cross_entropy(self.model(x).float(), y)
        with torch.autocast(self.device_type, dtype=self.amp_dtype):
            logits = self.model(x)
        return F.cross_entropy(logits.float(), y)

    def __call__(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = self.forward_loss(x, y)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()


@torch.no_grad()
def evaluate(step, x, y, batch):
    """Mean cross-entropy and accuracy over (x, y), in the run's precision, model in eval mode."""
    step.model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, x.shape[0], batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        if step.amp_dtype is None:
            logits = step.model(xb).float()
        else:
            with torch.autocast(step.device_type, dtype=step.amp_dtype):
                logits = step.model(xb)
            logits = logits.float()
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    step.model.train()
    return loss_sum / x.shape[0], correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "lenet5", "cnn"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
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
    args = ap.parse_args()
    if args.epochs < 1 or args.batch_size < 1:
        ap.error("--epochs and --batch-size must be >= 1")

    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("pytorch_reference.py: --device cuda: torch.cuda.is_available() is False "
                     f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})")
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
    load_s = time.perf_counter() - t_load
    n = xtr.shape[0]
    B = args.batch_size
    nb = (n + B - 1) // B

    if args.device == "cuda" and args.warmup_steps > 0:
        torch.manual_seed(args.seed + 1)
        warm = Step(args, build_model(args.model).to(device), device)
        for i in range(args.warmup_steps):
            idx = torch.randint(0, n, (B,), device=device)
            warm(xtr[idx], ytr[idx])
        torch.cuda.synchronize()
        del warm

    torch.manual_seed(args.seed)
    step = Step(args, build_model(args.model).to(device), device)
    gen = torch.Generator().manual_seed(args.seed)
    epoch_s, host_s, cpu_s, test_loss, test_acc = [], [], [], math.nan, math.nan
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=gen).to(device)
        if args.device == "cuda":
            torch.cuda.synchronize()
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        t0, c0 = time.perf_counter(), time.process_time()
        for b in range(nb):
            idx = perm[b * B:(b + 1) * B]
            step(xtr[idx], ytr[idx])
        if args.device == "cuda":
            ev1.record()
            ev1.synchronize()
            host_s.append(time.perf_counter() - t0)
            epoch_s.append(ev0.elapsed_time(ev1) / 1000.0)
        else:
            host_s.append(time.perf_counter() - t0)
            epoch_s.append(host_s[-1])
        cpu_s.append(time.process_time() - c0)
        test_loss, test_acc = evaluate(step, xte, yte, args.eval_batch)
        print(f"epoch {epoch + 1}/{args.epochs}  test loss {test_loss:.4f}  test acc {100 * test_acc:.2f}%  "
              f"{n / epoch_s[-1]:.0f} samples/s  {epoch_s[-1]:.2f} s", file=sys.stderr, flush=True)

    med = statistics.median(epoch_s)
    out = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "model": args.model,
        "precision": args.precision,
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(0),
        "threads": torch.get_num_threads() if args.device == "cpu" else None,
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
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
