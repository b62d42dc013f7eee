"""grpo_lib.trainer: real short runs on a micro Qwen2 (no mocks), CleanRL style.

The reward in most tests is the share of digit characters in the completion: a random
model emits some digits, so groups have reward variance and GRPO has something to learn.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.rewards import accuracy_reward, format_reward
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss
from grpo_lib.trainer import (
    METRIC_COLUMNS,
    GRPOConfig,
    GRPOTrainer,
    _length_gap_in_group,
    _masked_mean,
    load_config,
    mini_batch_order,
    mini_batches,
)
from grpo_lib.training_loop import lr_multiplier as _lr_multiplier

REPO = Path(__file__).resolve().parents[1]

ROWS = [
    {
        "question": q,
        "answer": a,
        "prompt": [{"role": "user", "content": f"What is {q}?"}],
    }
    for q, a in [
        ("2 + 3", "5"),
        ("4 * 2", "8"),
        ("7 - 1", "6"),
        ("3 + 3 * 2", "9"),
        ("6 - 2", "4"),
        ("1 + 8", "9"),
    ]
]


def digit_share(completions, **kwargs):
    """Share of digit characters in each completion (0 for an empty one)."""
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _config(tmp_path, **overrides) -> GRPOConfig:
    values = dict(
        output_dir=str(tmp_path / "run"),
        per_step_prompts=2,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        learning_rate=3e-2,
        progress_bar=False,
        sample_every=0,
        seed=0,
    )
    values.update(overrides)
    return GRPOConfig(**values)


def _shuffle(seed: int, step: int, rows: int = 8) -> np.ndarray:
    """The permutation shuffle_mini_batches must draw: numpy's generator on the
    (seed, step) seed sequence with spawn key 1, a stream apart from the rollouts'."""
    stream = np.random.SeedSequence([seed, step], spawn_key=(1,))
    return np.random.default_rng(stream).permutation(rows)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


# ------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_generations=1), "G must be an integer >= 2"),
        (
            dict(per_step_prompts=3, num_generations=4, micro_batch_size=5),
            r"does not divide the batch .* = 12; pick one of \[1, 2, 3, 4, 6, 12\]",
        ),
        (dict(epsilon=0.0), "epsilon > 0"),
        (dict(loss_type="ppo"), "loss_type='ppo' is unknown"),
        (dict(loss_type="reinforce", num_iterations=2), "set num_iterations=1"),
        (dict(loss_type="reinforce", num_mini_batches=2), "and num_mini_batches=1"),
        (dict(num_mini_batches=3), r"does not divide per_step_prompts=16: each "
                                   r"mini-batch holds whole groups; pick one of \["),
        (dict(per_step_prompts=4, num_generations=4, micro_batch_size=16,
              num_mini_batches=2), "mini-batches of 8 completions, not a multiple "
                                   "of micro_batch_size=16"),
        (dict(num_mini_batches=0), "num_mini_batches=0: an integer >= 1"),
        (dict(num_mini_batches=2, shuffle_mini_batches=True, share_group_prompt=True),
         "share_group_prompt .one prompt row per group. cannot apply"),
        (dict(loss_type="cispo"), "TRL's docs and ScaleRL use 5.0"),
        (dict(importance_sampling_level="seq"), "'token' .* or 'sequence'"),
        (dict(entropy_coef=-0.1), "entropy_coef=-0.1: must be >= 0"),
        (dict(use_adaptive_entropy=True, entropy_coef_delta=0.0),
         "entropy_coef_delta=0 with use_adaptive_entropy"),
        (dict(use_adaptive_entropy=True, entropy_coef_min=0.2, entropy_coef_max=0.1),
         "entropy_coef_min=0.2 is above entropy_coef_max=0.1"),
        (dict(scale_rewards="std"), "scale_rewards='std'"),
        (dict(multi_objective_aggregation="mean"), "choose one of .*normalize_then_sum"),
        (dict(reward_weights=[1.0]), "give one weight per function"),
        (dict(temperature=0.0), "temperature > 0"),
        (dict(lr_scheduler_type="step"), "lr_scheduler_type='step'"),
        (dict(warmup_steps=2.5), "give a whole number of updates"),
        (dict(seed=-1), r"seed=-1: must be an integer from 0 to 2\*\*32 - 1"),
        (dict(seed=2**32), "seed=4294967296: must be an integer from 0"),
        (dict(seed=1.5), "seed=1.5: must be an integer"),
        (dict(epsilon=1.0), "needs epsilon < 1"),
        (dict(generation_batch_size=0), "generation_batch_size=0: must be an integer"),
        (dict(eval_batch_size=0), r"eval_batch_size=0: must be an integer >= 1\."),
        (dict(dynamic_sampling_max_rounds=1.5), "dynamic_sampling_max_rounds=1.5"),
        (dict(ignore_eos=True, mask_truncated_completions=True),
         "would leave no token to train on"),
    ],
)
def test_validate_says_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**overrides).validate()


def test_every_field_has_a_docstring():
    import ast
    import inspect

    from grpo_lib import trainer

    tree = ast.parse(inspect.getsource(trainer.GRPOConfig))
    body = tree.body[0].body
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(nxt, ast.Expr)
        and isinstance(nxt.value, ast.Constant)
        and isinstance(nxt.value.value, str)
    }
    fields = {f.name for f in __import__("dataclasses").fields(GRPOConfig)}
    assert fields - documented == set()


def test_load_config_overrides_and_unknown_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("num_generations: 4\nloss_type: dapo\nreward_weights: [1.0, 0.1]\n")
    config = load_config(
        path, ["max_steps=7", "beta=0.04", "epsilon_high=0.28", "learning_rate=1e-3"]
    )
    assert config.learning_rate == 0.001  # YAML 1.1 reads 1e-3 as text; coerced
    assert (config.num_generations, config.loss_type, config.max_steps) == (
        4,
        "dapo",
        7,
    )
    assert (config.beta, config.epsilon_high, config.reward_weights) == (
        0.04,
        0.28,
        [1.0, 0.1],
    )
    with pytest.raises(ValueError, match="did you mean 'num_generations'"):
        load_config(path, ["num_generation=4"])
    with pytest.raises(ValueError, match="beta='a lot': expected float"):
        load_config(path, ["beta=a lot"])
    # None for a field that may be None; whole numbers only for integers; advice
    # that fits the field's type
    config = load_config(path, ["micro_batch_size=None", "dynamic_sampling_metric=null",
                                "resume_from_checkpoint=None", "max_steps=1e2"])
    assert (config.micro_batch_size, config.dynamic_sampling_metric,
            config.resume_from_checkpoint, config.max_steps) == (None, None, None, 100)
    with pytest.raises(ValueError, match="Write a whole number"):
        load_config(path, ["max_steps=25e-1"])
    with pytest.raises(ValueError, match=r"Write a YAML list, e\.g\. reward_funcs=\["):
        load_config(path, ["reward_funcs=accuracy_reward"])
    with pytest.raises(ValueError, match="Write true or false"):
        load_config(path, ["ignore_eos=enabled"])


