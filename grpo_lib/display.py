"""Notebook helpers: show a library function's source, print the environment."""
from __future__ import annotations

import inspect
import platform
import textwrap
from typing import Any, Callable


def show_source(obj: Callable | type | Any, *, docstring: bool = True) -> None:
    """Display the source of a library function or class, with its file and first line.

    The book's rule: the library is the single source of truth; a chapter *shows* the
    function it introduces (with this helper) and then calls it. Renders as a highlighted
    code block in Jupyter and as plain text elsewhere.
    """
    try:
        lines, start = inspect.getsourcelines(obj)
        path = inspect.getsourcefile(obj) or "?"
    except (OSError, TypeError) as err:
        raise TypeError(f"show_source needs a function or class defined in Python, got {obj!r}: {err}") from None
    source = textwrap.dedent("".join(lines))
    if not docstring:
        source = _strip_docstring(source)
    header = f"# {_display_path(path)}, line {start}"
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(f"```python\n{header}\n{source}```"))
            return
    except ImportError:
        pass
    print(header)
    print(source)


def _display_path(path: str) -> str:
    """``grpo_lib/advantages.py`` for package files, the path relative to the cwd otherwise."""
    import os
    from pathlib import Path

    file = Path(path).resolve()
    package_root = Path(__file__).resolve().parent.parent  # the folder holding grpo_lib/
    for root in (package_root, Path.cwd()):
        try:
            return file.relative_to(root).as_posix()
        except ValueError:
            continue
    return os.path.basename(path)


def _strip_docstring(source: str) -> str:
    import ast

    tree = ast.parse(source)
    node = tree.body[0]
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        lines = source.splitlines(keepends=True)
        doc = body[0]
        del lines[doc.lineno - 1: doc.end_lineno]
        return "".join(lines)
    return source


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else ``platform``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict[str, str]:
    """Versions of Python and the key libraries, the device and the profile."""
    import torch

    from .profiles import profile

    info = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "datasets", "trl"):
        try:
            module = __import__(name)
            info[name] = getattr(module, "__version__", "?")
        except Exception:  # noqa: BLE001 - optional packages may be absent or broken
            info[name] = "not installed"
    threads = torch.get_num_threads()
    info["device"] = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                      else f"CPU ({platform.processor() or platform.machine()}, "
                           f"{threads} thread{'s' if threads != 1 else ''})")
    # the CPU model and the kernels torch picked for it: runs with the same seed on two
    # CPUs round differently and part ways after a few dozen steps (chapter 8)
    info["cpu"] = f"{cpu_model()}; torch kernels {torch.backends.cpu.get_cpu_capability()}"
    info["profile"] = str(profile())
    return info


def print_environment() -> None:
    """Print versions, device and profile: the first cell of every chapter."""
    for key, value in environment().items():
        print(f"{key:>12}: {value}")
