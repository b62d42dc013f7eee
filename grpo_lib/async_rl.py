"""Asynchronous GRPO: a rollout worker in its own process, with bounded staleness.

A synchronous step samples, then updates: the sampler waits for the update and the
update waits for the sampler. Here a **rollout worker** (its own process, its own CPU
core) samples batch :math:`s+1` while the trainer updates on batch :math:`s`.

* **Versions.** The policy after :math:`k` updates is version :math:`k`. The trainer
  publishes each version to a file (``policy.pt``: ``{"version", "state_dict"}``,
  written to a temporary name and renamed, so the worker never reads half a file) and
  in a shared counter. Batch :math:`s` trains update :math:`s+1`; the worker samples
  it with the newest version it has loaded, :math:`v`, and reports :math:`v` with the
  batch. Its **staleness** at update time is :math:`s - v`.
* **Bounded staleness** :math:`\\Delta` (AReaL's ``max_head_offpolicyness``). The
  worker starts batch :math:`s` only once version :math:`s - \\Delta` is published,
  so every batch is at most :math:`\\Delta` versions old: it waits instead of
  sampling too far ahead. :math:`\\Delta = 0` is the synchronous loop (batch
  :math:`s` is sampled by version :math:`s`, while the trainer waits). TRL's
  ``AsyncGRPOTrainer`` bounds the same number, ``max_staleness``, the other way: its
  workers sample ahead, and the trainer drops a sample that arrives too old.
* **The objective on stale data.** ``objective="ignore"`` trains on the batch as if
  it were on-policy (plain GRPO). ``"decoupled"`` is AReaL's decoupled PPO: the clip
  is taken against the *proximal* policy (the trainer's weights at the start of the
  update) and each token is weighted by
  :math:`\\pi_{\\text{prox}} / \\pi_{\\text{behav}}`, the behaviour policy being the
  version that sampled it (its log-probs come from the worker), bounded by
  ``behaviour_weight_cap``: AReaL drops a token whose weight exceeds the cap
  (weight 0, ``behaviour_weight_mode="token_mask"``); by default we truncate it to
  the cap (``"token_truncate"``), as TRL's sampling correction does.

    .. math:: \\mathcal L = -\\frac{\\pi_{\\text{prox}}}{\\pi_{\\text{behav}}}
       \\min\\big(\\rho\\hat A, \\operatorname{clip}(\\rho, 1-\\epsilon, 1+\\epsilon)
       \\hat A\\big), \\qquad \\rho = \\frac{\\pi_\\theta}{\\pi_{\\text{prox}}}

  This is our trainer's sampling correction (:func:`grpo_lib.losses.
  sampling_importance_weights`, in that mode) with the worker's log-probs.
* **Faults.** A worker that dies is started again from the batch the trainer needs
  next; the trainer loses no step (``worker_restarts`` counts them).

The worker samples with :func:`grpo_lib.fast_decode.decode_fast` drawing with
``torch.multinomial``: with :math:`\\Delta = 0` it draws the same tokens as our
synchronous trainer from the same seed, so an :math:`\\Delta = 0` run is the
synchronous run.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import queue as queue_module
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from .trainer import GRPOConfig, GRPOTrainer, _rollout_seed, sample_rollout
from .training_loop import epoch_order

OBJECTIVES = ("ignore", "decoupled")
BEHAVIOUR_WEIGHT_MODES = ("token_truncate", "token_mask")
MAX_RESTARTS_IN_A_ROW = 3
"""A worker that dies this many times without delivering a batch stops the run."""

ASYNC_COLUMNS = ["staleness", "time_wait", "time_worker_generate", "worker_restarts",
                 "time_total"]
"""Added to metrics.csv: the batch's staleness s - v, the seconds the trainer waited
for it, the seconds the worker spent sampling it, the worker restarts so far, and the
wall time since training started."""


@dataclasses.dataclass
class AsyncConfig:
    """How the rollout worker runs beside the trainer."""

    max_staleness: int = 1
    """Δ: a batch is sampled by a policy at most Δ versions older than the one it
    updates (0: synchronous)."""
    objective: str = "decoupled"
    """``"decoupled"`` (AReaL's decoupled PPO) or ``"ignore"`` (plain GRPO, the batch
    treated as on-policy)."""
    behaviour_weight_cap: float = 5.0
    """The bound c on the behaviour importance weight π_prox / π_behav."""
    behaviour_weight_mode: str = "token_truncate"
    """Above the bound: ``"token_truncate"`` weighs the token c (TRL's truncated
    importance sampling), ``"token_mask"`` drops it, weight 0 (AReaL's filter)."""
    worker_threads: int = 1
    """torch threads of the worker process."""
    wait_timeout: float = 600.0
    """Seconds the trainer waits for one batch before it gives up with an error."""

    def validate(self) -> "AsyncConfig":
        if not isinstance(self.max_staleness, int) or self.max_staleness < 0:
            raise ValueError(f"max_staleness={self.max_staleness!r}: use an integer "
                             f">= 0 (0 is synchronous).")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective={self.objective!r}; choose one of "
                             f"{OBJECTIVES}.")
        if not self.behaviour_weight_cap > 1:
            raise ValueError(f"behaviour_weight_cap={self.behaviour_weight_cap!r}: use "
                             f"a number > 1 (a fresh token's weight is 1).")
        if self.behaviour_weight_mode not in BEHAVIOUR_WEIGHT_MODES:
            raise ValueError(f"behaviour_weight_mode={self.behaviour_weight_mode!r}; "
                             f"choose one of {BEHAVIOUR_WEIGHT_MODES}.")
        if self.worker_threads < 1 or self.wait_timeout <= 0:
            raise ValueError("worker_threads must be >= 1 and wait_timeout > 0.")
        return self