def test_load_config_with_reward_callables(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("reward_funcs: [accuracy_reward, format_reward]\n"
                    "reward_weights: [1.0, 0.1]\n")

    def longer(completions, **kwargs):
        return [0.0] * len(completions)

    # three callables, three weights: the file's two names must not reject this
    config = load_config(path, ["reward_weights=[0.1, 1.0, 0.0]"],
                         reward_funcs=[format_reward, longer, accuracy_reward])
    assert config.reward_funcs == ["format_reward", "longer", "accuracy_reward"]
    assert config.reward_weights == [0.1, 1.0, 0.0]
    # ... while a weight count that matches neither is still an error
    with pytest.raises(ValueError, match="reward_weights has 2 entries for 3"):
        load_config(path, [], reward_funcs=[format_reward, longer, accuracy_reward])
    with pytest.raises(ValueError, match="takes the reward callables"):
        load_config(path, [], reward_funcs=["format_reward"])


def test_lr_schedule_by_hand():
    # 10 updates, 2 of warm-up: 0.5, 1.0, then linear decay over the 8 remaining
    assert [_lr_multiplier(u, 10, 2, "linear") for u in (0, 1, 2, 6)] == [
        0.5,
        1.0,
        1.0,
        0.5,
    ]
    assert _lr_multiplier(6, 10, 2, "cosine") == pytest.approx(0.5)
    assert _lr_multiplier(9, 10, 0, "constant") == 1.0


# ------------------------------------------------------------------------ real runs
def test_short_run_learns_and_logs(tokenizer, tmp_path):
    model = random_model(tokenizer, size="micro", seed=0)
    config = _config(
        tmp_path, max_steps=12, sample_every=6, per_step_prompts=4, micro_batch_size=8
    )
    trainer = GRPOTrainer(model, tokenizer, [digit_share], config, ROWS)
    metrics = trainer.train()
    assert list(metrics.columns) == METRIC_COLUMNS + ["reward/digit_share"]
    assert len(metrics) == 12 and metrics["step"].tolist() == list(range(1, 13))
    on_disk = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert on_disk["reward"].tolist() == pytest.approx(metrics["reward"].tolist())
    # the policy moves toward digits: the last 3 steps beat the first 3 clearly
    first, last = metrics["reward"][:3].mean(), metrics["reward"][-3:].mean()
    assert last > first + 0.1, (first, last)
    assert (metrics["grad_norm"][1:] > 0).all() and metrics["loss"].abs().max() < 1e-5
    assert metrics["kl"].isna().all()  # beta = 0: no reference model
    assert trainer.ref_model is None
    # a random model answers nothing right: every completion counts as wrong
    assert (metrics["accuracy"] == 0).all() and metrics["length_correct"].isna().all()
    assert metrics["length_gap_in_group"].isna().all()  # no group is mixed
    assert metrics["length_wrong"].tolist() == pytest.approx(
        metrics["completion_length"].tolist()
    )
    samples = [
        json.loads(x)
        for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    ]
    assert {s["step"] for s in samples} == {6, 12} and len(samples) == 2 * 16


def short_share(completions, **kwargs):
    """1.0 for a completion of at most 4 characters, else 0.0."""
    return [float(len(t) <= 4) for t in completions]


def test_multi_objective_aggregation_sums_or_decouples(tokenizer, tmp_path):
    from grpo_lib.advantages import decoupled_advantages, group_advantages

    model = random_model(tokenizer, size="micro", seed=0)
    # [B=8, K=2]: a 0/1 reward and a small 0/0.3 one, two groups of G=4
    rewards = torch.tensor(
        [[1, 0], [0, 0.3], [0, 0], [0, 0.3], [0, 0.3], [0, 0], [0, 0], [0, 0]],
        dtype=torch.float64,
    )
    funcs = [digit_share, short_share]
    for how in ["sum_then_normalize", "normalize_then_sum"]:
        cfg = _config(tmp_path, reward_weights=[1.0, 0.5],
                      multi_objective_aggregation=how)
        got = GRPOTrainer(model, tokenizer, funcs, cfg, ROWS).advantages(rewards)
        if how == "sum_then_normalize":
            total = rewards[:, 0] + 0.5 * rewards[:, 1]
            want = group_advantages(total, 4, scale="group")
        else:
            want = decoupled_advantages(rewards, [1.0, 0.5], 4)
        assert got.tolist() == pytest.approx(want.tolist())
    # the two disagree: with decoupling the small reward weighs as much as its weight
    # says, whatever its scale
    summed = group_advantages(rewards[:, 0] + 0.5 * rewards[:, 1], 4, scale="group")
    assert not torch.allclose(summed.float(), got.float())
    # and a short GDPO run trains like any other
    cfg = _config(tmp_path, max_steps=2, multi_objective_aggregation="normalize_then_sum")
    metrics = GRPOTrainer(model, tokenizer, funcs, cfg, ROWS).train()
    assert len(metrics) == 2 and metrics["grad_norm"].notna().all()


def test_length_of_right_and_wrong_completions():
    lengths = torch.tensor([4.0, 10.0, 6.0, 20.0])
    correct = [True, False, True, False]
    assert _masked_mean(lengths, correct, True) == 5.0
    assert _masked_mean(lengths, correct, False) == 15.0
    assert math.isnan(_masked_mean(lengths, [True] * 4, False))
    # groups of 2: (right 4, wrong 10) -> +6; (right 6, wrong 20) -> +14; mean +10
    assert _length_gap_in_group(lengths, correct, 2) == 10.0
    # a group with no wrong answer is left out; none mixed -> NaN
    assert _length_gap_in_group(lengths, [True, True, False, True], 2) == -14.0
    assert math.isnan(_length_gap_in_group(lengths, [True] * 4, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("engine", ["fast", "transformers", "scratch"])  # fast: default
def test_training_steps_run_on_cuda(tokenizer, tmp_path, engine):
    """Rollouts live on the GPU while rewards and correctness are scored on the CPU;
    every metric mixes the two (the within-group length gap once crashed there)."""
    model = random_model(tokenizer, size="tiny", seed=0).to("cuda")
    cfg = _config(tmp_path, max_steps=2, rollout_engine=engine)
    metrics = GRPOTrainer(model, tokenizer, None, cfg, ROWS).train()
    assert len(metrics) == 2 and metrics["grad_norm"].notna().all()
    assert next(model.parameters()).device.type == "cuda"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_synced_reference_resumes_on_cuda(tokenizer, tmp_path):
    """The moved reference is saved from the GPU and read back onto it on resume;
    the resumed step 3 lands where the uninterrupted run's did (CUDA kernels may
    round differently between runs, so close rather than bit-equal)."""
    config = dict(max_steps=3, save_every=2, beta=0.04, sync_ref_model=True,
                  ref_model_sync_steps=1, ref_model_mixup_alpha=0.6)
    model_a = random_model(tokenizer, size="tiny", seed=0).to("cuda")
    full = GRPOTrainer(model_a, tokenizer, [digit_share],
                       _config(tmp_path, **config), ROWS)
    full.train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    model_b = random_model(tokenizer, size="tiny", seed=0).to("cuda")
    resumed = GRPOTrainer(model_b, tokenizer, [digit_share], _config(
        tmp_path, resume_from_checkpoint=str(checkpoint), **config), ROWS)
    resumed.train()
    assert resumed.step == 3
    assert next(resumed.ref_model.parameters()).device.type == "cuda"
    assert torch.allclose(_params(model_b), _params(model_a), atol=1e-4)
    assert torch.allclose(_params(resumed.ref_model), _params(full.ref_model),
                          atol=1e-4)
    assert not torch.allclose(_params(resumed.ref_model), _params(
        random_model(tokenizer, size="tiny", seed=0)).to("cuda"))


def test_metrics_rows_follow_an_existing_header(tokenizer, tmp_path):
    # a metrics.csv written by an older version (fewer columns), then more steps:
    # the new rows must line up with the file's header, not with today's columns
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,reward,accuracy\n0,0.5,0.25\n")
    trainer = GRPOTrainer(
        random_model(tokenizer, size="micro", seed=0),
        tokenizer,
        [digit_share],
        _config(tmp_path, max_steps=1),
        ROWS,
    )
    trainer._write_metrics_row({"step": 1, "reward": 0.75, "accuracy": 0.5,
                                "length_wrong": 3.0})
    on_disk = pd.read_csv(run / "metrics.csv")
    assert list(on_disk.columns) == ["step", "reward", "accuracy"]
    assert on_disk.iloc[-1].tolist() == [1, 0.75, 0.5]


def test_mu_and_beta_use_old_and_reference_logprobs(tokenizer, tmp_path):
    model = random_model(tokenizer, size="micro", seed=0)
    config = _config(
        tmp_path,
        num_iterations=2,
        beta=0.04,
        loss_type="dapo",
        epsilon_high=0.28,
        max_steps=2,
    )
    trainer = GRPOTrainer(model, tokenizer, [digit_share], config, ROWS)
    metrics = trainer.train()
    assert trainer.ref_model is not None and trainer.ref_model is not model
    # step 1's first pass is on the reference itself (kl 0), its second pass is not
    assert 0 < metrics["kl"][0] < metrics["kl"][1]
    assert metrics["loss"].notna().all() and (metrics["skipped_updates"] == 0).all()
    # two optimizer updates per step
    assert trainer.scheduler.last_epoch == 4


def test_mini_batches_split_a_pass_in_order():
    chunks = [slice(4 * j, 4 * j + 4) for j in range(4)]
    assert mini_batches(chunks, 1) == [chunks]
    assert mini_batches(chunks, 2) == [chunks[:2], chunks[2:]]
    with pytest.raises(ValueError, match="do not split into num_mini_batches=3"):
        mini_batches(chunks, 3)


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_mini_batches_are_updates_in_turn_from_the_old_policy(tokenizer, tmp_path,
                                                              shuffle):
    """num_mini_batches=2: one step is two AdamW updates, one per group, in order
    (or, shuffled, one per half of the rows in the order that numpy's generator
    seeded with (seed, step) permutes them), each ratio taken against the policy that
    sampled the batch (the old log-probs from before the first update), each token
    sum divided by its own update's tokens (dapo). Done again by hand with the
    library's pieces: the same weights."""
    def characters(completions, **kwargs):  # varies in every group of a random model
        return [len(t) / 100 for t in completions]

    model = random_model(tokenizer, size="micro", seed=0)
    start = copy.deepcopy(model)
    config = _config(tmp_path, num_mini_batches=2, max_steps=1, loss_type="dapo",
                     epsilon_high=0.28, max_grad_norm=0.1,  # a group per micro-batch
                     shuffle_mini_batches=shuffle)
    trainer = GRPOTrainer(model, tokenizer, [characters], config, ROWS)
    metrics = trainer.train()
    assert trainer.scheduler.last_epoch == 2  # two updates in one step
    rollout, _, _, adv = trainer._last_batch  # as sampled: groups in order
    order = (torch.as_tensor(_shuffle(0, 0)) if shuffle
             else torch.arange(8))  # the rows in the order the update takes them
    halves = (order[:4], order[4:])
    if shuffle:  # the permutation mixes the two groups
        assert sorted(halves[0].tolist()) not in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert all((adv[rows] != 0).any() for rows in halves)  # both updates learn

    def logp(rows):
        return sequence_logprobs(start, rollout.prompt_ids[rows],
                                 rollout.prompt_mask[rows], rollout.completion_ids[rows],
                                 rollout.completion_mask[rows].float())

    def by_hand(off_policy, halves=halves):
        losses = []
        optimizer = torch.optim.AdamW(start.parameters(), lr=config.learning_rate,
                                      weight_decay=config.weight_decay)
        with torch.no_grad():
            old = [logp(rows) for rows in halves]  # 2 x [4, C]
        for j, rows in enumerate(halves):  # the first half, then the second
            optimizer.zero_grad()
            mask = rollout.completion_mask[rows].float()
            loss, _ = policy_loss(logp(rows), old[j] if off_policy else None,
                                  adv[rows], mask, loss_type="dapo", epsilon_high=0.28,
                                  num_items_in_batch=mask.sum())
            loss.backward()
            losses.append(loss.item())
            torch.nn.utils.clip_grad_norm_(start.parameters(), 0.1)
            optimizer.step()
        return _params(start), sum(losses) / len(losses)

    params, mean_loss = by_hand(off_policy=True)
    assert torch.equal(params, _params(model))
    assert metrics["loss"].iloc[0] == pytest.approx(mean_loss, rel=1e-6)
    start.load_state_dict(copy.deepcopy(random_model(tokenizer, size="micro",
                                                     seed=0).state_dict()))
    # the second update's ratio is not 1: taken against the current policy instead,
    # the same updates by hand end elsewhere; and so does the other order of rows
    assert not torch.equal(by_hand(off_policy=False)[0], _params(model))
    reset = random_model(tokenizer, size="micro", seed=0).state_dict()
    start.load_state_dict(copy.deepcopy(reset))
    other = (torch.arange(4), torch.arange(4, 8)) if shuffle else (
        torch.as_tensor(_shuffle(0, 0)).split(4))
    assert not torch.equal(by_hand(off_policy=True, halves=other)[0], _params(model))


def test_mini_batch_order_shuffles_rows_per_step_only_when_asked(tokenizer, tmp_path):
    """The rows and their advantages move together, by one permutation per (seed,
    step); with one mini-batch, or shuffling off, the batch stays as sampled."""
    model = random_model(tokenizer, size="micro", seed=0)
    trainer = GRPOTrainer(model, tokenizer, [digit_share],
                          _config(tmp_path, max_steps=1), ROWS)
    trainer.train()
    rollout, _, _, adv = trainer._last_batch
    for knobs in (dict(num_mini_batches=2), dict(shuffle_mini_batches=True)):
        same = mini_batch_order(_config(tmp_path, **knobs), 0, rollout, adv)
        assert same[0] is rollout and same[1] is adv
    shuffled = _config(tmp_path, num_mini_batches=2, shuffle_mini_batches=True)
    orders = []
    for step in (0, 1):
        moved, moved_adv = mini_batch_order(shuffled, step, rollout, adv)
        rows = torch.as_tensor(_shuffle(0, step))
        for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                     "finished"):
            assert torch.equal(getattr(moved, name), getattr(rollout, name)[rows])
        assert torch.equal(moved_adv, adv[rows])
        assert moved.texts == [rollout.texts[i] for i in rows]
        assert moved.prompts == [rollout.prompts[i] for i in rows]
        assert rollout.sampler_logprobs is not None  # the fast engine's, reordered too
        assert torch.equal(moved.sampler_logprobs, rollout.sampler_logprobs[rows])
        orders.append(rows.tolist())
        again = mini_batch_order(shuffled, step, rollout, adv)[1]
        assert torch.equal(again, moved_adv)  # the same step shuffles the same way
    assert orders[0] != orders[1] and sorted(orders[0]) == list(range(8))


@pytest.mark.parametrize("settings", [
    dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    dict(loss_type="cispo", epsilon_high=1.05),
])
def test_gspo_and_cispo_train_off_policy(tokenizer, tmp_path, settings):
    # mu = 2: the second pass is off-policy, so GSPO's sequence clip and CISPO's cap
    # act on real ratios; both runs must update, and the clip or cap must bind somewhere.
    model = random_model(tokenizer, size="micro", seed=0)
    before = _params(model)
    config = _config(tmp_path, num_iterations=2, max_steps=2, **settings)
    metrics = GRPOTrainer(model, tokenizer, [digit_share], config, ROWS).train()
    assert metrics["loss"].notna().all() and (metrics["skipped_updates"] == 0).all()
    assert not torch.equal(_params(model), before)
    assert (metrics["clip_frac_high"] + metrics["clip_frac_low"]).max() > 0


def test_entropy_coef_changes_the_update(tokenizer, tmp_path):
    # same seed, same samples: the bonus must change the parameters after one step
    params = []
    for coef in (0.0, 0.5):
        model = random_model(tokenizer, size="micro", seed=0)
        config = _config(tmp_path / str(coef), max_steps=1, entropy_coef=coef)
        metrics = GRPOTrainer(model, tokenizer, [digit_share], config, ROWS).train()
        assert metrics["loss"].notna().all()
        params.append(_params(model))
    assert not torch.equal(params[0], params[1])


def test_adaptive_entropy_moves_the_coefficient_each_optimizer_step(tokenizer,
                                                                   tmp_path):
    # a random model's entropy is about 6 nats: under a target of 100 the coefficient
    # climbs by delta after each of the mu = 2 optimizer steps of every step; over a
    # target of 0.5 it falls to its floor and is never applied, so the run is the
    # run without a bonus, parameter for parameter
    def run(name, **control):
        model = random_model(tokenizer, size="micro", seed=0)
        config = _config(tmp_path / name, num_iterations=2, **control)
        return GRPOTrainer(model, tokenizer, [digit_share], config, ROWS).train(), model

    under, _ = run("under", use_adaptive_entropy=True, entropy_target=100.0,
                   entropy_coef_delta=0.01)
    assert under["entropy_coef"].tolist() == pytest.approx([0.02, 0.04, 0.06])
    over, model = run("over", use_adaptive_entropy=True, entropy_target=0.5,
                      entropy_coef=0.025, entropy_coef_delta=0.01)
    assert over["entropy_coef"].tolist() == pytest.approx([0.005, 0.0, 0.0])
    plain, plain_model = run("plain")
    assert "entropy_coef" not in plain.columns
    assert torch.equal(_params(model), _params(plain_model))


@pytest.mark.parametrize("knobs", [
    dict(top_entropy_quantile=0.2),
    dict(num_iterations=3, loss_type="sapo", sapo_temperature_neg=3.0),
    dict(num_iterations=3, delta=1.25),
    dict(num_iterations=3, off_policy_mask_threshold=0.0),
])
def test_loss_knobs_change_the_update(tokenizer, tmp_path, knobs):
    # same seed, same samples (rewards that vary in every group): each knob must
    # reach the update and change it
    import trainer_fixtures as varied

    params = []
    plain = {k: v for k, v in knobs.items() if k == "num_iterations"}
    for name, extra in (("plain", plain), ("knobs", knobs)):
        model = random_model(tokenizer, size="micro", seed=0)
        config = _config(tmp_path / name, max_steps=1, **extra)
        metrics = GRPOTrainer(model, tokenizer, [varied.digit_share], config,
                              varied.ROWS).train()
        assert metrics["loss"].notna().all()
        params.append(_params(model))
    assert not torch.equal(params[0], params[1])


@pytest.mark.parametrize("same,variant", [("grpo", "sapo"), ("dapo", "vespo"),
                                          ("reinforce", "luspo")])
def test_on_policy_variants_update_as_their_twin(tokenizer, tmp_path, same, variant):
    """At ratio 1 the SAPO gate's slope is 4 sigma(0)(1 - sigma(0)) = 1 (GRPO's
    gradient), VESPO's weight is phi(1) = 1 (DAPO's), and LUSPO's clipped term has
    REINFORCE's gradient with REINFORCE's sum over each completion."""
    import trainer_fixtures as varied

    params = []
    for loss_type in (same, variant):
        model = random_model(tokenizer, size="micro", seed=0)
        config = _config(tmp_path / loss_type, max_steps=2, loss_type=loss_type)
        GRPOTrainer(model, tokenizer, [varied.digit_share], config, varied.ROWS).train()
        params.append(_params(model))
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=1e-7)


def test_faulty_reward_is_logged_once_and_run_continues(tokenizer, tmp_path, capsys):
    calls = {"n": 0}

    def flaky(completions, **kwargs):
        calls["n"] += 1
        if len(completions) > 1:
            raise RuntimeError("cannot score a batch")
        text = completions[0]
        if any(ch.isdigit() for ch in text[:3]):
            raise ValueError("digit up front")
        return [math.nan if len(text) % 2 else 1.0]

    model = random_model(tokenizer, size="micro", seed=0)
    config = _config(tmp_path, max_steps=3)
    trainer = GRPOTrainer(model, tokenizer, [digit_share, flaky], config, ROWS)
    metrics = trainer.train()
    out = capsys.readouterr().out
    assert out.count("[reward flaky] raised RuntimeError: cannot score a batch") == 1
    assert out.count("[reward flaky] gave a missing/NaN/inf score") == 1
    assert len(metrics) == 3 and metrics["reward_errors"].sum() > 0
    assert metrics["reward/flaky"].between(0, 1).all()
    assert calls["n"] == 3 * (
        1 + 8
    )  # each step: one batch call, then one per completion


def test_nan_loss_guard_skips_the_update(tokenizer, tmp_path, capsys):
    def exploding(completions, **kwargs):  # a reward on a float32-overflowing scale
        return [3e38 if i % 2 else -3e38 for i in range(len(completions))]

    model = random_model(tokenizer, size="micro", seed=0)
    before = _params(model)
    config = _config(tmp_path, max_steps=2, scale_rewards="none", loss_type="bnpo")
    metrics = GRPOTrainer(model, tokenizer, [exploding], config, ROWS).train()
    assert metrics["skipped_updates"].tolist() == [1, 1]
    assert torch.equal(_params(model), before)
    assert (
        "skipped this update, the parameters are unchanged" in capsys.readouterr().out
    )


def test_dynamic_sampling_without_signal_skips_update(tokenizer, tmp_path, capsys):
    model = random_model(tokenizer, size="micro", seed=0)
    before = _params(model)
    config = _config(
        tmp_path, max_steps=1, dynamic_sampling=True, dynamic_sampling_max_rounds=1
    )
    metrics = GRPOTrainer(
        model, tokenizer, [lambda c, **k: [1.0] * len(c)], config, ROWS
    ).train()
    assert metrics["num_groups"].tolist() == [0] and metrics["zero_std_frac"][0] == 1.0
    assert torch.equal(_params(model), before)
    assert "every sampled group had equal rewards" in capsys.readouterr().out


def flat(completions, **kwargs):
    """The same score for every completion: a group never varies in it."""
    return [1.0] * len(completions)


def rank(completions, **kwargs):
    """Each completion's place in the batch: every group varies in it."""
    return [float(i) for i in range(len(completions))]


@pytest.mark.parametrize("metric,groups", [(None, 2), ("flat", 0), ("rank", 2)])
def test_dynamic_sampling_metric_picks_the_reward_that_must_vary(
        tokenizer, tmp_path, metric, groups):
    # the total varies within every group, `flat` in none: only a filter on `flat`
    # drops the groups
    config = _config(tmp_path, max_steps=1, dynamic_sampling=True,
                     dynamic_sampling_max_rounds=0, dynamic_sampling_metric=metric)
    model = random_model(tokenizer, size="micro", seed=0)
    metrics = GRPOTrainer(model, tokenizer, [flat, rank], config, ROWS).train()
    assert metrics["num_groups"].tolist() == [groups]


def test_dynamic_sampling_metric_must_name_a_reward(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="dynamic_sampling_metric='accuracy'"):
        _config(tmp_path, reward_funcs=["format_reward"],
                dynamic_sampling_metric="accuracy").validate()
    spec = {"name": "length_bonus_reward", "max_tokens": 8}  # a reward with parameters
    named = GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer, None,
                        _config(tmp_path, reward_funcs=["format_reward", spec]), ROWS)
    _config(tmp_path, reward_funcs=["format_reward", spec],
            dynamic_sampling_metric=named.reward_names[1]).validate()
    config = _config(tmp_path, dynamic_sampling_metric="format_reward")
    with pytest.raises(ValueError, match=r"name one of reward_funcs \['flat', 'rank'\]"):
        GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer,
                    [flat, rank], config, ROWS)


