#!/usr/bin/env python3
"""tests/hostile/campaign.py - the hostile-input campaigns of issues 13, 22 and 36, as a reproducible script.

Runs the mptrain binary against twelve sets of hostile inputs and faults and counts, per set, the cases tried,
those handled cleanly, and the others (each listed with why):

  datasets     malformed dataset directories: each of the four IDX files missing, empty, truncated in its
               header or payload, with trailing bytes, a wrong magic, type code or rank, zero items, a FIFO, a
               directory, a symbolic link loop or a dangling link, a corrupt/truncated/fake .gz, a .gz claiming
               gigabytes; and whole-set faults (counts that disagree, training and test images of different sizes, 0 x 0
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
  outdir       (issue 22) links planted by another user (setpriv nobody, as root) at every output name of train
               and compare and as --out in a sticky directory; two runs on one --out; 300 reads of a checkpoint
               rewritten every step; a new run killed in an earlier run's directory; another run's checkpoint
               resumed into a directory; standard output closed; --out on a 2 MB tmpfs
  stops        (issue 22) SIGINT/SIGTERM at random points (--signals, default 20), two signals, a stopped compare
  hangs        (issue 22) ulimit -v 128/192/256 MiB x train/compare x GEMM engine x threads, a gnuplot that
               never returns, rank 1 of mpirun -np 2 --data-parallel stopped with SIGSTOP
  messages     (issue 22) eval of a cosine run, flag messages (--beta1/--beta2 rounding to 1 in FP32,
               --warmup-steps, --min-lr), 5001-character arguments, lab --param keys, skipped-steps warning, nan
  mpi          (issue 36) rank 1 of mpirun -np 2 started with another value of a setting (train --data-parallel,
               compare, lab) or relabelled data: exit 2, one line of mptrain's naming the setting, nothing trained;
               the same command on both ranks trains
  publish      (issue 36) a new run in an earlier run's directory killed at every publish point of its saves
               (MPT_TEST_PUBLISH_KILL), by kill -9 at random times while it saves every step (--publish-kills), and
               under file-size limits: the earlier files byte for byte, or the new set once the next mptrain opens it
  sigpipe      (issue 36) train | head at several points, compare | head, SIGHUP/SIGQUIT/SIGALRM at random points,
               SIGUSR1: exit 128 + the signal, the run saved and marked, one line on stderr; SIGUSR1 saves and goes on
  fingerprint  (issue 36) resumes on data of the same size with a label, a pixel or two items changed, on the same
               bytes gzip'd, on another test set, and of checkpoints with forged "data_fingerprint" metadata (resume and eval)

Rejected cleanly means: the expected exit status (1 for bad input and I/O faults, 2 for usage errors; the few
checkpoint cases that only the data or the job can refute, and that eval rightly evaluates, are in EXPECTED), no
crash (no signal, no sanitizer report), no hang (each run is killed after --timeout seconds), exactly one line
on stderr, printable (control bytes escaped), naming the file or flag; and nothing lost: a rejected resume
leaves the checkpoint and CSVs of its directory byte-identical, a failed write leaves the previous checkpoint
either unchanged or replaced by a complete one, and after kill -9 the checkpoint on disk loads and resumes.
For kill -9 the criterion is only the last one (there is no message).

Usage: tests/hostile/campaign.py [--mptrain PATH] [--sets datasets,checkpoints,...,fingerprint] [--log FILE]
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


LOCK = ".mptrain.lock"


def snapshot(d):
    """The regular files of d and their bytes, but the lock file (each run that takes the lock writes its PID
    there, a refused resume too: tools/outdir.h)."""
    snap = {}
    for name in sorted(os.listdir(d)):
        if name == LOCK:
            continue
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

    whole("32 x 32 training images, 28 x 28 test images", lambda d: images(d, "train", N_TRAIN, 32, 32), "32 x 32")
    whole("test images 27 x 27, train 28 x 28", lambda d: images(d, "t10k", N_TEST, 27, 27), "t10k-images")
    whole("0 x 0 images", lambda d: (images(d, "train", N_TRAIN, 0, 0), images(d, "t10k", N_TEST, 0, 0)),
          "train-images")
    whole("0 images and 0 labels", lambda d: (images(d, "train", 0, 28, 28), labels(d, "train", [])),
          "train-images")
    whole("train labels one fewer than images", lambda d: labels(d, "train", [1] * (N_TRAIN - 1)), "train-labels")
    whole("test images one more than labels", lambda d: images(d, "t10k", N_TEST + 1, 28, 28), "t10k-images")
    whole("test label 10, training labels 0..9", lambda d: labels(d, "t10k", [10] + [3] * (N_TEST - 1)), "train-labels")
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
    # issue 22: one bit flipped in a setting of the header, the checksum left as written (it covers the header)
    for what, old, new in (("lr 0.001 -> 0.003", b'lr\\":\\"0.001', b'lr\\":\\"0.003'),
                           ("beta2 0.999 -> 0.899", b'beta2\\":\\"0.999', b'beta2\\":\\"0.899'),
                           ("weight-decay 0 -> 1", b'weight-decay\\":\\"0\\"', b'weight-decay\\":\\"1\\"'),
                           ("epochs 1 -> 3", b'epochs\\":\\"1\\"', b'epochs\\":\\"3\\"')):
        if old in raw[8:8 + hlen]:
            cases.append((f"header bit flip, checksum kept: {what}", raw.replace(old, new, 1)))
    # two tensors of the same shape with their data_offsets swapped, the checksum kept
    same = [t for t in tensors if t.endswith(":exp_avg")]
    if same:
        a_name, b_name = same[0], same[0] + "_sq"
        sw = json.loads(json.dumps(header))
        sw[a_name]["data_offsets"], sw[b_name]["data_offsets"] = header[b_name]["data_offsets"], header[a_name]["data_offsets"]
        h = json.dumps(sw, separators=(",", ":")).encode()
        blob = struct.pack("<Q", len(h)) + h + data
        blob = blob[:34] + raw[34:42] + blob[42:]  # the original checksum, as the file had it
        cases.append((f"data_offsets of {a_name} and {b_name} swapped, checksum kept", blob))
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
# --data or mpirun it needs: a usage error, 2); eval reads neither, so evaluating is right (0). Since the checkpoint
# records the data's fingerprint (issue 36), n_train beyond the recorded training images is an impossible state of the
# file itself, refused by both (1).
EXPECTED = {
    "state.epoch = 5": (1, 0), "state.batch = 1000000000": (1, 0), "state.batch = 5": (1, 0),
    "state.n_train = 201": (1, 1), "state.ranks = 2": (2, 0),
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
        "--model": ["resnet", "", "MLP"], "--precision": ["fp4", "fp64", ""], "--optimizer": ["rmsprop"],
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
        (c + ["--precisions", "fp32,fp4"], "--precisions"), (c + ["--precisions", ""], "--precisions"),
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


# ---- sets 5-7: issue 22 (output directories, stops, hangs, messages) -----------------------------------------------


def file_crc_ok(path):
    """Whether path is a complete checkpoint by the checksum of engine/checkpoint.h (whole file, digits 34..41 as
    zeros), read by the script itself: fast enough to poll while a run writes."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        return len(raw) > 42 and raw[8:34] == b'{"__metadata__":{"crc32":"' and \
            zlib.crc32(raw[:34] + b"00000000" + raw[42:]) == int(raw[34:42], 16)
    except (OSError, ValueError):
        return False


