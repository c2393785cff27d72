"""Training controls used by the CPU recipe: an equal-schedule early stop, snapshots for learning
curves (full checkpoints with a dev threshold), and a bounded dev sample of whole questions."""

from __future__ import annotations

from prm_distill.checkpoint import read_sidecar
from prm_distill.config import load_config
from prm_distill.serve import PRMEngine
from prm_distill.train import TrainJobConfig, train


def test_stop_at_step_keeps_the_long_schedule_and_snapshots_are_servable(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = tmp_path / "m"
    overrides = train_overrides(tiny_backbone, synthetic_files, out, **{
        "optim.max_steps": 8, "optim.stop_at_step": 3, "optim.snapshot_steps": 2, "optim.warmup_ratio": 0.0,
        "optim.lr_scheduler": "linear", "data.dev_limit": 5,
    })
    summary = train(load_config(TrainJobConfig, None, overrides))
    assert summary["steps"] == 3
    # linear decay over 8 steps from 1e-3: after step 3 the rate is 1e-3 * (8 - 3) / 8, not 0 (a 3-step schedule)
    last = [h for h in summary["history"] if "lr" in h][-1]
    assert abs(last["lr"] - 1e-3 * 5 / 8) < 1e-12
    assert summary["n_dev_records"] <= 5 + 3  # whole questions until the limit is reached
    snap = out / "snapshots" / "step-2"
    side = read_sidecar(snap)
    assert side.training["step"] == 2 and side.training["snapshot"] is True and side.threshold is not None
    # a snapshot carries the run's training ids, so recalibrate's held-out check works on it as on the export
    assert (snap / "training_ids.txt").read_text() == (out / "training_ids.txt").read_text()
    assert (snap / "training_ids.txt").read_text().count("\n") == 48  # the synthetic train split's 48 records
    assert len(PRMEngine.from_checkpoint(snap, device="cpu").score([("What is 1 + 1?", ["1 + 1 = 2.", "So 2."])])[0]) == 2
