#!/usr/bin/env python3
"""tests/hostile/campaign.py - the hostile-input campaign of issue 13, as a reproducible script.

Runs the mptrain binary against four sets of hostile inputs and faults and counts, per set, the cases tried,
those rejected cleanly, and the others (each listed with why):

  datasets     malformed dataset directories: each of the four IDX files missing, empty, truncated in its
               header or payload, with trailing bytes, a wrong magic, type code or rank, zero items, a FIFO, a
               directory, a symbolic link loop or a dangling link, a corrupt/truncated/fake .gz, a .gz claiming
               gigabytes; and whole-set faults (counts that disagree, 32 x 32 or mixed image sizes, 0 x 0
               images, labels out of range, the directory itself missing, a file or a FIFO)
  checkpoints  corrupted checkpoints, each tried by `train --resume` (in place, next to the run's CSVs) and
               by `eval`: truncations at every section, the header length forged, bit flips in every
               tensor's entry and data, crafted metadata (values finite as doubles but not as FP32, int32
               overflows, negative counters, inconsistent inv_scale, impossible positions, config/metadata
               disagreement, invalid configs, wrong JSON types, missing keys) and crafted tensors (NaN/inf
               masters, negative exp_avg_sq, missing/extra/reshaped/retyped tensors)
  writes       write faults: each output on /dev/full (a full disk), a file-size limit at several sizes, a
               small tmpfs (in a private mount namespace, when `unshare -rm` works), a read-only output
               directory, an output path that is a file, and kill -9 during checkpoint writes (x30)
  flags        bad command lines: unknown/missing/malformed/out-of-range values of every kind of flag,
               conflicting flags, unknown commands, hostile bytes in values

Rejected cleanly means: the expected exit status (1 for bad input and I/O faults, 2 for usage errors; the few
checkpoint cases that only the data or the job can refute, and that eval rightly evaluates, are in EXPECTED), no
crash (no signal, no sanitizer report), no hang (each run is killed after --timeout seconds), exactly one line
on stderr, printable (control bytes escaped), naming the file or flag; and nothing lost: a rejected resume
leaves the checkpoint and CSVs of its directory byte-identical, a failed write leaves the previous checkpoint
either unchanged or replaced by a complete one, and after kill -9 the checkpoint on disk loads and resumes.
For kill -9 the criterion is only the last one (there is no message).

Usage: tests/hostile/campaign.py [--mptrain PATH] [--sets datasets,checkpoints,writes,flags] [--log FILE]
Default binary: $MPT_BUILD_ROOT/tools/mptrain, else build/tools/mptrain. Takes a few minutes (most of it the
kill -9 runs). Exit status 0 when every case was rejected cleanly, 1 otherwise. Not part of `./run test`.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib

MNIST = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
N_TRAIN, N_TEST = 200, 50

# ---- running mptrain ---------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, mptrain, timeout, log):
        self.mptrain, self.timeout, self.log = mptrain, timeout, log
        self.cwd = None  # the work directory: a run that writes by default (runs/...) writes there
        self.results = {}  # set -> list of (name, ok, why)

    def run(self, args, env=None, stdout_path=None, preexec=None, wrap=None):
        """Runs mptrain ARGS; returns (rc, stdout, stderr, hung). rc is -signal for a signal."""
        full = (wrap or []) + [self.mptrain] + args
        e = dict(os.environ)
        e.update(env or {})
        out = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
        try:
            p = subprocess.Popen(full, stdout=out, stderr=subprocess.PIPE, env=e, preexec_fn=preexec,
                                 start_new_session=True, cwd=self.cwd)
            try:
                o, err = p.communicate(timeout=self.timeout)
                hung = False
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                o, err = p.communicate()
                hung = True
        finally:
            if stdout_path:
                out.close()
        return p.returncode, o or b"", err, hung

    def record(self, set_name, name, ok, why, detail=b""):
        self.results.setdefault(set_name, []).append((name, ok, why))
        line = detail.decode("utf-8", "replace").rstrip("\n").replace("\n", "\\n")
        self.log.write(f"{set_name}\t{name}\t{'clean' if ok else 'OTHER'}\t{why}\t{line[:300]}\n")
        self.log.flush()


def judge(rc, err, hung, want_rc, needle, one_line=True):
    """Why a run is not a clean rejection, or None (one_line False: a usage text of several lines is right)."""
    if hung:
        return "hung (killed after the timeout)"
    if rc < 0:
        return f"killed by signal {-rc}"
    if rc >= 128:
        return f"exit status {rc} (a crash or a sanitizer report)"
    if b"Sanitizer" in err or b"runtime error:" in err:
        return "sanitizer report"
    if rc != want_rc:
        return f"exit status {rc}, expected {want_rc}"
    lines = err.count(b"\n")
    if not err.endswith(b"\n") or (lines != 1 and one_line):
        return f"{lines} lines on stderr, expected 1"
    if any((b < 0x20 and not (b == 0x0A and not one_line)) or b == 0x7F for b in err[:-1]):
        return "a control byte in the message"
    try:
        text = err.decode("utf-8")
    except UnicodeDecodeError:
        return "the message is not UTF-8"
    if needle and needle not in text:
        return f"the message does not name {needle!r}"
    return None


def snapshot(d):
    """The regular files of d and their bytes."""
    snap = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                snap[name] = f.read()
    return snap


# ---- fixtures ------------------------------------------------------------------------------------------------


def idx_bytes(dims, payload, type_code=8, magic0=0):
    return bytes([magic0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def make_dataset(d, seed=1):
    """A separable 10-class set of 28 x 28 images (pixel block of the class bright), N_TRAIN / N_TEST items."""
    os.makedirs(d)
    rng = random.Random(seed)
    for prefix, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        labels = [rng.randrange(10) for _ in range(n)]
        img = bytearray()
        for lab in labels:
            px = bytearray(rng.randrange(40) for _ in range(784))
            for i in range(lab * 78, lab * 78 + 78):
                px[i] = 200 + rng.randrange(50)
            img += px
        write(f"{d}/{prefix}-images-idx3-ubyte", idx_bytes([n, 28, 28], img))
        write(f"{d}/{prefix}-labels-idx1-ubyte", idx_bytes([n], labels))


# ---- set 1: datasets -------------------------------------------------------------------------------------------


def dataset_cases():
    """(name, mutate(dir), needle) for each malformed dataset; needle is what the message must name."""
    cases = []

    def per_file(i, name, fn):
        cases.append((f"{MNIST[i]}: {name}", lambda d, i=i: fn(d, f"{d}/{MNIST[i]}", i), MNIST[i]))

    def rewrite(fn):
        def m(d, p, i):
            with open(p, "rb") as f:
                raw = f.read()
            write(p, fn(raw, i))
        return m

    def gz_of(fn):
        def m(d, p, i):
            with open(p, "rb") as f:
                raw = f.read()
            os.unlink(p)
            write(p + ".gz", fn(raw, i))
        return m

    def replace_with(kind):
        def m(d, p, i):
            os.unlink(p)
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "dir":
                os.mkdir(p)
            elif kind == "loop":
                os.symlink(os.path.basename(p) + ".loop", p)
                os.symlink(os.path.basename(p), p + ".loop")
            elif kind == "dangling":
                os.symlink("nowhere", p)
            elif kind == "missing":
                pass
        return m

    for i in range(4):
        rank = 3 if i % 2 == 0 else 1
        head = 4 + 4 * rank
        per_file(i, "missing", replace_with("missing"))
        per_file(i, "empty", rewrite(lambda r, i: b""))
        per_file(i, "2 bytes (truncated magic)", rewrite(lambda r, i: r[:2]))
        per_file(i, "truncated inside the dimensions", rewrite(lambda r, i, h=head: r[:h - 2]))
        per_file(i, "payload one byte short", rewrite(lambda r, i: r[:-1]))
        per_file(i, "payload half missing", rewrite(lambda r, i, h=head: r[:h + (len(r) - h) // 2]))
        per_file(i, "one trailing byte", rewrite(lambda r, i: r + b"\0"))
        per_file(i, "wrong magic (first byte 1)", rewrite(lambda r, i: b"\x01" + r[1:]))
        per_file(i, "type code 0x0D (float) for unsigned bytes", rewrite(lambda r, i: r[:2] + b"\x0d" + r[3:]))
        per_file(i, f"rank {4 - rank} instead of {rank}", rewrite(lambda r, i, k=4 - rank: r[:3] + bytes([k]) + r[4:]))
        per_file(i, "header claims 2^31 items", rewrite(lambda r, i: r[:4] + struct.pack(">I", 1 << 31) + r[8:]))
        per_file(i, "a FIFO", replace_with("fifo"))
        per_file(i, "a directory", replace_with("dir"))
        per_file(i, "a symbolic link loop", replace_with("loop"))
        per_file(i, "a dangling symbolic link", replace_with("dangling"))
        per_file(i, ".gz truncated", gz_of(lambda r, i: gzip.compress(r, 1)[:-20]))
        per_file(i, ".gz with a bad CRC", gz_of(lambda r, i: (lambda g: g[:-8] + bytes([g[-8] ^ 1]) + g[-7:])(
            gzip.compress(r, 1))))
        per_file(i, ".gz of random bytes (zlib reads them as they are)",
                 gz_of(lambda r, i: bytes(random.Random(i).randrange(256) for _ in range(len(r) // 4))))
        per_file(i, ".gz claiming gigabytes",
                 gz_of(lambda r, i: gzip.compress(idx_bytes([65536, 256, 256], b"") + bytes(1 << 22), 1) if i % 2 == 0
                       else gzip.compress(idx_bytes([0xFFFFFFFF], b"") + bytes(1 << 22), 1)))

    def whole(name, fn, needle):
        cases.append((name, fn, needle))

    def images(d, prefix, n, rows, cols):
        write(f"{d}/{prefix}-images-idx3-ubyte", idx_bytes([n, rows, cols], bytes(n * rows * cols)))

    def labels(d, prefix, values):
        write(f"{d}/{prefix}-labels-idx1-ubyte", idx_bytes([len(values)], values))

    whole("32 x 32 images (train and test)", lambda d: (images(d, "train", N_TRAIN, 32, 32),
                                                        images(d, "t10k", N_TEST, 32, 32)), "32 x 32")
    whole("test images 27 x 27, train 28 x 28", lambda d: images(d, "t10k", N_TEST, 27, 27), "t10k-images")
    whole("0 x 0 images", lambda d: (images(d, "train", N_TRAIN, 0, 0), images(d, "t10k", N_TEST, 0, 0)),
          "train-images")
    whole("0 images and 0 labels", lambda d: (images(d, "train", 0, 28, 28), labels(d, "train", [])),
          "train-images")
    whole("train labels one fewer than images", lambda d: labels(d, "train", [1] * (N_TRAIN - 1)), "train-labels")
    whole("test images one more than labels", lambda d: images(d, "t10k", N_TEST + 1, 28, 28), "t10k-images")
    whole("train label 10", lambda d: labels(d, "train", [3] * (N_TRAIN - 1) + [10]), "train-labels")
    whole("test label 255", lambda d: labels(d, "t10k", [255] + [3] * (N_TEST - 1)), "t10k-labels")
    whole("all four files missing", lambda d: [os.unlink(f"{d}/{n}") for n in MNIST], "missing dataset files")
    whole("--data names a missing directory", "missing", "nope")
    whole("--data names a regular file", "file", "not-a-dir")
    whole("--data names a FIFO", "fifo", "fifo-dir")
    return cases


def run_datasets(r, work, base):
    for k, (name, mutate, needle) in enumerate(dataset_cases()):
        case = f"{work}/ds{k}"
        os.makedirs(case)
        data = f"{case}/data"
        if mutate == "missing":
            data = f"{case}/nope"
        elif mutate == "file":
            data = f"{case}/not-a-dir"
            write(data, b"x")
        elif mutate == "fifo":
            data = f"{case}/fifo-dir"
            os.mkfifo(data)
        else:
            shutil.copytree(base, data)
            mutate(data)
        rc, _, err, hung = r.run(["train", "--data", data, "--epochs", "1", "--out", f"{case}/out", "--progress",
                                  "off", "--device", "cpu"])
        why = judge(rc, err, hung, 1, needle)
        if why is None and os.path.exists(f"{case}/out/checkpoint.safetensors"):
            why = "a checkpoint was written"
        r.record("datasets", name, why is None, why or "", err)


# ---- set 2: checkpoints ----------------------------------------------------------------------------------------


def parse_ckpt(raw):
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def build_ckpt(header, data, fix_crc=True):
    """A checkpoint file of header and data. fix_crc: the checksum engine/checkpoint.h defines (the header's first
    key, crc32 of the whole file with its own 8 digits, bytes 34..41, read as 00000000), so that the case reaches
    the checks behind it; else the header's crc32 as it is."""
    header = json.loads(json.dumps(header))
    meta = header.get("__metadata__")
    if fix_crc and isinstance(meta, dict):  # crc32 first: the header starts {"__metadata__":{"crc32":"...
        header = {"__metadata__": {"crc32": "00000000", **{k: v for k, v in meta.items() if k != "crc32"}},
                  **{k: v for k, v in header.items() if k != "__metadata__"}}
    h = json.dumps(header, separators=(",", ":")).encode()
    raw = struct.pack("<Q", len(h)) + h + data
    if fix_crc and raw[8:34] == b'{"__metadata__":{"crc32":"':
        raw = raw[:34] + b"%08x" % (zlib.crc32(raw) & 0xFFFFFFFF) + raw[42:]
    return raw


