#!/usr/bin/python3
"""GPU benchmark: hpctrain against PyTorch eager on the same GPU.

For the mlp, cnn and resnet20 presets in fp32 and bf16: training samples/s
of hpctrain and of PyTorch with the same model (bench/torch_ddp.py's
make_model, layer for layer), batch, optimizer (Adam, lr 1e-3) and
precision, and the achieved TFLOP/s against the GPU's peak.

Like for like:
  - fp32 is true fp32 on both sides (PyTorch's TF32 switched off for matmul
    and cuDNN, as hpctrain never uses TF32);
  - bf16 is mixed precision on both sides (fp32 master weights; PyTorch
    through torch.autocast, hpctrain with --train.precision bf16);
  - each PyTorch step copies its batch from pinned host memory, as hpctrain's
    loader does; neither side waits for the GPU inside a step except where
    hpctrain reads its loss back.
FLOPs per sample are counted from the PyTorch model (2 per multiply-add of
every convolution and linear layer, ×3 for forward + backward).

Then gpt2-124m (12 layers, 12 heads, width 768, context 1024, vocabulary
50257; batch 8 windows) in fp32 and bf16: training tokens/s of hpctrain and
of bench/torch_gpt.py's model on the same GPU (AdamW, random tokens below
256; hpctrain hands token ids to the GPU as float32 in every precision), and the model FLOPs
utilisation, MFU = tokens/s × 3 × forward FLOPs per token / the GPU's dense
peak (attention counted over the full T×T, as bench/bench_gpt does).

    bench/gpu_bench.py [--build build] [--out report.md] [--quick] [--part all|vision|gpt]

Prints a markdown table and writes it (and JSON lines) to --out. Never fails
on a slow number; a missing piece (no GPU, no PyTorch with CUDA) is reported.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

PRESETS = {"mlp": ((1, 28, 28), 256), "cnn": ((1, 28, 28), 256), "resnet20": ((3, 32, 32), 128)}
# Dense peak TFLOP/s by GPU and precision (NVIDIA data sheets; fp32 without tensor cores).
PEAKS = {"H200": {"fp32": 67.0, "bf16": 989.4}, "H100": {"fp32": 67.0, "bf16": 989.4},
         "A100": {"fp32": 19.5, "bf16": 312.0}, "L40S": {"fp32": 91.6, "bf16": 362.1},
         "A10": {"fp32": 31.2, "bf16": 125.0}}


def peak_for(gpu_name, precision):
    for key, peaks in PEAKS.items():
        if key in gpu_name:
            return peaks[precision]
    return None


def synth_file(path, shape, n):
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("train/x", data=rng.integers(0, 256, (n,) + shape, dtype=np.uint8))
        x.attrs["scale"], x.attrs["mean"], x.attrs["std"] = 1 / 255, 0.5, 0.25
        y = f.create_dataset("train/y", data=rng.integers(0, 10, n, dtype=np.int32))
        y.attrs["num_classes"] = 10


def flops_per_sample(model, shape):
    """2·multiply-adds of the convolutions and linear layers in one forward pass of one sample."""
    import torch
    total = [0]

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            total[0] += 2 * out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, torch.nn.Linear):
            total[0] += 2 * out.numel() * mod.in_features
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(torch.zeros((1,) + shape))
    for h in handles:
        h.remove()
    return total[0]


def run_hpctrain(build, args, key, timeout, tmp):
    """One hpctrain run on the GPU; (figure `key` of the last logged window, peak device MiB)."""
    run_dir = tempfile.mkdtemp(dir=tmp)
    cmd = [f"{build}/hpctrain", "--train.device", "cuda", "--log.progress", "none", "--run.dir", run_dir] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"hpctrain exited {p.returncode}: {p.stderr.strip()[-400:]}")
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = [r for r in rows if key in r][-1]  # the window of the last `warmup` steps
    return last[key], last.get("device_mem_peak_mb")


def hpctrain_sps(build, preset, precision, batch, warmup, steps, data, tmp):
    return run_hpctrain(build, ["--data.path", data, "--model.preset", preset, "--train.precision", precision,
                                "--train.batch_size", str(batch), "--train.steps", str(warmup + steps),
                                "--log.every", str(warmup), "--optim.name", "adam"], "samples_per_s", 600, tmp)


GPT_PRESET, GPT_BATCH, GPT_CONTEXT = "gpt2-124m", 8, 1024


def synth_tokens(path, n_tokens):
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        t = f.create_dataset("train/tokens", data=rng.integers(0, 256, n_tokens, dtype=np.uint16))
        t.attrs["vocab_size"] = 256


def hpctrain_gpt_tps(build, precision, warmup, steps, data, tmp):
    return run_hpctrain(build, ["--data.path", data, "--model.preset", GPT_PRESET, "--train.precision", precision,
                                "--train.batch_size", str(GPT_BATCH), "--train.steps", str(warmup + steps),
                                "--log.every", str(warmup), "--optim.name", "adamw"], "tokens_per_s", 300, tmp)


def gpt_section(args, gpu, have_torch, tmp, records):
    """gpt2-124m tokens/s and MFU, hpctrain vs PyTorch; returns markdown lines."""
    warmup, steps = (2, 4) if args.quick else (4, 8)  # steps: a multiple of warmup (metrics windows)
    data = os.path.join(tmp, "tokens.h5")
    synth_tokens(data, GPT_BATCH * (warmup + steps + 1) * GPT_CONTEXT + 1)
    try:
        from torch_gpt import flops_per_token  # imports torch
        fpt = 3 * flops_per_token(GPT_PRESET)
    except ImportError:
        fpt = None
    lines = ["", f"### {GPT_PRESET}: training tokens/s and MFU (batch {GPT_BATCH} × {GPT_CONTEXT} tokens, AdamW; "
             f"{steps} timed steps)", "",
             "| precision | hpctrain tokens/s | PyTorch tokens/s | ratio | hpctrain MFU | PyTorch MFU | "
             "hpctrain peak MiB |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    cell = lambda v, f: f.format(v) if v is not None else "–"  # noqa: E731
    for precision in ("fp32", "bf16"):
        rec = {"model": GPT_PRESET, "precision": precision, "batch": GPT_BATCH, "gpu": gpu}
        try:
            rec["hpctrain_tokens_per_s"], rec["peak_mib"] = hpctrain_gpt_tps(args.build, precision, warmup, steps,
                                                                             data, tmp)
        except Exception as e:  # report, never fail the benchmark
            rec["hpctrain_error"] = str(e)
        if have_torch:
            try:
                from torch_gpt import cuda_tokens_per_s
                rec["pytorch_tokens_per_s"] = cuda_tokens_per_s(GPT_PRESET, GPT_BATCH, warmup, steps, precision)
            except Exception as e:
                rec["pytorch_error"] = str(e)
        records.append(rec)
        ours, theirs = rec.get("hpctrain_tokens_per_s"), rec.get("pytorch_tokens_per_s")
        peak = peak_for(gpu, precision)
        mfu = lambda tps: 100 * tps * fpt / (peak * 1e12) if tps and peak and fpt else None  # noqa: E731
        lines.append(f"| {precision} | {cell(ours, '{:.0f}')} | {cell(theirs, '{:.0f}')} | "
                     f"{cell(ours / theirs if ours and theirs else None, '{:.2f}')} | {cell(mfu(ours), '{:.1f}%')} | "
                     f"{cell(mfu(theirs), '{:.1f}%')} | {cell(rec.get('peak_mib'), '{:.0f}')} |")
        print(lines[-1], flush=True)
        for key in ("hpctrain_error", "pytorch_error"):
            if key in rec:
                print(f"  {key}: {rec[key]}", flush=True)
    return lines


def torch_sps(preset, precision, batch, warmup, steps):
    import torch
    from torch_ddp import make_model
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model, shape = make_model(preset)
    model = model.cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x_host = torch.rand((batch,) + shape).pin_memory()
    y_host = torch.randint(0, 10, (batch,)).pin_memory()
    amp = precision == "bf16"

    def step():
        x = x_host.cuda(non_blocking=True)
        y = y_host.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu-latest.md"))
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke test of the script)")
    ap.add_argument("--part", choices=("all", "vision", "gpt"), default="all",
                    help="vision: mlp, cnn, resnet20; gpt: gpt2-124m (tests/gpu/run.sh runs them as two checks)")
    args = ap.parse_args()
    warmup, steps = (5, 10) if args.quick else (30, 150)  # steps: a multiple of warmup (metrics windows)

    try:
        import torch
        have_torch = torch.cuda.is_available()
        gpu = torch.cuda.get_device_name(0) if have_torch else "?"
        torch_version = torch.__version__
    except ImportError:
        have_torch, gpu, torch_version = False, "?", "not installed"
    if gpu == "?":
        q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        gpu = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else "?"

    lines = [f"## GPU benchmark: {gpu}", "",
             f"hpctrain vs PyTorch {torch_version} eager on the same GPU; Adam, per-step batch as listed; "
             f"{steps} timed steps after {warmup} warm-up steps. fp32 = true fp32 (no TF32) on both; "
             "bf16 = mixed precision with fp32 master weights on both.", "",
             "| model | precision | batch | hpctrain samples/s | PyTorch samples/s | ratio | hpctrain TFLOP/s | "
             "% of peak | hpctrain peak MiB |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    if args.part == "gpt":
        lines = [f"## GPU benchmark: {gpu}", "", f"hpctrain vs PyTorch {torch_version} on the same GPU; "
                 "fp32 = true fp32 (no TF32) on both; bf16 = mixed precision with fp32 master weights on both."]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset, (shape, batch) in (PRESETS.items() if args.part != "gpt" else ()):
            data = os.path.join(tmp, f"{preset}.h5")
            synth_file(data, shape, batch * (warmup + steps + 1))  # one epoch: no epoch boundary inside
            fps = None
            if have_torch:
                from torch_ddp import make_model
                fps = flops_per_sample(make_model(preset)[0], shape)
            for precision in ("fp32", "bf16"):
                rec = {"model": preset, "precision": precision, "batch": batch, "gpu": gpu}
                try:
                    rec["hpctrain"], rec["peak_mib"] = hpctrain_sps(args.build, preset, precision, batch, warmup,
                                                                    steps, data, tmp)
                except Exception as e:  # report, never fail the benchmark
                    rec["hpctrain_error"] = str(e)
                if have_torch:
                    try:
                        rec["pytorch"] = torch_sps(preset, precision, batch, warmup, steps)
                    except Exception as e:
                        rec["pytorch_error"] = str(e)
                records.append(rec)
                ours, theirs = rec.get("hpctrain"), rec.get("pytorch")
                tflops = ours * fps * 3 / 1e12 if ours and fps else None
                peak = peak_for(gpu, precision)
                cell = lambda v, f: f.format(v) if v is not None else "–"  # noqa: E731
                lines.append(f"| {preset} | {precision} | {batch} | {cell(ours, '{:.0f}')} | {cell(theirs, '{:.0f}')} | "
                             f"{cell(ours / theirs if ours and theirs else None, '{:.2f}')} | {cell(tflops, '{:.2f}')} | "
                             f"{cell(100 * tflops / peak if tflops and peak else None, '{:.1f}')} | "
                             f"{cell(rec.get('peak_mib'), '{:.0f}')} |")
                print(lines[-1], flush=True)
                for key in ("hpctrain_error", "pytorch_error"):
                    if key in rec:
                        print(f"  {key}: {rec[key]}", flush=True)
        if args.part != "vision":
            lines += gpt_section(args, gpu, have_torch, tmp, records)
    if not have_torch:
        lines += ["", "PyTorch with CUDA is not available here: no comparison column."]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.splitext(args.out)[0] + ".jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
