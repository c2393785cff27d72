"""The command line as users call it: eval, score, train config help, bad input."""

import json

import pytest

from prm_distill.cli import main
from prm_distill.records import read_jsonl

REPORT_KEYS = {"processbench_f1", "acc_erroneous", "acc_correct", "threshold", "auroc", "step_accuracy", "ece", "mean_score", "n_items", "n_steps"}


def test_eval_reports_overall_and_per_file(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    out = tmp_path / "report.json"
    rc = main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--data", str(synthetic_files["dev"]),
               "--format", "jsonl", "--threshold", "0.5", "--output", str(out), "--device", "cpu"])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert REPORT_KEYS <= set(rep)
    assert set(rep["files"]) == {str(synthetic_files["test"]), str(synthetic_files["dev"])}
    for per in rep["files"].values():
        assert REPORT_KEYS <= set(per) and per["threshold"] == 0.5
    n_test, n_dev = len(read_jsonl(synthetic_files["test"])), len(read_jsonl(synthetic_files["dev"]))
    assert rep["n_items"] == n_test + n_dev
    assert rep["files"][str(synthetic_files["test"])]["n_items"] == n_test
    assert rep["n_steps"] == sum(len(r.steps) for f in ("test", "dev") for r in read_jsonl(synthetic_files[f]))
    assert "processbench_f1" in capsys.readouterr().out


def test_eval_threshold_sources_and_limit(tiny_checkpoint, synthetic_files, tmp_path):
    out = tmp_path / "r.json"
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--limit", "5", "--output", str(out)]) == 0
    rep = json.loads(out.read_text())
    sidecar = json.loads((tiny_checkpoint / "prm_distill.json").read_text())
    assert rep["n_items"] == 5 and rep["threshold"] == pytest.approx(sidecar["threshold"]) and rep["threshold_source"].startswith("checkpoint")
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--dev", str(synthetic_files["dev"]),
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["threshold_source"].startswith("dev")


def test_eval_limit_is_a_seeded_sample_not_the_first_items(tiny_checkpoint, tmp_path):
    """A file sorted by label (ProcessBench's first ~45 GSM8K items all have an error): the first 4 would be one class."""
    from prm_distill.records import Trajectory, write_jsonl

    recs = [Trajectory(id=f"e{i}", question=f"What is {i} + 1?", steps=[f"{i} + 1 = {i + 3}."], labels=[0.0]) for i in range(20)]
    recs += [Trajectory(id=f"c{i}", question=f"What is {i} + 2?", steps=[f"{i} + 2 = {i + 2}."], labels=[1.0]) for i in range(20)]
    write_jsonl(recs, tmp_path / "sorted.jsonl")
    out = tmp_path / "r.json"
    args = ["eval", "--model", str(tiny_checkpoint), "--data", str(tmp_path / "sorted.jsonl"), "--limit", "8", "--threshold", "0.5", "--output", str(out)]
    assert main(args) == 0
    first = json.loads(out.read_text())
    assert first["n_items"] == 8 and first["acc_correct"] is not None and first["acc_erroneous"] is not None  # both classes drawn
    assert main(args) == 0 and json.loads(out.read_text()) == first  # seeded: the same sample again


