#!/usr/bin/python3
"""make bench: how fast is hpctrain against what users run today (PyTorch
DDP) and against this machine's own limits (sgemm, memcpy, raw MPI)?

Everything is measured in this one run, on this machine:
  1. training throughput, hpctrain vs PyTorch DDP (gloo), same models, per-rank
     batch, optimizer (Adam) and data shapes, 1 and 2 ranks, one thread per
     rank; runs interleaved (A B A B …) and the median of the repetitions kept.
     BatchNorm per rank on both sides (hpctrain --model.sync_bn false): DDP's
     BatchNorm2d is not synchronised, and gloo has no SyncBatchNorm
  2. GPT (gpt-small) and Llama (llama-small) tokens/s against the same
     models in PyTorch, and model FLOPs utilisation of both against this
     machine's sgemm peak; hpctrain sample's tokens/s with and without the
     key/value cache (bench/sample_kv.sh)
  3. compute efficiency: every model's training step in GFLOP/s (counted
     FLOPs) against the sgemm peak, and the mlp step against sgemm at its
     own GEMM shapes
  4. communication: hpctrain's AllReduce against raw MPI_Allreduce and
     PyTorch's gloo all_reduce on the same sizes
  5. data: loader throughput against memcpy, and the data wait inside
     training (bench/loader_wait.sh)
  6. weak scaling 1 -> 2 ranks and exposed communication time
and written to bench/results/latest.md (tables, the machine, versions, the
targets met or missed) with PNG plots. Nothing here fails on a slow number:
a missing piece is reported as such.

    bench/run.py [--quick] [--build build] [--out bench/results] [--blas-core NAME]

Both sides run one OpenBLAS core, the best for this CPU (bench/blas_env.py).
"""
import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import blas_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
SHAPES = {"simplenet": (1, 28, 28), "mlp": (1, 28, 28), "cnn": (1, 28, 28), "resnet20": (3, 32, 32)}