@pytest.mark.parametrize("sync", [
    {}, dict(sync_ref_model=True, ref_model_sync_steps=1),
    dict(use_adaptive_entropy=True, entropy_target=100.0, entropy_coef_delta=0.05),
    dict(num_mini_batches=2),
    dict(num_mini_batches=2, shuffle_mini_batches=True)],
    ids=["frozen reference", "synced reference", "adaptive entropy bonus",
         "two mini-batches", "two shuffled mini-batches"])
def test_resume_reproduces_the_next_step_exactly(tokenizer, tmp_path, sync):
    """With ``sync_ref_model`` the reference moved at steps 1 and 2: the checkpoint
    keeps it, or step 3's KL would pull toward the initial model. With adaptive
    entropy control it keeps the coefficient, or step 3 would apply none."""
    config = dict(
        max_steps=3,
        save_every=2,
        num_iterations=2,
        micro_batch_size=4,
        beta=0.04,
        warmup_steps=0.3,
        lr_scheduler_type="cosine",
        **sync,
    )
    # uninterrupted run
    model_a = random_model(tokenizer, size="micro", seed=0)
    full_trainer = GRPOTrainer(
        model_a, tokenizer, [digit_share], _config(tmp_path, **config), ROWS
    )
    full = full_trainer.train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / "ref_model").is_dir() == ("sync_ref_model" in sync)
    assert json.loads((checkpoint / "trainer_state.json").read_text())["step"] == 2
    # a fresh process would build the same initial model, then resume
    model_b = random_model(tokenizer, size="micro", seed=0)
    resumed = GRPOTrainer(
        model_b,
        tokenizer,
        [digit_share],
        _config(tmp_path, resume_from_checkpoint=str(checkpoint), **config),
        ROWS,
    )
    metrics = resumed.train()
    assert resumed.step == 3 and len(metrics) == 1
    assert torch.equal(_params(model_b), _params(model_a))
    assert torch.equal(_params(resumed.ref_model), _params(full_trainer.ref_model))
    skip = {"time_generate", "time_reward", "time_update", "time_step"}
    row_a, row_b = full.iloc[-1], metrics.iloc[-1]
    for column in full.columns:
        if column not in skip:
            assert row_b[column] == pytest.approx(
                row_a[column], nan_ok=True, abs=0
            ), column
    # the metrics file holds steps 1-3 once each
    assert pd.read_csv(tmp_path / "run" / "metrics.csv")["step"].tolist() == [1, 2, 3]


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.pt",
                                     "scheduler.pt", "rng_state.pt",
                                     "trainer_state.json"])
