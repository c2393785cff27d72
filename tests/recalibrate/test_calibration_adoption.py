"""Fitting, the adoption check on a separate split, versioned sidecar writes, concurrent readers."""

import json
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

from prm_distill import calibration as cal
from prm_distill.checkpoint import CalibrationWatch, write_calibration
from prm_distill.metrics import expected_calibration_error
from prm_distill.recalibrate.adoption import fit_and_check, maybe_adopt
from prm_distill.recalibrate.config import CalibrationSettings
from prm_distill.recalibrate.stats import split_ids
from prm_distill.records import Trajectory


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def test_temperature_scaling_recovers_a_known_temperature():
    rng = np.random.default_rng(0)
    t0 = 2.5
    z = rng.normal(0.0, 1.5, 50_000)            # true logits: P(good) = sigmoid(z)
    y = (rng.random(z.size) < sigmoid(z)).astype(float)
    reported = sigmoid(z * t0)                   # an overconfident model: logits scaled by T0
    t = cal.fit_temperature(reported, y)
    assert t == pytest.approx(t0, rel=0.03)
    fitted = cal.apply(reported, {"method": "temperature", "params": {"temperature": t}})
    assert expected_calibration_error([fitted], [y]) < 0.3 * expected_calibration_error([reported], [y])


def test_isotonic_removes_a_monotone_miscalibration():
    rng = np.random.default_rng(1)
    q = rng.random(40_000)                       # true P(good), uniform
    y = (rng.random(q.size) < q).astype(float)
    p = q**2                                      # reported: a monotone distortion
    # binned ECE of p = q^2 is about E|q - q^2| = 1/2 - 1/3 = 1/6
    before = expected_calibration_error([p[20_000:]], [y[20_000:]])
    assert before == pytest.approx(1 / 6, abs=0.01)
    iso = cal.fit("isotonic", p[:20_000], y[:20_000])   # fitted on one half, checked on the other
    after = expected_calibration_error([cal.apply(p[20_000:], iso)], [y[20_000:]])
    assert after < 0.02


def test_platt_undoes_the_shift_that_class_balance_leaves_and_temperature_cannot():
    # Class balance with bad steps 1/9 of the data weights a bad step 8 times a good one; the optimum
    # of the weighted loss is then sigmoid(z - ln 8) for true logit z (odds divided by 8), here also
    # scaled by 1.5: reported logit r = 1.5 z - ln 8, so z = r / 1.5 + ln(8) / 1.5.
    rng = np.random.default_rng(2)
    z = rng.normal(1.5, 1.5, 60_000)
    y = (rng.random(z.size) < sigmoid(z)).astype(float)
    reported = sigmoid(1.5 * z - np.log(8.0))
    fit_p, fit_y, test_p, test_y = reported[:30_000], y[:30_000], reported[30_000:], y[30_000:]
    platt = cal.fit("platt", fit_p, fit_y)
    assert platt["params"]["slope"] == pytest.approx(1 / 1.5, rel=0.05)
    assert platt["params"]["bias"] == pytest.approx(np.log(8.0) / 1.5, rel=0.05)
    before = expected_calibration_error([test_p], [test_y])
    after_platt = expected_calibration_error([cal.apply(test_p, platt)], [test_y])
    after_temp = expected_calibration_error([cal.apply(test_p, cal.fit("temperature", fit_p, fit_y))], [test_y])
    assert before > 0.2 and after_platt < 0.02
    assert after_temp > 5 * after_platt                  # one parameter through the origin cannot shift
    assert cal.describe({**platt, "version": 3}).startswith("platt slope=0.6")


@pytest.mark.parametrize("params, message", [
    ({"slope": 0.0, "bias": 1.0}, "slope"),
    ({"slope": -1.0, "bias": 1.0}, "slope"),
    ({"slope": 1.0, "bias": float("nan")}, "bias"),
    ({"slope": True, "bias": 0.0}, "slope"),
    ({"slope": 1.0}, "bias"),
])
def test_a_malformed_platt_calibration_is_refused_by_name(params, message):
    with pytest.raises(cal.CalibrationError, match=message):
        cal.validate({"method": "platt", "params": params}, "sidecar")


