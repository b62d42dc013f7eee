"""The verl path: the book's task, reward and config handed to verl's GRPO trainer.

Three pieces, each checked against verl 0.9.1 (the wheel ``pip download verl`` gives)
and against verl's repository (``verl-project/verl`` on GitHub):

* :func:`export_verl_parquet` — a task split written as the parquet files verl's
  ``RLHFDataset`` reads, in the layout of verl's ``examples/data_preprocess/gsm8k.py``:
  ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model`` =
  ``{"style": "rule", "ground_truth": ...}`` and ``extra_info`` = ``{"split",
  "index", "question", "answer"}``;
* :func:`compute_score` — our rewards with the signature verl calls a custom reward
  function with, ``compute_score(data_source, solution_str, ground_truth,
  extra_info)`` (``verl/utils/reward_score/__init__.py``, ``default_compute_score``;
  the call in ``verl/experimental/reward_loop/reward_manager/naive.py``);
* :func:`verl_command` — the ``python3 -m verl.trainer.main_ppo
  algorithm.adv_estimator=grpo ...`` command line for one of our
  :class:`grpo_lib.trainer.GRPOConfig`, knob by knob.

What was read, and where:

* ``verl-project/verl``: ``examples/data_preprocess/gsm8k.py`` (the layout),
  ``docs/preparation/reward_function.rst`` (``custom_reward_function.path`` /
  ``.name``), ``docs/algo/grpo.md`` (the GRPO and Dr. GRPO keys);
* the verl 0.9.1 wheel: ``verl/trainer/config/_generated_ppo_trainer.yaml`` (every
  key below exists there), ``actor/actor.yaml``, ``optim/fsdp.yaml``,
  ``data/legacy_data.yaml``, ``reward/reward.yaml``,
  ``algorithm/rollout_correction.yaml``; ``verl/trainer/ppo/core_algos.py``
  (``agg_loss``, ``compute_policy_loss_vanilla``, ``compute_policy_loss_gpg``,
  ``compute_grpo_outcome_advantage``), ``verl/trainer/ppo/reward.py``
  (``get_custom_reward_fn`` reads ``reward.custom_reward_function``),
  ``verl/utils/import_utils.py`` (``load_module``: a file path or
  ``pkg://module.name``), ``verl/workers/engine_workers.py`` (one scheduler step per
  training step).

In 0.9.1 the reward function is named by ``reward.custom_reward_function.path`` and
``.name``; the older top-level ``custom_reward_function.*`` keys are only migrated by
the fully-async entry point, and ``main_ppo`` ignores them.

The mapping lives in one place, :data:`VERL_KEYS` (verl key -> our knob and how its
value is computed), :data:`FIXED_VERL_SETTINGS` (what the command always sets),
:data:`NO_VERL_EQUIVALENT` (our knobs verl cannot run, refused when they matter) and
:data:`NOT_A_VERL_SETTING` (our knobs that belong elsewhere). Every field of our
config is in exactly one of them (``tests/test_verl_bridge.py`` checks it).

One of our steps (``per_step_prompts`` x ``num_generations`` completions,
``num_iterations`` x ``num_mini_batches`` updates) is one verl training step:
``data.train_batch_size`` = ``per_step_prompts``, ``ppo_mini_batch_size`` =
``per_step_prompts / num_mini_batches`` (verl counts prompts and multiplies by
``rollout.n``) and ``ppo_epochs`` = μ.

verl is not imported here (it needs a GPU and vLLM or SGLang); :func:`compute_score`
imports only ``grpo_lib.rewards`` (absolute imports, so verl can load this file by its
path as well as by ``pkg://grpo_lib.verl_bridge``).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

VERL_VERSION = "0.9.1"
"""The verl release the keys were read from."""

REWARD_FUNCS = ("accuracy_reward", "format_reward")
"""What :func:`compute_score` computes: our R1-Zero rewards..."""
REWARD_WEIGHTS = (1.0, 0.1)
"""...with ``configs/r1_zero_arithmetic.yaml``'s weights: accuracy + 0.1 x format."""

DEFAULT_REWARD_PATH = "pkg://grpo_lib.verl_bridge"
"""Where verl finds :func:`compute_score` (grpo_lib installed in verl's environment:
``pip install -e .``); a file path to this module works too."""

ABILITY = "math"
"""The ``ability`` column (verl's gsm8k example writes "math"; no reward reads it)."""


# ======================================================================================
# The data
# ======================================================================================
def data_source(task: str) -> str:
    """The ``data_source`` of ``task``'s rows, e.g. ``"grpo_lib/arithmetic"``."""
    return f"grpo_lib/{task}"