def as_nobody(cmd):
    """cmd (a shell line) as user nobody when root can (setpriv), else as this user; True when it ran as nobody."""
    nobody = os.geteuid() == 0 and shutil.which("setpriv") is not None
    full = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if nobody else []) + ["sh", "-c", cmd]
    subprocess.run(full, check=True)
    return nobody


def start_bg(r, args):
    return subprocess.Popen([r.mptrain] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=r.cwd,
                            start_new_session=True)


def wait_lock(d, pid, limit=60.0):
    """Until d's lock file names pid (the run holds the directory and trains), or the limit."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with open(f"{d}/{LOCK}") as f:
                if f"PID {pid}," in f.read():
                    return True
        except OSError:
            pass
        time.sleep(0.01)
    return False


def run_outdir(r, work, data, base_dir):
    """Items 1-6: links, two runs on one directory, runs published together, closed stdout, a full disk."""
    shared = f"{work}/shared"
    os.makedirs(shared)
    os.chmod(shared, 0o1777)
    os.chmod(work, 0o711)
    victim = f"{work}/victim"
    text = b"the victim's file\n"
    for k, name in enumerate(("metrics.csv", "epochs.csv", "summary.json", "checkpoint.safetensors", "telemetry.csv",
                              "gpu_kernels.txt")):
        write(victim, text)
        d = f"{shared}/t{k}"
        as_nobody(f"mkdir {d} && ln -s {victim} {d}/{name}")
        rc, _, err, hung = r.run(train_args(data, d, ["--max-steps", "2", "--telemetry", "1"]))
        why = judge(rc, err, hung, 1, name)
        if open(victim, "rb").read() != text:
            why = "the victim's file was written"
        r.record("outdir", f"a link planted at {name}", why is None, why or "", err)
    for k, name in enumerate(("report.md", "compare.json", "convergence.gp", "convergence.png", "convergence.gp.log",
                              "numerics.gp", "numerics_twin.dat")):
        write(victim, text)
        d = f"{shared}/c{k}"
        as_nobody(f"mkdir {d} && ln -s {victim} {d}/{name}")
        rc, _, err, hung = r.run(["compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--max-steps", "2",
                                  "--precisions", "fp32", "--out", d, "--progress", "off", "--device", "cpu",
                                  "--telemetry", "1"])
        why = judge(rc, err, hung, 1, name)
        if open(victim, "rb").read() != text:
            why = "the victim's file was written"
        r.record("outdir", f"compare: a link planted at {name}", why is None, why or "", err)
    theirs = f"{work}/victim-run"
    os.makedirs(theirs)
    link = f"{shared}/link"
    if as_nobody(f"ln -s {theirs} {link}"):
        rc, _, err, hung = r.run(train_args(data, link, ["--max-steps", "2"]))
        why = judge(rc, err, hung, 1, "protected_symlinks")
        if os.path.exists(f"{theirs}/checkpoint.safetensors"):
            why = "wrote into the directory the link points at"
        r.record("outdir", "--out: another user's link in a sticky directory", why is None, why or "", err)
    else:
        r.record("outdir", "--out: another user's link in a sticky directory", False, "skipped: not root")
    # two runs on one --out (3 times): the second is refused naming the first's PID; the first's checkpoint stays
    # complete while the second tries, and loads at the end
    for k in range(3):
        d = f"{work}/two{k}"
        p = start_bg(r, train_args(data, d, ["--save-every", "1", "--epochs", "40", "--batch-size", "20"]))
        ok = wait_lock(d, p.pid)
        rc, _, err, hung = r.run(train_args(data, d, ["--save-every", "1"]))
        why = None if ok else "the first run never took the lock"
        why = why or judge(rc, err, hung, 1, f"PID {p.pid}")
        p.wait()
        if why is None and (p.returncode != 0 or not ckpt_loads(r, f"{d}/checkpoint.safetensors", data)[0]):
            why = f"the first run ended with {p.returncode} or left a checkpoint that does not load"
        r.record("outdir", f"two runs on one --out ({k + 1})", why is None, why or "", err)
    # a --save-every 1 run read 300 times as it writes: every read is a complete checkpoint (2 of 833 were not)
    d = f"{work}/reads"
    p = start_bg(r, train_args(data, d, ["--save-every", "1", "--epochs", "40", "--batch-size", "20"]))
    wait_lock(d, p.pid)
    bad = reads = 0
    while p.poll() is None and reads < 300:
        if os.path.exists(f"{d}/checkpoint.safetensors"):
            reads += 1
            bad += not file_crc_ok(f"{d}/checkpoint.safetensors")
    p.kill()
    p.wait()
    r.record("outdir", f"{reads} reads of a checkpoint being rewritten every step", bad == 0 and reads > 0,
             f"{bad} incomplete" if bad or not reads else "")
    # a new run killed in an earlier run's directory (3 timings): the earlier run's files are as they were
    for k, delay in enumerate((0.05, 0.3, 1.0)):
        d = f"{work}/pub{k}"
        shutil.copytree(base_dir, d)
        before = snapshot(d)
        p = start_bg(r, train_args(data, d, ["--epochs", "200", "--batch-size", "20", "--seed", "7"]))
        wait_lock(d, p.pid)
        time.sleep(delay)
        p.kill()
        p.wait()
        after = {n: b for n, b in snapshot(d).items() if not n.startswith(".")}
        before = {n: b for n, b in before.items() if not n.startswith(".")}
        why = None if after == before else "the earlier run's files changed"
        r.record("outdir", f"a new run killed after {delay} s in an earlier run's directory", why is None, why or "")
    # a checkpoint of another run resumed into a directory: refused (naming both runs), nothing changes
    d = f"{work}/foreign"
    shutil.copytree(base_dir, d)
    other = f"{work}/other"
    r.run(train_args(data, other, ["--max-steps", "2", "--seed", "9"]))
    before = snapshot(d)
    rc, _, err, hung = r.run(["train", "--resume", f"{other}/checkpoint.safetensors", "--data", data, "--out", d,
                              "--epochs", "2", "--progress", "off", "--device", "cpu"])
    why = judge(rc, err, hung, 2, "--resume: ")
    if why is None and snapshot(d) != before:
        why = "the directory changed"
    r.record("outdir", "another run's checkpoint resumed into a directory", why is None, why or "", err)
    # closed standard output
    d = f"{work}/closed"
    rc, _, err, hung = r.run(train_args(data, d, ["--max-steps", "2"]), preexec=lambda: os.close(1))
    ok = rc == 0 and open(f"{d}/metrics.csv", "rb").read().startswith(b"step,epoch,loss")
    r.record("outdir", "standard output closed", ok, "" if ok else f"exit {rc} or metrics.csv holds printed lines",
             err)
    # a 2 MB tmpfs: refused before training
    if unshare_works():
        d = f"{work}/tmpfs2m"
        os.makedirs(d)
        script = f'mount -t tmpfs -o size=2m tmpfs "{d}" && exec "$@"'
        rc, out, err, hung = r.run(train_args(data, d), wrap=["unshare", "-rm", "sh", "-c", script, "sh"])
        why = judge(rc, err, hung, 1, "MiB free")
        if why is None and b"epoch 1/" in out:
            why = "it trained first"
        r.record("outdir", "--out on a 2 MB tmpfs", why is None, why or "", err)
    else:
        r.record("outdir", "--out on a 2 MB tmpfs", False, "skipped: unshare -rm does not work here")


def run_stops(r, work, data, tries):
    """Item 10: SIGINT / SIGTERM at random points; two signals; a stopped compare."""
    rnd = random.Random(22)
    for k in range(tries):
        sig = (signal.SIGINT, signal.SIGTERM)[k % 2]
        d = f"{work}/sig{k}"
        p = start_bg(r, train_args(data, d, ["--epochs", "100", "--batch-size", "20", "--save-every", "7"]))
        wait_lock(d, p.pid)
        time.sleep(rnd.uniform(0.0, 1.5))
        p.send_signal(sig)
        try:
            p.wait(timeout=r.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        why = None
        if p.returncode != 128 + sig:
            why = f"exit {p.returncode}, expected {128 + sig}"
        else:
            try:
                summary = json.load(open(f"{d}/summary.json"))
                if not summary.get("interrupted") or summary["interrupted"]["signal"] != signal.Signals(sig).name:
                    why = "summary.json is not marked interrupted"
            except (OSError, ValueError, KeyError, TypeError):
                why = "no summary.json"
        if why is None:
            rc, _, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", data, "--out", d,
                                      "--max-steps", "2000", "--epochs", "101", "--progress", "off", "--device",
                                      "cpu"])
            if rc != 0 or hung:
                why = f"resuming failed ({rc})"
        r.record("stops", f"{signal.Signals(sig).name} after a random time ({k + 1})", why is None, why or "")
    for k in range(2):
        d = f"{work}/twice{k}"
        p = start_bg(r, train_args(data, d, ["--epochs", "100", "--batch-size", "20", "--save-every", "5"]))
        wait_lock(d, p.pid)
        time.sleep(0.2 + 0.5 * k)
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGINT)
        p.wait()
        ck = f"{d}/checkpoint.safetensors"
        why = None if p.returncode in (-signal.SIGINT, 130) else f"exit {p.returncode}"
        if why is None and os.path.exists(ck) and not file_crc_ok(ck):
            why = "the checkpoint left is incomplete"
        r.record("stops", f"two SIGINTs ({k + 1})", why is None, why or "")
    d = f"{work}/cmpstop"
    r.run(["compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--precisions", "fp32,bf16", "--out", d,
           "--progress", "off", "--device", "cpu", "--telemetry", "0"])
    p = start_bg(r, ["compare", "--data", data, "--epochs", "100", "--batch-size", "20", "--precisions", "fp32",
                     "--out", d, "--progress", "off", "--device", "cpu", "--telemetry", "0"])
    wait_lock(f"{d}/fp32", p.pid)
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    p.wait()
    stale = [n for n in ("report.md", "compare.json", "convergence.png", "bf16/metrics.csv", "bf16/checkpoint.safetensors")
             if os.path.exists(f"{d}/{n}")]
    why = f"exit {p.returncode}" if p.returncode != 143 else (f"stale: {', '.join(stale)}" if stale else None)
    r.record("stops", "a stopped compare leaves no earlier job's results", why is None, why or "")


def mpi_rank_pid(rank, out):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if out.encode() in cmd and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return 0


def run_hangs(r, work, data):
    """Items 7-9: memory limits, a gnuplot that never returns, a stopped MPI rank."""
    import resource

    def limit(mib):
        def pre():
            resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
        return pre
    for mib in (128, 192, 256):
        for engine in ("default", "openblas"):
            for threads in ("1", "2"):
                for cmd in ("train", "compare"):
                    env = {"OPENBLAS_NUM_THREADS": threads}
                    if engine == "openblas":
                        env["MPT_CPU_ENGINE"] = "openblas"
                    d = f"{work}/mem{mib}{engine}{threads}{cmd}"
                    args = train_args(data, d) if cmd == "train" else [
                        "compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--precisions", "fp32,fp16",
                        "--out", d, "--progress", "off", "--device", "cpu"]
                    rc, _, err, hung = r.run(args, env=env, preexec=limit(mib))
                    why = "hung (killed after the timeout)" if hung else None if rc in (0, 1) else f"exit {rc}"
                    r.record("hangs", f"ulimit -v {mib} MiB, {cmd}, engine {engine}, {threads} thread(s)", why is None,
                             why or "", err)
    bindir = f"{work}/fakebin"
    os.makedirs(bindir)
    write(f"{bindir}/gnuplot", b"#!/bin/sh\nexec sleep 1000\n")
    os.chmod(f"{bindir}/gnuplot", 0o755)
    d = f"{work}/stuckplot"
    t0 = time.monotonic()
    rc, _, err, hung = r.run(["compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--max-steps", "2",
                              "--log-every", "1", "--precisions", "fp32", "--out", d, "--progress", "off", "--device",
                              "cpu", "--telemetry", "0", "--plot-timeout", "3"],
                             env={"PATH": f"{bindir}:{os.environ.get('PATH', '')}"})
    why = "hung" if hung else None if rc == 0 and b"--plot-timeout 3" in err else f"exit {rc}, or no word of the limit"
    if why is None and not os.path.exists(f"{d}/convergence.gp"):
        why = "the script is gone"
    r.record("hangs", f"a gnuplot that never returns (compare ended in {time.monotonic() - t0:.0f} s)", why is None,
             why or "", err)
    if not shutil.which("mpirun"):
        r.record("hangs", "a stopped MPI rank", False, "skipped: no mpirun")
        return
    for k in range(2):
        d = f"{work}/mpistop{k}"
        full = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", r.mptrain] + train_args(
            data, d, ["--epochs", "200", "--batch-size", "20", "--data-parallel", "--comm-timeout", "4", "--threads",
                      "1"])
        t0 = time.monotonic()
        p = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                             cwd=r.cwd)
        pid1 = 0
        end = time.monotonic() + 60
        while not pid1 and time.monotonic() < end and p.poll() is None:
            if os.path.exists(f"{d}/{LOCK}"):
                pid1 = mpi_rank_pid(1, d)
            time.sleep(0.05)
        time.sleep(0.5 + k)
        if pid1:
            os.kill(pid1, signal.SIGSTOP)
        try:
            _, err = p.communicate(timeout=120)
            hung = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
            hung = True
        if pid1:
            try:
                os.kill(pid1, signal.SIGKILL)
            except OSError:
                pass
        why = "rank 1 not found" if not pid1 else "hung" if hung else None if (
            p.returncode != 0 and b"rank 1 did not arrive" in err) else f"exit {p.returncode}, rank 1 not named"
        r.record("hangs", f"rank 1 stopped (SIGSTOP), --comm-timeout 4 ({k + 1}; ended in "
                 f"{time.monotonic() - t0:.0f} s)", why is None, why or "", err[-400:])


def run_messages(r, work, data):
    """Items 11-15."""
    d = f"{work}/cosine"
    r.run(train_args(data, d, ["--lr-schedule", "cosine", "--warmup-steps", "2"]))
    rc, _, err, hung = r.run(["eval", "--checkpoint", f"{d}/checkpoint.safetensors", "--data", data, "--device", "cpu"])
    r.record("messages", "eval of a cosine run whose warmup outlasts its epochs", rc == 0 and not hung,
             "" if rc == 0 else f"exit {rc}", err)
    t = train_args(data, f"{work}/m12")
    for flag, value, needle, extra in (("--beta1", "0.9999999999", "rounds to 1 in FP32", []),
                                       ("--beta2", "0.99999999999", "rounds to 1 in FP32", []),
                                       ("--warmup-steps", "1000000", "--warmup-steps 1000000: expected fewer",
                                        ["--lr-schedule", "cosine"]),
                                       ("--min-lr", "1", "--min-lr 1: expected at most --lr",
                                        ["--lr-schedule", "cosine"])):
        rc, _, err, hung = r.run(t + extra + [flag, value])
        why = judge(rc, err, hung, 2, needle)
        r.record("messages", f"{flag} {value}", why is None, why or "", err)
    for name, arg in (("a 5001-character number", "0." + "0" * 4998 + "1"), ("a 5001-character word", "x" * 5001)):
        rc, out, err, hung = r.run(["formats", arg])
        first = (out or err).split(b"\n")[0]
        why = "hung" if hung else None if len(first) < 200 else f"its first line has {len(first)} bytes"
        r.record("messages", f"formats of {name}", why is None, why or "", err)
    for lesson, param in (("overflow", "nosuch=1"), ("overflow", "sgd-lr=0.1"), ("noise", "scale=2")):
        rc, _, err, hung = r.run(["lab", lesson, "--quick", "--param", param, "--data", data, "--out",
                                  f"{work}/lab"])
        why = judge(rc, err, hung, 2, param.split("=")[0])
        r.record("messages", f"lab {lesson} --param {param}", why is None, why or "", err)
    rc, out, err, hung = r.run(train_args(data, f"{work}/skip", ["--precision", "fp16", "--loss-scale",
                                                               "static:16777216", "--batch-size", "16"]))
    r.record("messages", "16 of 16 steps skipped: warned", rc == 0 and b"steps were skipped" in out,
             "" if b"steps were skipped" in out else "no warning", err)
    rc, out, err, hung = r.run(train_args(data, f"{work}/nan", ["--precision", "fp16", "--loss-scale", "none",
                                                              "--nonfinite", "apply", "--lr", "10", "--batch-size",
                                                              "16"]))
    csv = open(f"{work}/nan/metrics.csv", "rb").read() if rc == 0 else b""
    ok = rc == 0 and b"-nan" not in out and b"-nan" not in csv and b"loss nan" in out
    r.record("messages", "a non-finite loss is printed nan, not -nan", ok, "" if ok else "-nan, or no nan loss", err)


# ---- issue 36: mpi, publish, sigpipe, fingerprint ---------------------------------------------------------------


def relabelled_copy(src, dst, part="train", offset=3, pixel=False):
    """A copy of dataset src with one label (or, pixel True, one pixel) of part changed: the same size, other data."""
    shutil.copytree(src, dst)
    name = f"{dst}/{'train' if part == 'train' else 't10k'}-{'images-idx3' if pixel else 'labels-idx1'}-ubyte"
    raw = bytearray(open(name, "rb").read())
    at = (16 if pixel else 8) + offset
    raw[at] = (raw[at] + 1) % (256 if pixel else 10)
    write(name, bytes(raw))


def mptrain_lines(err):
    """The lines of stderr that are mptrain's (mpirun adds banners of its own)."""
    return [ln for ln in err.decode("utf-8", "replace").split("\n") if ln.startswith("mptrain")]


