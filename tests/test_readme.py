"""The README's Python examples run as written (the demo's model path swapped for a tiny checkpoint)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_examples_run(tiny_checkpoint, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block.replace("runs/demo/model", str(tiny_checkpoint)), "README.md", "exec"), {})


def test_readme_names_the_two_commands_and_they_exist_in_the_makefile():
    readme, makefile = (ROOT / "README.md").read_text(), (ROOT / "Makefile").read_text()
    assert "make demo" in readme and "make test" in readme
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