def verl_row(row: Mapping[str, Any], task: str, split: str, index: int) -> dict:
    """One row of a task split in verl's layout (``examples/data_preprocess/gsm8k.py``).

    ``row`` needs ``question``, ``answer`` and ``prompt`` (a list of ``{"role",
    "content"}`` messages); verl applies the policy's chat template to ``prompt``.
    """
    missing = [k for k in ("question", "answer", "prompt") if k not in row]
    if missing:
        raise KeyError(f"verl_row needs the columns question, answer and prompt; the "
                       f"row has {sorted(row)} (missing {missing}). Load rows with "
                       f"grpo_lib.tasks.load_task_split(task, split).")
    prompt = [{"role": str(m["role"]), "content": str(m["content"])}
              for m in row["prompt"]]
    answer = str(row["answer"])
    return {
        "data_source": data_source(task),
        "prompt": prompt,
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": int(index),
                       "question": str(row["question"]), "answer": answer},
    }


def export_verl_parquet(task: str = "arithmetic", split: str = "train",
                        out_dir: str | Path = "data/verl/arithmetic",
                        n: int | None = None) -> Path:
    """Write ``task``'s ``split`` as ``<out_dir>/<split>.parquet`` in verl's layout.

    The rows come from :func:`grpo_lib.tasks.load_task_split` in order (the first
    ``n`` when ``n`` is given); each becomes :func:`verl_row`. The file is written
    with ``datasets.Dataset.to_parquet``, as verl's own preprocessing scripts do, and
    is what ``data.train_files`` / ``data.val_files`` point at. Returns the path.
    """
    from datasets import Dataset

    from grpo_lib.tasks import load_task_split

    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"export_verl_parquet: n={n!r}; pass a positive number of "
                         f"rows (e.g. n=64 for a smoke run) or None for all of them.")
    rows = load_task_split(task, split)
    if n is not None:
        rows = rows.select(range(min(n, len(rows))))
    records = [verl_row(row, task, split, i) for i, row in enumerate(rows)]
    if not records:
        raise ValueError(f"export_verl_parquet: {task!r} split {split!r} has no rows; "
                         f"check the split name (train or test).")
    path = Path(out_dir) / f"{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(records).to_parquet(str(path))
    return path


# ======================================================================================
# The reward
# ======================================================================================
def _text(value: Any) -> str | None:
    """A completion as text: bytes decoded, anything else that is not text is None."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else None


def reward_terms(solution_str: Any, ground_truth: Any) -> dict[str, float]:
    """Our two R1-Zero rewards of one completion, unweighted.

    ``{"accuracy_reward": 0 or 1, "format_reward": 0 or 1}`` from
    :func:`grpo_lib.rewards.accuracy_reward` (strict: the ``<answer>`` block) and
    :func:`grpo_lib.rewards.format_reward`. A reward that fails or returns a
    non-finite value scores 0.0 (its floor), so this never raises on model output.
    """
    from grpo_lib.rewards import accuracy_reward, format_reward

    text = _text(solution_str)
    terms = {}
    calls = (("accuracy_reward",
              lambda: accuracy_reward([text], answer=[ground_truth])),
             ("format_reward", lambda: format_reward([text])))
    for name, call in calls:
        try:
            value = float(call()[0])
        except Exception:  # noqa: BLE001 -- a reward must not stop verl's run
            value = 0.0
        terms[name] = value if math.isfinite(value) else 0.0
    return terms


def compute_score(data_source: Any = None, solution_str: Any = None,
                  ground_truth: Any = None, extra_info: Any = None,
                  **kwargs: Any) -> float:
    """verl's custom reward function: accuracy + 0.1 x format, from ``grpo_lib``.

    .. math:: r = r_\\text{accuracy} + 0.1\\, r_\\text{format}

    the reward of ``configs/r1_zero_arithmetic.yaml`` (:data:`REWARD_FUNCS`,
    :data:`REWARD_WEIGHTS`). verl calls it once per completion with keywords
    (``data_source``, ``solution_str`` — the decoded response, ``ground_truth`` —
    the row's ``reward_model.ground_truth``, ``extra_info``) and may add others
    (``reward_router_address``, ...), which are accepted and ignored, as are
    ``data_source`` and ``extra_info``: every grpo_lib arithmetic task has this reward.

    Returns a float in [0, 1.1]. Never raises: ``None``, bytes, empty or huge strings
    and answers such as ``9**9**9**9`` score their floor, and our parsers are linear
    time (``grpo_lib.parsing``), so nothing hangs.
    """
    terms = reward_terms(solution_str, ground_truth)
    score = math.fsum(w * terms[name] for name, w in zip(REWARD_FUNCS, REWARD_WEIGHTS))
    return score if math.isfinite(score) else 0.0


# ======================================================================================
# The mapping (the one place that says which knob becomes which verl key)
# ======================================================================================
class VerlFiles(NamedTuple):
    """The files a verl run reads: the exported splits and the reward function."""

    train_files: str
    val_files: str
    reward_path: str = DEFAULT_REWARD_PATH
    reward_name: str = "compute_score"


class Mapped(NamedTuple):
    """How one verl key is set from our config."""

    ours: str
    """Our knob it comes from."""
    value: Callable[[Any, VerlFiles], Any] | None = None
    """``(config, files) -> value``; ``None``: our knob's value as it is. Raises
    ``ValueError`` saying what to change when verl cannot do what the knob asks."""
    note: str = ""
    """Where ours and verl's defaults or meanings differ."""
    reads: tuple[str, ...] = ()
    """Other knobs the value also depends on."""

    def convert(self, config: Any, files: VerlFiles) -> Any:
        """The verl value for ``config``."""
        if self.value is None:
            return getattr(config, self.ours)
        return self.value(config, files)


def _micro(c) -> int:
    """Completions per forward/backward: ``micro_batch_size`` or a whole
    mini-batch."""
    return c.micro_batch_size or c.batch_size // c.num_mini_batches


def _choose(knob: str, value: Any, table: Mapping[Any, Any], why: str) -> Any:
    """``table[value]``, or a ValueError naming the values verl can run."""
    if value in table:
        return table[value]
    raise ValueError(f"{knob}={value!r}: {why}; use one of {sorted(table)}.")


def _model_dtype(c, f) -> str:
    dtypes = {"float32": "fp32", "bfloat16": "bf16"}
    return _choose("model_dtype", c.model_dtype, dtypes,
                   "verl loads the weights in one named dtype ('auto' is ours only)")


def _std(c, f) -> bool:
    return _choose("scale_rewards", c.scale_rewards, {"group": True, "none": False},
                   "verl's grpo estimator divides by the group's std or by nothing "
                   "(no batch std)")


_LOSS_AGG = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean",
             "dr_grpo": "seq-mean-token-sum-norm", "dapo": "token-mean",
             "reinforce": "seq-mean-token-sum"}


