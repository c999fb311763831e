"""PyTorch reference for hpctrain's Llama models (tests/e2e/llama_vs_torch.sh).

    llama_reference.py DIR        every case directory LlamaExport wrote under DIR

Each case holds hpctrain's weights, parameter table and spec, one batch,
and hpctrain's logits, loss and gradients in float32 and float64. This
script renames the parameters to Hugging Face's LlamaForCausalLM names and
computes the same model from the standard Llama equations, written out here
so every convention is visible: RMSNorm with the weight multiplying and eps
inside the root; rotary embeddings in the rotate-half form (dimension i
pairs with i + d/2) with Hugging Face's inverse frequencies, including the
llama3 and linear rope scalings; grouped-query attention (query head h reads
key/value head h // (heads / kv_heads), repeat_kv); the causal mask; the
SwiGLU MLP down(silu(gate(x)) * up(x)); bias-free projections; a tied or
untied lm_head; the loss as the mean over all tokens.

Tolerances (max |ours - ref| / max |ref| per tensor, the reference in float64):
  float64: 1e-10. The same function in double; only summation orders differ.
  float32: 1e-5 for logits, loss and gradients. float32 rounds at 6e-8 per
    operation; sums of a few hundred terms and the softmax make 1e-7 to
    1e-6 typical. A wrong convention (the interleaved rotary pairing, kv head
    h % kv instead of h // group, 1 + w in the norm) is off by 1e-2 or more.
"""
import math
import re
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


def parse_spec(text):
    """[(name, [positional], {named})] of an hpctrain spec."""
    layers = []
    for m in re.finditer(r"([a-z_]+)(?:\(([^)]*)\))?", text):
        pos, named = [], {}
        for arg in filter(None, (m.group(2) or "").split(",")):
            if "=" in arg:
                k, v = arg.split("=")
                named[k] = float(v)
            else:
                pos.append(float(arg))
        layers.append((m.group(1), pos, named))
    return layers


def config_of(spec, table):
    """The model's hyperparameters from its canonical spec (the MLP width from its weights: the
    spec omits the default)."""
    layers = parse_spec(spec)
    blocks = [l for l in layers if l[0] == "llama_block"]
    vocab, width, _ = (int(v) for v in layers[0][1][:3])
    b = blocks[0][2]
    heads = int(blocks[0][1][0])
    cfg = dict(vocab=vocab, width=width, layers=len(blocks), heads=heads, kv_heads=int(b.get("kv_heads", heads)),
               ffn=next(d[0] for n, _, d in table if n.endswith("mlp.gate.weight")),
               theta=b.get("theta", 10000.0), eps=b.get("eps", 1e-5))
    cfg["rope_scaling"] = None
    if "llama3" in b:
        cfg["rope_scaling"] = dict(rope_type="llama3", factor=b["llama3"], low_freq_factor=b.get("low", 1.0),
                                   high_freq_factor=b.get("high", 4.0),
                                   original_max_position_embeddings=b.get("orig", 8192.0))
    elif "linear" in b:
        cfg["rope_scaling"] = dict(rope_type="linear", factor=b["linear"])
    final = layers[-2]
    cfg["final_eps"] = final[2].get("eps", 1e-5)
    cfg["tied"] = layers[-1][2].get("tied", 1.0) == 1.0
    return cfg


def hf_name(name):
    """hpctrain's parameter name → LlamaForCausalLM's."""
    if name == "0.embed.token":
        return "model.embed_tokens.weight"
    m = re.fullmatch(r"(\d+)\.llama_block\.(.+)", name)
    if m:
        part = {"ln1.weight": "input_layernorm.weight", "attn.q.weight": "self_attn.q_proj.weight",
                "attn.k.weight": "self_attn.k_proj.weight", "attn.v.weight": "self_attn.v_proj.weight",
                "attn.proj.weight": "self_attn.o_proj.weight", "ln2.weight": "post_attention_layernorm.weight",
                "mlp.gate.weight": "mlp.gate_proj.weight", "mlp.up.weight": "mlp.up_proj.weight",
                "mlp.down.weight": "mlp.down_proj.weight"}[m.group(2)]
        return f"model.layers.{int(m.group(1)) - 1}.{part}"
    if re.fullmatch(r"\d+\.rmsnorm\.weight", name):
        return "model.norm.weight"
    if re.fullmatch(r"\d+\.lm_head\.weight", name):
        return "lm_head.weight"
    raise ValueError(name)


