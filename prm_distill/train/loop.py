"""The training loop on accelerate: accumulation, mixed precision, periodic dev evaluation,
resumable checkpoints, seeded; runs unchanged under `accelerate launch` with several processes.

`train` is the identity check (`identity.check_run`: a finished run returns at once, another run's
folder is refused) -> setup (`setup`: accelerator, model, data, optimiser, all prepared) -> the
identity recorded (`identity.apply`: output_dir/run.json) -> resume (`state.resume`) -> steps
(`run_steps`, one optimiser step at a time in `optimizer_step`, then what is due after it in
`after_step`) -> a checkpoint of the last step (when `optim.save_steps` > 0) -> export
(`export.export_final`). A run ends early on its time budget (`optim.max_minutes`: a resumable
checkpoint is saved, then the model is exported) or on a stop request (SIGTERM/SIGINT,
`prm_distill.stop`: a resumable checkpoint is saved and `Interrupted` raised, nothing is exported);
a rerun of the same command resumes from that checkpoint.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import stop as stopping
from ..atomic import dumps
from ..checkpoint import Sidecar, pad_token_id
from ..encoding import StepEncoder, encoder_for
from ..exits import Interrupted
from ..metrics import dev_split_warning, fmt
from ..records import Trajectory
from ..serve.cpu import cpu_has_native_bf16
from . import identity, state as ckpt
from .config import TrainJobConfig
from .data import Collator, build_rows, group_by_length, load_data
from .distributed import main_process_model, make_accelerator, skeleton
from .export import evaluate, export_final, snapshot, verifier_rule
from .losses import step_loss
from .model import build_model

log = logging.getLogger("prm_distill.train")

__all__ = ["Run", "evaluate", "load_data", "run_steps", "setup", "train"]


@dataclass
class Run:
    """Everything a run holds, built once by `setup` (the model, optimiser, loader and scheduler prepared)."""

    cfg: TrainJobConfig
    accelerator: Any
    model: Any
    template: torch.nn.Module  # meta-device copy that sharded weights are gathered into
    tok: Any
    encoding: Sidecar  # step tag, its id, window length, layout: what the exported sidecars say
    backbone_path: str
    encoder: StepEncoder
    pad_id: int
    train_records: list[Trajectory]
    dev_records: list[Trajectory]
    stats: dict[str, Any]
    loader: Any
    optimizer: Any
    scheduler: Any
    trainable: list[torch.nn.Parameter]
    started: float  # wall clock at setup: the time budget counts from here
    dev_warning: str | None = None  # the dev split is unusable or small (metrics.dev_split_warning)

    @property
    def out(self) -> Path:
        return Path(self.cfg.optim.output_dir)


def _precision(requested: str) -> str:
    if requested == "bf16" and not torch.cuda.is_available() and not cpu_has_native_bf16():
        # measured: a Qwen2.5-0.5B recipe step on an AVX2-only EPYC took minutes in bf16 (fp32: seconds)
        log.warning("optim.mixed_precision=bf16 on a CPU without AVX512-BF16 or AMX: bf16 is emulated here and "
                    "far slower than fp32 (optim.mixed_precision=no)")
    if requested != "auto":
        return requested
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def setup(cfg: TrainJobConfig) -> Run:
    """Accelerator, model + tokenizer, data rows, loader, optimiser and schedule, all prepared."""
    from accelerate.utils import DataLoaderConfiguration, set_seed
    from transformers import get_scheduler

    t = cfg.optim
    accelerator = make_accelerator(  # no GPU: gloo, for DDP, FSDP2 or DeepSpeed as launched
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        mixed_precision=_precision(t.mixed_precision),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
    )
    set_seed(t.seed)
    started = time.time()
    model, tok, encoding, backbone_path = build_model(cfg.model, cfg.lora)
    template = skeleton(model)
    encoder = encoder_for(tok, encoding)
    pad_id = pad_token_id(tok)
    train_records, dev_records = load_data(cfg)
    dev_warning = dev_split_warning([r.labels for r in dev_records], [r.first_error for r in dev_records])
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
    return Run(cfg, accelerator, model, template, tok, encoding, backbone_path, encoder, pad_id, train_records, dev_records, stats,
               loader, optimizer, scheduler, trainable, started, dev_warning)


def optimizer_step(run: Run, batch: dict[str, torch.Tensor]) -> tuple[float, bool]:
    """One micro-batch: forward, loss, backward and (on the last micro-batch of an accumulation) the
    optimiser step. Returns (loss, whether an optimiser step was taken)."""
    a, t = run.accelerator, run.cfg.optim
    with a.accumulate(run.model):
        logits = run.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        tag = logits[batch["tag_batch"], batch["tag_pos"]]
        loss = step_loss(tag, batch, run.cfg.loss)
        a.backward(loss)
        if a.sync_gradients and t.max_grad_norm > 0:
            a.clip_grad_norm_(run.trainable, t.max_grad_norm)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad()
    return float(loss.detach()), bool(a.sync_gradients)


def _stop_flags(run: Run) -> tuple[bool, bool]:
    """(time budget spent, stop requested), agreed by every rank (max over processes) so all stop at one step."""
    t = run.cfg.optim
    over = t.max_minutes is not None and time.time() - run.started > 60 * t.max_minutes
    flags = torch.tensor([float(over), float(stopping.requested())], device=run.accelerator.device)
    if run.accelerator.num_processes > 1:
        flags = run.accelerator.reduce(flags, "max")
    return bool(flags[0].item() > 0), bool(flags[1].item() > 0)


def after_step(run: Run, st: ckpt.TrainState) -> bool:
    """What is due after optimiser step `st.step`: dev evaluation, snapshot, checkpoint, the time
    budget and stop requests. Returns True when the run should stop here (then exported); raises
    `Interrupted` on a stop request, after saving a resumable checkpoint."""
    a, t = run.accelerator, run.cfg.optim
    step, saved = st.step, False
    if t.eval_steps and step % t.eval_steps == 0 and run.dev_records and step < t.max_steps:
        current, _ = main_process_model(a, run.model, run.template)  # every rank: FSDP / ZeRO-3 gather
        if current is not None:
            rep = evaluate(current, run.encoder, run.dev_records, run.pad_id, verifier=verifier_rule(run.cfg))
            st.history.append({"step": step, "dev": rep})
            _log_json(run, {"step": step, "dev": rep})
            a.print(f"step {step} dev: auroc {fmt(rep.get('auroc'))}  f1 {fmt(rep.get('processbench_f1'))}  "
                    f"threshold {fmt(rep.get('threshold'))}")
        a.wait_for_everyone()
    if t.snapshot_steps and step % t.snapshot_steps == 0 and step < t.max_steps:
        current, is_copy = main_process_model(a, run.model, run.template)
        if current is not None:
            snapshot(current, run.tok, run.encoder, run.dev_records, run.pad_id, run.cfg, run.encoding, run.out / "snapshots" / f"step-{step}",
                     {"step": step, "tokens_seen": st.tokens_seen}, [r.id for r in run.train_records], is_copy)
        a.wait_for_everyone()
    if t.save_steps and step % t.save_steps == 0 and step < t.max_steps:
        ckpt.save(a, run.out, st, t.save_total_limit)
        saved = True
    over_budget, stop_requested = _stop_flags(run)
    if stop_requested and step < t.max_steps:  # at max_steps the export follows at once: the work is done
        path = run.out / "checkpoints" / f"step-{step}"
        if not saved:
            path = ckpt.save(a, run.out, st, t.save_total_limit)
        raise Interrupted(f"stop requested at step {step} of {t.max_steps}; resumable checkpoint {path}")
    if over_budget:
        a.print(f"time budget of {t.max_minutes} min spent at step {step}: stopping")
        if not saved and step < t.max_steps:  # whatever save_steps says: rerun with a new budget to continue from here
            ckpt.save(a, run.out, st, t.save_total_limit)
        return True
    if t.stop_at_step is not None and step >= t.stop_at_step:
        a.print(f"stopping at step {step} (optim.stop_at_step; the schedule is {t.max_steps} steps long)")
        return True
    return False


def _log_json(run: Run, entry: dict[str, Any]) -> None:
    """The full-precision record of a log line, one JSON object per line in `output_dir/train_log.jsonl`
    (the console gets the readable line)."""
    if run.accelerator.is_main_process:
        run.out.mkdir(parents=True, exist_ok=True)
        with open(run.out / "train_log.jsonl", "a", encoding="utf-8") as f:
            f.write(dumps(entry) + "\n")


def _last_step(t: Any) -> int:
    return min(t.max_steps, t.stop_at_step) if t.stop_at_step is not None else t.max_steps


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def run_steps(run: Run, st: ckpt.TrainState) -> None:
    """Optimiser steps from `st.step` until max_steps, the budget, stop_at_step or a stop request;
    the data order continues where a resumed run left it. `st.train_wall_s` adds this process's loop
    time to that of the processes before it, step by step (a checkpoint saves it)."""
    a, t = run.accelerator, run.cfg.optim
    micro_per_epoch = len(run.loader)
    epoch, skip = divmod(st.step * t.gradient_accumulation_steps, micro_per_epoch)
    run.model.train()
    loop_start, loss_sum, loss_n, stop = time.time(), 0.0, 0, False
    tokens_at_start, step_at_start = st.tokens_seen, st.step  # rates and ETA of this process (a resumed run starts here)
    wall_at_start = st.train_wall_s
    with stopping.cooperative():  # a signal is honoured after the optimiser step in hand
        while st.step < t.max_steps and not stop:
            run.loader.set_epoch(epoch)
            epoch_loader = a.skip_first_batches(run.loader, skip) if skip else run.loader
            skip = 0
            for batch in epoch_loader:
                loss, stepped = optimizer_step(run, batch)
                st.tokens_seen += int(a.gather(batch["n_tokens"]).sum())
                loss_sum, loss_n = loss_sum + loss, loss_n + 1
                if not stepped:
                    continue
                st.step += 1
                st.train_wall_s = wall_at_start + time.time() - loop_start
                if st.step % t.logging_steps == 0 or st.step == t.max_steps:
                    elapsed = max(st.train_wall_s - wall_at_start, 1e-9)
                    rate = (st.tokens_seen - tokens_at_start) / elapsed
                    entry = {"step": st.step, "loss": loss_sum / loss_n, "lr": run.scheduler.get_last_lr()[0], "tokens_per_s": rate}
                    st.history.append(entry)
                    _log_json(run, entry)
                    left = (_last_step(t) - st.step) * elapsed / max(st.step - step_at_start, 1)
                    a.print(f"step {st.step}/{_last_step(t)}  loss {entry['loss']:.4f}  lr {entry['lr']:.2e}  {rate:.0f} tokens/s  "
                            f"ETA {_duration(left)}")
                    loss_sum, loss_n = 0.0, 0
                stop = after_step(run, st)
                if st.step >= t.max_steps or stop:
                    break
            epoch += 1


def summarize(run: Run, st: ckpt.TrainState) -> dict[str, Any]:
    cfg = run.cfg
    return {
        "backbone": cfg.model.backbone,
        "backbone_path": run.backbone_path,
        "steps": st.step,
        "tokens_seen": st.tokens_seen,
        "train_wall_s": round(st.train_wall_s, 1),
        "tokens_per_s": round(st.tokens_seen / max(st.train_wall_s, 1e-9), 1),
        "n_train_records": len(run.train_records),
        "n_dev_records": len(run.dev_records),
        "lora": cfg.lora.enabled,
        "loss": cfg.loss.kind,
        **run.stats,
        "history": st.history,
    }


def train(cfg: TrainJobConfig, *, fresh: bool = False) -> dict:
    """Train, export to cfg.optim.output_dir, return the summary (also in the sidecar). The run's identity
    is checked against `output_dir/run.json` first (`identity.check_run`): a finished run returns its
    export's summary with `already_finished` set, untouched; another run's folder is refused (ValueError,
    exit 2) unless `fresh` (or optim.resume=false) starts over there. Raises `Interrupted` on
    SIGTERM/SIGINT (under `prm_distill.stop`) once a resumable checkpoint is saved."""
    check = identity.check_run(cfg, fresh)  # read-only, on every rank: all reach the same verdict
    if check.finished is not None:
        if int(os.environ.get("RANK", "0")) == 0:
            identity.record_finished(check)
        return check.finished
    run = setup(cfg)
    a = run.accelerator
    if a.is_main_process:  # after setup: a bad backbone or data file leaves the folder as it was
        identity.apply(check, a.print)
        if run.dev_warning:
            log.warning(run.dev_warning)
    a.wait_for_everyone()
    st = ckpt.resume(a, run.out, cfg.optim.resume and not fresh)
    a.print(
        f"training on {len(run.train_records)} records ({run.stats['rows']} windows, {run.stats['supervised_steps']} supervised steps), "
        f"dev {len(run.dev_records)} records; " + (
            f"{a.num_processes} process(es) ({a.distributed_type.value})" if a.num_processes > 1 else f"one process on {a.device}")
        + f", precision {'fp32' if a.mixed_precision == 'no' else a.mixed_precision}"  # benchmarks/gpu_recipe.py reads it
        + f"; log lines also in {run.out / 'train_log.jsonl'}"
    )
    run_steps(run, st)
    summary = summarize(run, st)
    saved = ckpt.checkpoints(run.out)
    if cfg.optim.save_steps and st.step and not (saved and saved[-1].name == f"step-{st.step}"):
        ckpt.save(a, run.out, st, cfg.optim.save_total_limit)  # the last step too: a longer optim.max_steps continues from here
    unwrapped, _ = main_process_model(a, run.model, run.template)  # every rank: FSDP / ZeRO-3 gather here
    if unwrapped is not None:
        export_final(unwrapped, run.tok, run.encoder, run.dev_records, [r.id for r in run.train_records], run.pad_id, cfg, run.encoding, summary)
        a.print(f"exported checkpoint to {run.out}")
    a.wait_for_everyone()
    a.end_training()
    return summary
