"""grpo_lib.trl_bridge: our rewards and config handed to TRL 1.16's GRPOTrainer.

The facts checked against TRL come from its source: the reward call convention
(trl/trainer/grpo_trainer.py, ``_calculate_rewards``), the log name
(``trl.trainer.utils.get_callable_name``) and the config fields and defaults
(``dataclasses.fields(trl.GRPOConfig)``).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_lib import trl_bridge
from grpo_lib.rewards import (accuracy_reward, countdown_reward, format_reward,
                              language_consistency_reward, length_reward,
                              reward_name)
from grpo_lib.trainer import GRPOConfig
from grpo_lib.trl_bridge import (FIXED_TRL_SETTINGS, NO_TRL_EQUIVALENT,
                                 NOT_A_TRL_SETTING, TRL_FIELDS, TRL_ONLY, knob_table,
                                 to_trl_config, trl_only_fields, trl_reward,
                                 trl_reward_funcs)

trl = pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
    "<think> 3 * 4 = 12 </think> <answer> 12 </answer>",
    "the answer is 14",
    "<think> 三乘四是十二 </think> <answer> (3 * 4) + 2 </answer>",
]
COLUMNS = {"answer": ["14", "14", "14", "14"], "numbers": [[2, 3, 4]] * 4,
           "target": [14] * 4, "language": ["en", "en", "en", "zh"],
           "completion_ids": [[1] * 20, [1] * 12, [1] * 5, [1] * 9]}
PROMPTS = [[{"role": "user", "content": "What is 2 + 3 * 4?"}]] * 4


def as_messages(texts):
    """TRL's conversational completions: one assistant message each."""
    return [[{"role": "assistant", "content": t}] for t in texts]


def trl_call(reward, completions):
    """Call ``reward`` the way TRL 1.16's _calculate_rewards does."""
    return reward(prompts=PROMPTS, completions=completions,
                  completion_ids=COLUMNS["completion_ids"],
                  **{k: v for k, v in COLUMNS.items() if k != "completion_ids"},
                  trainer_state=object(), log_extra=print, log_metric=print)


# ------------------------------------------------------------------------ trl_reward
REWARDS = [accuracy_reward, format_reward, language_consistency_reward,
           countdown_reward, length_reward]


@pytest.mark.parametrize("fn", REWARDS, ids=reward_name)
def test_wrapped_reward_gives_the_raw_numbers(fn):
    raw = fn(TEXTS, num_generations=2, **COLUMNS)
    # our rewards read TRL's message lists themselves (parsing.completion_text)
    assert fn(as_messages(TEXTS), num_generations=2, **COLUMNS) == raw
    wrapped = trl_reward(fn, num_generations=2)
    for completions in (TEXTS, as_messages(TEXTS)):
        scores = trl_call(wrapped, completions)
        assert scores == raw
        assert all(type(s) is float for s in scores)


def test_group_rewards_need_num_generations():
    """TRL does not pass G: length_reward then sees one group of 4, not two of 2."""
    unbound = trl_call(trl_reward(length_reward), TEXTS)
    assert unbound == length_reward(TEXTS, **COLUMNS)
    assert unbound != length_reward(TEXTS, num_generations=2, **COLUMNS)


def test_wrapper_drops_what_the_function_does_not_take():
    seen = {}

    def strict(completions, answer):  # no **kwargs: TRL's extras would break it
        seen["answer"] = answer
        return [float(c.strip().endswith("</answer>")) for c in completions]

    assert trl_call(trl_reward(strict), as_messages(TEXTS)) == [1.0, 1.0, 0.0, 1.0]
    assert seen["answer"] == COLUMNS["answer"]


def test_wrapper_passes_what_our_trainer_passes():
    """``**kwargs`` gets the columns, ``prompt`` and G, not TRL's own extras."""
    seen = {}

    def spy(completions, **kwargs):
        seen.update(kwargs, completions=completions)
        return [0.0] * len(completions)

    trl_call(trl_reward(spy, num_generations=2), as_messages(TEXTS))
    assert seen.pop("completions") == TEXTS
    assert set(seen) == {"prompt", "answer", "numbers", "target", "language",
                         "completion_ids", "num_generations"}
    assert seen["prompt"] == PROMPTS and seen["num_generations"] == 2

    def curriculum(completions, trainer_state, **kwargs):  # names a TRL extra
        seen["state"] = trainer_state
        return [0.0] * len(completions)

    trl_call(trl_reward(curriculum), TEXTS)
    assert seen["state"] is not None


