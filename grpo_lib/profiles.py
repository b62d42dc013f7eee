"""One place that decides how big every chapter's runs are.

Three profiles:

* ``smoke`` — what CI runs: seconds per chapter, still real code on a real (tiny) model;
* ``cpu``   — a reader's laptop: minutes per chapter;
* ``gpu``   — one GPU: the full runs.

The default is ``gpu`` when CUDA is available and ``cpu`` otherwise; the environment
variable ``GRPO_PROFILE`` overrides it (``GRPO_PROFILE=smoke pytest --nbval-lax ...``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

PROFILES = ("smoke", "cpu", "gpu")
ENV_VAR = "GRPO_PROFILE"


@dataclass(frozen=True)
class Profile:
    """The chosen profile: its name, the torch device and the training dtype."""

    name: str
    device: str
    dtype: torch.dtype

    def pick(self, *, smoke: Any, cpu: Any, gpu: Any) -> Any:
        """Return the value for this profile: ``P.pick(smoke=2, cpu=50, gpu=400)``."""
        return {"smoke": smoke, "cpu": cpu, "gpu": gpu}[self.name]

    @property
    def is_smoke(self) -> bool:
        return self.name == "smoke"

    def __str__(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        return f"profile={self.name} device={self.device} dtype={dtype}"


def profile(name: str | None = None) -> Profile:
    """Choose the profile: ``name`` if given, else ``$GRPO_PROFILE``, else from the
    device.

    The device is CUDA when available (even for ``smoke``/``cpu``, so a GPU reader's
    smoke run is still fast); the dtype is bfloat16 on a GPU that supports it, float32
    otherwise.
    """
    chosen = name or os.environ.get(ENV_VAR, "").strip().lower() or None
    has_cuda = torch.cuda.is_available()
    if chosen is None:
        chosen = "gpu" if has_cuda else "cpu"
    if chosen not in PROFILES:
        raise ValueError(
            f"Unknown profile {chosen!r} (from {'argument' if name else ENV_VAR}). "
            f"Choose one of {PROFILES}, e.g. `export {ENV_VAR}=cpu`."
        )
    if chosen == "gpu" and not has_cuda:
        raise RuntimeError(
            f"Profile 'gpu' was requested but torch sees no CUDA device. "
            f"Unset {ENV_VAR} or set it to 'cpu' (or 'smoke') on this machine."
        )
    device = "cuda" if has_cuda else "cpu"
    bf16 = has_cuda and torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float32
    return Profile(name=chosen, device=device, dtype=dtype)
