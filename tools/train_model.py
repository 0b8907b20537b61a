#!/usr/bin/env python3
"""Trains the embedded default model: a small Llama on the public-domain books.

The model is a Hugging Face ``LlamaForCausalLM`` (hidden 512, 4 layers, 4 query
heads and 2 KV heads of head_dim 128, SwiGLU 1408, RMSNorm eps 1e-5, RoPE theta
500000 without scaling, 8192 positions, tied embeddings, the tokenizer's
vocabulary). It is trained within a wall-clock budget on a mix of plain book
text and passkey documents (tools/passkey.py), so that its attention learns
long-range retrieval (induction-style copying) up to 8192 tokens.

Reproduction (the packed data is made once, beside the repository):

    python3 tools/pack_corpus.py --tokenizer models/default/tokenizer.json --out .carry/corpus
    python3 tools/train_model.py --data .carry/corpus --tokenizer models/default/tokenizer.json \\
        --out OUT/model --minutes 6

and a CPU check of the whole path (tiny model, a few steps, short contexts):

    python3 tools/train_model.py --data .carry/corpus --tokenizer T --out OUT/smoke \\
        --smoke --device cpu

Training: bf16 autocast over fp32 master weights, AdamW (betas 0.9/0.95, weight
decay on matrices), linear warmup then a cosine decay over the time budget,
gradient clipping, PyTorch SDPA attention (flash kernels on the GPU). Context
grows in stages (1024, 2048, 4096, then 8192 for the last 55% of the time) at a
constant number of tokens per step. Rows are of three kinds (tools/train_batches.py):
plain text (random windows of the packed training tokens), repeated text
(``--repeat-frac``: a span that reappears verbatim later in the row, so that
induction heads form early) and passkey rows (``--passkey-frac``: one document
of the row's length, or short documents of log-uniform length packed back to
back). Passkey answer tokens get a separate mean loss added with
``--answer-weight``; the first statement of the key gets no loss, the second
("... Remember it. {key} is the pass key.") keeps the ordinary loss, being
itself a short-range copy. Every row starts with BOS.

``--minutes`` bounds the whole run: training stops ``--reserve-s`` seconds
before the end to leave time for export and evaluation. The output folder gets
config.json, model.safetensors in bf16 (sharded so that every file is at most
15 MB), tokenizer.json, tokenizer_config.json, generation_config.json (greedy)
and train_report.json. Evaluation runs on the exported checkpoint as reloaded
by ``from_pretrained``: validation perplexity at contexts 2048 and 8192 on the
same held-out tokens, the unigram perplexity of those tokens under training
counts, and passkey accuracy (greedy digits) for 1k/2k/4k/8k x 5 depths.
"""
from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import passkey as pk  # noqa: E402
from train_batches import ROLE_COPY, Batcher, check_batch  # noqa: E402

MAX_FILE_BYTES = 15_000_000


MODEL_SHAPES = {
    "default": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=128),
    # Two layers are the fewest that can hold an induction head (a previous-token
    # head in layer 0 composed with a copying head in layer 1).
    "small": dict(hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=64),
    "smoke": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32),
}


