"""The TRL path: our rewards and our config, handed to TRL's ``GRPOTrainer``.

Three pieces, each checked against TRL 1.16's own source (``trl/trainer/
grpo_config.py`` and ``grpo_trainer.py``):

* :func:`trl_reward` — one of our reward functions, called the way TRL calls reward
  functions (``reward_func(prompts=..., completions=..., completion_ids=...,
  **dataset_columns, trainer_state=..., log_extra=..., log_metric=...)``) and logged by
  TRL under our name (``rewards/<name>/mean``);
* :func:`to_trl_config` — our :class:`grpo_lib.trainer.GRPOConfig` mapped knob by knob
  onto ``trl.GRPOConfig``, on the CPU, refusing the knobs TRL has no equivalent for;
* :func:`knob_table` — the mapping as a table, with both libraries' defaults read from
  the two dataclasses, so the table cannot drift from the code.

The mapping lives in one place, :data:`TRL_FIELDS` (what is copied),
:data:`FIXED_TRL_SETTINGS` (what the bridge always sets), :data:`NO_TRL_EQUIVALENT`
(what is refused when changed) and :data:`NOT_A_TRL_SETTING` (what belongs to the
``GRPOTrainer(...)`` call or to our own logging, not to the config). Every field of our
config is in exactly one of them, and every GRPO field of TRL's is mapped, fixed or in
:data:`TRL_ONLY` (``tests/test_trl_bridge.py`` checks both).

The step: one of our steps (``per_step_prompts`` x ``num_generations`` completions,
``num_iterations`` x ``num_mini_batches`` updates) is one TRL generation batch with
``generation_batch_size = per_step_prompts * num_generations`` and
``gradient_accumulation_steps = generation_batch_size / micro_batch_size /
num_mini_batches`` (TRL then derives ``steps_per_generation = generation_batch_size /
micro_batch_size``); TRL counts every optimizer step, so ``max_steps`` and
``save_steps`` are multiplied by ``updates_per_step``.

TRL is imported only by the functions that need it (it is a test extra, not a
dependency of ``grpo_lib``).
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from typing import Any, Callable, NamedTuple

from .parsing import completion_text
from .trainer import GRPOConfig

TRL_VERSION = "1.16.0"
"""The TRL release the mapping was read from."""

TRL_ONLY_KWARGS = ("prompts", "trainer_state", "log_extra", "log_metric",
                   "environments")
"""What TRL passes that grpo_lib's trainer does not: handed to a reward function only
when it names the argument (``**kwargs`` does not receive them)."""


# ======================================================================================
# Rewards
# ======================================================================================
class TRLReward:
    """A grpo_lib reward function with TRL's call convention (see :func:`trl_reward`).

    A class rather than a closure: it pickles whenever ``fn`` does (TRL's reward
    forms are picklable ones), and TRL reads our name from its ``__name__``.
    """

    def __init__(self, fn: Callable, name: str, num_generations: int | None,
                 missing: float | None):
        self.fn, self.__name__ = fn, name
        self.num_generations, self.missing = num_generations, missing
        params = inspect.signature(fn).parameters.values()
        self._named = {p.name for p in params
                       if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        self._takes_all = any(p.kind == p.VAR_KEYWORD for p in params)

    def _wanted(self, name: str) -> bool:
        """Does ``fn`` get the keyword argument ``name``?"""
        if name in self._named:
            return True
        return self._takes_all and name not in TRL_ONLY_KWARGS

    def _score(self, value: Any) -> float | None:
        """A float; ``None``/NaN/inf become ``self.missing``."""
        if value is None or not math.isfinite(float(value)):
            return self.missing
        return float(value)

    def __call__(self, completions: list, prompts: list | None = None,
                 **kwargs) -> list[float | None]:
        texts = [completion_text(c) for c in completions]  # TRL's messages -> text
        if prompts is not None:  # our trainer passes the dataset column as `prompt`
            kwargs.update(prompt=prompts, prompts=prompts)
        if self.num_generations is not None:
            kwargs["num_generations"] = self.num_generations
        values = self.fn(texts, **{k: v for k, v in kwargs.items() if self._wanted(k)})
        if values is None or len(values) != len(texts):
            got = "None" if values is None else f"{len(values)} scores"
            raise ValueError(f"reward function {self.__name__} returned {got} for "
                             f"{len(texts)} completions; it must return one each.")
        return [self._score(v) for v in values]

    def __repr__(self) -> str:
        return f"<trl_reward {self.__name__}>"


def trl_reward(fn: Callable, name: str | None = None, *,
               num_generations: int | None = None,
               missing: float | None = 0.0) -> TRLReward:
    """Wrap our reward ``fn(completions, **columns) -> list[float]`` for TRL.

    TRL calls :math:`r_k(\\text{prompts}, \\text{completions}, \\text{completion\\_ids},
    \\text{columns}, \\ldots)` with keywords only; the wrapper calls ``fn`` exactly as
    :class:`grpo_lib.trainer.GRPOTrainer` does:

    * ``completions`` as text: TRL's conversational completions (a list of
      ``{"role", "content"}`` messages) become their last message's content
      (:func:`grpo_lib.parsing.completion_text`); plain strings pass unchanged;
    * TRL's ``prompts`` arrives as the ``prompt`` column; the dataset columns and
      ``completion_ids`` pass as they are; TRL's own extras (:data:`TRL_ONLY_KWARGS`)
      only if ``fn`` names them; a keyword ``fn`` does not take is dropped;
    * ``num_generations`` (G) is passed when given: TRL does not pass it, and
      group-wise rewards (``length_reward``) need it. With N processes each one
      scores its own slice of the batch: whole groups when ``per_step_prompts`` is a
      multiple of N, which ``to_trl_config(config, num_processes=N)`` checks.

    Scores come back as floats. ``None``, NaN and inf (a function's "cannot score")
    become ``missing``: 0.0 by default, which is what grpo_lib's trainer does; pass
    ``missing=None`` for TRL's "not applicable" (the sample then leaves this function's
    logged mean and, when every function says ``None``, the group baseline).
    TRL logs the function as ``name`` (default: ``grpo_lib.rewards.reward_name(fn)``).
    An exception inside ``fn`` propagates (TRL has no per-sample retry, unlike ours).
    """
    from .rewards import reward_name

    if not callable(fn):
        raise TypeError(f"trl_reward wraps a reward function fn(completions, "
                        f"**columns) -> list[float]; got {type(fn).__name__} "
                        f"{fn!r:.60}")
    return TRLReward(fn, name or reward_name(fn), num_generations, missing)


def trl_reward_funcs(config: GRPOConfig, missing: float | None = 0.0) -> list:
    """The reward functions ``config.reward_funcs`` names, wrapped for TRL with
    ``num_generations=config.num_generations``; a repeated name gets ``#2``, ``#3``
    (as in grpo_lib's trainer; TRL would log both under one name)."""
    from .rewards import reward_name
    from .trainer import build_reward_funcs

    wrapped, names = [], []
    for fn in build_reward_funcs(config.reward_funcs):
        name, k = reward_name(fn), 2
        while name in names:
            name, k = f"{reward_name(fn)}#{k}", k + 1
        names.append(name)
        wrapped.append(trl_reward(fn, name, num_generations=config.num_generations,
                                  missing=missing))
    return wrapped


# ======================================================================================
# The mapping (the one place that says which knob becomes what)
# ======================================================================================
class Mapped(NamedTuple):
    """How one TRL field is set from our config."""

    ours: str
    """Our knob it comes from (its value may also read other knobs)."""
    value: Callable[[GRPOConfig], Any] | None = None
    """Our config -> the TRL value; ``None``: our knob's value as it is."""
    note: str = ""
    """Where the defaults (ours, TRL's, the paper's) differ, and why."""

    def convert(self, config: GRPOConfig) -> Any:
        """The TRL value for ``config``."""
        if self.value is None:
            return getattr(config, self.ours)
        return self.value(config)


def _scheduler(c: GRPOConfig) -> str:
    """transformers' "constant" ignores the warm-up; its "constant_with_warmup" is
    ours with a warm-up."""
    if c.lr_scheduler_type == "constant" and c.warmup_steps:
        return "constant_with_warmup"
    return c.lr_scheduler_type


TRL_FIELDS: dict[str, Mapped] = {
    "reward_weights": Mapped("reward_weights", lambda c: None if c.reward_weights
                             is None else [float(w) for w in c.reward_weights]),
    "generation_batch_size": Mapped(
        "per_step_prompts", lambda c: c.batch_size,
        "per_step_prompts x num_generations; TRL's None means "
        "per_device_train_batch_size x steps_per_generation"),
    "num_generations": Mapped("num_generations", None, "DeepSeekMath sampled G = 64"),
    "max_completion_length": Mapped(
        "max_completion_length", None,
        "TRL: 512 tokens; ours is sized for the tiny model's short answers"),
    "temperature": Mapped("temperature"),
    "top_p": Mapped("top_p"),
    "scale_rewards": Mapped(
        "scale_rewards", None,
        "'group' in both (DeepSeekMath); Dr. GRPO (Liu et al. 2025) uses 'none'"),
    "multi_objective_aggregation": Mapped(
        "multi_objective_aggregation", None, "'normalize_then_sum' is GDPO's"),
    "loss_type": Mapped(
        "loss_type", None,
        "TRL 1.16: 'dapo' (token sum / tokens in the accumulated batch); "
        "DeepSeekMath eq. 3 and ours: 'grpo' (mean per sequence, then over them)"),
    "beta": Mapped(
        "beta", None,
        "0 in both (no reference model); DeepSeekMath used 0.04, TRL's docs cite "
        "0.001 for DeepSeek-R1"),
    "entropy_coef": Mapped(
        "entropy_coef", None,
        "0 in both; a mean-token-entropy bonus whatever the loss_type"),
    "use_adaptive_entropy": Mapped(
        "use_adaptive_entropy", None,
        "False in both; Skywork-OR1's control moves entropy_coef each optimizer step"),
    "entropy_target": Mapped("entropy_target", None, "0.2 nats in both"),
    "entropy_coef_delta": Mapped("entropy_coef_delta"),
    "entropy_coef_min": Mapped("entropy_coef_min"),
    "entropy_coef_max": Mapped("entropy_coef_max"),
    "sync_ref_model": Mapped("sync_ref_model", None,
                             "False in both; TR-DPO's reference sync (needs beta > 0)"),
    "ref_model_mixup_alpha": Mapped("ref_model_mixup_alpha", None,
                                    "0.6 in both; 1 resets the reference (ProRL)"),
    "ref_model_sync_steps": Mapped(
        "ref_model_sync_steps",
        lambda c: c.ref_model_sync_steps * c.updates_per_step,
        "x updates per step: TRL counts optimizer steps; 512 in both"),
    "use_bias_correction_kl": Mapped(
        "use_bias_correction_kl", None,
        "True in both (KL x ratio, DeepSeek-V3.2); DeepSeekMath's KL has no ratio"),
    "epsilon": Mapped("epsilon"),
    "epsilon_high": Mapped("epsilon_high", None,
                           "None: = epsilon; DAPO's clip-higher uses 0.28; "
                           "cispo: the ratio's cap, 5.0"),
    "importance_sampling_level": Mapped(
        "importance_sampling_level", None,
        "'token' in both; GSPO's 'sequence' goes with a clip of 3e-4 / 4e-4"),
    "delta": Mapped("delta", None,
                    "None in both; INTELLECT-2's two-sided clip uses 4"),
    "sapo_temperature_pos": Mapped("sapo_temperature_pos"),
    "sapo_temperature_neg": Mapped("sapo_temperature_neg"),
    "vespo_k_pos": Mapped("vespo_k_pos"),
    "vespo_lambda_pos": Mapped("vespo_lambda_pos"),
    "vespo_k_neg": Mapped("vespo_k_neg"),
    "vespo_lambda_neg": Mapped("vespo_lambda_neg"),
    "top_entropy_quantile": Mapped(
        "top_entropy_quantile", None,
        "1 in both (every token); Wang et al. 2025 keep the top 0.2"),
    "off_policy_mask_threshold": Mapped(
        "off_policy_mask_threshold", None,
        "None in both; DeepSeek-V3.2's mask, inert on-policy (e.g. 0.5)"),
    "num_iterations": Mapped(
        "num_iterations", None,
        "μ; TRL counts μ optimizer steps per rollout (max_steps, save_steps x μ)"),
    "steps_per_generation": Mapped(
        "num_mini_batches", lambda c: None,
        "None: TRL derives it, micro-batches per rollout (num_mini_batches x "
        "gradient_accumulation_steps); TRL shuffles rows into its mini-batches (ours "
        "with shuffle_mini_batches, else it keeps groups whole) and divides dapo's "
        "sum by the rollout's tokens / k, ours by the mini-batch's own tokens"),
    "mask_truncated_completions": Mapped("mask_truncated_completions", None,
                                         "DAPO turns it on"),
    "learning_rate": Mapped(
        "learning_rate", None,
        "TRL: 1e-6 (DeepSeekMath's, for 7B models); ours suits the tiny model"),
    "lr_scheduler_type": Mapped(
        "lr_scheduler_type", _scheduler,
        "transformers: 'linear' decay; ours 'constant' ('constant_with_warmup' "
        "when warming up)"),
    "warmup_steps": Mapped(
        "warmup_steps", None,
        "same meaning (int: updates, float < 1: share); transformers' warm-up "
        "starts at lr 0, ours at lr / W"),
    "weight_decay": Mapped(
        "weight_decay", None,
        "transformers skips biases and norm weights; ours decays every weight"),
    "adam_beta1": Mapped("adam_beta1"),
    "adam_beta2": Mapped("adam_beta2"),
    "max_grad_norm": Mapped("max_grad_norm"),
    "per_device_train_batch_size": Mapped(
        "micro_batch_size",
        lambda c: _split_over_processes(c, 1)["per_device_train_batch_size"],
        "None (ours): the whole batch in one pass"),
    "gradient_accumulation_steps": Mapped(
        "micro_batch_size",
        lambda c: _split_over_processes(c, 1)["gradient_accumulation_steps"],
        "batch / micro_batch_size / num_mini_batches: micro-batches per optimizer "
        "step, as ours"),
    "vllm_importance_sampling_correction": Mapped(
        "sampling_correction", None,
        "TRL: on, but applied to vLLM rollouts only; ours: off"),
    "vllm_importance_sampling_mode": Mapped("sampling_correction_mode"),
    "vllm_importance_sampling_clip_max": Mapped("sampling_correction_clip_max"),
    "vllm_importance_sampling_clip_min": Mapped("sampling_correction_clip_min"),
    "max_steps": Mapped(
        "max_steps", lambda c: c.max_steps * c.updates_per_step,
        "x updates per step (TRL counts optimizer steps); TRL's -1: use "
        "num_train_epochs"),
    "seed": Mapped(
        "seed", None,
        "transformers: 42; one seed does not give TRL and ours the same samples"),
    "output_dir": Mapped("output_dir"),
    "disable_tqdm": Mapped("progress_bar", lambda c: not c.progress_bar,
                           "negated"),
    "save_steps": Mapped(
        "save_every", lambda c: (c.save_every or c.max_steps) * c.updates_per_step,
        "x updates per step; with save_every = 0 and save_final, the last step"),
    "save_strategy": Mapped(
        "save_final", lambda c: "steps" if c.save_every or c.save_final else "no",
        "'steps' also saves the last step even without save_final"),
    "use_cpu": Mapped(
        "device", lambda c: c.device in (None, "cpu"),
        "None -> the CPU here (our trainer's None picks CUDA when available)"),
}
"""TRL field -> how it is set from our config (in the order of our config's fields)."""

FIXED_TRL_SETTINGS: dict[str, tuple[Any, str]] = {
    "report_to": ("none", "no experiment tracker"),
    "bf16": (False, "TRL's None becomes True unless fp16; ours trains in float32 "
                    "(pass bf16=True to ask)"),
    "gradient_checkpointing": (False, "TRL: True (recompute activations to save "
                                      "memory); ours never recomputes. Newer "
                                      "transformers: activation_checkpointing"),
    "logging_steps": (1, "TRL: 10; ours logs every step (metrics.csv)"),
    "remove_unused_columns": (False, "keep the dataset columns the rewards read "
                                     "(TRL's default too)"),
}
"""TRL field -> (the value the bridge always sets, why); ``overrides`` may change it."""

NO_TRL_EQUIVALENT: dict[str, str] = {
    "ignore_eos": "TRL cannot sample past EOS; its nearest, generation_kwargs="
                  "{'min_new_tokens': L}, forbids EOS instead (another distribution)",
    "dynamic_sampling": "TRL 1.16 has no dynamic sampling (DAPO's refill of "
                        "zero-variance groups)",
    "dynamic_sampling_max_rounds": "only read by dynamic_sampling, which TRL 1.16 "
                                   "lacks",
    "dynamic_sampling_metric": "only read by dynamic_sampling, which TRL 1.16 lacks",
    "resume_from_checkpoint": "our checkpoint-<step>/ folders are not TRL checkpoints; "
                              "resume with trainer.train(resume_from_checkpoint=...)",
}
"""Our knob -> why TRL 1.16 cannot do it; :func:`to_trl_config` refuses a changed
one."""

NOT_A_TRL_SETTING: dict[str, str] = {
    "model_name_or_path": "the model goes to trl.GRPOTrainer(model=...)",
    "model_dtype": "load the model in this dtype before handing it to TRL",
    "task": "the rows go to trl.GRPOTrainer(train_dataset=...)",
    "prompt_format": "build the dataset's 'prompt' column in this format",
    "reward_funcs": "pass trl_reward_funcs(config) as GRPOTrainer(reward_funcs=...)",
    "generation_batch_size": "our decode chunk (memory; a seed's draws); TRL's "
                             "field of that name is the whole rollout batch",
    "rollout_engine": "our decode loop (speed only); TRL samples with "
                      "model.generate: the same distribution, another random stream",
    "rollout_sampler": "how our fast engine draws a token (speed only); TRL draws "
                       "with model.generate",
    "optimizer_offload": "where AdamW's state lives (memory only, same maths)",
    "share_group_prompt": "speed only (the same log-probs to round-off); TRL "
                          "computes each prompt G times",
    "shuffle_mini_batches": "TRL always shuffles the rollout's rows before it cuts "
                            "them into micro-batches and mini-batches; True gives "
                            "TRL's kind of split (another permutation) when "
                            "num_mini_batches > 1, and with one mini-batch ours "
                            "keeps the order, which only bnpo's and "
                            "top_entropy_quantile's per-micro-batch terms notice",
    "print_every": "our console summary; TRL logs every logging_steps",
    "sample_every": "our samples.jsonl; TRL's log_completions prints a table every "
                    "logging step",
    "num_print_samples": "our samples printout (see sample_every)",
    "eval_every": "our evaluation harness: run grpo_lib.evaluate on the TRL model",
    "eval_on_start": "our evaluation harness (see eval_every)",
    "eval_n": "our evaluation harness (see eval_every)",
    "eval_batch_size": "our evaluation harness (see eval_every)",
    "overwrite_output_dir": "TRL writes into output_dir without this check",
}
"""Our knob -> where it goes instead; :func:`to_trl_config` leaves it out."""

_VLLM = "vLLM rollouts on a GPU (chapter 21's recipe); ours samples in-process"
_GENERATE = "transformers' generate options; ours samples with rollout_engine"
_LOG = "TRL's logging of completions; ours: sample_every and num_print_samples"
_LOAD = "how TRL loads a model by name; ours: model_name_or_path and model_dtype"
TRL_ONLY: dict[str, str] = {
    # the algorithm
    "cast_lm_head_to_fp32": "the output layer in float32 (ScaleRL), for bf16 models",
    "disable_dropout": "Qwen2's one dropout, attention_dropout, is 0 in the book's "
                       "checkpoints",
    "router_aux_loss_coef": "mixture-of-experts models only",
    # sampling
    "top_k": "ours samples with temperature and top_p only",
    "min_p": "ours samples with temperature and top_p only",
    "repetition_penalty": "ours samples with temperature and top_p only",
    "generation_kwargs": "any other sampling option of the generation backend",
    "num_generations_eval": "G for TRL's evaluation loop; ours: grpo_lib.evaluate",
    "max_tool_calling_iterations": "multi-turn tool calls in a rollout",
    "cache_implementation": _GENERATE, "use_transformers_paged": _GENERATE,
    "use_transformers_continuous_batching": _GENERATE,
    "transformers_continuous_batching_config": _GENERATE,
    "use_vllm": _VLLM, "vllm_mode": _VLLM, "vllm_model_impl": _VLLM,
    "vllm_enable_sleep_mode": _VLLM, "vllm_structured_outputs_regex": _VLLM,
    "vllm_server_base_url": _VLLM, "vllm_server_host": _VLLM,
    "vllm_server_port": _VLLM, "vllm_server_timeout": _VLLM, "vllm_group_port": _VLLM,
    "vllm_gpu_memory_utilization": _VLLM, "vllm_max_model_length": _VLLM,
    "vllm_tensor_parallel_size": _VLLM,
    "vllm_importance_sampling_cap": "deprecated since TRL 1.6: the old name of "
                                    "vllm_importance_sampling_clip_max",
    # loading, data, memory and logs
    "model_init_kwargs": _LOAD, "trust_remote_code": _LOAD,
    "chat_template_kwargs": "extra arguments to the chat template",
    "shuffle_dataset": "ours draws prompts in a seeded random order",
    "pad_to_multiple_of": "padding of the update's tensors (speed only)",
    "ds3_gather_for_generation": "DeepSpeed ZeRO-3 (chapter 21)",
    "log_completions": _LOG, "log_multimodal": _LOG, "log_unique_prompts": _LOG,
    "num_completions_to_print": _LOG, "log_completions_hub_repo": _LOG,
}
"""TRL's own GRPO fields (not ``transformers.TrainingArguments``') that are neither
mapped nor fixed here -> what they do; :func:`trl_only_fields` finds any TRL adds."""


# ======================================================================================
# The config
# ======================================================================================
def _import_trl():
    try:
        import trl
    except ImportError as err:
        raise ImportError(f"the TRL path needs TRL: pip install trl=={TRL_VERSION} "
                          f"(the book's version)") from err
    return trl


def field_defaults(config_class) -> dict[str, Any]:
    """``{field: default}`` of a dataclass (a factory's value for list fields)."""
    defaults = {}
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
        else:
            defaults[f.name] = None
    return defaults


def _trl_defaults() -> dict[str, Any]:
    """``trl.GRPOConfig``'s field defaults; refuse a TRL without a mapped field."""
    trl = _import_trl()
    defaults = field_defaults(trl.GRPOConfig)
    missing = sorted((set(TRL_FIELDS) | set(FIXED_TRL_SETTINGS)) - set(defaults))
    if missing:
        raise RuntimeError(f"trl {trl.__version__} has no GRPOConfig field {missing}; "
                           f"this bridge was written for TRL {TRL_VERSION}.")
    return defaults


def trl_only_fields() -> dict[str, str]:
    """TRL's GRPO fields (``trl.GRPOConfig``'s own, not those it inherits from
    ``transformers.TrainingArguments``) that the bridge neither maps nor fixes, each
    with :data:`TRL_ONLY`'s note, in its order (by topic); a field TRL added since
    :data:`TRL_VERSION` comes last with ``""``, so the table shows it instead of
    leaving it out."""
    import transformers

    trl = _import_trl()
    inherited = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    handled = set(TRL_FIELDS) | set(FIXED_TRL_SETTINGS)
    theirs = [f.name for f in dataclasses.fields(trl.GRPOConfig)
              if f.name not in inherited and f.name not in handled]
    order = {name: k for k, name in enumerate(TRL_ONLY)}  # by topic; new ones last
    return {name: TRL_ONLY.get(name, "")
            for name in sorted(theirs, key=lambda n: order.get(n, len(order)))}


def _refusals(config: GRPOConfig, overrides: dict, trl_names: set) -> list[str]:
    """One line per setting that TRL would not run the way our config means it."""
    ours = field_defaults(GRPOConfig)
    known = {m.ours for m in TRL_FIELDS.values()}
    known |= set(NO_TRL_EQUIVALENT) | set(NOT_A_TRL_SETTING)
    problems = []
    for name, default in ours.items():
        value = getattr(config, name)
        if value != default and (name in NO_TRL_EQUIVALENT or name not in known):
            why = NO_TRL_EQUIVALENT.get(name, "trl_bridge does not know this knob yet")
            problems.append(f"{name}={value!r}: {why}; set it back to {default!r}.")
    if config.loss_type == "reinforce":
        problems.append("loss_type='reinforce': TRL 1.16 has no REINFORCE loss; use "
                        "'grpo' (or another of its losses).")
    if config.sampling_correction and not overrides.get("use_vllm"):
        problems.append("sampling_correction=True: TRL corrects vLLM rollouts only; "
                        "pass use_vllm=True or set it to False.")
    for name in overrides:
        if name in TRL_FIELDS:
            problems.append(f"override {name}=...: it comes from our config's "
                            f"{TRL_FIELDS[name].ours}; change that instead.")
        elif name not in trl_names:
            close = difflib.get_close_matches(name, sorted(trl_names), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            problems.append(f"override {name!r} is not a trl.GRPOConfig field.{hint}")
    return problems


def _split_over_processes(config: GRPOConfig, n: int) -> dict[str, int]:
    """The batch fields for ``n`` processes: one of our steps stays one generation
    batch of B = prompts x G completions and ``num_mini_batches`` (k) optimizer steps.

    TRL 1.16 splits ``generation_batch_size`` over the processes, each taking
    ``steps_per_generation`` chunks of ``per_device_train_batch_size``; so
    ``per_device = m = min(micro_batch_size, B / (n k))`` and
    ``gradient_accumulation_steps = B / (n m k)``. ``per_step_prompts`` must be a
    multiple of n, so that a reward that reads its group sees all of it.
    """
    prompts, B = config.per_step_prompts, config.batch_size
    if n < 1:
        raise ValueError(f"num_processes must be at least 1, got {n}.")
    if prompts % n:
        raise ValueError(
            f"per_step_prompts={prompts} is not a multiple of the {n} processes: each "
            f"process generates and scores whole groups of G={config.num_generations}."
            f" Use per_step_prompts={-(-prompts // n) * n} (or another multiple).")
    k = config.num_mini_batches
    local = B // n  # completions per process and step
    if local % k:
        raise ValueError(
            f"num_mini_batches={k} does not divide the {local} completions each of "
            f"the {n} processes holds per step.")
    per_update = local // k  # completions per process and optimizer step
    micro = min(config.micro_batch_size or per_update, per_update)
    if per_update % micro:
        raise ValueError(
            f"micro_batch_size={micro} does not divide the {per_update} completions "
            f"each of the {n} processes holds per optimizer step; use a divisor of "
            f"{per_update}.")
    return {"per_device_train_batch_size": micro,
            "gradient_accumulation_steps": per_update // micro}


def to_trl_config(config: GRPOConfig, num_processes: int = 1, **overrides):
    """Our :class:`~grpo_lib.trainer.GRPOConfig` as a ``trl.GRPOConfig``, on the CPU.

    Sets every field of :data:`TRL_FIELDS` from ``config`` (most copy one knob; the
    batch sizes, steps and schedule are computed), then :data:`FIXED_TRL_SETTINGS`
    (float32, no gradient checkpointing, a log line every step,
    ``report_to="none"``), then ``overrides``: any other ``trl.GRPOConfig`` field,
    e.g. ``bf16=True``, ``use_vllm=True``, ``generation_kwargs=...``.

    Raises ``ValueError`` listing, one line each: a changed knob TRL 1.16 has no
    equivalent for (:data:`NO_TRL_EQUIVALENT`), a value it lacks
    (``loss_type="reinforce"``), an override of a field our config sets, an override
    TRL does not know. Knobs in :data:`NOT_A_TRL_SETTING` are left out (they belong
    to the ``trl.GRPOTrainer(...)`` call or to our own logging).

    ``num_processes`` > 1 (a launch by ``accelerate`` on N processes): the batch
    fields are split so that a step is still one generation batch and one optimizer
    step over all processes (:func:`_split_over_processes`), and
    ``ddp_find_unused_parameters`` defaults to False.
    """
    trl = _import_trl()
    config = config.validate()
    trl_names = set(_trl_defaults())
    problems = _refusals(config, overrides, trl_names)
    if problems:
        raise ValueError("to_trl_config: TRL would not run this config as meant:\n  - "
                         + "\n  - ".join(problems))
    values = {name: value for name, (value, _) in FIXED_TRL_SETTINGS.items()}
    values.update({name: m.convert(config) for name, m in TRL_FIELDS.items()})
    if num_processes != 1:
        values.update(_split_over_processes(config, num_processes))
        values["ddp_find_unused_parameters"] = False
    values.update(overrides)
    if "activation_checkpointing" in trl_names:  # newer transformers' name for it
        old = values.pop("gradient_checkpointing")  # (the old name warns)
        values.setdefault("activation_checkpointing", old)
    return trl.GRPOConfig(**values)


# ======================================================================================
# The table
# ======================================================================================
def knob_table(all_settings: bool = False):
    """The mapping as a ``pandas.DataFrame``, one row per (our knob, TRL field).

    Columns: ``ours``, ``our_default``, ``trl``, ``trl_default`` (both read from the
    dataclasses), ``ours_in_trl`` (our default config translated), ``same`` (whether
    that equals TRL's default; ``None`` where one side has no field) and ``note``.
    ``all_settings=True`` adds a ``kind`` column and rows for
    :data:`FIXED_TRL_SETTINGS` ("fixed"), :data:`NO_TRL_EQUIVALENT` ("refused"),
    :data:`NOT_A_TRL_SETTING` ("elsewhere") and TRL's GRPO fields that ours lacks
    (:func:`trl_only_fields`, "TRL only").
    """
    import pandas as pd

    ours, theirs, default = field_defaults(GRPOConfig), _trl_defaults(), GRPOConfig()
    rows = [dict(kind="mapped", ours=m.ours, our_default=ours[m.ours], trl=name,
                 trl_default=theirs[name], ours_in_trl=m.convert(default), note=m.note)
            for name, m in TRL_FIELDS.items()]
    if all_settings:
        rows += [dict(kind="fixed", ours="", our_default=None, trl=name,
                      trl_default=theirs[name], ours_in_trl=value, note=why)
                 for name, (value, why) in FIXED_TRL_SETTINGS.items()]
        for kind, table in (("refused", NO_TRL_EQUIVALENT),
                            ("elsewhere", NOT_A_TRL_SETTING)):
            rows += [dict(kind=kind, ours=name, our_default=ours[name], trl="",
                          trl_default=None, ours_in_trl=None, note=why)
                     for name, why in table.items()]
        rows += [dict(kind="TRL only", ours="", our_default=None, trl=name,
                      trl_default=theirs[name], ours_in_trl=None, note=why)
                 for name, why in trl_only_fields().items()]
    frame = pd.DataFrame(rows)
    frame.insert(6, "same", [r["ours_in_trl"] == r["trl_default"] if r["trl"]
                             and r["ours"] else None for r in rows])
    return frame if all_settings else frame.drop(columns="kind")
