"""Exercise checkers: ``grpo_lib.exercises.check_*``.

Each chapter's checkers live in ``chNN.py``; every public ``check_*`` function of those
modules is re-exported here. A checker takes the learner's attempt, runs it on cases with
known answers and raises ``AssertionError`` with a message that says exactly what is wrong
(input, expected, got); on success it prints a short confirmation and returns True.
"""
import importlib
import pkgutil

__all__ = []
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("ch"):
        _mod = importlib.import_module(f"{__name__}.{_info.name}")
        for _name in dir(_mod):
            if _name.startswith("check_"):
                globals()[_name] = getattr(_mod, _name)
                __all__.append(_name)