def test_wrapper_keeps_the_name_for_trls_logs():
    from trl.trainer.utils import get_callable_name

    assert get_callable_name(trl_reward(accuracy_reward)) == "accuracy_reward"
    assert get_callable_name(trl_reward(accuracy_reward, "acc")) == "acc"


def test_missing_scores_become_zero_or_none():
    def patchy(completions, **kwargs):
        return [None, math.nan, math.inf, 1]

    assert trl_call(trl_reward(patchy), TEXTS) == [0.0, 0.0, 0.0, 1.0]
    assert trl_call(trl_reward(patchy, missing=None), TEXTS) == [None, None, None, 1.0]


def test_wrong_number_of_scores_names_the_function():
    with pytest.raises(ValueError, match="short returned 1 scores for 4"):
        trl_call(trl_reward(lambda completions, **kw: [1.0], "short"), TEXTS)


def test_trl_reward_funcs_follow_the_config():
    config = GRPOConfig(num_generations=2,
                        reward_funcs=["format_reward", "format_reward",
                                      {"name": "length_reward", "strict": False}])
    funcs = trl_reward_funcs(config)
    assert [f.__name__ for f in funcs] == ["format_reward", "format_reward#2",
                                           "length_reward(strict=False)"]
    expected = length_reward(TEXTS, strict=False, num_generations=2, **COLUMNS)
    assert trl_call(funcs[2], TEXTS) == expected


# --------------------------------------------------------------------- the mapping
def test_every_knob_of_ours_has_exactly_one_place():
    ours = [f.name for f in dataclasses.fields(GRPOConfig)]
    mapped = {m.ours for m in TRL_FIELDS.values()}
    for name in ours:
        places = [name in mapped, name in NO_TRL_EQUIVALENT, name in NOT_A_TRL_SETTING]
        assert sum(places) == 1, f"{name}: in {sum(places)} of the bridge's tables"
    assert mapped | set(NO_TRL_EQUIVALENT) | set(NOT_A_TRL_SETTING) == set(ours)
    theirs = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert set(TRL_FIELDS) | set(trl_bridge.FIXED_TRL_SETTINGS) <= theirs


def test_to_trl_config_maps_the_values(tmp_path):
    config = GRPOConfig(
        output_dir=str(tmp_path), per_step_prompts=8, num_generations=4,
        micro_batch_size=8, max_completion_length=32, temperature=0.7, top_p=0.9,
        loss_type="dr_grpo", scale_rewards="none", beta=0.04, epsilon=0.2,
        epsilon_high=0.28, num_iterations=2, mask_truncated_completions=True,
        multi_objective_aggregation="normalize_then_sum", reward_weights=[1, 0.1],
        learning_rate=3e-4, lr_scheduler_type="cosine", warmup_steps=0.1,
        weight_decay=0.01, max_grad_norm=0.5, max_steps=10, seed=3, save_every=5,
        use_bias_correction_kl=False, progress_bar=False,
        rollout_engine="fast", eval_every=5, sample_every=0)  # not TRL settings
    args = to_trl_config(config)
    expected = dict(
        output_dir=str(tmp_path), num_generations=4, max_completion_length=32,
        temperature=0.7, top_p=0.9, loss_type="dr_grpo", scale_rewards="none",
        beta=0.04, epsilon=0.2, epsilon_high=0.28, num_iterations=2,
        mask_truncated_completions=True, reward_weights=[1.0, 0.1],
        multi_objective_aggregation="normalize_then_sum", learning_rate=3e-4,
        lr_scheduler_type="cosine", warmup_steps=0.1, weight_decay=0.01,
        max_grad_norm=0.5, seed=3, use_bias_correction_kl=False, disable_tqdm=True,
        # 8 prompts x 4 = 32 completions in micro-batches of 8: one optimizer step
        # per rollout with 4 accumulated micro-batches; μ = 2 doubles the steps
        generation_batch_size=32, per_device_train_batch_size=8,
        gradient_accumulation_steps=4, steps_per_generation=4, max_steps=20,
        save_strategy="steps", save_steps=10,
        # fixed: the CPU, float32, no recomputation, a log line every step
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        logging_steps=1, remove_unused_columns=False,
    )
    for name, value in expected.items():
        assert getattr(args, name) == value, name
    assert args.report_to in ("none", [], ["none"])


