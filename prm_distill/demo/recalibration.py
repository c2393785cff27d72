"""The demo's recalibration stage: one `prm-distill recalibrate` round on the test split."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checkpoint import Sidecar
from ..metrics import fmt as f
from ..protocol import Item, StepScorer
from ..recalibrate import RecalibrateConfig, run_recalibration


class CachedScores:
    """A `StepScorer` memoising another's scores, so the recalibration round reuses the evaluation's
    test-split scores instead of scoring them again (a trajectory's scores do not depend on its batch)."""

    def __init__(self, engine: StepScorer) -> None:
        self.engine = engine
        self._memo: dict[tuple[str, tuple[str, ...]], list[float]] = {}

    @property
    def sidecar(self) -> Sidecar:
        return self.engine.sidecar

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def calibration(self) -> dict[str, Any] | None:
        return self.engine.calibration()

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        keys = [(q, tuple(steps)) for q, steps in items]
        todo = [k for k in dict.fromkeys(keys) if k not in self._memo]
        if todo:
            self._memo.update(zip(todo, self.engine.score([(q, list(steps)) for q, steps in todo])))
        return [list(self._memo[k]) for k in keys]


def recalibration_round(model_dir: str | Path, heldout: Path, out: Path, engine: StepScorer) -> str:
    """One round on the test split; the calibration is fitted and checked but not adopted (the test
    split must stay clean for later evaluations). Returns the printed lines."""
    t0 = time.time()
    r = run_recalibration(model_dir, heldout, out, engine=engine, config=RecalibrateConfig())
    c, a = r["calibration"], r.get("audits") or {}
    verb, pos = a.get("verbosity", {}), a.get("position_bias", {})
    t = c["params"].get("temperature") if isinstance(c.get("params"), dict) else None
    fitted = f"{c['method']}" + (f" T={t:.3f}" if t is not None else "")
    return "\n".join([
        f"[demo] recalibration round on the test split in {time.time() - t0:.0f}s (scores reused from the evaluation): auroc {f(r['auroc'])}, "
        f"ece {f(r['ece'])}, mean score {f(r['mean_score'])}, F1 {f(r['processbench_f1'])}, agreement with the labels {f(r['agreement_heldout'])}",
        f"[demo]   drift flags: {', '.join(r['drift']) or 'none'} (first round: no earlier report to compare with; later rounds pass --history)",
        f"[demo]   calibration: {fitted} fitted on half the trajectories, ECE {f(c['ece_before'])} -> {f(c['ece_after'])} on the other half; "
        f"{'it would be adopted with --adopt' if c['improved'] else 'it would not be adopted'} (not adopted here: the test split stays clean)",
        f"[demo]   audits: {', '.join(a.get('flags') or []) or 'no flag'}; padding ({verb.get('n_trajectories')} all-correct trajectories) raised "
        f"{', '.join(verb.get('raised_by') or []) or 'no aggregation'}; position slope {f(pos.get('slope'))}",
        f"[demo] recalibration report: {out / 'report.md'} ({out / 'report.json'}, plots {', '.join(r['plots'].values())})",
    ])
