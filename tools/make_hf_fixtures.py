#!/usr/bin/env python3
"""Builds the transformers reference fixtures under tests/data/hf/.

Small random Llama/Mistral checkpoints saved by transformers itself
(save_pretrained, safetensors), the logits transformers computes for a few
prompts, and RoPE inverse frequencies from transformers' ROPE_INIT_FUNCTIONS.
The C++ loader and forward pass are tested against these. Deterministic: the
same transformers/torch versions give the same bytes.

Needs torch and a transformers that can use it (transformers 4.x works with
torch 2.5; transformers 5 needs torch >= 2.6).

    python3 tools/make_hf_fixtures.py [--out tests/data/hf]

The format is documented in tests/data/hf/README.md.
"""
import argparse
import json
import math
import os
import shutil

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

PROMPT_LENGTHS = (1, 7, 23)


def fixture_configs():
    """name -> (model class, config, save_pretrained kwargs)."""
    llama3 = LlamaConfig(
        vocab_size=384, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500000.0,
        # original_max_position_embeddings=64 puts the band edges (wavelengths
        # 16 and 64) inside this head_dim's range, so all three regimes occur.
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 3],
        attention_bias=False, mlp_bias=False, hidden_act="silu")
    mistral = MistralConfig(
        vocab_size=384, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16,  # not 48 / 4
        max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=1e6,
        sliding_window=None, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        hidden_act="silu")
    llama2 = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, hidden_act="silu")
    return {
        "llama3": (LlamaForCausalLM, llama3, {}),
        "mistral": (MistralForCausalLM, mistral, {}),
        # ~460 KB of f32 weights in shards of at most 150 KB.
        "llama2_sharded": (LlamaForCausalLM, llama2, {"max_shard_size": "150KB"}),
    }


def init_weights(model, seed):
    """Larger than the default init so logits are far from flat: projections
    N(0, 0.1), embeddings N(0, 0.5), norm gains 1 + N(0, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def round7(x):
    return float(f"{x:.7g}")


def make_checkpoint(out_dir, name, cls, config, save_kwargs, seed):
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    init_weights(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    target = os.path.join(out_dir, name)
    shutil.rmtree(target, ignore_errors=True)
    model.save_pretrained(target, safe_serialization=True, **save_kwargs)

    gen = torch.Generator().manual_seed(seed + 1000)
    prompts = [torch.randint(0, config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    logits = []
    with torch.no_grad():
        for ids in prompts:
            out = model(torch.tensor([ids]), use_cache=False).logits[0]
            logits.append([[round7(v) for v in row] for row in out.tolist()])
    # The saved files must reproduce the logits: reload them as a user would.
    reloaded = cls.from_pretrained(target, attn_implementation="eager", torch_dtype=torch.float32).eval()
    with torch.no_grad():
        for ids, want in zip(prompts, logits):
            got = reloaded(torch.tensor([ids]), use_cache=False).logits[0]
            assert torch.allclose(got, torch.tensor(want), rtol=1e-6, atol=1e-5), name
    doc = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
           "prompts": prompts, "logits": logits}
    with open(os.path.join(target, "logits.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


def rope_cases():
    """(name, config.json fields) pairs; each is also a valid llama config."""
    base = {"model_type": "llama", "vocab_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    return [
        ("default-llama2-7b", {**base, "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 10000.0,
                               "max_position_embeddings": 4096}),
        ("default-llama3-8b", {**base, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "rope_theta": 500000.0, "max_position_embeddings": 8192}),
        ("linear-factor4", {**base, "hidden_size": 512, "num_attention_heads": 8, "rope_theta": 10000.0,
                            "max_position_embeddings": 8192,
                            "rope_scaling": {"type": "linear", "factor": 4.0}}),
        ("llama3-llama3.1-8b", {**base, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                                "rope_theta": 500000.0, "max_position_embeddings": 131072,
                                "rope_scaling": llama31}),
        ("llama3-fixture", {**base, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "head_dim": 16, "rope_theta": 500000.0, "max_position_embeddings": 256,
                            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
        ("default-mistral-head-dim", {**base, "model_type": "mistral", "hidden_size": 48,
                                      "num_attention_heads": 4, "head_dim": 16, "rope_theta": 1e6,
                                      "max_position_embeddings": 512}),
    ]


def make_rope(out_dir):
    cases = []
    for name, fields in rope_cases():
        cls = MistralConfig if fields["model_type"] == "mistral" else LlamaConfig
        kwargs = {k: v for k, v in fields.items() if k != "model_type"}
        config = cls(**kwargs)
        scaling = getattr(config, "rope_scaling", None) or {}
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        assert inv_freq.dtype == torch.float32 and attention_factor == 1.0
        # %.9g round-trips every f32 exactly.
        values = [float(f"{v:.9g}") for v in inv_freq.tolist()]
        cases.append({"name": name, "config": fields, "inv_freq": values})
        if rope_type == "llama3" and name.startswith("llama3-llama3.1"):
            # The same model written in transformers 5's rope_parameters form.
            alt = {k: v for k, v in fields.items() if k not in ("rope_theta", "rope_scaling")}
            alt["rope_parameters"] = {"rope_theta": fields["rope_theta"], **fields["rope_scaling"]}
            cases.append({"name": name + "-rope_parameters", "config": alt, "inv_freq": values})
    doc = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "cases": cases}
    with open(os.path.join(out_dir, "rope_inv_freq.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "hf"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for seed, (name, (cls, config, save_kwargs)) in enumerate(sorted(fixture_configs().items()), start=1):
        make_checkpoint(args.out, name, cls, config, save_kwargs, seed)
        print(f"{name}: written", flush=True)
    make_rope(args.out)
    print("rope_inv_freq.json: written")


if __name__ == "__main__":
    main()
