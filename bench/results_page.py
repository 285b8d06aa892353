#!/usr/bin/python3
"""bench/results_page.py - the tables of a GPU results page, recomputed from the raw files beside it (issue 31 E).

A results page (bench/results/gpu-<date>.md) is prose around tables. Every table that has a raw source is written
by this script between two markers, and the marker says what it was computed from:

    <!-- results_page.py: graph gpu-2026-11-26/run3-logs.tgz:graph-on gpu-2026-11-26/run3-logs.tgz:graph-off -->
    | ...generated table... |
    <!-- end results_page.py -->

A source is a path relative to the page's folder: a folder, a file, or a member of a .tgz / .tar.gz archive
written ARCHIVE:MEMBER (MEMBER matched as a glob against the archive's names, also below any top folder, so
`call1-gpu-runs.tar.gz:bench` finds `gpu-20261126T090948Z/bench`).

Usage:
  results_page.py check PAGE...     recompute every marked table; exit 1 naming each that differs from the page
  results_page.py update PAGE...    rewrite the marked tables in place (the prose around them is left alone)
  results_page.py show KIND ARG...  print one table, as a marker of that kind would (to try a source out)
  results_page.py --list            the kinds of table and their arguments

Kinds (ARG syntax; what each table holds and how each figure is computed):
  suite SUMMARY...            one row per bench/gpu.sh (or first-run.sh) summary.txt: TAP checks passed and failed
                              ("N ok, M not ok" per test case, summed), test cases that passed, the failed ones
  suite-cases SUMMARY         one row per test case of one summary: seconds, status, checks passed and failed
  agreement LOG               test_cuda's "e2e" lines (20 steps GPU against the CPU oracle): max |loss difference| and
                              the masters' update rel. L2, each with its bound, and the larger share of its bound
  timing LOG                  test_cuda_graph's timing lines, verbatim
  graph ON OFF                two `mptrain train` runs (summary.json, metrics.csv): median GPU epoch time by CUDA
                              events over the epochs after the first, per step (/ 469), graph status; metrics.csv
                              compared without its run_id column
  pytorch BENCH [prev=BENCH]  mptrain against PyTorch: BENCH is a bench/run.sh output folder (runs/*/run.json) or the
                              first session's layout (bench/mptrain-M-P/summary.json, bench-pytorch-M-P.json). Per
                              run the median of the epochs after the first (CUDA events), medians over repeats;
                              PyTorch / mptrain; with repeats, PyTorch's slower repeat against its faster one
                              (max / min - 1); with prev=, each side's change from that earlier run (this / prev - 1)
  compare DIR...              `mptrain compare` output folders: per precision the final test accuracy, the GPU
                              s/epoch (CUDA events, median after the first), the graph status, rel. L2 to fp32
  compare-stdout FILE...      the results table that `mptrain compare` printed (its stdout), for runs whose folders
                              were not kept: final test accuracy and GPU s/epoch of each precision, one column a file
  runs LABEL=ON[,OFF]...      `mptrain train` folders: median GPU ms/epoch after the first epoch with the graph on
                              (and off), whether the two metrics.csv agree (run_id aside), final test accuracy
  ncu CSV [step=N]            Nsight Compute CSV (gpu__time_duration.sum, launch__grid_size) of --cuda-graph off
                              training: the kernels of one step (from one gather_batch launch to the next; the
                              first complete step unless step=N), each with its grid and device time, and the sums
                              of each group (cuBLASLt GEMM, cuDNN convolution, optimizer and scaler, bias and
                              channel sums, loss, other)
  ncu-kernels CSV NAME        every launch in the CSV of a kernel whose name contains NAME: its grid and device time
  fp8acc LOG                  test_cuda_fp8's FP8 accumulation table (Markdown in the log), verbatim
"""
import csv
import fnmatch
import io
import json
import os
import re
import statistics
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402  (bench/summarize.py: the run loader bench/run.sh's report uses)

STEPS_PER_EPOCH = 469  # Fashion-MNIST's 60000 training images at batch 128, the last batch of 96 kept
BEGIN = re.compile(r"^<!-- results_page\.py: (.+?) -->\s*$")
END = "<!-- end results_page.py -->"
_ARCHIVES = {}


class SourceError(Exception):
    pass


# ---- sources: a file, a folder, or a member of an archive ------------------------------------------------------------
def _archive(path):
    if path not in _ARCHIVES:
        try:
            with tarfile.open(path) as t:
                files = {}
                for m in t.getmembers():
                    if m.isfile():
                        files[m.name[2:] if m.name.startswith("./") else m.name] = t.extractfile(m).read()
        except (OSError, tarfile.TarError) as e:
            raise SourceError(f"{path}: cannot read the archive ({e})")
        _ARCHIVES[path] = files
    return _ARCHIVES[path]


class Source:
    """A folder or file on disk, or a member (file or folder) of an archive, read the same way."""

    def __init__(self, base, spec):
        self.spec = spec
        path, _, member = spec.partition(":") if re.search(r"\.(tgz|tar\.gz|tar)(:|$)", spec) else (spec, "", "")
        self.path = os.path.normpath(os.path.join(base, path))
        if member or re.search(r"\.(tgz|tar\.gz|tar)$", path):
            files = _archive(self.path)
            if not member:
                self.files, self.prefix = files, ""
                return
            names = [n for n in files if _glob(n, member)]
            if len(names) == 1:
                self.files, self.prefix, self.single = files, names[0], True
                return
            if names:
                raise SourceError(f"{spec}: '{member}' matches {len(names)} files of the archive: {sorted(names)[:4]}")
            prefixes = sorted({p for p in (self._dir_prefix(n, member) for n in files) if p})
            if len(prefixes) != 1:
                raise SourceError(f"{spec}: '{member}' matches " + (f"{len(prefixes)} folders of the archive: {prefixes[:4]}"
                                                                    if prefixes else f"nothing in {path}"))
            self.files, self.prefix = files, prefixes[0]
        else:
            if not os.path.exists(self.path):
                raise SourceError(f"{spec}: no such file or folder ({self.path})")
            self.files = None

    @staticmethod
    def _dir_prefix(name, member):
        parts = name.split("/")
        for i in range(1, len(parts)):
            if _glob("/".join(parts[:i]), member):
                return "/".join(parts[:i]) + "/"
        return None

    def text(self, rel=""):
        return self.bytes(rel).decode("utf-8", "replace")

    def bytes(self, rel=""):
        if self.files is None:
            p = os.path.join(self.path, rel) if rel else self.path
            try:
                with open(p, "rb") as f:
                    return f.read()
            except OSError as e:
                raise SourceError(f"{self.spec}: cannot read {rel or 'it'} ({e.strerror})")
        if getattr(self, "single", False) and not rel:
            return self.files[self.prefix]
        name = self.prefix + rel
        if name not in self.files:
            raise SourceError(f"{self.spec}: no {rel} in the archive")
        return self.files[name]

    def exists(self, rel):
        if self.files is None:
            return os.path.exists(os.path.join(self.path, rel))
        return (self.prefix + rel) in self.files

    def listdir(self, rel=""):
        """Names directly below REL (files and folders)."""
        if self.files is None:
            p = os.path.join(self.path, rel)
            return sorted(os.listdir(p)) if os.path.isdir(p) else []
        pre = self.prefix + (rel.rstrip("/") + "/" if rel else "")
        return sorted({n[len(pre):].split("/")[0] for n in self.files if n.startswith(pre) and len(n) > len(pre)})

    def materialise(self, tmp):
        """A folder on disk with this source's files (for code that reads paths: summarize.load_run)."""
        if self.files is None:
            return self.path
        for n, data in self.files.items():
            if n.startswith(self.prefix):
                out = os.path.join(tmp, n[len(self.prefix):])
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "wb") as f:
                    f.write(data)
        return tmp


