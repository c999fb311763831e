#!/usr/bin/python3
"""PyTorch peer for `make bench`: the same models, batch, optimizer and data
shapes as hpctrain, trained with DistributedDataParallel over gloo, one
thread per rank. Launched like hpctrain (mpirun -np N); rank and world come
from Open MPI's environment. Prints one JSON line (rank 0) with samples/s over
the timed steps.

    mpirun -np 2 bench/torch_ddp.py --model cnn --batch 64 --steps 100
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from torch_exit import leave_without_teardown


def block(cin, cout, stride):
    body = nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
    short = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
        nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.short = body, short

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))
    return Res()


def make_model(name, classes=10):
    """The hpctrain presets (src/nn/spec.cpp), layer for layer."""
    if name == "simplenet":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, classes)), (1, 28, 28)
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, classes)), (1, 28, 28)
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, classes)), (1, 28, 28)
    if name == "resnet20":
        layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        cin = 16
        for stage in range(3):
            for b in range(3):
                cout = 16 << stage
                layers.append(block(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
        return nn.Sequential(*layers), (3, 32, 32)
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--port", type=int, default=29517)
    args = ap.parse_args()

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, shape = make_model(args.model)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    x = torch.rand((args.batch,) + shape, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if world > 1:
        dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "model": args.model, "ranks": world, "batch": args.batch,
                          "samples_per_s": args.batch * world * args.steps / dt,
                          "version": torch.__version__}), flush=True)
    if world > 1:
        dist.barrier()  # rank 0 hosts the store: tearing it down while a peer is still in a call hangs that peer
        dist.destroy_process_group()
        leave_without_teardown()


if __name__ == "__main__":
    main()
