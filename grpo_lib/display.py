"""Notebook helpers: show a library function's source, print the environment."""
from __future__ import annotations

import inspect
import platform
import textwrap
from typing import Any, Callable


#: the book's limits for shown source: a rendered column fits about 88 characters, and a
#: function longer than about 40 lines is shown in parts (the lines that carry the idea)
MAX_SHOWN_LINES = 45
MAX_LINE_CHARS = 88


def show_source(obj: Callable | type | Any, *, docstring: bool = True,
                start: str | None = None, end: str | None = None,
                max_lines: int | None = MAX_SHOWN_LINES) -> None:
    """Display the source of a library function or class, with its file and lines.

    The book's rule: the library is the single source of truth; a chapter *shows* the
    function it introduces (with this helper) and then calls it. Renders as a
    highlighted code block in Jupyter and as plain text elsewhere.

    ``start``/``end`` show a part: from the first line containing the text ``start``
    through the first line after it containing ``end`` (either may be omitted), with a
    pointer to the whole function. A shown block longer than ``max_lines`` lines, or
    with a line over 88 characters, raises ``ValueError`` (it would not read well in
    the book's column); pass ``max_lines=None`` to see any length.
    """
    try:
        lines, first = inspect.getsourcelines(obj)
        first = max(first, 1)  # a module's source starts at line 1 (inspect says 0)
        path = inspect.getsourcefile(inspect.unwrap(obj)) or "?"  # a decorated one's
    except (OSError, TypeError) as err:
        raise TypeError(f"show_source needs a function or class defined in Python, "
                        f"got {obj!r}: {err}") from None
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
    where = _display_path(path)
    if start is None and end is None:
        source = textwrap.dedent("".join(lines))
        if not docstring:
            source = _strip_docstring(source)
        header = f"# {where}, line {first}"
        footer = ""
    else:
        lo, hi = _part(lines, start, end, name)
        source = textwrap.dedent("".join(lines[lo:hi + 1]))
        header = (f"# {where}, lines {first + lo}-{first + hi} of {name} "
                  f"(lines {first}-{first + len(lines) - 1})")
        footer = f"# ... the whole function: show_source({name}, max_lines=None)\n"
    _check_shown(source, name, max_lines)
    text = f"{header}\n{source}{footer}"
    _show_markdown(f"```python\n{text}```", plain=text)


def say(markdown: str) -> None:
    """Show a sentence of prose whose numbers come from the outputs above it.

    The book's prose never types a measured number by hand: a cell computes it and says
    it with this helper, which renders Markdown in Jupyter (and in the built book) and
    prints the text elsewhere.
    """
    _show_markdown(markdown, plain=markdown + "\n")


def _show_markdown(markdown: str, plain: str) -> None:
    """Display ``markdown`` in Jupyter; print ``plain`` (as is) anywhere else."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(markdown))
            return
    except ImportError:
        pass
    print(plain, end="")


def _part(lines: list[str], start: str | None, end: str | None,
          name: str) -> tuple[int, int]:
    """Indices (inclusive) of the lines from the one containing ``start`` to ``end``."""
    lo = 0
    if start is not None:
        hits = [i for i, line in enumerate(lines) if start in line]
        if not hits:
            raise ValueError(f"show_source({name}): no line contains start={start!r}; "
                             f"pick a text from the function's source")
        lo = hits[0]
    hi = len(lines) - 1
    if end is not None:
        hits = [i for i, line in enumerate(lines) if i >= lo and end in line]
        if not hits:
            raise ValueError(f"show_source({name}): no line at or after start contains "
                             f"end={end!r}")
        hi = hits[0]
    return lo, hi


def _check_shown(source: str, name: str, max_lines: int | None) -> None:
    """Raise when the shown code would not read well in the book's column."""
    if max_lines is None:
        return
    shown = source.splitlines()
    if len(shown) > max_lines:
        raise ValueError(
            f"show_source({name}) would show {len(shown)} lines; the book shows at "
            f"most {max_lines} at once. Show the part that carries the idea with "
            f"start=/end= (texts of its first and last line), or pass max_lines=None "
            f"to see it all.")
    wide = [i for i, line in enumerate(shown, 1) if len(line) > MAX_LINE_CHARS]
    if wide:
        raise ValueError(
            f"show_source({name}): shown line {wide[0]} has "
            f"{len(shown[wide[0] - 1])} characters (more than {MAX_LINE_CHARS} are "
            f"clipped in the book's column); wrap it in the library source, or pass "
            f"max_lines=None to see it anyway.")


def _display_path(path: str) -> str:
    """``grpo_lib/advantages.py`` for package files, else relative to the cwd."""
    import os
    from pathlib import Path

    file = Path(path).resolve()
    package_root = Path(__file__).resolve().parent.parent  # the folder of grpo_lib/
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
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
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
    kernels = torch.backends.cpu.get_cpu_capability()
    info["cpu"] = f"{cpu_model()}; torch kernels {kernels}"
    info["profile"] = str(profile())
    return info


def print_environment() -> None:
    """Print versions, device and profile: the first cell of every chapter."""
    for key, value in environment().items():
        print(f"{key:>12}: {value}")
