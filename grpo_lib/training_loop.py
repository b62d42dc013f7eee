"""The loop every trainer in grpo_lib shares: everything around a training step.

``GRPOTrainer`` (trainer.py), ``SFTTrainer`` (sft.py) and pretraining (pretrain.py) each
write one method, ``train_step()``: one step of their algorithm, returning its metrics.
:class:`TrainingLoop` runs it until ``max_steps`` and does the rest, once for all three:

- **fresh or resumed.** A fresh run seeds python, numpy and torch with ``seed``, starts
  new logs and refuses an ``output_dir`` holding an earlier run's checkpoints
  (``overwrite_output_dir`` deletes them). ``resume_from_checkpoint`` (a folder or
  ``"latest"``) restores model, optimizer, schedule, RNGs, step and data position
  (checkpoints.py) and drops log rows written after that step, so that on a CPU the
  resumed run goes on exactly as the uninterrupted one.
- **metrics.** One CSV row per step in ``metrics.csv``, in the columns of the file's
  header (a resumed run's rows line up with the earlier ones).
- **checkpoints** every ``save_every`` steps, and after the last with ``save_final``.
- **Ctrl-C.** The update in flight finishes (:func:`deferred_sigint`), a checkpoint of
  the last completed step is written, then ``KeyboardInterrupt`` propagates.
- **the NaN guard.** :func:`guarded_optimizer_step` skips an update whose loss or
  gradient norm is NaN/inf: the parameters stay as they were and the run goes on.
- **the learning-rate schedule**: linear warm-up, then constant, linear or cosine
  (:func:`lr_multiplier`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from . import checkpoints

LR_SCHEDULERS = ("constant", "linear", "cosine")


# ======================================================================================
# The learning-rate schedule
# ======================================================================================
def lr_multiplier(update: int, total: int, warmup: int, kind: str,
                  min_lr_rate: float = 0.0) -> float:
    """Learning-rate factor: linear warm-up over ``warmup`` updates, then the schedule.

    (The warm-up starts at ``1/W``, not at 0 as in ``transformers``' schedulers, whose
    first update has learning rate 0 and so does nothing.)

    .. math:: f(u) = \\frac{u+1}{W}\\ (u < W), \\text{ then }
              1,\\quad m + (1-m)\\Big(1-\\frac{u-W}{N-W}\\Big),\\quad
              m + (1-m)\\tfrac12\\Big(1+\\cos\\pi\\frac{u-W}{N-W}\\Big)

    for ``constant``, ``linear`` and ``cosine``, with ``N`` updates in all and the floor
    ``m = min_lr_rate`` (0: decay to 0).
    """
    if update < warmup:
        return (update + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = min(1.0, (update - warmup) / max(1, total - warmup))
    if kind == "linear":
        return min_lr_rate + (1 - min_lr_rate) * max(0.0, 1.0 - progress)
    return min_lr_rate + (1 - min_lr_rate) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_updates(warmup_steps: float, total: int) -> int:
    """Warm-up length in updates: an int is a count, a float in (0, 1) a share of
    ``total`` (TRL 1.16's ``warmup_steps``; older TRL called the share warmup_ratio)."""
    if warmup_steps >= 1:
        return int(warmup_steps)
    return math.ceil(warmup_steps * total)


def lr_scheduler(optimizer, total: int, warmup: int, kind: str,
                 min_lr_rate: float = 0.0) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of :func:`lr_multiplier` over ``total`` updates, as a LambdaLR."""
    if kind not in LR_SCHEDULERS:
        raise ValueError(f"lr_scheduler_type={kind!r}; choose one of {LR_SCHEDULERS}.")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda u: lr_multiplier(u, total, warmup, kind, min_lr_rate)
    )


# ======================================================================================
# Ctrl-C and the NaN guard
# ======================================================================================
@contextlib.contextmanager
def deferred_sigint(flag: dict):
    """Inside this block Ctrl-C (SIGINT) only sets ``flag["interrupted"]``.

    The optimizer update is not interrupted half-way, so a checkpoint written after
    Ctrl-C always holds a consistent (model, optimizer, step) triple. Only possible in
    the main thread (the Python rule for signal handlers); elsewhere it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.signal(
            signal.SIGINT, lambda *_: flag.update(interrupted=True)
        )
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def nonfinite_loss(loss: torch.Tensor, where: str) -> str | None:
    """Why the update must be skipped when ``loss`` is NaN/inf (else ``None``)."""
    if torch.isfinite(loss):
        return None
    return f"the loss is {loss.item()} ({where})"


def guarded_optimizer_step(model, optimizer, scheduler, max_grad_norm: float,
                           problem: str | None = None) -> tuple[float, str | None]:
    """The NaN guard: clip the gradient norm and step, or skip a non-finite update.

    Clipping: :math:`g \\leftarrow g \\cdot \\min(1, c / \\lVert g \\rVert_2)` with
    ``c = max_grad_norm`` (0: no clipping, the norm is still measured). The update is
    skipped (gradients dropped; parameters, optimizer state and schedule unchanged) when
    the caller found a ``problem`` (a NaN/inf loss, :func:`nonfinite_loss`) or the norm
    is NaN/inf.

    Returns ``(grad_norm, problem)``; ``problem`` is ``None`` when the step was taken.
    """
    grad_norm = math.nan
    if problem is None:
        params = [p for p in model.parameters() if p.grad is not None]
        clip = max_grad_norm if max_grad_norm > 0 else float("inf")
        grad_norm = (
            torch.nn.utils.clip_grad_norm_(params, clip).item() if params else 0.0
        )
        if not math.isfinite(grad_norm):
            problem = f"the gradient norm is {grad_norm}"
    if problem is not None:
        optimizer.zero_grad(set_to_none=True)
        return grad_norm, problem
    optimizer.step()
    scheduler.step()
    return grad_norm, None


# ======================================================================================
# The logs
# ======================================================================================
def append_metrics_row(path: Path, row: dict, columns: Sequence[str]) -> None:
    """Append ``row`` to the CSV at ``path`` (a new file gets the header ``columns``).

    An existing file keeps its own header, so a resumed run's rows line up with the
    earlier rows even when today's trainer logs more columns.
    """
    new = not path.exists() or path.stat().st_size == 0
    fieldnames = list(columns)
    if not new:
        with open(path, newline="", encoding="utf-8") as fh:
            fieldnames = next(csv.reader(fh), None) or fieldnames
    with open(path, "a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order of ``n`` training rows in ``epoch``: a permutation seeded by
    ``(seed, epoch)``, so any process can compute which rows a step takes."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def truncate_logs(output_dir: Path, names: Sequence[str], step: int) -> None:
    """On resume, drop the rows of the logs ``names`` (``.csv`` or ``.jsonl``, each row
    with a ``step``) written after ``step``: the resumed run writes them again."""
    for name in names:
        path = output_dir / name
        if not path.exists():
            continue
        if name.endswith(".jsonl"):
            lines = [
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if line and json.loads(line)["step"] <= step
            ]
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            continue
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header, kept = reader.fieldnames, [
                r for r in reader if int(float(r["step"])) <= step
            ]
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=header)
            writer.writeheader()
            writer.writerows(kept)


# ======================================================================================
# The loop
# ======================================================================================
@dataclass
class RunSettings:
    """The loop's settings; each trainer fills them from its own config's names."""

    output_dir: str | Path
    """Where the logs, config.json and checkpoint-<step>/ folders go."""
    max_steps: int
    """Optimizer steps of the whole run."""
    seed: int = 0
    """Seeds python, numpy and torch at the start of a fresh run, and the data order."""
    save_every: int = 0
    """Write a checkpoint every N steps (0: never, except on Ctrl-C)."""
    save_final: bool = False
    """Write a checkpoint after the last step."""
    print_every: int = 0
    """Print a one-line summary every N steps (0: never)."""
    log_every: int = 1
    """Write a metrics row every N steps (and on the first and last step)."""
    progress_bar: bool = True
    """Show one tqdm bar over the steps."""
    resume_from_checkpoint: str | None = None
    """A checkpoint-<step> folder to resume from, or ``"latest"`` (in output_dir)."""
    overwrite_output_dir: bool = False
    """Let a fresh run delete an earlier run's checkpoints in output_dir."""


class TrainingLoop:
    """Base class of the trainers: the loop around ``train_step`` (module docstring).

    A subclass builds ``config``, ``model``, ``tokenizer``, ``optimizer``, ``scheduler``
    and ``train_rows`` in its ``__init__``, ends it with :meth:`_start_loop`, and
    defines :meth:`train_step`, which advances ``self.step`` by one (inside
    ``deferred_sigint`` around the update) and takes its data from :meth:`_next_rows`.
    """

    bar_label = "train"
    """Label of the progress bar."""
    log_files: tuple[str, ...] = ("metrics.csv", "eval.csv")
    """Logs a fresh run deletes and a resumed run cuts back to its step."""
    metrics_file = "metrics.csv"
    """The per-step CSV."""
    config_file: str | None = "config.json"
    """Where the run's config is written (``None``: not written)."""

    # ------------------------------------------------------------------ set-up
    def _start_loop(self, run: RunSettings,
                    callbacks: Sequence[Callable] | None = None) -> None:
        """Set the loop's state; fail now on a bad resume path or a used output_dir."""
        self.run_settings = run
        self.device = next(self.model.parameters()).device
        self.callbacks = list(callbacks or [])
        self.step = 0  # completed training steps
        self.epoch, self.position = 0, 0  # data order: epoch, index in its permutation
        self.history: list[dict] = []
        self.output_dir = Path(run.output_dir)
        self._flag = {"interrupted": False}
        if run.resume_from_checkpoint:
            self.resolve_checkpoint(run.resume_from_checkpoint)  # fail before training
        elif not run.overwrite_output_dir:
            checkpoints.refuse_to_overwrite_checkpoints(self.output_dir)

    def _begin_run(self) -> None:
        """Resume from the checkpoint, or start fresh (new logs, seeded generators)."""
        run = self.run_settings
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if run.resume_from_checkpoint:
            self.load_checkpoint(run.resume_from_checkpoint)
            truncate_logs(self.output_dir, self.log_files, self.step)
        else:
            for name in self.log_files:
                (self.output_dir / name).unlink(missing_ok=True)
            if run.overwrite_output_dir:
                deleted = checkpoints.delete_checkpoints(self.output_dir)
                if deleted:
                    self._print(f"overwrite_output_dir: deleted {deleted} "
                                f"checkpoint(s) of an earlier run in "
                                f"{self.output_dir}.")
            random.seed(run.seed)
            np.random.seed(run.seed)
            torch.manual_seed(run.seed)
        if self.config_file:
            (self.output_dir / self.config_file).write_text(
                json.dumps(self.config.to_dict(), indent=2)
            )

    # ------------------------------------------------------------------ data order
    def _order(self, epoch: int) -> np.ndarray:
        """The permutation of the training rows used in ``epoch`` (seeded)."""
        return epoch_order(self.run_settings.seed, epoch, len(self.train_rows))

    def _next_rows(self, k: int) -> list[dict]:
        """The next ``k`` training rows in the seeded order, crossing epochs."""
        rows = []
        while len(rows) < k:
            order = self._order(self.epoch)
            take = min(k - len(rows), len(order) - self.position)
            rows.extend(
                self.train_rows[int(i)]
                for i in order[self.position : self.position + take]
            )
            self.position += take
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return [dict(r) for r in rows]

    # ------------------------------------------------------------------ the loop
    def train(self):
        """Train for ``max_steps`` steps; return the metrics as a pandas DataFrame.

        On Ctrl-C (``KeyboardInterrupt``) a checkpoint of the last completed step is
        written, then the ``KeyboardInterrupt`` propagates (resume with
        ``resume_from_checkpoint``).
        """
        import pandas as pd
        from tqdm.auto import tqdm

        run = self.run_settings
        self._begin_run()
        self._flag["interrupted"] = False
        bar = tqdm(total=run.max_steps, initial=self.step, desc=self.bar_label,
                   leave=False, disable=not run.progress_bar, dynamic_ncols=True)
        data_position = (self.step, self.epoch, self.position)
        try:
            self._on_train_start()
            while self.step < run.max_steps:
                step_before = self.step
                metrics = self.train_step()
                data_position = (self.step, self.epoch, self.position)
                self.history.append(metrics)
                if self._log_this_step():
                    self._write_metrics_row(metrics)
                bar.update(self.step - step_before)
                bar.set_postfix(**self._progress_postfix(metrics), refresh=False)
                if run.print_every and self.step % run.print_every == 0:
                    self._print(self._summary_line(metrics))
                self._after_step(metrics)
                if run.save_every and self.step % run.save_every == 0:
                    self.save_checkpoint()
                for cb in self.callbacks:
                    cb(self, metrics)
                if self._flag["interrupted"]:
                    raise KeyboardInterrupt
            if run.save_final:
                self.save_checkpoint()
        except KeyboardInterrupt:
            bar.close()
            # An interrupt before a step's update leaves the model as it was after the
            # last completed step; rewind the data order to that step too. (If the
            # step did complete, its own data position is already the current one.)
            if self.step == data_position[0]:
                self.epoch, self.position = data_position[1:]
            path = self.save_checkpoint()
            self._print(
                f"Interrupted: saved {path} (step {self.step}). Resume with "
                f"resume_from_checkpoint='{path}'."
            )
            raise
        finally:
            bar.close()
        return pd.DataFrame(self.history, columns=self._metric_columns())

    def train_step(self) -> dict:
        """One optimizer step of the algorithm; returns its metrics (with ``step``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks
    def _on_train_start(self) -> None:
        """Called once before the first step of ``train()`` (e.g. evaluate first)."""

    def _after_step(self, metrics: dict) -> None:
        """Called after each step's metrics row, before its checkpoint."""

    def _progress_postfix(self, metrics: dict) -> dict:
        """What the progress bar shows after a step."""
        return {}

    def _metric_columns(self) -> list[str]:
        """The columns of the metrics CSV (and of ``train()``'s DataFrame)."""
        return ["step"]

    @staticmethod
    def _summary_line(metrics: dict) -> str:
        """One line of a step's metrics (``print_every``; ``run_training``)."""
        return f"step {int(metrics['step']):>4}"

    def _trainer_state(self) -> dict:
        """What ``trainer_state.json`` records beside step, data position and config."""
        return {}

    def _restore_trainer_state(self, state: dict) -> None:
        """Take back what :meth:`_trainer_state` recorded."""

    def _checkpointed_models(self) -> dict:
        """Models besides ``model`` whose weights change during the run (a synced
        reference), by the name of their folder in a checkpoint."""
        return {}

    # ------------------------------------------------------------------ logging
    def _print(self, message: str) -> None:
        from tqdm.auto import tqdm

        tqdm.write(message)

    def _log_this_step(self) -> bool:
        """Whether this step gets a metrics row (``log_every``; first and last do)."""
        every = self.run_settings.log_every
        return (every <= 1 or self.step % every == 0 or self.step == 1
                or self.step >= self.run_settings.max_steps)

    def _write_metrics_row(self, metrics: dict) -> None:
        append_metrics_row(self.output_dir / self.metrics_file, metrics,
                           self._metric_columns())

    def _skip_update(self, problem: str, advice: str) -> None:
        """Say that the NaN guard skipped this step's update, and what to look at."""
        self._print(f"step {self.step + 1}: {problem} -- skipped this update, the "
                    f"parameters are unchanged. {advice}")

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``output_dir/checkpoint-<step>/`` atomically (checkpoints.py)."""
        state = {"step": self.step, "epoch": self.epoch, "position": self.position,
                 **self._trainer_state(), "config": self.config.to_dict()}
        return checkpoints.save_checkpoint(self.output_dir, self.model, self.tokenizer,
                                           self.optimizer, self.scheduler, state,
                                           self._checkpointed_models())

    def resolve_checkpoint(self, path: str | Path) -> Path:
        """The checkpoint folder ``path`` names (``"latest"``: the highest step in
        output_dir); raises ``FileNotFoundError`` saying what to pass instead."""
        return checkpoints.resolve_checkpoint(path, self.output_dir)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore model (and :meth:`_checkpointed_models`), optimizer, scheduler,
        RNGs, step and data order."""
        path = self.resolve_checkpoint(path)
        state = checkpoints.load_checkpoint(path, self.model, self.optimizer,
                                            self.scheduler, self.device,
                                            self._checkpointed_models())
        self.step, self.epoch, self.position = (
            state["step"], state["epoch"], state["position"])
        self._restore_trainer_state(state)
        self._print(f"resumed from {path} (step {self.step})")
        if self.step >= self.run_settings.max_steps:
            self._print(f"the checkpoint is at step {self.step} and max_steps is "
                        f"{self.run_settings.max_steps}: nothing left to train. Raise "
                        f"max_steps to go on (the learning-rate schedule is set by "
                        f"max_steps).")


def run_training(trainer: TrainingLoop):
    """Run ``trainer`` to its ``max_steps``; print the time and the last summary."""
    t0 = time.perf_counter()
    metrics = trainer.train()
    print(
        f"trained {trainer.step} steps in {time.perf_counter() - t0:.0f}s; "
        f"outputs in {trainer.output_dir}"
    )
    if len(metrics):
        print(trainer._summary_line(metrics.iloc[-1].to_dict()))
    return metrics