def _loss_agg(c, f) -> str:
    return _choose("loss_type", c.loss_type, _LOSS_AGG, "no verl aggregation")


def _loss_mode(c, f) -> str:
    if c.loss_type == "cispo":
        raise ValueError("loss_type='cispo': not mapped to verl here (verl's cispo "
                         "clips the weight to [1 - clip_ratio_low, 1 + "
                         "clip_ratio_high], ours caps it at epsilon_high); use "
                         "'grpo' or the TRL path.")
    if c.loss_type in ("sapo", "luspo", "vespo"):
        raise ValueError(f"loss_type={c.loss_type!r}: not mapped to verl here; use "
                         f"'grpo' or the TRL path.")
    if c.importance_sampling_level == "sequence":
        return "gspo"
    return "gpg" if c.loss_type == "reinforce" else "vanilla"


def _warmup_steps(c, f) -> int:
    """Our warm-up counts updates; verl's scheduler steps once per training step."""
    w = c.warmup_steps
    return -1 if 0 < w < 1 else math.ceil(w / c.updates_per_step)


def _scheduler(c, f) -> str:
    return _choose("lr_scheduler_type", c.lr_scheduler_type,
                   {"constant": "constant", "cosine": "cosine"},
                   "verl 0.9.1 has constant and cosine schedules only")


def _grad_clip(c, f) -> float:
    if not c.max_grad_norm > 0:
        raise ValueError(f"max_grad_norm={c.max_grad_norm!r}: verl always clips "
                         f"(optim.clip_grad); set a large value (e.g. 1e9) to make "
                         f"clipping a no-op.")
    return float(c.max_grad_norm)


def _rollout_is(c, f) -> str | None:
    if not c.sampling_correction:
        return None
    mode = c.sampling_correction_mode
    low, high = c.sampling_correction_clip_min, c.sampling_correction_clip_max
    if high is None:
        raise ValueError("sampling_correction_clip_max=None: verl's rollout "
                         "correction needs an upper bound (e.g. 3.0).")
    if mode.endswith("_mask") and low is None:
        raise ValueError(f"sampling_correction_mode={mode!r} with no lower bound: "
                         f"verl's masking (IcePop) needs 0 < min < max; set "
                         f"sampling_correction_clip_min (e.g. 0.5).")
    if mode.endswith("_truncate") and low is not None:
        raise ValueError(f"sampling_correction_mode={mode!r} with clip_min={low}: "
                         f"verl's truncation (TIS) has an upper bound only; set "
                         f"sampling_correction_clip_min=None.")
    return "token" if mode.startswith("token") else "sequence"


