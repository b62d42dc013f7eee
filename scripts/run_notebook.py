#!/usr/bin/env python
"""Convert a chapter's jupytext source to a notebook, execute it and store the outputs.

    python scripts/run_notebook.py chapters/01_two_plus_three_times_four.py
    python scripts/run_notebook.py chapters/07_full_loop.py --profile gpu --timeout 1800

Steps:

1. read ``chapters/NN_slug.py`` (py:percent) with jupytext; the notebook keeps the pairing
   metadata ``jupytext: formats: ipynb,py:percent`` so ``jupytext --sync`` works later;
2. execute it with nbclient in the ``chapters/`` directory, in a ``python3`` kernel that
   runs *this* interpreter (the current virtual environment), with ``GRPO_PROFILE`` set
   from ``--profile`` (default: the environment's ``GRPO_PROFILE``, else ``cpu``);
3. write ``chapters/NN_slug.ipynb`` with its outputs and print the wall time. Cells whose
   type and source are unchanged keep the ids they had in the existing notebook, and no
   per-cell timestamps are stored, so a re-execution's diff shows what changed.

A ``.ipynb`` argument is accepted too: its ``.py`` twin is used when it exists, otherwise
the notebook itself is re-executed. The exit code is non-zero when a cell fails; the
notebook is then still written (with the error in its outputs) so it can be inspected.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

PROFILES = ("smoke", "cpu", "gpu")
PAIRING = "ipynb,py:percent"


def load_notebook(path: Path):
    """Read ``path`` (a py:percent source or an .ipynb) into an nbformat notebook."""
    import jupytext

    if path.suffix == ".ipynb" and path.with_suffix(".py").exists():
        path = path.with_suffix(".py")
    if not path.exists():
        raise SystemExit(f"run_notebook: {path} does not exist. Pass a chapter source such "
                         f"as chapters/01_two_plus_three_times_four.py.")
    if path.suffix == ".py":
        nb = jupytext.read(path, fmt="py:percent")
    elif path.suffix == ".ipynb":
        nb = jupytext.read(path)
    else:
        raise SystemExit(f"run_notebook: expected a .py (py:percent) or .ipynb file, got "
                         f"{path.name!r}.")
    nb.metadata.setdefault("jupytext", {})["formats"] = PAIRING
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)",
                                 "language": "python", "name": "python3"}
    nb.metadata.setdefault("language_info", {"name": "python"})
    return nb, path


def current_env_kernel_manager():
    """A kernel manager whose ``python3`` kernel is this interpreter (not a global one)."""
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import KernelManager

    spec = KernelSpec(
        argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name="Python 3 (ipykernel)", language="python",
    )

    class CurrentEnvKernelManager(KernelManager):
        @property
        def kernel_spec(self):  # noqa: D401 - jupyter_client property override
            return spec

    return CurrentEnvKernelManager(kernel_name="python3")


def execute(nb, workdir: Path, timeout: int | None) -> Exception | None:
    """Run every cell of ``nb`` in ``workdir``; return the first cell error (or None)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    client = NotebookClient(
        nb, km=current_env_kernel_manager(), timeout=timeout, kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}}, record_timing=False,
    )
    try:
        client.execute(cwd=str(workdir))
    except CellExecutionError as err:
        return err
    return None


def keep_cell_ids(nb, previous: Path) -> int:
    """Give each cell of ``nb`` the id of the first unused cell of the same type and
    source in the notebook at ``previous`` (if it exists); return how many were kept."""
    import uuid

    import nbformat

    if not previous.exists():
        return 0
    unused: dict[tuple[str, str], list[str]] = {}
    for cell in nbformat.read(previous, as_version=4).cells:
        if "id" in cell:
            unused.setdefault((cell.cell_type, cell.source), []).append(cell.id)
    kept = 0
    for cell in nb.cells:
        ids = unused.get((cell.cell_type, cell.source))
        if ids:
            cell.id = ids.pop(0)
            kept += 1
    seen: set[str] = set()
    for cell in nb.cells:  # a fresh id that happens to equal a kept one is replaced
        while cell.get("id") in seen:
            cell.id = uuid.uuid4().hex[:8]
        seen.add(cell.get("id"))
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="chapters/NN_slug.py (or .ipynb)")
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="sets GRPO_PROFILE for the kernel (default: $GRPO_PROFILE "
                             "or cpu)")
    parser.add_argument("--timeout", type=int, default=1800,
                        help="seconds allowed per cell (default 1800; -1 = no limit)")
    parser.add_argument("--output", type=Path, default=None,
                        help="where to write the notebook (default: next to the source)")
    args = parser.parse_args(argv)

    import nbformat

    nb, source = load_notebook(args.source)
    out = args.output or source.with_suffix(".ipynb")
    keep_cell_ids(nb, out)
    chosen = args.profile or os.environ.get("GRPO_PROFILE", "").strip().lower() or "cpu"
    if chosen not in PROFILES:
        raise SystemExit(f"run_notebook: unknown profile {chosen!r}; choose one of "
                         f"{PROFILES}.")
    os.environ["GRPO_PROFILE"] = chosen  # the kernel inherits this environment
    # let ipykernel pick its inline backend so figures land in the notebook
    os.environ.pop("MPLBACKEND", None)
    os.environ.setdefault("TQDM_MININTERVAL", "5")
    timeout = None if args.timeout is not None and args.timeout < 0 else args.timeout

    print(f"[run_notebook] {source} -> {out} (profile={chosen})", flush=True)
    start = time.perf_counter()
    error = execute(nb, source.resolve().parent, timeout)
    wall = time.perf_counter() - start
    nbformat.write(nb, out)
    status = "FAILED" if error else "ok"
    print(f"[run_notebook] {status}: {out} executed in {wall:.1f} s "
          f"(profile={chosen})", flush=True)
    if error is not None:
        print(str(error)[-3000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