def _glob(name, pattern):
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*/" + pattern)


# ---- helpers --------------------------------------------------------------------------------------------------------
def median_after_first(times):
    """A run's time per epoch on the GPU: the median of the epochs after the first (the first chooses algorithms and
    records the step graph); the only one when there is one (bench/summarize.py's rule)."""
    if not times:
        return None
    return statistics.median(times[1:] if len(times) > 1 else times)


def f(v, spec, none="-"):
    return none if v is None else format(v, spec)


def pct(a, b):
    return None if a is None or not b else 100.0 * (a / b - 1.0)


def metrics_without_run_id(text):
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return rows
    drop = rows[0].index("run_id") if "run_id" in rows[0] else -1
    return [[c for i, c in enumerate(r) if i != drop] for r in rows]


def train_run(src):
    """summary.json of one `mptrain train` folder (None when the run left none: it failed)."""
    if not src.exists("summary.json"):
        return None
    return json.loads(src.text("summary.json"))


# ---- the kinds of table ---------------------------------------------------------------------------------------------
CASE_LINE = re.compile(r"^\s*(test_[a-z0-9_]+/[a-z0-9_ ]+?)\s+(\d+)s\s+(.*?)\s+(\d+) ok, (\d+) not ok\s*$")


def suite_cases(text):
    cases = []
    for line in text.splitlines():
        m = CASE_LINE.match(line)
        if m:
            status = m.group(3).strip()
            status = "ok" if status in ("ok", "rc 0") else status
            cases.append({"case": m.group(1), "s": int(m.group(2)), "status": status,
                          "ok": int(m.group(4)), "bad": int(m.group(5))})
    return cases