def test_a_damaged_checkpoint_is_named_and_changes_nothing(tokenizer, tmp_path,
                                                          damaged):
    """A checkpoint file cut short (a full disk, a partial copy) is one error that
    names it and the run's other checkpoint, raised before anything is restored."""
    model = random_model(tokenizer, size="micro", seed=0)
    GRPOTrainer(model, tokenizer, [digit_share],
                _config(tmp_path, max_steps=2, save_every=1), ROWS).train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    file = checkpoint / damaged
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    fresh = random_model(tokenizer, size="micro", seed=1)
    before = _params(fresh)
    trainer = GRPOTrainer(fresh, tokenizer, [digit_share], _config(
        tmp_path, max_steps=3, resume_from_checkpoint=str(checkpoint)), ROWS)
    with pytest.raises(ValueError, match=f"checkpoint file .*{damaged} cannot be "
                                         f"read .*damaged or incomplete.*checkpoint-1"):
        trainer.train()
    assert torch.equal(_params(fresh), before)


def test_ctrl_c_saves_a_checkpoint_that_resumes_exactly(tokenizer, tmp_path):
    calls = {"n": 0}

    def interrupt_on_third_call(completions, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # during step 3's rewards
            raise KeyboardInterrupt
        return digit_share(completions)

    model = random_model(tokenizer, size="micro", seed=0)
    with pytest.raises(KeyboardInterrupt):
        GRPOTrainer(
            model,
            tokenizer,
            [interrupt_on_third_call],
            _config(tmp_path, max_steps=4),
            ROWS,
        ).train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert (
        state["step"] == 2 and state["position"] == 4
    )  # step 3's prompts not consumed
    assert not list((tmp_path / "run").glob(".tmp-*"))  # written atomically

    resumed_model = random_model(tokenizer, size="micro", seed=0)
    GRPOTrainer(
        resumed_model,
        tokenizer,
        [digit_share],
        _config(tmp_path, max_steps=4, resume_from_checkpoint=str(checkpoint)),
        ROWS,
    ).train()
    reference_model = random_model(tokenizer, size="micro", seed=0)
    GRPOTrainer(
        reference_model,
        tokenizer,
        [digit_share],
        _config(tmp_path, max_steps=4, output_dir=str(tmp_path / "ref")),
        ROWS,
    ).train()
    assert torch.equal(_params(resumed_model), _params(reference_model))


def test_fresh_run_refuses_an_earlier_runs_checkpoints(tokenizer, tmp_path):
    config = _config(tmp_path, max_steps=2, save_every=1)
    GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer,
                [digit_share], config, ROWS).train()
    run = tmp_path / "run"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1",
                                                                "checkpoint-2"]
    before = (run / "checkpoint-2" / "trainer_state.json").read_text()
    # the same run started again from scratch: refused, nothing touched
    with pytest.raises(FileExistsError, match="resume_from_checkpoint=latest"):
        GRPOTrainer(random_model(tokenizer, size="micro", seed=1), tokenizer,
                    [digit_share], config, ROWS)
    assert (run / "checkpoint-2" / "trainer_state.json").read_text() == before
    # resuming is allowed, and so is an explicit overwrite, which removes the old ones
    GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer, [digit_share],
                _config(tmp_path, max_steps=3, resume_from_checkpoint="latest"), ROWS)
    trainer = GRPOTrainer(random_model(tokenizer, size="micro", seed=1), tokenizer,
                          [digit_share], _config(tmp_path, max_steps=1,
                                                 overwrite_output_dir=True), ROWS)
    trainer.train()
    assert [p.name for p in run.glob("checkpoint-*")] == []
    assert pd.read_csv(run / "metrics.csv")["step"].tolist() == [1]


