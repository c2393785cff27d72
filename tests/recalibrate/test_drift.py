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


# Floors: absolute, so a first round has them too (issue 27: a first round said "drift: none" at AUROC 0.54 / F1 0.00)

FIRST_ROUND = "drift: no verdict: first round, nothing to compare with (--history: a folder of earlier reports)"


@pytest.mark.parametrize("auroc, f1, raised", [
    (0.54, 0.0, ["auroc_floor", "f1_floor"]),  # the model
    (0.6, 0.05, []),  # exactly at the floors: not below them
    (0.5999, 0.05, ["auroc_floor"]),
    (0.9, 0.0499, ["f1_floor"]),
])
def test_floors_at_the_boundary(auroc, f1, raised):
    flags, details = drift.floors(rep(auroc=auroc, processbench_f1=f1))
    assert flags == raised
    assert details["auroc_floor"]["values"] == {"auroc": auroc, "min_auroc": 0.6}
    assert details["f1_floor"]["values"] == {"processbench_f1": f1, "min_f1": 0.05}


def test_a_floor_set_to_null_or_a_metric_undefined_is_not_evaluated():
    from prm_distill.recalibrate.config import FloorSettings

    flags, details = drift.floors(rep(auroc=0.3, processbench_f1=float("nan")), FloorSettings(min_auroc=None))
    assert flags == []
    assert details["auroc_floor"]["note"] == "not evaluated: floor.min_auroc is null (off)"
    assert details["f1_floor"]["note"] == "not evaluated: processbench_f1 is undefined on the held-out set"
    with pytest.raises(ValueError, match="min_f1 must lie in"):
        FloorSettings(min_f1=1.5)


def _round(current, previous=None):
    """The report fields `verdict` reads, as run_recalibration fills them."""
    flags, details = drift.evaluate(current, previous, S)
    below, floor_details = drift.floors(current)
    out = {**current, "previous": {"path": "old.json"} if previous else None, "drift": flags, "drift_details": details,
           "floor": {"flags": below, "details": floor_details}}
    return {**out, "drift_verdict": drift.drift_verdict(out)}


def test_a_first_round_gives_no_drift_verdict_and_the_floor_speaks():
    r = _round(rep(auroc=0.54, processbench_f1=0.0))
    assert r["drift"] == [] and r["drift_verdict"] == "no_verdict"
    assert drift.verdict(r) == (f"{FIRST_ROUND}\n"
                                "below the floor: auroc 0.5400 < floor.min_auroc 0.6; processbench_f1 0.0000 < floor.min_f1 0.05\n"
                                "-> re-distillation advised (exit 3)")
    good = _round(rep(auroc=0.8, processbench_f1=0.4))
    assert drift.verdict(good) == (f"{FIRST_ROUND}\n"
                                   "floor: met: auroc 0.8000 >= floor.min_auroc 0.6; processbench_f1 0.4000 >= floor.min_f1 0.05\n"
                                   "-> nothing flagged, but no drift verdict either: a verdict needs an earlier report")


def test_with_a_previous_report_the_drift_verdict_is_given():
    same = _round(rep(processbench_f1=0.4), rep(processbench_f1=0.4))
    assert same["drift_verdict"] == "none"
    assert drift.verdict(same).splitlines()[0] == "drift: none since the previous report"
    assert drift.verdict(same).splitlines()[-1] == "-> no re-distillation needed"
    dropped = _round(rep(auroc=0.7, processbench_f1=0.4), rep(processbench_f1=0.4))  # 0.80 -> 0.70
    assert dropped["drift_verdict"] == "flagged" and drift.verdict(dropped).splitlines()[0] == "drift: auroc_drop"
    assert drift.verdict(dropped).splitlines()[-1] == "-> re-distillation advised (exit 3)"
    undefined = _round({"auroc": None, "processbench_f1": 0.4}, {"auroc": 0.8})
    assert undefined["drift_verdict"] == "no_verdict"
    assert drift.verdict(undefined).splitlines()[0] == "drift: no verdict: no rule could be evaluated against the previous report (see drift_details)"
