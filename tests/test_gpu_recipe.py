"""benchmarks/gpu_recipe.sh: the GPU recipe's script is not dead code. `--smoke` runs every stage of it
on CPU (a tiny Qwen2-architecture model built from a config with a real tokenizer, a few GSM8K-style
problems through the real data builder, ProcessBench-format test files) and prints the table the GPU
run prints; nothing from ../shared is read. vLLM's rows are measured when .venv-vllm has vLLM, else
they say "skipped: no vLLM". The table builder alone is checked on hand-made stage outputs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM_BIN = ROOT / ".venv-vllm" / "bin"
ROWS = [("data", "40 GSM8K-style problems + variants"), ("backbone", "tiny Qwen2 (2 layers, d=64)"), ("train", "full FT, fp32"),
        ("eval", "ProcessBench gsm8k"), ("eval", "ProcessBench math"),
        ("serve", "prm-distill serve, 16 clients"), ("serve", "prm-distill serve, 64 clients"),
        ("serve", "vllm serve, 16 clients"), ("serve", "vllm serve, 64 clients"), ("total", "all stages")]
COLUMNS = ["stage", "what", "F1", "AUROC", "tokens/s", "traj/s", "p50 ms", "p99 ms", "wall s", "note"]


def _has_vllm() -> bool:
    """The script's own test: a `vllm` command and an importable vllm in .venv-vllm."""
    return (VLLM_BIN / "vllm").is_file() and subprocess.run([str(VLLM_BIN / "python"), "-c", "import vllm"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_recipe") / "out"
    env = {**os.environ, "OUT": str(out), "BIN": str(Path(sys.executable).parent), "OMP_NUM_THREADS": "1",
           "DATA": str(out / "no-such-data")}  # smoke mode must not need ../shared/data
    done = subprocess.run([str(ROOT / "benchmarks" / "gpu_recipe.sh"), "--smoke"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=1200)
    return done, out


@pytest.mark.slow
def test_smoke_run_prints_one_table_with_every_stage(smoke):
    done, out = smoke
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((out / "recipe.json").read_text())
    assert report["columns"] == COLUMNS
    assert [(r["stage"], r["what"]) for r in report["rows"]] == ROWS
    assert report["conditions"]["mode"] == "smoke" and report["conditions"]["device"] == "cpu"
    # the printed table: its header, then one line per row, in that order
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["stage", "what", "F1"])
    assert [line.split()[0] for line in lines[head + 1: head + 1 + len(ROWS)]] == [stage for stage, _ in ROWS]
    assert all(what in line for (_, what), line in zip(ROWS, lines[head + 1:], strict=False))


@pytest.mark.slow
def test_smoke_figures_are_sane(smoke):
    done, out = smoke
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {(r["stage"], r["what"]): r for r in json.loads((out / "recipe.json").read_text())["rows"]}
    train = rows["train", "full FT, fp32"]
    assert train["tokens/s"] > 0 and train["wall s"] > 0 and train["note"].startswith("6 steps, ")
    for split in ("gsm8k", "math"):
        r = rows["eval", f"ProcessBench {split}"]
        assert 0.0 <= r["F1"] <= 1.0 and 0.0 <= r["AUROC"] <= 1.0
        assert "from dev" in r["note"]  # the threshold comes from the training sources' dev split
    serve = json.loads((out / "serve.json").read_text())
    assert serve["tokens_per_trajectory"] > 10 * 2  # 10 steps, each with its text and a step tag
    for n in (16, 64):
        r = rows["serve", f"prm-distill serve, {n} clients"]
        assert r["traj/s"] > 0 and 0 < r["p50 ms"] <= r["p99 ms"]
        assert r["tokens/s"] == pytest.approx(r["traj/s"] * serve["tokens_per_trajectory"])
        v = rows["serve", f"vllm serve, {n} clients"]
        if _has_vllm():
            assert v["traj/s"] > 0 and 0 < v["p50 ms"] <= v["p99 ms"], v
        else:
            assert v["note"].startswith("skipped: no vLLM") and v["traj/s"] is None
    if _has_vllm():  # both fp32 on CPU: the same scores (tests/serve/test_vllm.py: within 1e-5)
        assert serve["max_score_difference"] <= 1e-4
    total = rows["total", "all stages"]["wall s"]
    assert math.isfinite(total) and total > 0


def test_the_table_names_what_failed_and_computes_serving_tokens(tmp_path):
    """Hand-made stage outputs: a serving point of 60 trajectories/s at 405 tokens each is 24300 tokens/s;
    a stage that failed, timed out or never ran says so instead of leaving a number out silently."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_recipe
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    (tmp_path / "stages.tsv").write_text("data\t3.0\t0\t150\nbackbone\t1.5\t0\t420\ntrain\t20.0\t124\t330\neval\t7.5\t1\t150\nserve\t30.0\t0\t240\n")
    (tmp_path / "model").mkdir()  # an earlier run's checkpoint: never reported for a training that timed out
    (tmp_path / "model" / "prm_distill.json").write_text(json.dumps({"step_tag": "<s>", "step_tag_id": 1, "max_length": 8, "training": {"steps": 9}}))
    point = {"traj_per_s": 60.0, "p50_ms": 200.0, "p99_ms": 350.0, "n": 120}
    (tmp_path / "serve.json").write_text(json.dumps({
        "tokens_per_trajectory": 405,
        "servers": {"prm-distill serve": {"ready_s": 5.0, "wall_s": 12.0, "options": "--device cpu", "points": {"16": point, "64": point}},
                    "vllm serve": {"error": "failed: RuntimeError: vllm serve not ready after 300 s"}}}))
    meta = {"mode": "smoke", "data": "d", "backbone": "b"}
    table = {(r["stage"], r["what"]): r for r in gpu_recipe.rows(tmp_path, meta)}
    assert table["serve", "prm-distill serve, 16 clients"]["tokens/s"] == 24300.0
    assert table["serve", "prm-distill serve, 16 clients"]["wall s"] == 12.0
    assert table["serve", "vllm serve, 64 clients"]["note"] == "failed: RuntimeError: vllm serve not ready after 300 s"
    assert table["eval", "ProcessBench gsm8k"]["note"].startswith("failed (exit 1; log: ")
    assert table["train", "student"]["note"] == f"timed out (limit 330 s; log: {tmp_path / 'logs' / 'train.log'})"
    assert table["train", "student"]["tokens/s"] is None
    assert table["total", "all stages"]["wall s"] == 62.0  # 3 + 1.5 + 20 + 7.5 + 30
    text = gpu_recipe.format_table(list(table.values()))
    assert text.splitlines()[0].split() == ["stage", "what", "F1", "AUROC", "tokens/s", "traj/s", "p50", "ms", "p99", "ms", "wall", "s", "note"]
    assert "24300" in text and "n/a" not in text