def _rollout_is_threshold(c, f) -> float | str:
    """TIS: the upper bound; masking (IcePop): ``"lower_upper"``."""
    high = c.sampling_correction_clip_max
    high = 2.0 if high is None else float(high)  # verl's default, when switched off
    low = c.sampling_correction_clip_min
    if c.sampling_correction_mode.endswith("_mask") and low is not None:
        return f"{float(low)}_{high}"
    return high


def _reward_name(c, f) -> str:
    """Refuse rewards :func:`compute_score` does not compute (it is ours by default)."""
    if f.reward_path == DEFAULT_REWARD_PATH and f.reward_name == "compute_score":
        names = [r if isinstance(r, str) else repr(r) for r in c.reward_funcs]
        weights = c.reward_weights or [1.0] * len(names)
        if (tuple(names), tuple(float(w) for w in weights)) != (REWARD_FUNCS,
                                                                REWARD_WEIGHTS):
            raise ValueError(
                f"reward_funcs={c.reward_funcs!r}, reward_weights={c.reward_weights!r}"
                f": grpo_lib.verl_bridge.compute_score is accuracy + 0.1 x format; "
                f"set reward_funcs=[accuracy_reward, format_reward] and "
                f"reward_weights=[1.0, 0.1], or write your own compute_score and "
                f"pass reward_path= and reward_name=.")
    return f.reward_name


def _save_freq(c, f) -> int:
    if c.save_every:
        return c.save_every
    return c.max_steps if c.save_final else -1


def _resume_mode(c, f) -> str:
    """None: a fresh run; "latest": verl's newest checkpoint in default_local_dir; a
    verl ``global_step_<N>`` folder: that one."""
    where = c.resume_from_checkpoint
    if where is None:
        return "disable"
    if where == "latest":
        return "auto"
    if re.fullmatch(r"global_step_\d+", Path(str(where)).name):
        return "resume_path"
    raise ValueError(f"resume_from_checkpoint={where!r}: our checkpoint-<step>/ "
                     f"folders are not verl checkpoints; name one of verl's "
                     f".../global_step_<N> folders, 'latest' or None.")


def _resume_path(c, f) -> str | None:
    """The folder to resume from when it is a verl ``global_step_<N>`` one."""
    if _resume_mode(c, f) == "resume_path":
        return str(c.resume_from_checkpoint)
    return None


def _device(c, f) -> str:
    if c.device not in (None, "cuda") and not str(c.device).startswith("cuda"):
        raise ValueError(f"device={c.device!r}: verl trains on GPUs (it switches "
                         f"to Ascend NPUs by itself); set device=None or 'cuda'.")
    return "cuda"


def _list(*values: str) -> Callable[[Any, VerlFiles], list]:
    return lambda c, f: [float(getattr(c, v)) for v in values]


_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"

