"""The GRPO trainer: sample groups, score them, turn rewards into advantages, update.

One training *step* (DeepSeekMath, Shao et al. 2024, Algorithm 1, with TRL's names):

1. **rollout** — take ``per_step_prompts`` prompts and sample ``num_generations``
   (``G``) completions for each with the current policy
   (:func:`grpo_lib.sampling.generate`);
2. **rewards** — score every completion with each reward function, log each function,
   combine them with ``reward_weights`` (:math:`r_i = \\sum_k w_k r_{k,i}`);
3. **credit** — group-relative advantages
   (:func:`grpo_lib.advantages.group_advantages`);
4. **old and reference log-probs** — only what the loss needs: the old policy's
   log-probs only when a batch feeds more than one optimizer step (``num_iterations``
   (μ) > 1 or ``num_mini_batches`` > 1; with one step the sampling policy *is* the
   current policy, so ``old = logp.detach()``, as in TRL), the reference model's only
   when ``beta > 0``;
5. **update** — μ passes over the batch, each split into ``num_mini_batches``
   mini-batches (whole groups, or with ``shuffle_mini_batches`` the rows shuffled as
   TRL does: :func:`mini_batch_order`); each mini-batch accumulates gradients over
   micro-batches (:func:`grpo_lib.losses.policy_loss`), clips the gradient norm and
   takes one AdamW step (warm-up, then the learning-rate schedule).

"Algorithm = credit assigner + loss": step 3 and step 5 are separate functions, and
``scale_rewards`` / ``loss_type`` choose each independently.

Around the step: sample completions in ``output_dir/samples.jsonl`` (and a compact
printout) every ``sample_every`` steps and the evaluation harness every ``eval_every``
steps (``eval.csv``). The rest of the loop is
:class:`grpo_lib.training_loop.TrainingLoop`, shared with SFT and pretraining: per-step
metrics in ``output_dir/metrics.csv``, atomic checkpoints every ``save_every`` steps
(grpo_lib.checkpoints), exact resume on CPU, Ctrl-C saving a checkpoint before
stopping. ``_update`` skips an update whose loss or gradient is NaN/inf.

TRL equivalence: one step here is one *generation batch* in TRL with
``generation_batch_size = per_step_prompts * num_generations``,
``steps_per_generation = generation_batch_size / micro_batch_size`` and
``gradient_accumulation_steps = steps_per_generation / num_mini_batches``; TRL counts
μ x num_mini_batches optimizer steps for it, we count one step (and as many
updates).
"""

from __future__ import annotations


import copy
import functools
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import parsing
from .advantages import decoupled_advantages, group_advantages
from .evaluation import completion_correct
from .fast_decode import FAST_SAMPLERS
from .logprobs import sequence_logprobs
from .losses import (LOSS_TYPES, SAMPLING_IS_MODES, adaptive_entropy_coef,
                     check_entropy_control, check_entropy_quantile,
                     check_loss_settings, entropy_bonus, high_entropy_mask,
                     off_policy_sequence_mask, policy_loss, sampling_importance_weights)
from .objective import sync_reference
from .optim import CPUOffloadAdamW
from .sampling import Rollout, generate
from .shared_prompt import group_logprobs
from .training_loop import (
    LR_SCHEDULERS,
    RunSettings,
    TrainingLoop,
    append_metrics_row,
    lr_scheduler,
    run_training,
    warmup_updates,
)
from .training_loop import deferred_sigint as _deferred_sigint  # train_step's name
from .yaml_config import YAMLConfig, read_yaml_values

SCALE_REWARDS = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
PROMPT_FORMATS = ("chat", "r1_zero")
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "auto": "auto"}
ROLLOUT_ENGINES = ("transformers", "scratch", "fast")

METRIC_COLUMNS = [
    "step",
    "reward",
    "reward_std",
    "accuracy",
    "format_rate",
    "completion_length",
    "completion_length_max",
    "length_correct",
    "length_wrong",
    "length_gap_in_group",
    "truncated_frac",
    "entropy",
    "kl",
    "clip_frac_low",
    "clip_frac_high",
    "clip_frac_region",
    "zero_std_frac",
    "loss",
    "grad_norm",
    "lr",
    "num_groups",
    "num_tokens",
    "skipped_updates",
    "reward_errors",
    "time_generate",
    "time_reward",
    "time_update",
    "time_step",
]
"""Columns of ``metrics.csv``; then one ``reward/<name>`` column per reward function."""
SAMPLING_COLUMNS = ["sampling_weight_mean", "sampling_weight_min",
                    "sampling_weight_max", "sampling_logp_gap_mean",
                    "sampling_logp_gap_max"]
"""Added with ``sampling_correction``: the importance weights of the first pass over
the batch and the |trainer - sampler| log-prob gap of its tokens."""