def with_meta(raw, key, field, value):
    """raw with metadata key's JSON object field set to value (a JSON text); field None: the string itself."""
    header, data = parse_ckpt(raw)
    meta = header["__metadata__"]
    if field is None:
        if value is None:
            del meta[key]
        else:
            meta[key] = value
    else:
        obj = json.loads(meta[key])
        obj[field] = json.loads(value)
        meta[key] = json.dumps(obj, separators=(",", ":"))
    return build_ckpt(header, data)


def with_tensor_value(raw, name, index, value):
    header, data = parse_ckpt(raw)
    b, _ = header[name]["data_offsets"]
    data = bytearray(data)
    data[b + 4 * index:b + 4 * index + 4] = struct.pack("<f", value)
    return build_ckpt(header, bytes(data))


def with_header(raw, fn):
    header, data = parse_ckpt(raw)
    data = fn(header, data)
    return build_ckpt(header, data)


def flip_in_header(raw, name, field):
    """One bit flipped inside tensor name's field text of the JSON header (the CRC covers only the data)."""
    (n,) = struct.unpack("<Q", raw[:8])
    h = raw[8:8 + n]
    at = h.index(json.dumps(name).encode())
    at = h.index(f'"{field}"'.encode(), at) + len(field) + 3  # the first byte of the field's value
    h = bytearray(h)
    h[at + 1] ^= 0x04
    return raw[:8] + bytes(h) + raw[8 + n:]


