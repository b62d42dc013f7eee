"""grpo_lib: the library behind *GRPO, Hands-On*.

Small modules by concept; import what a chapter needs, e.g.
``from grpo_lib.advantages import group_advantages``.
"""
from .profiles import Profile, profile

__version__ = "0.1.0"


def evaluate(*args, **kwargs):
    """Shortcut for :func:`grpo_lib.evaluation.evaluate` (imported lazily)."""
    from .evaluation import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


__all__ = ["Profile", "profile", "evaluate", "__version__"]