# ======================================================================================
# Configuration
# ======================================================================================
@dataclass
class GRPOConfig(YAMLConfig):
    """Every knob of a GRPO run, named as in TRL's ``GRPOConfig`` where TRL has it.

    Defaults suit the book's tiny model on a CPU; ``validate()`` explains bad settings.
    """

    # ---- model and data
    model_name_or_path: str = "data/models/tiny-qwen2-base"
    """Folder (or hub name) of the policy to train; used by ``train_from_yaml``."""
    model_dtype: str = "float32"
    """Dtype ``train_from_yaml`` loads the policy in: "float32" (weights and Adam
    states in full precision, whatever the file stores), "bfloat16", or "auto" (the
    dtype its config.json names: bfloat16 for the Countdown bases)."""
    task: str = "arithmetic"
    """Task whose ``train``/``test`` splits ``train_from_yaml`` loads."""
    prompt_format: str = "chat"
    """``"chat"`` (the row's chat messages) or ``"r1_zero"`` (raw R1-Zero template)."""
    reward_funcs: list = field(
        default_factory=lambda: ["accuracy_reward", "format_reward"]
    )
    """Names in ``grpo_lib.rewards`` (or ``{"name": ..., **params}``)."""
    reward_weights: list | None = None
    """One weight per reward function (``None``: all 1.0); r = sum_k w_k r_k."""

    # ---- rollout
    per_step_prompts: int = 16
    """Prompts per step (TRL: generation_batch_size = per_step_prompts * G)."""
    num_generations: int = 8
    """G, completions sampled per prompt (the group); >= 2."""
    max_completion_length: int = 64
    """Most tokens sampled per completion; longer ones are truncated."""
    temperature: float = 1.0
    """Sampling temperature (the log-probs use the same temperature, as in TRL)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability."""
    ignore_eos: bool = False
    """Never stop early: every completion is max_completion_length long (benchmarks)."""
    generation_batch_size: int | None = None
    """Rows decoded at once (memory; a seed draws other tokens at another size)."""
    rollout_engine: str = "fast"
    """Model that samples: "fast" (grpo_lib.fast_decode's step on the policy's weights,
    chapter 19: the tokens of "transformers", faster), "transformers" (the policy in
    chapter 6's loop) or "scratch" (grpo_lib.qwen2 with a static KV cache)."""
    rollout_sampler: str = "multinomial"
    """How the "fast" engine draws a token: "multinomial" (``torch.multinomial``'s
    tokens, the standard path's, drawn faster on a CPU by ``sample_multinomial``),
    "inverse_cdf" (one ``torch.rand`` number per row; a CUDA graph replays both) or
    "race" (the same race on other uniform numbers); chapter 19 trains with each."""
    dynamic_sampling: bool = False
    """DAPO: drop zero-variance groups and sample more prompts to refill the batch."""
    dynamic_sampling_max_rounds: int = 3
    """Most extra sampling rounds per step when ``dynamic_sampling`` is on."""
    dynamic_sampling_metric: str | None = None
    """The reward (a ``reward_funcs`` name) that must vary within a group for
    ``dynamic_sampling`` to keep it; ``None``: the weighted total (DAPO). verl calls
    it ``algorithm.filter_groups.metric``."""

    # ---- credit assignment and loss
    scale_rewards: str = "group"
    """Advantage scale: ``"group"`` std, ``"batch"`` std, or ``"none"`` (Dr. GRPO)."""
    multi_objective_aggregation: str = "sum_then_normalize"
    """Sum then normalise (GRPO), or ``normalize_then_sum`` (GDPO: no scale_rewards)."""
    loss_type: str = "grpo"
    """``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``, ``reinforce``, ``cispo``, ``sapo``,
    ``luspo`` or ``vespo``."""
    beta: float = 0.0
    """KL coefficient to the reference (the initial model, frozen unless
    ``sync_ref_model``); 0 means no reference model at all."""
    use_bias_correction_kl: bool = True
    """Multiply the KL term by the ratio (TRL 1.16's default; losses.policy_loss)."""
    sync_ref_model: bool = False
    """TR-DPO: every ``ref_model_sync_steps`` steps, move the reference toward the
    policy (``objective.sync_reference``); needs ``beta > 0``."""
    ref_model_mixup_alpha: float = 0.6
    """The policy's share of the new reference, in (0, 1]; 1 resets the reference to
    the policy (ProRL's reference reset)."""
    ref_model_sync_steps: int = 512
    """Steps between two syncs of the reference (TRL counts them x num_iterations)."""
    epsilon: float = 0.2
    """Clip range: the ratio is clipped to [1 - epsilon, 1 + epsilon_high]."""
    epsilon_high: float | None = None
    """Upper clip (DAPO's clip-higher uses 0.28); ``None``: same as epsilon. For
    ``cispo``: the cap on the ratio itself (e.g. 5.0)."""
    importance_sampling_level: str = "token"
    """One ratio per ``"token"`` (PPO/GRPO) or per ``"sequence"`` (GSPO)."""
    delta: float | None = None
    """Two-sided clipping (INTELLECT-2): the unclipped ratio capped at ``delta``
    (> 1 + epsilon_high; INTELLECT-2 uses 4); ``None``: PPO's clip alone."""
    sapo_temperature_pos: float = 1.0
    """``sapo``: the gate's sharpness (SAPO's "temperature") for tokens with A > 0."""
    sapo_temperature_neg: float = 1.05
    """``sapo``: the gate's sharpness for tokens with A <= 0."""
    vespo_k_pos: float = 2.0
    """``vespo``: the power k of w^k e^(lambda (1 - w)) for A >= 0 (TRL's default)."""
    vespo_lambda_pos: float = 3.0
    """``vespo``: the decay lambda for A >= 0 (the weight peaks at w = k / lambda)."""
    vespo_k_neg: float = 3.0
    """``vespo``: the power k for A < 0."""
    vespo_lambda_neg: float = 2.0
    """``vespo``: the decay lambda for A < 0."""
    top_entropy_quantile: float = 1.0
    """Keep the policy term of this share of each micro-batch's tokens, those of
    highest entropy (Wang et al. 2025 use 0.2); 1 keeps every token."""
    off_policy_mask_threshold: float | None = None
    """DeepSeek-V3.2: drop completions with A < 0 whose mean log pi_old - log pi_theta
    exceeds it (pi_old: the policy that sampled them); ``None``: keep all."""
    entropy_coef: float = 0.0
    """Entropy bonus: subtract ``entropy_coef`` x the mean token entropy from the loss
    (TRL's ``entropy_coef``); 0 means none."""
    use_adaptive_entropy: bool = False
    """Skywork-OR1's adaptive entropy control (TRL's ``use_adaptive_entropy``):
    ``entropy_coef`` is the first coefficient, moved by ``entropy_coef_delta`` after
    every optimizer step (:func:`~grpo_lib.losses.adaptive_entropy_coef`) and applied
    only after a step whose entropy was at or under ``entropy_target``."""
    entropy_target: float = 0.2
    """Adaptive control: the token-mean entropy, in nats, held as the floor."""
    entropy_coef_delta: float = 0.005
    """Adaptive control: the coefficient's move per optimizer step."""
    entropy_coef_min: float = 0.0
    """Adaptive control: the smallest coefficient."""
    entropy_coef_max: float = 1.0
    """Adaptive control: the largest coefficient."""
    num_iterations: int = 1
    """μ, optimizer passes over each sampled batch (> 1 needs the old log-probs)."""
    num_mini_batches: int = 1
    """Optimizer steps per pass: this many mini-batches (whole groups, unless
    shuffle_mini_batches), one update each (PPO's; > 1 needs the old log-probs)."""
    shuffle_mini_batches: bool = False
    """With num_mini_batches > 1: shuffle the batch's rows before the split, as TRL
    does (one permutation per step, from seed and step), so a group's completions
    land in different mini-batches. Needs share_group_prompt=False."""
    mask_truncated_completions: bool = False
    """Leave completions that hit max_completion_length out of the loss (DAPO)."""

    # ---- optimisation
    learning_rate: float = 5e-4
    """AdamW learning rate (TRL's default 1e-6 suits 0.5B+ models, not tiny ones)."""
    lr_scheduler_type: str = "constant"
    """After warm-up: ``"constant"``, ``"linear"`` decay to 0, or ``"cosine"`` to 0."""
    warmup_steps: float = 0
    """Linear warm-up: an int is updates, a float in (0, 1) a share of all updates."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0: no clipping; the norm is logged)."""
    micro_batch_size: int | None = None
    """Rows per forward/backward (gradient accumulation); ``None``: the whole batch."""
    sampling_correction: bool = False
    """Weight the loss by pi_old / pi_sampler, per completion or per token, truncated
    or masked (sampling_correction_mode): TRL's vllm_importance_sampling_correction,
    for the sampler's numerics against the trainer's. Needs rollout_engine="fast"."""
    sampling_correction_mode: str = "sequence_mask"
    """token_truncate | token_mask | sequence_truncate | sequence_mask (TRL's
    default): per token or per completion; clip the weight or drop what is outside."""
    sampling_correction_clip_max: float | None = 3.0
    """Upper bound of the weight (None: none)."""
    sampling_correction_clip_min: float | None = None
    """Lower bound of the weight (None: none)."""
    optimizer_offload: bool = False
    """Keep AdamW's moments and float32 master weights in CPU memory
    (grpo_lib.optim.CPUOffloadAdamW): frees 2N numbers of GPU memory for two copies
    per update."""
    share_group_prompt: bool = False
    """Update: compute each group's prompt once for its G completions
    (grpo_lib.shared_prompt; the same log-probs to round-off, less work). Needs a
    Qwen2 policy and a micro_batch_size that is a multiple of num_generations."""
    max_steps: int = 100
    """Training steps (each: one rollout batch and updates_per_step optimizer
    updates)."""
    seed: int = 0
    """Seeds the data order, every rollout and the global RNGs."""

    # ---- logging, evaluation, checkpoints
    output_dir: str = "runs/grpo"
    """Where metrics.csv, samples.jsonl, eval.csv and checkpoint-<step>/ are written."""
    progress_bar: bool = True
    """Show one tqdm bar over the steps."""
    print_every: int = 0
    """Print a one-line metrics summary every N steps (0: never)."""
    sample_every: int = 10
    """Save (samples.jsonl) and print sample completions every N steps (0: never)."""
    num_print_samples: int = 4
    """How many completions of one group the sample printout shows."""
    eval_every: int = 0
    """Run the evaluation harness on eval_dataset every N steps (0: never)."""
    eval_on_start: bool = False
    """Also evaluate before the first step (step 0)."""
    eval_n: int = 200
    """Held-out problems per evaluation."""
    eval_batch_size: int = 64
    """Sequences decoded together during evaluation."""
    save_every: int = 0
    """Write checkpoint-<step>/ every N steps (0: never, except on Ctrl-C)."""
    save_final: bool = False
    """Write a checkpoint after the last step."""
    resume_from_checkpoint: str | None = None
    """A checkpoint-<step> folder to resume from, or ``"latest"`` (in output_dir)."""
    overwrite_output_dir: bool = False
    """Let a fresh run delete an earlier run's checkpoints in output_dir (default:
    refuse)."""
    device: str | None = None
    """Device for train_from_yaml (``None``: the profile's, CUDA when available)."""

    @property
    def batch_size(self) -> int:
        """Completions per step, B = per_step_prompts * num_generations."""
        return self.per_step_prompts * self.num_generations

    @property
    def updates_per_step(self) -> int:
        """Optimizer updates per step: num_iterations * num_mini_batches."""
        return self.num_iterations * self.num_mini_batches

    @property
    def vespo_shape(self) -> tuple[float, float, float, float]:
        """``(vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg)``."""
        return (self.vespo_k_pos, self.vespo_lambda_pos, self.vespo_k_neg,
                self.vespo_lambda_neg)

    def validate(self) -> "GRPOConfig":
        """Check every setting; raise ``ValueError`` saying what to change."""
        problems = []

        def bad(msg: str) -> None:
            problems.append(msg)

        if not isinstance(self.num_generations, int) or self.num_generations < 2:
            bad(
                f"num_generations={self.num_generations!r}: GRPO compares completions "
                f"within a group, so G must be an integer >= 2 (a group of 1 has "
                f"advantage 0); try 4 or 8."
            )
        if not isinstance(self.per_step_prompts, int) or self.per_step_prompts < 1:
            bad(
                f"per_step_prompts={self.per_step_prompts!r}: need at least 1 prompt "
                f"per step."
            )
        if self.micro_batch_size is not None:
            if not isinstance(self.micro_batch_size, int) or self.micro_batch_size < 1:
                bad(
                    f"micro_batch_size={self.micro_batch_size!r}: use a positive "
                    f"integer or None (whole batch)."
                )
            elif (
                isinstance(self.per_step_prompts, int)
                and isinstance(self.num_generations, int)
                and self.batch_size % self.micro_batch_size
            ):
                divisors = [
                    d for d in range(1, self.batch_size + 1) if self.batch_size % d == 0
                ]
                bad(
                    f"micro_batch_size={self.micro_batch_size} does not divide the "
                    f"batch per_step_prompts * num_generations = "
                    f"{self.per_step_prompts} * {self.num_generations} = "
                    f"{self.batch_size}; pick one of {divisors}."
                )
        if self.sampling_correction:
            if self.sampling_correction_mode not in SAMPLING_IS_MODES:
                bad(f"sampling_correction_mode={self.sampling_correction_mode!r}; "
                    f"choose one of {SAMPLING_IS_MODES}.")
            mode = self.sampling_correction_mode
            if self.loss_type == "vespo" and not mode.startswith("token"):
                bad(f"loss_type='vespo' folds the sampler's weights into its sequence "
                    f"ratio token by token; set sampling_correction_mode to "
                    f"token_truncate or token_mask (got "
                    f"{mode!r}), as TRL asks.")
            if self.rollout_engine != "fast":
                bad(f"sampling_correction needs the sampler's log-probs, which only "
                    f"rollout_engine='fast' returns (got {self.rollout_engine!r}).")
            low, high = (self.sampling_correction_clip_min,
                         self.sampling_correction_clip_max)
            if (low is not None and low < 0) or (high is not None and high <= 0) or (
                    low is not None and high is not None and low >= high):
                bad(f"sampling_correction_clip_min={low!r}, "
                    f"sampling_correction_clip_max={high!r}: need 0 <= min < max.")
        if (self.share_group_prompt and self.micro_batch_size is not None
                and isinstance(self.num_generations, int) and self.num_generations > 0
                and self.micro_batch_size % self.num_generations):
            bad(f"share_group_prompt needs micro-batches of whole groups: "
                f"micro_batch_size={self.micro_batch_size} is not a multiple of "
                f"num_generations={self.num_generations}.")
        if not self.epsilon > 0:
            bad(
                f"epsilon={self.epsilon!r}: the clip range [1 - eps, 1 + eps] needs "
                f"epsilon > 0 (usual: 0.2)."
            )
        if self.epsilon_high is not None and not self.epsilon_high > 0:
            bad(
                f"epsilon_high={self.epsilon_high!r}: must be > 0 (DAPO uses 0.28) "
                f"or None."
            )
        if self.loss_type not in LOSS_TYPES:
            bad(f"loss_type={self.loss_type!r} is unknown; choose one of {LOSS_TYPES}.")
        if not (math.isfinite(self.entropy_coef) and self.entropy_coef >= 0):
            bad(f"entropy_coef={self.entropy_coef!r}: must be >= 0 (a bonus on "
                f"entropy; 0 turns it off, 1e-3 is a small one).")
        if self.use_adaptive_entropy:
            try:
                check_entropy_control(self.entropy_coef, self.entropy_target,
                                      self.entropy_coef_delta, self.entropy_coef_min,
                                      self.entropy_coef_max)
            except ValueError as err:
                bad(str(err))
        try:
            check_loss_settings(self.loss_type, self.epsilon_high,
                                self.importance_sampling_level, self.delta,
                                self.epsilon, (self.sapo_temperature_pos,
                                               self.sapo_temperature_neg),
                                self.vespo_shape)
            check_entropy_quantile(self.top_entropy_quantile)
        except ValueError as err:
            bad(str(err))
        threshold = self.off_policy_mask_threshold
        if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
            bad(f"off_policy_mask_threshold={threshold!r}: a mean log-ratio, >= 0 "
                f"(e.g. 0.5), or None to keep every completion.")
        if self.loss_type == "reinforce" and (self.num_iterations != 1
                                              or self.num_mini_batches != 1):
            bad(
                f"loss_type='reinforce' has no importance ratio, so it is only correct "
                f"on-policy; set num_iterations=1 and num_mini_batches=1 (got "
                f"{self.num_iterations} and {self.num_mini_batches}) or use a "
                f"clipped loss such as 'grpo'."
            )
        if self.scale_rewards not in SCALE_REWARDS:
            bad(f"scale_rewards={self.scale_rewards!r}; choose one of {SCALE_REWARDS}.")
        if self.multi_objective_aggregation not in AGGREGATIONS:
            bad(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r}; "
                f"choose one of {AGGREGATIONS}."
            )
        if self.prompt_format not in PROMPT_FORMATS:
            bad(
                f"prompt_format={self.prompt_format!r}; choose one of {PROMPT_FORMATS}."
            )
        if self.model_dtype not in MODEL_DTYPES:
            bad(f"model_dtype={self.model_dtype!r}; choose from {list(MODEL_DTYPES)}.")
        if self.rollout_engine not in ROLLOUT_ENGINES:
            bad(
                f"rollout_engine={self.rollout_engine!r}; choose one of "
                f"{ROLLOUT_ENGINES}."
            )
        if self.rollout_sampler not in FAST_SAMPLERS:
            bad(f"rollout_sampler={self.rollout_sampler!r}; choose one of "
                f"{FAST_SAMPLERS}.")
        elif self.rollout_sampler != "multinomial" and self.rollout_engine != "fast":
            bad(f"rollout_sampler={self.rollout_sampler!r} is read by "
                f"rollout_engine='fast' only (got {self.rollout_engine!r}); the other "
                f"engines always draw with torch.multinomial.")
        if self.lr_scheduler_type not in LR_SCHEDULERS:
            bad(
                f"lr_scheduler_type={self.lr_scheduler_type!r}; choose one of "
                f"{LR_SCHEDULERS}."
            )
        if not isinstance(self.num_iterations, int) or self.num_iterations < 1:
            bad(f"num_iterations={self.num_iterations!r}: μ must be an integer >= 1.")
        problem = _mini_batch_problem(self)
        if problem:
            bad(problem)
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            bad(f"max_steps={self.max_steps!r}: train for at least 1 step.")
        if (
            not isinstance(self.max_completion_length, int)
            or self.max_completion_length < 1
        ):
            bad(
                f"max_completion_length={self.max_completion_length!r}: must be an "
                f"integer >= 1 (tokens)."
            )
        if not self.temperature > 0:
            bad(
                f"temperature={self.temperature!r}: sampling needs temperature > 0 "
                f"(GRPO needs diverse groups; usual: 1.0)."
            )
        if not 0 < self.top_p <= 1:
            bad(
                f"top_p={self.top_p!r}: must be in (0, 1] (1.0 = no nucleus filtering)."
            )
        if not self.beta >= 0:
            bad(f"beta={self.beta!r}: the KL coefficient must be >= 0.")
        if self.sync_ref_model and self.beta == 0:
            bad("sync_ref_model=True moves the KL reference, and beta=0 has none; "
                "set beta > 0 (e.g. 0.04) or sync_ref_model=False.")
        if not 0 < self.ref_model_mixup_alpha <= 1:
            bad(f"ref_model_mixup_alpha={self.ref_model_mixup_alpha!r}: the policy's "
                f"share of the new reference, in (0, 1] (TRL's default 0.6; 1 resets "
                f"the reference to the policy).")
        if not (isinstance(self.ref_model_sync_steps, int)
                and self.ref_model_sync_steps >= 1):
            bad(f"ref_model_sync_steps={self.ref_model_sync_steps!r}: the steps "
                f"between two syncs of the reference, an integer >= 1.")
        if not self.learning_rate > 0:
            bad(f"learning_rate={self.learning_rate!r}: must be > 0.")
        if not (
            self.warmup_steps >= 0
            and (self.warmup_steps < 1 or float(self.warmup_steps).is_integer())
        ):
            bad(
                f"warmup_steps={self.warmup_steps!r}: give a whole number of updates "
                f"(e.g. 10) or a share of all updates in [0, 1) (e.g. 0.1), as in "
                f"TRL 1.16 (older TRL called the share warmup_ratio)."
            )
        if not self.max_grad_norm >= 0:
            bad(
                f"max_grad_norm={self.max_grad_norm!r}: must be >= 0 (0 = no clipping)."
            )
        if not self.reward_funcs:
            bad(
                "reward_funcs is empty: name at least one reward function, e.g. "
                "['accuracy_reward', 'format_reward']."
            )
        if self.reward_weights is not None and len(self.reward_weights) != len(
            self.reward_funcs
        ):
            bad(
                f"reward_weights has {len(self.reward_weights)} entries for "
                f"{len(self.reward_funcs)} reward functions {self.reward_funcs}; give "
                f"one weight per function or None."
            )
        for name in ("sample_every", "eval_every", "save_every", "print_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                bad(f"{name}={value!r}: must be an integer >= 0 (0 = never).")
        problems.extend(_setting_problems(self))
        if problems:
            raise ValueError("Invalid GRPOConfig:\n  - " + "\n  - ".join(problems))
        return self

# ======================================================================================
# Small helpers
# ======================================================================================
def task_prompts(rows: list[dict], prompt_format: str) -> list:
    """The prompts the policy sees for ``rows``: the R1-Zero template of each
    question (``"r1_zero"``), else the rows' ``prompt`` column, else a chat prompt
    made from the question."""
    if prompt_format == "r1_zero":
        from .tasks.arithmetic import r1_zero_prompt

        return [r1_zero_prompt(r["question"]) for r in rows]
    if "prompt" in rows[0]:
        return [r["prompt"] for r in rows]
    from .tasks.arithmetic import chat_prompt

    return [chat_prompt(r["question"]) for r in rows]


def sample_rollout(sampler, tokenizer, rows: list[dict], config: GRPOConfig,
                   seed: int, decode_fn=None) -> Rollout:
    """G completions for each of ``rows`` with ``config``'s sampling settings: the
    one call the trainer and the asynchronous rollout worker share (so a worker
    sampling with the trainer's seed draws the trainer's tokens)."""
    cfg = config
    return generate(sampler, tokenizer, task_prompts(rows, cfg.prompt_format),
                    num_generations=cfg.num_generations,
                    max_new_tokens=cfg.max_completion_length,
                    temperature=cfg.temperature, top_p=cfg.top_p, do_sample=True,
                    batch_size=cfg.generation_batch_size, seed=seed,
                    ignore_eos=cfg.ignore_eos, decode_fn=decode_fn)


def harness_row(model, tokenizer, dataset, config: GRPOConfig, step: int) -> dict:
    """One ``eval.csv`` row: the evaluation harness (greedy) on the first
    ``config.eval_n`` rows of ``dataset`` at ``step``, with its wall time."""
    from .evaluation import evaluate

    t0 = time.perf_counter()
    table = evaluate(model, tokenizer, dataset, n=config.eval_n,
                     batch_size=config.eval_batch_size,
                     max_new_tokens=config.max_completion_length,
                     prompt_format=config.prompt_format)
    return {"step": step, **table.loc["greedy"].to_dict(),
            "time_eval": time.perf_counter() - t0}


def eval_line(row: dict) -> str:
    """The one line a run prints for a :func:`harness_row`."""
    return (f"eval @ step {row['step']}: strict_acc={row['strict_acc']:.3f} "
            f"format={row['format_rate']:.3f} len={row['mean_length']:.1f} "
            f"(n={int(row['n'])})")


def _rollout_seed(seed: int, step: int, round_: int) -> int:
    """A different, reproducible generator seed for every (run seed, step, round)."""
    return int(np.random.SeedSequence([seed, step, round_]).generate_state(1)[0])


def _masked_mean(values: torch.Tensor, flags: Sequence[bool], keep: bool) -> float:
    """Mean of ``values[i]`` over the ``i`` with ``flags[i] == keep``; NaN if none."""
    chosen = [v for v, f in zip(values.tolist(), flags) if bool(f) == keep]
    return float(np.mean(chosen)) if chosen else float("nan")


def _length_gap_in_group(
    lengths: torch.Tensor, correct: Sequence[bool], group_size: int
) -> float:
    """Mean over groups with right *and* wrong completions of
    mean(len wrong) - mean(len right); NaN when no group is mixed.

    ``lengths``: [B] with B = num_groups * group_size, groups contiguous.
    """
    lens = lengths.detach().float().cpu().view(-1, group_size)  # [P, G]
    ok = torch.tensor([bool(c) for c in correct]).view(-1, group_size)  # [P, G]
    n_ok = ok.sum(1)  # [P]
    mixed = (n_ok > 0) & (n_ok < group_size)  # [P]
    if not mixed.any():
        return float("nan")
    right = (lens * ok).sum(1) / n_ok.clamp(min=1)  # [P]
    wrong = (lens * ~ok).sum(1) / (group_size - n_ok).clamp(min=1)  # [P]
    return (wrong - right)[mixed].mean().item()


def _pad_cat(tensors: Sequence[torch.Tensor], value: int, left: bool) -> torch.Tensor:
    """Concatenate ``[b_k, T_k]`` tensors along rows, padding columns to the widest."""
    width = max(t.shape[1] for t in tensors)
    out = []
    for t in tensors:
        pad = torch.full(
            (t.shape[0], width - t.shape[1]), value, dtype=t.dtype, device=t.device
        )
        out.append(torch.cat([pad, t] if left else [t, pad], dim=1))
    return torch.cat(out, dim=0)


def _shares_weights(scratch, model) -> bool:
    """True iff every weight of ``scratch`` is the same memory as ``model``'s weight of
    the same name (then an optimizer step on ``model`` is seen by ``scratch``)."""
    theirs = model.state_dict()
    return all(
        name in theirs
        and t.data_ptr() == theirs[name].data_ptr()
        and t.shape == theirs[name].shape
        and t.dtype == theirs[name].dtype
        and t.device == theirs[name].device
        for name, t in scratch.state_dict().items()
    )


def _check_groups_share_prompts(ids: torch.Tensor, mask: torch.Tensor, G: int) -> None:
    """Refuse a batch whose groups of G consecutive rows do not repeat one prompt
    (``share_group_prompt`` computes one row per group)."""
    B, P = ids.shape
    if B % G:
        raise ValueError(f"share_group_prompt: {B} rows are not whole groups of {G}.")
    for t, name in ((ids, "ids"), (mask, "mask")):
        grouped = t.view(B // G, G, P)
        if not torch.equal(grouped, grouped[:, :1].expand_as(grouped)):
            raise ValueError(f"share_group_prompt: the prompt {name} differ inside a "
                             f"group; rows must be group-major (G rows per prompt).")


def _select_rollout(rollout: Rollout, rows: list[int]) -> Rollout:
    """The rows ``rows`` of a rollout (used to drop zero-variance groups)."""
    idx = torch.tensor(rows, dtype=torch.long, device=rollout.completion_ids.device)
    return Rollout(
        prompt_ids=rollout.prompt_ids[idx],
        prompt_mask=rollout.prompt_mask[idx],
        completion_ids=rollout.completion_ids[idx],
        completion_mask=rollout.completion_mask[idx],
        finished=rollout.finished[idx],
        texts=[rollout.texts[i] for i in rows],
        prompts=[rollout.prompts[i] for i in rows],
        num_generations=rollout.num_generations,
        sampler_logprobs=(None if rollout.sampler_logprobs is None
                          else rollout.sampler_logprobs[idx]),
    )


def _concat_rollouts(parts: Sequence[Rollout], pad_id: int) -> Rollout:
    """Stack rollouts (prompts re-left-padded, completions re-right-padded)."""
    if len(parts) == 1:
        return parts[0]
    return Rollout(
        prompt_ids=_pad_cat([p.prompt_ids for p in parts], pad_id, left=True),
        prompt_mask=_pad_cat([p.prompt_mask for p in parts], 0, left=True),
        completion_ids=_pad_cat([p.completion_ids for p in parts], pad_id, left=False),
        completion_mask=_pad_cat([p.completion_mask for p in parts], 0, left=False),
        finished=torch.cat([p.finished for p in parts]),
        texts=[t for p in parts for t in p.texts],
        prompts=[t for p in parts for t in p.prompts],
        num_generations=parts[0].num_generations,
        sampler_logprobs=(
            None if any(p.sampler_logprobs is None for p in parts)
            else _pad_cat([p.sampler_logprobs for p in parts], 0.0, left=False)),
    )


def _short(text: str, width: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ======================================================================================
# The trainer
# ======================================================================================
class GRPOTrainer(TrainingLoop):
    """GRPO on a Hugging Face causal LM with rule-based rewards (see module docstring).

    Args:
        model: the policy (``Qwen2ForCausalLM`` or any causal LM), on its device.
        tokenizer: its tokenizer (left padding; a chat template for ``"chat"`` prompts).
        reward_funcs: callables ``fn(completions, **columns) -> list[float]`` (or
            ``None`` to build them from ``config.reward_funcs`` names). Dataset columns
            arrive as lists aligned with the completions, plus ``completion_ids`` and
            ``num_generations``.
        config: a :class:`GRPOConfig`.
        train_dataset: rows with the columns the prompts and rewards need (``prompt``
            and/or ``question``, ``answer`` ...): a ``datasets.Dataset``, a list of
            dicts or a DataFrame.
        eval_dataset: held-out rows for ``eval_every`` (the evaluation harness).
        ref_model: the KL reference; default (when ``beta > 0``) a frozen copy of
            ``model`` as passed in. Ignored when ``beta == 0``; moved toward the
            policy in place with ``sync_ref_model``.
        callbacks: functions ``cb(trainer, metrics)`` called after every step.

    **A faulty reward function does not stop the run.** If a function raises, it is
    called again one completion at a time and the completions for which it still raises
    score 0; a ``None``/NaN/inf score also becomes 0. Each kind of fault is reported
    once per function (with its name); the ``reward_errors`` column counts the zeroed
    scores.
    """

    bar_label = "GRPO"
    log_files = ("metrics.csv", "eval.csv", "samples.jsonl")

    def __init__(
        self,
        model,
        tokenizer,
        reward_funcs,
        config: GRPOConfig,
        train_dataset,
        eval_dataset=None,
        ref_model=None,
        callbacks: Sequence[Callable] | None = None,
    ):
        from .rewards import reward_name

        if reward_funcs is not None:
            given = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
            if given and all(callable(f) for f in given):
                # the callables are the reward functions: record their names in the
                # config (config.json, weight-count check) instead of the default names
                names = [reward_name(f) for f in given]
                config = replace(config, reward_funcs=names)
        self.config = config.validate()
        self.model, self.tokenizer = model, tokenizer
        if reward_funcs is None:
            reward_funcs = build_reward_funcs(config.reward_funcs)
        elif callable(reward_funcs):
            reward_funcs = [reward_funcs]
        self.reward_funcs = list(reward_funcs)
        if not self.reward_funcs or not all(callable(f) for f in self.reward_funcs):
            raise TypeError(
                f"reward_funcs must be a non-empty list of callables "
                f"fn(completions, **columns) -> list[float], got {reward_funcs!r}."
            )
        self.reward_names = []
        for f in self.reward_funcs:
            name, k = reward_name(f), 2
            while name in self.reward_names:
                name, k = f"{reward_name(f)}#{k}", k + 1
            self.reward_names.append(name)
        weights = config.reward_weights
        if weights is None:
            weights = [1.0] * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ValueError(
                f"{len(weights)} reward_weights for {len(self.reward_funcs)} "
                f"reward functions {self.reward_names}; give one weight each."
            )
        self.reward_weights = torch.tensor(
            [float(w) for w in weights], dtype=torch.float64
        )

        self.train_rows = _rows_with_reward_columns(self, train_dataset)
        self.eval_dataset = eval_dataset
        if (config.eval_every or config.eval_on_start) and eval_dataset is None:
            raise ValueError(
                "eval_every/eval_on_start is set but eval_dataset is None: pass "
                "eval_dataset=load_task_split('arithmetic', 'test') or set "
                "eval_every=0 and eval_on_start=false."
            )
        self.ref_model = None
        if config.beta > 0:
            self.ref_model = (
                ref_model if ref_model is not None else copy.deepcopy(model)
            )
            self.ref_model.eval().requires_grad_(False)

        adamw = CPUOffloadAdamW if config.optimizer_offload else torch.optim.AdamW
        self.optimizer = adamw(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.weight_decay,
        )
        total = config.max_steps * config.updates_per_step  # optimizer updates
        self.scheduler = lr_scheduler(
            self.optimizer, total, warmup_updates(config.warmup_steps, total),
            config.lr_scheduler_type)
        self._warned: set[tuple[str, str]] = set()
        # adaptive entropy control's state: the coefficient and the last step's entropy
        self._entropy_coef, self._last_entropy = config.entropy_coef, None
        self._pad_id = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else tokenizer.eos_token_id
        )
        self._start_loop(RunSettings(
            output_dir=config.output_dir, max_steps=config.max_steps, seed=config.seed,
            save_every=config.save_every, save_final=config.save_final,
            print_every=config.print_every, progress_bar=config.progress_bar,
            resume_from_checkpoint=config.resume_from_checkpoint,
            overwrite_output_dir=config.overwrite_output_dir,
        ), callbacks)

    # ------------------------------------------------------------------ data
    @staticmethod
    def _as_rows(dataset, what: str) -> Any:
        if dataset is None:
            raise ValueError(
                f"{what} is None: pass the training rows, e.g. "
                f"load_task_split('arithmetic', 'train')."
            )
        if hasattr(dataset, "to_dict") and hasattr(dataset, "iloc"):  # pandas DataFrame
            dataset = dataset.to_dict("records")
        if len(dataset) == 0:
            raise ValueError(f"{what} is empty: there is nothing to train on.")
        row = dataset[0]
        if not isinstance(row, dict) or not ({"prompt", "question"} & set(row)):
            raise ValueError(
                f"{what} rows need a 'prompt' (chat messages or text) or "
                f"'question' column; the first row is {row!r:.200}."
            )
        return dataset

    def _prompts(self, rows: list[dict]) -> list:
        return task_prompts(rows, self.config.prompt_format)

    # ------------------------------------------------------------------ rewards
    def _warn_once(self, name: str, kind: str, message: str) -> None:
        if (name, kind) not in self._warned:
            self._warned.add((name, kind))
            self._print(f"[reward {name}] {message}")

    def _call_reward(self, j: int, texts: list[str], columns: dict, group: int) -> list:
        """One reward function on the batch; if it raises, one completion at a time."""
        fn, name = self.reward_funcs[j], self.reward_names[j]
        try:
            values = fn(texts, num_generations=group, **columns)
            if values is None or len(values) != len(texts):
                raise ValueError(
                    f"returned {'None' if values is None else len(values)} "
                    f"scores for {len(texts)} completions"
                )
            return list(values)
        except Exception as err:  # noqa: BLE001 - a reward bug must not kill the run
            self._warn_once(
                name,
                "raised",
                f"raised {type(err).__name__}: {_short(err, 160)} -- scoring "
                f"one completion at a time; completions that still fail get 0.",
            )
        values = []
        for i, text in enumerate(texts):
            try:
                one = fn(
                    [text], num_generations=1, **{k: [v[i]] for k, v in columns.items()}
                )
                values.append(one[0] if one is not None and len(one) == 1 else None)
            except Exception:  # noqa: BLE001
                values.append(None)
        return values

    def score(self, rollout: Rollout, rows: list[dict]) -> tuple[torch.Tensor, int]:
        """Every reward function on every completion: ``[B, F]`` float64, and #zeroed.

        Non-finite or missing scores become 0 (reported once per function).
        """
        G = rollout.num_generations
        columns = {k: [r[k] for r in rows for _ in range(G)] for k in rows[0]}
        lengths = rollout.completion_mask.sum(-1).tolist()
        columns["completion_ids"] = [
            ids[:n] for ids, n in zip(rollout.completion_ids.tolist(), lengths)
        ]
        out = torch.zeros(len(rollout), len(self.reward_funcs), dtype=torch.float64)
        zeroed = 0
        for j, name in enumerate(self.reward_names):
            values = self._call_reward(j, rollout.texts, columns, G)
            for i, v in enumerate(values):
                try:
                    v = float(v)
                except (TypeError, ValueError):
                    v = math.nan
                if not math.isfinite(v):
                    zeroed += 1
                    self._warn_once(
                        name,
                        "nonfinite",
                        f"gave a missing/NaN/inf score (first seen: completion "
                        f"{_short(rollout.texts[i], 60)!r}); such scores count "
                        f"as 0.",
                    )
                    v = 0.0
                out[i, j] = v
        return out, zeroed

    # ------------------------------------------------------------------ rollout
    def _rollout_model(self):
        """The model that samples and its decode loop (``None``: the default one).

        ``rollout_engine="scratch"``: a :class:`grpo_lib.qwen2.Qwen2` whose weights
        are the policy's own tensors (no copy, so it samples with the weights of the
        latest update); it is rebuilt whenever a policy tensor was replaced (moved to
        another device or dtype, reloaded), which :func:`_shares_weights` checks.
        ``"fast"``: the same model, decoded by :func:`grpo_lib.fast_decode.decode_fast`,
        which copies the shared weights into its fused layout at every rollout.
        """
        if _rollout_engine(self) == "transformers":  # the policy, or a misfit's
            return self.model, None
        from .fast_decode import decode_fast
        from .qwen2 import Qwen2, decode_static

        scratch = getattr(self, "_scratch_model", None)
        if scratch is None or not _shares_weights(scratch, self.model):
            scratch = Qwen2.from_transformers(self.model, share_weights=True)
            self._scratch_model = scratch
        if _rollout_engine(self) == "fast":
            return scratch, functools.partial(decode_fast,
                                              sampler=self.config.rollout_sampler)
        return scratch, decode_static

    def _sample_batch(self) -> tuple[Rollout, list[dict], torch.Tensor, dict]:
        """Rollout + rewards for one step (with DAPO dynamic sampling if enabled).

        Returns the rollout that trains, its rows (one per group), its ``[B, F]`` reward
        table, and the step's statistics over *everything* sampled (all rounds).
        """
        cfg, G = self.config, self.config.num_generations
        kept, kept_rows, kept_rewards = [], [], []
        all_rewards, all_rollouts, all_rows = [], [], []
        stats = {"time_generate": 0.0, "time_reward": 0.0, "reward_errors": 0}
        rounds = 1 + (cfg.dynamic_sampling_max_rounds if cfg.dynamic_sampling else 0)
        n_kept = 0
        for round_ in range(rounds):
            rows = self._next_rows(cfg.per_step_prompts)
            t0 = time.perf_counter()
            sampler, decode_fn = self._rollout_model()
            rollout = sample_rollout(sampler, self.tokenizer, rows, cfg,
                                     _rollout_seed(cfg.seed, self.step, round_),
                                     decode_fn)
            t1 = time.perf_counter()
            rewards, zeroed = self.score(rollout, rows)  # [B, F]
            stats["time_generate"] += t1 - t0
            stats["time_reward"] += time.perf_counter() - t1
            stats["reward_errors"] += zeroed
            all_rewards.append(rewards), all_rollouts.append(rollout), all_rows.extend(
                rows
            )
            if not cfg.dynamic_sampling:
                kept, kept_rows, kept_rewards = [rollout], rows, [rewards]
                break
            total = self._filter_scores(rewards).view(-1, G)  # [P, G]
            informative = (total != total[:, :1]).any(dim=1).tolist()  # [P]
            for g, ok in enumerate(informative):
                if ok and n_kept < cfg.per_step_prompts:
                    idx = list(range(g * G, (g + 1) * G))
                    kept.append(_select_rollout(rollout, idx))
                    kept_rows.append(rows[g]), kept_rewards.append(rewards[idx])
                    n_kept += 1
            if n_kept >= cfg.per_step_prompts:
                break
        stats["all_rewards"] = torch.cat(all_rewards)  # [B_all, F]
        stats["all_rollout"] = _concat_rollouts(all_rollouts, self._pad_id)
        stats["all_rows"] = all_rows
        if not kept:
            return (
                None,
                [],
                torch.zeros(0, len(self.reward_funcs), dtype=torch.float64),
                stats,
            )
        return (
            _concat_rollouts(kept, self._pad_id),
            kept_rows,
            torch.cat(kept_rewards),
            stats,
        )

    # ------------------------------------------------------------------ update
    def _update(self, rollout: Rollout, advantages: torch.Tensor) -> dict:
        """μ passes over one batch, each ``num_mini_batches`` optimizer updates:
        gradient accumulation, clip, NaN guard."""
        cfg, model = self.config, self.model
        B = len(rollout)
        mb = cfg.micro_batch_size or B // cfg.num_mini_batches  # None: a mini-batch
        chunks = [slice(s, min(s + mb, B)) for s in range(0, B, mb)]
        updates = [(it, mini) for it in range(cfg.num_iterations)  # μ k updates
                   for mini in mini_batches(chunks, cfg.num_mini_batches)]
        dev = self.device
        p_ids, p_mask = rollout.prompt_ids.to(dev), rollout.prompt_mask.to(
            dev
        )  # [B, P]
        c_ids = rollout.completion_ids.to(dev)  # [B, C]
        mask = rollout.completion_mask.to(dev).float()  # [B, C]
        if cfg.mask_truncated_completions:
            mask = mask * rollout.finished.to(dev).float().unsqueeze(1)  # [B, C]
        adv = advantages.to(dev, torch.float32)  # [B]
        sampler_logp = None
        if cfg.sampling_correction:
            if rollout.sampler_logprobs is None:
                raise ValueError("sampling_correction: this rollout has no sampler "
                                 "log-probs; roll out with rollout_engine='fast'.")
            sampler_logp = rollout.sampler_logprobs.to(dev)  # [B, C]
        weights_seen = []  # the importance weights of the first pass, for the log

        def logprobs(m, sl, entropy=False):
            if cfg.share_group_prompt:  # one prompt row per group
                G = cfg.num_generations
                return group_logprobs(m, p_ids[sl][::G], p_mask[sl][::G], c_ids[sl],
                                      mask[sl], temperature=cfg.temperature,
                                      return_entropy=entropy)
            return sequence_logprobs(
                m,
                p_ids[sl],
                p_mask[sl],
                c_ids[sl],
                mask[sl],
                temperature=cfg.temperature,
                return_entropy=entropy,
            )

        if cfg.share_group_prompt:
            _check_groups_share_prompts(p_ids, p_mask, cfg.num_generations)

        with torch.no_grad():
            ref = (
                torch.cat([logprobs(self.ref_model, sl) for sl in chunks])
                if cfg.beta > 0
                else None
            )  # [B, C]
            old = (
                torch.cat([logprobs(model, sl) for sl in chunks])
                if len(updates) > 1
                else None
            )  # [B, C]

        model.train()
        sums = {
            k: 0.0
            for k in ("kl", "clip_frac_low", "clip_frac_high", "clip_frac_region")
        }
        tokens_seen = entropy_sum = 0.0
        losses, norms, skipped = [], [], 0
        need_entropy = (cfg.entropy_coef > 0 or cfg.use_adaptive_entropy
                        or cfg.top_entropy_quantile < 1)
        behaviour = old if sampler_logp is None else sampler_logp  # [B, C] or None
        sapo = (cfg.sapo_temperature_pos, cfg.sapo_temperature_neg)
        for it, step_chunks in updates:
            self.optimizer.zero_grad(set_to_none=True)
            total_loss, bad = 0.0, None
            coef, window = self._entropy_coef_now(), [0.0, 0.0]  # H sum, tokens
            here = slice(step_chunks[0].start, step_chunks[-1].stop)  # B / k rows
            step_rows = here.stop - here.start
            step_items = mask[here].sum()  # this update's tokens: dapo's normaliser
            for k, sl in enumerate(step_chunks):
                rows = sl.stop - sl.start
                if it == 0 or need_entropy:
                    logp, ent = logprobs(model, sl, entropy=True)  # [b, C], [b, C]
                    if it == 0:
                        entropy_sum += (ent.detach() * mask[sl]).sum().item()
                else:
                    logp = logprobs(model, sl)  # [b, C]
                weights = None if sampler_logp is None else self._sampling_weights(
                    logp if old is None else old[sl], sampler_logp[sl], mask[sl],
                    weights_seen if it == 0 else None)  # pi_old / pi_sampler
                keep, counted = self._kept_terms(  # None, mask[sl]: every term
                    logp, ent, adv[sl], mask[sl],
                    None if behaviour is None else behaviour[sl])
                loss, st = policy_loss(
                    logp,
                    None if old is None else old[sl],
                    adv[sl],
                    mask[sl],
                    loss_type=cfg.loss_type,
                    epsilon=cfg.epsilon,
                    epsilon_high=cfg.epsilon_high,
                    beta=cfg.beta,
                    ref_logp=None if ref is None else ref[sl],
                    max_completion_length=cfg.max_completion_length,
                    use_bias_correction_kl=cfg.use_bias_correction_kl,
                    num_micro_batches=step_rows / rows,
                    num_items_in_batch=step_items,
                    sampling_weights=weights,
                    importance_sampling_level=cfg.importance_sampling_level,
                    delta=cfg.delta, keep=keep, sapo_temperatures=sapo,
                    vespo_shape=cfg.vespo_shape,
                )
                if coef > 0:  # L - c * mean entropy / K, as TRL
                    K = step_rows / rows  # micro-batches in this update
                    loss = loss - coef * entropy_bonus(ent, counted) / K
                if not torch.isfinite(loss):
                    where = f"pass {it + 1}, micro-batch {k + 1}"  # of its update
                    bad = f"the loss is {loss.item()} ({where})"
                    break
                loss.backward()
                total_loss += loss.item()
                if cfg.use_adaptive_entropy:
                    window[0] += (ent.detach() * counted).sum().item()
                    window[1] += counted.sum().item()
                n = st["num_tokens"]
                tokens_seen += n
                for key in sums:
                    value = st[key]
                    sums[key] += (0.0 if math.isnan(value) else value) * n
            grad_norm = math.nan
            if bad is None:
                params = [p for p in model.parameters() if p.grad is not None]
                clip = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                grad_norm = (
                    torch.nn.utils.clip_grad_norm_(params, clip).item()
                    if params
                    else 0.0
                )
                if not math.isfinite(grad_norm):
                    bad = f"the gradient norm is {grad_norm} (pass {it + 1})"
            if bad is not None:
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                self._print(
                    f"step {self.step + 1}: {bad} -- skipped this update, the "
                    f"parameters are unchanged. Look for extreme rewards or "
                    f"advantages (scale_rewards='none'?) or lower learning_rate."
                )
                continue
            self.optimizer.step()
            self.scheduler.step()
            if cfg.use_adaptive_entropy:
                self._adapt_entropy_coef(window[0] / max(window[1], 1.0))
            losses.append(total_loss)
            norms.append(grad_norm)
        model.eval()
        first_pass_tokens = mask.sum().item()
        out = {
            k: (v / tokens_seen if tokens_seen else math.nan) for k, v in sums.items()
        }
        if cfg.beta == 0:
            out["kl"] = math.nan
        if weights_seen:  # TRL's sampling/* metrics
            w = torch.cat([x[0] for x in weights_seen])
            gap = torch.cat([x[1][x[2] > 0] for x in weights_seen]).abs()
            for name, t in (("sampling_weight", w), ("sampling_logp_gap", gap)):
                for stat in ("mean", "min", "max"):
                    value = getattr(t, stat)().item() if len(t) else math.nan
                    out[f"{name}_{stat}"] = value
        out.update(
            entropy=entropy_sum / first_pass_tokens if first_pass_tokens else math.nan,
            loss=float(np.mean(losses)) if losses else math.nan,
            grad_norm=float(np.mean(norms)) if norms else math.nan,
            skipped_updates=skipped,
            num_tokens=int(first_pass_tokens),
        )
        if cfg.use_adaptive_entropy:
            out["entropy_coef"] = self._entropy_coef
        return out

    def _entropy_coef_now(self) -> float:
        """The entropy bonus's coefficient for this optimizer step: ``entropy_coef``,
        or under adaptive control the controller's, applied only after a step whose
        entropy was at or under ``entropy_target`` (none yet: not applied)."""
        cfg = self.config
        if not cfg.use_adaptive_entropy:
            return cfg.entropy_coef
        last = self._last_entropy
        below = last is not None and last <= cfg.entropy_target
        return self._entropy_coef if below else 0.0

    def _adapt_entropy_coef(self, entropy: float) -> None:
        """After an optimizer step: move the coefficient for the next one."""
        cfg = self.config
        self._entropy_coef = adaptive_entropy_coef(
            self._entropy_coef, entropy, cfg.entropy_target, cfg.entropy_coef_delta,
            cfg.entropy_coef_min, cfg.entropy_coef_max)
        self._last_entropy = entropy

    def _kept_terms(self, logp, entropy, advantages, mask, behaviour_logp):
        """``policy_loss``'s ``keep`` (``None``: every term) and the tokens the entropy
        bonus averages over: the high-entropy tokens (``top_entropy_quantile``;
        ``entropy`` is read only then) and the completions the off-policy mask keeps
        (``off_policy_mask_threshold``; ``behaviour_logp``: the sampler's or old
        log-probs, ``None`` on-policy)."""
        cfg = self.config
        keep, counted = None, mask  # [b, C]
        if cfg.top_entropy_quantile < 1:
            keep = counted = high_entropy_mask(entropy, mask, cfg.top_entropy_quantile)
        if cfg.off_policy_mask_threshold is not None:
            behaviour = logp.detach() if behaviour_logp is None else behaviour_logp
            kept = off_policy_sequence_mask(advantages, logp, behaviour, mask,
                                            cfg.off_policy_mask_threshold)  # [b, 1]
            keep = kept if keep is None else keep * kept
        return keep, counted

    def _sampling_weights(self, old_logp: torch.Tensor, sampler_logp: torch.Tensor,
                          mask: torch.Tensor, seen: list | None) -> torch.Tensor:
        """The importance weights pi_old / pi_sampler of one micro-batch, cut or
        masked by the mode, ``[b, C]`` or ``[b, 1]``; with ``seen``, also
        record them and the log-prob gap for the step's sampling/* metrics."""
        cfg, old_logp = self.config, old_logp.detach()
        weights = sampling_importance_weights(
            old_logp, sampler_logp, mask, cfg.sampling_correction_mode,
            cfg.sampling_correction_clip_min, cfg.sampling_correction_clip_max)
        if seen is not None:
            seen.append((weights.expand_as(mask)[mask > 0], old_logp - sampler_logp,
                         mask))
        return weights

    # ------------------------------------------------------------------ one step
    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """Advantages ``[B]`` from rewards ``[B, K]`` (one column per reward function).

        ``sum_then_normalize`` (GRPO): r_i = sum_k w_k r_ik, then group-normalise r.
        ``normalize_then_sum`` (GDPO): normalise each reward in its group, then sum.
        """
        cfg = self.config
        if cfg.multi_objective_aggregation == "normalize_then_sum":
            weights = self.reward_weights.tolist()
            return decoupled_advantages(rewards, weights, cfg.num_generations)
        total = (rewards * self.reward_weights).sum(1)  # [B]
        return group_advantages(total, cfg.num_generations, scale=cfg.scale_rewards)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict:
        """One GRPO step (rollout, rewards, advantages, μ updates); returns metrics."""
        cfg, G = self.config, self.config.num_generations
        t_start = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        rollout, rows, rewards, stats = self._sample_batch()

        # statistics over everything sampled this step
        all_rewards, all_rollout = stats["all_rewards"], stats["all_rollout"]
        total_all = (all_rewards * self.reward_weights).sum(1)  # [B_all]
        grouped = total_all.view(-1, G)  # [groups, G]
        rows_per_text = [r for r in stats["all_rows"] for _ in range(G)]
        correct = [completion_correct(t, r)
                   for t, r in zip(all_rollout.texts, rows_per_text)]
        lengths = all_rollout.completion_mask.sum(-1).float()  # [B_all]
        metrics = {
            "step": self.step + 1,
            "reward": total_all.mean().item(),
            "reward_std": total_all.std().item() if len(total_all) > 1 else 0.0,
            "accuracy": float(np.mean(correct)),
            "format_rate": float(
                np.mean(
                    [
                        parsing.is_well_formatted(t, strict=True)
                        for t in all_rollout.texts
                    ]
                )
            ),
            "completion_length": lengths.mean().item(),
            "completion_length_max": int(lengths.max().item()),
            # Dr. GRPO's length bias shows in the wrong answers: mean length of each
            # kind (NaN when the step has none of that kind)
            "length_correct": _masked_mean(lengths, correct, True),
            "length_wrong": _masked_mean(lengths, correct, False),
            # the same comparison within a prompt's group, free of "harder problems
            # have longer traces": mean over mixed groups of (wrong - right) length
            "length_gap_in_group": _length_gap_in_group(lengths, correct, G),
            "truncated_frac": 1.0 - all_rollout.finished.float().mean().item(),
            "zero_std_frac": (grouped == grouped[:, :1]).all(1).float().mean().item(),
            "lr": lr,
            "reward_errors": stats["reward_errors"],
            "time_generate": stats["time_generate"],
            "time_reward": stats["time_reward"],
        }
        for j, name in enumerate(self.reward_names):
            metrics[f"reward/{name}"] = all_rewards[:, j].mean().item()

        t_update = time.perf_counter()
        if rollout is None:  # dynamic sampling found no group with any reward variance
            self._print(
                f"step {self.step + 1}: every sampled group had equal rewards "
                f"(no learning signal) -- no update this step."
            )
            upd = {
                "entropy": math.nan,
                "kl": math.nan,
                "clip_frac_low": math.nan,
                "clip_frac_high": math.nan,
                "clip_frac_region": math.nan,
                "loss": math.nan,
                "grad_norm": math.nan,
                "skipped_updates": 0,
                "num_tokens": 0,
            }
            if cfg.use_adaptive_entropy:  # no update: the coefficient stays
                upd["entropy_coef"] = self._entropy_coef
            self._last_batch = None
        else:
            advantages = self.advantages(rewards)  # [B]
            with _deferred_sigint(self._flag):
                upd = self._update(*mini_batch_order(cfg, self.step, rollout,
                                                     advantages))
                self.step += 1
                self._sync_reference()
            self._last_batch = (rollout, rows, rewards, advantages)
        if rollout is None:
            with _deferred_sigint(self._flag):  # a sync is not cut half-way either
                self.step += 1
                self._sync_reference()
        metrics.update(upd)
        metrics["num_groups"] = len(rows)
        metrics["time_update"] = time.perf_counter() - t_update
        metrics["time_step"] = time.perf_counter() - t_start
        return metrics

    def _sync_reference(self) -> None:
        """TR-DPO's sync, after every ``ref_model_sync_steps``-th step (TRL's
        ``SyncRefModelCallback``, at the end of an optimizer step)."""
        cfg = self.config
        if cfg.sync_ref_model and self.step % cfg.ref_model_sync_steps == 0:
            sync_reference(self.model, self.ref_model, cfg.ref_model_mixup_alpha)

    def _checkpointed_models(self) -> dict:
        # a reference that moves is part of the run's state
        return {"ref_model": self.ref_model} if self.config.sync_ref_model else {}

    # ------------------------------------------------------------------ logging
    def _metric_columns(self) -> list[str]:
        extra = SAMPLING_COLUMNS if self.config.sampling_correction else []
        extra = extra + (["entropy_coef"] if self.config.use_adaptive_entropy else [])
        return METRIC_COLUMNS + extra + [f"reward/{n}" for n in self.reward_names]

    def _log_samples(self) -> None:
        if self._last_batch is None:
            return
        rollout, rows, rewards, advantages = self._last_batch
        G = rollout.num_generations
        total = (rewards * self.reward_weights).sum(1)
        with open(self.output_dir / "samples.jsonl", "a", encoding="utf-8") as fh:
            for i, text in enumerate(rollout.texts):
                row = rows[i // G]
                record = {
                    "step": self.step,
                    "group": i // G,
                    "question": row.get("question", _short(rollout.prompts[i], 200)),
                    "answer": row.get("answer"),
                    "completion": text,
                    "reward": total[i].item(),
                    "advantage": advantages[i].item(),
                    "length": int(rollout.completion_mask[i].sum().item()),
                    "finished": bool(rollout.finished[i].item()),
                }
                record.update(
                    {
                        f"reward/{n}": rewards[i, j].item()
                        for j, n in enumerate(self.reward_names)
                    }
                )
                fh.write(json.dumps(record) + "\n")
        row = rows[0]
        head = row.get("question", _short(rollout.prompts[0], 60))
        lines = [f"step {self.step} | {head} (answer {row.get('answer', '?')})"]
        for i in range(min(G, self.config.num_print_samples)):
            lines.append(
                f"  r={total[i].item():5.2f} A={advantages[i].item():+5.2f} | "
                f"{_short(rollout.texts[i], 70)}"
            )
        self._print("\n".join(lines))

    def evaluate(self) -> dict:
        """The evaluation harness on ``eval_dataset`` (greedy); appends to eval.csv."""
        row = harness_row(self.model, self.tokenizer, self.eval_dataset, self.config,
                          self.step)
        append_metrics_row(self.output_dir / "eval.csv", row, list(row))
        self._print(eval_line(row))
        return row

    # ------------------------------------------------------------------ loop hooks
    def _on_train_start(self) -> None:
        if self.config.eval_on_start and self.step == 0:
            self.evaluate()

    def _after_step(self, metrics: dict) -> None:
        cfg = self.config
        if cfg.sample_every and self.step % cfg.sample_every == 0:
            self._log_samples()
        if cfg.eval_every and self.step % cfg.eval_every == 0:
            self.evaluate()

    def _progress_postfix(self, metrics: dict) -> dict:
        return {"reward": f"{metrics['reward']:.3f}",
                "acc": f"{metrics['accuracy']:.2f}",
                "len": f"{metrics['completion_length']:.0f}"}

    def _trainer_state(self) -> dict:
        state = {"reward_names": self.reward_names}
        if self.config.use_adaptive_entropy:
            state["entropy_control"] = {"entropy_coef": self._entropy_coef,
                                        "last_entropy": self._last_entropy}
        return state

    def _restore_trainer_state(self, state: dict) -> None:
        super()._restore_trainer_state(state)
        control = state.get("entropy_control")
        if self.config.use_adaptive_entropy and control is not None:
            self._entropy_coef = float(control["entropy_coef"])
            last = control["last_entropy"]
            self._last_entropy = None if last is None else float(last)

    @staticmethod
    def _summary_line(m: dict) -> str:
        return (
            f"step {int(m['step']):>4} | reward {m['reward']:.3f} | "
            f"acc {m['accuracy']:.2f} | fmt {m['format_rate']:.2f} | "
            f"len {m['completion_length']:.1f} | "
            f"ent {m['entropy']:.2f} | gen {m['time_generate']:.1f}s "
            f"upd {m['time_update']:.1f}s"
        )

    def _filter_scores(self, rewards: torch.Tensor) -> torch.Tensor:
        """The ``[B]`` scores dynamic sampling compares within each group: the
        weighted total, or the column of ``config.dynamic_sampling_metric``."""
        name = self.config.dynamic_sampling_metric
        if name is None:
            return (rewards * self.reward_weights).sum(1)  # [B]
        return rewards[:, self.reward_names.index(name)]  # [B]


# ======================================================================================
# From a YAML file (the CLI)
# ======================================================================================
def build_reward_funcs(specs: Sequence) -> list[Callable]:
    """Reward functions from config entries.

    Each entry is a name in ``grpo_lib.rewards.REWARD_FUNCTIONS`` (or, with its
    ``path``, ``LEARNED_REWARDS``) or ``{"name": <name>, **params}`` (bound with
    ``rewards.with_params``).
    """
    from .rewards import LEARNED_REWARDS, REWARD_FUNCTIONS, with_params

    available = {**REWARD_FUNCTIONS, **LEARNED_REWARDS}
    funcs = []
    for spec in specs:
        params = {}
        if isinstance(spec, dict):
            params = {k: v for k, v in spec.items() if k != "name"}
            spec = spec.get("name")
        if spec not in available:
            raise ValueError(
                f"Unknown reward function {spec!r}; available: "
                f"{sorted(available)}."
            )
        fn = available[spec]
        funcs.append(with_params(fn, **params) if params else fn)
    return funcs


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    reward_funcs: Sequence[Callable] | None = None,
) -> GRPOConfig:
    """A :class:`GRPOConfig` from a YAML file plus ``key=value`` overrides (YAML-typed).

    ``load_config("configs/r1_zero_arithmetic.yaml", ["max_steps=5", "beta=0.04"])``.

    ``reward_funcs``: the callables you will pass to :class:`GRPOTrainer` instead of
    the file's reward names. Their names replace ``reward_funcs`` before validation,
    so ``reward_weights`` (from the file or an override) is checked against them:
    ``load_config(path, ["reward_weights=[1.0, 0.5]"], reward_funcs=[f, g])``.
    """
    from .rewards import reward_name

    values = read_yaml_values(path, overrides, GRPOConfig)
    if reward_funcs is not None:
        funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
        if not funcs or not all(callable(f) for f in funcs):
            raise ValueError(
                f"load_config(reward_funcs=...) takes the reward callables you will "
                f"pass to GRPOTrainer, got {reward_funcs!r}; to name library rewards, "
                f"use an override instead: 'reward_funcs=[accuracy_reward]'."
            )
        values["reward_funcs"] = [reward_name(f) for f in funcs]
    return GRPOConfig.from_dict(values).validate()


def trainer_from_yaml(path: str | Path, overrides: Sequence[str] = ()) -> "GRPOTrainer":
    """Load the config, model, data and rewards a YAML config names; return the trainer.

    Everything that can go wrong before the first step (a missing file, a bad field, a
    model folder that is not there) raises here, before any training starts.
    """
    from .models import load_model_and_tokenizer
    from .profiles import profile
    from .tasks import load_task_split

    config = load_config(path, overrides)
    device = config.device or profile().device
    model, tokenizer = load_model_and_tokenizer(
        config.model_name_or_path, device=device, dtype=MODEL_DTYPES[config.model_dtype]
    )
    train_dataset = load_task_split(config.task, "train")
    eval_dataset = (
        load_task_split(config.task, "test")
        if (config.eval_every or config.eval_on_start)
        else None
    )
    return GRPOTrainer(model, tokenizer, None, config, train_dataset, eval_dataset)


def train_from_yaml(path: str | Path, overrides: Sequence[str] = ()):
    """Load the model, data and rewards a YAML config names, train, return the metrics.

    What ``python -m grpo_lib train --config PATH --set key=value ...`` runs.
    """
    return run_training(trainer_from_yaml(path, overrides))


def _dynamic_sampling_problems(config: GRPOConfig) -> list[str]:
    """What is wrong with ``config``'s dynamic-sampling settings (for ``validate``)."""
    problems = []
    rounds = config.dynamic_sampling_max_rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        problems.append(f"dynamic_sampling_max_rounds={rounds!r}: must be an integer "
                        f">= 0.")
    names = [_reward_spec_name(spec) for spec in config.reward_funcs or []]
    if config.dynamic_sampling_metric not in (None, *names):
        problems.append(f"dynamic_sampling_metric={config.dynamic_sampling_metric!r}: "
                        f"name one of reward_funcs {names}, or None for the weighted "
                        f"total.")
    return problems


def _reward_spec_name(spec) -> str:
    """The name the trainer logs for a ``reward_funcs`` entry: a name, a ``{"name":
    ..., **params}`` dict (``with_params``' name), or a callable."""
    from .rewards import reward_name

    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        try:
            return reward_name(build_reward_funcs([spec])[0])
        except ValueError:  # an unknown name: reported where the functions are built
            return str(spec.get("name"))
    return reward_name(spec)


def fast_engine_misfit(model) -> str | None:
    """Why :mod:`grpo_lib.qwen2`'s engines ("scratch", "fast") cannot decode ``model``
    with the function it computes, or None when they can: a ``Qwen2ForCausalLM`` whose
    projections are plain ``nn.Linear`` layers (an adapter or a quantised layer keeps
    a forward of its own that the fused weights would skip)."""
    from transformers import Qwen2ForCausalLM

    if type(model) is not Qwen2ForCausalLM:
        return f"a {type(model).__name__}, not a Qwen2ForCausalLM"
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and type(module) is not torch.nn.Linear:
            return f"{name} is a {type(module).__name__}, not a plain nn.Linear"
    return None


def _rollout_engine(trainer) -> str:
    """The engine ``trainer`` rolls out with: ``config.rollout_engine``, or
    "transformers" (with one warning) where the from-scratch engines cannot decode
    its policy (:func:`fast_engine_misfit`); decided at the first rollout."""
    asked, model = trainer.config.rollout_engine, trainer.model
    known = getattr(trainer, "_engine", None)  # (asked, the policy, the engine)
    if known is not None and known[0] == asked and known[1] is model:
        return known[2]
    engine = asked
    misfit = None if engine == "transformers" else fast_engine_misfit(model)
    if misfit is not None:
        if trainer.config.sampling_correction:
            raise ValueError(f"sampling_correction needs rollout_engine='fast', which "
                             f"cannot decode this policy: {misfit}.")
        import warnings

        warnings.warn(f"rollout_engine={engine!r} cannot decode this policy "
                      f"({misfit}); it rolls out with rollout_engine='transformers' "
                      f"instead.", stacklevel=3)
        engine = "transformers"
    trainer._engine = (asked, model, engine)
    return engine


def _setting_problems(config: GRPOConfig) -> list[str]:
    """What ``validate`` finds wrong beyond its own checks: settings that would
    otherwise pass and fail at the first rollout or update, or train on nothing."""
    problems = _dynamic_sampling_problems(config) + _seed_problems(config)
    unclipped = ("cispo", "reinforce", "vespo")
    if config.loss_type not in unclipped and not config.epsilon < 1:
        problems.append(f"epsilon={config.epsilon!r}: the clip range [1 - epsilon, "
                        f"1 + epsilon_high] needs epsilon < 1 (usual: 0.2).")
    for name, optional in (("generation_batch_size", True), ("eval_batch_size", False)):
        value = getattr(config, name)
        if not (value is None and optional) and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{name}={value!r}: must be an integer >= 1"
                            + (" or null (the whole batch at once)." if optional
                               else "."))
    if config.ignore_eos and config.mask_truncated_completions:
        problems.append("ignore_eos=True makes every completion run to "
                        "max_completion_length, so mask_truncated_completions=True "
                        "would leave no token to train on; set one of them to false.")
    return problems


def _seed_problems(config: GRPOConfig) -> list[str]:
    """``seed`` seeds torch, numpy and the rollouts' ``numpy.random.SeedSequence``,
    which take the integers 0 .. 2**32 - 1 alike."""
    seed = config.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        return [f"seed={seed!r}: must be an integer from 0 to 2**32 - 1."]
    return []


def _rows_with_reward_columns(trainer, dataset) -> Any:
    """The training rows (``GRPOTrainer._as_rows``), checked against the columns that
    the library's reward functions read. A parameter of a ``grpo_lib.rewards``
    function that defaults to ``None`` is a dataset column, except the two that the
    trainer passes itself. Without this check a missing ``answer`` column would score
    every completion 0 and the run would train on nothing."""
    import inspect

    rows = trainer._as_rows(dataset, "train_dataset")
    have = set(rows[0])
    if trainer.config.prompt_format == "r1_zero" and "question" not in have:
        raise ValueError(
            f"prompt_format='r1_zero' writes the R1-Zero template around each row's "
            f"question, and the training rows have no 'question' column (their "
            f"columns: {sorted(have)}). Add it, or use prompt_format='chat'.")
    for fn, name in zip(trainer.reward_funcs, trainer.reward_names):
        if getattr(fn, "__module__", None) != "grpo_lib.rewards":
            continue  # a function of the reader's own: its columns are its business
        passed = ("num_generations", "completion_ids")  # by the trainer itself
        wanted = [p for p, v in inspect.signature(fn).parameters.items()
                  if v.default is None and p not in passed]
        missing = [p for p in wanted if p not in have]
        if missing:
            raise ValueError(
                f"reward {name} reads the dataset column(s) {missing}, which the "
                f"training rows do not have (their columns: {sorted(have)}). Add "
                f"the column(s), or choose rewards that the rows can feed.")
    return rows


def mini_batches(chunks: list[slice], k: int) -> list[list[slice]]:
    """The micro-batches ``chunks`` of one pass, in order, split into ``k`` equal
    mini-batches: one optimizer update each (PPO's mini-batches; TRL:
    ``steps_per_generation / gradient_accumulation_steps``). ``k = 1``: the pass is
    one update over the whole batch."""
    if k < 1 or len(chunks) % k:
        raise ValueError(f"{len(chunks)} micro-batches do not split into "
                         f"num_mini_batches={k} equal mini-batches.")
    per = len(chunks) // k  # micro-batches per update
    return [chunks[j:j + per] for j in range(0, len(chunks), per)]


def _mini_batch_problem(config: GRPOConfig) -> str | None:
    """What is wrong with ``num_mini_batches`` (``None``: nothing): each mini-batch
    must hold whole groups (so that, unshuffled, it does) and whole micro-batches."""
    k, prompts = config.num_mini_batches, config.per_step_prompts
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return (f"num_mini_batches={k!r}: an integer >= 1 (1: one optimizer update "
                f"per pass over the batch).")
    if not isinstance(prompts, int) or not isinstance(config.num_generations, int):
        return None  # reported by their own checks
    if prompts % k:
        fits = [d for d in range(1, prompts + 1) if prompts % d == 0]
        return (f"num_mini_batches={k} does not divide per_step_prompts={prompts}: "
                f"each mini-batch holds whole groups; pick one of {fits}.")
    if config.shuffle_mini_batches and config.share_group_prompt and k > 1:
        return ("shuffle_mini_batches scatters each group's completions over the "
                "mini-batches, so share_group_prompt (one prompt row per group) cannot "
                "apply; set share_group_prompt=False or shuffle_mini_batches=False.")
    rows, micro = config.batch_size // k, config.micro_batch_size
    if micro is not None and isinstance(micro, int) and micro > 0 and rows % micro:
        return (f"num_mini_batches={k} makes mini-batches of {rows} completions, not "
                f"a multiple of micro_batch_size={micro}; use a micro_batch_size that "
                f"divides {rows}, or fewer mini-batches.")
    return None


def mini_batch_order(config: GRPOConfig, step: int, rollout: Rollout,
                     advantages: torch.Tensor) -> tuple[Rollout, torch.Tensor]:
    """The rollout and its advantages ``[B]`` in the order the update cuts into
    mini-batches: as sampled (whole groups, in order), or, with
    ``shuffle_mini_batches`` and more than one mini-batch, the rows shuffled as TRL
    shuffles them, by one permutation drawn from ``(seed, step)`` on a stream of its
    own (spawn key 1; the rollouts' seeds have none), so a resumed run shuffles as the
    uninterrupted one. Every pass of the step uses the same order."""
    if not (config.shuffle_mini_batches and config.num_mini_batches > 1):
        return rollout, advantages
    stream = np.random.SeedSequence([config.seed, step], spawn_key=(1,))
    order = np.random.default_rng(stream).permutation(len(rollout))
    rows = [int(i) for i in order]
    return (_select_rollout(rollout, rows),
            advantages[torch.as_tensor(rows, device=advantages.device)])