def run_two(r, args0, args1, limit=120):
    """mpirun -np 1 mptrain ARGS0 : -np 1 mptrain ARGS1; returns (rc, err, hung, seconds)."""
    full = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1", r.mptrain] + args0 + \
           [":", "-np", "1", r.mptrain] + args1
    t0 = time.monotonic()
    p = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd=r.cwd)
    try:
        _, err = p.communicate(timeout=limit)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        hung = True
    return p.returncode, err, hung, time.monotonic() - t0


def run_mpi(r, work, data):
    """MPI disagreement: rank 1 started with another value of a setting, or other data, than rank 0. Clean: exit 2
    within 60 s, exactly one line of mptrain's, naming the setting ("the ranks disagree on --lr: rank 1: ..., rank 0:
    ..."), and nothing trained. The same command on both ranks still trains (exit 0)."""
    if not shutil.which("mpirun"):
        r.record("mpi", "mpirun", False, "skipped: no mpirun")
        return
    other = f"{work}/mpi_data_other"
    relabelled_copy(data, other)
    train = ["train", "--data", data, "--epochs", "1", "--batch-size", "50", "--max-steps", "3", "--progress", "off",
             "--device", "cpu", "--threads", "1", "--data-parallel"]
    cases = [("--lr", "0.1"), ("--precision", "bf16"), ("--optimizer", "sgd"), ("--batch-size", "100"),
             ("--max-steps", "4"), ("--epochs", "2"), ("--seed", "5"), ("--loss-scale", "static:128"),
             ("--grad-comm", "bf16"), ("--log-every", "1"), ("--telemetry", "1"), ("--limit-train", "100"),
             ("--limit-test", "20"), ("--threads", "2"), ("--weight-decay", "0.5"), ("--data", other)]
    names = {"--data": "--data (the images as loaded)", "--threads": "--threads (the CPU GEMM threads in use)"}
    for k, (flag, value) in enumerate(cases):
        out = f"{work}/mpi_train{k}"
        rc, err, hung, secs = run_two(r, train + ["--out", out], train + ["--out", out, flag, value])
        name = names.get(flag, flag)
        lines = mptrain_lines(err)
        why = "hung" if hung else f"exit {rc}, expected 2" if rc != 2 else f"took {secs:.0f} s" if secs > 60 else \
            f"{len(lines)} lines of mptrain's" if len(lines) != 1 else \
            "the setting is not named" if f"the ranks disagree on {name}: rank 1: " not in lines[0] else \
            "it trained" if os.path.exists(f"{out}/metrics.csv") else None
        r.record("mpi", f"train --data-parallel, rank 1 with {flag} {value if flag != '--data' else '(relabelled)'}",
                 why is None, why or "", err[-400:])
    out = f"{work}/mpi_train_same"
    rc, err, hung, _ = run_two(r, train + ["--out", out], train + ["--out", out])
    r.record("mpi", "train --data-parallel, the same command on both ranks", rc == 0 and not hung,
             "" if rc == 0 else f"exit {rc}", err[-400:])
    cmp = ["compare", "--data", data, "--epochs", "1", "--batch-size", "50", "--max-steps", "2", "--progress", "off",
           "--device", "cpu", "--threads", "1", "--telemetry", "0", "--precisions", "fp32,bf16"]
    cases = [("--precisions", "fp32,bf16,fp16"), ("--precisions", "bf16,fp32"), ("--precisions", "fp32"),
             ("--lr", "0.1"), ("--seed", "3"), ("--model", "lenet5"), ("--epochs", "2"), ("--max-steps", "3"),
             ("--limit-train", "100"), ("--data", other)]
    for k, (flag, value) in enumerate(cases):
        out = f"{work}/mpi_cmp{k}"
        rc, err, hung, secs = run_two(r, cmp + ["--out", out], cmp + ["--out", out, flag, value])
        name = "--data (the images as loaded)" if flag == "--data" else flag
        lines = mptrain_lines(err)
        why = "hung" if hung else f"exit {rc}, expected 2" if rc != 2 else f"took {secs:.0f} s" if secs > 60 else \
            f"{len(lines)} lines of mptrain's" if len(lines) != 1 else \
            "the setting is not named" if f"the ranks disagree on {name}: rank 1: " not in lines[0] else \
            "a run trained" if os.path.exists(f"{out}/fp32/metrics.csv") or os.path.exists(f"{out}/report.md") else None
        r.record("mpi", f"compare, rank 1 with {flag} {value if flag != '--data' else '(relabelled)'}", why is None,
                 why or "", err[-400:])
    out = f"{work}/mpi_cmp_seeds"
    rc, err, hung, secs = run_two(r, cmp + ["--out", out, "--seeds", "2"], cmp + ["--out", out, "--seeds", "3"])
    lines = mptrain_lines(err)
    why = "hung" if hung else f"exit {rc}" if rc != 2 else None if len(lines) == 1 and \
        "the ranks disagree on --seeds: rank 1: 0,1,2, rank 0: 0,1" in lines[0] else "not one line naming --seeds"
    r.record("mpi", "compare, rank 1 with --seeds 3 against 2", why is None, why or "", err[-400:])
    out = f"{work}/mpi_cmp_same"
    rc, err, hung, _ = run_two(r, cmp + ["--out", out], cmp + ["--out", out])
    r.record("mpi", "compare, the same command on both ranks", rc == 0 and not hung and os.path.exists(
        f"{out}/report.md"), "" if rc == 0 else f"exit {rc}", err[-400:])
    lab = ["lab", "--device", "cpu", "--threads", "1", "--data", data]
    for k, (a0, a1, flag) in enumerate(((["--quick", "noise"], ["noise"], "--quick"),
                                        (["--quick", "noise"], ["--quick", "tf32"], "the lessons"))):
        out = f"{work}/mpi_lab{k}"
        rc, err, hung, secs = run_two(r, lab + ["--out", out] + a0, lab + ["--out", out] + a1)
        lines = mptrain_lines(err)
        why = "hung" if hung else f"exit {rc}, expected 2" if rc != 2 else \
            None if len(lines) == 1 and f"the ranks disagree on {flag}: rank 1: " in lines[0] else \
            f"not one line naming {flag}"
        r.record("mpi", f"lab, rank 1 with {' '.join(a1)} against {' '.join(a0)}", why is None, why or "", err[-400:])


