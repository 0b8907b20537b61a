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
        --out OUT/run --minutes 7

and a CPU check of the whole path (tiny model, a few steps, short contexts):

    python3 tools/train_model.py --data .carry/corpus --tokenizer T --out OUT/smoke \\
        --smoke --device cpu

Training: bf16 autocast over fp32 master weights, AdamW (betas 0.9/0.95, weight
decay on matrices), linear warmup, a constant lr and then a cosine decay over
the last ``--decay-frac`` of the time budget, gradient clipping, PyTorch SDPA
attention (flash kernels on the GPU). Context grows in stages (512, 1024, 2048,
4096, then 8192 for the last half of the time) at a constant number of tokens
per step. Rows are of four kinds (tools/train_batches.py): plain text (random
windows of the packed training tokens), repeated text (``--repeat-frac``: a
span that reappears verbatim later in the row), induction rows
(``--induct-frac``: pairs of random-token spans, digits or any tokens, the
second copy predictable only by copying; their mean loss is added with
``--induct-weight``) and passkey rows (``--passkey-frac``: one document of the
row's length, or short documents of log-uniform length packed back to back).
Passkey answer tokens get a separate mean loss added with ``--answer-weight``;
the first statement of the key gets no loss, the second ("... Remember it.
{key} is the pass key.") keeps the ordinary loss, being itself a short-range
copy. Every row starts with BOS. Every ``--eval-every`` steps a log line also
reports greedy passkey accuracy on a few validation documents of the current
context.

``--minutes`` bounds the whole run: training stops ``--reserve-s`` seconds
before the end to leave time for export and evaluation. The ``--out`` folder
(absent or empty) gets train.log (every printed line, and the error of a failed
run), train_report.json and model/: config.json, model.safetensors in bf16
(sharded so that every file is at most 15 MB), tokenizer.json,
tokenizer_config.json, generation_config.json (greedy) and a copy of
train_report.json. Evaluation runs on the exported checkpoint as reloaded by
``from_pretrained``: validation perplexity at contexts 2048 and 8192 on the
same held-out tokens, the unigram perplexity of those tokens under training
counts, and passkey accuracy (greedy digits) for 1k/2k/4k/8k x 5 depths; a
last line judges them against the targets.
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
from train_batches import ROLE_COPY, ROLE_INDUCT, Batcher, check_batch  # noqa: E402

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


_LOG_FILE = None  # the run's train.log, once --out is known


def log(msg: str) -> None:
    print(msg, flush=True)
    if _LOG_FILE is not None:
        _LOG_FILE.write(msg + "\n")
        _LOG_FILE.flush()


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder from tools/pack_corpus.py")
    ap.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json")
    ap.add_argument("--out", type=Path, required=True,
                    help="run folder to write: model/ (the checkpoint), train_report.json, "
                         "train.log; must be empty or absent")
    ap.add_argument("--minutes", type=float, default=7.0,
                    help="wall-clock budget of the run from the start of main()")
    ap.add_argument("--reserve-s", type=float, default=45.0,
                    help="seconds kept for export and evaluation")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model, short contexts, few steps: checks the whole path")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from this Hugging Face checkpoint (e.g. models/default) instead of random "
                         "weights; its vocabulary must be the tokenizer's, and --model is ignored")
    ap.add_argument("--model", default=None, choices=tuple(MODEL_SHAPES),
                    help="model shape (default: 'default', or 'smoke' with --smoke); 'small' "
                         "(2 layers, hidden 128) is for recipe experiments on a CPU")
    ap.add_argument("--batch-tokens", type=int, default=8 * 8192, help="tokens per step")
    ap.add_argument("--stages", default="0:512,0.1:1024,0.2:2048,0.35:4096,0.5:8192",
                    help="time fraction:context pairs of the curriculum")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--decay-frac", type=float, default=0.4,
                    help="share of the budget, at its end, over which the lr decays (cosine) "
                         "to --min-lr-frac; before it the lr stays at --lr after warmup "
                         "(1.0: a cosine over the whole run)")
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--passkey-frac", type=float, default=0.4,
                    help="share of the rows holding passkey documents")
    ap.add_argument("--passkey-full", type=float, default=0.25,
                    help="share of the passkey rows that are one document of the row's length; "
                         "the others pack documents of log-uniform length")
    ap.add_argument("--key-digits", default="5:5",
                    help="MIN:MAX digits of the training keys (the evaluation's keys have 5). "
                         "With 4:7 the model retrieves the digits but, not having learned to "
                         "end the answer where the needle's key ends, goes on with a digit "
                         "(scored wrong)")
    ap.add_argument("--passkey-min", type=int, default=64,
                    help="shortest packed passkey document, in tokens")
    ap.add_argument("--repeat-frac", type=float, default=0.1,
                    help="share of the rows of text in which a span reappears verbatim "
                         "(induction targets)")
    ap.add_argument("--repeat-min", type=int, default=16,
                    help="shortest repeated span, in tokens (the longest is half the row)")
    ap.add_argument("--induct-frac", type=float, default=0.4,
                    help="share of the rows of text holding pairs of random-token spans "
                         "(pure induction targets)")
    ap.add_argument("--induct-every", type=int, default=48,
                    help="row tokens per random-span pair in induction rows")
    ap.add_argument("--induct-digits", type=float, default=0.5,
                    help="share of the random spans drawn from the ten digit tokens (the "
                         "others from the whole vocabulary)")
    ap.add_argument("--copy-minutes", type=float, default=0.0,
                    help="a first phase of at most this long on induction rows alone at "
                         "--copy-length, loss on the copies, until the induction circuit forms "
                         "(0: none); counted in --minutes")
    ap.add_argument("--copy-until", type=float, default=0.9,
                    help="the first phase ends early once the induction token accuracy of a "
                         "log window reaches this")
    ap.add_argument("--copy-length", type=int, default=256,
                    help="row length of the first phase")
    ap.add_argument("--copy-digits", type=float, default=0.0,
                    help="share of the first phase's random spans drawn from the digits")
    ap.add_argument("--copy-lm-weight", type=float, default=0.1,
                    help="weight of the ordinary loss beside the copy loss in the first phase")
    ap.add_argument("--answer-weight", type=float, default=3.0)
    ap.add_argument("--induct-weight", type=float, default=1.0,
                    help="weight of the mean loss over induction targets, added to the "
                         "ordinary loss (which counts them too)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the decoder")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=500,
                    help="steps between passkey probes during training (at the next log "
                         "line; 0: none): greedy accuracy on --probe-per-cell x 5 depths "
                         "validation documents of the current context")
    ap.add_argument("--probe-per-cell", type=int, default=4)
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
        args.eval_every = min(args.eval_every, 20)
        args.eval_tokens = min(args.eval_tokens, 8 * 256)
        args.ppl_contexts = "128,256"
        args.passkey_lengths = "128,256"
        args.passkey_per_cell = min(args.passkey_per_cell, 2)
        args.reserve_s = min(args.reserve_s, 10.0)
        args.copy_minutes = min(args.copy_minutes, 0.1)
        args.copy_length = min(args.copy_length, 128)
    try:
        lo, hi = (int(x) for x in args.key_digits.split(":"))
    except ValueError:
        raise SystemExit(f"--key-digits {args.key_digits}: expected MIN:MAX, e.g. 5:5")
    if not 1 <= lo <= hi <= 9:
        raise SystemExit(f"--key-digits {args.key_digits}: need 1 <= MIN <= MAX <= 9")
    args.key_digits = (lo, hi)
    for name in ("copy_minutes", "copy_until", "copy_digits", "copy_lm_weight"):
        if getattr(args, name) < 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.copy_minutes > 0 and args.copy_length < 2 * args.induct_every:
        raise SystemExit(f"--copy-length {args.copy_length} holds fewer than two "
                         f"--induct-every {args.induct_every} slots")
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
    # Linear warmup over steps, constant up to the last --decay-frac of the
    # time (or step) budget, then a cosine over it:
    # lr_min + (lr - lr_min) * (1 + cos(pi * f)) / 2, f the share of the decay done.
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    lo = args.lr * args.min_lr_frac
    start = 1.0 - args.decay_frac
    f = min(1.0, max(0.0, frac - start) / max(1e-9, args.decay_frac))
    return lo + (args.lr - lo) * 0.5 * (1.0 + math.cos(math.pi * f))


