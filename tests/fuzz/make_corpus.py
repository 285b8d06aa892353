#!/usr/bin/env python3
"""tests/fuzz/make_corpus.py - writes the seed corpora of the libFuzzer targets (python3 standard library only):
corpus/idx/ (IDX images and labels files, plain and gzip), corpus/checkpoint/ (safetensors checkpoints whose
metadata is ckpt_meta_mlp_fp32.json, the metadata of `mptrain train --model mlp --epochs 1 --limit-train 256`,
with small tensors and a correct crc32 of the whole file), corpus/flags/ (argv words separated by NUL bytes),
corpus/outdir/ (publish journals and resumed CSVs, behind the byte that chooses between them).
Usage: make_corpus.py [OUT_DIR] (default: the corpus/ folder next to this script)."""
import gzip, json, os, struct, sys, zlib

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")


def put(sub, name, data):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
    with open(os.path.join(out, sub, name), "wb") as f:
        f.write(data)


def idx(dims, payload, dtype=0x08):
    return struct.pack(">BBBB", 0, 0, dtype, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload


images = idx([2, 28, 28], bytes((i * 7) % 256 for i in range(2 * 28 * 28)))
labels = idx([2], bytes([3, 9]))
put("idx", "images-2x28x28", images)
put("idx", "labels-2", labels)
put("idx", "images-2x28x28.gz", gzip.compress(images, mtime=0))
put("idx", "labels-2.gz", gzip.compress(labels, mtime=0))
put("idx", "images-1x2x2", idx([1, 2, 2], b"\x00\x01\x02\x03"))


def safetensors(meta, tensors):
    """The checksum as engine/checkpoint.h defines it: the header's first key, crc32 of the whole file with its
    own 8 digits (bytes 34..41) read as 00000000."""
    hdr, data = {"__metadata__": {"crc32": "00000000", **dict(meta)}}, b""
    for name, shape, values in tensors:
        raw = struct.pack("<%df" % len(values), *values)
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    raw = struct.pack("<Q", len(text)) + text + data
    return raw[:34] + b"%08x" % zlib.crc32(raw) + raw[42:]


with open(os.path.join(here, "ckpt_meta_mlp_fp32.json")) as f:
    meta = json.load(f)
small = []
for layer, shape in (("fc1", [2, 3]), ("fc2", [2, 2]), ("fc3", [1, 2])):
    for pname, sh in ((layer + ".weight", shape), (layer + ".bias", shape[:1])):
        count = 1
        for d in sh:
            count *= d
        small.append((pname, sh, [0.25 * (k + 1) for k in range(count)]))
        small.append((pname + ":exp_avg", sh, [0.01] * count))
        small.append((pname + ":exp_avg_sq", sh, [0.001] * count))
put("checkpoint", "mlp-fp32-small", safetensors(meta, small))
put("checkpoint", "metadata-only", safetensors(meta, []))
put("checkpoint", "empty-header", struct.pack("<Q", 8) + b"{}      ")

flags = [
    ["--model", "mlp", "--epochs", "3", "--precision", "fp16", "--loss-scale", "dynamic"],
    ["--model", "lenet5", "--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--lr", "0.01"],
    ["--loss-scale", "static:1024", "--batch-size", "64", "--seed", "7", "--threads", "2"],
    ["--seeds", "3", "--margin", "0.5", "--telemetry", "50", "--shadow"],
    ["--resume", "runs/x/checkpoint.safetensors", "--epochs", "5", "--out", "runs/x"],
    ["--lr-schedule", "cosine", "--warmup-steps", "100", "--min-lr", "1e-5", "--clip-norm", "1.0"],
    ["--master-weights", "none", "--update-rounding", "stochastic", "--optimizer-state", "bf16"],
    ["--help"],
]
for i, words in enumerate(flags):
    put("flags", "argv-%d" % i, b"\0".join(w.encode() for w in words))

# corpus/outdir/: the first byte chooses the file (even: the journal .mptrain.publish, odd: metrics.csv continued by
# --resume); fuzz_outdir.c creates .metrics.csv.tmp-AAAAAA and .summary.json.tmp-BBBBBB beside it
journal = b"mptrain publish set 1\n"
put("outdir", "journal-uncommitted",
    b"\0" + journal + b"R\t.metrics.csv.tmp-AAAAAA\tmetrics.csv\nR\t.summary.json.tmp-BBBBBB\tsummary.json\nend\n")
put("outdir", "journal-committed-removal-first",
    b"\0" + journal + b"D\tepochs.csv\nR\t.metrics.csv.tmp-AAAAAA\tmetrics.csv\nR\t.summary.json.tmp-BBBBBB\tsummary.json\nend\n")
put("outdir", "journal-outside", b"\0" + journal + b"D\t../sentinel\nend\n")
put("outdir", "journal-no-end", b"\0" + journal + b"D\tepochs.csv\n")
put("outdir", "csv-own-rows", b"\1step,loss,run_id\n1,0.5,0123abcd\n5,0.4,0123abcd\n9,0.3,0123abcd\n")
put("outdir", "csv-other-run", b"\1step,loss,run_id\n1,0.5,0123abcd\n2,0.4,ffffffff\n")
put("outdir", "csv-columns", b"\1epoch,acc,run_id\n1,0.5,0123abcd\n")