def csv_run_ids(path):
    """The set of run ids in the last column of the CSV's data rows (None when it cannot be read)."""
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        return None
    return {ln.rsplit(",", 1)[-1] for ln in lines if ln}


def ckpt_run_id(path):
    try:
        header, _ = parse_ckpt(open(path, "rb").read())
        return json.loads(header["__metadata__"]["state"]).get("run_id")
    except (OSError, ValueError, KeyError, struct.error):
        return None


def publish_outcome(r, d, data, a_files, a_id):
    """Why the directory d, after a kill or a failed save of a new run in run A's directory, is neither A's files as
    they were (A then resumes there) nor the new run's set once the next mptrain completes it; None when it is one."""
    files = {n: b for n, b in snapshot(d).items() if not n.startswith(".")}
    ck = f"{d}/checkpoint.safetensors"
    if ckpt_run_id(ck) == a_id:  # not committed (the checkpoint's rename is the commit)
        if files != a_files:
            return "the earlier run's files changed"
        rc, _, err, hung = r.run(["train", "--resume", ck, "--data", data, "--out", d, "--epochs", "2", "--progress",
                                  "off", "--device", "cpu"])
        if os.path.exists(f"{d}/.mptrain.publish"):
            return "the uncommitted journal is still there after the resume"
        return None if rc == 0 and csv_run_ids(f"{d}/epochs.csv") == {a_id} else f"the earlier run did not resume ({rc})"
    rc, _, err, hung = r.run(["train", "--resume", ck, "--data", data, "--out", d, "--max-steps", "2000", "--epochs",
                              "3", "--progress", "off", "--device", "cpu"])
    b_id = ckpt_run_id(ck)
    if rc != 0 or hung:
        return f"the new run did not resume ({rc}): {err.decode(errors='replace')[:200]}"
    if b_id == a_id or os.path.exists(f"{d}/.mptrain.publish"):
        return "the new set was not completed"
    for n in ("metrics.csv", "epochs.csv"):
        if csv_run_ids(f"{d}/{n}") != {b_id}:
            return f"{n} holds rows of another run than the checkpoint's"
    return None