# ======================================================================================
# The schedule, on paper
# ======================================================================================
def simulate_schedule(generate_s: float, update_s: float, max_staleness: int,
                      steps: int):
    r"""When each batch is sampled and by which version, for fixed durations.

    The worker samples batch :math:`s` (``generate_s`` seconds) once it is free and
    version :math:`s - \Delta` is published, with the newest published version; the
    trainer runs update :math:`s+1` (``update_s`` seconds) once it is free and batch
    :math:`s` is ready, and publishes version :math:`s+1` when it ends. Returns a
    DataFrame with one row per batch: ``version``, ``staleness`` (:math:`s - v`),
    ``sample_start``, ``ready``, ``update_end``.
    """
    import pandas as pd

    published = [0.0]  # published[v]: when version v became available
    worker_free = trainer_free = 0.0
    rows = []
    for s in range(steps):
        start = max(worker_free, published[max(0, s - max_staleness)])
        version = max(v for v, t in enumerate(published) if t <= start)
        ready = worker_free = start + generate_s
        trainer_free = max(trainer_free, ready) + update_s
        published.append(trainer_free)
        rows.append(dict(batch=s, version=version, staleness=s - version,
                         sample_start=start, ready=ready, update_end=trainer_free))
    return pd.DataFrame(rows).set_index("batch")


