r"""Products by a weight through oneDNN's packed copies, where the machine rewards it.

oneDNN, which PyTorch ships on CPUs, can copy a weight ``W`` ``[K, N]`` once into a
blocked layout for products with a given number of rows, and then multiply by it
(:func:`pack_for_rows`). This is the weight prepacking ``torch.compile`` does on a
CPU. Whether it is faster than ``torch.mm`` depends on the CPU: on the AMD EPYC VMs of
``benchmarks/README.md`` a decode step's 64-row products ran 1.0-3.3 times as fast
packed, on an Intel Xeon VM 0.6-0.9 times (slower). So the library measures it, the
way ``torch.backends.cudnn.benchmark`` picks a convolution algorithm: once per shape
and thread count on a machine, :func:`packing_pays` times both products and packs only
where the packed one wins by :data:`PACKING_MARGIN`.

The choice changes only round-off (which can still send a training run another
way after some steps): both products compute :math:`xW` in float32
(``tests/test_fast_decode.py``, ``tests/test_packed_linear.py``). So that a
seeded run repeats itself on the same machine, the first measurement of each shape is
kept in a small JSON file (:func:`decisions_file`: ``$GRPO_LIB_CACHE/packing.json``,
by default ``~/.cache/grpo_lib``), keyed by the CPU, the torch version and the thread
count, and later processes read it instead of timing again. The environment variable
``GRPO_LIB_PACKING`` (``auto``, the default; ``always``; ``never``) or :func:`packing`
fixes the choice instead.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

from .speed import cpu_name, fastest_seconds

__all__ = ["pack_for_rows", "packing_applies", "pack_if_it_pays", "packed_product",
           "PACKING_MODES", "PACKING_MARGIN", "packing_mode", "packing", "packing_pays",
           "decisions_file"]

PACKING_MODES = ("auto", "always", "never")
PACKING_MARGIN = 0.9  # packed must take < 0.9 x the plain product's time to be used


def _mode_from_environment() -> str:
    mode = os.environ.get("GRPO_LIB_PACKING", "auto").strip().lower() or "auto"
    if mode not in PACKING_MODES:
        raise ValueError(f"GRPO_LIB_PACKING={mode!r}; set it to one of "
                         f"{PACKING_MODES} (or leave it unset for 'auto').")
    return mode


_MODE = _mode_from_environment()


def pack_for_rows(weight: Tensor, rows: int) -> Tensor | None:
    """oneDNN's blocked copy of ``weight`` ``[K, N]`` for products with ``rows`` rows,
    or None where it does not apply (a GPU, a dtype other than float32, a torch
    without oneDNN). Products by it (:func:`packed_product`) equal ``torch.mm``'s to
    float32 round-off. Packs whatever the mode; :func:`packing_pays` says whether to."""
    if not packing_applies(weight):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), rows)
    except (AttributeError, RuntimeError):  # a torch built without the op
        return None


def packing_applies(weight: Tensor) -> bool:
    """Whether oneDNN can pack ``weight``: float32, on a CPU, in a torch with oneDNN."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32
            and torch.backends.mkldnn.is_available())


def pack_if_it_pays(weight: Tensor, rows: int) -> Tensor | None:
    """:func:`pack_for_rows`' copy of ``weight`` ``[K, N]`` where packing applies and
    :func:`packing_pays` for ``[rows, K] x [K, N]`` products; else None."""
    if not packing_applies(weight) or not packing_pays(rows, *weight.shape):
        return None
    return pack_for_rows(weight, rows)


def packed_product(x: Tensor, packed: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ W + bias`` for ``x`` ``[T, K]`` and ``W`` packed by
    :func:`pack_for_rows`. Returns ``[T, N]``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def packing_mode() -> str:
    """The current mode: ``"auto"`` (measure), ``"always"`` or ``"never"``."""
    return _MODE


@contextmanager
def packing(mode: str):
    """Within the block, pack ``"always"``, ``"never"`` or where it pays
    (``"auto"``): ``with packing("never"): ...``."""
    global _MODE
    if mode not in PACKING_MODES:
        raise ValueError(f"packing mode {mode!r}; choose one of {PACKING_MODES}.")
    before, _MODE = _MODE, mode
    try:
        yield
    finally:
        _MODE = before


def packing_pays(rows: int, k: int, n: int) -> bool:
    """Whether products ``[rows, K] x [K, N]`` should multiply by a packed weight
    here: in ``"auto"`` mode, when :func:`_packed_is_faster` measured it so on this
    machine (rows rounded up to a power of two, for the current thread count)."""
    if _MODE != "auto":
        return _MODE == "always"
    bucket = 1 << max(0, int(rows) - 1).bit_length()  # 64 -> 64, 1392 -> 2048
    return _packed_is_faster(bucket, int(k), int(n), torch.get_num_threads())


def decisions_file() -> Path:
    """Where measured decisions are kept: ``$GRPO_LIB_CACHE/packing.json``, by
    default ``~/.cache/grpo_lib/packing.json``."""
    folder = os.environ.get("GRPO_LIB_CACHE")
    if not folder:
        try:
            folder = Path.home() / ".cache" / "grpo_lib"
        except (RuntimeError, KeyError):  # no home folder: the system's temporary one
            folder = Path(tempfile.gettempdir()) / "grpo_lib"
    return Path(folder) / "packing.json"


def _load_decisions() -> dict:
    try:
        decisions = json.loads(decisions_file().read_text())
        return decisions if isinstance(decisions, dict) else {}
    except (OSError, ValueError):  # no file yet, or a damaged one: measure again
        return {}


def _save_decision(key: str, pays: bool) -> None:
    """Add one decision to the file (written whole to a temporary file, then renamed,
    so a reader never sees half a file); a folder that cannot be written is skipped:
    the decision then holds for this process only."""
    path, temporary = decisions_file(), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        decisions = _load_decisions()  # read again: another process may have added
        decisions[key] = pays
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                         suffix=".tmp") as fh:
            temporary = fh.name
            json.dump(decisions, fh, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


@functools.lru_cache(maxsize=None)
def _packed_is_faster(rows: int, k: int, n: int, threads: int) -> bool:
    """Whether ``[rows, K] x [K, N]`` runs faster packed on this machine: read from
    :func:`decisions_file` when an earlier process measured it, else measured now
    (:func:`_measure`, a few ms to tens of ms) and written there."""
    key = (f"{cpu_name()} | torch {torch.__version__} | {threads} threads | "
           f"{rows}x{k}x{n}")
    decision = _load_decisions().get(key)
    if not isinstance(decision, bool):
        decision = _measure(rows, k, n)
        _save_decision(key, decision)
    return decision


def _measure(rows: int, k: int, n: int) -> bool:
    """Time ``[rows, K] x [K, N]`` packed and plain on random numbers, alternating;
    True when the packed product takes less than :data:`PACKING_MARGIN` of the plain
    one's time."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, k, generator=gen)
    w = torch.randn(k, n, generator=gen)
    packed = pack_for_rows(w, rows)
    if packed is None:
        return False
    with torch.no_grad():
        plain_s, packed_s = float("inf"), float("inf")
        for _ in range(2):  # alternate, so a change of machine load hits both
            plain_s = min(plain_s, fastest_seconds(lambda: torch.mm(x, w), calls=3))
            packed_s = min(packed_s, fastest_seconds(lambda: packed_product(x, packed),
                                                     calls=3))
    return packed_s < PACKING_MARGIN * plain_s
