#!/usr/bin/python3
"""PyTorch peer of bench/bench_gpt: the same GPT (hpctrain's gpt presets,
layer for layer: pre-LN blocks, tanh GELU, tied output projection) or Llama
(llama-small: RMSNorm, rotary positions, grouped kv heads, SwiGLU, untied
head, no biases; Hugging Face LlamaForCausalLM's equations), batch,
random tokens and AdamW (weight decay 0.1 on the matrices only), one thread
per rank, DistributedDataParallel over gloo when mpirun starts several
ranks. Prints one JSON line (rank 0) with tokens/s and MFU against the
one-thread sgemm peak (torch.mm, 1024²), both medians of rounds that
alternate steps and the peak measurement, as bench_gpt does.

    mpirun -np 2 bench/torch_gpt.py --preset gpt-small --batch 8 --steps 20

With --device cuda (one GPU, one process; bench/gpu_bench.py calls
cuda_tokens_per_s directly): the same model on the GPU, fp32 without TF32
or bf16 autocast (fp32 master weights), timed between synchronisations.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from torch_exit import leave_without_teardown

PRESETS = {"gpt-tiny": (2, 2, 64, 64, 256), "gpt-small": (4, 4, 256, 128, 256),
           "gpt2-124m": (12, 12, 768, 1024, 50257)}
# Llama presets: (layers, heads, kv_heads, width, ffn, context, vocab), as hpctrain's spec.cpp.
LLAMA = {"llama-tiny": (2, 4, 2, 64, 192, 64, 256), "llama-small": (4, 4, 2, 256, 768, 128, 256)}


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


class RmsNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LlamaBlock(nn.Module):
    def __init__(self, heads, kv_heads, width, ffn):
        super().__init__()
        self.heads, self.kv_heads, d = heads, kv_heads, width // heads
        self.ln1, self.ln2 = RmsNorm(width), RmsNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.k, self.v = (nn.Linear(width, kv_heads * d, bias=False) for _ in range(2))
        self.o = nn.Linear(width, width, bias=False)
        self.gate, self.up = (nn.Linear(width, ffn, bias=False) for _ in range(2))
        self.down = nn.Linear(ffn, width, bias=False)

    def forward(self, x, mask, cos, sin):
        b, t, c = x.shape
        h, kv, d = self.heads, self.kv_heads, c // self.heads
        a = self.ln1(x)
        q = self.q(a).view(b, t, h, d).transpose(1, 2)
        k, v = (z(a).view(b, t, kv, d).transpose(1, 2) for z in (self.k, self.v))
        half = lambda z: torch.cat((-z[..., d // 2:], z[..., : d // 2]), dim=-1)
        q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
        k, v = (z.repeat_interleave(h // kv, dim=1) for z in (k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(d)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, t, c))
        m = self.ln2(x)
        return x + self.down(F.silu(self.gate(m)) * self.up(m))


class Llama(nn.Module):
    def __init__(self, layers, heads, kv_heads, width, ffn, context, vocab, theta=10000.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(LlamaBlock(heads, kv_heads, width, ffn) for _ in range(layers))
        self.lnf = RmsNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)  # untied
        d = width // heads
        f = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = torch.arange(context, dtype=torch.float64)[:, None] * f[None, :]
        self.cos, self.sin = (torch.cat((a, a), dim=-1).float() for a in (angles.cos(), angles.sin()))
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, ids):
        x = self.wte(ids)
        for blk in self.blocks:
            x = blk(x, self.mask, self.cos, self.sin)
        return self.head(self.lnf(x))


def shape_of(preset):
    """(context, vocab) of a preset."""
    if preset in LLAMA:
        return LLAMA[preset][5], LLAMA[preset][6]
    return PRESETS[preset][3], PRESETS[preset][4]


def make_model(preset):
    return Llama(*LLAMA[preset]) if preset in LLAMA else Gpt(*PRESETS[preset])


def flops_per_token(preset):
    if preset in LLAMA:  # hpctrain's count: q, k, v, o, scores and P·V over T×T, three MLP GEMMs; the head
        layers, heads, kv, width, ffn, context, vocab = LLAMA[preset]
        d = width // heads
        return layers * (2 * width * (width + 2 * kv * d) + 4 * context * width + 2 * width * width +
                         6 * width * ffn) + 2 * width * vocab
    return gpt_flops_per_token(preset)


def gpt_flops_per_token(preset):
    """Forward FLOPs per token as hpctrain counts them (Model::forward_flops / context):
    per layer qkv 6C², attention scores and P·V over the full T×T 4TC, proj 2C², MLP 16C²;
    the tied head 2CV."""
    layers, _, width, context, vocab = PRESETS[preset]
    return layers * (24 * width * width + 4 * context * width) + 2 * width * vocab


def cuda_tokens_per_s(preset, batch, warmup, steps, precision="fp32"):
    """Training tokens/s of the preset on cuda:0 (AdamW, random tokens below 256)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    layers, heads, width, context, vocab = PRESETS[preset]
    dev = torch.device("cuda")
    model = Gpt(layers, heads, width, context, vocab).to(dev)
    model.mask = model.mask.to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4)
    x = torch.randint(0, 256, (batch, context), device=dev)
    y = torch.randint(0, 256, (batch, context), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1))
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return batch * context * steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt-small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29519)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="cuda only")
    args = ap.parse_args()
    if args.device == "cuda":
        tps = cuda_tokens_per_s(args.preset, args.batch, args.warmup, args.steps, args.precision)
        print(json.dumps({"impl": "pytorch", "device": "cuda", "preset": args.preset, "batch": args.batch,
                          "precision": args.precision, "tokens_per_s": tps, "version": torch.__version__}),
              flush=True)
        return
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    context, vocab = shape_of(args.preset)
    model = make_model(args.preset)
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

    # As bench_gpt does: steps and the one-thread sgemm peak (torch.mm on 1024² matrices, the same BLAS)
    # in alternating rounds, medians over the rounds, MFU taken per round.
    a, b = torch.full((1024, 1024), 0.01), torch.full((1024, 1024), 0.02)
    torch.mm(a, b.t())
    for _ in range(args.warmup):
        step()
    rounds = min(args.steps, 5)
    per_round = max(1, args.steps // rounds)
    step_s, peak_s, mfu_s = [], [], []
    for _ in range(rounds):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for _ in range(per_round):
            step()
        if world > 1:
            dist.barrier()
        dt = (time.perf_counter() - t0) / per_round
        t0 = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b.t())
        peak = 3 * 2 * 1024.0 ** 3 / (time.perf_counter() - t0) / 1e9
        if world > 1:
            peak_t = torch.tensor([peak], dtype=torch.float64)
            dist.all_reduce(peak_t, op=dist.ReduceOp.MIN)
            peak = float(peak_t[0])
        step_s.append(dt)
        peak_s.append(peak)
        mfu_s.append(args.batch * context / dt * 3 * flops_per_token(args.preset) / 1e9 / peak)
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "preset": args.preset, "ranks": world, "batch": args.batch,
                          "tokens_per_s": args.batch * context * world / statistics.median(step_s),
                          "mfu": statistics.median(mfu_s), "sgemm_gflops": statistics.median(peak_s),
                          "version": torch.__version__}), flush=True)
    if world > 1:
        dist.barrier()  # rank 0 hosts the store: tearing it down while a peer is still in a call hangs that peer
        dist.destroy_process_group()
        leave_without_teardown()


if __name__ == "__main__":
    main()