def test_cli_reports_setup_errors_in_one_line(tmp_path, capsys):
    from grpo_lib.cli import main

    for argv, expected in (
        (["train", "--config", str(tmp_path / "missing.yaml")], "No config file at"),
        (["train", "--config", str(REPO / "configs" / "r1_zero_arithmetic.yaml"), "--set",
          "num_generations=1"], "num_generations=1"),
        (["plot", str(tmp_path)], "No metrics.csv in"),
        (["train", "--config", str(REPO / "configs" / "r1_zero_arithmetic.yaml"),
          "--set", f"model_name_or_path={REPO / 'data' / 'models' / 'tiny-qwen2-base'}",
          "--set", "device=cpu", "--set", f"output_dir={tmp_path / 'empty'}",
          "--set", "resume_from_checkpoint=latest"], "has no checkpoint-<step> folder"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"python -m grpo_lib {argv[0]}: error: ") and expected in err
        assert "Traceback" not in err


def test_cli_train_from_yaml(tokenizer, tmp_path):
    from grpo_lib.cli import main

    model_dir = tmp_path / "micro"
    random_model(tokenizer, size="micro", seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    path = tmp_path / "tiny.yaml"
    path.write_text(
        f"model_name_or_path: {model_dir}\n"
        "reward_funcs: [accuracy_reward, format_reward, {name: length_reward}]\n"
        "reward_weights: [1.0, 0.1, 0.0]\n"
        "per_step_prompts: 2\nnum_generations: 2\nmax_completion_length: 4\n"
        "progress_bar: false\ndevice: cpu\n"
    )
    main(
        [
            "train",
            "--config",
            str(path),
            "--set",
            "max_steps=1",
            "--set",
            f"output_dir={tmp_path / 'cli_run'}",
        ]
    )
    metrics = pd.read_csv(tmp_path / "cli_run" / "metrics.csv")
    assert metrics["step"].tolist() == [1]
    assert {
        "reward/accuracy_reward",
        "reward/format_reward",
        "reward/length_reward",
    } <= set(metrics.columns)


def test_shipped_configs_are_valid():
    from pathlib import Path

    import yaml

    paths = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
    # configs naming a train_file are SFT configs (test_sft.py checks them)
    paths = [p for p in paths if "train_file" not in yaml.safe_load(p.read_text())]
    assert paths, "configs/ holds no YAML file"
    for path in paths:
        config = load_config(path)
        assert config.num_generations >= 2, path


def test_reward_callables_name_themselves_in_the_config(tokenizer, tmp_path):
    """Three callables with three weights work whatever config.reward_funcs said."""

    def always_one(completions, **kwargs):
        return [1.0] * len(completions)

    model = random_model(tokenizer, size="micro", seed=0)
    config = _config(tmp_path, max_steps=1, reward_weights=[1.0, 0.5, 0.25])
    assert len(config.reward_funcs) != 3
    trainer = GRPOTrainer(model, tokenizer, [digit_share, always_one, digit_share],
                          config, ROWS)
    assert trainer.config.reward_funcs == ["digit_share", "always_one", "digit_share"]
    assert trainer.reward_names == ["digit_share", "always_one", "digit_share#2"]
    metrics = trainer.train()
    assert metrics["reward/always_one"].tolist() == [1.0]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["reward_funcs"] == ["digit_share", "always_one", "digit_share"]


def test_cli_exits_130_after_an_interrupted_run(monkeypatch, tmp_path):
    import grpo_lib.cli as cli
    import grpo_lib.trainer as trainer_module

    def interrupted(trainer):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module, "trainer_from_yaml", lambda path, overrides: None)
    monkeypatch.setattr(trainer_module, "run_training", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--config", str(tmp_path / "any.yaml")])
    assert exit_info.value.code == 130


def test_evaluation_during_training_writes_eval_csv(tokenizer, tmp_path):
    model = random_model(tokenizer, size="micro", seed=0)
    config = _config(tmp_path, max_steps=2, eval_on_start=True, eval_every=2, eval_n=3,
                     eval_batch_size=3)
    held_out = [{"question": "2 + 3 * 4", "answer": "14"},
                {"question": "9 - 5", "answer": "4"},
                {"question": "6 * 7", "answer": "42"}]
    trainer = GRPOTrainer(model, tokenizer, [digit_share], config, ROWS,
                          eval_dataset=held_out)
    trainer.train()
    scores = pd.read_csv(tmp_path / "run" / "eval.csv")
    assert scores["step"].tolist() == [0, 2]
    assert {"strict_acc", "format_rate", "lang_mix_rate"} <= set(scores.columns)


def test_cli_eval_loads_a_bfloat16_model_as_stored_or_as_the_trainer_does(
        tokenizer, tmp_path, capsys):
    from grpo_lib.cli import EVAL_DTYPES, main
    from grpo_lib.trainer import MODEL_DTYPES

    model_dir = tmp_path / "micro-bf16"
    random_model(tokenizer, size="micro", seed=0).to(torch.bfloat16).save_pretrained(
        model_dir)
    tokenizer.save_pretrained(model_dir)
    assert set(EVAL_DTYPES) == set(MODEL_DTYPES)  # one set of names, the trainer's
    for flag, dtype in (("auto", "torch.bfloat16"), ("float32", "torch.float32")):
        main(["eval", "--model", str(model_dir), "--n", "2", "--max-new-tokens", "2",
              "--dtype", flag])
        assert f"model: {model_dir} ({dtype})" in capsys.readouterr().out


def test_cli_eval_writes_every_answer_and_checks_its_folders_first(
        tokenizer, tmp_path, capsys):
    from grpo_lib.cli import main

    model_dir = tmp_path / "micro"
    random_model(tokenizer, size="micro", seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "answers.jsonl.gz"
    main(["eval", "--model", str(model_dir), "--n", "3", "--max-new-tokens", "4",
          "--samples", "2", "--samples-out", str(out)])
    answers = pd.read_json(out, lines=True)
    assert len(answers) == 3 * (1 + 2)  # greedy, then 2 samples, per problem
    assert {"mode", "prompt_index", "completion", "correct"} <= set(answers.columns)
    assert f"wrote {out} (9 answers)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # refused before the evaluation runs
        main(["eval", "--model", str(model_dir), "--n", "3",
              "--samples-out", str(tmp_path / "missing" / "a.jsonl")])
    assert stop.value.code == 2
    assert "no folder for the output" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["eval", "--model", "m", "--n", "0"], "argument --n: must be >= 1, got 0"),
    (["eval", "--model", "m", "--batch-size", "-2"], "--batch-size: must be >= 1"),
    (["eval", "--model", "m", "--samples", "-1"], "--samples: must be >= 0, got -1"),
    (["eval", "--model", "m", "--temperature", "nan"], "--temperature: must be >= 0"),
    (["eval", "--model", "m", "--n", "many"], "--n: expected an integer, got 'many'"),
    (["pretrain", "--steps", "0"], "--steps: must be >= 1, got 0"),
    (["pretrain", "--lr", "0"], "--lr: must be > 0.0, got 0"),
    (["make-data", "--n-train", "-5"], "--n-train: must be >= 1, got -5"),
    (["make-sft-data", "--n", "0"], "--n: must be >= 1, got 0"),
    (["rejection-sample", "--model", "m", "--k", "0"], "--k: must be >= 1, got 0"),
])
def test_cli_counts_below_their_least_are_one_line_errors(argv, message, capsys):
    """A count of 0 used to mean the default (pretrain --steps 0 trained 200 steps) and
    a negative one wrote an empty split; now argparse refuses both before any work."""
    from grpo_lib.cli import build_parser

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_leaves_set_values_to_the_config():
    """``train --set`` takes any ``key=value`` text; the config checks the values."""
    from grpo_lib.cli import build_parser

    args = build_parser().parse_args(["train", "--config", "c.yaml", "--set", "x=0",
                                      "--set", "max_steps=-1"])
    assert args.set == ["x=0", "max_steps=-1"]