def kill_session(sid):
    """SIGKILL every process of session sid. Open MPI puts each rank in a process group of its own, so
    killing mpirun's group (or mpirun) leaves the ranks running; they all stay in mpirun's session."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
            if int(fields[3]) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read


def run(cmd, timeout=900):
    # Its own session: on a timeout every process it started goes (a rank left spinning would skew every
    # later measurement).
    with subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(p.pid)
            p.communicate()
            raise RuntimeError(f"{' '.join(cmd)} ran past {timeout} s (killed)")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {err.strip()[-500:]}")
    return out


def mpirun(n, cmd, timeout=900):
    # One core per rank where there are enough (no migration noise); more ranks than cores share them.
    bind = "core" if n <= (os.cpu_count() or 1) else "none"
    return run(["mpirun", "-np", str(n), "--bind-to", bind, "--oversubscribe"] + cmd, timeout)


def synth_file(path, shape, n):
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("train/x", data=rng.integers(0, 256, (n,) + shape, dtype=np.uint8))
        x.attrs["scale"], x.attrs["mean"], x.attrs["std"] = 1 / 255, 0.5, 0.25
        y = f.create_dataset("train/y", data=rng.integers(0, 10, n, dtype=np.int32))
        y.attrs["num_classes"] = 10


def hpctrain_sps(build, model, ranks, batch, warmup, steps, data, tmp):
    """samples/s over the timed steps: the last metrics record covers exactly them."""
    run_dir = tempfile.mkdtemp(dir=tmp)
    out = mpirun(ranks, [f"{build}/hpctrain", "--data.path", data, "--model.preset", model,
                         "--train.batch_size", str(batch), "--train.steps", str(warmup + steps),
                         "--log.every", str(warmup), "--log.progress", "none", "--optim.name", "adam",
                         "--run.dir", run_dir, "--dist.bucket_mb", "25", "--model.sync_bn", "false"])
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = dict([r for r in rows if "samples_per_s" in r][-1])
    m = re.search(r"forward: ([0-9.]+) MFLOP per sample", out)
    last["forward_mflop"] = float(m.group(1)) if m else None
    return last["samples_per_s"], last


def independent_pair_sps(build, model, batch, warmup, steps, data, tmp):
    """Two separate 1-rank trainings at the same time: what this machine gives two processes with no
    communication at all (shared cores, caches, memory bandwidth), the ceiling for 2-rank weak scaling."""
    procs, dirs = [], []
    for i in range(2):
        d = tempfile.mkdtemp(dir=tmp)
        dirs.append(d)
        procs.append(subprocess.Popen(
            ["taskset", "-c", str(i % os.cpu_count()), f"{build}/hpctrain", "--data.path", data, "--model.preset",
             model, "--train.batch_size", str(batch), "--train.steps", str(warmup + steps), "--log.every",
             str(warmup), "--log.progress", "none", "--optim.name", "adam", "--run.dir", d, "--model.sync_bn",
             "false"],
            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    total = 0.0
    for p, d in zip(procs, dirs):
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"independent hpctrain exited {p.returncode}: {err.strip()[-300:]}")
        rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        total += [r for r in rows if "samples_per_s" in r][-1]["samples_per_s"]
    return total


def torch_sps(model, ranks, batch, warmup, steps):
    out = mpirun(ranks, [PY, os.path.join(ROOT, "bench", "torch_ddp.py"), "--model", model, "--batch", str(batch),
                         "--steps", str(steps), "--warmup", str(warmup)])
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def bench_training(build, models, reps, steps_for, tmp, pair):
    results = {}
    for model in models:
        warmup, steps = steps_for(model)
        data = os.path.join(tmp, f"{model}.h5")
        synth_file(data, SHAPES[model], 64 * 2 * (warmup + steps + 1))
        for ranks in (1, 2):
            ours, theirs, extra = [], [], None
            for _ in range(reps):  # interleaved: machine drift hits both alike
                sps, extra = hpctrain_sps(build, model, ranks, 64, warmup, steps, data, tmp)
                ours.append(sps)
                theirs.append(torch_sps(model, ranks, 64, warmup, steps))
            results[(model, ranks)] = {"hpctrain": statistics.median(ours), "pytorch": statistics.median(theirs),
                                       "metrics": extra}
            if ranks == 2 and pair:
                results[(model, 2)]["pair"] = statistics.median(
                    independent_pair_sps(build, model, 64, warmup, steps, data, tmp) for _ in range(reps))
            r = results[(model, ranks)]
            print(f"  {model:10s} {ranks} rank(s): hpctrain {r['hpctrain']:9.1f}  pytorch {r['pytorch']:9.1f} "
                  f"samples/s  ratio {r['hpctrain'] / r['pytorch']:.2f}", flush=True)
    return results


def bench_binary(build, name, args=(), ranks=None):
    exe = os.path.join(build, "bench", name)
    if not os.path.exists(exe):
        return None
    try:
        return mpirun(ranks, [exe] + list(args)) if ranks else run([exe] + list(args))
    except Exception as e:  # report, never fail the whole bench
        return f"(failed: {e})"


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions(build):
    try:
        v = run([f"{build}/hpctrain", "--version"])
    except Exception as e:
        v = str(e)
    try:
        import torch
        v += f"\nPyTorch {torch.__version__}"
    except ImportError:
        pass
    return v.strip()


def plots(out, training, allreduce_rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots (apt-get install python3-matplotlib)")
        return
    keys = sorted(training)
    labels = [f"{m}\n{r} rank(s)" for m, r in keys]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(keys)), 4))
    xs = range(len(keys))
    ours = [training[k]["hpctrain"] for k in keys]
    theirs = [training[k]["pytorch"] for k in keys]
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="hpctrain")
    ax.bar([x + 0.2 for x in xs], theirs, 0.4, label="PyTorch DDP (gloo)")
    for x, a, b in zip(xs, ours, theirs):
        ax.text(x, max(a, b) * 1.02, f"{a / b:.2f}x", ha="center")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("samples/s (total)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Training throughput, CPU, one thread per rank")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    ones = {m: training[(m, 1)] for m, r in keys if r == 1 and (m, 2) in training}
    eff = [training[(m, 2)]["hpctrain"] / (2 * ones[m]["hpctrain"]) for m in ones]
    eff_t = [training[(m, 2)]["pytorch"] / (2 * ones[m]["pytorch"]) for m in ones]
    xs = range(len(ones))
    ax.bar([x - 0.2 for x in xs], eff, 0.4, label="hpctrain")
    ax.bar([x + 0.2 for x in xs], eff_t, 0.4, label="PyTorch DDP")
    ax.axhline(0.9, color="gray", ls="--", lw=1)
    ax.set_xticks(list(xs), list(ones))
    ax.set_ylabel("weak-scaling efficiency 1 -> 2 ranks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)

    if allreduce_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for series in sorted({r[0] for r in allreduce_rows}):
            pts = sorted((r[1], r[2]) for r in allreduce_rows if r[0] == series)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=series)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "allreduce.png"), dpi=110)


def parse_allreduce(text, ranks):
    """Rows of an nccl-tests style table: (series, bytes, busbw) for every numeric row."""
    rows, series = [], None
    for line in (text or "").splitlines():
        m = re.match(r"#\s*series:\s*(\S+)", line)
        if m:
            series = f"{m.group(1)} ({ranks} ranks)"
            continue
        cols = line.split()
        if series and len(cols) >= 6 and cols[0].isdigit():
            try:
                rows.append((series, int(cols[0]), float(cols[-1])))
            except ValueError:
                pass
    return rows


def bench_gpt(build, reps, steps, batch, preset="gpt-small"):
    """A language-model preset on 1 and 2 ranks: hpctrain (bench_gpt) and PyTorch (torch_gpt.py), interleaved."""
    exe = os.path.join(build, "bench", "bench_gpt")
    if not os.path.exists(exe):
        return {}
    results = {}
    for ranks in (1, 2):
        ours, theirs = [], []
        try:
            for _ in range(reps):
                out = mpirun(ranks, [exe, str(steps), str(batch), preset], timeout=300)
                ours.append(json.loads(out.strip().splitlines()[-1]))
                out = mpirun(ranks, [PY, os.path.join(ROOT, "bench", "torch_gpt.py"), "--preset", preset,
                                     "--batch", str(batch), "--steps", str(steps)], timeout=300)
                theirs.append(json.loads(out.strip().splitlines()[-1]))
        except Exception as e:  # report, never lose the rest of the run
            print(f"  {preset}  {ranks} rank(s): failed: {e}", flush=True)
            continue
        mid = sorted(ours, key=lambda r: r["tokens_per_s"])[len(ours) // 2]
        t = statistics.median(r["tokens_per_s"] for r in theirs)
        # PyTorch's MFU from the same model FLOPs and the same sgemm peak (hpctrain's run measured both).
        results[ranks] = {"hpctrain": mid["tokens_per_s"], "pytorch": t, "mfu": mid["mfu"],
                          "mfu_pytorch": mid["mfu"] * t / mid["tokens_per_s"], "sgemm": mid["sgemm_gflops"]}
        r = results[ranks]
        print(f"  {preset}  {ranks} rank(s): hpctrain {r['hpctrain']:9.0f}  pytorch {t:9.0f} tokens/s  "
              f"ratio {r['hpctrain'] / t:.2f}  MFU {100 * r['mfu']:.1f}% vs {100 * r['mfu_pytorch']:.1f}%",
              flush=True)
    return results


def gloo_allreduce(n, quick):
    try:
        return mpirun(n, [PY, os.path.join(ROOT, "bench", "torch_allreduce.py")] + (["--quick"] if quick else []))
    except Exception as e:
        return f"(failed: {e})"


def loader_wait(build, steps):
    try:
        return run(["bash", os.path.join(ROOT, "bench", "loader_wait.sh"), build, str(steps)], timeout=900)
    except Exception as e:
        return f"(failed: {e})"


def allreduce_ratio(text):
    """The worst hpctrain/MPI time ratio at >= 1 MiB that bench_allreduce prints, or None."""
    m = re.search(r"at >= 1 MiB: hpctrain-allreduce worst ([0-9.]+) median ([0-9.]+); "
                  r"hpctrain-4-buckets worst ([0-9.]+) median ([0-9.]+)", text or "")
    return tuple(float(g) for g in m.groups()) if m else None


def sample_kv(build):
    """hpctrain sample's tokens/s with and without the key/value cache (bench/sample_kv.sh), or its failure."""
    try:
        return run(["bash", os.path.join(ROOT, "bench", "sample_kv.sh"), build], timeout=1200)
    except Exception as e:
        return f"(failed: {e})"