def kind_suite(base, args):
    out = ["| summary | checks passed | checks failed | test cases passed | test cases that failed or stopped |",
           "|---|---:|---:|---:|---|"]
    for a in args:
        cases = suite_cases(Source(base, a).text())
        if not cases:
            raise SourceError(f"{a}: no test case lines ('<program>/<case> Ns status N ok, M not ok')")
        ok = sum(c["ok"] for c in cases)
        bad = sum(c["bad"] for c in cases)
        good = [c for c in cases if c["status"] == "ok" and c["bad"] == 0]
        failed = ", ".join(f"{c['case']} ({c['status']})" for c in cases if c not in good) or "none"
        out.append(f"| {a} | {ok} of {ok + bad} | {bad} | {len(good)} of {len(cases)} | {failed} |")
    return out


def kind_suite_cases(base, args):
    if len(args) != 1:
        raise SourceError("suite-cases: expected one summary")
    cases = suite_cases(Source(base, args[0]).text())
    out = ["| program / test case | seconds | status | checks passed | checks failed |", "|---|---:|---|---:|---:|"]
    for c in sorted(cases, key=lambda c: c["case"]):
        out.append(f"| {c['case']} | {c['s']} | {c['status']} | {c['ok']} | {c['bad']} |")
    ok, bad = sum(c["ok"] for c in cases), sum(c["bad"] for c in cases)
    out.append(f"| all ({len(cases)} test cases) | | | {ok} of {ok + bad} | {bad} |")
    return out


E2E = re.compile(r"e2e (\w+)\s+(\w+) (\d+) steps: .*?max \|loss GPU - CPU\| ([0-9.e+-]+) \(bound ([0-9.e+-]+)\), "
                 r"updates rel L2 GPU vs CPU ([0-9.e+-]+) \(bound ([0-9.e+-]+)\).*?skipped (\d+)/(\d+)")


def kind_agreement(base, args):
    if len(args) != 1:
        raise SourceError("agreement: expected one log")
    rows = E2E.findall(Source(base, args[0]).text())
    if not rows:
        raise SourceError(f"{args[0]}: no 'e2e' agreement lines")
    out = ["| model | precision | steps | max abs loss difference (bound) | rel. L2 of the masters' total update (bound) | "
           "larger share of its bound | skipped GPU/CPU |", "|---|---|---:|---:|---:|---:|---|"]
    for model, prec, steps, dl, bl, du, bu, sg, sc in rows:
        share = max(float(dl) / float(bl), float(du) / float(bu))
        out.append(f"| {model} | {prec} | {steps} | {float(dl):.3g} ({float(bl):.3g}) | {float(du):.3g} ({float(bu):.3g}) | "
                   f"{100 * share:.1f}% | {sg}/{sc} |")
    return out


def kind_timing(base, args):
    lines = [l for l in Source(base, args[0]).text().splitlines() if l.startswith("test_cuda_graph: timing")]
    if not lines:
        raise SourceError(f"{args[0]}: no timing lines")
    return ["```"] + lines + ["```"]