def test_a_config_that_is_not_yaml_is_one_clear_error(tmp_path):
    from grpo_lib.trainer import load_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("max_steps: 5\nreward_funcs: [accuracy_reward,\n")
    with pytest.raises(ValueError, match=r"bad.yaml is not valid YAML \(line 3, "
                                         r"column 1\): expected"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("max_steps: 5\n")
    with pytest.raises(ValueError, match=r"--set reward_funcs=\[a, b is not valid YAML"):
        load_config(good, ["reward_funcs=[a, b"])
    assert load_config(good, ["beta=0.04"]).beta == 0.04


def test_a_reward_column_the_rows_lack_is_an_error_at_start(tmp_path):
    """accuracy_reward reads 'answer': rows without it would score 0 at every step."""
    tok = build_tokenizer()
    rows = [{"question": "1 + 1"}, {"question": "2 + 2"}]
    config = GRPOConfig(output_dir=str(tmp_path / "a"), max_steps=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"reward accuracy_reward reads the dataset "
                                         r"column\(s\) \['answer'\]"):
        GRPOTrainer(random_model(tok, size="micro", seed=0), tok, None, config, rows)

    def own(completions, answer=None, **kwargs):  # the reader's own: not checked
        return [0.0] * len(completions)

    config = GRPOConfig(output_dir=str(tmp_path / "b"), max_steps=1, progress_bar=False)
    GRPOTrainer(random_model(tok, size="micro", seed=0), tok, [own], config, rows)


def test_r1_zero_prompts_need_a_question_column(tmp_path):
    """The R1-Zero template is written around each row's question: rows with only a
    prompt are refused at start, not with a KeyError at step 1."""
    tok = build_tokenizer()
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}]
    config = GRPOConfig(output_dir=str(tmp_path / "a"), max_steps=1, progress_bar=False,
                        prompt_format="r1_zero")
    with pytest.raises(ValueError, match="no 'question' column"):
        GRPOTrainer(random_model(tok, size="micro", seed=0), tok, None, config, rows)


