#!/usr/bin/python3
"""PyTorch peers of bench/images.py, on the same image folder and cores:

    torch_images.py loader DIR [--workers N] [--seconds S]
        torchvision's ImageFolder + DataLoader, RandomResizedCrop(224) +
        RandomHorizontalFlip + ToTensor + Normalize on PIL images (what a
        PyTorch ImageNet recipe trains on), batches of 64; workers = 0 runs
        the pipeline in this process (one core). One JSON line: images/s.

    mpirun -np 2 torch_images.py train DIR [--batch B] [--steps S] [--workers N]
        torchvision's resnet50 under DistributedDataParallel (gloo), one
        thread per rank, SGD, the same data pipeline with a DistributedSampler
        and N loader workers per rank. One JSON line (rank 0): samples/s over
        the steps after the first two.
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import transforms


def pipeline(size=224):
    return transforms.Compose([
        transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def loader(a):
    torch.set_num_threads(1)
    ds = torchvision.datasets.ImageFolder(a.dir, pipeline())
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=a.workers, drop_last=True,
                                     persistent_workers=a.workers > 0)
    it, images, t0 = iter(dl), 0, None
    while True:
        try:
            next(it)
        except StopIteration:
            it = iter(dl)
            next(it)
        if t0 is None:  # the first batch starts the workers and warms the page cache
            t0 = time.perf_counter()
            continue
        images += 64
        if time.perf_counter() - t0 >= a.seconds:
            break
    rate = images / (time.perf_counter() - t0)
    print(json.dumps({"images_per_s": rate, "per_core": rate / max(a.workers, 1), "workers": a.workers}))


def train(a):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch_exit import leave_without_teardown
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ds = torchvision.datasets.ImageFolder(a.dir, pipeline())
    sampler = torch.utils.data.distributed.DistributedSampler(ds, world, rank, shuffle=True, seed=42)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                                     drop_last=True, persistent_workers=a.workers > 0)
    torch.manual_seed(0)
    net = DistributedDataParallel(torchvision.models.resnet50(num_classes=len(ds.classes)))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    step, epoch, times = 0, 0, []
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in dl:
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
            times.append(time.perf_counter())
            step += 1
            if step >= a.steps:
                break
        epoch += 1
    # Wall time between the ends of step 2 and the last step: data waits included, as in hpctrain's figure.
    rate = a.batch * world * (len(times) - 2) / (times[-1] - times[1])
    if rank == 0:
        print(json.dumps({"samples_per_s": rate, "ranks": world, "batch_per_rank": a.batch}), flush=True)
    leave_without_teardown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["loader", "train"])
    ap.add_argument("dir")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    loader(a) if a.mode == "loader" else train(a)


if __name__ == "__main__":
    main()
