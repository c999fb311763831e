"""PyTorch model of an hpctrain checkpoint, written by `hpctrain export --format torch`.

    import torch, model
    net = model.build_model()
    net.load_state_dict(model.load_safetensors("model.safetensors"))   # or safetensors.torch.load_file
    net.eval()
    logits = net(x)   # x: float32 [N, *INPUT_SHAPE], normalised as hpctrain's loader does

SPEC is the model's canonical hpctrain spec; build_model() turns every layer
into plain torch.nn modules whose state_dict names are hpctrain's own
("3.conv.weight", "1.bn.running_mean", "1.block.attn.qkv.weight"), so the
file's tensors load as they are. Conventions (hpctrain's): BatchNorm eps from
the spec (1e-5 by default), inference form; dropout is the identity in eval();
GELU is the tanh form; the GPT block is pre-LN with heads side by side in the
packed qkv projection; the Llama block has RMSNorm (weight · x / rms, eps
inside the root), rotary positions in the rotate-half form (with the llama3
and linear scalings), grouped kv heads (query head h reads kv head
h // (heads / kv_heads)) and the SwiGLU MLP; lm_head is tied to the
embedding's token matrix unless the spec says tied=0.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# `hpctrain export` writes these two lines' values (the model's canonical spec, and one
# sample's shape without the batch dimension); in hpctrain's source they are None.
SPEC = None
INPUT_SHAPE = None


def load_safetensors(path):
    """The file's tensors by name (a reader of the safetensors format, so no extra package is needed)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":  # numpy has no bfloat16: the top half of a float32's bits
            a = (np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(data[b:e], dtype=kinds[t["dtype"]])
        out[name] = torch.from_numpy(a.reshape(t["shape"]).astype(np.float32))
    return out


# ---- the spec text ------------------------------------------------------------

def parse(text):
    """[(name, positional, named, children)] of a canonical spec."""
    pos = 0

    def skip():
        nonlocal pos
        while pos < len(text) and text[pos] in " \t\n,":
            pos += 1

    def ident():
        nonlocal pos
        start = pos
        while pos < len(text) and (text[pos].isalnum() or text[pos] in "_"):
            pos += 1
        return text[start:pos]

    def number():
        nonlocal pos
        start = pos
        while pos < len(text) and text[pos] not in ",) ":
            pos += 1
        return float(text[start:pos])

    def layers(until):
        nonlocal pos
        out = []
        skip()
        while pos < len(text) and text[pos] != until:
            name = ident()
            positional, named, children = [], {}, []
            if pos < len(text) and text[pos] == "(":
                pos += 1
                if name == "res":
                    children = layers(")")
                else:
                    skip()
                    while text[pos] != ")":
                        save = pos
                        key = ident()
                        if key and text[pos] == "=":
                            pos += 1
                            named[key] = number()
                        else:
                            pos = save
                            positional.append(number())
                        skip()
                pos += 1  # ')'
            out.append((name, positional, named, children))
            skip()
        return out

    return layers("\0")


# ---- layers -------------------------------------------------------------------

class Affine(nn.Module):
    """weight [out, in] (+ bias [out]): y = x·Wᵀ + b, as hpctrain's linear and the GPT projections."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_out, n_in))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Conv(nn.Module):
    def __init__(self, c_in, c_out, k, stride, pad, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c_out, c_in, k, k))
        self.bias = nn.Parameter(torch.zeros(c_out)) if bias else None
        self.stride, self.pad = stride, pad

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.pad)


class BatchNorm(nn.Module):
    """hpctrain's bn in inference form: running statistics, gamma/beta."""

    def __init__(self, channels, eps):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.eps = eps

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.gamma, self.beta, False, 0.0, self.eps)


class LayerNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(width))
        self.beta = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.gamma, self.beta, self.eps)