def test_schedule_and_checkpoint_translations(tmp_path):
    base = GRPOConfig(output_dir=str(tmp_path), max_steps=7)
    assert to_trl_config(base).lr_scheduler_type == "constant"
    assert to_trl_config(base).save_strategy == "no"
    warm = to_trl_config(replace(base, warmup_steps=3))
    assert warm.lr_scheduler_type == "constant_with_warmup"  # "constant": no warm-up
    final = to_trl_config(replace(base, save_final=True))
    assert (final.save_strategy, final.save_steps) == ("steps", 7)


def test_overrides_reach_trl(tmp_path):
    config = GRPOConfig(output_dir=str(tmp_path))
    args = to_trl_config(config, generation_kwargs={"min_new_tokens": 4},
                         gradient_checkpointing=True)
    assert args.generation_kwargs == {"min_new_tokens": 4}
    assert args.gradient_checkpointing is True


@pytest.mark.parametrize("change,message", [
    (dict(ignore_eos=True), "ignore_eos=True: TRL cannot sample past EOS"),
    (dict(dynamic_sampling=True), "dynamic_sampling=True: TRL 1.16 has no"),
    (dict(resume_from_checkpoint="latest"), "not TRL checkpoints"),
    (dict(loss_type="reinforce"), "no REINFORCE loss"),
    (dict(sampling_correction=True, rollout_engine="fast"), "vLLM rollouts only"),
])
def test_refuses_what_trl_cannot_do(change, message):
    with pytest.raises(ValueError, match=message):
        to_trl_config(replace(GRPOConfig(), **change))


def test_refuses_overrides_that_would_disagree_with_our_config():
    with pytest.raises(ValueError, match="comes from our config's learning_rate"):
        to_trl_config(GRPOConfig(), learning_rate=1e-6)
    with pytest.raises(ValueError, match="Did you mean 'use_vllm'"):
        to_trl_config(GRPOConfig(), use_vlm=True)


# ----------------------------------------------------------------------- the table
def test_knob_table_reads_both_dataclasses():
    ours = GRPOConfig()
    theirs = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    table = knob_table()
    assert list(zip(table.ours, table.trl)) == [(m.ours, name)
                                                for name, m in TRL_FIELDS.items()]
    for row in table.itertuples():
        assert row.our_default == getattr(ours, row.ours), row.ours
        assert row.trl_default == theirs[row.trl].default, row.trl
        assert row.ours_in_trl == TRL_FIELDS[row.trl].convert(ours), row.trl
        assert row.same == (row.ours_in_trl == row.trl_default)
    rows = table.set_index("trl")
    pinned = {  # (ours, TRL 1.16's default, same?), written out by hand
        "loss_type": ("grpo", "dapo", False), "learning_rate": (5e-4, 1e-6, False),
        "num_generations": (8, 8, True), "epsilon": (0.2, 0.2, True)}
    for trl_name, want in pinned.items():
        row = rows.loc[trl_name]
        assert (row.ours_in_trl, row.trl_default, row.same) == want, trl_name
    # the notes quote TRL's defaults; they must be the ones its dataclass holds
    assert f"'{rows.trl_default['loss_type']}'" in rows.note["loss_type"]
    for trl_name, prefix in [("learning_rate", "TRL: "),
                             ("max_completion_length", "TRL: "),
                             ("seed", "transformers: ")]:
        quoted = rows.note[trl_name].split(prefix)[1].split()[0].rstrip(";,")
        assert float(quoted) == rows.trl_default[trl_name], trl_name
    assert not rows.same["loss_type"] and rows.same["beta"]


def test_knob_table_with_all_settings_lists_every_knob_of_ours():
    table = knob_table(all_settings=True)
    ours = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(table.ours) - {""} == ours
    assert set(table.kind) == {"mapped", "fixed", "refused", "elsewhere", "TRL only"}
    fixed = table[table.kind == "fixed"].set_index("trl")
    assert fixed.ours_in_trl["bf16"] is False


def test_every_grpo_field_of_trls_has_a_place():
    import transformers
    import trl

    inherited = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    theirs = {f.name for f in dataclasses.fields(trl.GRPOConfig)} - inherited
    only = trl_only_fields()
    assert not set(TRL_ONLY) & (set(TRL_FIELDS) | set(FIXED_TRL_SETTINGS)), \
        "a field is both handled by the bridge and listed as TRL only"
    unexplained = sorted(name for name, note in only.items() if not note)
    assert not unexplained, f"TRL GRPO fields without a note in TRL_ONLY: {unexplained}"
    assert set(TRL_ONLY) <= theirs, "TRL_ONLY names a field TRL does not have"
    table = knob_table(all_settings=True)
    assert set(table[table.kind == "TRL only"].trl) == set(only)


