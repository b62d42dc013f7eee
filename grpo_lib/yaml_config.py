"""Run settings from a YAML file: what every config dataclass in grpo_lib shares.

``GRPOConfig`` (trainer.py) and ``SFTConfig`` (sft.py) inherit :class:`YAMLConfig`, so
both read a file the same way and answer the same mistakes the same way:

- an unknown key names the closest known field ("did you mean ...?");
- a number field that YAML read as text (``1e-3`` is text in YAML 1.1) is converted,
  and text that is no number is explained;
- ``--set key=value`` overrides are YAML-typed (``--set beta=0.04``).

Each config keeps its own ``validate()``, which says what to change.
"""

from __future__ import annotations

import difflib
import typing
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence


class YAMLConfig:
    """Mixin for a config dataclass: ``to_dict``, ``from_dict`` and ``from_yaml``."""

    def to_dict(self) -> dict:
        """The settings as a plain dict (what ``config.json`` holds)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        """Build a config from a dict (a YAML file); unknown keys get a hint."""
        known = {f.name for f in fields(cls)}
        unknown = [k for k in values if k not in known]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, sorted(known), n=1)
                hints.append(
                    f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                )
            raise ValueError(
                f"Unknown {cls.__name__} field(s): {', '.join(hints)}. Known fields: "
                f"{', '.join(sorted(known))}."
            )
        return cls(**{k: coerce_field(k, v, cls) for k, v in values.items()})

    @classmethod
    def from_yaml(cls, path: str | Path | None, overrides: Sequence[str] = ()):
        """A validated config from a YAML file plus ``key=value`` overrides."""
        return cls.from_dict(read_yaml_values(path, overrides, cls)).validate()


def read_yaml_values(
    path: str | Path | None, overrides: Sequence[str], cls: type
) -> dict:
    """The mapping in the YAML file ``path`` (``None``: empty), then the overrides."""
    import yaml

    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(
                f"No config file at {path}; see configs/ for examples."
            )
        values = _parse(yaml, path.read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(values, dict):
            raise ValueError(
                f"{path} must hold a YAML mapping of {cls.__name__} fields."
            )
    for item in overrides:
        if "=" not in item:
            raise ValueError(
                f"Override {item!r} is not key=value (e.g. --set max_steps=10)."
            )
        key, raw = item.split("=", 1)
        value = _parse(yaml, raw, f"--set {item}") if raw.strip() else None
        values[key.strip()] = value
    return values


def _parse(yaml, text: str, where: str):
    """``yaml.safe_load(text)``; a syntax error is one ``ValueError`` naming ``where``
    and the line and column (a YAML traceback otherwise)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"{where} is not valid YAML{at}: {problem}.") from None


def coerce_field(name: str, value: Any, cls: type) -> Any:
    """Turn YAML text into the field's number type (YAML reads ``1e-3`` as text);
    ``None``/``null`` into None for a field that may be None."""
    hint = typing.get_type_hints(cls)[name]
    hint = getattr(hint, "__name__", None) if isinstance(hint, type) else str(hint)
    if isinstance(value, str) and "None" in hint and value.strip().lower() in (
            "none", "null", "~"):
        return None  # Python's None, as the error messages write it
    if not isinstance(value, str) or "str" in hint:
        return value
    for kind in (int, float):
        if kind.__name__ in hint:
            try:
                number = float(value)
                if kind is float:
                    return number
                if number.is_integer():
                    return int(number)
            except ValueError:
                pass
    default = getattr(cls(), name)
    if "list" in hint:
        advice = f"Write a YAML list, e.g. {name}=[{default[0] if default else 'a'}]"
    elif "bool" in hint:
        advice = f"Write true or false, e.g. {name}={str(default).lower()}"
    else:
        example = (f", e.g. {name}={default}" if isinstance(default, (int, float))
                   else "")
        advice = f"Write a {'whole ' if 'int' in hint else ''}number{example}"
    raise ValueError(
        f"{name}={value!r}: expected {hint.replace('typing.', '')}, got text. "
        f"{advice}."
    )
