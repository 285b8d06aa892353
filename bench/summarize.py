#!/usr/bin/python3
"""bench/summarize.py - turns the run directories that bench/run.sh wrote into the Markdown report.

Input (DIR = the results directory of one bench/run.sh invocation):
  DIR/info/*.txt             machine and software facts, commands, thread settings (written by run.sh)
  DIR/calibration.tsv        thread calibration: impl, model, precision, setting, seconds per epoch
  DIR/gemm/*.txt             bench/gemm_bench output per OpenBLAS thread count
  DIR/runs/<name>/run.json   one measured run: impl, model, precision, repeat, seed, settings, exit status
  DIR/runs/<name>/time.txt   /usr/bin/time -v of that run (peak RSS = "Maximum resident set size")
  DIR/runs/<name>/summary.json (mptrain) or stdout.txt whose last line is pytorch_reference.py's JSON
Per run: time per epoch = median of its epoch times (CPU: all epochs, so a slow first epoch with one-time set-up
does not count; GPU: the epochs after the first, when there are two or more); samples/s = training rows / that
median. Clocks (docs/outputs.md, "Which clock"): CPU mode, the host clock on both sides; GPU mode, CUDA events on
both sides (mptrain summary.json epoch_gpu_times_s, PyTorch torch.cuda.Event), with the host clock of the same
epochs beside them (mptrain epoch_times_s, PyTorch's epoch_host_times_s). Per (impl, model, precision): the median over repeats of
each metric, the min-max of the per-run time per epoch, and the fastest single epoch of all repeats (noise
from other processes only adds time, so it shows what the code does on a quiet machine). Ratios are mptrain / PyTorch of those medians
(time: < 1 means mptrain is faster); accuracy differences are in percentage points.

Usage: summarize.py DIR MODE [--raw] [--also DIR2]...   (MODE cpu or gpu; --raw adds every run's numbers; --also adds
the runs of another run.sh output folder of the same machine and call, e.g. bench/gpu.sh's compile stage). Markdown on
stdout.
"""
import json
import os
import re
import statistics
import sys

# bf16n: mptrain's bf16 with --cpu-kernels native (the CPU's BF16 units); the others emulate Tensor Core numerics
PRECISIONS = ["fp32", "tf32", "bf16", "fp16", "bf16n"]


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def parse_time_v(text):
    """Peak RSS (KiB), wall seconds and CPU seconds (user + system) from GNU time -v output."""
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    secs = None
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        secs = 0.0
        for p in parts:
            secs = secs * 60 + p
    return (int(rss.group(1)) if rss else None), secs, cpu


def epoch_median(times, mode):
    """A run's time per epoch: GPU mode leaves out the first epoch (the GEMM/conv algorithm choice, mptrain's
    graph recording) when there is another; CPU mode takes the median of all."""
    if not times:
        return None
    return statistics.median(times[1:] if mode == "gpu" and len(times) > 1 else times)


# PyTorch's execution modes (bench/pytorch_reference.py --mode): the impl name a mode's runs are grouped under. eager
# keeps the plain "pytorch" (every run before issue 31 measured it, and CPU runs use it alone).
TORCH_MODES = ["eager", "fused", "graph", "compile"]
TORCH_IMPLS = ["pytorch" if m == "eager" else "pytorch-" + m for m in TORCH_MODES]
IMPL_NAMES = {"mptrain": "mptrain", **{i: "PyTorch " + m for i, m in zip(TORCH_IMPLS, TORCH_MODES)}}


def torch_impl(mode):
    return "pytorch" if mode in (None, "eager") else "pytorch-" + mode


def finish(r, mode):
    """Per-run figures of a record whose epoch times are known."""
    if not r.get("epoch_times"):
        return r
    r["t_epoch"] = epoch_median(r["epoch_times"], mode)
    r["t_host"] = epoch_median(r["host_times"], mode)
    r["t_cpu"] = epoch_median(r["cpu_times"], mode) if r.get("cpu_times") else None
    r["sps"] = r["n_train"] / r["t_epoch"] if r["n_train"] else None
    r["ok"] = True
    return r


