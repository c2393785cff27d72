"""YAML configs onto nested dataclasses, with `section.key=value` overrides from the command line.

Every job (train, label, ...) describes its settings as dataclasses with a help string per field;
this module is the one loader, so unknown keys and wrong types fail the same way everywhere,
naming the key. A renamed key keeps working under its old name for a while: the field lists it in
`metadata["aliases"]`, the loader reads it as the new one with a `FutureWarning`, and giving both is
an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
import warnings
from pathlib import Path
from typing import Any, TypeVar

import yaml


class YAMLLoader(yaml.SafeLoader):
    """safe_load with YAML 1.2's booleans: only true/false are bools, so `optim.mixed_precision=no`
    (accelerate's spelling) stays the string "no" instead of becoming False."""


YAMLLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
YAMLLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))

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


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass a field holds (directly or as `X | None`), else None."""
    for t in (tp, *typing.get_args(tp)):
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            return t
    return None


def canonical(cls: type, data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`data` with old key names (a field's `metadata["aliases"]`) renamed to the current ones, at
    every level of nesting; a `FutureWarning` names each old key. Old and new name together is an error."""
    hints = typing.get_type_hints(cls)
    out = dict(data)
    for f in dataclasses.fields(cls):
        for old in f.metadata.get("aliases", ()):
            if old not in out:
                continue
            if f.name in out:
                raise ConfigError(f"{prefix}{old} and {prefix}{f.name} are the same setting ({old} is its old name): give only {prefix}{f.name}")
            warnings.warn(f"config key {prefix}{old} is now {prefix}{f.name}; the old name still works but will go", FutureWarning, stacklevel=3)
            out[f.name] = out.pop(old)
        inner = _dataclass_of(hints[f.name])
        if inner is not None and isinstance(out.get(f.name), dict):
            out[f.name] = canonical(inner, out[f.name], f"{prefix}{f.name}.")
    return out


