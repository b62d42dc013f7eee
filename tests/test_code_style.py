"""Code lines fit the rendered book's column: at most 88 characters.

Shown source (``show_source``) and the chapters' code cells are read in a column about
88 characters wide; a longer line is clipped or scrolls. Characters are counted, not
bytes (``—`` or ``ε`` is one character).
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 88


def long_lines(paths: list[Path]) -> list[str]:
    """``file:line (length)`` of every line longer than :data:`MAX_LINE` characters."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), 1):
            if len(line) > MAX_LINE:
                found.append(f"{path.relative_to(ROOT)}:{number} ({len(line)} chars)")
    return found


def _report(offenders: list[str]) -> str:
    return (f"{len(offenders)} line(s) longer than {MAX_LINE} characters:\n  "
            + "\n  ".join(offenders))


def test_library_lines_fit_the_column():
    paths = sorted((ROOT / "grpo_lib").rglob("*.py"))
    assert paths
    offenders = long_lines(paths)
    assert not offenders, _report(offenders)


# --------------------------------------------------------------------------------------
# The chapters' jupytext sources (chapters/NN_slug.py). Their code cells are what the
# reader sees in the book and in Jupyter; their markdown lines (``# text``) wrap the
# same way. A Markdown table row (``# | ... |`` in a markdown cell) cannot be split
# over lines and is rendered as a table, not clipped, so it is the one exception.
# The chapters are edited separately from the library: a failure here names the chapter.
# --------------------------------------------------------------------------------------
def chapter_long_lines(path: Path) -> list[str]:
    found, markdown = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
        if len(line) <= MAX_LINE or (markdown and line.startswith("# |")):
            continue
        found.append(f"{path.relative_to(ROOT)}:{number} ({len(line)} chars)")
    return found


CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))


def test_there_are_chapters():
    assert CHAPTERS


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_lines_fit_the_column(path):
    offenders = chapter_long_lines(path)
    assert not offenders, _report(offenders)


def test_solution_code_lines_fit_the_column():
    """The ```python blocks of the appendix (book/solutions/*.md)."""
    offenders = []
    for path in sorted((ROOT / "book" / "solutions").glob("*.md")):
        in_code = False
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                in_code = line.startswith("```python")
                continue
            if in_code and len(line) > MAX_LINE:
                where = f"{path.relative_to(ROOT)}:{number}"
                offenders.append(f"{where} ({len(line)} chars)")
    assert not offenders, _report(offenders)
