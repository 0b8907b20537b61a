"""Writes tests/data/forward_ref/: a tiny random Llama (GQA, llama3 rope scaling)
and its logits for a fixed prompt from an independent PyTorch forward pass that
follows transformers' modeling_llama line by line (eager attention, repeat_kv,
rotate_half RoPE, LlamaRMSNorm), with the inverse frequencies from transformers'
own _compute_llama3_parameters. The C++ forward pass is checked against it.

Layout of model.bin: little-endian f32 arrays, in this order: embed, then per layer
input_layernorm, q, k, v, o, post_attention_layernorm, gate, up, down, then the
final norm and lm_head (HF shapes, row-major). logits.bin: [len(prompt), vocab] f32.
meta.json: config values and the prompt.
"""
import json
import pathlib
import sys

import torch
import transformers.modeling_rope_utils as rope_utils
from transformers import LlamaConfig

# transformers >= 5 disables its torch integration for torch < 2.6, but the
# rope helpers only need the module-level `torch` name.
rope_utils.torch = torch

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/forward_ref")
out.mkdir(parents=True, exist_ok=True)
gen = torch.Generator().manual_seed(20250611)
cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                  tie_word_embeddings=False)
H, I, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
NH, NKV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim


def uniform(*shape, lo=-0.5, hi=0.5):
    return torch.rand(*shape, generator=gen) * (hi - lo) + lo


W = {"embed": uniform(V, H), "layers": [], "norm": uniform(H, lo=0.8, hi=1.2), "lm_head": uniform(V, H)}
for _ in range(L):
    W["layers"].append({
        "ln1": uniform(H, lo=0.8, hi=1.2), "q": uniform(NH * D, H), "k": uniform(NKV * D, H),
        "v": uniform(NKV * D, H), "o": uniform(H, NH * D), "ln2": uniform(H, lo=0.8, hi=1.2),
        "gate": uniform(I, H), "up": uniform(I, H), "down": uniform(H, I)})


def rms_norm(x, w, eps):  # LlamaRMSNorm.forward
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def forward(ids):
    inv_freq, scaling = rope_utils.ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    T = len(ids)
    pos = torch.arange(T)[None, :].float()
    freqs = (inv_freq[None, :, None].float() @ pos[:, None, :]).transpose(1, 2)  # LlamaRotaryEmbedding
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * scaling)[:, None], (emb.sin() * scaling)[:, None]  # [1, 1, T, D]
    h = W["embed"][torch.tensor(ids)][None]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for lw in W["layers"]:
        x = rms_norm(h, lw["ln1"], cfg.rms_norm_eps)
        q = (x @ lw["q"].T).view(1, T, NH, D).transpose(1, 2)
        k = (x @ lw["k"].T).view(1, T, NKV, D).transpose(1, 2)
        v = (x @ lw["v"].T).view(1, T, NKV, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)  # repeat_kv
        att = torch.softmax(q @ k.transpose(2, 3) * D ** -0.5 + mask, dim=-1, dtype=torch.float32)
        a = (att @ v).transpose(1, 2).reshape(1, T, NH * D)
        h = h + a @ lw["o"].T
        x = rms_norm(h, lw["ln2"], cfg.rms_norm_eps)
        h = h + (torch.nn.functional.silu(x @ lw["gate"].T) * (x @ lw["up"].T)) @ lw["down"].T
    return (rms_norm(h, W["norm"], cfg.rms_norm_eps) @ W["lm_head"].T)[0]


prompt = [1, 7, 39, 3, 22, 0, 15, 15, 8, 31, 12, 5, 19, 26, 2, 33, 11, 4, 9, 30]
logits = forward(prompt)
tensors = [W["embed"]]
for lw in W["layers"]:
    tensors += [lw[n] for n in ("ln1", "q", "k", "v", "o", "ln2", "gate", "up", "down")]
tensors += [W["norm"], W["lm_head"]]
with open(out / "model.bin", "wb") as f:
    for t in tensors:
        f.write(t.detach().numpy().astype("<f4").tobytes())
(out / "logits.bin").write_bytes(logits.numpy().astype("<f4").tobytes())
meta = {k: getattr(cfg, k) for k in ["vocab_size", "hidden_size", "intermediate_size",
                                     "num_hidden_layers", "num_attention_heads",
                                     "num_key_value_heads", "head_dim", "rms_norm_eps"]}
meta["rope_parameters"] = dict(cfg.rope_parameters)
meta["prompt"] = prompt
(out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