@pytest.mark.parametrize("overrides", [dict(eval_every=2), dict(eval_every=0,
                                                               eval_on_start=True)])
def test_no_eval_data_message_names_every_field_to_turn_off(tokenizer, tmp_path,
                                                             overrides):
    """Without an eval set, the error names both fields: eval_every=0 alone does not
    help when eval_on_start is set (the message used to say only eval_every=0)."""
    model = random_model(tokenizer, size="micro", seed=0)
    with pytest.raises(ValueError, match="eval_every=0 and eval_on_start=false"):
        GRPOTrainer(model, tokenizer, [digit_share], _config(tmp_path, **overrides),
                    ROWS)


@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_sync_ref_model_moves_the_reference_every_n_steps(tokenizer, tmp_path, alpha):
    """TR-DPO's sync after every 2nd step: the reference stays the initial model
    after step 1 and becomes alpha theta_2 + (1 - alpha) theta_0 after step 2."""
    model = random_model(tokenizer, size="micro", seed=0)
    initial = _params(model)
    seen = {}
    trainer = GRPOTrainer(model, tokenizer, [digit_share], _config(
        tmp_path, max_steps=2, beta=0.04, sync_ref_model=True, ref_model_sync_steps=2,
        ref_model_mixup_alpha=alpha), ROWS,
        callbacks=[lambda t, m: seen.setdefault(t.step, _params(t.ref_model))])
    trainer.train()
    assert torch.equal(seen[1], initial)
    expected = alpha * _params(model) + (1 - alpha) * initial
    assert torch.allclose(seen[2], expected, atol=1e-6)
    assert not torch.allclose(seen[2], initial)