def build(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Instantiate dataclass `cls` from a mapping, recursively; unknown keys are errors."""
    hints = typing.get_type_hints(cls)
    data = canonical(cls, data, prefix)
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
            value = yaml.load(raw, Loader=YAMLLoader) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        _put(out, parts, value, f"override {item!r}")
    return out


def _put(out: dict[str, Any], parts: list[str], value: Any, what: str) -> None:
    """`value` at the nested key `parts` of `out` (sections created as needed)."""
    node = out
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{what} conflicts with an earlier override of {p}")
    node[parts[-1]] = value


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None, *, defaults: T | None = None,
                values: dict[str, Any] | None = None) -> T:
    """Defaults of `cls`, then the YAML file, then the `key=value` overrides, then `values` (dotted key
    -> value, e.g. from `flag_values`). With `defaults` (an instance of `cls`), those values are the
    base and the rest merges into them key by key, so setting one key of a section keeps the other
    keys of `defaults` for that section."""
    data: dict[str, Any] = dataclasses.asdict(defaults) if defaults is not None else {}  # type: ignore[call-overload]
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.load(p.read_text(encoding="utf-8"), Loader=YAMLLoader) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        data = merge(data, canonical(cls, loaded))
    data = merge(data, canonical(cls, parse_overrides(overrides or [])))
    data = merge(data, canonical(cls, nest(values or {})))
    return build(cls, data)


def _argument(parser: Any, flag: str, f: dataclasses.Field, hint: Any, *, default: Any, dest: str, also: str = "") -> None:
    """One argparse option for field `f` (type hint `hint`): type, choices (`metadata["choices"]`) and
    help come from the field, so a flag and its config key cannot drift apart."""
    helptext = f.metadata.get("help", "") + also
    choices = f.metadata.get("choices")
    if hint is bool:
        if default is None:  # a shortcut for a config key: unset leaves the config's value alone
            parser.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=helptext)
        elif default is True:
            parser.add_argument("--no-" + flag[2:], dest=dest, action="store_false", help=f"Turn off: {helptext}")
        else:
            parser.add_argument(flag, dest=dest, action="store_true", help=helptext)
        return
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kind = next(t for t in typing.get_args(hint) if t is not type(None)) if optional else hint
    if typing.get_origin(kind) is list:  # comma-separated on the command line: --kinds a,b
        item = (typing.get_args(kind) or (str,))[0]
        kind = lambda text, item=item: [item(x) for x in text.split(",") if x]  # noqa: E731
        helptext += " (comma-separated)"
    if default is dataclasses.MISSING:
        parser.add_argument(flag, dest=dest, type=kind, choices=choices, required=True, help=helptext)
        return
    shown = f" (default: {','.join(map(str, default)) if isinstance(default, list) else default})" if default is not None else ""
    parser.add_argument(flag, dest=dest, type=kind, choices=choices, default=default, help=helptext + shown)


def add_options(parser: Any, cls: type) -> None:
    """One command-line option per field of dataclass `cls` (`--max-wait-ms`), help from the field, for
    the commands whose settings are flags only (`serve`, `rerank`, `pairs`, `filter`). A bool that
    defaults to True is turned off with `--no-NAME`, one that defaults to False on with `--NAME`; a
    field without a default is required."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        _argument(parser, "--" + f.name.replace("_", "-"), f, hints[f.name], default=default, dest=f.name)


def from_options(cls: type[T], args: Any) -> T:
    """The dataclass `cls` from the options `add_options` added (an argparse namespace)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def field_at(cls: type, key: str) -> tuple[dataclasses.Field, Any]:
    """The field of dataclass `cls` at dotted `key` (`policy.base_url`) and its type hint."""
    *sections, name = key.split(".")
    for section in sections:
        cls = _dataclass_of(typing.get_type_hints(cls)[section])  # type: ignore[assignment]
        if cls is None:
            raise KeyError(f"{key}: {section} is not a section")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise KeyError(f"{key}: no such key")
    return fields[name], typing.get_type_hints(cls)[name]


def add_flags(parser: Any, cls: type, flags: dict[str, str]) -> None:
    """Shortcut options for config keys of the YAML commands (`rollout`, `recalibrate`): `flags` maps an
    option (`--base-url`) to its dotted key (`policy.base_url`); type, choices and help come from the
    field. An unset option leaves the key alone; `flag_values` collects the set ones for `load_config`."""
    for flag, key in flags.items():
        f, hint = field_at(cls, key)
        default = f.default if f.default is not dataclasses.MISSING else None
        _argument(parser, flag, f, hint, default=None, dest=_dest(flag), also=f" (config key {key}; default {default!r})")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def flag_values(args: Any, flags: dict[str, str]) -> dict[str, Any]:
    """The config keys of the shortcut options that were given (`add_flags`), by dotted key."""
    return {key: getattr(args, _dest(flag)) for flag, key in flags.items() if getattr(args, _dest(flag)) is not None}


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """`{"policy.base_url": v}` as `{"policy": {"base_url": v}}`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        _put(out, key.split("."), value, f"key {key!r}")
    return out


def _old_names(f: dataclasses.Field) -> str:
    aliases = f.metadata.get("aliases", ())
    return f" (old name: {', '.join(aliases)}, still read)" if aliases else ""


def help_text(cls: type, prefix: str = "", defaults: Any = None) -> list[str]:
    """`key (default): help` lines for every field, for `--help-config`. With `defaults` (an instance
    of `cls`, e.g. a job's embedded settings) its values are shown instead of the fields' defaults."""
    lines = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if f.metadata.get("aliases"):
                lines.append(f"{prefix}{f.name}.* (section): {f.metadata.get('help', '')}{_old_names(f)}")
            lines += help_text(tp, prefix + f.name + ".", getattr(defaults, f.name) if defaults is not None else None)
            continue
        if defaults is not None:
            default = getattr(defaults, f.name)
        else:
            default = f.default if f.default is not dataclasses.MISSING else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        lines.append(f"{prefix}{f.name} ({default!r}): {f.metadata.get('help', '')}{_old_names(f)}")
    return lines
