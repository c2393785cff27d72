"""The drift rules on constructed histories: each flag raised just past its bound, not at it."""

import json
import os

import pytest

from prm_distill.recalibrate import drift
from prm_distill.recalibrate.config import DriftSettings
from prm_distill.recalibrate.report import deltas, newest_report, previous_entry

S = DriftSettings()  # auroc_drop 0.02, ece_rise 0.02, inflation_rise 0.02 with agreement change <= 0, label_shift_tv 0.1


def rep(**kw):
    base = {"auroc": 0.80, "ece": 0.10, "mean_score": 0.60, "agreement_heldout": 0.80, "agreement": 0.80, "agreement_source": "heldout"}
    base.update(kw)
    return base


def fresh(mean_score, agreement, bad=0.2, neutral=0.1, good=0.7):
    return {"mean_score": mean_score, "agreement": agreement, "label_distribution": {"bad": bad, "neutral": neutral, "good": good, "n": 100}}


@pytest.mark.parametrize("cur, raised", [(0.78, False), (0.7799, True), (0.81, False), (0.80, False), (0.5, True)])
def test_auroc_drop_at_the_boundary(cur, raised):
    out = drift.auroc_drop(rep(auroc=cur), rep(), S)
    assert out["raised"] is raised
    assert out["values"]["drop"] == pytest.approx(0.80 - cur)


@pytest.mark.parametrize("cur, raised", [(0.12, False), (0.1201, True), (0.05, False), (0.30, True)])
def test_ece_rise_at_the_boundary(cur, raised):
    assert drift.ece_rise(rep(ece=cur), rep(), S)["raised"] is raised


@pytest.mark.parametrize(
    "mean, agree, raised",
    [
        (0.62, 0.80, False),    # mean up by exactly 0.02: not more than the bound
        (0.6201, 0.80, True),   # up by more, agreement flat
        (0.6201, 0.70, True),   # up, agreement down
        (0.6201, 0.8001, False),  # up, but agreement up too: quality followed
        (0.70, 0.85, False),
        (0.55, 0.60, False),    # scores down: no inflation
    ],
)
def test_score_inflation_on_heldout(mean, agree, raised):
    out = drift.score_inflation(rep(mean_score=mean, agreement_heldout=agree), rep(), S)
    assert out["raised"] is raised and out["values"]["basis"] == "heldout"
    assert out["values"]["rise"] == pytest.approx(mean - 0.60) and out["values"]["agreement_change"] == pytest.approx(agree - 0.80)


def test_score_inflation_uses_fresh_rollouts_when_both_reports_have_them():
    prev = rep(fresh=fresh(0.60, 0.80))
    # held-out numbers unchanged, fresh rollouts: scores up 0.1 while the judge agrees less
    cur = rep(fresh=fresh(0.70, 0.75))
    out = drift.score_inflation(cur, prev, S)
    assert out["raised"] and out["values"]["basis"] == "fresh" and out["values"]["rise"] == pytest.approx(0.10)
    assert not drift.score_inflation(rep(fresh=fresh(0.70, 0.81)), prev, S)["raised"]
    # the previous report had no fresh rollouts: the held-out pair is compared
    out = drift.score_inflation(rep(mean_score=0.65, fresh=fresh(0.9, 0.1)), rep(), S)
    assert out["raised"] and out["values"]["basis"] == "heldout"


@pytest.mark.parametrize(
    "dist, raised",
    [((0.2, 0.1, 0.7), False), ((0.3, 0.1, 0.6), False), ((0.3001, 0.1, 0.5999), True), ((0.0, 0.0, 1.0), True)],
)
def test_label_shift_total_variation(dist, raised):
    prev = rep(fresh=fresh(0.6, 0.8, 0.2, 0.1, 0.7))
    cur = rep(fresh=fresh(0.6, 0.8, *dist))
    out = drift.label_shift(cur, prev, S)
    expected_tv = 0.5 * sum(abs(a - b) for a, b in zip(dist, (0.2, 0.1, 0.7)))
    assert out["raised"] is raised and out["values"]["total_variation"] == pytest.approx(expected_tv)