def kind_graph(base, args):
    if len(args) != 2:
        raise SourceError("graph: expected the --cuda-graph on and off run folders")
    out = ["| --cuda-graph | GPU ms/epoch (median after the first) | us/step | each epoch (ms) | status |",
           "|---|---:|---:|---|---|"]
    srcs = [Source(base, a) for a in args]
    for name, s in zip(("on", "off"), srcs):
        j = train_run(s)
        if j is None:
            out.append(f"| {name} | no summary.json | | | |")
            continue
        ev = j.get("epoch_gpu_times_s") or []
        m = median_after_first(ev)
        out.append(f"| {name} | {f(m and 1e3 * m, '.1f')} | {f(m and 1e6 * m / STEPS_PER_EPOCH, '.1f')} | "
                   f"{', '.join('%.1f' % (1e3 * x) for x in ev)} | {j.get('cuda_graph', {}).get('status', '?')} |")
    try:
        same = metrics_without_run_id(srcs[0].text("metrics.csv")) == metrics_without_run_id(srcs[1].text("metrics.csv"))
        out.append("")
        out.append("metrics.csv with the graph on and off (run_id aside): " + ("identical." if same else "**they differ**."))
    except SourceError:
        pass
    return out


def bench_results(src):
    """{(impl, model, precision): [run, ...]} with each run's t (median after the first epoch, CUDA events), acc."""
    res = {}
    if src.exists("runs") or "runs" in src.listdir():  # a bench/run.sh output folder
        with tempfile.TemporaryDirectory() as tmp:
            d = src.materialise(tmp)
            for name in sorted(os.listdir(os.path.join(d, "runs"))):
                for r in summarize.load_runs(os.path.join(d, "runs", name), "gpu"):
                    if r["ok"] and r["impl"] in ("mptrain", "pytorch"):  # PyTorch eager: the peer of these pages
                        res.setdefault((r["impl"], r["model"], r["precision"]), []).append(
                            {"t": r["t_epoch"], "acc": r["acc"], "repeat": r.get("repeat")})
        return res
    # the first session's layout (../shared/gpu/first-run.sh)
    for name in src.listdir("bench"):
        m = re.match(r"mptrain-(\w+)-(\w+)$", name)
        if m and src.exists(f"bench/{name}/summary.json"):
            j = json.loads(src.text(f"bench/{name}/summary.json"))
            res.setdefault(("mptrain", m.group(1), m.group(2)), []).append(
                {"t": median_after_first(j["epoch_gpu_times_s"]), "acc": j["final_test_accuracy"], "repeat": 1})
    for name in src.listdir():
        m = re.match(r"bench-pytorch-(\w+)-(\w+)\.json$", name)
        if m:
            lines = [l for l in src.text(name).splitlines() if l.startswith("{")]
            if lines:
                j = json.loads(lines[-1])
                res.setdefault(("pytorch", m.group(1), m.group(2)), []).append(
                    {"t": median_after_first(j["epoch_times_s"]), "acc": j["final_test_accuracy"], "repeat": 1})
    return res


