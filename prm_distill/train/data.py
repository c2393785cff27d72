"""Turn labelled records into training rows (one per window) and collate them into batches.

Rows come from the shared encoder, so training sees exactly the ids the scorer will see. Long
trajectories become several windows, each supervised at the steps it scores: no label is lost
to truncation.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch

from ..encoding import StepEncoder, Window
from ..inference import pad_batch
from ..records import Trajectory, file_and_format, load_records, sample_questions, split_by_question
from ..synthetic import SyntheticConfig, generate
from .config import LossConfig, TrainJobConfig

log = logging.getLogger("prm_distill.train")


@dataclass(frozen=True)
class Row:
    window: Window
    targets: list[float]
    weights: list[float]
    group: int  # same question -> same group (pairwise loss pairs steps within a group)


def class_weights(records: Sequence[Trajectory]) -> tuple[float, float]:
    """(weight of a bad step, weight of a good step) so that each class carries half the loss."""
    counts = Counter(lab > 0.5 for r in records for lab in (r.labels or []) if lab is not None and lab != 0.5)
    n_good, n_bad = counts[True], counts[False]
    if not n_good or not n_bad:
        return 1.0, 1.0
    total = n_good + n_bad
    return total / (2 * n_bad), total / (2 * n_good)


def _agreement(votes: list[float]) -> float:
    if not votes:
        return 1.0
    return Counter(votes).most_common(1)[0][1] / len(votes)


def build_rows(records: Sequence[Trajectory], encoder: StepEncoder, loss: LossConfig) -> tuple[list[Row], dict]:
    """Rows for every window with at least one supervised step, plus counts for the summary."""
    w_bad, w_good = class_weights(records) if loss.class_balance else (1.0, 1.0)
    rows, n_truncated, n_steps = [], 0, 0
    for r in records:
        if r.labels is None or all(lab is None for lab in r.labels):
            continue
        enc = encoder.encode(r.question, r.steps)
        n_truncated += enc.truncated
        group = zlib.crc32(r.question.encode("utf-8"))
        for w in enc.windows:
            keep = [k for k, s in enumerate(w.step_indices) if r.labels[s] is not None]
            if not keep:
                continue
            targets, weights = [], []
            for k in keep:
                s = w.step_indices[k]
                y = r.labels[s]
                wt = y * w_good + (1.0 - y) * w_bad
                if loss.agreement_weights and r.votes is not None:
                    wt *= _agreement(r.votes[s])
                targets.append(y)
                weights.append(wt)
            n_steps += len(keep)
            rows.append(Row(Window(w.input_ids, [w.tag_positions[k] for k in keep], [w.step_indices[k] for k in keep]), targets, weights, group))
    stats = {"rows": len(rows), "supervised_steps": n_steps, "truncated_trajectories": n_truncated, "weight_bad": w_bad, "weight_good": w_good}
    return rows, stats


def group_by_length(rows: Sequence[Row], batch_size: int, seed: int, megabatch: int = 32) -> list[list[Row]]:
    """Batches of rows of similar length (less padding): shuffle with the seed, sort by length
    inside megabatches of `megabatch` batches, cut into batches. The loader shuffles batch order."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    span = batch_size * megabatch
    batches = []
    for start in range(0, len(order), span):
        chunk = sorted(order[start : start + span], key=lambda i: len(rows[i].window.input_ids))
        batches += [[rows[i] for i in chunk[j : j + batch_size]] for j in range(0, len(chunk), batch_size)]
    return batches


class Collator:
    """Pad ids; flatten tag positions, targets, weights and groups over the batch."""

    def __init__(self, pad_id: int, pregrouped: bool = False):
        self.pad_id = pad_id
        self.pregrouped = pregrouped  # the loader yields one pre-formed batch (batch_size=1)

    def __call__(self, rows: list) -> dict[str, torch.Tensor]:
        if self.pregrouped:
            (rows,) = rows
        ids, mask = pad_batch([r.window.input_ids for r in rows], self.pad_id)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "tag_batch": torch.tensor([b for b, r in enumerate(rows) for _ in r.targets], dtype=torch.long),
            "tag_pos": torch.tensor([p for r in rows for p in r.window.tag_positions], dtype=torch.long),
            "targets": torch.tensor([t for r in rows for t in r.targets], dtype=torch.float32),
            "weights": torch.tensor([w for r in rows for w in r.weights], dtype=torch.float32),
            "groups": torch.tensor([r.group for r in rows for _ in r.targets], dtype=torch.long),
            "n_tokens": torch.tensor(int(mask.sum()), dtype=torch.long),
        }


def load_data(cfg: TrainJobConfig) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, dev) records: files or the synthetic set, deduplicated, shuffled, limited; dev from
    `data.dev` or a by-question split of the training records, cut to `data.dev_limit` whole questions."""
    d, seed = cfg.data, cfg.optim.seed
    if d.mix and len(d.mix) != len(d.train):
        raise ValueError(f"data.mix has {len(d.mix)} shares for {len(d.train)} data.train files: give one per file")
    if d.mix and (any(w < 0 for w in d.mix) or not sum(d.mix) > 0):
        raise ValueError(f"data.mix shares must be >= 0 with a positive sum, got {d.mix}")
    if d.train:
        files = [load_records(*file_and_format(p, d.format)) for p in d.train]
        train = _dedupe([r for f in files for r in f])
        if d.mix:
            train = _mix(train, files, d.mix, seed)
    elif d.synthetic:
        train = generate(SyntheticConfig(n=d.synthetic, seed=seed, id_prefix="train"))
    else:
        raise ValueError("no training data: set data.train (files) or data.synthetic (a count)")
    random.Random(seed).shuffle(train)
    if d.limit is not None:
        train = train[: d.limit]
    if d.dev:
        dev = [r for p in d.dev for r in load_records(*file_and_format(p, d.format))]
    else:
        train, dev = split_by_question(train, d.dev_fraction, seed)
    dev = sample_questions(dev, d.dev_limit, seed)
    if not any(lab is not None for r in train for lab in (r.labels or [])):
        raise ValueError("the training data has no supervised step (every label is missing)")
    return train, dev


def _mix(records: list[Trajectory], files: list[list[Trajectory]], shares: list[float], seed: int) -> list[Trajectory]:
    """`data.mix`: the deduplicated records regrouped by the file each came from, each file's share of the total
    count taken from its own (shuffled) records, whole passes first, then a sample of the rest."""
    kept = {id(r) for r in records}
    per_file = [[r for r in f if id(r) in kept] for f in files]
    total, weight = len(records), sum(shares)
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for f, share in zip(per_file, shares, strict=True):
        n = round(total * share / weight)
        if n and not f:
            raise ValueError("data.mix gives a share to a training file with no records left after deduplication")
        order = list(f)
        rng.shuffle(order)
        out += order * (n // len(order)) + order[: n % len(order)] if order else []
    log.info("data.mix %s: %s records per file", shares, [round(total * s / weight) for s in shares])
    return out


def _dedupe(records: list[Trajectory]) -> list[Trajectory]:
    """Drop repeated trajectories (same question and steps; e.g. PRMBench repeats each original
    process once per error type), keeping the first, so no solution is over-weighted."""
    seen, out = set(), []
    for r in records:
        key = (r.question, tuple(r.steps))
        if key not in seen:
            seen.add(key)
            out.append(r)
    if len(out) < len(records):
        log.info("dropped %d duplicate training trajectories", len(records) - len(out))
    return out