def _quality_py():
    """benchmarks/quality.py as a module (it is a script, not part of the package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("quality", Path(__file__).resolve().parents[1] / "benchmarks" / "quality.py")
    quality = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quality)
    return quality


def _two_item_processbench(tmp_path):
    """A ProcessBench file of one erroneous (first error at step 0) and one correct solution."""
    bench = tmp_path / "pb.json"
    bench.write_text(json.dumps([
        {"id": "a", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 6.", "So 6."], "final_answer_correct": False, "label": 0},
        {"id": "b", "problem": "What is 2 + 2?", "steps": ["2 + 2 = 4.", "So 4."], "final_answer_correct": True, "label": -1}]))
    return bench


def test_eval_dev_and_quality_py_choose_the_same_threshold_from_the_same_dev_files(tiny_checkpoint, synthetic_files, tmp_path):
    from prm_distill.evaluate import DEV_LIMIT

    quality = _quality_py()
    cap = json.loads((tiny_checkpoint / "prm_distill.json").read_text())["verifier"]["cap"]
    res = quality.evaluate_checkpoint(str(tiny_checkpoint), [str(synthetic_files["dev"])], [], DEV_LIMIT, cap)
    out = tmp_path / "r.json"
    for extra, variant in (([], "composed"), (["--no-verifier"], "student")):
        assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--dev", str(synthetic_files["dev"]),
                     "--output", str(out), *extra]) == 0
        assert json.loads(out.read_text())["threshold"] == res["thresholds"][variant]
    from prm_distill.cli import build_parser

    assert build_parser().parse_args(["eval", "--model", "m", "--data", "d"]).dev_limit == DEV_LIMIT  # eval's default is quality.py's

    # --other-dev: thresholds also chosen on other files, by the same rule as `eval --dev` on those files,
    # and the one scoring of the test items read with them (the same files give the same report).
    bench = _two_item_processbench(tmp_path)
    both = quality.evaluate_checkpoint(str(tiny_checkpoint), [str(synthetic_files["dev"])], [str(bench)], DEV_LIMIT, cap,
                                       other_devs={"same": [str(synthetic_files["dev"])], "other": [str(synthetic_files["test"])]})
    assert both["other_devs"]["same"]["thresholds"] == both["thresholds"] and both["other_devs"]["same"]["test"] == both["test"]
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--dev", str(synthetic_files["test"]),
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["threshold"] == both["other_devs"]["other"]["thresholds"]["composed"]
    t = both["other_devs"]["other"]["thresholds"]["composed"]
    assert both["other_devs"]["other"]["test"]["pb"]["composed"]["threshold"] == t
    # threshold transfer: an other dev split read at its own threshold is its own report; read at the main
    # dev files' threshold it is what `eval --threshold` gives on that file at that threshold
    other = both["other_devs"]["other"]
    assert set(other["dev_at"]) == {"dev", "same", "other"} and other["dev_at"]["other"] == other["dev"]["composed"]
    assert other["dev_at"]["same"] == other["dev_at"]["dev"]  # the same files as the main dev: the same threshold
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--threshold",
                 str(both["thresholds"]["composed"]), "--output", str(out)]) == 0
    fixed = json.loads(out.read_text())
    assert other["dev_at"]["dev"]["threshold"] == both["thresholds"]["composed"]
    assert other["dev_at"]["dev"]["processbench_f1"] == fixed["processbench_f1"] and other["dev_at"]["dev"]["auroc"] == fixed["auroc"]



def test_quality_py_learning_curve_carries_the_threshold_transfer_of_every_snapshot(tiny_checkpoint, synthetic_files, tmp_path):
    """The threshold-source rule (docs/results.md) is judged on the snapshots too: each curve row holds every
    other dev split's F1 at every source's threshold, the same figures the checkpoint's own report gives."""
    import shutil

    quality = _quality_py()
    bench = _two_item_processbench(tmp_path)
    shutil.copytree(tiny_checkpoint, tmp_path / "snapshots" / "step-3")  # a snapshot with the final weights: equal figures
    out = tmp_path / "q.json"
    assert quality.main(["--model", str(tiny_checkpoint), "--dev", str(synthetic_files["dev"]), "--test", str(bench),
                         "--other-dev", f"other={synthetic_files['test']}", "--snapshots", str(tmp_path / "snapshots"),
                         "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    snap, final = res["curve"]
    at = res["other_devs"]["other"]["dev_at"]
    for row in (snap, final):
        assert row["other-dev@dev/threshold"] == res["thresholds"]["composed"] == at["dev"]["threshold"]
        assert row["other-dev@dev/processbench_f1"] == at["dev"]["processbench_f1"]
        assert row["other-dev@other/processbench_f1"] == at["other"]["processbench_f1"] == res["other_devs"]["other"]["dev"]["composed"]["processbench_f1"]


def test_position_profile_in_eval_and_quality_py_counts_every_supervised_step(tiny_checkpoint, synthetic_files, tmp_path):
    """Both reports carry the composed scores' mean by step position, over every good and bad step of the file
    (positions from 8 on pooled), and the two agree on the same file."""
    from prm_distill.evaluate import DEV_LIMIT

    recs = read_jsonl(synthetic_files["test"])
    counts = [[0, 0] for _ in range(9)]
    for r in recs:
        for i, lab in enumerate(r.labels or []):
            if lab is not None and lab != 0.5:
                counts[min(i, 8)][0 if lab > 0.5 else 1] += 1
    assert sum(g + b for g, b in counts) > 0
    out = tmp_path / "r.json"
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--threshold", "0.5", "--output", str(out)]) == 0
    prof = json.loads(out.read_text())["position_profile"]
    assert [[row["n_good"], row["n_bad"]] for row in prof] == counts
    quality = _quality_py()
    cap = json.loads((tiny_checkpoint / "prm_distill.json").read_text())["verifier"]["cap"]
    assert len(recs) < DEV_LIMIT  # the whole file is the other dev split's sample
    res = quality.evaluate_checkpoint(str(tiny_checkpoint), [str(synthetic_files["dev"])], [], DEV_LIMIT, cap,
                                      other_devs={"t": [str(synthetic_files["test"])]})
    assert set(res["position_profile"]) == {"dev", "t"}
    for a, b in zip(res["position_profile"]["t"], prof):
        assert (a["n_good"], a["n_bad"]) == (b["n_good"], b["n_bad"])
        for k in ("mean_good", "mean_bad"):  # a class absent at a position: NaN here, null in eval's JSON
            assert a[k] == pytest.approx(b[k]) if b[k] is not None else a[k] != a[k]
    assert "composed scores by step position" in quality.table(res)
    # the final-step split: each record's last step against its earlier ones, counted by hand from the same file
    final = [[0, 0], [0, 0]]
    for r in recs:
        for i, lab in enumerate(r.labels or []):
            if lab is not None and lab != 0.5:
                final[0 if i == len(r.steps) - 1 else 1][0 if lab > 0.5 else 1] += 1
    assert final[0][0] and final[1][1]  # the file has right final steps and wrong earlier ones
    fin = json.loads(out.read_text())["final_step"]
    assert [[fin[k]["n_good"], fin[k]["n_bad"]] for k in ("final", "earlier")] == final
    assert [[res["final_step"]["t"][k]["n_good"], res["final_step"]["t"][k]["n_bad"]] for k in ("final", "earlier")] == final
    for k in ("final", "earlier"):  # the AUROC within each part: the same number from both paths (null in eval's JSON if one class)
        a, b = fin[k]["auroc"], res["final_step"]["t"][k]["auroc"]
        assert (a is None and b != b) or a == pytest.approx(b)
    assert "composed scores of final and earlier steps" in quality.table(res)


def test_eval_on_processbench_format(tiny_checkpoint, tmp_path):
    items = [
        {"id": "a", "generator": "g", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 6.", "So 6."], "final_answer_correct": False, "label": 0},
        {"id": "b", "generator": "g", "problem": "What is 2 + 2?", "steps": ["2 + 2 = 4.", "So 4."], "final_answer_correct": True, "label": -1},
    ]
    (tmp_path / "pb.json").write_text(json.dumps(items))
    out = tmp_path / "r.json"
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(tmp_path / "pb.json"), "--format", "processbench", "--threshold", "0.0",
                 "--output", str(out)]) == 0
    rep = json.loads(out.read_text())
    # threshold 0: no score is below it, so every item is predicted all-correct: acc_correct 1, acc_erroneous 0, F1 0
    assert rep["acc_correct"] == 1.0 and rep["acc_erroneous"] == 0.0 and rep["processbench_f1"] == 0.0
    assert rep["n_steps"] == 4  # every step is scored, the unsupervised one after the error included


def test_score_with_steps_and_with_a_raw_response(tiny_checkpoint, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        json.dumps({"id": "s", "question": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "The answer is 5."]}) + "\n"
        + json.dumps({"id": "r", "question": "What is 4 x 2?", "response": "Step 1: 4 x 2 = 8.\nStep 2: The answer is 8."}) + "\n"
    )
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(tiny_checkpoint), "--input", str(inp), "--output", str(out), "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["s", "r"]
    assert rows[1]["steps"] == ["Step 1: 4 x 2 = 8.", "Step 2: The answer is 8."]
    for r in rows:
        assert len(r["step_scores"]) == len(r["steps"]) and all(0.0 <= s <= 1.0 for s in r["step_scores"])


