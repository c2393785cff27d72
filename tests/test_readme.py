"""The README's and docs/' Python examples run as written, and the README stays a short door.

The examples name the checkpoint `make demo` really writes (`runs/demo/iter-1/train/model`); the test runs
them in a scratch folder where a tiny checkpoint exported by the real training loop sits at that path, so
the paths in the text are the true ones rather than rewritten on the fly.
"""

import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = Path("runs/demo/iter-1/train/model")
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.fixture()
def demo_workdir(tiny_checkpoint, tmp_path, monkeypatch) -> Path:
    """A folder laid out like the repository after `make demo`: configs/ and the demo's checkpoint."""
    shutil.copytree(tiny_checkpoint, tmp_path / DEMO_MODEL)
    os.symlink(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("doc", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_python_examples_run(doc, demo_workdir):
    for block in _python_blocks(doc):
        exec(compile(block, str(doc.relative_to(ROOT)), "exec"), {"__name__": "__doc_example__"})


def test_readme_has_a_scoring_example_and_is_short():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert any("PRMEngine.from_checkpoint" in b for b in _python_blocks(ROOT / "README.md"))


def test_no_doc_points_at_a_checkpoint_path_nothing_writes():
    texts = [(p, p.read_text()) for p in [ROOT / "README.md", *DOCS, *(ROOT / "configs").rglob("*.yaml")]]
    stale = [str(p.relative_to(ROOT)) for p, t in texts if re.search(r"runs/demo/model\b", t)]
    assert stale == []


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_readme_names_the_two_commands_and_they_exist_in_the_makefile():
    readme, makefile = (ROOT / "README.md").read_text(), (ROOT / "Makefile").read_text()
    assert "make demo" in readme and "make test" in readme
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