def run_publish(r, work, data, base_dir, kills):
    """Publish sets: a new run in an earlier run's (A's) directory, killed at each publish point of its saves
    (MPT_TEST_PUBLISH_KILL), with kill -9 at random times while it saves every step, and with file-size limits that
    fail one of its writes: each leaves A's files byte for byte (and A resumes) or the new run's set, completed by
    the next mptrain on the directory."""
    a_dir = f"{work}/pub_a"
    r.run(train_args(data, a_dir, ["--seed", "1"]))
    a_files = {n: b for n, b in snapshot(a_dir).items() if not n.startswith(".")}
    a_id = ckpt_run_id(f"{a_dir}/checkpoint.safetensors")
    b_args = ["--max-steps", "3", "--save-every", "2", "--seed", "2"]
    _, _, trace, _ = r.run(train_args(data, f"{work}/pub_trace", b_args), env={"MPT_TEST_PUBLISH_TRACE": "1"})
    points = trace.count(b"publish point ")
    for k in range(1, points + 1):
        d = f"{work}/pub_k{k}"
        shutil.copytree(a_dir, d)
        rc, _, err, hung = r.run(train_args(data, d, b_args), env={"MPT_TEST_PUBLISH_KILL": str(k)})
        why = "hung" if hung else f"exit {rc}, expected the hook's SIGKILL" if rc != -signal.SIGKILL else \
            publish_outcome(r, d, data, a_files, a_id)
        r.record("publish", f"killed at publish point {k} of {points}", why is None, why or "", err)
        shutil.rmtree(d, ignore_errors=True)
    rnd = random.Random(36)
    for k in range(kills):
        d = f"{work}/pub_r{k}"
        shutil.copytree(a_dir, d)
        p = start_bg(r, train_args(data, d, ["--save-every", "1", "--epochs", "30", "--batch-size", "20", "--seed",
                                             "3"]))
        wait_lock(d, p.pid)
        delay = rnd.uniform(0.0, 1.0)
        time.sleep(delay)
        p.kill()
        p.wait()
        why = publish_outcome(r, d, data, a_files, a_id)
        r.record("publish", f"kill -9 after {delay:.2f} s, saving every step ({k + 1})", why is None, why or "")
        shutil.rmtree(d, ignore_errors=True)
    import resource
    for limit in (2048, 65536, 1 << 20, 6 << 20):
        d = f"{work}/pub_f{limit}"
        shutil.copytree(a_dir, d)

        def pre(limit=limit):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        rc, _, err, hung = r.run(train_args(data, d, ["--max-steps", "2", "--seed", "4"]), preexec=pre)
        why = judge(rc, err, hung, 1, "File too large")
        if why is None:
            files = {n: b for n, b in snapshot(d).items() if not n.startswith(".")}
            why = None if files == a_files else "the earlier run's files changed"
        r.record("publish", f"a file-size limit of {limit} bytes (ulimit -f)", why is None, why or "", err)
        shutil.rmtree(d, ignore_errors=True)