VERL_KEYS: dict[str, Mapped] = {
    # ---- model and data
    "actor_rollout_ref.model.path": Mapped(
        "model_name_or_path", None,
        "a Hugging Face folder or hub name (relative paths: from where verl starts)"),
    f"{_ACTOR}.fsdp_config.model_dtype": Mapped(
        "model_dtype", _model_dtype,
        "the master weights' dtype; verl computes in bf16 mixed precision "
        "(fsdp_config.dtype), ours in model_dtype"),
    "data.train_files": Mapped(
        "task", lambda c, f: f.train_files,
        "export_verl_parquet(config.task, 'train', ...)"),
    "data.val_files": Mapped(
        "task", lambda c, f: f.val_files,
        "export_verl_parquet(config.task, 'test', ...)"),
    "reward.custom_reward_function.path": Mapped(
        "reward_funcs", lambda c, f: f.reward_path,
        "pkg://grpo_lib.verl_bridge (or this file's path)", ("reward_weights",)),
    "reward.custom_reward_function.name": Mapped(
        "reward_funcs", _reward_name,
        "compute_score: accuracy + 0.1 x format", ("reward_weights",)),
    # ---- rollout
    "data.train_batch_size": Mapped(
        "per_step_prompts", None, "prompts per step; verl samples rollout.n of each"),
    f"{_ACTOR}.ppo_mini_batch_size": Mapped(
        "num_mini_batches", lambda c, f: c.per_step_prompts // c.num_mini_batches,
        "prompts (x rollout.n) per optimizer step: per_step_prompts / "
        "num_mini_batches; both split the rollout into that many updates per epoch",
        ("per_step_prompts",)),
    f"{_ROLLOUT}.n": Mapped("num_generations", None, "G; verl's default is 1"),
    "data.max_response_length": Mapped(
        "max_completion_length", None, "verl: 512 tokens"),
    f"{_ROLLOUT}.temperature": Mapped("temperature"),
    f"{_ROLLOUT}.top_p": Mapped("top_p"),
    f"{_ROLLOUT}.ignore_eos": Mapped("ignore_eos"),
    "algorithm.filter_groups.enable": Mapped(
        "dynamic_sampling", None,
        "DAPO's refill of zero-variance groups (metric: the reward)"),
    # ---- credit assignment and loss
    "algorithm.norm_adv_by_std_in_grpo": Mapped(
        "scale_rewards", _std,
        "'group' -> True (DeepSeekMath), 'none' -> False (Dr. GRPO); verl adds 1e-6 "
        "to the std"),
    f"{_ACTOR}.loss_agg_mode": Mapped(
        "loss_type", _loss_agg,
        "verl's default token-mean is DAPO's; our grpo is seq-mean-token-mean; "
        "bnpo normalises per micro-batch (token-mean: per mini-batch); "
        "seq-mean-token-sum-norm adds the completions' sums where dr_grpo averages "
        "them (B times ours)"),
    f"{_ACTOR}.policy_loss.loss_mode": Mapped(
        "loss_type", _loss_mode,
        "vanilla: the clipped surrogate (plus verl's dual clip at clip_ratio_c=3 for "
        "A < 0, inert when on-policy); reinforce -> gpg (-A log p, no clip); "
        "importance_sampling_level='sequence' -> gspo",
        ("importance_sampling_level",)),
    f"{_ACTOR}.clip_ratio_c": Mapped(
        "delta", lambda c, f: 3.0 if c.delta is None else c.delta,
        "verl's dual clip caps the ratio of A < 0 tokens as delta does; verl always "
        "applies it, so delta=None writes verl's default 3, which binds only "
        "off-policy (num_iterations > 1)"),
    f"{_ACTOR}.loss_scale_factor": Mapped(
        "loss_type",
        lambda c, f: c.max_completion_length if c.loss_type == "dr_grpo" else None,
        "Dr. GRPO divides by L_max, not by the batch's padded length",
        ("max_completion_length",)),
    f"{_ACTOR}.use_kl_loss": Mapped(
        "beta", lambda c, f: c.beta != 0,
        "KL in the loss (GRPO), with a reference model only when beta != 0"),
    f"{_ACTOR}.entropy_coeff": Mapped(
        "entropy_coef", None,
        "verl aggregates the entropy with loss_agg_mode, ours is a token mean"),
    f"{_ACTOR}.kl_loss_coef": Mapped(
        "beta", lambda c, f: float(c.beta), "verl: 0.001; DeepSeekMath used 0.04"),
    f"{_ACTOR}.clip_ratio": Mapped("epsilon"),
    f"{_ACTOR}.clip_ratio_low": Mapped(
        "epsilon", None, "set too: verl's yaml gives clip_ratio_low its own 0.2"),
    f"{_ACTOR}.clip_ratio_high": Mapped(
        "epsilon_high",
        lambda c, f: c.epsilon if c.epsilon_high is None else c.epsilon_high,
        "None -> epsilon; DAPO's clip-higher uses 0.28", ("epsilon",)),
    f"{_ACTOR}.ppo_epochs": Mapped(
        "num_iterations", None, "μ: updates per rollout, old log-probs recomputed"),
    # ---- optimisation
    f"{_ACTOR}.optim.lr": Mapped(
        "learning_rate", None, "verl: 1e-6 (for 7B models); ours suits the tiny model"),
    f"{_ACTOR}.optim.lr_scheduler_type": Mapped(
        "lr_scheduler_type", _scheduler, "cosine decays to min_lr_ratio=0, as ours"),
    f"{_ACTOR}.optim.lr_warmup_steps": Mapped(
        "warmup_steps", _warmup_steps,
        "verl steps its schedule once per training step (ours: per update, hence "
        "/ updates_per_step); its warm-up starts at lr 0, ours at lr / W; -1: use "
        "the ratio", ("num_iterations", "num_mini_batches")),
    f"{_ACTOR}.optim.lr_warmup_steps_ratio": Mapped(
        "warmup_steps", lambda c, f: float(c.warmup_steps) if 0 < c.warmup_steps < 1
        else 0.0, "a share of all steps (ours: a float in (0, 1))"),
    f"{_ACTOR}.optim.weight_decay": Mapped(
        "weight_decay", lambda c, f: float(c.weight_decay),
        "verl: 0.01; both decay every weight"),
    f"{_ACTOR}.optim.betas": Mapped(
        "adam_beta1", _list("adam_beta1", "adam_beta2"), "[beta1, beta2]",
        ("adam_beta2",)),
    f"{_ACTOR}.optim.clip_grad": Mapped(
        "max_grad_norm", _grad_clip, "the global norm; ours 0 (no clip) is refused"),
    f"{_ACTOR}.ppo_micro_batch_size_per_gpu": Mapped(
        "micro_batch_size", lambda c, f: _micro(c),
        "completions per forward/backward (one GPU); None: the whole batch"),
    f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu": Mapped(
        "micro_batch_size", lambda c, f: _micro(c), "the old log-probs' pass"),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": Mapped(
        "micro_batch_size", lambda c, f: _micro(c), "the reference log-probs' pass"),
    "algorithm.rollout_correction.rollout_is": Mapped(
        "sampling_correction", _rollout_is,
        "pi_old / pi_sampler weights; verl always samples with vLLM/SGLang, so "
        "there the gap is real", ("sampling_correction_mode",
                                  "sampling_correction_clip_min")),
    "algorithm.rollout_correction.rollout_is_threshold": Mapped(
        "sampling_correction_clip_max", _rollout_is_threshold,
        "*_truncate: the upper bound (TIS); *_mask: 'min_max' (IcePop)",
        ("sampling_correction_mode", "sampling_correction_clip_min")),
    f"{_ACTOR}.fsdp_config.optimizer_offload": Mapped(
        "optimizer_offload", None, "AdamW's state in CPU memory"),
    f"{_ACTOR}.use_prefix_grouper": Mapped(
        "share_group_prompt", None,
        "one forward of each group's shared prompt (speed only)"),
    "trainer.total_training_steps": Mapped(
        "max_steps", None,
        "training steps (rollouts), as ours; overrides total_epochs"),
    "data.seed": Mapped(
        "seed", None,
        "the data order; one seed does not give verl and ours the same samples"),
    f"{_ROLLOUT}.seed": Mapped("seed", None, "the sampler's seed (verl: 42)"),
    # ---- logging, evaluation, checkpoints
    "trainer.default_local_dir": Mapped(
        "output_dir", None, "verl writes global_step_<N>/ checkpoints there"),
    "trainer.experiment_name": Mapped(
        "output_dir", lambda c, f: Path(c.output_dir).name, "the run's name in logs"),
    "trainer.save_freq": Mapped(
        "save_every", _save_freq,
        "-1: never; verl also saves the last step whenever save_freq > 0",
        ("save_final", "max_steps")),
    "trainer.test_freq": Mapped(
        "eval_every", lambda c, f: c.eval_every or -1,
        "verl validates greedily (rollout.val_kwargs) and logs compute_score's "
        "mean (accuracy + 0.1 x format), ours logs accuracy"),
    "trainer.val_before_train": Mapped("eval_on_start", None, "verl: True"),
    "data.val_max_samples": Mapped(
        "eval_n", None, "verl draws them at random from val_files; ours: the first"),
    "trainer.resume_mode": Mapped(
        "resume_from_checkpoint", _resume_mode,
        "None -> disable (verl's 'auto' would resume a run found in "
        "default_local_dir); 'latest' -> auto; .../global_step_<N> -> resume_path"),
    "trainer.resume_from_path": Mapped(
        "resume_from_checkpoint", _resume_path,
        "a verl checkpoint folder; ours (checkpoint-<step>/) are refused"),
    "trainer.device": Mapped("device", _device, "None -> cuda"),
}
"""verl key -> how it is set from our config (in the order of our config's fields)."""

