"""A whole run with TRL's ``GRPOTrainer``, logged the way our trainer logs it.

:func:`train_with_trl` takes one of our configs (the YAML chapter 7 trains), hands the
model, the task's rows (TRL's conversational format: a ``prompt`` column of messages),
our wrapped rewards (:func:`grpo_lib.trl_bridge.trl_reward_funcs`) and the translated
config (:func:`grpo_lib.trl_bridge.to_trl_config`) to ``trl.GRPOTrainer``, and writes
the run folder our tools read:

* ``metrics.csv``: one row per step, TRL's logged values under our column names
  (:data:`TRL_LOG_KEYS`) plus the step's wall time split into ``time_generate`` (inside
  TRL's ``_generate``) and ``time_update`` (the rest: rewards, log-probs, backward,
  optimizer), so :func:`grpo_lib.plots.plot_run` draws TRL's run like ours;
* ``eval.csv``: our evaluation harness (:func:`grpo_lib.evaluation.evaluate`, greedy)
  at step 0 and every ``eval_every`` steps, the same numbers chapter 7 prints;
* ``config.json`` (ours and TRL's), ``run_info.json`` (command, device, time);
* ``checkpoint-<step>/``: TRL's own checkpoints (model, optimizer, scheduler, RNG).

Ctrl-C writes a checkpoint first; ``resume_from_checkpoint`` ("latest" or a folder)
continues the run from one and cuts the logs back to its step.

    python -m grpo_lib trl-train --config configs/r1_zero_arithmetic.yaml \\
        --set max_steps=10 --set output_dir=runs/trl_smoke
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import NamedTuple, Sequence

from .trainer import GRPOConfig

TRL_LOG_KEYS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "completion_length": "completions/mean_length",
    "completion_length_max": "completions/max_length",
    "truncated_frac": "completions/clipped_ratio",
    "entropy": "entropy",
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "clip_frac_region": "clip_ratio/region_mean",
    "zero_std_frac": "frac_reward_zero_std",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "lr": "learning_rate",
}
"""Our ``metrics.csv`` column -> the key TRL 1.16 logs it under. Each reward function
adds ``reward/<name>`` (TRL: ``rewards/<name>/mean``); ``accuracy`` and ``format_rate``
are the accuracy and format rewards' means when the config uses them."""

TIME_COLUMNS = ("time_generate", "time_update", "time_step")


def trl_dataset(task: str, split: str, prompt_format: str = "chat"):
    """The task's rows for TRL: ``chat`` keeps the ``prompt`` column of messages
    (TRL's conversational format: TRL applies the chat template, as our trainer does);
    ``r1_zero`` puts the R1-Zero template's text there (TRL's standard format)."""
    from .tasks import load_task_split

    rows = load_task_split(task, split)
    if prompt_format == "r1_zero":
        from .tasks.arithmetic import r1_zero_prompt

        rows = rows.map(lambda r: {"prompt": r1_zero_prompt(r["question"])})
    return rows


def _metrics_row(step: int, logs: dict, reward_names: Sequence[str],
                 times: dict) -> dict:
    """One metrics.csv row from TRL's log dict of that step."""
    row = {"step": step}
    row.update({ours: logs.get(key) for ours, key in TRL_LOG_KEYS.items()})
    for name in reward_names:
        row[f"reward/{name}"] = logs.get(f"rewards/{name}/mean")
    row["accuracy"] = row.get("reward/accuracy_reward")
    row["format_rate"] = row.get("reward/format_reward")
    row.update(times)
    return row


