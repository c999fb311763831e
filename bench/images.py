#!/usr/bin/python3
"""Image-folder benchmark: hpctrain's decoding loader and ResNet-50 training
against PyTorch's DataLoader + torchvision + PIL on the same files and cores.

  1. decode + augment (RandomResizedCrop(224), flip, normalise) images/s per
     core from JPEGs of 500x375 (ImageNet's typical size): hpctrain's loader
     threads (bench_images) against DataLoader workers (torch_images.py
     loader), 1 core and all cores; and hpctrain's validation view;
  2. bytes on disk: the folder, `hpcdata pack --store jpeg`, `--store raw --size 224`;
  3. ResNet-50 training samples/s on 2 ranks (one core each, one loader
     thread/worker each, the same pipeline), hpctrain against PyTorch DDP
     (gloo), both on the OpenBLAS core hpctrain fits to this CPU.

    bench/images.py [--build build] [--out bench/results] [--images 240] [--quick]

Writes OUT/images.md. Nothing fails on a slow number.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile

import blas_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"


def run(cmd, env, timeout=1800):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-600:]}")
    return p.stdout


def last_json(out):
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def folder_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--images", type=int, default=240, help="JPEGs of 500x375 in the folder (>= 66)")
    ap.add_argument("--seconds", type=float, default=12, help="per loader measurement")
    ap.add_argument("--quick", action="store_true", help="fewer seconds and steps (a smoke run)")
    a = ap.parse_args()
    a.images = max(a.images, 66)  # a batch of 64 on each side
    build = os.path.abspath(a.build)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env, core_note = blas_env.comparison_env(build, env)
    seconds = 3 if a.quick else a.seconds
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp(prefix="hpctrain-images-")
    notes = [core_note]
    try:
        folder = os.path.join(tmp, "folder")
        run([PY, os.path.join(ROOT, "tests", "e2e", "make_image_folder.py"), folder, "--size", "500", "375",
             "--per-class", str(max(1, a.images // 3))], env)
        jpeg, raw = os.path.join(tmp, "jpeg.h5"), os.path.join(tmp, "raw.h5")
        run([f"{build}/hpcdata", "pack", "--from", "image-folder", folder, "-o", jpeg], env)
        run([f"{build}/hpcdata", "pack", "--from", "image-folder", folder, "-o", raw, "--store", "raw",
             "--size", "224"], env)
        sizes = {"folder": folder_bytes(folder), "jpeg": os.path.getsize(jpeg), "raw": os.path.getsize(raw)}

        # ---- 1. decode + augment -------------------------------------------------------------------
        dec = {}
        for workers in sorted({1, cores}):
            ours = last_json(run([f"{build}/bench/bench_images", jpeg, "--workers", str(workers),
                                  "--seconds", str(seconds)], env))
            theirs = last_json(run([PY, os.path.join(ROOT, "bench", "torch_images.py"), "loader", folder,
                                    "--workers", str(0 if workers == 1 else workers), "--seconds", str(seconds)],
                                   env))
            dec[workers] = (ours["images_per_s"], theirs["images_per_s"])
        val = last_json(run([f"{build}/bench/bench_images", jpeg, "--val", "--seconds", str(seconds)], env))

        # ---- 3. ResNet-50 on 2 ranks ------------------------------------------------------------
        batch, timed = (4, 2) if a.quick else (16, 4)
        run_dir = os.path.join(tmp, "r50")
        run(["mpirun", "-np", "2", "--bind-to", "none", f"{build}/hpctrain", "--data.path", jpeg, "--model.preset",
             "resnet50", "--data.augment", "random_resized_crop:224, flip", "--train.batch_size", str(batch),
             "--train.steps", str(2 * timed), "--log.every", str(timed), "--log.progress", "none",
             "--data.workers", "1", "--optim.name", "sgd", "--optim.lr", "0.01", "--model.sync_bn", "false",
             "--run.dir", run_dir], env)
        recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        ours_sps = [r for r in recs if "samples_per_s" in r][-1]["samples_per_s"]
        theirs_sps = last_json(run(["mpirun", "-np", "2", "--bind-to", "none", PY,
                                    os.path.join(ROOT, "bench", "torch_images.py"), "train", folder, "--batch",
                                    str(batch), "--steps", str(2 * timed), "--workers", "1"], env))["samples_per_s"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    mib = lambda b: f"{b / 1048576:.1f} MiB"
    lines = [
        "# Image folders: hpctrain against PyTorch + torchvision + PIL", "",
        f"Machine: {cpu}, {cores} cores; {notes[0]}. Folder: {a.images} JPEGs of 500x375 "
        f"(quality 90, tests/e2e/make_image_folder.py).", "",
        "## Decode + augment (RandomResizedCrop(224), flip, normalise), images/s", "",
        "| cores | hpctrain | PyTorch DataLoader | ratio |", "| --- | --- | --- | --- |"]
    for w, (o, t) in dec.items():
        lines.append(f"| {w} | {o:,.0f} ({o / w:,.0f} per core) | {t:,.0f} ({t / w:,.0f} per core) | {o / t:.2f}x |")
    lines += ["", f"hpctrain's validation view (Resize(256) + CenterCrop(224), full-size decode): "
              f"{val['images_per_s']:,.0f} images/s on 1 thread.", "",
              "## Bytes on disk", "", "| the folder | --store jpeg | --store raw --size 224 |", "| --- | --- | --- |",
              f"| {mib(sizes['folder'])} | {mib(sizes['jpeg'])} ({sizes['jpeg'] / sizes['folder']:.2f}x) | "
              f"{mib(sizes['raw'])} ({sizes['raw'] / sizes['folder']:.2f}x) |", "",
              f"## ResNet-50 training, 2 ranks x batch {batch}, 224x224, one loader thread per rank", "",
              "| hpctrain | PyTorch DDP | ratio |", "| --- | --- | --- |",
              f"| {ours_sps:.2f} samples/s | {theirs_sps:.2f} samples/s | {ours_sps / theirs_sps:.2f}x |", ""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "images.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