# ---------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_trl_trains_two_steps_with_our_config_and_rewards(tmp_path):
    """TRL's GRPOTrainer, built from to_trl_config and our wrapped rewards, runs two
    steps on the committed tiny model and logs our reward names (about 8 s)."""
    from datasets import Dataset
    from trainer_fixtures import ROWS

    from grpo_lib.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ROOT / "data/models/tiny-qwen2-base")
    config = GRPOConfig(per_step_prompts=2, num_generations=2, max_steps=2,
                        max_completion_length=16, learning_rate=1e-4,
                        output_dir=str(tmp_path), progress_bar=False)
    seen = []

    def digit_share(completions, **kwargs):
        seen.append((completions, kwargs))
        return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]

    rewards = [*trl_reward_funcs(config), trl_reward(digit_share, num_generations=2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer,
                                  reward_funcs=rewards, args=to_trl_config(config),
                                  train_dataset=Dataset.from_list(ROWS))
        trainer.train()
    assert trainer.state.global_step == 2
    logged = trainer.state.log_history[0]
    for name in ("accuracy_reward", "format_reward", "digit_share"):
        assert f"rewards/{name}/mean" in logged, sorted(logged)
    completions, kwargs = seen[0]
    assert len(completions) == 4 and all(isinstance(c, str) for c in completions)
    assert kwargs["num_generations"] == 2 and "trainer_state" not in kwargs
    assert {"prompt", "question", "answer", "completion_ids"} <= set(kwargs)


@pytest.mark.parametrize("prompts, G, micro, n, per_device, accumulation", [
    (16, 8, 64, 2, 64, 1),   # chapter 7's config on 2 processes
    (16, 8, 32, 2, 32, 2),
    (16, 8, 64, 4, 32, 1),   # micro-batch capped at a process's share
    (4, 4, None, 2, 8, 1),   # None: each process's share in one pass
])
def test_batch_split_over_processes(tmp_path, monkeypatch, prompts, G, micro, n,
                                    per_device, accumulation):
    """One of our steps stays one generation batch (B = prompts x G over all
    processes) and one optimizer step; TRL's world size is patched (a real one
    needs a launch: tests/test_scale_out.py)."""
    monkeypatch.setattr(trl.GRPOConfig, "world_size", property(lambda self: n))
    config = GRPOConfig(per_step_prompts=prompts, num_generations=G,
                        micro_batch_size=micro, output_dir=str(tmp_path))
    c = to_trl_config(config, num_processes=n)
    assert c.generation_batch_size == prompts * G
    assert (c.per_device_train_batch_size, c.gradient_accumulation_steps) == (
        per_device, accumulation)
    assert c.steps_per_generation == accumulation  # one update per generation batch
    assert c.ddp_find_unused_parameters is False


@pytest.mark.parametrize("k, micro, n, per_device, accumulation", [
    (2, 8, 1, 8, 2),      # 32 completions, 2 updates of 16, micro-batches of 8
    (4, None, 1, 8, 1),   # None: a whole mini-batch per pass
    (2, 8, 2, 8, 1),      # each process: 16 completions, 2 updates of 8
])
def test_mini_batches_become_steps_per_generation(tmp_path, monkeypatch, k, micro, n,
                                                  per_device, accumulation):
    """num_mini_batches = k: TRL takes steps_per_generation = k x
    gradient_accumulation_steps micro-batches from one generation batch, so it makes
    k optimizer steps of it, and counts them."""
    monkeypatch.setattr(trl.GRPOConfig, "world_size", property(lambda self: n))
    config = GRPOConfig(per_step_prompts=8, num_generations=4, micro_batch_size=micro,
                        num_mini_batches=k, num_iterations=2, max_steps=5,
                        output_dir=str(tmp_path))
    c = to_trl_config(config, num_processes=n)
    assert c.generation_batch_size == 32
    assert (c.per_device_train_batch_size, c.gradient_accumulation_steps) == (
        per_device, accumulation)
    assert c.steps_per_generation == k * accumulation
    assert c.max_steps == 5 * 2 * k  # TRL counts every optimizer step


def test_batch_split_refuses_groups_cut_between_processes(tmp_path):
    config = GRPOConfig(per_step_prompts=6, num_generations=4, output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="per_step_prompts=8"):
        to_trl_config(config, num_processes=4)
    with pytest.raises(ValueError, match="at least 1"):
        to_trl_config(config, num_processes=0)