def run_sigpipe(r, work, data):
    """Signals: stdout or stderr a pipe whose reader goes away (`| head`), at several points; SIGHUP, SIGQUIT, SIGALRM
    at random points; SIGUSR1. Clean: exit 128 + the signal (141 for SIGPIPE), summary.json marked with the signal,
    the checkpoint resumes, at most one line on stderr; SIGUSR1: a checkpoint appears and the run goes on."""
    for k, (head, what) in enumerate((("head -c 0", "stdout closed at once"), ("head -n 1", "after one line"),
                                      ("head -c 300", "after 300 bytes"), ("head -c 2000", "after 2000 bytes"),
                                      ("head -n 1 2>&1", "stdout and stderr, after one line"))):
        d = f"{work}/pipe{k}"
        both = "2>&1" if "2>&1" in head else "2>\"$E\""
        cmd = (f'set -o pipefail; "$M" train --data "$D" --epochs 300 --batch-size 20 --out "$O" --progress off '
               f'--device cpu {both} | {head.replace(" 2>&1", "")} > /dev/null')
        p = subprocess.run(["bash", "-c", cmd], env=dict(os.environ, M=r.mptrain, D=data, O=d, E=f"{work}/pipe{k}.err"),
                           timeout=r.timeout + 30, cwd=r.cwd)
        err = b"" if both == "2>&1" else open(f"{work}/pipe{k}.err", "rb").read()
        why = f"exit {p.returncode}, expected 141" if p.returncode != 141 else None
        lines = err.count(b"\n")
        if why is None and both != "2>&1" and (lines != 1 or b"SIGPIPE" not in err):
            why = f"{lines} lines on stderr, expected one naming SIGPIPE"
        if why is None:
            try:
                if json.load(open(f"{d}/summary.json"))["interrupted"]["signal"] != "SIGPIPE":
                    why = "summary.json is not marked SIGPIPE"
            except (OSError, ValueError, KeyError, TypeError):
                why = "no summary.json marked interrupted"
        if why is None:
            rc, _, e2, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", data, "--out", d,
                                     "--max-steps", "5", "--progress", "off", "--device", "cpu"])
            why = None if rc == 0 else f"resuming failed ({rc})"
        r.record("sigpipe", f"train | {head}: {what}", why is None, why or "", err)
    d = f"{work}/pipecmp"
    cmd = ('set -o pipefail; "$M" compare --data "$D" --epochs 100 --batch-size 20 --out "$O" --progress off '
           '--device cpu --telemetry 0 --precisions fp32,bf16 2>/dev/null | head -n 1 > /dev/null')
    p = subprocess.run(["bash", "-c", cmd], env=dict(os.environ, M=r.mptrain, D=data, O=d), timeout=r.timeout + 30)
    why = f"exit {p.returncode}, expected 141" if p.returncode != 141 else \
        "a report of partial runs" if os.path.exists(f"{d}/report.md") else \
        "the stopped run has no checkpoint" if not os.path.exists(f"{d}/fp32/checkpoint.safetensors") else None
    r.record("sigpipe", "compare | head -n 1", why is None, why or "")
    rnd = random.Random(36)
    for k, sig in enumerate((signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM) * 2):
        d = f"{work}/sig36_{k}"
        p = start_bg(r, train_args(data, d, ["--epochs", "100", "--batch-size", "20", "--save-every", "7"]))
        wait_lock(d, p.pid)
        time.sleep(rnd.uniform(0.0, 1.5))
        p.send_signal(sig)
        try:
            p.wait(timeout=r.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        why = f"exit {p.returncode}, expected {128 + sig}" if p.returncode != 128 + sig else None
        if why is None:
            try:
                if json.load(open(f"{d}/summary.json"))["interrupted"]["signal"] != signal.Signals(sig).name:
                    why = "summary.json is not marked interrupted"
            except (OSError, ValueError, KeyError, TypeError):
                why = "no summary.json"
        if why is None:
            rc, _, _, _ = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", data, "--out", d,
                                 "--max-steps", "2000", "--epochs", "101", "--progress", "off", "--device", "cpu"])
            why = None if rc == 0 else f"resuming failed ({rc})"
        r.record("sigpipe", f"{signal.Signals(sig).name} after a random time ({k // 3 + 1})", why is None, why or "")
    for k in range(2):
        d = f"{work}/usr1_{k}"
        p = start_bg(r, train_args(data, d, ["--epochs", "300", "--batch-size", "20"]))
        wait_lock(d, p.pid)
        time.sleep(0.2 + 0.6 * k)
        p.send_signal(signal.SIGUSR1)
        end = time.monotonic() + 30
        while not os.path.exists(f"{d}/checkpoint.safetensors") and time.monotonic() < end and p.poll() is None:
            time.sleep(0.01)
        saved = os.path.exists(f"{d}/checkpoint.safetensors") and file_crc_ok(f"{d}/checkpoint.safetensors")
        time.sleep(0.3)
        alive = p.poll() is None
        p.send_signal(signal.SIGTERM)
        p.wait()
        why = "no checkpoint after SIGUSR1" if not saved else "the run ended after SIGUSR1" if not alive else \
            f"exit {p.returncode} at the SIGTERM after it" if p.returncode != 143 else None
        r.record("sigpipe", f"SIGUSR1: a checkpoint, and the run goes on ({k + 1})", why is None, why or "")