@pytest.mark.parametrize("method, name", [("temperature", "temperature"), ("platt", "Platt slope")])
def test_scores_that_rank_bad_steps_above_good_ones_are_refused(method, name):
    p = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1] * 50)
    y = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0] * 50)
    with pytest.raises(cal.CalibrationError, match=f"rank bad steps above good ones; no positive {name} fits"):
        cal.fit(method, p, y)


def test_platt_on_an_unshifted_model_is_temperature_scaling():
    # Reported logit 2.5 z with no shift: the best Platt map is slope 1/2.5 and bias 0, which is the
    # temperature 2.5 (one fitter serves both; the bias is the only difference).
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 1.5, 50_000)
    y = (rng.random(z.size) < sigmoid(z)).astype(float)
    reported = sigmoid(2.5 * z)
    platt = cal.fit("platt", reported, y)["params"]
    assert platt["slope"] == pytest.approx(1 / 2.5, rel=0.03)
    assert abs(platt["bias"]) < 0.03
    assert cal.fit_temperature(reported, y) == pytest.approx(1 / platt["slope"], rel=0.03)


def test_separable_scores_fit_a_sharp_temperature_without_overflow():
    # Every good step scored above every bad one, hard labels: the cross-entropy falls as T -> 0, so the
    # fit sharpens the scores to (nearly) the labels instead of failing or overflowing.
    p = np.array([0.6, 0.7, 0.8, 0.4, 0.3, 0.2] * 20)
    y = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0] * 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = cal.fit_temperature(p, y)
    sharp = cal.apply(p, {"method": "temperature", "params": {"temperature": t}})
    assert 0 < t < 0.1
    assert np.all(np.abs(sharp - y) < 0.01)


def _records_and_scores(n, fit_ids, fit_scale, eval_scale, seed=0):
    """Trajectories of 10 steps whose labels are drawn from q; reported raw score = sigmoid(scale * logit q),
    with one scale on the fit split and another on the evaluation split."""
    rng = np.random.default_rng(seed)
    records, scores = [], []
    for i in range(n):
        rid = f"h{i}"
        q = sigmoid(rng.normal(0, 1.2, 10))
        labels = (rng.random(10) < q).astype(float).tolist()
        scale = fit_scale if rid in fit_ids else eval_scale
        records.append(Trajectory(id=rid, question="q?", steps=[f"s{k}" for k in range(10)], labels=labels))
        scores.append(sigmoid(scale * np.log(q / (1 - q))).tolist())
    return records, scores


def test_split_is_by_trajectory_seeded_and_independent_of_order():
    ids = [f"h{i}" for i in range(101)]
    fit, ev = split_ids(ids, 0.5, 3)
    assert fit | ev == set(ids) and not fit & ev and len(fit) == round(0.5 * 101)
    assert split_ids(reversed(ids), 0.5, 3) == (fit, ev)
    assert split_ids(ids, 0.5, 4) != (fit, ev)
    assert all(len(part) == 1 for part in split_ids(["a", "b"], 0.01, 0))


def test_adoption_refused_when_ece_gets_worse_on_the_separate_split(model_copy):
    settings = CalibrationSettings(method="temperature", fit_fraction=0.5, seed=0)
    ids = [f"h{i}" for i in range(400)]
    fit_ids, _ = split_ids(ids, 0.5, 0)
    # fit split overconfident (scale 3), evaluation split calibrated: the fitted T ~ 3 makes it underconfident
    records, scores = _records_and_scores(400, fit_ids, fit_scale=3.0, eval_scale=1.0)
    res = fit_and_check(records, scores, None, settings)
    assert res["params"]["temperature"] == pytest.approx(3.0, rel=0.1)
    assert res["ece_before"] < 0.03 and res["ece_after"] > res["ece_before"] + 0.05 and not res["improved"]
    sidecar = model_copy / "prm_distill.json"
    before = sidecar.read_bytes()
    out = maybe_adopt(model_copy, res, adopt=True)
    assert out["adopted"] is False and out["version"] is None and "would not improve" in out["reason"]
    assert sidecar.read_bytes() == before  # byte-identical


