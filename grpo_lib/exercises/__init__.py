"""Exercise checkers, one module per chapter: ``grpo_lib.exercises.chNN``.

Import a checker from its own chapter's module::

    from grpo_lib.exercises.ch01 import check_informative_groups

A checker takes the learner's attempt, runs it on cases with known answers and raises
``AssertionError`` with a message that says exactly what is wrong (input, expected,
got); on success it prints a short confirmation and returns True.

This package re-exports nothing: two chapters may ask for functions of the same name
with different contracts (chapter 1's ``check_informative_groups`` wants one bool per
group, chapter 9's wants the indices of the groups kept), so a checker only has a
meaning inside its chapter. ``from grpo_lib.exercises import check_x`` raises an
``ImportError`` that names the chapter module(s) defining ``check_x``.
"""
from __future__ import annotations

import importlib
import pkgutil

__all__: list[str] = []


def chapter_modules() -> dict[str, object]:
    """``{"ch01": module, ...}``: every chapter module of this package, imported."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name.startswith("ch"))
    return {name: importlib.import_module(f"{__name__}.{name}") for name in names}


def all_checkers() -> dict[str, object]:
    """``{"ch01.check_group_advantages": fn, ...}``: every public ``check_*`` function
    defined in a chapter module (not the ones it imports from elsewhere)."""
    found = {}
    for chapter, module in chapter_modules().items():
        for name, value in vars(module).items():
            if (name.startswith("check_") and callable(value)
                    and getattr(value, "__module__", None) == module.__name__):
                found[f"{chapter}.{name}"] = value
    return found


def __getattr__(name: str):
    if not name.startswith("check_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    homes = [key.split(".")[0] for key in all_checkers() if key.endswith(f".{name}")]
    if not homes:
        raise ImportError(f"no chapter of grpo_lib.exercises defines {name!r}.")
    where = " or ".join(f"'from {__name__}.{home} import {name}'" for home in homes)
    # ImportError (not AttributeError) so that `from ... import` shows this message.
    raise ImportError(f"checkers are imported from their chapter's module: {where}"
                      + (f" ({len(homes)} chapters define a checker of this name, with "
                         f"different contracts)." if len(homes) > 1 else "."))