def run_fingerprint(r, work, data, base_dir):
    """The data fingerprint: resuming the base run on other data of the same size is refused (exit 2, naming the
    CRCs), nothing changes; the same bytes (gzip'd) resume; another test set resumes with a note; forged
    "data_fingerprint" metadata is refused by resume and eval, naming it; a checkpoint without it (an older one) resumes."""
    variants = [("one training label changed", dict(part="train")),
                ("one training pixel changed", dict(part="train", pixel=True)),
                ("the last training label changed", dict(part="train", offset=199))]
    for k, (name, kw) in enumerate(variants):
        other = f"{work}/fp_data{k}"
        relabelled_copy(data, other, **kw)
        d = f"{work}/fp{k}"
        shutil.copytree(base_dir, d)
        before = snapshot(d)
        rc, _, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", other, "--out", d,
                                  "--epochs", "2", "--progress", "off", "--device", "cpu"])
        why = judge(rc, err, hung, 2, "crc32")
        if why is None and snapshot(d) != before:
            why = "the directory changed"
        r.record("fingerprint", f"resume on {name}", why is None, why or "", err)
    swapped = f"{work}/fp_swapped"
    shutil.copytree(data, swapped)
    for part, size in (("images-idx3", 784), ("labels-idx1", 1)):
        name = f"{swapped}/train-{part}-ubyte"
        raw = bytearray(open(name, "rb").read())
        off = 16 if size == 784 else 8
        a, b = raw[off:off + size], raw[off + size:off + 2 * size]
        raw[off:off + size], raw[off + size:off + 2 * size] = b, a
        write(name, bytes(raw))
    d = f"{work}/fp_swap"
    shutil.copytree(base_dir, d)
    rc, _, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", swapped, "--out", d,
                              "--epochs", "2", "--progress", "off", "--device", "cpu"])
    same = all(open(f"{swapped}/{n}", "rb").read() == open(f"{data}/{n}", "rb").read() for n in MNIST)
    if same:  # the two swapped items were equal: the same data
        why = None if rc == 0 else f"exit {rc}"
    else:
        why = judge(rc, err, hung, 2, "crc32")
    r.record("fingerprint", "resume on the training set with two items swapped", why is None, why or "", err)
    gz = f"{work}/fp_gz"
    os.makedirs(gz)
    for n in MNIST:
        with open(f"{data}/{n}", "rb") as f, gzip.open(f"{gz}/{n}.gz", "wb") as g:
            g.write(f.read())
    d = f"{work}/fp_gzrun"
    shutil.copytree(base_dir, d)
    rc, _, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", gz, "--out", d, "--epochs",
                              "2", "--progress", "off", "--device", "cpu"])
    r.record("fingerprint", "resume on the same bytes, gzip'd", rc == 0 and not hung, "" if rc == 0 else f"exit {rc}",
             err)
    other = f"{work}/fp_test"
    relabelled_copy(data, other, part="test")
    d = f"{work}/fp_testrun"
    shutil.copytree(base_dir, d)
    rc, out, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", other, "--out", d,
                                "--epochs", "2", "--progress", "off", "--device", "cpu"])
    ok = rc == 0 and b"note: the test set differs" in out
    r.record("fingerprint", "resume on another test set: a note", ok, "" if ok else f"exit {rc}, or no note", err)
    with open(f"{base_dir}/checkpoint.safetensors", "rb") as f:
        raw = f.read()
    if "data_fingerprint" not in parse_ckpt(raw)[0]["__metadata__"]:  # an mptrain that records no fingerprint
        for name in ("forged data metadata (resume)", "forged data metadata (eval)"):
            r.record("fingerprint", name, False, "the checkpoint records no data fingerprint")
        return
    forged = [("data_fingerprint.train_crc32 'xyz'", with_meta(raw, "data_fingerprint", "train_crc32", '"xyz"'), 1),
              ("data_fingerprint.train_crc32 upper case", with_meta(raw, "data_fingerprint", "train_crc32", '"ABCDEF01"'), 1),
              ("data_fingerprint.train_images 0", with_meta(raw, "data_fingerprint", "train_images", "0"), 1),
              ("data_fingerprint.train_images 10 (fewer than trained)", with_meta(raw, "data_fingerprint", "train_images", "10"), 1),
              ("data_fingerprint.test_images -1", with_meta(raw, "data_fingerprint", "test_images", "-1"), 1),
              ("data_fingerprint not an object", with_meta(raw, "data_fingerprint", None, "[1, 2]"), 1),
              ("data_fingerprint.train_crc32 of other data", with_meta(raw, "data_fingerprint", "train_crc32", '"00000000"'), 2),
              ("no data (an older checkpoint)", with_meta(raw, "data_fingerprint", None, None), 0)]
    for k, (name, blob, want) in enumerate(forged):
        d = f"{work}/fp_forged{k}"
        shutil.copytree(base_dir, d)
        write(f"{d}/checkpoint.safetensors", blob)
        before = snapshot(d)
        rc, _, err, hung = r.run(["train", "--resume", f"{d}/checkpoint.safetensors", "--data", data, "--out", d,
                                  "--epochs", "2", "--progress", "off", "--device", "cpu"])
        if want == 0:
            why = None if rc == 0 and not hung else f"exit {rc}, expected 0"
        else:
            why = judge(rc, err, hung, want, "data" if want == 1 else "crc32")
            if why is None and snapshot(d) != before:
                why = "the directory changed"
        r.record("fingerprint", f"resume: {name}", why is None, why or "", err)
        rc, _, err, hung = r.run(["eval", "--checkpoint", f"{d}/checkpoint.safetensors", "--data", data, "--device",
                                  "cpu"])
        why = (None if rc == 0 and not hung else f"exit {rc}, expected 0") if want != 1 else \
            judge(rc, err, hung, 1, "data")
        r.record("fingerprint", f"eval: {name}", why is None, why or "", err)


