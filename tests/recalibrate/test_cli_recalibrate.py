"""`prm-distill recalibrate` end to end on real tiny checkpoints: report files, exit codes, refusal,
fresh rollouts labelled by the offline arithmetic judge, adoption, bad input."""

import json
import math

import matplotlib.image
import numpy as np
import pytest

from prm_distill.cli import main
from prm_distill.labeling.judges.arithmetic import verify_steps
from prm_distill.metrics import step_auroc
from prm_distill.records import read_jsonl, write_jsonl
from prm_distill.serve.engine import PRMEngine
from prm_distill.synthetic import SyntheticConfig, generate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("reliability.png", "score_histogram.png", "position.png")


def recal(*args):
    # floors off: these tests are about the drift rules, the report and adoption; the tiny random
    # checkpoint ranks the held-out steps near chance (AUROC about 0.55), below the default floor
    return main(["recalibrate", *map(str, args), "audit.max_trajectories=6", "floor.min_auroc=null", "floor.min_f1=null"])


def test_a_first_round_below_a_floor_exits_3_naming_the_floor(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    out = tmp_path / "r"
    code = main(["recalibrate", "--model", str(tiny_checkpoint), "--heldout", str(synthetic_files["test"]), "--output", str(out),
                 "audit.max_trajectories=6", "floor.min_auroc=0.99"])
    rep = json.loads((out / "report.json").read_text())
    assert code == 3 and rep["floor"]["flags"] == ["auroc_floor"] and rep["drift"] == [] and rep["redistill_advised"] is True
    printed = capsys.readouterr().out
    assert "drift: no verdict: first round, nothing to compare with" in printed
    assert f"below the floor: auroc {rep['auroc']:.4f} < floor.min_auroc 0.99" in printed and "-> re-distillation advised (exit 3)" in printed


def test_report_files_keys_and_exit_0_without_history(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    out = tmp_path / "r1"
    sidecar_before = (tiny_checkpoint / "prm_distill.json").read_bytes()
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--output", out) == 0
    rep = json.loads((out / "report.json").read_text())
    for key in ("auroc", "ece", "mean_score", "processbench_f1", "drift", "calibration", "previous", "agreement", "audits"):
        assert key in rep
    assert rep["drift"] == [] and rep["previous"] is None and rep["redistill_advised"] is False
    for key in ("method", "params", "ece_before", "ece_after", "adopted"):
        assert key in rep["calibration"]
    assert rep["calibration"]["method"] == "temperature" and rep["calibration"]["adopted"] is False
    assert (tiny_checkpoint / "prm_distill.json").read_bytes() == sidecar_before  # no --adopt: untouched
    # numbers from first principles: the checkpoint has no calibration, so served = raw engine scores
    records = read_jsonl(synthetic_files["test"])
    scores = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu").score([(r.question, r.steps) for r in records])
    flat = [s for ss in scores for s in ss]
    assert rep["n_items"] == len(records) and rep["n_steps"] == len(flat)
    assert rep["mean_score"] == pytest.approx(float(np.mean(flat)), abs=1e-6)
    assert rep["auroc"] == pytest.approx(step_auroc(scores, [r.labels for r in records]), abs=1e-6)
    thr = json.loads(sidecar_before)["threshold"]
    pairs = [(s, y) for ss, r in zip(scores, records) for s, y in zip(ss, r.labels) if y is not None and y != 0.5]
    assert rep["agreement_heldout"] == pytest.approx(sum((s >= thr) == (y > 0.5) for s, y in pairs) / len(pairs))
    assert sum(rep["score_histogram"]["counts"]) == len(flat)
    md = (out / "report.md").read_text()
    assert "# PRM recalibration report" in md and "## Drift rules" in md and "auroc_drop" in md
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
        assert matplotlib.image.imread(out / name).ndim == 3  # decodes as an image
        assert f"]({name})" in md
    printed = capsys.readouterr().out
    assert "drift: no verdict: first round, nothing to compare with" in printed and "drift: none" not in printed  # issue 27
    assert str(out / "report.json") in printed and rep["drift_verdict"] == "no_verdict"


def test_exit_3_when_a_constructed_history_makes_a_flag_fire(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    first = tmp_path / "first"
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--output", first) == 0
    rep = json.loads((first / "report.json").read_text())
    history = tmp_path / "history"
    history.mkdir()
    # an earlier round that ranked the held-out steps 0.05 better
    older = {**rep, "auroc": rep["auroc"] + 0.05, "created_at": "2024-01-01T00:00:00+00:00"}
    (history / "round-0.json").write_text(json.dumps(older))
    out = tmp_path / "second"
    capsys.readouterr()
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--history", history, "--output", out) == 3
    rep2 = json.loads((out / "report.json").read_text())
    assert rep2["drift"] == ["auroc_drop"] and rep2["redistill_advised"] is True
    assert rep2["previous"]["path"] == str(history / "round-0.json")
    assert rep2["previous"]["deltas"]["auroc"] == pytest.approx(-0.05)
    assert rep2["previous"]["deltas"]["mean_score"] == pytest.approx(0.0, abs=1e-9)
    assert rep2["drift_details"]["auroc_drop"]["values"]["drop"] == pytest.approx(0.05)
    assert "re-distillation advised (exit 3)" in capsys.readouterr().out
    # the same history with an earlier round at the same AUROC: no flag, exit 0
    (history / "round-0.json").write_text(json.dumps({**rep, "created_at": "2024-01-01T00:00:00+00:00"}))
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--history", history, "--output", tmp_path / "third") == 0


def test_refuses_a_heldout_set_sharing_ids_with_the_training_data(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    out = tmp_path / "r"
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["train"], "--output", out) == 2
    err = capsys.readouterr().err
    n = len(read_jsonl(synthetic_files["train"]))
    assert f"shares {n} of its {n} ids with the model's training data" in err and "'train-0'" in err and "training_ids.txt" in err
    assert not (out / "report.json").exists()
    # one shared id among new ones is refused too, and named
    mixed = tmp_path / "mixed.jsonl"
    write_jsonl(read_jsonl(synthetic_files["test"]) + read_jsonl(synthetic_files["train"])[:1], mixed)
    assert recal("--model", tiny_checkpoint, "--heldout", mixed, "--output", out) == 2
    assert "shares 1 of its" in capsys.readouterr().err


def test_adopt_writes_only_an_improving_calibration(model_copy, synthetic_files, tmp_path):
    sidecar = model_copy / "prm_distill.json"
    assert recal("--model", model_copy, "--heldout", synthetic_files["test"], "--output", tmp_path / "a", "--adopt") in (0, 3)
    c = json.loads((tmp_path / "a" / "report.json").read_text())["calibration"]
    stored = json.loads(sidecar.read_text())["calibration"]
    assert c["adopted"] == (c["ece_after"] < c["ece_before"])
    assert (stored is not None) == c["adopted"]
    if c["adopted"]:
        assert stored["version"] == c["version"] == 1 and stored["params"] == pytest.approx(c["params"])
    # the same data again: the fit equals what is now served, so ECE cannot strictly improve
    before = sidecar.read_bytes()
    assert recal("--model", model_copy, "--heldout", synthetic_files["test"], "--output", tmp_path / "b", "--adopt") in (0, 3)
    c2 = json.loads((tmp_path / "b" / "report.json").read_text())["calibration"]
    assert c2["adopted"] is False and sidecar.read_bytes() == before


def test_isotonic_method(tiny_checkpoint, synthetic_files, tmp_path):
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--output", tmp_path / "iso", "--method", "isotonic") == 0
    c = json.loads((tmp_path / "iso" / "report.json").read_text())["calibration"]
    assert c["method"] == "isotonic" and len(c["params"]["x"]) == len(c["params"]["y"]) >= 1


def test_platt_method_fits_or_names_why_not_and_writes_nothing_it_cannot_fit(model_copy, synthetic_files, tmp_path):
    sidecar = model_copy / "prm_distill.json"
    before = sidecar.read_bytes()
    assert recal("--model", model_copy, "--heldout", synthetic_files["test"], "--output", tmp_path / "platt", "--method", "platt", "--adopt") == 0
    rep = json.loads((tmp_path / "platt" / "report.json").read_text())
    c = rep["calibration"]
    assert c["method"] == "platt"
    if c["params"] is None:   # the tiny model ranks the fit split's bad steps above its good ones (it does today)
        assert c["ece_after"] is None and "rank bad steps above good ones" in c["error"] and c["adopted"] is False
        assert sidecar.read_bytes() == before                        # --adopt wrote nothing
    else:
        assert c["params"]["slope"] > 0 and math.isfinite(c["params"]["bias"])
        assert c["adopted"] == (c["ece_after"] < c["ece_before"])


def _fresh_files(tmp_path):
    rollouts = tmp_path / "rollouts.jsonl"
    recs = generate(SyntheticConfig(n=30, seed=77, id_prefix="fresh"))
    rollouts.write_text("".join(json.dumps({"id": r.id, "question": r.question, "steps": r.steps}) + "\n" for r in recs))
    label_cfg = tmp_path / "label.yaml"
    label_cfg.write_text("mode: prefix\nverifier:\n  alone: true   # the offline arithmetic judge: no model, no server\n")
    return recs, rollouts, label_cfg


def test_fresh_rollouts_are_labelled_by_the_judge_and_drive_agreement_and_label_shift(tiny_checkpoint, synthetic_files, tmp_path):
    recs, rollouts, label_cfg = _fresh_files(tmp_path)
    out = tmp_path / "f1"
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--fresh", rollouts, "--label-config", label_cfg, "--output", out) == 0
    rep = json.loads((out / "report.json").read_text())
    fresh = rep["fresh"]
    assert fresh["n_rollouts"] == fresh["n_sampled"] == 30 and rep["agreement_source"] == "fresh"
    # the arithmetic verifier's votes, computed here directly: 1 for a true equation, 0 for a false one
    votes = [verify_steps(r.steps) for r in recs]
    flat = [v for vs in votes for v in vs if v is not None]
    dist = fresh["label_distribution"]
    assert dist["n"] == len(flat) and dist["bad"] == pytest.approx(flat.count(0.0) / len(flat)) and dist["neutral"] == 0.0
    assert 0 < dist["bad"] < 0.5
    # agreement with the judge: student P >= threshold vs judge label > 0.5 on the judged steps
    scores = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu").score([(r.question, r.steps) for r in recs])
    thr = rep["threshold"]
    pairs = [(s, v) for ss, vs in zip(scores, votes) for s, v in zip(ss, vs) if v is not None]
    assert fresh["agreement"] == pytest.approx(sum((s >= thr) == (v > 0.5) for s, v in pairs) / len(pairs), abs=1e-9)
    assert rep["agreement"] == fresh["agreement"]
    assert fresh["mean_score"] == pytest.approx(float(np.mean([s for ss in scores for s in ss])), abs=1e-6)
    assert len(read_jsonl(out / "fresh_labels.jsonl")) == 30

    # an earlier round whose judge saw 0.15 more bad steps: total variation 0.15 > 0.1
    history = tmp_path / "hist"
    history.mkdir()
    shifted = {"bad": dist["bad"] + 0.15, "neutral": 0.0, "good": dist["good"] - 0.15, "n": dist["n"]}
    older = {**rep, "created_at": "2024-01-01T00:00:00+00:00", "fresh": {**fresh, "label_distribution": shifted}}
    (history / "old.json").write_text(json.dumps(older))
    out2 = tmp_path / "f2"
    assert recal("--model", tiny_checkpoint, "--heldout", synthetic_files["test"], "--fresh", rollouts, "--label-config", label_cfg,
                 "--history", history, "--output", out2) == 3
    rep2 = json.loads((out2 / "report.json").read_text())
    assert rep2["drift"] == ["label_shift"]
    assert rep2["drift_details"]["label_shift"]["values"]["total_variation"] == pytest.approx(0.15)
    assert rep2["drift_details"]["score_inflation"]["values"]["basis"] == "fresh"


def test_a_model_built_to_reward_length_is_flagged_by_the_audit(position_models, correct_heldout, tmp_path):
    out = tmp_path / "len"
    assert recal("--model", position_models["rewards_length"], "--heldout", correct_heldout, "--output", out) == 0  # audits inform by default
    rep = json.loads((out / "report.json").read_text())
    assert rep["audits"]["flags"] == ["rewards_padding"] and rep["drift"] == [] and rep["training_ids_checked"] is False
    short = rep["audits"]["shortcuts"]  # dropping the working moves the final step earlier: this model pays it less
    assert short["n_trajectories"] > 0 and not short["flag"] and short["kinds"]["answer_only"]["aggregations"]["last"]["delta"] < 0
    assert f"- shortcuts ({short['n_trajectories']} all-correct trajectories of 3 or more steps)" in (out / "report.md").read_text()
    assert main(["recalibrate", "--model", str(position_models["rewards_length"]), "--heldout", str(correct_heldout), "--output", str(tmp_path / "len2"),
                 "drift.include_audit_flags=true", "audit.max_trajectories=6"]) == 3
    assert json.loads((tmp_path / "len2" / "report.json").read_text())["drift"] == ["rewards_padding"]
    assert recal("--model", position_models["neutral"], "--heldout", correct_heldout, "--output", tmp_path / "neutral") == 0
    assert json.loads((tmp_path / "neutral" / "report.json").read_text())["audits"]["flags"] == []


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_model", "model folder not found"),
        ("not_a_checkpoint", "is not a prm_distill checkpoint"),
        ("missing_heldout", "data file not found"),
        ("empty_heldout", "has no records"),
        ("unlabelled_heldout", "none of its 2 records has a step label"),
        ("malformed_heldout", "heldout.jsonl:2: invalid JSON"),
        ("bad_labels", "heldout.jsonl:1: field 'labels[0]'"),
        ("fresh_without_config", "--fresh needs --label-config"),
        ("history_is_a_file", "--history must be a folder"),
        ("bad_override", "drift.auroc_dropp: unknown key"),
    ],
)
def test_bad_input_gives_a_clear_error(case, message, tiny_checkpoint, tmp_path, capsys):
    q = {"question": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "The answer is 5."]}
    good = _write(tmp_path / "good.jsonl", json.dumps({"id": "g", **q, "labels": [1.0, 1.0]}) + "\n")
    model, heldout, extra = tiny_checkpoint, good, []
    if case == "missing_model":
        model = tmp_path / "nope"
    elif case == "not_a_checkpoint":
        model = tmp_path
    elif case == "missing_heldout":
        heldout = tmp_path / "absent.jsonl"
    elif case == "empty_heldout":
        heldout = _write(tmp_path / "heldout.jsonl", "")
    elif case == "unlabelled_heldout":
        heldout = _write(tmp_path / "heldout.jsonl", "".join(json.dumps({"id": i, **q}) + "\n" for i in "ab"))
    elif case == "malformed_heldout":
        heldout = _write(tmp_path / "heldout.jsonl", json.dumps({"id": "a", **q, "labels": [1, 1]}) + "\n{oops\n")
    elif case == "bad_labels":
        heldout = _write(tmp_path / "heldout.jsonl", json.dumps({"id": "a", **q, "labels": [2.0, 1.0]}) + "\n")
    elif case == "fresh_without_config":
        extra = ["--fresh", str(good)]
    elif case == "history_is_a_file":
        extra = ["--history", str(good)]
    elif case == "bad_override":
        extra = ["drift.auroc_dropp=0.1"]
    out = tmp_path / "out"
    rc = main(["recalibrate", "--model", str(model), "--heldout", str(heldout), "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and rc != 3
    assert err.startswith("prm-distill recalibrate: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (out / "report.json").exists()


def test_help_config_lists_every_setting(capsys):
    assert main(["recalibrate", "--help-config"]) == 0
    text = capsys.readouterr().out
    for key in ("calibration.method", "calibration.fit_fraction", "drift.auroc_drop", "drift.label_shift_tv", "fresh.sample_size",
                "audit.padding_tolerance", "audit.position_slope_bound"):
        assert key in text