def targets(training, gpt, mlp_text, allreduce_text, llama=None):
    """(target, measured, met) rows for the issue's figures."""
    rows = []
    for model, want in (("mlp", 2.0), ("cnn", 2.0), ("resnet20", 2.0)):
        for ranks in (1, 2):
            if (model, ranks) in training:
                v = training[(model, ranks)]
                ratio = v["hpctrain"] / v["pytorch"]
                rows.append((f"{model}, {ranks} rank(s): >= {want:g}x PyTorch DDP samples/s", f"{ratio:.2f}x",
                             ratio >= want))
    m = re.search(r"step_vs_sgemm ([0-9.]+)", mlp_text or "")
    if m:
        rows.append(("mlp step >= 75% of sgemm GFLOP/s at its shapes", f"{100 * float(m.group(1)):.0f}%",
                     float(m.group(1)) >= 0.75))
    for n, text in allreduce_text.items():
        r = allreduce_ratio(text)
        if r:
            rows.append((f"AllReduce within 5% of MPI_Allreduce at >= 1 MiB, {n} ranks (time ratio, worst / median)",
                         f"{r[0]:.3f} / {r[1]:.3f}", r[0] <= 1.05))
    for model in sorted({m for m, _ in training}):
        if (model, 1) in training and (model, 2) in training:
            two = training[(model, 2)]
            e = two["hpctrain"] / (2 * training[(model, 1)]["hpctrain"])
            ceiling = f" ({100 * two['hpctrain'] / two['pair']:.0f}% of the 2-independent-process ceiling)" \
                if "pair" in two else ""
            rows.append((f"weak scaling 1 -> 2 ranks >= 90%, {model}", f"{100 * e:.0f}%{ceiling}", e >= 0.9))
    for name, runs in (("gpt-small", gpt), ("llama-small", llama or {})):
        for ranks, g in sorted(runs.items()):
            ratio = g["hpctrain"] / g["pytorch"]
            rows.append((f"{name}, {ranks} rank(s): >= 1.5x PyTorch tokens/s", f"{ratio:.2f}x", ratio >= 1.5))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition (< 2 minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: only checks that everything runs (tests)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--blas-core", help="the OpenBLAS core for both sides (default: hpctrain's fitted one)")
    args = ap.parse_args()
    global ENV
    ENV, args.blas_note = blas_env.comparison_env(args.build, ENV, args.blas_core)
    print(args.blas_note, flush=True)
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="hpctrain-bench-")

    if args.smoke:
        models, reps, gpt_steps = ["mlp"], 1, 0
        steps_for = lambda m: (2, 3)
        args.quick = True
    elif args.quick:
        models, reps, gpt_steps = ["mlp", "cnn"], 1, 0
        steps_for = lambda m: (5, 15)
    else:
        models, reps, gpt_steps = ["simplenet", "mlp", "cnn", "resnet20"], 3, 10
        steps_for = lambda m: {"simplenet": (20, 400), "mlp": (20, 200), "cnn": (10, 60), "resnet20": (3, 12)}[m]

    print("== training throughput (samples/s, median of interleaved runs)", flush=True)
    training = bench_training(args.build, models, reps, steps_for, tmp, pair=not args.smoke)

    gpt, llama, kv = {}, {}, None
    if gpt_steps:
        print("== gpt-small (tokens/s, median of interleaved runs)", flush=True)
        gpt = bench_gpt(args.build, reps, gpt_steps, 8)
        print("== llama-small (tokens/s, median of interleaved runs)", flush=True)
        llama = bench_gpt(args.build, reps, gpt_steps, 8, "llama-small")
        print("== hpctrain sample with and without the key/value cache", flush=True)
        kv = sample_kv(args.build)
        print(kv, flush=True)

    print("== compute efficiency (mlp step vs sgemm)", flush=True)
    mlp_steps = "5" if args.smoke else "100" if args.quick else "400"
    mlp = bench_binary(args.build, "bench_mlp", [mlp_steps]) or "(bench_mlp not built)"
    print(mlp, flush=True)

    print("== communication", flush=True)
    allreduce_text, gloo_text, allreduce_rows = {}, {}, []
    # The smoke test only checks that the pieces run: 2 ranks, small sizes.
    ar_args = ["--quick", "--max", "256K"] if args.smoke else ["--quick"] if args.quick else []
    for n in (2,) if args.smoke else (2, 4):
        t = bench_binary(args.build, "bench_allreduce", ar_args, ranks=n)
        allreduce_text[n] = t or "(bench_allreduce not built)"
        allreduce_rows += parse_allreduce(t, n)
        print(allreduce_text[n], flush=True)
        if not args.smoke:
            gloo_text[n] = gloo_allreduce(n, args.quick)
            allreduce_rows += parse_allreduce(gloo_text[n], n)
            print(gloo_text[n], flush=True)

    print("== data loader", flush=True)
    loader = bench_binary(args.build, "bench_loader", ["--quick"] if args.quick else []) or "(bench_loader not built)"
    print(loader, flush=True)
    wait = None
    if not args.quick:
        wait = loader_wait(args.build, 300)
        print(wait, flush=True)

    write_report(args, models, training, gpt, mlp, allreduce_text, gloo_text, loader, wait, started, llama, kv)
    plots(args.out, training, allreduce_rows)
    print(f"wrote {args.out}/latest.md and plots in {time.time() - started:.0f} s")


def write_report(args, models, training, gpt, mlp, allreduce_text, gloo_text, loader, wait, started, llama=None,
                 kv=None):
    lines = ["# hpctrain benchmarks", "", f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
             f"- machine: {machine()}", f"- mode: {'quick' if args.quick else 'full'}", f"- {args.blas_note}", "",
             "```", versions(args.build),
             "```", ""]
    rows = targets(training, gpt, mlp, allreduce_text, llama)
    if rows:
        lines += ["## Targets", "", "| target | measured | met |", "| --- | --- | --- |"]
        lines += [f"| {t} | {v} | {'yes' if ok else '**no**'} |" for t, v, ok in rows]
        lines.append("")
    lines += ["## Training throughput (samples/s over all ranks; Adam, per-rank batch 64, 1 thread/rank)", "",
              "| model | ranks | hpctrain | PyTorch DDP | ratio | hpctrain comm_ms/step | compute_ms/step |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for (m, r), v in sorted(training.items()):
        met = v["metrics"] or {}
        lines.append(f"| {m} | {r} | {v['hpctrain']:.1f} | {v['pytorch']:.1f} | {v['hpctrain'] / v['pytorch']:.2f} | "
                     f"{met.get('comm_ms', 0):.2f} | {met.get('compute_ms', 0):.2f} |")
    lines += ["", "comm_ms is the exposed communication: the time the step waited for gradient AllReduce "
              "after backward (the rest overlapped with backward). BatchNorm runs per rank on both sides "
              "(hpctrain `--model.sync_bn false`, as DDP's unsynchronised BatchNorm2d).", "",
              "## Weak scaling 1 -> 2 ranks", "",
              "Efficiency = 2-rank samples/s / (2 x 1-rank samples/s). The machine's own ceiling: two separate "
              "1-rank trainings run at the same time, no communication at all (shared cores, caches, memory "
              "bandwidth); \"vs ceiling\" divides by that instead.", "",
              "| model | hpctrain efficiency | PyTorch efficiency | machine ceiling (2 independent) | hpctrain vs ceiling |",
              "| --- | --- | --- | --- | --- |"]
    for m in models:
        if (m, 1) in training and (m, 2) in training:
            two, one = training[(m, 2)], training[(m, 1)]
            e = two["hpctrain"] / (2 * one["hpctrain"])
            et = two["pytorch"] / (2 * one["pytorch"])
            if "pair" in two:
                lines.append(f"| {m} | {e:.2f} | {et:.2f} | {two['pair'] / (2 * one['hpctrain']):.2f} | "
                             f"{two['hpctrain'] / two['pair']:.2f} |")
            else:
                lines.append(f"| {m} | {e:.2f} | {et:.2f} | - | - |")
    if gpt:
        lines += ["", "## GPT (gpt-small: 4 layers, width 256, context 128; batch 8 per rank, AdamW)", "",
                  "| ranks | hpctrain tokens/s | PyTorch tokens/s | ratio | hpctrain MFU | PyTorch MFU | sgemm peak GFLOP/s/rank |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r, g in sorted(gpt.items()):
            lines.append(f"| {r} | {g['hpctrain']:.0f} | {g['pytorch']:.0f} | {g['hpctrain'] / g['pytorch']:.2f} | "
                         f"{100 * g['mfu']:.1f}% | {100 * g['mfu_pytorch']:.1f}% | {g['sgemm']:.1f} |")
        lines += ["", "MFU = model FLOPs/s per rank (3 x forward, attention over the full T x T) / one-thread "
                  "sgemm GFLOP/s on 1024^3, measured in the same run."]
    if llama:
        lines += ["", "## Llama (llama-small: 4 layers, width 256, 4 heads / 2 kv heads, SwiGLU 768, context 128; "
                  "batch 8 per rank, AdamW)", "",
                  "| ranks | hpctrain tokens/s | PyTorch tokens/s | ratio | hpctrain MFU | PyTorch MFU | sgemm peak GFLOP/s/rank |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r, g in sorted(llama.items()):
            lines.append(f"| {r} | {g['hpctrain']:.0f} | {g['pytorch']:.0f} | {g['hpctrain'] / g['pytorch']:.2f} | "
                         f"{100 * g['mfu']:.1f}% | {100 * g['mfu_pytorch']:.1f}% | {g['sgemm']:.1f} |")
    if kv:
        lines += ["", "## hpctrain sample: key/value cache", "", "```", kv.strip(), "```"]
    lines += ["", "## Compute efficiency", ""]
    peak = next((g["sgemm"] for g in gpt.values()), None)
    flops_rows = [(m, r, v) for (m, r), v in sorted(training.items()) if (v["metrics"] or {}).get("forward_mflop")]
    if flops_rows:
        lines += ["Training step GFLOP/s per rank from counted FLOPs (3 x forward) and samples/s"
                  + (f", against the sgemm peak ({peak:.1f} GFLOP/s, 1024^3, one thread)" if peak else "") + ":", "",
                  "| model | ranks | MFLOP/sample (fwd) | hpctrain GFLOP/s/rank | PyTorch GFLOP/s/rank |"
                  + (" hpctrain % of sgemm peak |" if peak else ""),
                  "| --- | --- | --- | --- | --- |" + (" --- |" if peak else "")]
        for m, r, v in flops_rows:
            f = v["metrics"]["forward_mflop"] * 3 / 1e3
            ours, theirs = v["hpctrain"] / r * f, v["pytorch"] / r * f
            lines.append(f"| {m} | {r} | {v['metrics']['forward_mflop']:.2f} | {ours:.2f} | {theirs:.2f} |"
                         + (f" {100 * ours / peak:.0f}% |" if peak else ""))
        lines.append("")
    lines += ["```", mlp.strip(), "```", "", "## AllReduce", ""]
    for n, t in allreduce_text.items():
        lines += [f"{n} ranks:", "", "```", t.strip(), "```", ""]
        if n in gloo_text:
            lines += [f"PyTorch gloo, {n} ranks:", "", "```", gloo_text[n].strip(), "```", ""]
    lines += ["## Data loader", "", "```", loader.strip(), "```", ""]
    if wait:
        lines += ["Data wait inside training (bench/loader_wait.sh, MNIST sample, batch 64):", "", "```",
                  wait.strip(), "```", ""]
    lines += [f"Total benchmark time: {time.time() - started:.0f} s", ""]
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