def kind_pytorch(base, args):
    pos = [a for a in args if not a.startswith("prev=")]
    prev = [a[5:] for a in args if a.startswith("prev=")]
    if len(pos) != 1:
        raise SourceError("pytorch: expected one benchmark folder (and prev=FOLDER)")
    cur = bench_results(Source(base, pos[0]))
    old = bench_results(Source(base, prev[0])) if prev else None
    if not cur:
        raise SourceError(f"{pos[0]}: no benchmark runs")
    reps = max(len(v) for v in cur.values())
    med = lambda rs, k="t": statistics.median([r[k] for r in rs]) if rs else None
    head = "| model | precision | mptrain ms/epoch | PyTorch eager ms/epoch | PyTorch / mptrain | mptrain us/step |"
    rule = "|---|---|---:|---:|---:|---:|"
    if reps > 1:
        head += " PyTorch's repeats (ms) | slower / faster - 1 |"
        rule += "---|---:|"
    if old:
        head += " mptrain change from prev | PyTorch change from prev |"
        rule += "---:|---:|"
    head += " final test acc mptrain / PyTorch (%) |"
    rule += "---|"
    out = [head, rule]
    models = []
    for (_, m, _) in cur:
        if m not in models:
            models.append(m)
    order = {"mlp": 0, "lenet5": 1, "cnn": 2}
    for m in sorted(models, key=lambda x: order.get(x, 9)):
        for p in ("fp32", "tf32", "bf16", "fp16"):
            a, b = cur.get(("mptrain", m, p)), cur.get(("pytorch", m, p))
            if not a and not b:
                continue
            ta, tb = med(a), med(b)
            row = (f"| {m} | {p} | {f(ta and 1e3 * ta, '.1f')} | {f(tb and 1e3 * tb, '.1f')} | "
                   f"{f(tb / ta if ta and tb else None, '.1f')}x | {f(ta and 1e6 * ta / STEPS_PER_EPOCH, '.1f')} |")
            if reps > 1:
                ts = sorted(r["t"] for r in b or [])
                row += (f" {', '.join('%.1f' % (1e3 * t) for t in ts)} | "
                        f"{f(pct(ts[-1], ts[0]) if len(ts) > 1 else None, '.0f')}% |")
            if old:
                row += (f" {f(pct(ta, med(old.get(('mptrain', m, p)))), '+.1f')}% |"
                        f" {f(pct(tb, med(old.get(('pytorch', m, p)))), '+.1f')}% |")
            row += f" {f(a and 100 * med(a, 'acc'), '.2f')} / {f(b and 100 * med(b, 'acc'), '.2f')} |"
            out.append(row)
    return out


def kind_compare(base, args):
    out = ["| model | precision | final test acc | GPU s/epoch (median after the first) | graph | rel. L2 to fp32 |",
           "|---|---|---:|---:|---|---:|"]
    for a in args:
        s = Source(base, a)
        j = json.loads(s.text("compare.json"))
        for p in j["precisions"]:
            r = p["runs"][0]
            rel = p["precision"] + "/summary.json"
            summ = json.loads(s.text(rel)) if s.exists(rel) else None
            ev = median_after_first((summ or {}).get("epoch_gpu_times_s"))
            graph = (summ or {}).get("cuda_graph", {}).get("status", "-")
            out.append(f"| {j['model']} | {p['precision']} | {100 * r['final_test_accuracy']:.2f}% | {f(ev, '.4f')} | "
                       f"{graph} | {r['rel_l2_to_fp32']:.3f} |")
    return out


def compare_stdout_table(text):
    """{precision: {column: value}} from the results table `mptrain compare` prints."""
    lines = text.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("| precision | final test acc"):
            head = [c.strip() for c in l.strip().strip("|").split("|")]
            rows = {}
            for r in lines[i + 2:]:
                if not r.startswith("|"):
                    break
                cells = [c.strip() for c in r.strip().strip("|").split("|")]
                rows[cells[0]] = dict(zip(head, cells))
            return rows
    return {}


def kind_compare_stdout(base, args):
    tables = []
    for a in args:
        t = compare_stdout_table(Source(base, a).text())
        if not t:
            raise SourceError(f"{a}: no '| precision | final test acc' table")
        tables.append(t)
    gpu = next(k for k in tables[0][next(iter(tables[0]))] if k.startswith("GPU s/epoch"))
    out = ["| precision | " + " | ".join(f"`{a}`: GPU s/epoch, final test acc" for a in args) + " |",
           "|---|" + "---:|" * len(args)]
    for p in tables[0]:
        out.append(f"| {p} | " + " | ".join(f"{t.get(p, {}).get(gpu, '-')}, {t.get(p, {}).get('final test acc', '-')}"
                                            for t in tables) + " |")
    return out


def kind_runs(base, args):
    out = ["| run | GPU ms/epoch, graph on | graph off | metrics.csv on = off (run_id aside) | final test acc |",
           "|---|---:|---:|---|---:|"]
    for a in args:
        label, _, paths = a.partition("=")
        if not paths:
            raise SourceError(f"runs: expected LABEL=ON[,OFF], found '{a}'")
        on_off = paths.split(",")
        srcs = [Source(base, p) for p in on_off]
        js = [train_run(s) for s in srcs]
        ms = [median_after_first((j or {}).get("epoch_gpu_times_s")) for j in js]
        same = "-"
        if len(srcs) == 2:
            try:
                same = ("identical" if metrics_without_run_id(srcs[0].text("metrics.csv")) ==
                        metrics_without_run_id(srcs[1].text("metrics.csv")) else "**differ**")
            except SourceError:
                same = "no metrics.csv"
        acc = js[0] and js[0].get("final_test_accuracy")
        out.append(f"| {label.replace('_', ' ')} | {f(ms[0] and 1e3 * ms[0], '.1f', 'failed')} | "
                   f"{f(ms[1] and 1e3 * ms[1], '.1f', 'failed') if len(ms) > 1 else '-'} | {same} | "
                   f"{f(acc and 100 * acc, '.2f', '-')}{'%' if acc else ''} |")
    return out


