"""Run one iteration of the pipeline: every stage in order, skipping those the manifest says are
current, recording each as it finishes, then the report and a one-screen summary."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Any

from .. import exits
from .config import PipelineConfig, load_pipeline_config
from .manifest import MANIFEST, Manifest, hash_inputs, sha256_config
from .report import summary_lines, write_report
from .stages import STAGES, Context, write_heldout


@dataclass
class PipelineResult:
    exit_code: int  # 0, or exits.DRIFT when the recalibration raised a drift flag
    report: str
    manifest: str
    ran: list[str]
    skipped: list[str]


def _say(msg: str) -> None:
    print(f"[pipeline] {msg}", flush=True)


def _check_previous(ctx: Context) -> None:
    """Iteration K > 1 continues from iteration K-1: its checkpoint and recalibration report must exist."""
    if ctx.iteration < 1:
        raise ValueError(f"--iteration must be >= 1, got {ctx.iteration}")
    if ctx.iteration == 1:
        return
    prev = ctx.iteration - 1
    needed = [ctx.folder("train", prev) / "model" / "prm_distill.json", ctx.folder("recalibrate", prev) / "report.json"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"iteration {ctx.iteration} continues from iteration {prev}, which is not complete "
                                f"(missing {', '.join(missing)}): run --iteration {prev} first")


def run_pipeline(cfg: PipelineConfig, iteration: int = 1, policy: Any = None) -> PipelineResult:
    """Run (or resume) iteration `iteration` of `cfg`. A failing stage is recorded as failed and its
    error re-raised; the stages before it stay recorded, so the next run resumes there."""
    import torch

    torch.set_num_threads(cfg.threads)
    ctx = Context(cfg, iteration, policy=policy)
    _check_previous(ctx)
    ctx.iter_dir.mkdir(parents=True, exist_ok=True)
    write_heldout(ctx)
    manifest = Manifest(ctx.iter_dir / MANIFEST, cfg.name, iteration)
    t0 = time.perf_counter()
    try:
        active = [s for s in STAGES if s.enabled(ctx)]
        for n, stage in enumerate(active, 1):
            folder = ctx.folder(stage.name)
            config_sha = sha256_config(stage.section(ctx))
            inputs = hash_inputs(stage.inputs(ctx))
            if manifest.is_current(stage.name, config_sha, inputs, folder):
                _say(f"{n}/{len(active)} {stage.name}: unchanged config and inputs, skipped ({folder})")
                manifest.skipped(stage.name)
                continue
            if manifest.is_stale(stage.name, config_sha, inputs) and folder.exists():
                shutil.rmtree(folder)  # results of other settings: never resumed from
            folder.mkdir(parents=True, exist_ok=True)
            _say(f"{n}/{len(active)} {stage.name} -> {folder}")
            t = time.perf_counter()
            try:
                summary = stage.run(ctx, folder)
            except BaseException as e:
                manifest.record(stage.name, config_sha, inputs, folder, elapsed_s=time.perf_counter() - t, error=f"{type(e).__name__}: {e}")
                raise
            manifest.record(stage.name, config_sha, inputs, folder, elapsed_s=time.perf_counter() - t, summary=summary)
            _say(f"{stage.name} done in {time.perf_counter() - t:.0f}s")
    finally:
        ctx.drop_engine()
        manifest.finish()
        report = write_report(ctx, manifest.data, time.perf_counter() - t0)
    for line in summary_lines(ctx, manifest.data):
        print(line)
    recal = manifest.stages.get("recalibrate", {}).get("summary", {})
    code = exits.DRIFT if recal.get("drift") else exits.OK
    inv = manifest.invocation
    return PipelineResult(code, str(report), str(manifest.path), list(inv["ran"]), list(inv["skipped"]))


def main(config: str | None, overrides: list[str], iteration: int = 1) -> int:
    """`prm-distill pipeline`: exit 0, 3 on drift; an error (bad input 2, an unavailable judge, policy or
    backend 4, a stop 130) propagates to `cli.main`'s table. The last line printed on stdout is
    `report: <path>` whenever a report was written, even when a stage failed."""
    cfg = load_pipeline_config(config, overrides)
    report = Context(cfg, iteration).iter_dir / "report.md"
    try:
        result = run_pipeline(cfg, iteration)
    except BaseException:
        if report.is_file():
            print(f"report: {report}", flush=True)
        raise
    if result.exit_code == exits.DRIFT:
        print("[pipeline] drift flagged by the recalibration round: re-distillation advised (exit 3)")
    print(f"report: {result.report}")
    return result.exit_code
