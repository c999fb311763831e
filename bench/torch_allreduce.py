#!/usr/bin/python3
"""PyTorch's gloo AllReduce for `make bench`, on the sizes bench_allreduce
uses, printed as one more series of its nccl-tests style table (so
bench/run.py parses and plots both alike). Launched like hpctrain
(mpirun -np N); rank and world come from Open MPI's environment.

Each size: warm-up, then ROUNDS timed loops of ITERS in-place float32 sums
(about 64 MiB of traffic per loop, 3 to 200 calls); a loop's time is the
slowest rank's, a row is the median over rounds. busbw = algbw·2(n−1)/n.

    mpirun -np 2 bench/torch_allreduce.py [--quick] [--min BYTES] [--max BYTES]
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def timed(buf, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="up to 4 MiB, 3 rounds")
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=64 << 20)
    ap.add_argument("--port", type=int, default=29527)
    args = ap.parse_args()
    if args.quick:
        args.max = min(args.max, 4 << 20)
    rounds = 3 if args.quick else 5

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)

    sizes, s = [], args.min
    while s <= args.max:
        sizes.append(s)
        s *= 2
    rows = []
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32)
        iters = max(3, min(200, (64 << 20) // size))
        timed(buf, 2)
        rows.append((size, statistics.median(timed(buf, iters) for _ in range(rounds))))
        # The sum of small integers is exact in any order: a wrong result is a broken run, not noise.
        buf.copy_(torch.arange(size // 4, dtype=torch.float32) % 13 + rank + 1)
        dist.all_reduce(buf)
        want = world * (world + 1) / 2 + world * (torch.arange(size // 4, dtype=torch.float32) % 13)
        if not torch.equal(buf, want):
            raise SystemExit(f"gloo allreduce of {size} bytes gave a wrong sum")

    if rank == 0:
        bus = 2.0 * (world - 1) / world if world > 1 else 1.0
        print(f"# PyTorch {torch.__version__} gloo all_reduce, float32 sum, in place, {world} rank(s)")
        print("#\n# series: gloo-allreduce")
        print(f"# {'size(B)':>10} {'count':>12} {'type':>6} | {'time(us)':>10} {'algbw':>10} {'busbw':>10}")
        print(f"# {'':>10} {'(elems)':>12} {'':>6} | {'':>10} {'(GB/s)':>10} {'(GB/s)':>10}")
        for size, sec in rows:
            algbw = size / sec / 1e9
            print(f"  {size:10d} {size // 4:12d} {'float':>6} | {sec * 1e6:10.1f} {algbw:10.3f} {algbw * bus:10.3f}")
    dist.barrier()  # rank 0 hosts the store: tearing it down while a peer is still in a call hangs that peer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
