"""YAML configs onto nested dataclasses, with `section.key=value` overrides from the command line.

Every job (train, label, ...) describes its settings as dataclasses with a help string per field;
this module is the one loader, so unknown keys and wrong types fail the same way everywhere,
naming the key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the key."""


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return build(tp, value, prefix=key + ".")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            value = [value]
        (inner, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def build(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Instantiate dataclass `cls` from a mapping, recursively; unknown keys are errors."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = set(data) - set(fields)
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(f"{prefix}{name}: unknown key (known keys: {', '.join(sorted(fields))})")
    kwargs = {name: _coerce(v, hints[name], prefix + name) for name, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: {e}") from e


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`a.b=1` pairs into a nested mapping; values are parsed as YAML scalars (1, 0.5, true, null, [..])."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r}: empty key segment")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override of {p}")
        node[parts[-1]] = value
    return out


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None, *, defaults: T | None = None) -> T:
    """Defaults of `cls`, then the YAML file, then the overrides. With `defaults` (an instance of
    `cls`), those values are the base and the file and overrides merge into them key by key, so
    setting one key of a section keeps the other keys of `defaults` for that section."""
    data: dict[str, Any] = dataclasses.asdict(defaults) if defaults is not None else {}  # type: ignore[call-overload]
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        data = merge(data, loaded)
    data = merge(data, parse_overrides(overrides or []))
    return build(cls, data)


def add_options(parser: Any, cls: type) -> None:
    """One command-line option per field of dataclass `cls` (`--max-wait-ms`), help from the field:
    the one dataclass-to-flags path (`serve`, `rerank`, `pairs`, `filter`; the YAML commands take
    `key=value` overrides instead). A bool that defaults to True is turned off with `--no-NAME`, one
    that defaults to False on with `--NAME`; a field without a default is required."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag, helptext = "--" + f.name.replace("_", "-"), f.metadata.get("help", "")
        if hints[f.name] is bool:
            if f.default is True:
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=f"Turn off: {helptext}")
            else:
                parser.add_argument(flag, dest=f.name, action="store_true", help=helptext)
            continue
        kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
        if f.default is dataclasses.MISSING:
            parser.add_argument(flag, dest=f.name, type=kind, required=True, help=helptext)
        else:
            shown = "" if f.default is None else f" (default: {f.default})"
            parser.add_argument(flag, dest=f.name, type=kind, default=f.default, help=helptext + shown)


def from_options(cls: type[T], args: Any) -> T:
    """The dataclass `cls` from the options `add_options` added (an argparse namespace)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def help_text(cls: type, prefix: str = "", defaults: Any = None) -> list[str]:
    """`key (default): help` lines for every field, for `--help-config`. With `defaults` (an instance
    of `cls`, e.g. a job's embedded settings) its values are shown instead of the fields' defaults."""
    lines = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            lines += help_text(tp, prefix + f.name + ".", getattr(defaults, f.name) if defaults is not None else None)
            continue
        if defaults is not None:
            default = getattr(defaults, f.name)
        else:
            default = f.default if f.default is not dataclasses.MISSING else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        lines.append(f"{prefix}{f.name} ({default!r}): {f.metadata.get('help', '')}")
    return lines
