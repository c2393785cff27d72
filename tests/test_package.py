"""The package as users install it: a wheel holds the files the main job reads (package data), and
the module entry point runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_main_job_reads_its_configs_from_the_package_and_configs_links_to_them():
    pipeline = files("prm_distill.pipeline")
    for name, link in (("defaults.yaml", "pipeline.yaml"), ("trainer_prm.yaml", "trainer_prm.yaml")):
        assert pipeline.joinpath(name).read_text() == (ROOT / "configs" / link).read_text()
    assert "train:" in pipeline.joinpath("defaults.yaml").read_text()


@pytest.mark.slow
def test_a_built_wheel_ships_the_main_job_configs(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the repository
    shutil.copytree(ROOT / "prm_distill", src / "prm_distill", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
                   check=True, capture_output=True, cwd=tmp_path)
    [wheel] = tmp_path.glob("prm_distill-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"prm_distill/pipeline/defaults.yaml", "prm_distill/pipeline/trainer_prm.yaml", "prm_distill/pipeline/__init__.py"} <= names


def test_python_dash_m_prm_distill_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "prm_distill", "demo", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--iteration" in done.stdout