def load_runs(d, mode):
    """The records of one run directory: mptrain's run, or one per mode of a PyTorch process (its JSON lines; a
    process killed or failed in a later mode keeps the modes it finished). [] when the directory has no run.json."""
    meta = json.loads(read(os.path.join(d, "run.json"), "{}") or "{}")
    if not meta:
        return []
    rss_kib, wall, cpu = parse_time_v(read(os.path.join(d, "time.txt")))
    busy = meta.get("machine_busy_s")
    others = max(0.0, busy - cpu) if busy is not None else None
    r = dict(meta, rss_kib=rss_kib, wall_s=wall, ok=False, others_cpu_s=others, cpu_s=cpu)
    if meta["impl"] == "mptrain":
        if meta.get("rc") != 0:
            return [r]
        try:
            s = json.loads(read(os.path.join(d, "summary.json")))
        except ValueError:
            return [r]
        m = re.search(r"data: (\d+) training images", read(os.path.join(d, "stdout.txt")))
        n_train = int(m.group(1)) if m else None
        if mode == "gpu":
            gpu = s.get("epoch_gpu_times_s")
            if not gpu:  # an mptrain without the device timer, or a CPU run: no GPU-clock figure to compare
                print(f"summarize.py: {d}: summary.json has no epoch_gpu_times_s (CUDA events); the run is counted "
                      "as failed", file=sys.stderr)
                return [r]
            times, host = gpu, s["epoch_times_s"]
        else:
            times, host = s["epoch_times_s"], None
        r.update(epoch_times=times, host_times=host, cpu_times=s.get("epoch_cpu_times_s"), acc=s["final_test_accuracy"], loss=s["final_test_loss"],
                 n_train=n_train, dev_mem=s["peak_memory_bytes"]["total"], loss_scale=s.get("final_loss_scale"),
                 skipped=s.get("steps_skipped"))
        return [finish(r, mode)]
    out = []
    for line in read(os.path.join(d, "stdout.txt")).splitlines():
        if not line.startswith("{"):
            continue
        try:
            s = json.loads(line)
        except ValueError:
            continue
        q = dict(r, impl=torch_impl(s.get("mode")), torch_mode=s.get("mode", "eager"), status=s.get("status", "ok"),
                 reason=s.get("reason"), graph_scope=s.get("graph_scope"), prepare_s=s.get("prepare_s"))
        if q["status"] == "ok" and s.get("epoch_times_s"):
            q.update(epoch_times=s["epoch_times_s"], host_times=s.get("epoch_host_times_s"),
                     cpu_times=s.get("epoch_cpu_times_s"), acc=s["final_test_accuracy"], loss=s["final_test_loss"],
                     n_train=s["n_train"], dev_mem=s.get("cuda_max_memory_allocated"),
                     loss_scale=s.get("final_loss_scale"), skipped=None)
            finish(q, mode)
        out.append(q)
    return out or [r]


def load_run(d, mode):
    """The first record of a run directory (mptrain's run, or PyTorch's first mode); None without run.json."""
    rs = load_runs(d, mode)
    return rs[0] if rs else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec, none="n/a"):
    return none if v is None else format(v, spec)


def aggregate(runs):
    groups = {}
    for r in runs:
        groups.setdefault((r["impl"], r["model"], r["precision"]), []).append(r)
    agg = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r["ok"]]
        times = [r["t_epoch"] for r in ok]
        agg[key] = {
            "n": len(ok), "failed": len(rs) - len(ok),
            "t": med(times), "tmin": min(times) if times else None, "tmax": max(times) if times else None,
            "t_host": med([r["t_host"] for r in ok]),
            "t_cpu": med([r["t_cpu"] for r in ok]),
            "best": min((x for r in ok for x in r["epoch_times"]), default=None),
            "sps": med([r["sps"] for r in ok]), "acc": med([r["acc"] for r in ok]),
            "accmin": min([r["acc"] for r in ok], default=None), "accmax": max([r["acc"] for r in ok], default=None),
            "loss": med([r["loss"] for r in ok]), "rss": med([r["rss_kib"] for r in ok]),
            "dev_mem": med([r["dev_mem"] for r in ok]), "cpu": med([r["cpu_s"] for r in ok]),
            "wall": med([r["wall_s"] for r in ok]),
            "settings": sorted({r.get("settings", "") for r in rs}),
            "reasons": sorted({f"{r.get('status', 'failed')}: {r['reason']}" for r in rs if not r["ok"] and r.get("reason")}),
        }
    return agg