def token_losses(decoder, lm_head, inputs, targets):
    """Per-token cross entropy [B, T] in fp32."""
    hidden = decoder(input_ids=inputs, use_cache=False).last_hidden_state
    logits = lm_head(hidden)
    ce = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                                           reduction="none")
    return ce.view(targets.shape), logits


def train(args, model, batcher, device, t_start: float, probe=None, copy_batcher=None) -> dict:
    """Trains within the budget: first (with `copy_batcher` and --copy-minutes)
    the copy phase, induction rows alone at --copy-length with the loss on
    their copies, until their accuracy reaches --copy-until; then the mix of
    the stages. The phases share the optimizer; the mix's warmup and lr
    schedule start where the copy phase ends."""
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
    # lm loss sum, answer loss sum, answer hits, answer n, copy loss sum, copy hits, copy n,
    # induction loss sum, induction hits, induction n
    acc = torch.zeros(10, device=device)
    state = {"step": 0, "tokens": 0, "last_t": time.time(), "last_tokens": 0, "last_step": 0,
             "checked": None}
    history = []

    def one_step(source, rows, length, lr, copy_phase):
        tokens_np, roles_np = source(rows, length)
        if state["checked"] != (copy_phase, length):
            check_batch(tokens_np, roles_np, batcher.bos_id, batcher.enc.eos_id)
            state["checked"] = (copy_phase, length)
        tokens = torch.from_numpy(tokens_np)
        roles = torch.from_numpy(roles_np)
        if pin:
            tokens, roles = tokens.pin_memory(), roles.pin_memory()
        tokens = tokens.to(device, non_blocking=True)
        roles = roles.to(device, non_blocking=True)
        inputs, targets, target_roles = tokens[:, :-1], tokens[:, 1:], roles[:, 1:]
        copy_mask = (target_roles == ROLE_COPY).float()
        ind_mask = (target_roles == ROLE_INDUCT).float()
        lm_mask = (target_roles == pk.ROLE_TEXT).float() + copy_mask + ind_mask
        ans_mask = (target_roles == pk.ROLE_ANSWER).float()
        for group in opt.param_groups:
            group["lr"] = lr
        with autocast:
            ce, logits = token_losses(decoder, model.lm_head, inputs, targets)
        lm_loss = (ce * lm_mask).sum() / lm_mask.sum().clamp(min=1.0)
        ans_loss = (ce * ans_mask).sum() / ans_mask.sum().clamp(min=1.0)
        ind_loss = (ce * ind_mask).sum() / ind_mask.sum().clamp(min=1.0)
        if copy_phase:
            loss = ind_loss + args.copy_lm_weight * lm_loss
        else:
            loss = lm_loss + args.answer_weight * ans_loss
            if args.induct_weight:
                loss = loss + args.induct_weight * ind_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        with torch.no_grad():
            right = (logits.argmax(-1) == targets).float()
            acc.add_(torch.stack([lm_loss.detach(), ans_loss.detach(), (right * ans_mask).sum(),
                                  ans_mask.sum(), (ce.detach() * copy_mask).sum(),
                                  (right * copy_mask).sum(), copy_mask.sum(),
                                  (ce.detach() * ind_mask).sum(), (right * ind_mask).sum(),
                                  ind_mask.sum()]))
        del logits
        state["step"] += 1
        state["tokens"] += rows * length

    def log_window(length, lr, phase, probe_now):
        """Prints and records the window since the last line; returns the
        window's induction token accuracy."""
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.time()
        step = state["step"]
        n = step - state["last_step"]
        lm, al, h, an, cl, ch, cn, il, ih, inn = acc.tolist()
        if not (math.isfinite(lm) and math.isfinite(al) and math.isfinite(il)):
            raise SystemExit(f"training diverged by step {step}: loss {lm / n}, answer loss "
                             f"{al / n}, induction loss {il / max(1.0, inn)} (try a lower --lr)")
        tps = (state["tokens"] - state["last_tokens"]) / max(1e-9, t - state["last_t"])
        rec = {"step": step, "phase": phase, "seconds": round(t - t_start, 1), "context": length,
               "lr": lr, "lm_loss": lm / n, "answer_loss": al / n,
               "answer_token_acc": h / max(1.0, an), "copy_loss": cl / max(1.0, cn),
               "copy_token_acc": ch / max(1.0, cn), "induct_loss": il / max(1.0, inn),
               "induct_token_acc": ih / max(1.0, inn), "tokens_per_s": tps}
        line = (f"{phase} step {step:5d}  t {t - t_start:6.1f}s  ctx {length:5d}  lr {lr:.2e}  "
                f"loss {lm / n:.4f}  ")
        if phase == "mix":
            line += (f"answer {al / n:.3f} (acc {h / max(1.0, an):.2f})  "
                     f"copy {cl / max(1.0, cn):.3f} (acc {ch / max(1.0, cn):.2f})  ")
        if inn:
            line += f"induct {il / max(1.0, inn):.3f} (acc {ih / max(1.0, inn):.2f})  "
        line += f"{tps / 1e3:8.1f}k tok/s"
        if probe_now:
            rec["probe_passkey"] = probe(model, length)
            line += f"  passkey@{length} {rec['probe_passkey']:.2f}"
        history.append(rec)
        log(line)
        acc.zero_()
        state["last_t"], state["last_tokens"], state["last_step"] = time.time(), state["tokens"], step
        return ih / max(1.0, inn)

    model.train()
    copy_steps, copy_seconds, copy_acc = 0, 0.0, None
    if copy_batcher is not None and args.copy_minutes > 0:
        # Phase 1: the induction circuit, on the cleanest signal there is.
        copy_deadline = min(deadline, t_train + 60.0 * args.copy_minutes)
        length = args.copy_length
        rows = max(1, args.batch_tokens // length)
        log(f"copy phase: up to {copy_deadline - t_train:.0f}s, {rows} induction rows of {length} "
            f"tokens a step (a random-span pair per {args.induct_every} tokens, "
            f"{args.copy_digits:.2f} of them digits), loss on the copies + "
            f"{args.copy_lm_weight} x the ordinary loss, until induction accuracy "
            f">= {args.copy_until}")
        # With --max-steps the copy phase takes at most half of them.
        copy_cap = None if args.max_steps is None else args.max_steps // 2
        while time.time() < copy_deadline and (copy_cap is None or state["step"] < copy_cap):
            lr = args.lr * min(1.0, (state["step"] + 1) / args.warmup_steps)
            one_step(copy_batcher, rows, length, lr, True)
            if state["step"] % args.log_every == 0:
                copy_acc = log_window(length, lr, "copy", False)
                if copy_acc >= args.copy_until:
                    break
        copy_steps, copy_seconds = state["step"], time.time() - t_train
        log(f"copy phase: {copy_steps} steps in {copy_seconds:.0f}s, last induction accuracy "
            f"{copy_acc if copy_acc is not None else float('nan'):.2f}")

    # Phase 2: the mix, its stages and lr schedule over the time left.
    t_mix = time.time()
    mix_step = 0
    warm = args.warmup_steps if copy_steps else 0  # no second warmup after the copy phase
    next_probe = args.eval_every
    log(f"train: budget {deadline - t_mix:.0f}s for the mix, {args.batch_tokens} tokens/step, "
        f"stages {stages}, passkey share {args.passkey_frac} ({args.passkey_full} of it "
        f"full-length), repeated-text share {args.repeat_frac}, induction share "
        f"{args.induct_frac}")
    while True:
        now = time.time()
        frac = (now - t_mix) / max(1e-9, deadline - t_mix)
        if args.max_steps is not None:
            frac = max(frac, state["step"] / args.max_steps)
        if now >= deadline or (args.max_steps is not None and state["step"] >= args.max_steps):
            break
        length = stage_length(stages, frac)
        rows = max(1, args.batch_tokens // length)
        lr = lr_at(args, mix_step + warm, frac)
        one_step(batcher, rows, length, lr, False)
        mix_step += 1
        if mix_step % args.log_every == 0:
            probe_now = probe is not None and args.eval_every and mix_step >= next_probe
            if probe_now:
                next_probe += args.eval_every
            log_window(length, lr, "mix", probe_now)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - t_train
    step, tokens_seen = state["step"], state["tokens"]
    log(f"train: {step} steps ({copy_steps} in the copy phase), {tokens_seen / 1e6:.1f}M tokens "
        f"in {seconds:.0f}s ({tokens_seen / max(1e-9, seconds) / 1e3:.1f}k tok/s average)")
    return {"steps": step, "copy_steps": copy_steps, "copy_seconds": copy_seconds,
            "copy_final_induct_acc": copy_acc, "tokens": tokens_seen, "seconds": seconds,
            "tokens_per_s": tokens_seen / max(1e-9, seconds), "history": history}


def export(args, model, meta: dict, out: Path) -> None:
    from transformers import GenerationConfig

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


def reload_checked(model_dir: Path, model, valid, device):
    """The exported checkpoint as from_pretrained loads it, checked against the
    in-memory bf16 model on one validation window."""
    from transformers import LlamaForCausalLM

    reloaded = LlamaForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
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


def target_summary(ev: dict) -> str:
    """The issue's targets, judged on this evaluation."""
    worst = min(ev["passkey_mean"].values())
    ppl = ev["perplexity"]
    longest = max(ppl, key=int)
    ok_pk = worst >= 0.9
    ok_ppl = ppl[longest] < ev["unigram_perplexity"] / 4
    return (f"targets: passkey >= 0.90 at every length: {'met' if ok_pk else 'MISSED'} "
            f"(worst length {worst:.2f}); validation perplexity {ppl[longest]:.1f} at "
            f"{longest} vs unigram {ev['unigram_perplexity']:.1f}: "
            f"{'well below' if ok_ppl else 'NOT well below (less than 4x)'}")


def main(argv=None) -> None:
    global _LOG_FILE
    t_start = time.time()
    args = parse_args(argv)
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise SystemExit(f"--out {args.out} exists and is not an empty folder")
    args.out.mkdir(parents=True, exist_ok=True)
    _LOG_FILE = open(args.out / "train.log", "w", encoding="utf-8")
    try:
        run(args, t_start)
    except BaseException as e:
        # Loud and on record: the traceback (or the SystemExit message) also
        # goes into train.log, and the exit status is non-zero.
        import traceback

        if isinstance(e, SystemExit) and not isinstance(e.code, int):
            log(f"error: {e.code}")
        elif not isinstance(e, SystemExit):
            log("error: " + "".join(traceback.format_exception(e)).rstrip())
        raise
    finally:
        _LOG_FILE.close()
        _LOG_FILE = None


def run(args, t_start: float) -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()  # keeps train.log to our own lines
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
    if args.init is not None:
        # Warm start: the checkpoint's own shape, in f32 for training.
        model = LlamaForCausalLM.from_pretrained(args.init, torch_dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device)
        if model.config.vocab_size != meta["vocab_size"]:
            raise SystemExit(f"--init {args.init}: vocabulary {model.config.vocab_size}, but the packed "
                             f"data's tokenizer has {meta['vocab_size']}")
        log(f"setup: initialised from {args.init}")
    else:
        cfg = model_config(meta["vocab_size"], meta["bos_id"], meta["eos_id"], args.model)
        model = LlamaForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"setup: {n_params / 1e6:.2f}M parameters, {train_tokens.size / 1e6:.1f}M training "
        f"tokens, {valid_tokens.size / 1e6:.2f}M validation tokens, "
        f"{time.time() - t_start:.1f}s")

    batcher = Batcher(train_tokens, train_hay, enc, meta["bos_id"], args.passkey_frac, args.seed,
                      repeat_frac=args.repeat_frac, passkey_min=args.passkey_min,
                      repeat_min=args.repeat_min, passkey_full=args.passkey_full,
                      induct_frac=args.induct_frac, induct_every=args.induct_every,
                      induct_digits=args.induct_digits, key_digits=args.key_digits,
                      vocab_size=meta["vocab_size"])
    def probe(m, length):
        # Training-time passkey check on validation documents of the current
        # context; not counted in the tokens/s of the next log line.
        m.eval()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            res = eval_passkey(m, enc, valid_hay, [length], args.probe_per_cell, args.seed + 1,
                               args.eval_batch, device)
        m.train()
        return res["passkey_mean"][str(length)]

    copy_batcher = None
    if args.copy_minutes > 0:
        # Induction rows alone (text with random-span pairs), seeded apart
        # from the mix's rows.
        copy_batcher = Batcher(train_tokens, train_hay, enc, meta["bos_id"], 0.0, args.seed + 7,
                               induct_frac=1.0, induct_every=args.induct_every,
                               induct_digits=args.copy_digits, vocab_size=meta["vocab_size"])
    stats = train(args, model, batcher, device, t_start, probe, copy_batcher)

    t_eval = time.time()
    model_dir = args.out / "model"
    export(args, model, meta, model_dir)
    reloaded, diff = reload_checked(model_dir, model, valid_tokens, device)
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
    summary = target_summary(ev)
    log(summary)
    report = {"model": {k: getattr(reloaded.config, k) for k in (
                  "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim",
                  "max_position_embeddings")},
              "parameters": n_params,
              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
              "train": stats, "eval": ev, "targets": summary,
              "total_seconds": time.time() - t_start}
    text = json.dumps(report, indent=1) + "\n"
    # One copy beside the log, one inside the checkpoint (models/default keeps its report).
    (args.out / "train_report.json").write_text(text)
    (model_dir / "train_report.json").write_text(text)
    log(f"done: {args.out} (model/, train_report.json, train.log) in "
        f"{time.time() - t_start:.0f}s (export + evaluation {ev['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
