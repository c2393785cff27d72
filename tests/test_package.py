"""The package as users install it: a wheel holds the files the demo reads (package data), and the
module entry point runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_reads_its_configs_from_the_package_and_they_match_the_repository_copies():
    demo = files("prm_distill.demo")
    assert demo.joinpath("trainer_prm.yaml").read_text() == (ROOT / "configs" / "trainer_prm.yaml").read_text()
    assert "model:" in demo.joinpath("demo.yaml").read_text()


@pytest.mark.slow
def test_a_built_wheel_ships_the_demo_configs(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the repository
    shutil.copytree(ROOT / "prm_distill", src / "prm_distill", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
                   check=True, capture_output=True, cwd=tmp_path)
    [wheel] = tmp_path.glob("prm_distill-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"prm_distill/demo/demo.yaml", "prm_distill/demo/trainer_prm.yaml", "prm_distill/demo/__init__.py"} <= names


def test_python_dash_m_prm_distill_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "prm_distill", "demo", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--judge-model" in done.stdout