def test_adoption_refused_when_the_sidecar_is_already_calibrated(model_copy):
    """Same data twice: the second fit equals what is served, ECE does not strictly improve."""
    settings = CalibrationSettings()
    ids = [f"h{i}" for i in range(200)]
    records, scores = _records_and_scores(200, set(ids), fit_scale=2.0, eval_scale=2.0)
    first = maybe_adopt(model_copy, fit_and_check(records, scores, None, settings), adopt=True)
    assert first["adopted"] and first["version"] == 1
    served = CalibrationWatch(model_copy).current()
    before = (model_copy / "prm_distill.json").read_bytes()
    second = maybe_adopt(model_copy, fit_and_check(records, scores, served, settings), adopt=True)
    assert second["ece_after"] == pytest.approx(second["ece_before"], abs=1e-12) and second["adopted"] is False
    assert (model_copy / "prm_distill.json").read_bytes() == before


def test_adoption_writes_versions_and_the_watch_sees_them(model_copy):
    settings = CalibrationSettings()
    ids = [f"h{i}" for i in range(300)]
    watch = CalibrationWatch(model_copy)
    assert watch.current() is None
    records, scores = _records_and_scores(300, set(ids), fit_scale=3.0, eval_scale=3.0)
    res = fit_and_check(records, scores, None, settings)
    assert res["improved"] and res["ece_after"] < res["ece_before"]
    not_asked = maybe_adopt(model_copy, dict(res), adopt=False)
    assert not_asked["adopted"] is False and "rerun with --adopt" in not_asked["reason"] and watch.current() is None
    res = fit_and_check(records, scores, None, settings)
    assert maybe_adopt(model_copy, res, adopt=True)["version"] == 1
    v1 = watch.current()
    assert v1["version"] == 1 and v1["params"]["temperature"] == pytest.approx(3.0, rel=0.1)
    # the policy changed: now the raw scores are overconfident by 1.5 only, so T ~ 3 is too much
    records, scores = _records_and_scores(300, set(ids), fit_scale=1.5, eval_scale=1.5, seed=1)
    res = fit_and_check(records, scores, v1, settings)
    assert res["improved"]
    assert maybe_adopt(model_copy, res, adopt=True)["version"] == 2
    v2 = watch.current()
    assert v2["version"] == 2 and v2["params"]["temperature"] == pytest.approx(1.5, rel=0.1)
    assert json.loads((model_copy / "prm_distill.json").read_text())["calibration"]["version"] == 2


READER = textwrap.dedent("""
    import json, sys, time
    path, stop = sys.argv[1], sys.argv[2]
    import os
    reads, bad, last, backwards = 0, [], 0, 0
    while True:
        done = os.path.exists(stop)  # one more read after the writer finished
        try:
            data = json.loads(open(path, encoding="utf-8").read())
            c = data["calibration"]
            v = c["version"] if c else 0
            if c and c["method"] != "temperature":
                bad.append("method")
            backwards += v < last
            last = max(last, v)
        except Exception as e:
            bad.append(repr(e)[:200])
        reads += 1
        if done:
            break
    print(json.dumps({"reads": reads, "bad": bad[:5], "n_bad": len(bad), "last": last, "backwards": backwards}))
""")


def test_a_concurrent_reader_never_sees_a_half_written_sidecar(model_copy, tmp_path):
    """Another process reads the sidecar in a tight loop while this one writes 60 calibrations."""
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(model_copy / "prm_distill.json"), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        for k in range(60):
            write_calibration(model_copy, {"method": "temperature", "params": {"temperature": 1.0 + k / 10}})
    finally:
        stop.write_text("")
        out, _ = reader.communicate(timeout=30)
    res = json.loads(out)
    assert res["reads"] > 60 and res["n_bad"] == 0, res
    assert res["backwards"] == 0 and res["last"] == 60
    assert CalibrationWatch(model_copy).current()["version"] == 60
