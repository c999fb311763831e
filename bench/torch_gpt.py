#!/usr/bin/python3
"""PyTorch peer of bench/bench_gpt: the same GPT (hpctrain's gpt presets,
layer for layer: pre-LN blocks, tanh GELU, tied output projection), batch,
random tokens and AdamW (weight decay 0.1 on the matrices only), one thread
per rank, DistributedDataParallel over gloo when mpirun starts several
ranks. Prints one JSON line (rank 0) with tokens/s over the timed steps.

    mpirun -np 2 bench/torch_gpt.py --preset gpt-small --batch 8 --steps 20
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt-tiny": (2, 2, 64, 64, 256), "gpt-small": (4, 4, 256, 128, 256),
           "gpt2-124m": (12, 12, 768, 1024, 50257)}


class Block(nn.Module):
    def __init__(self, heads, width):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(d)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, heads, width, context, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(heads, width) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        # A plain attribute, not a buffer: DDP would broadcast buffers, and gloo has no bool type.
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.lnf(x) @ self.wte.weight.t()  # tied output projection


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt-small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29519)
    args = ap.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers, heads, width, context, vocab = PRESETS[args.preset]
    model = Gpt(layers, heads, width, context, vocab)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, vocab, (args.batch, context), generator=g)
    y = torch.randint(0, vocab, (args.batch, context), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
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
        print(json.dumps({"impl": "pytorch", "preset": args.preset, "ranks": world, "batch": args.batch,
                          "tokens_per_s": args.batch * context * world * args.steps / dt,
                          "version": torch.__version__}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