def test_a_damaged_synced_reference_is_named_with_the_other_checkpoint(tokenizer,
                                                                      tmp_path):
    sync = dict(beta=0.04, sync_ref_model=True, ref_model_sync_steps=1)
    GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer,
                [digit_share], _config(tmp_path, max_steps=2, save_every=1, **sync),
                ROWS).train()
    file = tmp_path / "run" / "checkpoint-2" / "ref_model" / "model.safetensors"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    fresh = random_model(tokenizer, size="micro", seed=1)
    before = _params(fresh)
    trainer = GRPOTrainer(fresh, tokenizer, [digit_share], _config(
        tmp_path, max_steps=3, resume_from_checkpoint="latest", **sync), ROWS)
    with pytest.raises(ValueError, match=r"ref_model.model\.safetensors cannot be "
                                         r"read .*checkpoint-1"):
        trainer.train()
    assert torch.equal(_params(fresh), before)


def test_a_checkpoint_without_the_synced_reference_is_refused(tokenizer, tmp_path):
    GRPOTrainer(random_model(tokenizer, size="micro", seed=0), tokenizer,
                [digit_share], _config(tmp_path, max_steps=1, save_every=1,
                                       beta=0.04), ROWS).train()
    fresh = random_model(tokenizer, size="micro", seed=1)
    trainer = GRPOTrainer(fresh, tokenizer, [digit_share], _config(
        tmp_path, max_steps=2, beta=0.04, sync_ref_model=True,
        resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1")), ROWS)
    with pytest.raises(ValueError, match="has no ref_model/ folder"):
        trainer.train()


@pytest.mark.parametrize("knobs,message", [
    (dict(sync_ref_model=True), "beta=0 has none"),
    (dict(beta=0.04, sync_ref_model=True, ref_model_mixup_alpha=0.0), r"in \(0, 1\]"),
    (dict(beta=0.04, sync_ref_model=True, ref_model_sync_steps=0), "integer >= 1"),
])
def test_sync_ref_model_refuses_bad_settings(tmp_path, knobs, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **knobs).validate()
