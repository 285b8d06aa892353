#!/usr/bin/env python3
"""Loads an mptrain checkpoint into a PyTorch module and evaluates it on the run's test set.

    python3 examples/pytorch_load.py runs/spec-xxxx-bf16/checkpoint.safetensors [--data DIR] [--data-layout nhwc]

The checkpoint describes its network in the metadata "model_layers" (one object per layer, named, with its shapes;
tools/run_summary.c, mpt_run_model_json), so any spec rebuilds as a torch.nn.Sequential of named modules whose
state_dict names are the checkpoint's tensor names: conv1.weight, bn1.running_mean, fc2.bias, ... The optimizer
state (names with ':') is left out; batch norm's num_batches_tracked, which mptrain does not keep, is set to the
run's step count. The weights are the FP32 masters (with --master-weights none the 16-bit weights, widened), and the
module runs in FP32 in evaluation mode (dropout off, batch norm from its running statistics), on the test images
normalised as the run normalised them ((pixel / 255 - mean) * inv_std, from the metadata "state").

An fp32 run's accuracy is reproduced up to summation order; a run in fp16/bf16 evaluated its 16-bit working copy in
16-bit arithmetic, so here, in FP32, a few test images may come out differently. Needs torch and numpy (the GPU
machines have PyTorch 2.11; the development machine has no PyTorch: docs/checkpoints.md says what was verified).
"""
import argparse
import collections
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    buf = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":  # bfloat16: the top half of an FP32
            v = np.frombuffer(buf[b:e], dtype="<u2").astype(np.uint32) << 16
            a = v.view(np.float32)
        else:
            a = np.frombuffer(buf[b:e], dtype=np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")).astype(np.float32)
        tensors[name] = torch.from_numpy(a.reshape(t["shape"]).copy())
    return tensors, meta


def build(layers):
    """The network of "model_layers" as a Sequential of named modules."""
    mods = collections.OrderedDict()
    for l in layers:
        t = l["type"]
        if t == "conv":
            m = nn.Conv2d(l["in_channels"], l["out_channels"], l["kernel"], stride=l["stride"], padding=l["pad"])
        elif t == "linear":
            m = nn.Linear(l["in_features"], l["out_features"])
        elif t == "maxpool":
            m = nn.MaxPool2d(l["kernel"], stride=l["stride"])
        elif t == "avgpool":
            m = nn.AvgPool2d(l["kernel"], stride=l["stride"])
        elif t == "globalavgpool":
            m = nn.AdaptiveAvgPool2d(1)
        elif t == "flatten":
            m = nn.Flatten()
        elif t == "dropout":
            m = nn.Dropout(l["p"])
        elif t == "batchnorm":
            bn = nn.BatchNorm2d if l["input_dims"] == 4 else nn.BatchNorm1d
            m = bn(l["num_features"], eps=l["eps"], momentum=l["momentum"])
        elif t == "layernorm":
            m = nn.LayerNorm(l["normalized_shape"], eps=l["eps"])
        elif t == "relu":
            m = nn.ReLU()
        elif t == "gelu":
            m = nn.GELU()
        elif t == "tanh":
            m = nn.Tanh()
        elif t == "sigmoid":
            m = nn.Sigmoid()
        elif t == "leakyrelu":
            m = nn.LeakyReLU(l["negative_slope"])
        else:
            sys.exit(f"layer {l['name']}: unknown type {t}")
        mods[l["name"]] = m
    return nn.Sequential(mods)


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            raw = gzip.open(p).read() if open(p, "rb").read(2) == b"\x1f\x8b" else open(p, "rb").read()
            ndim = raw[3]
            dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
            return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)
    sys.exit(f"{path}[.gz]: not found")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--data-layout", choices=("nchw", "nhwc"), default="nchw")
    ap.add_argument("--limit-test", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=1000)
    a = ap.parse_args()

    tensors, meta = read_safetensors(a.checkpoint)
    layers = json.loads(meta["model_layers"])
    data = json.loads(meta["data"])
    state = json.loads(meta["state"])
    net = build(layers)
    sd = {k: v for k, v in tensors.items() if ":" not in k and not k.startswith("amp.")}
    for l in layers:
        if l["type"] == "batchnorm":
            sd[l["name"] + ".num_batches_tracked"] = torch.tensor(state["iteration"], dtype=torch.long)
    net.load_state_dict(sd, strict=True)  # every parameter and buffer, no extra tensor
    net.eval()

    x = read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte"))
    y = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    if x.ndim == 3:
        x = x[:, None, :, :]
    elif a.data_layout == "nhwc":
        x = x.transpose(0, 3, 1, 2)
    if a.limit_test:
        x, y = x[:a.limit_test], y[:a.limit_test]
    assert list(x.shape[1:]) == [data["channels"], data["height"], data["width"]], "the data's shape is not the run's"
    mean, inv_std = np.float32(state["mean"]), np.float32(state["inv_std"])
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), a.batch_size):
            xb = (torch.from_numpy(x[i:i + a.batch_size].astype(np.float32)) / 255.0 - mean) * inv_std
            yb = torch.from_numpy(y[i:i + a.batch_size])
            logits = net(xb)
            loss += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
            correct += (logits.argmax(1) == yb).sum().item()
    print(f"PyTorch {torch.__version__}: {meta.get('model')} ({meta.get('precision')} run, step {state['iteration']}), "
          f"evaluated in FP32: test loss {loss / len(x):.4f}  test accuracy {100.0 * correct / len(x):.2f}% "
          f"({len(x)} images)")


if __name__ == "__main__":
    main()