def accuracy_baseline(mode, prec):
    """The PyTorch precision whose accuracy an mptrain precision should match: the same one, or on the CPU
    (no TF32, no FP16 autocast there) fp32, the reference numerics."""
    if prec == "bf16n":
        return "bf16"
    return prec if mode == "gpu" or prec in ("fp32", "bf16") else "fp32"


def baselines(mode, prec):
    """PyTorch precisions an mptrain precision is compared with: the same one when PyTorch has it on this
    device (CPU: fp32 and bf16 autocast only), else the closest; and fp32."""
    if mode == "gpu":
        same = prec
    else:
        same = {"fp32": "fp32", "tf32": "fp32", "bf16": "bf16", "fp16": "bf16", "bf16n": "bf16"}[prec]
    return [same] if same == "fp32" else [same, "fp32"]


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def report(d, mode, raw, also=()):
    runs = []
    for rdir, name in [(os.path.join(x, "runs"), n) for x in (d, *also)
                       for n in (sorted(os.listdir(os.path.join(x, "runs"))) if os.path.isdir(os.path.join(x, "runs")) else [])]:
        for r in load_runs(os.path.join(rdir, name), mode):
            if rdir != os.path.join(d, "runs"):
                r["order"] = r.get("order", 0) + 100000  # after the main folder's runs
            r["name"] = name if r["impl"] in ("mptrain", "pytorch") else f"{name} ({r['torch_mode']})"
            runs.append(r)
    runs.sort(key=lambda r: r.get("order", 0))
    agg = aggregate(runs)
    models = []
    for r in runs:
        if r["model"] not in models:
            models.append(r["model"])
    info = lambda n: read(os.path.join(d, "info", n + ".txt")).rstrip()
    out = []
    w = out.append

    w(f"Measured {info('date')} with `{info('command')}` at commit `{info('commit')}`.\n")
    w("### Machine and software\n")
    w("```")
    w(info("machine"))
    w("```\n")
    w("### Settings\n")
    w(info("settings"))
    w("")
    calib = read(os.path.join(d, "calibration.tsv")).strip().splitlines()
    if calib:
        w("Thread calibration (median training seconds per epoch of a short run; the fastest setting of each "
          "implementation, model and precision is used for the measured runs):\n")
        w("| impl | model | precision | setting | s/epoch (short run) | chosen |")
        w("|---|---|---|---|---:|:---:|")
        for line in calib:
            f = line.split("\t")
            if len(f) >= 6:
                w(f"| {f[0]} | {f[1]} | {f[2]} | `{f[3]}` | {f[4]} | {'yes' if f[5] == '1' else ''} |")
        w("")

    w("### Results (medians over repeats)\n")
    if mode == "gpu":
        w("Clock: s/epoch, fastest epoch and samples/s are GPU time by CUDA events on both sides (mptrain: "
          "summary.json `epoch_gpu_times_s`; PyTorch: `torch.cuda.Event`), per run the median of the epochs after "
          "the first (all of them when a run has one epoch); `host s/epoch` is the host clock around the same "
          "epochs (mptrain `epoch_times_s`, PyTorch `time.perf_counter` to the end event's synchronisation), same "
          "median.\n")
    mem_col = "device memory (MiB)" if mode == "gpu" else "mptrain accounted memory (MiB)"
    host_col = " host s/epoch |" if mode == "gpu" else ""
    w("`CPU s / wall s`: the whole process (start-up, data loading, every epoch and the evaluations), user + system "
      "time of all its threads against its wall time, medians over repeats.\n")
    w(f"| model | impl | precision | s/epoch [min-max] |{host_col} fastest epoch (s) | samples/s | test acc [min-max] | "
      f"test loss | peak RSS (MiB) | {mem_col} | CPU s / wall s | runs |")
    w("|---|---|---|---:|" + ("---:|" if mode == "gpu" else "") + "---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        for impl in ["mptrain"] + TORCH_IMPLS:
            for p in PRECISIONS:
                a = agg.get((impl, m, p))
                if not a:
                    continue
                if a["n"] == 0 and a["reasons"]:  # a mode this machine could not run: the row says why
                    w(f"| {m} | {IMPL_NAMES[impl] if impl != 'pytorch' else 'pytorch'} | {p} | "
                      f"{'; '.join(a['reasons'])[:300]} |" + (" |" if mode == "gpu" else "") +
                      " | | | | | | | " + f"0 (+{a['failed']}) |")
                    continue
                rng = f"{fmt(a['t'], '.3f')} [{fmt(a['tmin'], '.3f')}-{fmt(a['tmax'], '.3f')}]"
                acc = fmt(a["acc"] * 100 if a["acc"] is not None else None, ".2f") + "%"
                if a["n"] > 1:
                    acc += f" [{a['accmin'] * 100:.2f}-{a['accmax'] * 100:.2f}]"
                rss = fmt(a["rss"] / 1024 if a["rss"] else None, ".0f")
                dm = fmt(a["dev_mem"] / 1048576 if a["dev_mem"] else None, ".1f", "-")
                runs_s = f"{a['n']}" + (f" (+{a['failed']} failed)" if a["failed"] else "")
                hc = f" {fmt(a['t_host'], '.4f')} |" if mode == "gpu" else ""
                if mode == "gpu":
                    rng = f"{fmt(a['t'], '.4f')} [{fmt(a['tmin'], '.4f')}-{fmt(a['tmax'], '.4f')}]"
                cw = f"{fmt(a['cpu'], '.1f')} / {fmt(a['wall'], '.1f')}"
                w(f"| {m} | {impl if impl in ('mptrain', 'pytorch') else IMPL_NAMES[impl]} | {p} | {rng} |{hc} {fmt(a['best'], '.4f' if mode == 'gpu' else '.3f')} | {fmt(a['sps'], '.0f')} | {acc} | {fmt(a['loss'], '.4f')} | "
                  f"{rss} | {dm} | {cw} | {runs_s} |")
    w("")
    w("### Ratios mptrain / PyTorch\n")
    w("Time ratio < 1 and samples/s ratio > 1 mean mptrain is faster; accuracy difference in percentage points "
      "(mptrain minus PyTorch); RSS ratio < 1 means mptrain's peak resident memory is smaller.\n")
    w("| model | mptrain | vs PyTorch | time/epoch ratio | speed-up | samples/s ratio | test acc diff (points) | "
      "peak RSS ratio |")
    w("|---|---|---|---:|---:|---:|---:|---:|")
    for m in models:
        for p in PRECISIONS:
            a = agg.get(("mptrain", m, p))
            if not a:
                continue
            for bp in baselines(mode, p):
                b = agg.get(("pytorch", m, bp))
                if not b:
                    continue
                tr = ratio(a["t"], b["t"])
                da = (a["acc"] - b["acc"]) * 100 if a["acc"] is not None and b["acc"] is not None else None
                w(f"| {m} | {p} | {bp} | {fmt(tr, '.3f')} | {fmt(ratio(b['t'], a['t']), '.2f')}x | "
                  f"{fmt(ratio(a['sps'], b['sps']), '.3f')} | {fmt(da, '+.2f')} | "
                  f"{fmt(ratio(a['rss'], b['rss']), '.3f')} |")
    w("")
    if mode == "gpu" and any(k[0] in TORCH_IMPLS[1:] for k in agg):
        w("### mptrain against each PyTorch mode, and against the best\n")
        w("GPU ms/epoch (CUDA events, per run the median of the epochs after the first, medians over repeats) of "
          "mptrain and of each PyTorch mode this machine ran (bench/pytorch_reference.py --mode: eager = default "
          "Adam; fused = Adam(fused=True); graph = the whole step as one CUDA Graph; compile = "
          "torch.compile(mode=\"max-autotune\")); `n/a` = the mode did not run (its reason is in the results table). "
          "Best: the fastest PyTorch mode of that row; the last two columns compare mptrain with it (time ratio < 1 "
          "and speed-up > 1: mptrain is faster).\n")
        w("| model | precision | mptrain | " + " | ".join("PyTorch " + x for x in TORCH_MODES) +
          " | best PyTorch mode | mptrain / best (time) | speed-up against the best |")
        w("|---|---|---:|" + "---:|" * len(TORCH_MODES) + "---|---:|---:|")
        for m in models:
            for p in PRECISIONS:
                a = agg.get(("mptrain", m, p))
                peers = [(x, agg.get((i, m, p))) for x, i in zip(TORCH_MODES, TORCH_IMPLS)]
                if not a and not any(b for _, b in peers):
                    continue
                ms = lambda v: fmt(v and v["t"] and 1e3 * v["t"], ".1f")
                done = [(x, b) for x, b in peers if b and b["t"]]
                best = min(done, key=lambda xb: xb[1]["t"]) if done else None
                tr = ratio(a["t"], best[1]["t"]) if a and best else None
                w(f"| {m} | {p} | {ms(a)} | " + " | ".join(ms(b) for _, b in peers) +
                  f" | {best[0] if best else 'n/a'} | {fmt(tr, '.3f')} | {fmt(tr and 1 / tr, '.2f')}x |")
        w("")
    if mode == "cpu":
        def t(impl, m, p, key="t"):
            a = agg.get((impl, m, p))
            return a[key] if a else None

        def tc(impl, m, p):
            return t(impl, m, p, "t_cpu")

        w("### mptrain's precisions against its own fp32\n")
        w("Time per epoch of each mptrain precision / mptrain fp32 (medians): the cost of the emulation's operand "
          "conversions (tf32, fp16, bf16) and the gain of the BF16 units (bf16n). The CPU-time column divides the "
          "processes' CPU time per epoch (user + system, all threads; medians): on a machine shared with other "
          "jobs it leaves out the time the run waited for a core, and with one thread per run it is the cost of the "
          "code itself.\n")
        w("| model | precision | time/epoch ratio to mptrain fp32 | CPU time/epoch ratio |")
        w("|---|---|---:|---:|")
        for m in models:
            for p in PRECISIONS[1:]:
                r = ratio(t("mptrain", m, p), t("mptrain", m, "fp32"))
                rc = ratio(tc("mptrain", m, p), tc("mptrain", m, "fp32"))
                if r is not None:
                    w(f"| {m} | {p} | {r:.3f} | {fmt(rc, '.3f')} |")
        w("")
        w("### Targets (issue #25; benchmarks, not tests)\n")
        w("Each ratio by the host clock (time/epoch, medians) and by CPU time per epoch (medians; see above); "
          "`met` judges each.\n")
        w("| target | time/epoch ratio | met | CPU time/epoch ratio | met |")
        w("|---|---:|:---:|---:|:---:|")

        def yes(ok):
            return "n/a" if ok is None else ("yes" if ok else "**no**")

        def target(text, got, ok, got_cpu=None, ok_cpu=None):
            w(f"| {text} | {got} | {yes(ok)} | {got_cpu or 'n/a'} | {yes(ok_cpu)} |")

        def ratio_target(text, num, den, bound):
            r, rc = ratio(t(*num), t(*den)), ratio(tc(*num), tc(*den))
            if r is None and rc is None:
                return
            target(text, fmt(r, ".3f") + (" x" if r is not None else ""), None if r is None else r <= bound,
                   fmt(rc, ".3f") + (" x" if rc is not None else ""), None if rc is None else rc <= bound)

        for m in ("mlp", "lenet5"):
            ratio_target(f"{m} fp32 (emulate): time/epoch <= 0.4 x PyTorch fp32", ("mptrain", m, "fp32"),
                         ("pytorch", m, "fp32"), 0.4)
        ratio_target("mlp bf16 --cpu-kernels native: time/epoch <= 0.6 x mptrain fp32", ("mptrain", "mlp", "bf16n"),
                     ("mptrain", "mlp", "fp32"), 0.6)
        ratio_target("mlp bf16 --cpu-kernels native: time/epoch <= 0.5 x PyTorch bf16 autocast",
                     ("mptrain", "mlp", "bf16n"), ("pytorch", "mlp", "bf16"), 0.5)
        for m in models:
            for p in ("tf32", "fp16", "bf16"):
                ratio_target(f"{m} {p} (emulated): time/epoch <= 1.2 x mptrain fp32", ("mptrain", m, p),
                             ("mptrain", m, "fp32"), 1.2)
        for m in models:
            for p in PRECISIONS:
                a = agg.get(("mptrain", m, p))
                if not a:
                    continue
                bp = accuracy_baseline(mode, p)
                b = agg.get(("pytorch", m, bp))
                if not b or a["acc"] is None or b["acc"] is None:
                    continue
                da = (a["acc"] - b["acc"]) * 100
                target(f"{m} {p}: final test accuracy within 0.5 points of PyTorch {bp}",
                       f"{a['acc'] * 100:.2f}% vs {b['acc'] * 100:.2f}% ({da:+.2f})", abs(da) <= 0.5)
        w("")

    gemm = sorted(os.listdir(os.path.join(d, "gemm"))) if os.path.isdir(os.path.join(d, "gemm")) else []
    if gemm:
        w("### GEMM micro-benchmark (bench/gemm_bench)\n")
        for g in gemm:
            w(f"`{g[:-4]}`:\n")
            w("```")
            w(read(os.path.join(d, "gemm", g)).rstrip())
            w("```\n")

    if raw:
        w("### Every run\n")
        w("In the order they ran.\n")
        w("`CPU s/epoch`: the run's own CPU time (user + system, all its threads) of each epoch's training steps, "
          "from which the CPU-time medians and ratios above are computed; `CPU s`: the whole process's, as in "
          "`CPU s / wall s`. `others' CPU s`: CPU seconds other processes used on the machine while the run ran "
          "(all CPU time from /proc/stat minus the run's own user + system time): a run that shares the 2 cores "
          "with others is slower than the code is.\n")
        clock = "; CUDA events" if mode == "gpu" else ""
        w(f"| run | repeat | seed | settings | s/epoch (each epoch{clock}) | CPU s/epoch (each epoch) | test acc | "
          "peak RSS (MiB) | wall (s) | CPU s | others' CPU s | load avg before/after | exit |")
        w("|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---|---:|")
        for r in runs:
            ep = ", ".join(f"{x:.4f}" if mode == "gpu" else f"{x:.3f}" for x in r.get("epoch_times", []) or [])
            cep = ", ".join(f"{x:.3f}" for x in r.get("cpu_times", []) or []) or "n/a"
            w(f"| {r['name']} | {r.get('repeat')} | {r.get('seed')} | `{r.get('settings', '')}` | {ep} | {cep} | "
              f"{fmt(r.get('acc') * 100 if r.get('acc') is not None else None, '.2f')}% | "
              f"{fmt(r['rss_kib'] / 1024 if r['rss_kib'] else None, '.0f')} | {fmt(r['wall_s'], '.1f')} | "
              f"{fmt(r['cpu_s'], '.1f')} | {fmt(r['others_cpu_s'], '.1f')} | "
              f"{r.get('load_before', '?')} / {r.get('load_after', '?')} | {r.get('rc')} |")
        w("")
    return "\n".join(out)


def main():
    argv, args, also = sys.argv[1:], [], []
    i = 0
    while i < len(argv):
        if argv[i] == "--also":
            if i + 1 >= len(argv) or not os.path.isdir(argv[i + 1]):
                sys.exit("summarize.py: --also needs a run.sh output folder")
            also.append(argv[i + 1])
            i += 2
            continue
        if not argv[i].startswith("--"):
            args.append(argv[i])
        elif argv[i] != "--raw":
            sys.exit(f"summarize.py: unknown option '{argv[i]}' (usage: summarize.py DIR cpu|gpu [--raw] [--also DIR2]...)")
        i += 1
    if len(args) != 2 or args[1] not in ("cpu", "gpu"):
        sys.exit("usage: summarize.py DIR cpu|gpu [--raw] [--also DIR2]...")
    print(report(args[0], args[1], "--raw" in argv, also))


if __name__ == "__main__":
    main()