def inv_freq(cfg, d):
    """Hugging Face's rope init functions (default, linear, llama3), in float64."""
    f = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = cfg["rope_scaling"]
    if s is None:
        return f
    if s["rope_type"] == "linear":
        return f / s["factor"]
    factor, low, high, old = (s["factor"], s["low_freq_factor"], s["high_freq_factor"],
                              s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / f
    scaled = torch.where(wavelen > low_wavelen, f / factor, f)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def forward(cfg, p, ids):
    b, t = ids.shape
    h, kv, c = cfg["heads"], cfg["kv_heads"], cfg["width"]
    d = c // h
    dtype = p["model.embed_tokens.weight"].dtype
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq(cfg, d)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    x = p["model.embed_tokens.weight"][ids]
    for i in range(cfg["layers"]):
        w = lambda n: p[f"model.layers.{i}.{n}"]
        a = rms_norm(x, w("input_layernorm.weight"), cfg["eps"])
        q = F.linear(a, w("self_attn.q_proj.weight")).view(b, t, h, d).transpose(1, 2)
        k = F.linear(a, w("self_attn.k_proj.weight")).view(b, t, kv, d).transpose(1, 2)
        v = F.linear(a, w("self_attn.v_proj.weight")).view(b, t, kv, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(h // kv, dim=1) for z in (k, v))  # repeat_kv: head j uses kv head j // group
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + F.linear(y, w("self_attn.o_proj.weight"))
        m = rms_norm(x, w("post_attention_layernorm.weight"), cfg["eps"])
        x = x + F.linear(F.silu(F.linear(m, w("mlp.gate_proj.weight"))) * F.linear(m, w("mlp.up_proj.weight")),
                         w("mlp.down_proj.weight"))
    x = rms_norm(x, p["model.norm.weight"], cfg["final_eps"])
    head = p["model.embed_tokens.weight"] if cfg["tied"] else p["lm_head.weight"]
    return x @ head.t()


def reference(case, cfg, table, data, dtype):
    flat = torch.tensor(data["weights"], dtype=dtype)
    p = {hf_name(name): flat[off:off + int(np.prod(dims))].view(*dims).clone().requires_grad_()
         for name, off, dims in table}
    ids = torch.tensor(data["ids"], dtype=torch.long)
    targets = torch.tensor(data["targets"], dtype=torch.long)
    logits = forward(cfg, p, ids)
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))
    loss.backward()
    grads = {name: p[hf_name(name)].grad.double().numpy() for name, _, _ in table}
    return logits.detach().double().numpy(), loss.item(), grads


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def check(case):
    spec = (case / "spec.txt").read_text().strip()
    table = []
    for line in (case / "params.txt").read_text().splitlines():
        name, offset, *dims = line.split()
        table.append((name, int(offset), [int(x) for x in dims]))
    cfg = config_of(spec, table)
    data = {k: np.load(case / f"{k}.npy") for k in
            ("weights", "ids", "targets", "logits_f32", "logits_f64", "loss_f32", "loss_f64", "grads_f32",
             "grads_f64")}
    logits64, loss64, ref = reference(case, cfg, table, data, torch.float64)
    _, loss32, ref32 = reference(case, cfg, table, data, torch.float32)
    ok = True
    for tag, tol in (("f64", 1e-10), ("f32", 1e-5)):
        ours = {n: data[f"grads_{tag}"][o:o + int(np.prod(d))].reshape(d) for n, o, d in table}
        grad_err, where = max((rel(ours[n], ref[n]), n) for n in ref)
        logit_err = rel(data[f"logits_{tag}"], logits64)
        loss_err = abs(float(data[f"loss_{tag}"][0]) - loss64) / abs(loss64)
        good = max(grad_err, logit_err, loss_err) <= tol
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: {case.name} hpctrain {tag} vs torch float64: logits {logit_err:.2e}, "
              f"loss {loss_err:.2e}, gradients {grad_err:.2e} ({where}), tolerance {tol:.0e}")
    t32 = max(rel(ref32[n], ref[n]) for n in ref)
    print(f"  for scale: torch float32 vs float64 on {case.name}: gradients {t32:.2e}; spec: {spec[:100]}…")
    return ok


if __name__ == "__main__":
    cases = sorted(p for p in Path(sys.argv[1]).iterdir() if (p / "spec.txt").exists())
    if not cases:
        sys.exit(f"no cases under {sys.argv[1]}")
    sys.exit(0 if all([check(c) for c in cases]) else 1)