def log(msg: str) -> None:
    print(msg, flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder from tools/pack_corpus.py")
    ap.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json")
    ap.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    ap.add_argument("--minutes", type=float, default=6.0, help="wall-clock budget of the run")
    ap.add_argument("--reserve-s", type=float, default=50.0,
                    help="seconds kept for export and evaluation")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model, short contexts, few steps: checks the whole path")
    ap.add_argument("--model", default=None, choices=tuple(MODEL_SHAPES),
                    help="model shape (default: 'default', or 'smoke' with --smoke); 'small' "
                         "(2 layers, hidden 128) is for recipe experiments on a CPU")
    ap.add_argument("--batch-tokens", type=int, default=16 * 8192, help="tokens per step")
    ap.add_argument("--stages", default="0:1024,0.1:2048,0.25:4096,0.45:8192",
                    help="time fraction:context pairs of the curriculum")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--passkey-frac", type=float, default=0.3,
                    help="share of the rows holding passkey documents")
    ap.add_argument("--passkey-full", type=float, default=0.25,
                    help="share of the passkey rows that are one document of the row's length; "
                         "the others pack documents of log-uniform length")
    ap.add_argument("--passkey-min", type=int, default=64,
                    help="shortest packed passkey document, in tokens")
    ap.add_argument("--repeat-frac", type=float, default=0.2,
                    help="share of the rows of text in which a span reappears verbatim "
                         "(induction targets)")
    ap.add_argument("--repeat-min", type=int, default=16,
                    help="shortest repeated span, in tokens (the longest is half the row)")
    ap.add_argument("--answer-weight", type=float, default=2.0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the decoder")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-tokens", type=int, default=64 * 8192,
                    help="held-out tokens for perplexity (rounded to the longest context)")
    ap.add_argument("--ppl-contexts", default="2048,8192")
    ap.add_argument("--passkey-lengths", default="1024,2048,4096,8192")
    ap.add_argument("--passkey-per-cell", type=int, default=10)
    ap.add_argument("--eval-batch", type=int, default=8)
    args = ap.parse_args(argv)
    if args.model is None:
        args.model = "smoke" if args.smoke else "default"
    if args.smoke:
        # Small enough to run in seconds on a CPU while exercising every stage.
        args.batch_tokens = min(args.batch_tokens, 8 * 256)
        args.stages = "0:128,0.5:256"
        args.max_steps = args.max_steps or 40
        args.warmup_steps = min(args.warmup_steps, 5)
        args.log_every = min(args.log_every, 10)
        args.eval_tokens = min(args.eval_tokens, 8 * 256)
        args.ppl_contexts = "128,256"
        args.passkey_lengths = "128,256"
        args.passkey_per_cell = min(args.passkey_per_cell, 2)
        args.reserve_s = min(args.reserve_s, 10.0)
    return args


def model_config(vocab: int, bos_id: int | None, eos_id: int, shape_name: str):
    from transformers import LlamaConfig

    shape = MODEL_SHAPES[shape_name]
    cfg = LlamaConfig(vocab_size=vocab, hidden_act="silu", max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                      attention_bias=False, mlp_bias=False, initializer_range=0.02,
                      bos_token_id=bos_id, eos_token_id=eos_id, attn_implementation="sdpa",
                      **shape)
    # Older transformers keep `rope_theta`, newer ones move it into
    # `rope_parameters`; check that the value landed either way.
    theta = getattr(cfg, "rope_parameters", None) or {}
    theta = theta.get("rope_theta") if isinstance(theta, dict) else None
    theta = theta if theta is not None else getattr(cfg, "rope_theta", None)
    if theta != 500000.0:
        raise SystemExit(f"LlamaConfig did not keep rope_theta=500000 (found {theta})")
    return cfg


def parse_stages(text: str) -> list[tuple[float, int]]:
    stages = sorted((float(a), int(b)) for a, b in (s.split(":") for s in text.split(",")))
    if not stages or stages[0][0] != 0.0:
        raise SystemExit(f"--stages {text}: the first stage must start at fraction 0")
    return stages


def stage_length(stages, frac: float) -> int:
    length = stages[0][1]
    for start, n in stages:
        if frac >= start:
            length = n
    return length


def lr_at(args, step: int, frac: float) -> float:
    # Linear warmup over steps, then cosine over the fraction of the time (or
    # step) budget spent: lr_min + (lr - lr_min) * (1 + cos(pi * f)) / 2.
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    lo = args.lr * args.min_lr_frac
    return lo + (args.lr - lo) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


def token_losses(decoder, lm_head, inputs, targets):
    """Per-token cross entropy [B, T] in fp32."""
    hidden = decoder(input_ids=inputs, use_cache=False).last_hidden_state
    logits = lm_head(hidden)
    ce = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                                           reduction="none")
    return ce.view(targets.shape), logits