# ---- main ------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.environ.get("MPT_BUILD_ROOT", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--mptrain", default=os.path.join(root, "tools", "mptrain"))
    ap.add_argument("--sets", default="datasets,checkpoints,writes,flags,outdir,stops,hangs,messages,mpi,publish,"
                    "sigpipe,fingerprint")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as hung")
    ap.add_argument("--kills", type=int, default=30, help="kill -9 runs (default 30)")
    ap.add_argument("--signals", type=int, default=20, help="SIGINT/SIGTERM runs of set stops (default 20)")
    ap.add_argument("--publish-kills", type=int, default=20, help="random kill -9 runs of set publish (default 20)")
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
        if "outdir" in sets:
            run_outdir(r, work, data, base)
        if "stops" in sets:
            run_stops(r, work, data, a.signals)
        if "hangs" in sets:
            run_hangs(r, work, data)
        if "messages" in sets:
            run_messages(r, work, data)
        if "mpi" in sets:
            run_mpi(r, work, data)
        if "publish" in sets:
            run_publish(r, work, data, base, a.publish_kills)
        if "sigpipe" in sets:
            run_sigpipe(r, work, data)
        if "fingerprint" in sets:
            run_fingerprint(r, work, data, base)
    total_other = 0
    print(f"{'set':<12} {'tried':>6} {'clean':>6} {'other':>6}")
    for s in ("datasets", "checkpoints", "writes", "flags", "outdir", "stops", "hangs", "messages", "mpi", "publish",
              "sigpipe", "fingerprint"):
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