def test_label_shift_needs_fresh_rollouts_in_both_reports():
    out = drift.label_shift(rep(fresh=fresh(0.6, 0.8, 1.0, 0.0, 0.0)), rep(), S)
    assert not out["raised"] and out["note"].startswith("not evaluated")


def test_no_previous_report_raises_nothing_and_says_why():
    flags, details = drift.evaluate(rep(auroc=0.1, ece=0.9), None, S)
    assert flags == [] and set(details) == set(drift.FLAGS)
    assert all(d["note"] == "not evaluated: no previous report" for d in details.values())


def test_undefined_metrics_are_not_evaluated():
    out = drift.auroc_drop(rep(auroc=None), rep(), S)
    assert not out["raised"] and "undefined" in out["note"]
    assert not drift.auroc_drop(rep(auroc=float("nan")), rep(), S)["raised"]


def test_evaluate_lists_flags_in_order_and_bounds_are_configurable():
    prev = rep(fresh=fresh(0.6, 0.8))
    cur = rep(auroc=0.70, ece=0.20, fresh=fresh(0.7, 0.7, 0.5, 0.0, 0.5), sidecar_calibration_version=2)
    flags, details = drift.evaluate(cur, {**prev, "sidecar_calibration_version": 1}, S)
    assert flags == ["score_inflation", "auroc_drop", "ece_rise", "label_shift"]
    assert details["ece_rise"]["calibration_changed"] == {"previous_version": 1, "version": 2}
    loose = DriftSettings(auroc_drop=0.2, ece_rise=0.2, inflation_rise=0.2, label_shift_tv=0.5)
    assert drift.evaluate(cur, prev, loose)[0] == []


def test_newest_report_in_history(tmp_path):
    hist = tmp_path / "hist"
    (hist / "a").mkdir(parents=True)
    (hist / "a" / "report.json").write_text(json.dumps({"auroc": 0.7, "created_at": "2024-01-01T00:00:00+00:00"}))
    (hist / "b.json").write_text(json.dumps({"auroc": 0.8, "created_at": "2024-02-01T00:00:00+00:00"}))
    (hist / "junk.json").write_text("{not json")
    (hist / "other.json").write_text(json.dumps({"something": 1}))  # not a report
    (hist / "plain.json").write_text(json.dumps({"ece": 0.3}))  # no created_at: its mtime counts
    os.utime(hist / "plain.json", (0, 0))  # 1970: oldest
    path, found = newest_report(hist)
    assert path == hist / "b.json" and found["auroc"] == 0.8
    (hist / "out").mkdir()
    (hist / "out" / "report.json").write_text(json.dumps({"auroc": 0.1, "created_at": "2030-01-01T00:00:00+00:00"}))
    assert newest_report(hist)[0] == hist / "out" / "report.json"
    assert newest_report(hist, exclude=hist / "out")[0] == hist / "b.json"  # the current output folder is not history
    assert newest_report(hist, exclude=hist)[0] == hist / "out" / "report.json"  # output == history: nothing skipped
    assert newest_report(tmp_path / "missing") is None and newest_report(None) is None
    with pytest.raises(ValueError, match="must be a folder"):
        newest_report(hist / "b.json")


def test_deltas_and_previous_entry():
    prev = rep(fresh=fresh(0.5, 0.7))
    cur = rep(auroc=0.75, ece=0.13, fresh=fresh(0.6, 0.65), agreement=0.65, agreement_source="fresh")
    d = deltas(cur, prev)
    assert d["auroc"] == pytest.approx(-0.05) and d["ece"] == pytest.approx(0.03) and d["mean_score"] == pytest.approx(0.0)
    assert d["agreement"] is None  # fresh agreement is not compared with held-out agreement
    assert d["fresh_mean_score"] == pytest.approx(0.1) and d["fresh_agreement"] == pytest.approx(-0.05)
    entry = previous_entry("p.json", prev, cur)
    assert entry["values"]["auroc"] == 0.80 and entry["deltas"] == d