def train(args, model, batcher, device, t_start: float) -> dict:
    stages = parse_stages(args.stages)
    longest = max(n for _, n in stages)
    if args.batch_tokens < longest:
        raise SystemExit(f"--batch-tokens {args.batch_tokens} is less than one row of {longest}")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kw)
    decoder = model.model
    if args.compile:
        decoder = torch.compile(decoder)
    budget = args.minutes * 60.0 - args.reserve_s
    t_train = time.time()
    if t_train - t_start >= budget:
        raise SystemExit(f"no time left to train: setup took {t_train - t_start:.0f}s of a "
                         f"{budget:.0f}s training budget")
    deadline = t_start + budget
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    pin = device.type == "cuda"
    step, tokens_seen, checked_length = 0, 0, 0
    # lm loss sum, answer loss sum, answer hits, answer n, copy loss sum, copy hits, copy n
    acc = torch.zeros(7, device=device)
    last_t, last_tokens, last_step = time.time(), 0, 0
    history = []
    log(f"train: budget {budget:.0f}s for training, {args.batch_tokens} tokens/step, "
        f"stages {stages}, passkey share {args.passkey_frac} ({args.passkey_full} of it "
        f"full-length), repeated-text share {args.repeat_frac}")
    model.train()
    while True:
        now = time.time()
        frac = (now - t_train) / max(1e-9, deadline - t_train)
        if args.max_steps is not None:
            frac = max(frac, step / args.max_steps)
        if now >= deadline or (args.max_steps is not None and step >= args.max_steps):
            break
        length = stage_length(stages, frac)
        rows = max(1, args.batch_tokens // length)
        tokens_np, roles_np = batcher(rows, length)
        if step == 0 or length != checked_length:
            check_batch(tokens_np, roles_np, batcher.bos_id, batcher.enc.eos_id)
            checked_length = length
        tokens = torch.from_numpy(tokens_np)
        roles = torch.from_numpy(roles_np)
        if pin:
            tokens, roles = tokens.pin_memory(), roles.pin_memory()
        tokens = tokens.to(device, non_blocking=True)
        roles = roles.to(device, non_blocking=True)
        inputs, targets, target_roles = tokens[:, :-1], tokens[:, 1:], roles[:, 1:]
        copy_mask = (target_roles == ROLE_COPY).float()
        lm_mask = (target_roles == pk.ROLE_TEXT).float() + copy_mask
        ans_mask = (target_roles == pk.ROLE_ANSWER).float()
        lr = lr_at(args, step, frac)
        for group in opt.param_groups:
            group["lr"] = lr
        with autocast:
            ce, logits = token_losses(decoder, model.lm_head, inputs, targets)
        lm_loss = (ce * lm_mask).sum() / lm_mask.sum().clamp(min=1.0)
        ans_loss = (ce * ans_mask).sum() / ans_mask.sum().clamp(min=1.0)
        loss = lm_loss + args.answer_weight * ans_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        with torch.no_grad():
            right = (logits.argmax(-1) == targets).float()
            acc += torch.stack([lm_loss.detach(), ans_loss.detach(), (right * ans_mask).sum(),
                                ans_mask.sum(), (ce.detach() * copy_mask).sum(),
                                (right * copy_mask).sum(), copy_mask.sum()])
        del logits
        step += 1
        tokens_seen += rows * length
        if step % args.log_every == 0:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.time()
            n = step - last_step
            lm, al, h, an, cl, ch, cn = acc.tolist()
            tps = (tokens_seen - last_tokens) / max(1e-9, t - last_t)
            rec = {"step": step, "seconds": round(t - t_start, 1), "context": length,
                   "lr": lr, "lm_loss": lm / n, "answer_loss": al / n,
                   "answer_token_acc": h / max(1.0, an), "copy_loss": cl / max(1.0, cn),
                   "copy_token_acc": ch / max(1.0, cn), "tokens_per_s": tps}
            history.append(rec)
            log(f"step {step:5d}  t {t - t_start:6.1f}s  ctx {length:5d}  lr {lr:.2e}  "
                f"loss {lm / n:.4f}  answer {al / n:.3f} (acc {h / max(1.0, an):.2f})  "
                f"copy {cl / max(1.0, cn):.3f} (acc {ch / max(1.0, cn):.2f})  "
                f"{tps / 1e3:8.1f}k tok/s")
            acc.zero_()
            last_t, last_tokens, last_step = t, tokens_seen, step
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - t_train
    log(f"train: {step} steps, {tokens_seen / 1e6:.1f}M tokens in {seconds:.0f}s "
        f"({tokens_seen / max(1e-9, seconds) / 1e3:.1f}k tok/s average)")
    return {"steps": step, "tokens": tokens_seen, "seconds": seconds,
            "tokens_per_s": tokens_seen / max(1e-9, seconds), "history": history}


def export(args, model, meta: dict) -> None:
    from transformers import GenerationConfig

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size="15MB")
    shutil.copyfile(args.tokenizer, out / "tokenizer.json")
    beside = args.tokenizer.parent / "tokenizer_config.json"
    if beside.is_file():
        shutil.copyfile(beside, out / "tokenizer_config.json")
    else:
        tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast",
                   "bos_token": meta["bos_token"], "eos_token": meta["eos_token"],
                   "add_bos_token": meta["bos_id"] is not None, "add_eos_token": False,
                   "model_max_length": 8192, "clean_up_tokenization_spaces": False}
        (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    GenerationConfig(bos_token_id=meta["bos_id"], eos_token_id=meta["eos_id"],
                     pad_token_id=meta["eos_id"], do_sample=False).save_pretrained(out)
    too_big = [f"{p.name} ({p.stat().st_size} bytes)" for p in out.iterdir()
               if p.stat().st_size > MAX_FILE_BYTES]
    if too_big:
        raise SystemExit(f"export: files over {MAX_FILE_BYTES} bytes: {', '.join(too_big)}")
    files = sorted(f"{p.name} {p.stat().st_size / 1e6:.1f}MB" for p in out.iterdir())
    log(f"export: {out}: {', '.join(files)}")


def load_data(args) -> tuple[dict, np.ndarray, np.ndarray]:
    """meta.json, training and validation tokens; refuses data packed with
    another tokenizer."""
    meta_path = args.data / "meta.json"
    for path in (meta_path, args.data / "train.npy", args.data / "valid.npy", args.tokenizer):
        if not path.is_file():
            raise SystemExit(f"{path} does not exist (pack the corpus first: python3 "
                             f"tools/pack_corpus.py --tokenizer TOKENIZER --out {args.data})")
    meta = json.loads(meta_path.read_text())
    sha = hashlib.sha256(args.tokenizer.read_bytes()).hexdigest()
    if meta.get("tokenizer_sha256") != sha:
        raise SystemExit(f"{meta_path} was packed with another tokenizer than {args.tokenizer} "
                         f"(sha256 {meta.get('tokenizer_sha256')} vs {sha}): pack again")
    train_tokens = np.load(args.data / "train.npy")
    valid_tokens = np.load(args.data / "valid.npy")
    for name, arr in (("train", train_tokens), ("valid", valid_tokens)):
        if arr.dtype != np.uint16 or arr.ndim != 1 or arr.size == 0:
            raise SystemExit(f"{args.data / (name + '.npy')}: expected a non-empty 1-d uint16 "
                             f"array, found {arr.dtype} {arr.shape}")
        if int(arr.max()) >= meta["vocab_size"]:
            raise SystemExit(f"{args.data / (name + '.npy')}: token id {int(arr.max())} is "
                             f"outside the vocabulary of {meta['vocab_size']}")
    return meta, train_tokens, valid_tokens


def predict_logits(model, ids):
    return model.lm_head(model.model(input_ids=ids, use_cache=False).last_hidden_state)


@torch.no_grad()
def eval_perplexity(model, valid, train, meta, contexts, eval_tokens, batch, device) -> dict:
    """Perplexity at each context over the same held-out tokens, and the
    unigram perplexity of those tokens with add-one smoothed training counts."""
    longest = max(contexts)
    span = (min(eval_tokens, valid.size) // longest) * longest
    if span == 0:
        raise SystemExit(f"validation split holds {valid.size} tokens, fewer than one "
                         f"window of {longest}")
    data = valid[:span].astype(np.int64)
    bos = meta["bos_id"]
    result = {"eval_tokens": int(span), "perplexity": {}}
    for ctx in contexts:
        windows = data.reshape(-1, ctx)
        rows = max(1, batch * longest // ctx)
        total, count = 0.0, 0
        for i in range(0, len(windows), rows):
            w = torch.from_numpy(windows[i:i + rows]).to(device)
            if bos is not None:
                # Every window is scored in full: its first token is predicted from BOS.
                inputs = torch.cat([torch.full_like(w[:, :1], bos), w[:, :-1]], dim=1)
                targets = w
            else:
                inputs, targets = w[:, :-1], w[:, 1:]
            logits = predict_logits(model, inputs).float()
            ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                                   reduction="sum")
            total += float(ce)
            count += targets.numel()
        result["perplexity"][str(ctx)] = math.exp(total / count)
    counts = np.bincount(train, minlength=meta["vocab_size"]).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    targets = data if bos is not None else data.reshape(-1, longest)[:, 1:].reshape(-1)
    result["unigram_perplexity"] = math.exp(-float(logp[targets].mean()))
    return result


def cache_of(out):
    """The KV cache a decoder call returned: `cache` in newer transformers,
    `past_key_values` in older ones."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@torch.no_grad()
def greedy(model, prompt, steps: int):
    """Greedy continuation [n, steps] of equal-length prompts, with a KV cache."""
    params = inspect.signature(model.model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    out = model.model(input_ids=prompt, use_cache=True)
    nxt = model.lm_head(out.last_hidden_state[:, -1]).argmax(-1)
    generated = [nxt]
    for _ in range(steps - 1):
        out = model.model(input_ids=nxt[:, None], use_cache=True, **{cache_arg: cache_of(out)})
        nxt = model.lm_head(out.last_hidden_state[:, -1]).argmax(-1)
        generated.append(nxt)
    return torch.stack(generated, dim=1)


@torch.no_grad()
def eval_passkey(model, enc, haystack, lengths, per_cell, seed, batch, device) -> dict:
    table, failures = {}, []
    for length in lengths:
        samples = pk.eval_set(enc, haystack, lengths=(length,), per_cell=per_cell, seed=seed)
        rows = max(1, batch * 8192 // length)
        # Prompts of one batch must be equally long; answers of a tokenizer that
        # merges some digit groups and not others differ in length.
        buckets: dict[int, list] = {}
        for s in samples:
            buckets.setdefault(s.prompt_ids.size, []).append(s)
        chunks = [b[i:i + rows] for b in buckets.values() for i in range(0, len(b), rows)]
        correct = {}
        for chunk in chunks:
            prompt = torch.from_numpy(np.stack([s.prompt_ids for s in chunk])).to(device)
            # One token more than the answer, so that a longer number is caught.
            steps = max(len(s.answer_ids) for s in chunk) + 1
            gen = greedy(model, prompt, steps).cpu().numpy()
            for s, g in zip(chunk, gen):
                text = enc.decode(g)
                ok = pk.score(text, s.key)
                correct.setdefault(s.depth, []).append(ok)
                if not ok and len(failures) < 8:
                    failures.append({"length": length, "depth": s.depth, "key": s.key,
                                     "generated": text})
        table[str(length)] = {str(d): float(np.mean(correct[d])) for d in sorted(correct)}
    return {"passkey": table, "passkey_failures": failures,
            "passkey_mean": {n: float(np.mean(list(row.values()))) for n, row in table.items()}}


def reload_checked(args, model, valid, device):
    """The exported checkpoint as from_pretrained loads it, checked against the
    in-memory bf16 model on one validation window."""
    from transformers import LlamaForCausalLM

    reloaded = LlamaForCausalLM.from_pretrained(args.out, attn_implementation="sdpa")
    reloaded = reloaded.to(device=device, dtype=torch.bfloat16).eval()
    if reloaded.lm_head.weight.data_ptr() != reloaded.model.embed_tokens.weight.data_ptr():
        raise SystemExit("reloaded checkpoint does not tie lm_head to embed_tokens")
    model.eval()
    n = min(512, valid.size)
    ids = torch.from_numpy(valid[:n].astype(np.int64))[None].to(device)
    with torch.no_grad():
        a = predict_logits(model, ids).float()
        b = predict_logits(reloaded, ids).float()
    diff = float((a - b).abs().max())
    if not diff <= 1e-3 * float(a.abs().max()) + 1e-3:
        raise SystemExit(f"reloaded checkpoint differs from the trained model: max |logit "
                         f"diff| {diff}")
    log(f"export: reloaded with from_pretrained, max |logit diff| vs trained model {diff:.2e}")
    return reloaded, diff


def print_tables(ev: dict) -> None:
    ppl = ev["perplexity"]
    log(f"validation perplexity over {ev['eval_tokens']} held-out tokens: "
        + "  ".join(f"ctx {c}: {v:.2f}" for c, v in ppl.items())
        + f"  (unigram: {ev['unigram_perplexity']:.2f})")
    depths = list(next(iter(ev["passkey"].values())).keys())
    log("passkey accuracy (greedy, 5 digits)")
    log("  length " + "".join(f"  d={float(d):.2f}" for d in depths) + "    mean")
    for length, row in ev["passkey"].items():
        log(f"  {int(length):6d} " + "".join(f"  {row[d]:6.2f}" for d in depths)
            + f"  {ev['passkey_mean'][length]:6.2f}")


def main(argv=None) -> None:
    t_start = time.time()
    args = parse_args(argv)
    import transformers
    from transformers import LlamaForCausalLM

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"CUDA is not available to torch {torch.__version__}: pass --device "
                         "cpu to run on the CPU (with --smoke for a quick check)")
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log(f"setup: torch {torch.__version__}, transformers {transformers.__version__}, device "
        f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}"
        f"{', smoke run' if args.smoke else ''}")

    meta, train_tokens, valid_tokens = load_data(args)
    enc = pk.load_encoder(args.tokenizer, args.data)
    train_hay = pk.Haystack.load(args.data, "train")
    valid_hay = pk.Haystack.load(args.data, "valid")
    cfg = model_config(meta["vocab_size"], meta["bos_id"], meta["eos_id"], args.model)
    model = LlamaForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"setup: {n_params / 1e6:.2f}M parameters, {train_tokens.size / 1e6:.1f}M training "
        f"tokens, {valid_tokens.size / 1e6:.2f}M validation tokens, "
        f"{time.time() - t_start:.1f}s")

    batcher = Batcher(train_tokens, train_hay, enc, meta["bos_id"], args.passkey_frac, args.seed,
                      repeat_frac=args.repeat_frac, passkey_min=args.passkey_min,
                      repeat_min=args.repeat_min, passkey_full=args.passkey_full)
    stats = train(args, model, batcher, device, t_start)

    t_eval = time.time()
    export(args, model, meta)
    reloaded, diff = reload_checked(args, model, valid_tokens, device)
    del model
    contexts = [int(x) for x in args.ppl_contexts.split(",")]
    lengths = [int(x) for x in args.passkey_lengths.split(",")]
    ev = eval_perplexity(reloaded, valid_tokens, train_tokens, meta, contexts,
                         args.eval_tokens, args.eval_batch, device)
    ev.update(eval_passkey(reloaded, enc, valid_hay, lengths, args.passkey_per_cell,
                           args.seed, args.eval_batch, device))
    ev["reload_max_logit_diff"] = diff
    ev["seconds"] = time.time() - t_eval
    print_tables(ev)
    report = {"model": {k: getattr(cfg, k) for k in (
                  "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim",
                  "max_position_embeddings")},
              "parameters": n_params,
              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
              "train": stats, "eval": ev, "total_seconds": time.time() - t_start}
    (args.out / "train_report.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"done: {args.out} in {time.time() - t_start:.0f}s (export + evaluation "
        f"{ev['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
