"""Hugging Face Llama directories for tests/e2e/llama_hf.sh, written and read
without the transformers or safetensors packages (their formats are small
and written out here, so the test checks hpctrain against the format, not
against a library that shares its assumptions).

    hf_llama.py write DIR DTYPE SHARDS [TIED]   a random LlamaForCausalLM: config.json + weights
                                                (F32 or BF16, 1 file or SHARDS shards + index)
    hf_llama.py same A B                        the weights of two directories: the same names,
                                                dtypes, shapes and bytes; config.json equivalent
    hf_llama.py logits DIR DATA PRED            predict's /logits of DATA's /val windows against the
                                                reference model (llama_reference.forward) in float64
    hf_llama.py eval DIR DATA EVAL_JSON         eval's val_loss against the reference's
    hf_llama.py greedy DIR PROMPT OUT           sample's greedy continuation: every drawn token is an
                                                arg max of the reference's logits (up to rounding)
"""
import json
import math
import re
import struct
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from llama_reference import forward  # noqa: E402  the standard Llama equations

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 300, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 48, "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "bos_token_id": 1,
    "eos_token_id": 2, "torch_dtype": "bfloat16",
}


def bf16_bits(a):
    """float32 → bfloat16 bits, round to nearest even (as torch and hpctrain do)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        raw = bf16_bits(a).tobytes() if dtype == "BF16" else a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), raw[8 + n + b: 8 + n + e])
    return out


def read_dir(d):
    d = Path(d)
    if (d / "model.safetensors").exists():
        return read_safetensors(d / "model.safetensors")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(d / shard))
    assert set(out) == set(index["weight_map"]), "the index and the shards name different tensors"
    return out


def weights(d):
    """The weights as float64 torch tensors by name."""
    out = {}
    for name, (dtype, shape, raw) in read_dir(d).items():
        if dtype == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, np.float32)
        out[name] = torch.tensor(a.reshape(shape), dtype=torch.float64)
    return out


def ref_config(d):
    c = json.loads((Path(d) / "config.json").read_text())
    h = c["num_attention_heads"]
    return dict(vocab=c["vocab_size"], width=c["hidden_size"], layers=c["num_hidden_layers"], heads=h,
                kv_heads=c.get("num_key_value_heads", h), ffn=c["intermediate_size"],
                theta=c.get("rope_theta", 10000.0), eps=c["rms_norm_eps"], final_eps=c["rms_norm_eps"],
                rope_scaling=c.get("rope_scaling"), tied=c.get("tie_word_embeddings", False))


def write(d, dtype, shards, tied=False):
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(CONFIG, torch_dtype="bfloat16" if dtype == "BF16" else "float32", tie_word_embeddings=tied)
    c, f, kv = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_key_value_heads"] * cfg["head_dim"]
    g = torch.Generator().manual_seed(7)
    rnd = lambda *s, scale=0.08: (torch.randn(*s, generator=g, dtype=torch.float64) * scale).numpy()
    t = [("model.embed_tokens.weight", rnd(cfg["vocab_size"], c, scale=0.5))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", 1 + rnd(c, scale=0.1)), (p + "self_attn.q_proj.weight", rnd(c, c)),
              (p + "self_attn.k_proj.weight", rnd(kv, c)), (p + "self_attn.v_proj.weight", rnd(kv, c)),
              (p + "self_attn.o_proj.weight", rnd(c, c)), (p + "post_attention_layernorm.weight", 1 + rnd(c, scale=0.1)),
              (p + "mlp.gate_proj.weight", rnd(f, c)), (p + "mlp.up_proj.weight", rnd(f, c)),
              (p + "mlp.down_proj.weight", rnd(c, f))]
    t.append(("model.norm.weight", 1 + rnd(c, scale=0.1)))
    if not tied:
        t.append(("lm_head.weight", rnd(cfg["vocab_size"], c)))
    if shards == 1:
        write_safetensors(d / "model.safetensors", t, dtype)
    else:
        per = math.ceil(len(t) / shards)
        weight_map = {}
        for k in range(shards):
            name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(d / name, t[k * per:(k + 1) * per], dtype)
            weight_map.update({n: name for n, _ in t[k * per:(k + 1) * per]})
        total = sum(a.size * (2 if dtype == "BF16" else 4) for _, a in t)
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def same(a, b):
    wa, wb = read_dir(a), read_dir(b)
    assert set(wa) == set(wb), (sorted(set(wa) ^ set(wb)))
    for n in wa:
        assert wa[n][:2] == wb[n][:2], (n, wa[n][:2], wb[n][:2])
        assert wa[n][2] == wb[n][2], f"{n}: the bytes differ"
    ca, cb = (json.loads((Path(x) / "config.json").read_text()) for x in (a, b))
    keys = ["architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps",
            "rope_theta", "rope_scaling", "attention_bias", "mlp_bias", "tie_word_embeddings", "bos_token_id",
            "eos_token_id", "torch_dtype"]
    for k in keys:
        assert ca.get(k) == cb.get(k), f"config.json {k}: {ca.get(k)} vs {cb.get(k)}"
    print(f"{len(wa)} tensors bitwise the same ({wa[next(iter(wa))][0]}), config.json equivalent ({len(keys)} keys)")


def val_windows(data, t):
    import h5py
    with h5py.File(data, "r") as f:
        tok = f["val/tokens"][...].astype(np.int64)
    n = (len(tok) - 1) // t
    return torch.tensor(tok[: n * t].reshape(n, t)), torch.tensor(tok[1: n * t + 1].reshape(n, t))


def logits(d, data, pred):
    import h5py
    cfg = ref_config(d)
    ours = h5py.File(pred, "r")["logits"][...]
    ids, _ = val_windows(data, ours.shape[1])
    with torch.no_grad():
        ref = forward(cfg, weights(d), ids).numpy()
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    print(f"predict vs the reference from {d}: {err:.2e} (max relative to the largest logit)")
    assert ours.shape == ref.shape and err < 1e-5, (ours.shape, ref.shape, err)


def evaluate(d, data, eval_json):
    theirs = json.loads(Path(eval_json).read_text())["val_loss"]
    cfg = ref_config(d)
    t = json.loads((Path(d) / "config.json").read_text())["max_position_embeddings"]
    ids, targets = val_windows(data, t)
    with torch.no_grad():
        z = forward(cfg, weights(d), ids)
        ref = torch.nn.functional.cross_entropy(z.reshape(-1, cfg["vocab"]), targets.reshape(-1)).item()
    rel = abs(theirs - ref) / ref
    print(f"eval val_loss {theirs:.10f} vs the reference {ref:.10f} (rel {rel:.2e})")
    assert rel < 1e-5, rel


def greedy(d, prompt, out):
    cfg = ref_config(d)
    bos = json.loads((Path(d) / "config.json").read_text())["bos_token_id"]
    raw = Path(out).read_bytes()
    assert raw.endswith(b"\n"), raw
    # sample writes control bytes other than newline and tab as \xNN: back to bytes
    text = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), raw[:-1])
    assert text.startswith(prompt.encode()), (text, prompt)
    seq = [bos] + list(text)
    start = 1 + len(prompt.encode())
    assert len(seq) - start >= 8, f"sample drew {len(seq) - start} tokens"
    with torch.no_grad():
        z = forward(cfg, weights(d), torch.tensor([seq]))[0]
    for i in range(start, len(seq)):
        row = z[i - 1, :256]  # byte ids only: no tokenizer beside the weights
        gap = float(row.max() - row[seq[i]])
        assert gap <= 1e-4 * float(row.abs().max()), f"token {i}: drew {seq[i]}, the reference's arg max is {int(row.argmax())}"
    print(f"sample's {len(seq) - start} greedy tokens are the reference's arg max at every step")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "write":
        write(args[0], args[1], int(args[2]), len(args) > 3 and args[3] == "tied")
    elif cmd == "same":
        same(*args)
    elif cmd == "logits":
        logits(*args)
    elif cmd == "eval":
        evaluate(*args)
    elif cmd == "greedy":
        greedy(*args)
    else:
        sys.exit(f"unknown command {cmd}")