def ncu_kernels(text):
    rows = [r for r in csv.reader(io.StringIO(text)) if len(r) > 10]
    if not rows or "Kernel Name" not in rows[0]:
        raise SourceError("not an Nsight Compute --csv file (no 'Kernel Name' column)")
    h = rows[0]
    ik, im, iv, iid = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("ID")
    ks = {}
    for r in rows[1:]:
        ks.setdefault(int(r[iid]), {"name": r[ik]})[r[im]] = r[iv]
    return [(d["name"], float(d["gpu__time_duration.sum"].replace(",", "")) / 1000.0,
             d.get("launch__grid_size", "?").replace(",", "")) for _, d in sorted(ks.items())]


def ncu_group(name):
    n = name
    if any(x in n for x in ("nvjet", "cutlass", "magma", "cublasLt", "splitK", "Bgrad", "gemm_kernel")) and "epilogue" not in n:
        return "GEMM (cuBLASLt)"
    if any(x in n for x in ("xmma", "convolve", "cudnn", "nchwToNhwc", "nhwcToNchw", "conv2d")):
        return "convolution (cuDNN)"
    if any(x in n for x in ("optim", "unscale", "scaler", "lr_update", "step_begin")):
        return "optimizer and scaler"
    if "bias_grad" in n or "channel_sum" in n:
        return "bias and channel sums"
    if "softmax_xent" in n or "count_valid" in n:
        return "loss"
    return "other"


def kind_ncu(base, args):
    pos = [a for a in args if not a.startswith("step=")]
    step_no = int(next((a[5:] for a in args if a.startswith("step=")), "1"))
    ks = ncu_kernels(Source(base, pos[0]).text())
    starts = [i for i, k in enumerate(ks) if k[0].startswith("gather_batch")]
    if len(starts) < step_no + 1:
        raise SourceError(f"{pos[0]}: fewer than {step_no + 1} gather_batch launches: no complete step {step_no}")
    step = ks[starts[step_no - 1]:starts[step_no]]
    total = sum(t for _, t, _ in step)
    out = ["| # | kernel | grid | us | group |", "|---:|---|---:|---:|---|"]
    for i, (n, t, g) in enumerate(step, 1):
        short = re.sub(r"\(.*$", "", n) if not n.startswith("void ") else re.sub(r"^void ", "", n)
        short = short[:80] + ("..." if len(short) > 80 else "")
        out.append(f"| {i} | `{short}` | {g} | {t:.2f} | {ncu_group(n)} |")
    groups = {}
    for n, t, _ in step:
        g = ncu_group(n)
        groups.setdefault(g, [0, 0.0])
        groups[g][0] += 1
        groups[g][1] += t
    out.append("")
    out.append(f"Step {step_no} of {len(starts) - 1} complete ones in the file: **{len(step)} kernels, {total:.1f} us** "
               f"of device time (each kernel alone under ncu); the shortest {min(t for _, t, _ in step):.2f} us. By group:")
    out.append("")
    out.append("| group | kernels | us | share |")
    out.append("|---|---:|---:|---:|")
    for g, (n, t) in sorted(groups.items(), key=lambda x: -x[1][1]):
        out.append(f"| {g} | {n} | {t:.1f} | {100 * t / total:.0f}% |")
    return out