class Activation(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "relu":
            return F.relu(x)
        if self.kind == "tanh":
            return torch.tanh(x)
        return F.gelu(x, approximate="tanh")


class Pool(nn.Module):
    def __init__(self, kind, k, stride, pad=0):
        super().__init__()
        self.kind, self.k, self.stride, self.pad = kind, k, stride, pad

    def forward(self, x):
        if self.kind == "maxpool":
            return F.max_pool2d(x, self.k, self.stride, self.pad)
        return F.avg_pool2d(x, self.k, self.stride)


class GlobalAvgPool(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


class Flatten(nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1)


class Dropout(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class Residual(nn.Module):
    """body(x) + shortcut(x): the identity, or a 1x1 strided conv / linear without bias, then bn."""

    def __init__(self, body, shortcut):
        super().__init__()
        self.body = nn.ModuleDict({str(i): m for i, m in enumerate(body)})
        self.shortcut = nn.ModuleDict({str(i): m for i, m in enumerate(shortcut)})

    def forward(self, x):
        y = x
        for m in self.body.values():
            y = m(y)
        s = x
        for m in self.shortcut.values():
            s = m(s)
        return y + s


class Embedding(nn.Module):
    def __init__(self, vocab, width, positions):
        super().__init__()
        self.token = nn.Parameter(torch.zeros(vocab, width))
        self.position = nn.Parameter(torch.zeros(positions, width)) if positions else None

    def forward(self, ids):
        ids = ids.long()
        x = self.token[ids]
        return x if self.position is None else x + self.position[: ids.shape[1]]


class RmsNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def inv_freq(d, theta, n):
    """Rotary frequencies θ^(−2i/d), with Hugging Face's llama3 or linear rope scaling."""
    f = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if "linear" in n:
        return f / n["linear"]
    if "llama3" in n:
        factor, low, high, old = n["llama3"], n.get("low", 1.0), n.get("high", 4.0), n.get("orig", 8192.0)
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > old / low, f / factor, f)
        smooth = (old / wavelen - low) / (high - low)
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return f


class Attention(nn.Module):
    """Causal attention; bias: GPT-2's packed qkv with biases, else Llama's q, k, v without; rotary when theta."""

    def __init__(self, width, heads, kv_heads=None, bias=True, theta=0.0, scaling=None):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        d = width // heads
        qkv = (heads + 2 * self.kv_heads) * d
        if bias:
            self.qkv = Affine(width, qkv)
        else:
            self.q = Affine(width, heads * d, False)
            self.k = Affine(width, self.kv_heads * d, False)
            self.v = Affine(width, self.kv_heads * d, False)
        self.proj = Affine(heads * d, width, bias)
        self.freq = inv_freq(d, theta, scaling or {}) if theta else None
        self.bias = bias

    def forward(self, x):
        b, t, c = x.shape
        h, kv = self.heads, self.kv_heads
        d = c // h
        if self.bias:
            q, k, v = self.qkv(x).split([h * d, kv * d, kv * d], dim=2)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(b, t, h, d).transpose(1, 2)
        k, v = (z.view(b, t, kv, d).transpose(1, 2) for z in (k, v))
        if self.freq is not None:  # rotate-half: dimension i pairs with i + d/2
            angles = torch.arange(t, dtype=torch.float64)[:, None] * self.freq[None, :]
            cos, sin = (torch.cat((a, a), dim=-1).to(x.dtype) for a in (angles.cos(), angles.sin()))
            half = lambda z: torch.cat((-z[..., d // 2:], z[..., : d // 2]), dim=-1)
            q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
        k, v = (z.repeat_interleave(h // kv, dim=1) for z in (k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, h * d))


class Mlp(nn.Module):
    def __init__(self, width, ffn):
        super().__init__()
        self.fc = Affine(width, ffn)
        self.proj = Affine(ffn, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class SwiGlu(nn.Module):
    def __init__(self, width, ffn):
        super().__init__()
        self.gate = Affine(width, ffn, False)
        self.up = Affine(width, ffn, False)
        self.down = Affine(ffn, width, False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def llama_ffn(width):
    multiple = 256 if width >= 1024 else 32
    f = (8 * width + 2) // 3
    return (f + multiple - 1) // multiple * multiple


class Block(nn.Module):
    """The pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)); GPT-2's or Llama's pieces."""

    def __init__(self, width, heads, n, llama):
        super().__init__()
        kv = int(n.get("kv_heads", heads))
        ffn = int(n.get("ffn", llama_ffn(width) if llama else 4 * width))
        if llama:
            eps = n.get("eps", 1e-5)
            self.ln1, self.ln2 = RmsNorm(width, eps), RmsNorm(width, eps)
            self.attn = Attention(width, heads, kv, False, n.get("theta", 10000.0), n)
            self.mlp = SwiGlu(width, ffn)
        else:
            self.ln1, self.ln2 = LayerNorm(width, 1e-5), LayerNorm(width, 1e-5)
            self.attn = Attention(width, heads, kv)
            self.mlp = Mlp(width, ffn)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TiedHead(nn.Module):
    """Logits = x · tokenᵀ with the embedding's token matrix (no parameter of its own)."""

    def __init__(self, embedding):
        super().__init__()
        self._embedding = [embedding]  # a plain list: not a submodule, so the matrix is stored once

    def forward(self, x):
        return x @ self._embedding[0].token.t()


def make(layer, shape, embedding):
    """(module, output shape) of one layer for input `shape` (no batch dimension)."""
    name, p, n, children = layer
    if name == "conv":
        out, k = int(p[0]), int(p[1])
        stride, pad = int(n.get("stride", 1)), int(n.get("pad", 0))
        h, w = (shape[1] + 2 * pad - k) // stride + 1, (shape[2] + 2 * pad - k) // stride + 1
        return Conv(shape[0], out, k, stride, pad, n.get("bias", 1) != 0), (out, h, w)
    if name == "linear":
        return Affine(shape[-1], int(p[0]), n.get("bias", 1) != 0), shape[:-1] + (int(p[0]),)
    if name == "bn":
        return BatchNorm(shape[0], n.get("eps", 1e-5)), shape
    if name == "ln":
        return LayerNorm(shape[-1], n.get("eps", 1e-5)), shape
    if name == "rmsnorm":
        return RmsNorm(shape[-1], n.get("eps", 1e-5)), shape
    if name in ("relu", "tanh", "gelu"):
        return Activation(name), shape
    if name in ("maxpool", "avgpool"):
        k = int(p[0])
        s, pad = int(n.get("stride", k)), int(n.get("pad", 0))
        h, w = (shape[1] + 2 * pad - k) // s + 1, (shape[2] + 2 * pad - k) // s + 1
        return Pool(name, k, s, pad), (shape[0], h, w)
    if name == "gap":
        return GlobalAvgPool(), (shape[0],)
    if name == "flatten":
        return Flatten(), (int(np.prod(shape)),)
    if name == "dropout":
        return Dropout(p[0] if p else n.get("p", 0.5)), shape
    if name == "res":
        body, s = [], shape
        for child in children:
            m, s = make(child, s, embedding)
            body.append(m)
        shortcut = []
        if s != shape:
            if len(shape) == 3:
                stride = next(k for k in range(1, max(shape[1:]) + 1)
                              if (shape[1] - 1) // k + 1 == s[1] and (shape[2] - 1) // k + 1 == s[2])
                shortcut = [Conv(shape[0], s[0], 1, stride, 0, False), BatchNorm(s[0], 1e-5)]
            else:
                shortcut = [Affine(shape[0], s[0], False), BatchNorm(s[0], 1e-5)]
        return Residual(body, shortcut), s
    if name == "embed":
        vocab, width = int(p[0]), int(p[1])
        context = int(p[2]) if len(p) > 2 else int(n.get("context", shape[0]))
        m = Embedding(vocab, width, int(n.get("positions", context)))
        embedding.append(m)
        return m, (shape[0], width)
    if name in ("block", "llama_block"):
        return Block(shape[-1], int(p[0]), n, name == "llama_block"), shape
    if name == "attn":
        return Attention(shape[-1], int(p[0]), int(n.get("kv_heads", p[0])), n.get("bias", 1) != 0,
                         n.get("theta", 0.0), n), shape
    if name == "mlp":
        return Mlp(shape[-1], int(p[0])), shape
    if name == "swiglu":
        return SwiGlu(shape[-1], int(p[0])), shape
    if name == "lm_head":
        if n.get("tied", 1) == 0:
            return Affine(shape[-1], int(p[0]), False), (shape[0], int(p[0]))
        return TiedHead(embedding[-1]), (shape[0], int(p[0]))
    raise ValueError(f"model.py: unknown layer '{name}' in the spec")


class Holder(nn.Module):
    """Layer i of the spec, under its kind's name: state_dict keys 'i.kind.param' as in hpctrain."""

    def __init__(self, kind, module):
        super().__init__()
        self.kind = kind
        setattr(self, kind, module)

    def forward(self, x):
        return getattr(self, self.kind)(x)


class Net(nn.Module):
    def __init__(self, spec, input_shape):
        super().__init__()
        shape, embedding = tuple(input_shape), []
        for i, layer in enumerate(parse(spec)):
            m, shape = make(layer, shape, embedding)
            self.add_module(str(i), Holder(layer[0], m))
        self.output_shape = shape

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


def build_model():
    """A plain nn.Module for SPEC; load the exported tensors with load_state_dict."""
    if SPEC is None:
        raise RuntimeError("model.py: SPEC is not set: this is hpctrain's template (src/train/model.py); "
                           "`hpctrain export --format torch` writes a copy for a checkpoint")
    return Net(SPEC, INPUT_SHAPE)