FIXED_VERL_SETTINGS: dict[str, tuple[Any, str]] = {
    "algorithm.adv_estimator": (
        "grpo", "group-relative advantages of the summed reward (verl: gae)"),
    "algorithm.use_kl_in_reward": (
        False, "GRPO puts the KL in the loss (use_kl_loss), not in the reward"),
    f"{_ACTOR}.kl_loss_type": (
        "low_var_kl", "k3, as ours; verl clamps it to [-10, 10]"),
    f"{_ROLLOUT}.name": ("vllm", "verl requires a rollout engine (vllm or sglang)"),
    f"{_ROLLOUT}.tensor_model_parallel_size": (1, "one GPU (verl's default: 2)"),
    "trainer.n_gpus_per_node": (1, "one GPU (verl's default: 8)"),
    "trainer.nnodes": (1, "one machine"),
    "trainer.project_name": ("grpo_lib", "the project in the loggers"),
    "trainer.logger": (["console"], "verl's default adds wandb"),
}
"""verl key -> (the value the command always sets, why); ``overrides`` may change
it."""

NO_VERL_EQUIVALENT: dict[str, tuple[Callable[[Any], bool], str]] = {
    "prompt_format": (
        lambda c: c.prompt_format != "chat",
        "verl applies the policy's chat template to the prompt messages; the raw "
        "R1-Zero text has no equivalent: use prompt_format='chat'"),
    "multi_objective_aggregation": (
        lambda c: c.multi_objective_aggregation != "sum_then_normalize",
        "compute_score returns the weighted sum, which grpo normalises; GDPO's "
        "normalize_then_sum is verl's adv_estimator=gdpo (per-reward keys, then a "
        "batch whitening this bridge does not set up): use 'sum_then_normalize'"),
    "use_bias_correction_kl": (
        lambda c: c.beta != 0 and c.use_bias_correction_kl,
        "verl's KL loss has no importance-ratio factor: set "
        "use_bias_correction_kl=False to accept verl's plain k3"),
    "sync_ref_model": (
        lambda c: c.sync_ref_model,
        "this bridge writes no reference sync for verl, whose reference worker loads "
        "the initial weights: set sync_ref_model=False"),
    "ref_model_mixup_alpha": (
        lambda c: False, "only sync_ref_model reads it, which is not mapped to verl"),
    "ref_model_sync_steps": (
        lambda c: False, "only sync_ref_model reads it, which is not mapped to verl"),
    "top_entropy_quantile": (
        lambda c: c.top_entropy_quantile < 1,
        "verl 0.9.1's actor has no high-entropy token mask: set it to 1"),
    "use_adaptive_entropy": (
        lambda c: c.use_adaptive_entropy,
        "verl 0.9.1's entropy_coeff is fixed (no Skywork-OR1 control): set "
        "use_adaptive_entropy=False"),
    **{name: (lambda c: False, "only use_adaptive_entropy reads it, which is not "
                               "mapped to verl")
       for name in ("entropy_target", "entropy_coef_delta", "entropy_coef_min",
                    "entropy_coef_max")},
    "off_policy_mask_threshold": (
        lambda c: c.off_policy_mask_threshold is not None,
        "verl 0.9.1 has no off-policy sequence mask (DeepSeek-V3.2): set it to None"),
    "sapo_temperature_pos": (
        lambda c: False, "only loss_type='sapo' reads it, which is not mapped to verl"),
    "sapo_temperature_neg": (
        lambda c: False, "only loss_type='sapo' reads it, which is not mapped to verl"),
    **{name: (lambda c: False, "only loss_type='vespo' reads it, which is not "
                               "mapped to verl")
       for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                    "vespo_lambda_neg")},
    "shuffle_mini_batches": (
        lambda c: c.shuffle_mini_batches and c.num_mini_batches > 1,
        "verl 0.9.1's FSDP actor cuts its mini-batches in the batch's order "
        "(data.split; it ignores actor.shuffle): set shuffle_mini_batches=False"),
    "mask_truncated_completions": (
        lambda c: c.mask_truncated_completions,
        "verl 0.9.1 cannot leave truncated completions out of the loss (DAPO's "
        "verl recipe shapes their reward instead): set it to False"),
    "dynamic_sampling_max_rounds": (
        lambda c: False,
        "verl 0.9.1's trainer ignores filter_groups.max_num_gen_batches (it warns) "
        "and samples until the batch is full"),
    "dynamic_sampling_metric": (
        lambda c: c.dynamic_sampling and c.dynamic_sampling_metric is not None,
        "verl filters groups on one metric of its reward (filter_groups.metric); "
        "this bridge's compute_score returns the weighted total only: set "
        "dynamic_sampling_metric=None"),
}
"""Our knob -> (when verl cannot run it as meant, why and what to do);
:func:`verl_overrides` refuses the config when the first item is true."""

