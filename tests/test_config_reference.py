"""docs/config-reference.md is what `--help-config` says today (regenerate with scripts/config_reference.py)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_is_current():
    script = _script()
    assert script.OUTPUT.read_text(encoding="utf-8") == script.render(), "run: python scripts/config_reference.py"


def test_config_reference_lists_keys_users_set():
    text = _script().render()
    for key in ("`model.backbone`", "`optim.max_minutes`", "`judge.backend`", "`policy.policy`"):
        assert key in text
