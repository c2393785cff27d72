"""One exit-code table, enforced: every command driven into each kind of failure it can have, and the
code checked against `prm_distill.exits` (0 ok, 2 bad input, 3 drift, 4 unavailable, 130 interrupted,
141 stdout closed). Process-level failures (a busy port, a closed pipe) run real subprocesses; the
rest call `cli.main`. 130 is driven by real signals in tests/test_interrupt.py, 3 in
tests/recalibrate/. Every case is fast: nothing trains or loads a model."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prm_distill import exits
from prm_distill.cli import exit_code, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
ROW = {"id": "a", "question": "What is 2+3?", "steps": ["2+3=5.", "The answer is 5."], "answer": "5", "labels": [1.0, 1.0]}
SIDECAR = {"step_tag": " <step>", "step_tag_id": 1, "max_length": 64}


def _cli(*argv: str, stdout=subprocess.PIPE, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prm_distill", *argv], cwd=ROOT, env=ENV, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """A valid record file, a folder that is no checkpoint, a training output folder mid-run, and one
    exported with its resumable state beside it (the layout `train` writes: train/export.py, train/state.py)."""
    (tmp_path / "in.jsonl").write_text(json.dumps(ROW) + "\n")
    (tmp_path / "problems.jsonl").write_text(json.dumps({"id": "p", "question": "What is 2+3?", "answer": "5"}) + "\n")
    (tmp_path / "plain").mkdir()
    (tmp_path / "running" / "checkpoints" / "step-2").mkdir(parents=True)
    (tmp_path / "running" / "checkpoints" / "step-2" / "trainer_state.json").write_text("{}")
    (tmp_path / "done" / "checkpoints" / "step-8").mkdir(parents=True)
    (tmp_path / "done" / "prm_distill.json").write_text(json.dumps(SIDECAR))
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "prm_distill.json").write_text(json.dumps(SIDECAR))
    return {p.name: p for p in tmp_path.iterdir()}


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


# --- the documents say what the code does ---------------------------------------------------------

def test_the_readme_jobs_and_recalibration_docs_list_the_codes_of_exits_py():
    codes = {exits.OK, exits.BAD_INPUT, exits.DRIFT, exits.UNAVAILABLE, exits.INTERRUPTED, exits.CLOSED_PIPE}
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert {int(c) for c in re.findall(r"`(\d+)`", section)} == codes | {1}  # 1: "a bug", with its traceback
    jobs = (ROOT / "docs" / "jobs.md").read_text()
    assert {int(c) for c in re.findall(r"^\| `(\d+)` \|", jobs, flags=re.M)} == codes
    recal = (ROOT / "docs" / "recalibration.md").read_text().split("**Exit codes**", 1)[1].split("\n\n", 1)[0]
    listed = {int(c) for c in re.findall(r"(?<![\w.])(\d+)(?= [a-z(])", recal)}
    assert listed - {1} <= codes and "bug" in recal  # nothing the README does not define
    assert {code for _, code, _ in __import__("prm_distill.cli", fromlist=["exit_table"]).exit_table()} <= codes


# --- process-level: real subprocesses -------------------------------------------------------------

def test_a_closed_stdout_ends_quietly_with_141():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written (`| head` that already left)
    try:
        done = _cli("label", "--help-config", stdout=write)
    finally:
        os.close(write)
    assert done.returncode == exits.CLOSED_PIPE and done.stderr == ""


def test_a_reader_that_stops_early_gets_no_traceback():
    done = subprocess.run(f"{sys.executable} -m prm_distill label --help-config | head -1", shell=True, cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("input (") and done.stdout.count("\n") == 1 and done.stderr == ""


def test_serve_on_a_busy_port_is_bad_input_naming_the_port(files):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _cli("serve", "--model", str(files["done"]), "--port", str(port))
    assert done.returncode == exits.BAD_INPUT, done.stderr
    assert f"127.0.0.1:{port} is in use: pick another --port" in done.stderr and "Traceback" not in done.stderr


# --- bad input: 2 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["train", "optim.max_stepz=1"],
    ["label", "judge.bakend=openai"],
    ["rollout", "--problems", "x.jsonl", "policy.temprature=0.5"],
    ["recalibrate", "--model", "m", "--heldout", "h", "--output", "o", "drift.auroc_dorp=0.1"],
    ["pipeline", "train.optim.max_stepz=1"],
], ids=lambda a: a[0])
def test_an_unknown_config_key_is_2_naming_it(capsys, argv):
    code, err = _run(capsys, argv)
    assert code == exits.BAD_INPUT and argv[-1].split("=")[0].rsplit(".", 1)[-1] in err, err


@pytest.mark.parametrize("command", ["score", "label", "rollout", "rerank", "pairs", "filter", "data", "eval", "recalibrate"])
def test_a_missing_input_file_is_2_naming_it(capsys, files, command):
    missing = str(files["plain"] / "missing.jsonl")
    argv = {
        "score": ["score", "--model", str(files["done"]), "--input", missing, "--output", str(files["plain"] / "o.jsonl")],
        "label": ["label", f"input={missing}", f"output={files['plain'] / 'lab'}"],
        "rollout": ["rollout", "--problems", missing, "--output", str(files["plain"] / "ro"), "--backend", "openai", "--policy", "x"],
        "rerank": ["rerank", "--url", "http://127.0.0.1:9", "--input", missing, "--output", str(files["plain"] / "r.jsonl")],
        "pairs": ["pairs", "--url", "http://127.0.0.1:9", "--input", missing, "--output", str(files["plain"] / "p.jsonl")],
        "filter": ["filter", "--url", "http://127.0.0.1:9", "--input", missing, "--output", str(files["plain"] / "f.jsonl")],
        "data": ["data", "steps", "--input", missing, "--output", str(files["plain"] / "d")],
        "eval": ["eval", "--model", str(files["done"]), "--data", missing],  # checked before the model loads
        "recalibrate": ["recalibrate", "--model", str(files["done"]), "--heldout", missing, "--output", str(files["plain"] / "rc")],
    }[command]
    code, err = _run(capsys, argv)
    assert code == exits.BAD_INPUT, err
    assert "missing.jsonl" in err


@pytest.mark.parametrize("command", ["eval", "score", "serve", "recalibrate"])
def test_a_folder_that_is_not_a_checkpoint_is_2_naming_it(capsys, files, command):
    folder = str(files["plain"])
    argv = {
        "eval": ["eval", "--model", folder, "--data", str(files["in.jsonl"])],
        "score": ["score", "--model", folder, "--input", str(files["in.jsonl"]), "--output", str(files["plain"] / "o.jsonl")],
        "serve": ["serve", "--model", folder, "--port", "0"],
        "recalibrate": ["recalibrate", "--model", folder, "--heldout", str(files["in.jsonl"]), "--output", str(files["plain"] / "rc")],
    }[command]
    code, err = _run(capsys, argv)
    assert code == exits.BAD_INPUT and f"{folder} is not a prm_distill checkpoint" in err


def test_a_training_folder_points_at_its_checkpoint(capsys, files):
    running, done = files["running"], files["done"]
    code, err = _run(capsys, ["serve", "--model", str(running), "--port", "0"])
    assert code == exits.BAD_INPUT and "a training output folder whose model is not exported yet" in err and f"the checkpoint is then {running}" in err
    code, err = _run(capsys, ["eval", "--model", str(done / "checkpoints" / "step-8"), "--data", str(files["in.jsonl"])])
    assert code == exits.BAD_INPUT and f"resumable training state of a run; its exported checkpoint is {done}" in err
    code, err = _run(capsys, ["score", "--model", str(running / "checkpoints"), "--input", str(files["in.jsonl"]), "--output", "-"])
    assert code == exits.BAD_INPUT and f"not exported yet (train exports it to {running})" in err
    for step in (4, 12):
        (done / "snapshots" / f"step-{step}").mkdir(parents=True)
        (done / "snapshots" / f"step-{step}" / "prm_distill.json").write_text(json.dumps(SIDECAR))
    code, err = _run(capsys, ["eval", "--model", str(done / "snapshots"), "--data", str(files["in.jsonl"])])
    assert code == exits.BAD_INPUT and f"the snapshots of a training run, each a checkpoint, the newest {done / 'snapshots' / 'step-12'}" in err


def test_a_checkpoint_refused_once_serve_has_started_is_2(capsys, files):
    """The sidecar reads, the weights do not: the server starts, loading fails, the server stops, 2."""
    code, err = _run(capsys, ["serve", "--model", str(files["noweights"]), "--port", "0"])
    assert code == exits.BAD_INPUT and "has no .safetensors weights" in err


def test_a_model_backend_failing_in_serve_is_4():
    from prm_distill.serve.config import ServerConfig
    from prm_distill.serve.runner import ModelUnavailable, run_server

    def out_of_memory():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(ModelUnavailable, match="the model failed to load: RuntimeError: CUDA out of memory") as failed:
        run_server(ServerConfig(model="unused", port=0), load_engine=out_of_memory)
    assert exit_code(failed.value) == (exits.UNAVAILABLE, "unavailable")


def test_jsonl_given_as_processbench_is_2_with_the_hint(capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "b"}) + "\n")
    code, err = _run(capsys, ["data", "steps", "--input", str(rows), "--format", "processbench", "--output", str(tmp_path / "d")])
    assert code == exits.BAD_INPUT and "did you mean --format jsonl?" in err


def test_bad_command_line_options_are_2_by_argparse(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["eval", "--model"])
    assert stopped.value.code == exits.BAD_INPUT


# --- unavailable: 4 --------------------------------------------------------------------------------

def test_an_unreachable_judge_policy_or_scoring_server_is_4(capsys, files):
    url = f"http://127.0.0.1:{_closed_port()}"
    cases = {
        "judge unavailable": ["label", f"input={files['in.jsonl']}", f"output={files['plain'] / 'lab'}", f"judge.base_url={url}/v1",
                              "judge.max_retries=0", "progress=false"],
        "policy unavailable": ["rollout", "--backend", "openai", "--base-url", f"{url}/v1", "--policy", "x", "--problems",
                               str(files["problems.jsonl"]), "--output", str(files["plain"] / "ro"), "--k", "1", "policy.max_retries=0"],
        "scoring server unavailable": ["filter", "--url", url, "--input", str(files["in.jsonl"]), "--output", str(files["plain"] / "f.jsonl"),
                                       "--quiet"],
    }
    for name, argv in cases.items():
        code, err = _run(capsys, argv)
        assert code == exits.UNAVAILABLE and f"prm-distill {argv[0]}: {name}:" in err and "rerun the same command to resume" in err, err