NOT_A_VERL_SETTING: dict[str, str] = {
    "generation_batch_size": "our decode chunk (memory; a seed's draws); vLLM batches "
                             "continuously (rollout.max_num_seqs)",
    "rollout_engine": "our decode loop; verl samples with vLLM or SGLang "
                      "(rollout.name)",
    "rollout_sampler": "how our fast engine draws a token; vLLM draws its own way",
    "progress_bar": "verl prints each step's metrics (trainer.logger=['console'])",
    "print_every": "verl logs every step",
    "sample_every": "set trainer.rollout_data_dir to dump each step's rollouts "
                    "as JSONL",
    "num_print_samples": "our printout; trainer.log_val_generations logs "
                         "validation samples",
    "eval_batch_size": "memory only; vLLM batches the validation set itself",
    "overwrite_output_dir": "verl writes into default_local_dir without this check",
}
"""Our knob -> where it goes instead; :func:`verl_overrides` leaves it out."""


# ======================================================================================
# The command
# ======================================================================================
def verl_files(config, data_dir: str | Path | None = None,
               reward_path: str | Path = DEFAULT_REWARD_PATH,
               reward_name: str = "compute_score") -> VerlFiles:
    """The files of a run: ``<data_dir>/train.parquet`` and ``test.parquet`` (as
    :func:`export_verl_parquet` names them; ``data_dir`` defaults to
    ``data/verl/<task>``) and the reward function."""
    folder = Path(data_dir) if data_dir is not None else Path("data/verl") / config.task
    return VerlFiles(str(folder / "train.parquet"), str(folder / "test.parquet"),
                     str(reward_path), reward_name)


