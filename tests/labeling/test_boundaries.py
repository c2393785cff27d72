"""`labeling` stands beside `train` and `serve` and imports neither (design rule), and importing it
pulls in no model library, so the CLI and tests that only read configs stay fast."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "prm_distill" / "labeling"


def test_labeling_never_imports_train_or_serve():
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                parts = n.lstrip(".").split(".")
                assert not ({"train", "serve", "scorer"} & set(parts[:2])), f"{path.name} imports {n}"


def test_importing_labeling_loads_no_model_library():
    code = "import sys, prm_distill.labeling; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'math_verify') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
