"""The training loop on accelerate: accumulation, mixed precision, periodic dev evaluation,
resumable checkpoints, seeded; runs unchanged under `accelerate launch` with several processes."""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from pathlib import Path

import torch

from ..checkpoint import Sidecar, pad_token_id, write_json_atomic
from ..encoding import StepEncoder
from ..inference import score_encoded
from ..metrics import best_threshold, report
from ..records import Trajectory, load_records, split_by_question
from ..synthetic import SyntheticConfig, generate
from ..verify import apply_rule, rule
from .config import TrainJobConfig
from .data import Collator, build_rows, group_by_length
from .distributed import main_process_model, make_accelerator, skeleton
from .losses import step_loss
from .model import build_model, export

log = logging.getLogger("prm_distill.train")
STATE_NAME = "trainer_state.json"


def load_data(cfg: TrainJobConfig) -> tuple[list[Trajectory], list[Trajectory]]:
    d, seed = cfg.data, cfg.train.seed
    if d.train:
        train = [r for p in d.train for r in load_records(p, d.format)]
    elif d.synthetic:
        train = generate(SyntheticConfig(n=d.synthetic, seed=seed, id_prefix="train"))
    else:
        raise ValueError("no training data: set data.train (files) or data.synthetic (a count)")
    train = _dedupe(train)
    random.Random(seed).shuffle(train)
    if d.limit is not None:
        train = train[: d.limit]
    if d.dev:
        dev = [r for p in d.dev for r in load_records(p, d.format)]
    else:
        train, dev = split_by_question(train, d.dev_fraction, seed)
    if d.dev_limit is not None and len(dev) > d.dev_limit:
        questions = sorted({r.question for r in dev})
        random.Random(seed).shuffle(questions)
        keep: set[str] = set()
        for q in questions:  # whole questions, until the limit is reached
            if sum(r.question in keep for r in dev) >= d.dev_limit:
                break
            keep.add(q)
        dev = [r for r in dev if r.question in keep]
    if not any(lab is not None for r in train for lab in (r.labels or [])):
        raise ValueError("the training data has no supervised step (every label is missing)")
    return train, dev


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


def _precision(requested: str) -> str:
    if requested != "auto":
        return requested
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def _checkpoints(out: Path) -> list[Path]:
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    done = [p for p in root.glob("step-*") if (p / STATE_NAME).is_file()]
    return sorted(done, key=lambda p: int(p.name.split("-")[1]))


def evaluate(model, encoder: StepEncoder, records: list[Trajectory], pad_id: int, threshold: float | None = None,
             verifier: dict | None = None) -> dict:
    """Dev report on the scores as the checkpoint will serve them (the verifier rule applied); with
    threshold None the best-F1 threshold on these records is chosen."""
    was_training = model.training
    model.eval()
    scores = score_encoded(model, [encoder.encode(r.question, r.steps) for r in records], pad_id)
    model.train(was_training)
    scores = apply_rule(verifier, [(r.question, r.steps) for r in records], scores)
    labels = [r.labels for r in records]
    errors = [r.first_error for r in records]
    if threshold is None:
        threshold = best_threshold(scores, errors)
    return report(scores, labels, errors, threshold)


