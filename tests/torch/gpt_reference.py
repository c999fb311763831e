"""PyTorch reference for hpctrain's GPT (tests/e2e/gpt_vs_torch.sh).

    gpt_reference.py DIR                               gradients (GptExport's dump)
    gpt_reference.py --checkpoint CKPT DATA VAL_LOSS   a trained checkpoint's val loss

Reads what test_gpt's GptExport test wrote (weights, the parameter table,
one batch, hpctrain's losses and gradients in float32 and float64), builds
the same model from plain torch.nn.functional ops in float64 and float32,
and compares. The model is written out here rather than taken from a
library so that every convention is visible: GPT-2's pre-LN block, the
tanh GELU, heads side by side in the qkv projection, the causal mask, the
output projection tied to the token embedding, and the loss as the mean
over all tokens.

Tolerances (per parameter tensor: max |ours - ref| / max |ref|):
  float64 vs torch float64: 1e-10. Both compute the same function in
    double; they differ only in summation order (~1e-16 per operation;
    seen: 1.4e-15).
  float32 vs torch float64: 2e-5. float32 rounds each operation at 6e-8;
    sums of up to 256 terms (4·width, batch·tokens) and the softmax make
    a few 1e-7 to 1e-6 typical (seen: 8.9e-7, torch's own float32: 8.3e-7,
    which the script prints for scale). A wrong term (a missing scale, a
    transposed head) is off by 1e-2 or more.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

LAYERS, HEADS, WIDTH, CONTEXT, VOCAB = 2, 2, 64, 64, 256  # the gpt-tiny preset


def load(work):
    table = []
    with open(f"{work}/params.txt") as f:
        for line in f:
            name, offset, *dims = line.split()
            table.append((name, int(offset), [int(d) for d in dims]))
    data = {k: np.load(f"{work}/{k}.npy") for k in
            ("weights", "ids", "targets", "loss_f32", "loss_f64", "grads_f32", "grads_f64")}
    return table, data


def forward(p, ids, targets):
    b, t = ids.shape
    d = WIDTH // HEADS
    x = p["0.embed.token"][ids] + p["0.embed.position"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for layer in range(1, LAYERS + 1):
        w = lambda n: p[f"{layer}.block.{n}"]
        a = F.layer_norm(x, (WIDTH,), w("ln1.gamma"), w("ln1.beta"), 1e-5)
        q, k, v = F.linear(a, w("attn.qkv.weight"), w("attn.qkv.bias")).split(WIDTH, dim=2)
        q, k, v = (z.view(b, t, HEADS, d).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, WIDTH)
        x = x + F.linear(y, w("attn.proj.weight"), w("attn.proj.bias"))
        m = F.layer_norm(x, (WIDTH,), w("ln2.gamma"), w("ln2.beta"), 1e-5)
        h = F.gelu(F.linear(m, w("mlp.fc.weight"), w("mlp.fc.bias")), approximate="tanh")
        x = x + F.linear(h, w("mlp.proj.weight"), w("mlp.proj.bias"))
    last = LAYERS + 1
    x = F.layer_norm(x, (WIDTH,), p[f"{last}.ln.gamma"], p[f"{last}.ln.beta"], 1e-5)
    logits = x @ p["0.embed.token"].t()  # tied output projection
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def reference(table, data, dtype):
    flat = torch.tensor(data["weights"], dtype=dtype)
    p = {name: flat[off:off + int(np.prod(dims))].view(*dims).clone().requires_grad_()
         for name, off, dims in table}
    ids = torch.tensor(data["ids"], dtype=torch.long)
    targets = torch.tensor(data["targets"], dtype=torch.long)
    loss = forward(p, ids, targets)
    loss.backward()
    grads = {name: p[name].grad.double().numpy() for name, _, _ in table}
    return loss.item(), grads


def split(flat, table):
    return {name: flat[off:off + int(np.prod(dims))].reshape(dims) for name, off, dims in table}


def worst(ours, ref):
    errs = {n: float(np.abs(ours[n] - ref[n]).max() / max(np.abs(ref[n]).max(), 1e-30)) for n in ref}
    name = max(errs, key=errs.get)
    return errs[name], name


def checkpoint_loss(ckpt, data):
    """Mean next-token loss over every /val window of `data` (the windows
    hpctrain evaluates: tokens [i·T, i·T + T + 1)), in float64, with the
    parameters of an hpctrain checkpoint (/params/<name>)."""
    import h5py
    with h5py.File(ckpt, "r") as f:
        p = {name: torch.tensor(np.asarray(f["params"][name]), dtype=torch.float64) for name in f["params"]}
    with h5py.File(data, "r") as f:
        tokens = torch.tensor(np.asarray(f["val/tokens"]).astype(np.int64))
    n = (len(tokens) - 1) // CONTEXT
    ids = tokens[: n * CONTEXT].view(n, CONTEXT)
    targets = tokens[1: n * CONTEXT + 1].view(n, CONTEXT)
    with torch.no_grad():
        return forward(p, ids, targets).item()


def main(work):
    table, data = load(work)
    loss64, ref = reference(table, data, torch.float64)
    loss32, ref32 = reference(table, data, torch.float32)
    ok = True
    torch32_err, _ = worst(ref32, ref)
    for tag, tol in (("f64", 1e-10), ("f32", 2e-5)):
        loss = float(data[f"loss_{tag}"][0])
        loss_err = abs(loss - loss64) / abs(loss64)
        grad_err, where = worst(split(data[f"grads_{tag}"], table), ref)
        good = loss_err <= tol and grad_err <= tol
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: hpctrain {tag} vs torch float64: loss {loss:.10f} vs {loss64:.10f} "
              f"(rel {loss_err:.2e}), gradients max rel {grad_err:.2e} ({where}), tolerance {tol:.0e}")
    print(f"for scale: torch float32 vs torch float64: loss rel {abs(loss32 - loss64) / abs(loss64):.2e}, "
          f"gradients max rel {torch32_err:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--checkpoint":
        # gpt_reference.py --checkpoint CKPT DATA VAL_LOSS: hpctrain's evaluation (float32)
        # against float64 from the checkpoint's weights; 1e-5 relative (float32 logits,
        # per-token losses summed in double: seen 7e-11).
        ckpt, data, theirs = sys.argv[2], sys.argv[3], float(sys.argv[4])
        ref = checkpoint_loss(ckpt, data)
        rel = abs(theirs - ref) / ref
        print(f"{'ok' if rel <= 1e-5 else 'FAIL'}: hpctrain val_loss {theirs:.10f} vs torch float64 from the "
              f"checkpoint {ref:.10f} (rel {rel:.2e}, tolerance 1e-05)")
        sys.exit(0 if rel <= 1e-5 else 1)
    sys.exit(main(sys.argv[1]))
