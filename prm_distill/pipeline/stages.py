"""The pipeline's stages: for each, the config section it is hashed by, the files it reads, and
what it does in its folder `iter-K/<stage>/`. Each stage calls the package's own job (rollout,
label, train, eval, the serve check and RL table, recalibrate); nothing is reimplemented here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..records import file_and_format, load_records, write_jsonl
from ..synthetic import SyntheticConfig, generate
from .config import PipelineConfig


@dataclass
class Context:
    """Where an iteration lives, and the one engine its scoring stages share (loaded on first use)."""

    cfg: PipelineConfig
    iteration: int
    policy: Any = None  # a loaded generate.Policy to roll out with (tests); None = load cfg.rollout.policy
    _engine: Any = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.root) / self.cfg.name

    @property
    def iter_dir(self) -> Path:
        return self.run_dir / f"iter-{self.iteration}"

    def folder(self, stage: str, iteration: int | None = None) -> Path:
        return self.run_dir / f"iter-{iteration or self.iteration}" / stage

    @property
    def heldout(self) -> Path:
        return Path(self.cfg.data.heldout) if self.cfg.data.heldout else self.run_dir / "heldout" / "test.jsonl"

    @property
    def model_dir(self) -> Path:
        return self.folder("train") / "model"

    @property
    def previous_model(self) -> Path | None:
        return self.folder("train", self.iteration - 1) / "model" if self.iteration > 1 else None

    def engine(self) -> Any:
        """The checkpoint's engine, behind a memo so eval's held-out scores are reused by recalibration."""
        if self._engine is None:
            from ..serve.engine import PRMEngine
            from .scores import CachedScores

            self._engine = CachedScores(PRMEngine.from_checkpoint(self.model_dir))
        return self._engine

    def drop_engine(self) -> None:
        self._engine = None


@dataclass
class Stage:
    name: str
    section: Callable[[Context], Any]  # the settings the stage is hashed by (paths between stages included)
    inputs: Callable[[Context], list[Path]]  # files and folders it reads
    run: Callable[[Context, Path], dict[str, Any]]  # does the work in its folder; returns a short summary
    enabled: Callable[[Context], bool] = lambda ctx: True


def write_heldout(ctx: Context) -> Path:
    """The embedded held-out set, the same for every iteration (rewritten only when its settings change it)."""
    path = ctx.heldout
    if ctx.cfg.data.heldout:
        if not path.is_file():
            raise FileNotFoundError(f"data.heldout: held-out file not found: {path}")
        return path
    records = generate(SyntheticConfig(n=ctx.cfg.data.heldout_size, seed=ctx.cfg.data.seed + 2, id_prefix="heldout"))
    tmp = path.with_name(path.name + ".new")
    write_jsonl(records, tmp)
    if path.is_file() and path.read_bytes() == tmp.read_bytes():
        tmp.unlink()
    else:
        tmp.replace(path)
    return path


# data: the synthetic training and dev sets ------------------------------------------------------------

def _data_section(ctx: Context) -> dict[str, Any]:
    d = ctx.cfg.data
    return {"synthetic_train": d.synthetic_train, "synthetic_dev": d.synthetic_dev, "seed": d.seed, "iteration": ctx.iteration}


def _data_run(ctx: Context, out: Path) -> dict[str, Any]:
    d, shift = ctx.cfg.data, 10 * (ctx.iteration - 1)  # a new iteration sees new synthetic problems
    if d.synthetic_train:
        write_jsonl(generate(SyntheticConfig(n=d.synthetic_train, seed=d.seed + shift, id_prefix=f"train{ctx.iteration}")), out / "train.jsonl")
    write_jsonl(generate(SyntheticConfig(n=d.synthetic_dev, seed=d.seed + 1 + shift, id_prefix=f"dev{ctx.iteration}")), out / "dev.jsonl")
    return {"synthetic_train": d.synthetic_train, "synthetic_dev": d.synthetic_dev}


# rollout: fresh samples from the policy ----------------------------------------------------------------

def rollout_config(ctx: Context) -> Any:
    return dataclasses.replace(ctx.cfg.rollout, output=str(ctx.folder("rollout")))


def _rollout_inputs(ctx: Context) -> list[Path]:
    """A problems file and a local policy folder are hashed (a policy retrained in place reruns the
    rollouts); embedded[:N], hf:NAME and served or hub policies are named by the config alone."""
    return [p for p in (Path(ctx.cfg.rollout.problems), Path(ctx.cfg.rollout.policy.policy)) if p.exists()]


def _rollout_run(ctx: Context, out: Path) -> dict[str, Any]:
    from ..rollout import run_rollout

    s = run_rollout(rollout_config(ctx), policy=ctx.policy)
    return {k: s[k] for k in ("problems", "samples", "k", "generator", "accuracy", "pass_at_k", "no_answer_found", "mean_steps", "tokens_out")}


# label: the rollouts labelled by the configured judges ---------------------------------------------------

def label_config(ctx: Context) -> Any:
    return dataclasses.replace(ctx.cfg.label, input=str(ctx.folder("rollout") / "rollouts.jsonl"), output=str(ctx.folder("label")))


def _label_run(ctx: Context, out: Path) -> dict[str, Any]:
    from ..labeling import run_label_job

    s = run_label_job(label_config(ctx))
    return {k: s.get(k) for k in ("records", "steps", "labelled_steps", "label_distribution", "mean_label", "vote_agreement", "invalid_vote_rate")}


# train: distil the labels (plus the synthetic set) into the student ---------------------------------------

def train_config(ctx: Context) -> Any:
    cfg = copy.deepcopy(ctx.cfg.train)
    data = ctx.folder("data")
    own = "" if cfg.data.format == "jsonl" else "jsonl:"  # the pipeline's own files are records, whatever format the user's are in
    cfg.data.train = [f"{own}{ctx.folder('label') / 'labels.jsonl'}", *([f"{own}{data / 'train.jsonl'}"] if ctx.cfg.data.synthetic_train else []),
                      *ctx.cfg.train.data.train]
    cfg.data.dev = list(ctx.cfg.train.data.dev) or [f"{own}{data / 'dev.jsonl'}"]
    cfg.optim.output_dir = str(ctx.model_dir)
    if ctx.previous_model is not None:
        cfg.model.backbone = str(ctx.previous_model)  # iteration K+1 continues from iteration K's checkpoint
    return cfg


def _train_inputs(ctx: Context) -> list[Path]:
    cfg = train_config(ctx)
    files = [Path(file_and_format(p, cfg.data.format)[0]) for p in [*cfg.data.train, *cfg.data.dev]]
    return files + ([ctx.previous_model] if ctx.previous_model else [])


def _train_run(ctx: Context, out: Path) -> dict[str, Any]:
    from ..train import train

    ctx.drop_engine()
    s = train(train_config(ctx))
    return {k: s.get(k) for k in ("backbone", "steps", "tokens_seen", "train_wall_s", "tokens_per_s", "n_train_records", "n_dev_records")}


# eval: the checkpoint on the held-out set ----------------------------------------------------------------

METRICS = ("n_items", "n_steps", "auroc", "step_accuracy", "ece", "mean_score", "threshold", "acc_erroneous", "acc_correct", "processbench_f1")


def _scoring_inputs(ctx: Context) -> list[Path]:
    return [ctx.model_dir, ctx.heldout]


def _eval_run(ctx: Context, out: Path) -> dict[str, Any]:
    from ..evaluate import evaluate_files

    rep = evaluate_files(ctx.engine(), [str(ctx.heldout)], threshold=ctx.cfg.eval.threshold)
    write_json(out / "report.json", rep)
    return {**{k: rep.get(k) for k in METRICS}, "threshold_source": rep.get("threshold_source")}


# serve: the checkpoint behind the HTTP server, scored by the client, server stopped --------------------------

def _serve_run(ctx: Context, out: Path) -> dict[str, Any]:
    from .serving import serve_and_score

    records = load_records(ctx.heldout)[: ctx.cfg.serve.n_requests]
    text = serve_and_score(str(ctx.model_dir), ctx.engine().engine, records)
    (out / "serve.txt").write_text(text + "\n", encoding="utf-8")
    return {"requests": len(records), "log": text}


# rl: DistilledPRMScorer inside PRMRunner, shaped advantages per mode ------------------------------------------

def _rl_run(ctx: Context, out: Path) -> dict[str, Any]:
    from .rl import TRAINER_PRM_CONFIG, shaped_table

    test = load_records(ctx.heldout)
    picked = [r for r in (next((r for r in test if r.first_error == -1), None), next((r for r in test if r.first_error >= 1), None)) if r]
    if not picked:
        raise ValueError(f"{ctx.heldout}: the RL stage needs a held-out trajectory with first_error (-1 or >= 1)")
    engine = ctx.engine().engine
    table = shaped_table(engine, engine.tokenizer, picked)
    (out / "shaped_advantages.txt").write_text(table + "\n", encoding="utf-8")
    return {"trainer_config": TRAINER_PRM_CONFIG, "rollouts": [r.id for r in picked], "table": table}


# recalibrate: the held-out round, compared with the previous iteration's report -------------------------------

def _recal_history(ctx: Context) -> Path | None:
    return ctx.folder("recalibrate", ctx.iteration - 1) if ctx.iteration > 1 else None


def _recal_section(ctx: Context) -> dict[str, Any]:
    return {"settings": dataclasses.asdict(ctx.cfg.recalibrate), "adopt": ctx.cfg.adopt_calibration}


def _recal_inputs(ctx: Context) -> list[Path]:
    history = _recal_history(ctx)
    return _scoring_inputs(ctx) + ([history / "report.json"] if history else [])


def _recal_run(ctx: Context, out: Path) -> dict[str, Any]:
    from ..recalibrate import run_recalibration

    history = _recal_history(ctx)
    r = run_recalibration(ctx.model_dir, ctx.heldout, out, history=history, adopt=ctx.cfg.adopt_calibration,
                          config=ctx.cfg.recalibrate, engine=ctx.engine())
    c = r["calibration"]
    return {"auroc": r["auroc"], "ece": r["ece"], "mean_score": r["mean_score"], "processbench_f1": r["processbench_f1"],
            "agreement_heldout": r["agreement_heldout"], "drift": r["drift"], "redistill_advised": r["redistill_advised"],
            "history": str(history) if history else None, "previous": (r.get("previous") or {}).get("path"),
            "calibration": {k: c.get(k) for k in ("method", "ece_before", "ece_after", "improved", "adopted")},
            "audit_flags": (r.get("audits") or {}).get("flags", []), "plots": r["plots"]}


def _section(obj: Any) -> Callable[[Context], Any]:
    return lambda ctx: dataclasses.asdict(obj(ctx))


STAGES: list[Stage] = [
    Stage("data", _data_section, lambda ctx: [], _data_run),
    Stage("rollout", _section(rollout_config), _rollout_inputs, _rollout_run),
    Stage("label", _section(label_config), lambda ctx: [ctx.folder("rollout") / "rollouts.jsonl"], _label_run),
    Stage("train", _section(train_config), _train_inputs, _train_run),
    Stage("eval", lambda ctx: dataclasses.asdict(ctx.cfg.eval), _scoring_inputs, _eval_run),
    Stage("serve", lambda ctx: dataclasses.asdict(ctx.cfg.serve), _scoring_inputs, _serve_run, lambda ctx: ctx.cfg.serve.enabled),
    Stage("rl", lambda ctx: dataclasses.asdict(ctx.cfg.rl), _scoring_inputs, _rl_run, lambda ctx: ctx.cfg.rl.enabled),
    Stage("recalibrate", _recal_section, _recal_inputs, _recal_run),
]