# ======================================================================================
# The worker (runs in its own process)
# ======================================================================================
def publish_policy(model, path: Path, version: int) -> None:
    """Write ``{"version", "state_dict"}`` to ``path`` atomically (temp + rename)."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"version": version, "state_dict": model.state_dict()}, tmp)
    os.replace(tmp, path)


def batch_rows(rows: Sequence[dict], seed: int, index: int, k: int) -> list[dict]:
    """The ``k`` rows of batch ``index`` in the trainer's seeded order
    (:meth:`grpo_lib.training_loop.TrainingLoop._next_rows`: one permutation per
    epoch, :func:`grpo_lib.training_loop.epoch_order`)."""
    out, start = [], index * k
    while len(out) < k:
        epoch, position = divmod(start + len(out), len(rows))
        order = epoch_order(seed, epoch, len(rows))
        take = min(k - len(out), len(rows) - position)
        out.extend(dict(rows[int(i)]) for i in order[position:position + take])
    return out


def worker_main(spec: dict, start_index: int, published, out_queue, stop) -> None:
    """The rollout worker: sample batch ``start_index``, ``start_index + 1``, ... .

    ``spec``: model folder and dtype, the policy file, the training rows and the
    sampling settings. ``published``: the shared version counter; ``stop``: a shared
    flag (both without a lock, which a killed worker could leave held). Before batch
    :math:`s` it waits until version :math:`s - \\Delta` is published, loads the newest
    policy file, samples, and puts ``{"index", "version", "rollout", "rows",
    "seconds"}`` on ``out_queue``.
    """
    from .fast_decode import decode_fast
    from .models import load_model_and_tokenizer
    from .qwen2 import Qwen2

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar at every (re)start
    torch.set_num_threads(spec["threads"])
    cfg: GRPOConfig = spec["config"]
    model, tokenizer = load_model_and_tokenizer(spec["model_dir"], device="cpu",
                                                dtype=spec["dtype"])
    sampler = Qwen2.from_transformers(model, share_weights=True)
    decode = functools.partial(decode_fast, sampler="multinomial")
    version, policy = -1, Path(spec["policy_file"])
    index = start_index
    while not stop.value:
        while published.value < index - spec["max_staleness"]:  # bounded staleness
            if stop.value:
                return
            time.sleep(0.002)
        if published.value != version:
            state = torch.load(policy, weights_only=True)
            with torch.no_grad():  # in place: the sampler shares these tensors
                for name, tensor in model.state_dict().items():
                    tensor.copy_(state["state_dict"][name])
            version = state["version"]
        rows = batch_rows(spec["rows"], cfg.seed, index, cfg.per_step_prompts)
        t0 = time.perf_counter()
        rollout = sample_rollout(sampler, tokenizer, rows, cfg,
                                 _rollout_seed(cfg.seed, index, 0), decode)
        out_queue.put({"index": index, "version": version, "rollout": rollout,
                       "rows": rows, "seconds": time.perf_counter() - t0})
        index += 1


# ======================================================================================
# The trainer
# ======================================================================================
class AsyncGRPOTrainer(GRPOTrainer):
    """:class:`~grpo_lib.trainer.GRPOTrainer` whose rollouts come from a worker process.

    Same arguments as ``GRPOTrainer`` plus ``async_config``. The model must be a
    saved folder's (``config.model_name_or_path``): the worker loads it there and then
    follows the published versions. Rewards, advantages, the update, logging,
    checkpoints and resume are the synchronous trainer's.
    """

    def __init__(self, model, tokenizer, reward_funcs, config: GRPOConfig,
                 train_dataset, eval_dataset=None, ref_model=None, callbacks=None,
                 async_config: AsyncConfig | None = None):
        self.async_config = (async_config or AsyncConfig()).validate()
        decoupled = self.async_config.objective == "decoupled"
        config = dataclasses.replace(
            config, rollout_engine="fast", rollout_sampler="multinomial",
            sampling_correction=decoupled,
            sampling_correction_mode=self.async_config.behaviour_weight_mode,
            sampling_correction_clip_min=None,
            sampling_correction_clip_max=self.async_config.behaviour_weight_cap)
        if config.dynamic_sampling:
            raise ValueError("dynamic_sampling=True: the async trainer takes one "
                             "batch per step from its worker; set it to false.")
        if config.updates_per_step != 1:
            raise ValueError(f"num_iterations={config.num_iterations}, "
                             f"num_mini_batches={config.num_mini_batches}: the async "
                             f"trainer's proximal policy is the policy at the start of "
                             f"the step, so it takes one update per step; set both "
                             f"to 1.")
        if not config.model_name_or_path or not Path(
                config.model_name_or_path).exists():
            raise ValueError(f"model_name_or_path={config.model_name_or_path!r}: the "
                             f"rollout worker loads the model from a saved folder.")
        super().__init__(model, tokenizer, reward_funcs, config, train_dataset,
                         eval_dataset, ref_model=ref_model, callbacks=callbacks)
        self._context = torch.multiprocessing.get_context("spawn")
        # shared without a lock: a worker killed while it held one would leave it
        # held, and the next worker and the trainer would wait on it forever
        self._published = self._context.Value("i", -1, lock=False)
        self._worker = self._queue = self._stop = None
        self._restarts, self._t_start = 0, None
        self._policy_file = self.output_dir / "async" / "policy.pt"
        self._async_stats: dict[str, float] = {}

    # -------------------------------------------------------------- the worker
    def _publish(self) -> None:
        self._policy_file.parent.mkdir(parents=True, exist_ok=True)
        publish_policy(self.model, self._policy_file, self.step)
        self._published.value = self.step

    def _start_worker(self) -> None:
        """Start a worker at the batch the trainer needs next (``self.step``)."""
        self._stop_worker()
        cfg, a = self.config, self.async_config
        spec = {"config": cfg, "model_dir": cfg.model_name_or_path,
                "dtype": next(self.model.parameters()).dtype,
                "policy_file": str(self._policy_file), "rows": list(self.train_rows),
                "threads": a.worker_threads, "max_staleness": a.max_staleness}
        self._queue = self._context.Queue()  # a fresh queue: a killed writer can
        # leave the old one corrupted; the stop flag has no lock, as _published
        self._stop = self._context.Value("b", 0, lock=False)
        self._worker = self._context.Process(
            target=worker_main, daemon=True, name="grpo-rollout-worker",
            args=(spec, self.step, self._published, self._queue, self._stop))
        self._worker.start()

    def _stop_worker(self) -> None:
        if self._worker is None:
            return
        self._stop.value = 1
        self._worker.join(timeout=5)
        if self._worker.is_alive():
            self._worker.kill()
            self._worker.join()
        self._worker = None

    def _next_batch(self) -> dict:
        """The worker's batch ``self.step``; restart the worker if it died."""
        deadline = time.perf_counter() + self.async_config.wait_timeout
        failed = 0  # restarts since the last batch arrived
        while True:
            try:
                item = self._queue.get(timeout=0.2)
            except queue_module.Empty:
                item = None
            except (ConnectionError, EOFError, OSError):
                # a batch cut off by a worker that died while sending it (its
                # tensors travel through a socket that closed with it)
                self._worker.join(timeout=5)
                if self._worker.is_alive():
                    raise
                item = None
            if item is None:
                if not self._worker.is_alive():
                    failed += 1
                    if failed > MAX_RESTARTS_IN_A_ROW:
                        raise RuntimeError(
                            f"the rollout worker died {failed} times in a row before "
                            f"delivering batch {self.step} (last exit code "
                            f"{self._worker.exitcode}); its traceback is above.")
                    self._restarts += 1
                    self._print(f"step {self.step + 1}: the rollout worker died "
                                f"(exit code {self._worker.exitcode}); restarting it "
                                f"at batch {self.step}.")
                    self._start_worker()
                elif time.perf_counter() > deadline:
                    raise TimeoutError(
                        f"no batch from the rollout worker in "
                        f"{self.async_config.wait_timeout:.0f} s; raise "
                        f"AsyncConfig.wait_timeout for a slow sampler.") from None
                continue
            if item["index"] == self.step:
                return item
            if item["index"] > self.step:
                raise RuntimeError(f"the worker sent batch {item['index']} while the "
                                   f"trainer needs batch {self.step}.")

    # -------------------------------------------------------------- the step
    def _sample_batch(self):
        t0 = time.perf_counter()
        item = self._next_batch()
        wait = time.perf_counter() - t0
        rows = self._next_rows(self.config.per_step_prompts)  # keep the data position
        if [r.get("question") for r in rows] != [r.get("question")
                                                 for r in item["rows"]]:
            raise RuntimeError("the worker's batch holds other rows than the trainer's "
                               "data order; they must follow the same seed.")
        staleness = self.step - item["version"]
        if staleness > self.async_config.max_staleness or staleness < 0:
            raise RuntimeError(f"batch {self.step} was sampled by version "
                               f"{item['version']}: staleness {staleness} outside "
                               f"[0, {self.async_config.max_staleness}].")
        rollout = item["rollout"]
        t1 = time.perf_counter()
        rewards, zeroed = self.score(rollout, rows)  # [B, F]
        self._async_stats = {"staleness": staleness, "time_wait": wait,
                             "time_worker_generate": item["seconds"],
                             "worker_restarts": self._restarts}
        stats = {"time_generate": wait, "time_reward": time.perf_counter() - t1,
                 "reward_errors": zeroed, "all_rewards": rewards,
                 "all_rollout": rollout, "all_rows": rows}
        return rollout, rows, rewards, stats

    def train_step(self) -> dict:
        metrics = super().train_step()
        self._publish()  # version self.step, for the worker's next batches
        metrics.update(self._async_stats,
                       time_total=time.perf_counter() - self._t_start)
        return metrics

    def _metric_columns(self) -> list[str]:
        return super()._metric_columns() + ASYNC_COLUMNS

    def _on_train_start(self) -> None:
        super()._on_train_start()
        self._t_start = time.perf_counter()
        self._publish()
        self._start_worker()

    def train(self):
        try:
            return super().train()
        finally:
            self._stop_worker()

    def _trainer_state(self) -> dict:
        return {**super()._trainer_state(), "worker_restarts": self._restarts}

    def _restore_trainer_state(self, state: dict) -> None:
        super()._restore_trainer_state(state)
        self._restarts = int(state.get("worker_restarts", 0))


def async_trainer_from_yaml(path, overrides: Sequence[str] = (),
                            async_overrides: dict[str, Any] | None = None
                            ) -> AsyncGRPOTrainer:
    """:func:`grpo_lib.trainer.trainer_from_yaml` with the async trainer."""
    from .models import load_model_and_tokenizer
    from .profiles import profile
    from .tasks import load_task_split
    from .trainer import MODEL_DTYPES, load_config

    config = load_config(path, overrides)
    async_config = AsyncConfig(**(async_overrides or {})).validate()
    model, tokenizer = load_model_and_tokenizer(
        config.model_name_or_path, device=config.device or profile().device,
        dtype=MODEL_DTYPES[config.model_dtype])
    train = load_task_split(config.task, "train")
    evals = (load_task_split(config.task, "test")
             if (config.eval_every or config.eval_on_start) else None)
    return AsyncGRPOTrainer(model, tokenizer, None, config, train, evals,
                            async_config=async_config)
