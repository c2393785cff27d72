"""The main job end to end on a tiny backbone (the real one runs in `make demo`)."""

import json

import pytest

from prm_distill.cli import main


@pytest.mark.slow  # the whole job, server included: the longest test
def test_demo_generates_trains_evaluates_and_shapes(tiny_backbone, tmp_path, capsys, monkeypatch):
    import prm_distill.serve.engine as engine_module

    loads = []  # every checkpoint load of the engine, counted (the real load runs)
    real_load = engine_module.load_checkpoint
    monkeypatch.setattr(engine_module, "load_checkpoint", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    out = tmp_path / "demo"
    # the tiny backbone is the judge too (the default judge, SmolLM2, is what `make demo` runs)
    assert main(["demo", "--output", str(out), "--quick", "--judge-model", str(tiny_backbone),
                 f"model.backbone={tiny_backbone}", "model.num_layers=null"]) == 0
    printed = capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text())
    assert rep["n_items"] == 30 and rep["threshold_source"].startswith("checkpoint")
    assert (out / "model" / "prm_distill.json").is_file()
    for split in ("train", "dev", "test"):
        assert (out / "data" / f"{split}.jsonl").is_file()
    assert (out / "data" / "train.judge.jsonl").is_file()
    assert "labelled 60 training rollouts" in printed and "agreement with the construction labels" in printed
    assert "6 trajectories scored over HTTP" in printed and "latency per request: p50" in printed
    recal = json.loads((out / "recalibration" / "report.json").read_text())
    assert recal["n_items"] == 30 and recal["drift"] == [] and recal["previous"] is None
    assert recal["calibration"]["adopted"] is False  # the demo never adopts: the test split stays clean
    assert json.loads((out / "model" / "prm_distill.json").read_text())["calibration"] is None
    for name in ("report.md", "reliability.png", "score_histogram.png", "position.png"):
        assert (out / "recalibration" / name).read_bytes()[:4] == b"\x89PNG" or name == "report.md"
    assert "recalibration round on the test split" in printed and f"recalibration report: {out / 'recalibration' / 'report.md'}" in printed
    assert len(loads) == 1  # loaded once; evaluation, recalibration, serving and RL share the engine
    table = printed.split("shaped advantages per mode:")[1]
    for mode in ("process_weighted", "gvpo", "additive"):
        assert table.count(mode) == 2  # one correct and one wrong trajectory per mode