def kind_ncu_kernels(base, args):
    if len(args) != 2:
        raise SourceError("ncu-kernels: expected CSV and a part of a kernel's name")
    ks = ncu_kernels(Source(base, args[0]).text())
    hits = [(i, n, t, g) for i, (n, t, g) in enumerate(ks, 1) if args[1] in n]
    if not hits:
        raise SourceError(f"{args[0]}: no kernel named like '{args[1]}' among its {len(ks)} launches")
    out = ["| launch (of %d in the file) | kernel | grid | us |" % len(ks), "|---:|---|---:|---:|"]
    for i, n, t, g in hits:
        out.append(f"| {i} | `{re.sub(r'[(<].*$', '', n.replace('void ', ''))}` | {g} | {t:.2f} |")
    return out


def kind_fp8acc(base, args):
    lines = Source(base, args[0]).text().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("| K | cuBLASLt FAST_ACCUM")), None)
    if start is None:
        raise SourceError(f"{args[0]}: no FP8 accumulation table")
    out = []
    for l in lines[start:]:
        if not l.startswith("|"):
            break
        out.append(l)
    return out


KINDS = {"suite": kind_suite, "suite-cases": kind_suite_cases, "agreement": kind_agreement, "timing": kind_timing,
         "graph": kind_graph, "pytorch": kind_pytorch, "compare": kind_compare, "compare-stdout": kind_compare_stdout,
         "runs": kind_runs, "ncu": kind_ncu, "ncu-kernels": kind_ncu_kernels, "fp8acc": kind_fp8acc}


def generate(base, spec):
    words = spec.split()
    if not words or words[0] not in KINDS:
        raise SourceError(f"unknown kind of table '{words[0] if words else ''}' (results_page.py --list)")
    if len(words) < 2:
        raise SourceError(f"{words[0]}: no source given")
    return KINDS[words[0]](base, words[1:])


# ---- pages ----------------------------------------------------------------------------------------------------------
def process(page, write):
    """Recomputes every marked table of PAGE. Returns the list of problems (a table that differs, a bad source)."""
    base = os.path.dirname(os.path.abspath(page))
    with open(page) as fh:
        lines = fh.read().split("\n")
    out, problems, i = [], [], 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        j = i
        while j < len(lines) and lines[j].strip() != END:
            if BEGIN.match(lines[j]):
                break
            j += 1
        if j >= len(lines) or lines[j].strip() != END:
            problems.append(f"{page}:{i}: '{m.group(1)}' has no '{END}' line after it")
            out.extend(lines[i:j])
            i = j
            continue
        old = lines[i:j]
        try:
            new = generate(base, m.group(1))
        except (SourceError, KeyError, ValueError, IndexError) as e:
            problems.append(f"{page}:{i}: {m.group(1)}: {e}")
            new = old
        if new != old and not write:
            diff = next((k for k in range(max(len(new), len(old)))
                         if k >= len(new) or k >= len(old) or new[k] != old[k]), 0)
            problems.append(f"{page}:{i + diff + 1}: the table of '{m.group(1)}' differs from its raw files:\n"
                            f"    page:       {old[diff] if diff < len(old) else '(nothing)'}\n"
                            f"    recomputed: {new[diff] if diff < len(new) else '(nothing)'}")
        out.extend(new)
        out.append(lines[j])
        i = j + 1
    if write:
        text = "\n".join(out)
        tmp = page + ".tmp"
        with open(tmp, "x") as fh:
            fh.write(text)
        os.replace(tmp, page)
    return problems


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "--list":
        print(__doc__.split("Kinds (ARG syntax")[1])
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "show":
        if not rest:
            print("results_page.py show: expected KIND ARG...", file=sys.stderr)
            return 2
        try:
            print("\n".join(generate(os.getcwd(), " ".join(rest))))
        except SourceError as e:
            print(f"results_page.py: {e}", file=sys.stderr)
            return 1
        return 0
    if cmd not in ("check", "update") or not rest:
        print("usage: results_page.py check|update PAGE... | show KIND ARG... | --list", file=sys.stderr)
        return 2
    problems, tables = [], 0
    for page in rest:
        if not os.path.isfile(page):
            problems.append(f"{page}: no such page")
            continue
        with open(page) as fh:
            tables += sum(1 for l in fh if BEGIN.match(l))
        problems += process(page, cmd == "update")
    for p in problems:
        print(f"results_page.py: {p}", file=sys.stderr)
    print(f"results_page.py {cmd}: {tables} table(s) in {len(rest)} page(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