class _RunLog:
    """TRL callbacks (built on ``transformers.TrainerCallback`` by
    :func:`_callback`): time the steps, write metrics.csv, evaluate."""

    def __init__(self, config: GRPOConfig, output_dir: Path, tokenizer, eval_rows,
                 reward_names: Sequence[str], print_fn):
        self.config, self.output_dir = config, output_dir
        self.tokenizer, self.eval_rows = tokenizer, eval_rows
        self.reward_names, self.print = list(reward_names), print_fn
        self.generate_seconds, self.step_start = 0.0, time.perf_counter()
        self.pending: dict | None = None  # TRL's log of the step
        self.ended: tuple | None = None  # (our step, end time, model) of the step
        self.evaluated: set[int] = set()
        self.bar = None  # our tqdm bar over the steps (see _own_progress)

    def our_step(self, state) -> int:
        return state.global_step // self.config.updates_per_step

    def timed(self, generate):
        """Wrap TRL's ``_generate`` to add its wall time to the step's."""
        def timed_generate(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.generate_seconds += time.perf_counter() - t0
        return timed_generate

    def evaluate(self, model, step: int) -> None:
        """Our harness at ``step`` (as our trainer's ``evaluate``), in eval mode;
        TRL's logging reads the mode, so it is put back."""
        from .trainer import eval_line, harness_row
        from .training_loop import append_metrics_row

        if step in self.evaluated or self.eval_rows is None:
            return
        was_training = model.training
        model.eval()
        row = harness_row(model, self.tokenizer, self.eval_rows, self.config, step)
        model.train(was_training)
        append_metrics_row(self.output_dir / "eval.csv", row, list(row))
        self.evaluated.add(step)
        self.print(eval_line(row))

    # -------------------------------------------------------------- TRL's events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.config.eval_on_start and state.global_step == 0:
            self.evaluate(model, 0)
        if self.bar is not None:  # a resumed run starts at its checkpoint's step
            self.bar.n = self.our_step(state)
            self.bar.refresh()
        self.step_start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:  # the per-step log (not the end-of-run summary)
            self.pending = dict(logs)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.config.updates_per_step:
            return  # within one rollout's mu updates
        # TRL logs the step after on_step_end: after_log writes the row
        self.ended = (self.our_step(state), time.perf_counter(), model)

    def after_log(self) -> None:
        """Runs after TRL's log of a step (our wrapper of ``trainer.log``)."""
        if self.ended is None or self.pending is None:
            return
        from .training_loop import append_metrics_row

        (step, now, model), self.ended = self.ended, None
        elapsed = now - self.step_start
        times = {"time_generate": self.generate_seconds,
                 "time_update": elapsed - self.generate_seconds, "time_step": elapsed}
        row = _metrics_row(step, self.pending, self.reward_names, times)
        append_metrics_row(self.output_dir / "metrics.csv", row, list(row))
        self.pending, self.generate_seconds = None, 0.0
        if self.config.print_every and step % self.config.print_every == 0:
            self.print(f"step {step}: reward={row['reward']:.3f} "
                       f"length={row['completion_length']:.1f} {elapsed:.2f} s "
                       f"(generate {times['time_generate']:.2f} s)")
        cfg = self.config
        last = step == cfg.max_steps and (cfg.eval_every or cfg.eval_on_start)
        if (cfg.eval_every and step % cfg.eval_every == 0) or last:
            self.evaluate(model, step)
        if self.bar is not None:
            self.bar.update(1)
            if step == self.config.max_steps:
                self.bar.close()
        self.step_start = time.perf_counter()


def _own_progress(trainer, log: _RunLog, config: GRPOConfig) -> None:
    """transformers prints every log dict (its Progress, NotebookProgress or Printer
    callback); keep our one bar over the steps and our own lines instead."""
    printers = ("ProgressCallback", "NotebookProgressCallback", "PrinterCallback")
    for callback in list(trainer.callback_handler.callbacks):
        if type(callback).__name__ in printers:
            trainer.remove_callback(callback)
    if config.progress_bar:
        from tqdm.auto import tqdm

        log.print = tqdm.write  # our lines above the bar, not through it
        log.bar = tqdm(total=config.max_steps, desc="TRL train", unit="step")


def _callback(log: _RunLog):
    """``log`` as a ``transformers.TrainerCallback``."""
    from transformers import TrainerCallback

    class RunLogCallback(TrainerCallback):
        def on_train_begin(self, *a, **k):
            log.on_train_begin(*a, **k)

        def on_log(self, *a, **k):
            log.on_log(*a, **k)

        def on_step_end(self, *a, **k):
            log.on_step_end(*a, **k)

    return RunLogCallback()


def _latest_trl_checkpoint(output_dir: Path) -> Path:
    from .checkpoints import checkpoint_dirs

    found = checkpoint_dirs(output_dir)
    if not found:
        raise FileNotFoundError(f"resume_from_checkpoint=latest: {output_dir} holds no "
                                f"checkpoint-<step>/ folder to resume from.")
    return found[-1]


def train_with_trl(config: GRPOConfig, *, resume_from_checkpoint: str | None = None,
                   trl_overrides: dict | None = None, command: str = "",
                   callbacks: Sequence = (), quiet: bool = True):
    """Train ``config`` with TRL's ``GRPOTrainer``; return the trainer.

    Writes the run folder of the module docstring into ``config.output_dir``.
    ``resume_from_checkpoint``: ``"latest"`` or a ``checkpoint-<step>`` folder (TRL's);
    ``trl_overrides``: extra ``trl.GRPOConfig`` fields (see
    :func:`grpo_lib.trl_bridge.to_trl_config`); ``callbacks``: more
    ``transformers.TrainerCallback`` objects for TRL's trainer. ``quiet`` silences
    TRL's and transformers' warnings and log printing (our own lines still print).
    """
    from .checkpoints import delete_checkpoints, refuse_to_overwrite_checkpoints
    from .display import environment
    from .models import load_model_and_tokenizer
    from .trainer import MODEL_DTYPES
    from .training_loop import truncate_logs
    from .trl_bridge import _import_trl, to_trl_config, trl_reward_funcs

    trl = _import_trl()
    resume_from_checkpoint = resume_from_checkpoint or config.resume_from_checkpoint
    config = dataclasses.replace(config, resume_from_checkpoint=None).validate()
    output_dir = Path(config.output_dir)
    trl_config = to_trl_config(config, **(trl_overrides or {}))
    checkpoint = None
    if resume_from_checkpoint:
        checkpoint = (_latest_trl_checkpoint(output_dir)
                      if resume_from_checkpoint == "latest"
                      else Path(resume_from_checkpoint))
        if not (checkpoint / "trainer_state.json").exists():
            raise FileNotFoundError(f"{checkpoint} is not a TRL checkpoint (it has no "
                                    f"trainer_state.json).")
        done = json.loads((checkpoint / "trainer_state.json").read_text())
        truncate_logs(output_dir, ("metrics.csv", "eval.csv"),
                      done["global_step"] // config.updates_per_step)
    else:
        if config.overwrite_output_dir:
            delete_checkpoints(output_dir)
        refuse_to_overwrite_checkpoints(output_dir)
        for name in ("metrics.csv", "eval.csv"):
            (output_dir / name).unlink(missing_ok=True)
    model, tokenizer = load_model_and_tokenizer(
        config.model_name_or_path, device="cpu", dtype=MODEL_DTYPES[config.model_dtype])
    train_rows = trl_dataset(config.task, "train", config.prompt_format)
    eval_rows = (trl_dataset(config.task, "test", config.prompt_format)
                 if (config.eval_every or config.eval_on_start) else None)
    rewards = trl_reward_funcs(config)
    log = _RunLog(config, output_dir, tokenizer, eval_rows,
                  [r.__name__ for r in rewards], print)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.json").write_text(json.dumps(
        {"grpo_lib": config.to_dict(), "trl": trl_config.to_dict()}, indent=1,
        default=str) + "\n")
    quiet_ctx = _quiet() if quiet else contextlib.nullcontext()
    with quiet_ctx:
        trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer,
                                  reward_funcs=rewards, args=trl_config,
                                  train_dataset=train_rows,
                                  callbacks=[_callback(log), *callbacks])
        _own_progress(trainer, log, config)
        trainer._generate = log.timed(trainer._generate)
        trainer_log = trainer.log

        def log_then_write(logs, *args, **kwargs):
            trainer_log(logs, *args, **kwargs)
            log.after_log()

        trainer.log = log_then_write
        t0 = time.perf_counter()
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint
                          else None)
        except KeyboardInterrupt:
            trainer._save_checkpoint(trainer.model, trial=None)
            step = trainer.state.global_step
            print(f"\nInterrupted: saved {output_dir}/checkpoint-{step}; continue with "
                  f"resume_from_checkpoint=latest.", file=sys.stderr)
            raise
    info = {"command": command, "seconds": round(time.perf_counter() - t0, 1),
            "steps": trainer.state.global_step // config.updates_per_step,
            "trainer": f"trl.GRPOTrainer {trl.__version__}",
            "resumed_from": str(checkpoint) if checkpoint else None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **environment()}
    (output_dir / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return trainer


@contextlib.contextmanager
def _quiet():
    """No warnings and no transformers info lines (TRL prints its own notices)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" at each checkpoint
    old = os.environ.get("TRANSFORMERS_VERBOSITY")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        if old is not None:
            os.environ["TRANSFORMERS_VERBOSITY"] = old


class Parity(NamedTuple):
    """Our loss and TRL's on one batch (:func:`loss_parity`)."""

    prompts_equal: bool
    """TRL's prompt tokens (its own ``_tokenize_prompts``) equal ours."""
    loss_ours: float
    loss_trl: float
    grad_max_abs_diff: float
    """Largest gap between the two gradients, over every weight."""
    grad_max_abs: float
    """Largest gradient entry (the scale of the gap)."""
    tokens: int
    """Completion tokens in the batch."""


def loss_parity(model, tokenizer, config: GRPOConfig, rows: Sequence[dict],
                seed: int = 0) -> Parity:
    """One batch, two losses: ours (:func:`grpo_lib.losses.policy_loss`) and TRL's own
    ``_compute_loss``, with their gradients, on the same tokens and advantages.

    The batch is real: ``len(rows)`` prompts x G completions sampled from ``model``
    (our sampler, ``seed``), scored by ``config``'s rewards, advantages by
    :func:`grpo_lib.advantages.group_advantages`. Each side gets its own copy of
    ``model`` and computes its own log-probs (TRL's
    ``_get_per_token_logps_and_entropies``, ours :func:`sequence_logprobs`); the
    whole batch is one micro-batch, on-policy (the first update of a step).
    """
    import copy

    import torch
    from datasets import Dataset

    from .advantages import group_advantages
    from .logprobs import sequence_logprobs
    from .losses import policy_loss
    from .rewards import combine_rewards
    from .sampling import generate
    from .trainer import build_reward_funcs
    from .trl_bridge import _import_trl, to_trl_config, trl_reward_funcs

    trl = _import_trl()
    G, prompts = config.num_generations, [r["prompt"] for r in rows]
    roll = generate(model, tokenizer, prompts, num_generations=G,
                    max_new_tokens=config.max_completion_length,
                    temperature=config.temperature, top_p=config.top_p, seed=seed)
    columns = {k: [r[k] for r in rows for _ in range(G)] for k in rows[0]}
    reward = combine_rewards(build_reward_funcs(config.reward_funcs),
                             config.reward_weights)
    total = torch.tensor(reward(roll.texts, **columns), dtype=torch.float32,
                         device=roll.completion_ids.device)  # [B]
    advantages = group_advantages(total, G, scale=config.scale_rewards)  # [B]
    mask = roll.completion_mask  # [B, C]

    ours = copy.deepcopy(model).train()
    logp = sequence_logprobs(ours, roll.prompt_ids, roll.prompt_mask,
                             roll.completion_ids, mask,
                             temperature=config.temperature)  # [B, C]
    loss, _ = policy_loss(logp, None, advantages, mask, loss_type=config.loss_type,
                          epsilon=config.epsilon, epsilon_high=config.epsilon_high,
                          max_completion_length=config.max_completion_length)
    loss.backward()

    small = dataclasses.replace(config, micro_batch_size=None, output_dir=str(
        Path(config.output_dir) / "parity"), max_steps=1,
        device=mask.device.type)  # TRL's copy on the model's device
    with _quiet():
        trainer = trl.GRPOTrainer(model=copy.deepcopy(model),
                                  processing_class=tokenizer,
                                  reward_funcs=trl_reward_funcs(small),
                                  args=to_trl_config(small),
                                  train_dataset=Dataset.from_list(list(rows)))
    theirs = trainer.model.train()
    trl_ids = trainer._tokenize_prompts(prompts)[0]
    ours_ids = [[t for t, m in zip(ids, keep) if m] for ids, keep in
                zip(roll.prompt_ids[::G].tolist(), roll.prompt_mask[::G].tolist())]
    inputs = dict(prompt_ids=roll.prompt_ids, prompt_mask=roll.prompt_mask,
                  completion_ids=roll.completion_ids, completion_mask=mask,
                  advantages=advantages, num_items_in_batch=mask.sum())
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets
    trl_loss = trainer._compute_loss(theirs, inputs)
    trl_loss.backward()
    gaps = [(a.grad - b.grad).abs().max().item() for a, b in
            zip(ours.parameters(), theirs.parameters())]
    scale = max(a.grad.abs().max().item() for a in ours.parameters())
    return Parity([list(x) for x in trl_ids] == ours_ids, loss.item(),
                  trl_loss.item(), max(gaps), scale, int(mask.sum()))


def load_trl_run(path: str | Path, overrides: Sequence[str] = (),
                 trl_overrides: Sequence[str] = ()):
    """``python -m grpo_lib trl-train``: read and check our YAML config and the TRL
    overrides now (a mistake raises before anything loads); return the run to call."""
    from .trainer import load_config
    from .trl_bridge import to_trl_config
    from .yaml_config import read_yaml_values

    config = load_config(path, overrides)
    extra = read_yaml_values(None, trl_overrides, GRPOConfig) if trl_overrides else {}
    to_trl_config(dataclasses.replace(config, resume_from_checkpoint=None), **extra)
    command = "python -m grpo_lib " + " ".join(sys.argv[1:])
    return lambda: train_with_trl(config, trl_overrides=extra, command=command)
