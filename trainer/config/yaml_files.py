"""Config files as YAML: reading one with its `base` files merged under it, and `--set key=value`
overrides."""

import re
import typing
from pathlib import Path

import yaml

from errors import UserError


class _Loader(yaml.SafeLoader):
    """Reads `3e-4` as a float (YAML 1.1: a string); a key twice in one mapping is an error (PyYAML
    keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (first at line {seen[key].line + 1})",
                    key_node.start_mark)
            if isinstance(key, typing.Hashable):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789.")
)


def read_config(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """The file's own keys merged over its bases', with `base` resolved away; `chain` holds the
    files that named it."""
    if path.resolve() in chain:
        cycle = " -> ".join(str(p) for p in (*chain, path.resolve()))
        raise UserError(
            f"config files inherit in a cycle: {cycle}; remove one of these base entries")
    raw = _read_yaml(path, named_by=chain[-1] if chain else None)
    bases = raw.pop("base", None)
    if bases is None:
        return raw
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(base, str) and base for base in bases):
        raise UserError(
            f"base in {path} must be a file path or a list of them (relative to the file), got "
            f"{bases!r}")
    merged: dict = {}
    for base in bases:
        merged = _merge(merged, read_config(path.parent / base, (*chain, path.resolve())))
    return _merge(merged, raw)


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both else value
    return merged


def _read_yaml(path: Path, named_by: Path | None = None) -> dict:
    if path.is_dir():
        raise UserError(
            f"{path} is a folder, not a config file; pass a YAML file, e.g. --config "
            "configs/default.yaml")
    if not path.is_file():
        if named_by:
            raise UserError(
                f"base config {path} named in {named_by} not found; fix its base entry (relative "
                "to that file)"
            )
        raise UserError(
            f"config file not found: {path}; pass an existing file, e.g. --config "
            "configs/default.yaml")
    return read_yaml(path, what="config keys")


def read_yaml(path: Path, *, what: str) -> dict:
    """The mapping (of `what`, for the message) in the YAML file `path`, read as configs are
    (`_Loader`)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path} is not UTF-8 text (byte {err.start}); save it as UTF-8 YAML") from None
    except OSError as err:
        raise UserError(
            f"cannot read {path} ({err.strerror or err}); check its permissions, or pass "
            "another") from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join((getattr(err, "problem", None) or str(err)).split())
        raise UserError(f"cannot parse {path}{where}: {problem}; fix the YAML syntax") from None
    except RecursionError:
        raise UserError(
            f"cannot parse {path}: it nests deeper than Python can follow; fix the YAML "
            "syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of {what}, got {type(data).__name__}")
    return data


def parse_set(item: str) -> dict:
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"--set expects key=value (e.g. --set sac.batch_size=128), got {item!r}")
    parts = key.strip().split(".")
    if not all(parts):
        raise UserError(
            f"--set key {key!r} has an empty part; write dotted keys such as sac.batch_size")
    if parts[0] == "profiles":
        raise UserError(
            "profiles cannot be changed with --set; set the key itself (--set sac.batch_size=128)")
    try:
        value = yaml.load(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        value = text
    nested: dict = {}
    node = nested
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return nested