def checkpoint_cases(raw):
    """(name, bytes) of each corrupted checkpoint."""
    header, data = parse_ckpt(raw)
    (hlen,) = struct.unpack("<Q", raw[:8])
    tensors = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    cases = []
    # truncations at every section
    for cut, what in ((0, "empty"), (1, "1 byte"), (7, "7 bytes: inside the header length"),
                      (8, "8 bytes: the header length alone"), (9, "inside the JSON header's first byte"),
                      (8 + hlen // 2, "half the JSON header"), (8 + hlen - 1, "the JSON header less its last byte"),
                      (8 + hlen, "the header without data"), (len(raw) - 1, "the last data byte missing")):
        cases.append((f"truncated: {what}", raw[:cut]))
    for t in tensors:
        b, e = header[t]["data_offsets"]
        cases.append((f"truncated inside tensor {t}", raw[:8 + hlen + b + (e - b) // 2]))
    # the header length forged
    for v, what in ((0, "0"), (hlen - 1, "one short"), (hlen + 1, "one long"), (len(raw), "the file size"),
                    (1 << 32, "2^32"), (1 << 63, "2^63"), ((1 << 64) - 1, "2^64-1")):
        cases.append((f"header length {what}", struct.pack("<Q", v) + raw[8:]))
    cases.append(("a trailing byte after the data", raw + b"\0"))
    # bit flips: in every tensor's dtype, shape and offsets, and in its data (the CRC)
    for t in tensors:
        for field in ("dtype", "shape", "data_offsets"):
            cases.append((f"bit flip in {t} {field}", flip_in_header(raw, t, field)))
        b, e = header[t]["data_offsets"]
        flipped = bytearray(raw)
        flipped[8 + hlen + (b + e) // 2] ^= 0x10
        cases.append((f"bit flip in {t} data", bytes(flipped)))
    forged = json.loads(json.dumps(header))
    forged["__metadata__"]["crc32"] = "0badc0de"
    cases.append(("crc32 changed", build_ckpt(forged, data, fix_crc=False)))
    # crafted metadata numbers
    meta_cases = [
        ("scaler", "scale", ["1e39", "-1", "0", "1e-46", '"nan"', "null", "true"]),
        ("scaler", "inv_scale", ["0.25", "1e39", "-1.52587890625e-5", "0"]),
        ("scaler", "growth_tracker", ["-1", "2147483648", "1e20", "2.5", "4000"]),
        ("scaler", "hysteresis_left", ["-1", "2147483648", "0"]),
        ("scaler", "steps_taken", ["-1", "2147483647", "4294967296", "3"]),
        ("scaler", "steps_skipped", ["-1", "2", "9223372036854775807"]),
        ("scaler", "floor_hits", ["-1", "4294967296"]),
        ("scaler", "found_inf", ["1", "nan_text"]),
        ("scaler", "steps_nonfinite", ["-1", "5"]),
        ("state", "iteration", ["-1", "3", "4294967298", "1e300"]),
        ("state", "epoch", ["-1", "1000000000000000", "5"]),
        ("state", "batch", ["-1", "1000000000", "5"]),
        ("state", "mean", ["1e39", "-1e39", '"x"']),
        ("state", "inv_std", ["1e39", "0", "-1"]),
        ("state", "n_train", ["0", "-1", "201", "1e12"]),
        ("state", "n_val", ["-1", "200", "1000"]),
        ("state", "best_test_acc", ["2", "-0.5"]),
        ("state", "best_epoch", ["-1", "1000000"]),
        ("state", "threads", ["5000", "-1", "100000"]),
        ("state", "ranks", ["0", "2", "-1"]),
        ("state", "grad_comm", ['"fp64"', "3"]),
        ("config", "lr", ['"-1"', '"nan"', '"abc"', '"1e39"']),
        ("config", "batch-size", ['"0"', '"1000000000"', '"-5"']),
        ("config", "precision", ['"bf16"', '"fp8"']),
        ("config", "model", ['"lenet5"', '"resnet"']),
        ("config", "optimizer", ['"sgd2"']),
        ("config", "nesterov", ['"on"', '"maybe"']),
        ("config", "epochs", ['"-1"', '"0"', '"1e20"']),
        ("config", "loss-scale", ['"static:0"', '"dynamic:inf"', '"weird"']),
        ("config", "seed", ['"-1"', '"18446744073709551616"']),
        ("config", "beta2", ['"1"']),
        ("config", "master-weights", ['"fp8"']),
        ("config", "val-split", ['"1.5"']),
        ("rng", "seed", ['"abc"', '"-1"']),
    ]
    for key, field, values in meta_cases:
        for v in values:
            if v == "nan_text":
                v = '"NaN"'
            cases.append((f"{key}.{field} = {v}", with_meta(raw, key, field, v)))
    for key in ("format", "config", "state", "scaler", "rng", "precision", "model"):
        cases.append((f"metadata {key} missing", with_meta(raw, key, None, None)))
    for key, v in (("format", "mptrain-run-999"), ("precision", "bf16"), ("model", "cnn"), ("config", "[]"),
                   ("state", "not json"), ("scaler", '"a string"'), ("rng", "{}"), ("state", "{}")):
        cases.append((f"metadata {key} = {v!r}", with_meta(raw, key, None, v)))
    # crafted tensors (valid CRC)
    master = tensors[0]
    v = next(t for t in tensors if t.endswith(":exp_avg_sq"))
    m = next(t for t in tensors if t.endswith(":exp_avg"))
    for name, t, x in (("NaN in a master weight", master, float("nan")), ("inf in a master weight", master, float("inf")),
                       ("exp_avg_sq < 0", v, -1.0), ("NaN in exp_avg_sq", v, float("nan")),
                       ("inf in exp_avg", m, float("-inf"))):
        cases.append((f"{name} ({t})", with_tensor_value(raw, t, 0, x)))

    def drop(t):
        def f(hd, dt):
            b, e = hd[t]["data_offsets"]
            del hd[t]
            for k in hd:
                if k != "__metadata__":
                    ob, oe = hd[k]["data_offsets"]
                    if ob >= e:
                        hd[k]["data_offsets"] = [ob - (e - b), oe - (e - b)]
            return dt[:b] + dt[e:]
        return f

    def extra(hd, dt):
        hd["fc9.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(dt), len(dt) + 4]}
        return dt + struct.pack("<f", 1.0)

    def reshape(hd, dt):
        hd[master]["shape"] = list(reversed(hd[master]["shape"]))
        return dt

    def retype(hd, dt):
        hd[master]["dtype"] = "I32"
        return dt

    def f16_master(hd, dt):
        b, e = hd[master]["data_offsets"]
        half = (e - b) // 2
        hd[master]["dtype"] = "F16"
        for k in hd:
            if k != "__metadata__":
                ob, oe = hd[k]["data_offsets"]
                if k == master:
                    hd[k]["data_offsets"] = [ob, ob + half]
                elif ob >= e:
                    hd[k]["data_offsets"] = [ob - half, oe - half]
        return dt[:b + half] + dt[e:]

    def overlap(hd, dt):
        t1 = tensors[1]
        hd[t1]["data_offsets"] = list(hd[master]["data_offsets"])
        return dt

    def negative_shape(hd, dt):
        hd[master]["shape"] = [-512, -784]
        return dt

    def huge_shape(hd, dt):
        hd[master]["shape"] = [1 << 40, 1 << 40]
        return dt

    for name, fn in ((f"tensor {v} missing", drop(v)), (f"tensor {master} missing", drop(master)),
                     ("an extra tensor fc9.weight", extra), (f"{master} shape transposed", reshape),
                     (f"{master} dtype I32", retype), (f"{master} stored as F16", f16_master),
                     ("two tensors on the same bytes", overlap), (f"{master} negative shape", negative_shape),
                     (f"{master} shape 2^40 x 2^40", huge_shape)):
        cases.append((name, with_header(raw, fn)))
    # JSON-level oddities
    hj = raw[8:8 + hlen]
    dup = hj[:1] + b'"__metadata__":{"format":"x"},' + hj[1:]
    cases.append(("duplicate __metadata__ key", struct.pack("<Q", len(dup)) + dup + data))
    nul = hj.replace(b'"fc1.weight"', b'"fc1.\\u0000weight"', 1)
    cases.append(("a NUL inside a tensor name", struct.pack("<Q", len(nul)) + nul + data))
    return cases


# Cases whose right outcome is not exit 1 for both commands: (resume, eval) exit statuses. The position in the
# training data and the number of ranks are checkable only against the data and the job (resume says which
# --data or mpirun it needs: a usage error, 2); eval reads neither, so evaluating is right (0).
EXPECTED = {
    "state.epoch = 5": (1, 0), "state.batch = 1000000000": (1, 0), "state.batch = 5": (1, 0),
    "state.n_train = 201": (2, 0), "state.ranks = 2": (2, 0),
}


def run_checkpoints(r, work, data, base_dir):
    with open(f"{base_dir}/checkpoint.safetensors", "rb") as f:
        raw = f.read()
    for k, (name, blob) in enumerate(checkpoint_cases(raw)):
        case = f"{work}/ck{k}"
        shutil.copytree(base_dir, case)
        ck = f"{case}/checkpoint.safetensors"
        write(ck, blob)
        before = snapshot(case)
        rc, _, err, hung = r.run(["train", "--resume", ck, "--data", data, "--out", case, "--epochs", "2",
                                  "--progress", "off", "--device", "cpu"])
        want_resume, want_eval = EXPECTED.get(name, (1, 1))
        why = judge(rc, err, hung, want_resume, "checkpoint.safetensors")
        if why is None and snapshot(case) != before:
            why = "the run's directory changed (checkpoint or CSVs)"
        r.record("checkpoints", f"resume: {name}", why is None, why or "", err)
        rc, _, err, hung = r.run(["eval", "--checkpoint", ck, "--data", data, "--device", "cpu"])
        if want_eval == 0:
            why = None if rc == 0 and not hung else f"exit status {rc}, expected 0 (eval does not read it)"
        else:
            why = judge(rc, err, hung, 1, "checkpoint.safetensors")
        r.record("checkpoints", f"eval: {name}", why is None, why or "", err)
        shutil.rmtree(case)


# ---- set 3: write faults ---------------------------------------------------------------------------------------


def ckpt_loads(r, ck, data):
    rc, _, err, hung = r.run(["eval", "--checkpoint", ck, "--data", data, "--device", "cpu"])
    return rc == 0 and not hung, err


def train_args(data, out, extra=()):
    return ["train", "--data", data, "--epochs", "1", "--batch-size", "50", "--out", out, "--progress", "off",
            "--device", "cpu"] + list(extra)


def check_write_fault(r, name, rc, err, hung, out, data, before_ck, needle):
    why = judge(rc, err, hung, 1, needle)
    ck = f"{out}/checkpoint.safetensors"
    if why is None and before_ck is not None:
        if not os.path.exists(ck):
            why = "the previous checkpoint is gone"
        else:
            with open(ck, "rb") as f:
                same = f.read() == before_ck
            if not same and not ckpt_loads(r, ck, data)[0]:
                why = "the checkpoint left does not load"
    r.record("writes", name, why is None, why or "", err)


def unshare_works():
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_writes(r, work, data, base_dir, kills):
    with open(f"{base_dir}/checkpoint.safetensors", "rb") as f:
        base_ck = f.read()
    # each output a symbolic link to /dev/full: refused before training, naming it (issue 22: nothing is written
    # through a link); a link at the old fixed temporary names is ignored (temporaries are new and unique)
    for k, (fname, extra) in enumerate((("metrics.csv", []), ("epochs.csv", []), ("summary.json", []),
                                        ("checkpoint.safetensors", []), ("telemetry.csv", ["--telemetry", "1"]))):
        out = f"{work}/full{k}"
        os.makedirs(out)
        os.symlink("/dev/full", f"{out}/{fname}")
        rc, out_text, err, hung = r.run(train_args(data, out, extra))
        check_write_fault(r, f"{fname} a link to /dev/full", rc, err, hung, out, data, None, fname)
    for k, (fname, cmd) in enumerate((("checkpoint.safetensors.tmp", "train"), ("report.md.tmp", "compare"))):
        out = f"{work}/oldtmp{k}"
        os.makedirs(out)
        os.symlink("/dev/full", f"{out}/{fname}")
        args = train_args(data, out) if cmd == "train" else [
            "compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--precisions", "fp32,bf16", "--out",
            out, "--progress", "off", "--device", "cpu", "--telemetry", "0"]
        rc, _, err, hung = r.run(args)
        why = None if rc == 0 and not hung else f"exit status {rc}: {err[-300:]!r}"
        r.record("writes", f"a link at the old temporary name {fname}: ignored", why is None, why or "", err)
    rc, _, err, hung = r.run(["info"], stdout_path="/dev/full")
    check_write_fault(r, "info > /dev/full", rc, err, hung, out, data, None, "standard output")
    rc, _, err, hung = r.run(["--help"], stdout_path="/dev/full")
    check_write_fault(r, "--help > /dev/full", rc, err, hung, out, data, None, "standard output")
    # a file-size limit (SIGXFSZ ignored, so writes fail with EFBIG), a previous run's files in the directory
    for limit in (0, 50, 300, 4096, 1 << 16, 1 << 20, 4 << 20, len(base_ck) - 100000):
        out = f"{work}/fsize{limit}"
        shutil.copytree(base_dir, out)

        def pre(limit=limit):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        rc, _, err, hung = r.run(train_args(data, out), preexec=pre)
        check_write_fault(r, f"file size limit {limit} bytes", rc, err, hung, out, data, base_ck, out)
    # a small tmpfs (private mount namespace)
    if unshare_works():
        for size in ("16k", "64k", "1m", "4m", "8m"):
            out = f"{work}/tmpfs{size}"
            os.makedirs(out)
            script = (f'mount -t tmpfs -o size={size} tmpfs "{out}" && cp "{base_dir}"/* "{out}"/ 2>/dev/null; '
                      'exec "$@"')
            rc, _, err, hung = r.run(train_args(data, out), wrap=["unshare", "-rm", "sh", "-c", script, "sh"])
            # the tmpfs is gone with the namespace: judge the message only
            check_write_fault(r, f"tmpfs of {size}, the previous run's files in it", rc, err, hung, out, data, None,
                              out)
        out = f"{work}/ro"
        os.makedirs(out)
        script = f'mount -t tmpfs -o ro tmpfs "{out}" && exec "$@"'
        rc, _, err, hung = r.run(train_args(data, out), wrap=["unshare", "-rm", "sh", "-c", script, "sh"])
        check_write_fault(r, "read-only output directory (ro tmpfs)", rc, err, hung, out, data, None, out)
        out = f"{work}/ro2"
        shutil.copytree(base_dir, out)
        script = f'mount --bind "{out}" "{out}" && mount -o remount,bind,ro "{out}" && exec "$@"'
        rc, _, err, hung = r.run(["train", "--resume", f"{out}/checkpoint.safetensors", "--data", data, "--out", out,
                                  "--epochs", "2", "--progress", "off", "--device", "cpu"],
                                 wrap=["unshare", "-rm", "sh", "-c", script, "sh"])
        check_write_fault(r, "resume into a read-only directory", rc, err, hung, out, data, base_ck, out)
    else:
        r.record("writes", "tmpfs / read-only cases", False, "skipped: unshare -rm does not work here")
    out = f"{work}/afile"
    write(out, b"x")
    rc, _, err, hung = r.run(train_args(data, out))
    check_write_fault(r, "--out names a regular file", rc, err, hung, out, data, None, "afile")
    rc, _, err, hung = r.run(train_args(data, f"{out}/sub"))
    check_write_fault(r, "--out under a regular file", rc, err, hung, out, data, None, "afile")
    rc, _, err, hung = r.run(train_args(data, "/proc/mptrain-campaign"))
    check_write_fault(r, "--out in /proc", rc, err, hung, out, data, None, "/proc/mptrain-campaign")
    # kill -9 while checkpoints are written (--save-every 1: most of the run is writing them)
    out = f"{work}/timing"
    t0 = time.monotonic()
    rc, _, err, _ = r.run(train_args(data, out, ["--save-every", "1", "--epochs", "2"]))
    span = time.monotonic() - t0
    if rc != 0:
        r.record("writes", "kill -9 timing run", False, f"exit status {rc}", err)
        return
    for k in range(kills):
        out = f"{work}/kill{k}"
        shutil.copytree(base_dir, out)
        p = subprocess.Popen([r.mptrain] + train_args(data, out, ["--save-every", "1", "--epochs", "2"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
        time.sleep(span * (0.15 + 0.8 * k / max(kills - 1, 1)))
        p.send_signal(signal.SIGKILL)
        p.wait()
        ok, err = ckpt_loads(r, f"{out}/checkpoint.safetensors", data)
        why = None if ok else "the checkpoint on disk does not load after kill -9"
        if ok:
            rc, _, err, hung = r.run(["train", "--resume", f"{out}/checkpoint.safetensors", "--data", data, "--out",
                                      out, "--epochs", "3", "--max-steps", "1000", "--progress", "off", "--device",
                                      "cpu"])
            if rc != 0 or hung:
                why = f"resuming after kill -9 failed (exit status {rc})"
        r.record("writes", f"kill -9 after {0.15 + 0.8 * k / max(kills - 1, 1):.2f} of the run", why is None,
                 why or "", err)


# ---- set 4: bad command lines ----------------------------------------------------------------------------------


def flag_cases(data, ck):
    """(argv, needle): each must exit 2 with one line naming needle."""
    t = ["train", "--data", data, "--out", "/nonexistent-campaign-out", "--device", "cpu"]
    c = ["compare", "--data", data, "--out", "/nonexistent-campaign-out", "--device", "cpu"]
    cases = [(["frobnicate"], "frobnicate"), ([], "Usage: mptrain COMMAND"), (["train", "--bogus"], "--bogus"),
             (["train", "extra-arg"], "extra-arg"), (["info", "--model", "mlp"], "--model"),
             (["eval", "--data", data], "--checkpoint"), (["eval", "--precision", "fp16", "--checkpoint", ck],
                                                          "--precision"),
             (["train", "--lr"], "--lr"), (["train", "--resume", ck, "--model", "cnn"], "--model"),
             (["lab", "no-such-lesson"], "no-such-lesson"), (["formats", "not-a-number"], "not-a-number"),
             (["compare", "--model"], "--model"), (["train", "--precisions", "fp16"], "--precisions")]
    bad_values = {
        "--model": ["resnet", "", "MLP"], "--precision": ["fp8", "fp64", ""], "--optimizer": ["rmsprop"],
        "--lr": ["-1", "0", "abc", "nan", "inf", "1e999", "0x", "1.0.0"], "--momentum": ["1", "-0.1", "2"],
        "--weight-decay": ["-1", "nan"], "--beta1": ["1", "-0.5"], "--beta2": ["1.5"], "--eps": ["0", "-1e-8"],
        "--epochs": ["0", "-1", "1e20", "99999999999999999999", "1.5", " 3"],
        "--batch-size": ["0", "-1", "65537", "4294967296", "12abc"],
        "--seed": ["-1", "18446744073709551616", "abc"],
        "--loss-scale": ["static:0", "static:-1", "static:inf", "dynamic:nan", "dynamic:", "foo:1", "static", "1e39"],
        "--growth-interval": ["0", "-5"], "--scaler": ["tensorflow"], "--growth-factor": ["0.5"],
        "--backoff-factor": ["0", "1.5"], "--hysteresis": ["0"], "--scale-floor": ["0", "-1"],
        "--master-weights": ["fp16"], "--update-rounding": ["down"], "--optimizer-state": ["fp64"],
        "--nonfinite": ["ignore"], "--tf32-matmul": ["yes"], "--lr-schedule": ["linear"],
        "--warmup-steps": ["-1"], "--min-lr": ["-1"], "--step-size": ["0"], "--gamma": ["0", "2"],
        "--clip-norm": ["-1"], "--limit-train": ["-1"], "--val-split": ["1", "-0.1", "1.5"],
        "--inject-nonfinite": ["-2"], "--device": ["tpu"], "--threads": ["0", "257", "-1"],
        "--log-every": ["0", "-1"], "--save-every": ["-1"], "--max-steps": ["-1"], "--progress": ["sometimes"],
        "--telemetry": ["-1"],
    }
    for flag, values in bad_values.items():
        for v in values:
            cases.append((t + [flag, v], flag))
    cases += [
        (t + ["--optimizer", "adam", "--nesterov"], "--nesterov"),
        (t + ["--optimizer", "sgd", "--nesterov"], "--nesterov"),
        (t + ["--precision", "fp16", "--master-weights", "none", "--optimizer-state", "fp8"], "--optimizer-state"),
        (t + ["--update-rounding", "stochastic"], "--update-rounding"),
        (t + ["--scale-floor", "8", "--scale-ceiling", "4"], "--scale-ceiling"),
        (t + ["--grad-comm", "bf16"], "--grad-comm"),
        (t + ["--shadow"], "--shadow"),
        (t + ["--lr", "1e-3\n\x1b[31mmptrain: all good"], "--lr"),
        (t + ["--model", "\xff\xfe"], "--model"),
        (t + ["--model", "x" * 10000], "--model"),
        (c + ["--precisions", "fp32,fp8"], "--precisions"), (c + ["--precisions", ""], "--precisions"),
        (c + ["--precisions", "fp32,fp32"], "--precisions"), (c + ["--seeds", "0"], "--seeds"),
        (c + ["--seeds", "1,1"], "--seeds"), (c + ["--margin", "-1"], "--margin"),
    ]
    return cases


def run_flags(r, data, ck):
    for argv, needle in flag_cases(data, ck):
        rc, _, err, hung = r.run(argv)
        why = judge(rc, err, hung, 2, needle, one_line=bool(argv))  # no command at all: the usage text
        name = " ".join(a if len(a) < 40 else a[:20] + f"...({len(a)} bytes)" for a in argv) or "(no arguments)"
        r.record("flags", name.encode("unicode_escape").decode(), why is None, why or "", err)


# ---- main ------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.environ.get("MPT_BUILD_ROOT", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--mptrain", default=os.path.join(root, "tools", "mptrain"))
    ap.add_argument("--sets", default="datasets,checkpoints,writes,flags")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as hung")
    ap.add_argument("--kills", type=int, default=30, help="kill -9 runs (default 30)")
    ap.add_argument("--log", default="campaign.log", help="one line per case: set, case, verdict, why, message "
                    "(default campaign.log)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    mptrain = os.path.abspath(a.mptrain)
    if not os.access(mptrain, os.X_OK):
        sys.exit(f"campaign: {mptrain}: no mptrain binary there (build first, or --mptrain PATH)")
    work = tempfile.mkdtemp(prefix="mpt_campaign_")
    log_path = a.log
    with open(log_path, "w") as log:
        r = Runner(mptrain, a.timeout, log)
        r.cwd = work
        data = f"{work}/data"
        make_dataset(data)
        base = f"{work}/base"
        rc, _, err, _ = r.run(train_args(data, base, ["--precision", "fp16", "--max-steps", "2"]))
        if rc != 0:
            sys.exit(f"campaign: the fixture run failed: {err.decode(errors='replace')}")
        sets = a.sets.split(",")
        if "datasets" in sets:
            run_datasets(r, work, data)
        if "checkpoints" in sets:
            run_checkpoints(r, work, data, base)
        if "writes" in sets:
            run_writes(r, work, data, base, a.kills)
        if "flags" in sets:
            run_flags(r, data, f"{base}/checkpoint.safetensors")
    total_other = 0
    print(f"{'set':<12} {'tried':>6} {'clean':>6} {'other':>6}")
    for s in ("datasets", "checkpoints", "writes", "flags"):
        res = r.results.get(s, [])
        if not res:
            continue
        clean = sum(ok for _, ok, _ in res)
        total_other += len(res) - clean
        print(f"{s:<12} {len(res):>6} {clean:>6} {len(res) - clean:>6}")
    for s, res in r.results.items():
        for name, ok, why in res:
            if not ok:
                print(f"  other: {s}: {name}: {why}")
    print(f"log: {log_path}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if total_other else 0)


if __name__ == "__main__":
    main()