@pytest.mark.parametrize(
    "line, msg",
    [
        ({"question": "Q?"}, "in.jsonl:2: field 'steps': needs 'steps'"),
        ({"question": "Q?", "steps": ["ok", ""]}, "in.jsonl:2: field 'steps[1]'"),
        ({"question": "", "steps": ["ok"]}, "in.jsonl:2: field 'question'"),
        ({"question": "Q?", "response": "   "}, "in.jsonl:2: field 'response': cannot split an empty response"),
    ],
)
def test_score_rejects_bad_lines_naming_them_and_writes_nothing(tiny_checkpoint, tmp_path, capsys, line, msg):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"question": "Q?", "steps": ["fine step"]}) + "\n" + json.dumps(line) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(tiny_checkpoint), "--input", str(inp), "--output", str(out)]) == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()


def test_missing_model_and_unknown_config_key_are_clear_errors(tmp_path, synthetic_files, capsys):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--data", str(synthetic_files["test"])]) == 2
    assert "model folder not found" in capsys.readouterr().err
    assert main(["train", "optim.max_stepz=1"]) == 2
    assert "optim.max_stepz: unknown key" in capsys.readouterr().err


def test_train_help_config_lists_every_key(capsys):
    assert main(["train", "--help-config"]) == 0
    out = capsys.readouterr().out
    for key in ("model.backbone", "optim.max_steps", "optim.output_dir", "loss.kind", "lora.top_layers", "data.format"):
        assert key in out