def train(cfg: TrainJobConfig) -> dict:
    """Train, export to cfg.train.output_dir, return the summary (also in the sidecar)."""
    from accelerate.utils import DataLoaderConfiguration, set_seed
    from transformers import get_scheduler

    t = cfg.train
    verifier = rule(cfg.verifier.cap) if cfg.verifier.enabled else None
    accelerator = make_accelerator(  # no GPU: gloo, for DDP, FSDP2 or DeepSpeed as launched
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        mixed_precision=_precision(t.mixed_precision),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    set_seed(t.seed)
    out = Path(t.output_dir)
    started = time.time()

    model, tok, tag_id, backbone_path = build_model(cfg.model, cfg.lora)
    template = skeleton(model)  # what sharded weights are gathered into for evaluation and export
    encoder = StepEncoder(tok, tag_id, cfg.model.max_length)
    pad_id = pad_token_id(tok)
    train_records, dev_records = load_data(cfg)
    rows, stats = build_rows(train_records, encoder, cfg.loss)
    if not rows:
        raise ValueError("no training rows: no record has a supervised step")
    if t.group_by_length:
        loader = torch.utils.data.DataLoader(group_by_length(rows, t.batch_size, t.seed), batch_size=1, shuffle=True,
                                             collate_fn=Collator(pad_id, pregrouped=True))
    else:
        loader = torch.utils.data.DataLoader(rows, batch_size=t.batch_size, shuffle=True, collate_fn=Collator(pad_id))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=t.learning_rate, weight_decay=t.weight_decay)
    # accelerate steps a prepared scheduler once per process at each optimizer step: count in those steps
    n = accelerator.num_processes
    scheduler = get_scheduler(t.lr_scheduler, optimizer, num_warmup_steps=int(t.warmup_ratio * t.max_steps) * n, num_training_steps=t.max_steps * n)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    trainable = [p for p in model.parameters() if p.requires_grad]  # FSDP replaces the parameters: clip the new ones

    step, tokens_seen, history = 0, 0, []
    previous = _checkpoints(out) if t.resume else []
    if previous:
        accelerator.load_state(str(previous[-1]))
        state = json.loads((previous[-1] / STATE_NAME).read_text())
        step, tokens_seen, history = state["step"], state["tokens_seen"], state["history"]
        accelerator.print(f"resumed from {previous[-1]} at step {step}")

    micro_per_epoch = len(loader)
    micro_done = step * t.gradient_accumulation_steps
    epoch, skip = divmod(micro_done, micro_per_epoch)
    accelerator.print(
        f"training on {len(train_records)} records ({stats['rows']} windows, {stats['supervised_steps']} supervised steps), "
        f"dev {len(dev_records)} records; {accelerator.num_processes} process(es) ({accelerator.distributed_type.value}), "
        f"precision {accelerator.mixed_precision}"
    )
    model.train()
    loop_start, loss_sum, loss_n, stop = time.time(), 0.0, 0, False
    while step < t.max_steps and not stop:
        loader.set_epoch(epoch)
        epoch_loader = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for batch in epoch_loader:
            with accelerator.accumulate(model):
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                tag = logits[batch["tag_batch"], batch["tag_pos"]]
                loss = step_loss(tag, batch, cfg.loss)
                accelerator.backward(loss)
                if accelerator.sync_gradients and t.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(trainable, t.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            tokens_seen += int(accelerator.gather(batch["n_tokens"]).sum())
            loss_sum, loss_n = loss_sum + float(loss.detach()), loss_n + 1
            if not accelerator.sync_gradients:
                continue
            step += 1
            if step % t.logging_steps == 0 or step == t.max_steps:
                rate = tokens_seen / max(time.time() - loop_start, 1e-9)
                entry = {"step": step, "loss": loss_sum / loss_n, "lr": scheduler.get_last_lr()[0], "tokens_per_s": rate}
                history.append(entry)
                accelerator.print(json.dumps(entry))
                loss_sum, loss_n = 0.0, 0
            if t.eval_steps and step % t.eval_steps == 0 and dev_records and step < t.max_steps:
                current, _ = main_process_model(accelerator, model, template)  # every rank: FSDP / ZeRO-3 gather
                if current is not None:
                    rep = evaluate(current, encoder, dev_records, pad_id, verifier=verifier)
                    history.append({"step": step, "dev": rep})
                    accelerator.print(json.dumps({"step": step, "dev": rep}))
                accelerator.wait_for_everyone()
            if t.snapshot_steps and step % t.snapshot_steps == 0 and step < t.max_steps:
                current, is_copy = main_process_model(accelerator, model, template)
                if current is not None:
                    _snapshot(current, tok, encoder, dev_records, pad_id, cfg, tag_id, out / "snapshots" / f"step-{step}",
                              {"step": step, "tokens_seen": tokens_seen}, is_copy)
                accelerator.wait_for_everyone()
            if t.save_steps and step % t.save_steps == 0 and step < t.max_steps:
                _save_state(accelerator, out, step, tokens_seen, history, t.save_total_limit)
            if t.max_minutes is not None:
                over = torch.tensor(float(time.time() - started > 60 * t.max_minutes), device=accelerator.device)
                if accelerator.reduce(over, "max").item() > 0:
                    accelerator.print(f"time budget of {t.max_minutes} min spent at step {step}: stopping")
                    stop = True
                    if t.save_steps and step < t.max_steps:  # rerun with a new budget to continue from here
                        _save_state(accelerator, out, step, tokens_seen, history, t.save_total_limit)
            if t.stop_at_step is not None and step >= t.stop_at_step:
                accelerator.print(f"stopping at step {step} (train.stop_at_step; the schedule is {t.max_steps} steps long)")
                stop = True
            if step >= t.max_steps or stop:
                break
        epoch += 1

    train_wall = time.time() - loop_start
    summary = {
        "backbone": cfg.model.backbone,
        "backbone_path": backbone_path,
        "steps": step,
        "tokens_seen": tokens_seen,
        "train_wall_s": round(train_wall, 1),
        "tokens_per_s": round(tokens_seen / max(train_wall, 1e-9), 1),
        "n_train_records": len(train_records),
        "n_dev_records": len(dev_records),
        "lora": cfg.lora.enabled,
        "loss": cfg.loss.kind,
        **stats,
        "history": history,
    }
    unwrapped, _ = main_process_model(accelerator, model, template)  # every rank: FSDP / ZeRO-3 gather here
    if unwrapped is not None:
        dev = evaluate(unwrapped, encoder, dev_records, pad_id, verifier=verifier) if dev_records else None
        summary["dev"] = dev
        sidecar = Sidecar(
            step_tag=cfg.model.step_tag,
            step_tag_id=tag_id,
            max_length=cfg.model.max_length,
            threshold=dev["threshold"] if dev and not math.isnan(dev["processbench_f1"]) else None,
            verifier=verifier,
            training=summary,
        )
        export(unwrapped, tok, str(out), sidecar)
        (out / "training_ids.txt").write_text("".join(r.id + "\n" for r in train_records), encoding="utf-8")
        accelerator.print(f"exported checkpoint to {out}")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return summary


def _snapshot(model, tok, encoder: StepEncoder, dev: list[Trajectory], pad_id: int, cfg: TrainJobConfig, tag_id: int, path: Path, at: dict,
              is_copy: bool = False) -> None:
    """Export a merged copy of the model as it is now (training goes on with the original; a
    gathered copy is merged as is)."""
    import copy

    verifier = rule(cfg.verifier.cap) if cfg.verifier.enabled else None
    rep = evaluate(model, encoder, dev, pad_id, verifier=verifier) if dev else None
    ok = rep is not None and not math.isnan(rep["processbench_f1"])
    sidecar = Sidecar(step_tag=cfg.model.step_tag, step_tag_id=tag_id, max_length=cfg.model.max_length,
                      threshold=rep["threshold"] if ok else None, verifier=verifier, training={**at, "dev": rep, "snapshot": True})
    export((model if is_copy else copy.deepcopy(model)).eval(), tok, str(path), sidecar)
    log.info("snapshot at step %d -> %s (dev %s)", at["step"], path, rep)


def _save_state(accelerator, out: Path, step: int, tokens_seen: int, history: list, limit: int) -> None:
    """Save accelerate state, then the trainer state last: a folder without it is incomplete and ignored."""
    path = out / "checkpoints" / f"step-{step}"
    accelerator.save_state(str(path))
    if accelerator.is_main_process:
        write_json_atomic(path / STATE_NAME, {"step": step, "tokens_seen": tokens_seen, "history": history})
        for old in _checkpoints(out)[:-limit] if limit > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()

