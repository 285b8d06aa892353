#!/usr/bin/env python3
"""bench/ab.py - two mptrain binaries (a baseline and a candidate: two builds of two commits) on the same training
runs, alternated round by round (A, B, A, B, ...; the order inside a round swaps every round) so that the machine's
drift hits both alike. Per run: the training seconds (epochs.csv train_s summed over the epochs: host clock, training
steps only) and the process's CPU seconds (user + system of the child, all its threads: on a shared machine it leaves
out the time the run waited for a core; load setup and evaluation included). Prints, per configuration, the medians
of both and the median of the per-round ratios B/A with its range, plus the load average before and after.

    bench/ab.py --a OLD/tools/mptrain --b NEW/tools/mptrain --rounds 5 \\
        --config "lenet5 fp32" --config "lenet5 fp16" -- --epochs 1 --limit-train 6400 --limit-test 500 --threads 1

Each --config is "MODEL PRECISION [more train flags]"; the arguments after -- go to every run. Needs Fashion-MNIST
where mptrain finds it (MPT_DATA or --data in the common flags). Benchmarks are not tests: nothing here asserts.
"""
import argparse
import csv
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile


def run(binary, model, precision, extra, common, workdir):
    out = tempfile.mkdtemp(prefix="ab-", dir=workdir)
    os.rmdir(out)  # mptrain creates --out itself
    cmd = [binary, "train", "--model", model, "--precision", precision, "--out", out] + extra + common
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"bench/ab.py: {' '.join(map(shlex.quote, cmd))} exited {p.returncode}:\n{p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "epochs.csv")) as f:
        train = sum(float(r["train_s"]) for r in csv.DictReader(f))
    return train, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="baseline mptrain binary")
    ap.add_argument("--b", required=True, help="candidate mptrain binary")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--config", action="append", required=True, help='"MODEL PRECISION [flags]"')
    ap.add_argument("--workdir", default=None, help="where the runs' output directories go (default: a new temp dir)")
    args, common = ap.parse_known_args()
    if common and common[0] == "--":
        common = common[1:]
    workdir = args.workdir or tempfile.mkdtemp(prefix="mptrain-ab-")
    print(f"# a = {args.a}\n# b = {args.b}\n# common flags: {' '.join(common)}\n# load before: {os.getloadavg()}")
    res = {}
    for r in range(args.rounds):
        for c in args.config:
            model, precision, *extra = shlex.split(c)
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for side in order:
                res.setdefault((c, side), []).append(run(getattr(args, side), model, precision, extra, common, workdir))
    print(f"# load after: {os.getloadavg()}; {args.rounds} rounds")
    print("| config | a train s | b train s | b/a train (range) | a CPU s | b CPU s | b/a CPU (range) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in args.config:
        a, b = res[(c, "a")], res[(c, "b")]
        rt = [y[0] / x[0] for x, y in zip(a, b)]
        rc = [y[1] / x[1] for x, y in zip(a, b)]
        med = statistics.median
        print(f"| {c} | {med(x[0] for x in a):.3f} | {med(x[0] for x in b):.3f} | {med(rt):.3f} "
              f"({min(rt):.3f}-{max(rt):.3f}) | {med(x[1] for x in a):.2f} | {med(x[1] for x in b):.2f} | "
              f"{med(rc):.3f} ({min(rc):.3f}-{max(rc):.3f}) |")


if __name__ == "__main__":
    main()