def verl_overrides(config, data_dir: str | Path | None = None,
                   reward_path: str | Path = DEFAULT_REWARD_PATH,
                   reward_name: str = "compute_score",
                   overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{verl key: value}`` for our :class:`~grpo_lib.trainer.GRPOConfig`.

    :data:`FIXED_VERL_SETTINGS` first (``algorithm.adv_estimator=grpo``, one GPU,
    vLLM), then every key of :data:`VERL_KEYS` from ``config`` and the files
    (:func:`verl_files`), then ``overrides``: any other verl key, e.g.
    ``{"actor_rollout_ref.rollout.gpu_memory_utilization": 0.4}``.

    Raises ``ValueError`` listing, one line each, every knob verl cannot run as meant
    (:data:`NO_VERL_EQUIVALENT`, and values such as ``scale_rewards="batch"``) and
    every override of a key our config sets.
    """
    config = config.validate()
    files = verl_files(config, data_dir, reward_path, reward_name)
    overrides = dict(overrides or {})
    problems = [f"{name}={getattr(config, name)!r}: {why}."
                for name, (refused, why) in NO_VERL_EQUIVALENT.items()
                if refused(config)]
    values = {key: value for key, (value, _) in FIXED_VERL_SETTINGS.items()}
    for key, mapped in VERL_KEYS.items():
        try:
            values[key] = mapped.convert(config, files)
        except ValueError as err:
            problems.append(str(err))
    for key in overrides:
        if key in VERL_KEYS:
            problems.append(f"override {key}=...: it comes from our config's "
                            f"{VERL_KEYS[key].ours}; change that instead.")
    if problems:
        raise ValueError("verl_overrides: verl would not run this config as meant:\n"
                         "  - " + "\n  - ".join(dict.fromkeys(problems)))
    values.update(overrides)
    return values


_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_.:/+\-]*")
"""Strings Hydra reads back as the same string without quotes (a path, a name)."""
_KEYWORDS = {"null", "true", "false", "inf", "nan"}


def hydra_value(value: Any) -> str:
    """``value`` written for a Hydra command-line override (``null``, ``True``,
    ``0.0005``, ``[0.9,0.999]``, a string quoted when it holds other characters)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"hydra_value: {value!r} is not a finite number; verl "
                             f"keys take finite numbers.")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower().lstrip(".") not in _KEYWORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_command(config, data_dir: str | Path | None = None,
                 reward_path: str | Path = DEFAULT_REWARD_PATH,
                 reward_name: str = "compute_score",
                 overrides: Mapping[str, Any] | None = None) -> list[str]:
    """``python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo ...`` as an
    argument list (for ``subprocess.run``; :func:`shell_command` prints it).

    The overrides are :func:`verl_overrides`, written ``key=value`` in Hydra's
    syntax (:func:`hydra_value`). Export the data first::

        export_verl_parquet("arithmetic", "train", "data/verl/arithmetic")
        export_verl_parquet("arithmetic", "test", "data/verl/arithmetic")
    """
    values = verl_overrides(config, data_dir, reward_path, reward_name, overrides)
    return ["python3", "-m", "verl.trainer.main_ppo",
            *(f"{key}={hydra_value(value)}" for key, value in values.items())]


def shell_command(argv: list[str]) -> str:
    """``argv`` as a shell command, one argument per line (``\\`` continuations)."""
    import shlex

    head = " ".join(shlex.quote(a) for a in argv[:3])
    return " \\\n    ".join([head, *(shlex.quote(a) for a in argv[3:])])


def knob_table(config=None):
    """The mapping as a ``pandas.DataFrame``: ``kind``, ``ours``, ``verl``, ``note``,
    and ``value`` (the verl value for ``config``, when one is given).

    Kinds: "mapped" (:data:`VERL_KEYS`), "fixed" (:data:`FIXED_VERL_SETTINGS`),
    "refused" (:data:`NO_VERL_EQUIVALENT`) and "elsewhere"
    (:data:`NOT_A_VERL_SETTING`).
    """
    import pandas as pd

    values = verl_overrides(config) if config is not None else {}
    rows = [dict(kind="mapped", ours=m.ours, verl=key, note=m.note)
            for key, m in VERL_KEYS.items()]
    rows += [dict(kind="fixed", ours="", verl=key, note=why)
             for key, (_, why) in FIXED_VERL_SETTINGS.items()]
    rows += [dict(kind="refused", ours=name, verl="", note=why)
             for name, (_, why) in NO_VERL_EQUIVALENT.items()]
    rows += [dict(kind="elsewhere", ours=name, verl="", note=why)
             for name, why in NOT_A_VERL_SETTING.items()]
    frame = pd.DataFrame(rows)
    if config is not None:
        frame.insert(3, "value", [values.get(key) if key else None
                                  for key in frame["verl"]])
    return frame
