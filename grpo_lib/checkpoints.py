"""Checkpoint folders: what a run writes so that it can stop and go on exactly.

``output_dir/checkpoint-<step>/`` holds

- the model (``save_pretrained``) and its tokenizer: the folder loads as a model too;
- ``optimizer.pt`` (AdamW's moments) and ``scheduler.pt`` (the learning-rate schedule's
  position);
- ``rng_state.pt``: the python, numpy and torch (and CUDA) generators;
- ``trainer_state.json``: the completed ``step``, the data order's ``epoch`` and
  ``position``, the ``config``, and whatever else the trainer adds.

Every trainer in grpo_lib (GRPO, SFT, pretraining) writes and reads this one format
through :class:`grpo_lib.training_loop.TrainingLoop`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders in ``output_dir``, in step order."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.glob("checkpoint-*")
             if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def refuse_to_overwrite_checkpoints(output_dir: str | Path) -> None:
    """A fresh run must not mix with (or silently replace) an earlier run's
    checkpoints: ``resume_from_checkpoint="latest"`` would later pick the wrong one."""
    found = checkpoint_dirs(output_dir)
    if found:
        names = ", ".join(p.name for p in found[:4])
        names += ", ..." if len(found) > 4 else ""
        raise FileExistsError(
            f"output_dir {output_dir} already holds checkpoints of an earlier run "
            f"({names}). Continue that run with resume_from_checkpoint=latest, pick "
            f"another output_dir, or set overwrite_output_dir=true to delete them.")


def delete_checkpoints(output_dir: str | Path) -> int:
    """Delete every ``checkpoint-<step>`` folder in ``output_dir``; return how many."""
    found = checkpoint_dirs(output_dir)
    for path in found:
        shutil.rmtree(path)
    return len(found)


def resolve_checkpoint(path: str | Path, output_dir: str | Path) -> Path:
    """The checkpoint folder ``path`` names (``"latest"``: the highest step in
    ``output_dir``); raises ``FileNotFoundError`` saying what to pass instead."""
    if str(path) == "latest":
        found = checkpoint_dirs(output_dir)
        if not found:
            raise FileNotFoundError(
                f"resume_from_checkpoint='latest' but "
                f"{output_dir} has no checkpoint-<step> folder."
            )
        return found[-1]
    path = Path(path)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(
            f"{path} is not a checkpoint (no trainer_state.json); "
            f"pass a folder such as {output_dir}/checkpoint-10."
        )
    return path


def save_checkpoint(output_dir: str | Path, model, tokenizer, optimizer, scheduler,
                    state: dict, others: dict | None = None) -> Path:
    """Write ``output_dir/checkpoint-<state["step"]>/`` atomically (temp dir + rename).

    ``state`` (step, epoch, position, config, ...) becomes ``trainer_state.json``;
    each of ``others`` (``{"ref_model": model}``) is saved in a folder of its name.
    A folder of the same step (an earlier run's) is replaced.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    step = state["step"]
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f".tmp-checkpoint-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    _save_model(model, tmp)
    for name, other in (others or {}).items():
        _save_model(other, tmp / name)
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(_rng_state(), tmp / "rng_state.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    if final.exists():  # an older run's checkpoint with the same step
        trash = output_dir / f".old-checkpoint-{step}-{os.getpid()}"
        os.replace(final, trash)
        shutil.rmtree(trash)
    os.replace(tmp, final)
    return final


def load_checkpoint(path: Path, model, optimizer, scheduler, device,
                    others: dict | None = None) -> dict:
    """Restore model (and ``others``, as saved), optimizer, scheduler and RNGs from
    ``path``; return its ``trainer_state.json`` (the trainer restores step and data
    order from it). Every file is read before anything is restored: a damaged or
    missing one (:func:`read_file`) leaves the run as it was."""
    state = read_file(path / "trainer_state.json", lambda f: json.loads(f.read_text()))
    weights = _read_weights(path, device)
    other_weights = {}
    for name in others or {}:
        if not (path / name).is_dir():
            raise ValueError(
                f"the checkpoint {path} has no {name}/ folder: it was written by a run "
                f"that did not keep its {name} (sync_ref_model off?); resume with the "
                f"settings it was written with, or start the run afresh.")
        other_weights[name] = _read_weights(path / name, device)
    optim, sched = (read_file(path / name, lambda f: torch.load(f, weights_only=True))
                    for name in ("optimizer.pt", "scheduler.pt"))
    rng = read_file(path / "rng_state.pt",  # our own file, numpy's state included
                    lambda f: torch.load(f, weights_only=False))
    _load_model(model, path, weights)
    for name, other in (others or {}).items():
        _load_model(other, path / name, other_weights[name])
    optimizer.load_state_dict(optim)
    scheduler.load_state_dict(sched)
    _restore_rng(rng)
    return state


def read_file(file: Path, reader):
    """``reader(file)``; where the file is missing or cannot be parsed (cut short by a
    full disk, a partial copy), one ``ValueError`` that names it and says what to do
    (torch, safetensors and json each raise their own kind of error)."""
    try:
        return reader(file)
    except Exception as err:  # noqa: BLE001 -- zip, safetensors, json, pickle errors
        # the checkpoint folder: the file's own, or its parent's (ref_model/...)
        folder = next((p for p in file.parents if p.name.startswith("checkpoint-")),
                      file.parent)
        found = [d for d in checkpoint_dirs(folder.parent) if d != folder]
        instead = (f"resume from another of the run's checkpoints, e.g. "
                   f"resume_from_checkpoint={found[-1]}" if found else
                   "start the run afresh (overwrite_output_dir)")
        raise ValueError(
            f"the checkpoint file {file} cannot be read ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:120] if str(err) else 'no message'}): the "
            f"checkpoint is damaged or incomplete; {instead}.") from err


def _save_model(model, folder: Path) -> None:
    """``model.save_pretrained(folder)`` without transformers' progress bar."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in the logs
    try:
        model.save_pretrained(folder)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _read_weights(path: Path, device) -> dict:
    """The tensors of every ``*.safetensors`` file in ``path``, by name."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        read_file(path / "model.safetensors", lambda f: f.open())  # names the file
    weights = {}
    for file in files:
        weights.update(read_file(file, lambda f: load_file(f, device=str(device))))
    return weights


def _load_model(model, path: Path, weights: dict) -> None:
    """Load ``weights``, read from ``path``, into ``model`` (tied ones too)."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    tied |= set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [m for m in missing if m not in tied]
    if missing or unexpected:
        raise RuntimeError(
            f"checkpoint {path} does not fit this model: missing "
            f"{missing[:5]}, unexpected {unexpected[:5]}."
        )
    if hasattr(model, "tie_weights"):
        model.tie_weights()


def _rng_state() -> dict:
    """The python, numpy, torch (and CUDA) generator states."""
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def _restore_rng(rng: dict) -> None:
    """Set the generators back to states saved by :func:`_rng_state`."""
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
