"""The stored outputs of the chapters still match the library they show.

A chapter's ``show_source`` output names the file and the first line it shows. When
the library changes, the stored notebook would show code the package no longer has;
this test fails then, naming the chapter to re-execute."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = re.compile(r"```python\n# (\S+), lines? (\d+)")


def _shown_sources():
    for notebook in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            for output in cell.get("outputs", []):
                text = "".join(output.get("data", {}).get("text/markdown", []))
                match = HEADER.match(text)
                if match:
                    code = text.split("\n")[2:]
                    yield notebook.name, match.group(1), int(match.group(2)), code


def test_every_shown_source_matches_the_library():
    stale, seen = [], 0
    for chapter, path, first, code in _shown_sources():
        seen += 1
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
        shown = [line for line in code if line.strip() and not line.startswith("```")]
        want = shown[0].strip() if shown else ""
        got = lines[first - 1].strip() if first <= len(lines) else "<past the end>"
        if want and not got.startswith(want[:40]):
            stale.append(f"{chapter}: {path} line {first} is {got[:50]!r}, the stored "
                         f"output shows {want[:50]!r}")
    assert seen > 20, f"found only {seen} shown sources; did show_source change?"
    assert not stale, ("stored show_source outputs no longer match the library; "
                       "re-execute these chapters:\n" + "\n".join(stale))
