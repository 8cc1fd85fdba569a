"""A config key's declaration, its default and valid values (`setting`), and the check of a
section's values against them: every layer declares its own config section with these."""

import dataclasses
import math
from dataclasses import field

from errors import UserError

MILLION = 10**6


def setting(default, *, ge=None, gt=None, le=None, lt=None, choices=None, note: str = ""):
    """A config key's default and its valid values: numbers a range (ge/gt, le/lt), strings choices
    or else any non-empty printable text."""
    return field(default=default,
                 metadata={"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices,
                           "note": note})


def check_settings(node, prefix: str = "") -> None:
    """Every key of a config section, and of the sections inside it, against its `setting`; a
    UserError for the first out of range."""
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        if dataclasses.is_dataclass(value):
            check_settings(value, f"{key}.")
        elif value is not None and not isinstance(value, (bool, dict)):
            _check_value(key, value, spec.metadata)


def _check_value(key: str, value, rule) -> None:
    note = f" or null ({rule['note']})" if rule.get("note", "").startswith("null") else ""
    if isinstance(value, str):
        if rule.get("choices") and value not in rule["choices"]:
            raise UserError(
                f"config key '{key}' must be one of {', '.join(rule['choices'])}, got {value!r}")
        if not value or not value.isprintable():
            raise UserError(
                f"config key '{key}' must be a non-empty line of text{note}, got {value!r}")
        return
    low = f"[{rule['ge']}" if rule.get("ge") is not None else f"({rule['gt']}"
    high = f"{rule['le']}]" if rule.get("le") is not None else f"{rule['lt']})"
    inside = (math.isfinite(value)
              and (value >= rule["ge"] if rule.get("ge") is not None else value > rule["gt"])
              and (value <= rule["le"] if rule.get("le") is not None else value < rule["lt"]))
    if not inside:
        extra = f" ({rule['note']})" if rule.get("note") and not note else ""
        raise UserError(f"config key '{key}' must be in {low}, {high}{extra}{note}, got {value}")
