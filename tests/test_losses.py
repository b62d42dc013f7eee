"""grpo_lib.losses: hand-checked values, and parity with TRL 1.16's own loss code.

The parity test builds a real ``trl.GRPOTrainer`` around a micro Qwen2 model and calls
its unmodified ``_compute_loss`` on a batch whose old/reference log-probs, advantages
and masks we choose. Our ``policy_loss`` gets the same per-token log-probs (from TRL's own
``_get_per_token_logps_and_entropies``, a fresh forward pass) and must give the same
loss and the same parameter gradients, for every loss type TRL shares with us, with and
without the KL term, with symmetric and asymmetric clipping, on- and off-policy, and
with the batch split into two accumulated micro-batches; for GSPO's sequence-level
ratio (TRL ``importance_sampling_level="sequence"``), CISPO and SAPO; and for the knobs
that drop or cap single terms (``delta``, ``top_entropy_quantile``,
``off_policy_mask_threshold``), composed the way our trainer composes them.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from grpo_lib.losses import (
    adaptive_entropy_coef,
    aggregate_bnpo,
    aggregate_dapo,
    aggregate_dr_grpo,
    aggregate_grpo,
    aggregate_reinforce,
    check_entropy_control,
    clipped_token_loss,
    entropy_bonus,
    high_entropy_mask,
    off_policy_sequence_mask,
    policy_loss,
    sapo_token_loss,
    vespo_weights,
    sequence_log_ratio,
)


# ---------------------------------------------------------------- hand-checked values
def _toy():
    # two completions: lengths 2 and 4 (T = 4)
    per_token = torch.tensor([[1.0, 3.0, 9.0, 9.0], [1.0, 1.0, 1.0, 5.0]])  # [B, T]
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # [B, T]
    return per_token, mask


def test_aggregations_by_hand():
    per_token, mask = _toy()
    # grpo: mean of per-sequence means = ((1+3)/2 + (1+1+1+5)/4) / 2 = (2 + 2) / 2
    assert aggregate_grpo(per_token, mask).item() == pytest.approx(2.0)
    # bnpo: token mean = (4 + 8) / 6
    assert aggregate_bnpo(per_token, mask).item() == pytest.approx(2.0)
    # dr_grpo: token sum / (B * L_max) = 12 / (2 * 8)
    assert aggregate_dr_grpo(per_token, mask, 8).item() == pytest.approx(0.75)
    # dapo with the whole batch holding 24 active tokens: 12 / 24
    assert aggregate_dapo(per_token, mask, 24).item() == pytest.approx(0.5)
    # reinforce: mean over sequences of token sums = (4 + 8) / 2
    assert aggregate_reinforce(per_token, mask).item() == pytest.approx(6.0)


def test_grpo_and_bnpo_differ_when_lengths_differ():
    per_token = torch.tensor([[2.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    # grpo = (2 + 1) / 2 = 1.5; bnpo = 6 / 5 = 1.2: the short sequence's token weighs
    # more in grpo
    assert aggregate_grpo(per_token, mask).item() == pytest.approx(1.5)
    assert aggregate_bnpo(per_token, mask).item() == pytest.approx(1.2)


def test_on_policy_loss_value_and_gradient():
    # mu = 1: ratio = 1, the clip is inactive, loss = -mean_i A_i (grpo) and
    # d loss / d logp_{i,t} = -A_i / (B |o_i|).
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.4, 0.9]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -0.5])
    loss, stats = policy_loss(logp, None, adv, mask, loss_type="grpo")
    assert loss.item() == pytest.approx(-(1.0 - 0.5) / 2)
    loss.backward()
    expected = torch.tensor([[-1 / 4, -1 / 4, 0.0], [0.5 / 6, 0.5 / 6, 0.5 / 6]])
    torch.testing.assert_close(logp.grad, expected)
    assert stats["clip_frac_region"] == 0.0 and stats["ratio_mean"] == pytest.approx(
        1.0
    )
    assert math.isnan(stats["kl"])


def test_reinforce_matches_picorl_formula():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.2, 0.4]])).requires_grad_()
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, -1.0])
    loss, _ = policy_loss(logp, None, adv, mask, loss_type="reinforce")
    expected = -(
        adv * logp.detach().sum(-1)
    ).mean()  # picoRL: -(A * sum logprobs).mean()
    assert loss.item() == pytest.approx(expected.item())
    assert loss.item() == pytest.approx(-(math.log(0.125) - math.log(0.08)) / 2)


def test_clip_fractions_by_hand():
    # ratios exp(logp - old): 0.5 (A<0: low clip), 2.0 (A>0: high clip), 1.1 (inside)
    old = torch.zeros(3, 1)
    logp = torch.log(torch.tensor([[0.5], [2.0], [1.1]]))
    adv = torch.tensor([-1.0, 1.0, 1.0])
    _, stats = policy_loss(logp, old, adv, torch.ones(3, 1), loss_type="bnpo")
    assert stats["clip_frac_low"] == pytest.approx(1 / 3)
    assert stats["clip_frac_high"] == pytest.approx(1 / 3)
    assert stats["clip_frac_region"] == pytest.approx(2 / 3)
    # clip-higher (DAPO, epsilon_high = 1.5) leaves ratio 2.0 unclipped
    _, stats = policy_loss(
        logp, old, adv, torch.ones(3, 1), loss_type="bnpo", epsilon_high=1.5
    )
    assert stats["clip_frac_high"] == 0.0


def test_kl_bias_correction_changes_gradient_not_value():
    # on-policy, A = 0: only the KL term acts. k3 = exp(d) - d - 1 with d = ref - logp.
    logp0 = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.4]]))
    d = ref - logp0
    grads, values = [], []
    for correction in (False, True):
        logp = logp0.clone().requires_grad_()
        loss, stats = policy_loss(
            logp,
            None,
            torch.zeros(1),
            torch.ones(1, 2),
            loss_type="bnpo",
            beta=1.0,
            ref_logp=ref,
            use_bias_correction_kl=correction,
        )
        loss.backward()
        grads.append(logp.grad)
        values.append(loss.item())
    assert values[0] == pytest.approx(values[1])
    assert values[0] == pytest.approx((torch.exp(d) - d - 1).mean().item())
    # d/dlogp of k3 = 1 - exp(d); with the ratio factor add k3 (the ratio's grad is 1)
    torch.testing.assert_close(grads[0], (1 - torch.exp(d)) / 2)
    torch.testing.assert_close(grads[1], (1 - torch.exp(d) + torch.exp(d) - d - 1) / 2)


def test_gspo_on_policy_gradient_equals_grpo():
    # mu = 1: s_i = 1 and d s_i = mean_t d logp_{i,t}, so with the grpo aggregation
    # the sequence-level loss has GRPO's value and gradient (GSPO differs off-policy).
    logp0 = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.4, 0.9]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -0.5])
    grads, values = [], []
    for level in ("token", "sequence"):
        logp = logp0.clone().requires_grad_()
        loss, _ = policy_loss(logp, None, adv, mask, importance_sampling_level=level)
        loss.backward()
        grads.append(logp.grad)
        values.append(loss.item())
    assert values[0] == pytest.approx(values[1])
    torch.testing.assert_close(grads[0], grads[1])


def test_gspo_sequence_ratio_by_hand():
    # token log-ratios (0.4, -0.2) -> log s = 0.1; the padded token does not count
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.4, -0.2, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert sequence_log_ratio(logp, old, mask).item() == pytest.approx(0.1)
    assert sequence_log_ratio(logp, old, torch.zeros(1, 3)).item() == 0.0
    # s = e^0.1 = 1.105 > 1 + 0.04 with A > 0: the whole completion is clipped
    _, stats = policy_loss(logp, old, torch.ones(1), mask, epsilon=0.04,
                           importance_sampling_level="sequence")
    assert stats["clip_frac_high"] == 1.0


def test_cispo_keeps_the_gradient_the_clip_removes():
    # ratio 2 with A > 0: PPO's clip zeroes this token's gradient; CISPO caps the
    # weight at eps_max and keeps it: d loss / d logp = -min(2, eps_max) * A.
    old = torch.log(torch.tensor([[0.25]]))
    for cap, weight in ((5.0, 2.0), (1.5, 1.5)):
        logp = torch.log(torch.tensor([[0.5]])).requires_grad_()
        loss, stats = policy_loss(logp, old, torch.ones(1), torch.ones(1, 1),
                                  loss_type="cispo", epsilon_high=cap)
        loss.backward()
        assert logp.grad.item() == pytest.approx(-weight)
        assert stats["clip_frac_high"] == (1.0 if cap < 2 else 0.0)
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_()
    loss, _ = policy_loss(logp, old, torch.ones(1), torch.ones(1, 1))
    loss.backward()
    assert logp.grad.item() == 0.0


def test_errors_say_what_to_change():
    logp, mask, adv = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="Choose one of"):
        policy_loss(logp, None, adv, mask, loss_type="ppo")
    with pytest.raises(ValueError, match="ref_logp is None"):
        policy_loss(logp, None, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logp, None, adv, mask, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        policy_loss(logp, None, adv, mask, epsilon=0.0)
    with pytest.raises(ValueError, match="mask shape"):
        policy_loss(logp, None, adv, torch.ones(2, 4))
    with pytest.raises(ValueError, match="TRL's docs and ScaleRL use 5.0"):
        policy_loss(logp, None, adv, mask, loss_type="cispo")
    with pytest.raises(ValueError, match="'token' .* or 'sequence'"):
        policy_loss(logp, None, adv, mask, importance_sampling_level="seq")
    with pytest.raises(ValueError, match="has none"):
        policy_loss(logp, None, adv, mask, loss_type="reinforce",
                    importance_sampling_level="sequence")


# ---------------------------------------------------------------- parity with TRL 1.16
G, NUM_PROMPTS, L_MAX = 4, 2, 6
B = G * NUM_PROMPTS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A micro Qwen2 saved to disk: TRL builds its reference model from the path."""
    from grpo_lib.models import build_tokenizer, random_model

    tokenizer = build_tokenizer()
    model = random_model(tokenizer, size="micro", seed=0)
    path = tmp_path_factory.mktemp("micro_qwen2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def batch(model_dir):
    """A fixed batch: prompts, completions of varying length, advantages, noise."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    prompt_ids = torch.randint(3, vocab, (B, 5), generator=gen)  # [B, P]
    prompt_mask = torch.ones(B, 5, dtype=torch.long)
    prompt_mask[::3, :2] = 0  # some left padding
    prompt_ids[prompt_mask == 0] = tokenizer.pad_token_id
    completion_ids = torch.randint(3, vocab, (B, L_MAX), generator=gen)  # [B, C]
    lengths = torch.tensor([6, 2, 4, 1, 6, 3, 5, 0])  # one empty (masked) completion
    completion_mask = (torch.arange(L_MAX)[None, :] < lengths[:, None]).long()  # [B, C]
    completion_ids[completion_mask == 0] = tokenizer.pad_token_id
    advantages = torch.randn(B, generator=gen)  # [B]
    advantages[2] = 0.0
    old_noise = 0.3 * torch.randn(
        B, L_MAX, generator=gen
    )  # [B, C], drives some ratios out
    ref_noise = 0.2 * torch.randn(B, L_MAX, generator=gen)  # [B, C]
    return dict(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        advantages=advantages,
        old_noise=old_noise,
        ref_noise=ref_noise,
    )


def _trl_trainer(
    model_dir, tmp_path, loss_type, beta, correction, epsilon_high, micro_batches,
    level="token", epsilon=0.2, entropy_coef=0.0, **knobs,
):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    args = TRLConfig(
        output_dir=str(tmp_path),
        report_to=[],
        use_cpu=True,
        seed=0,
        per_device_train_batch_size=B // micro_batches,
        gradient_accumulation_steps=micro_batches,
        num_generations=G,
        max_completion_length=L_MAX,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        use_bias_correction_kl=correction,
        importance_sampling_level=level,
        entropy_coef=entropy_coef,
        **knobs,
    )
    dataset = Dataset.from_dict({"prompt": ["1 + 1 ="] * B})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TRLTrainer(
            model=model,
            processing_class=tokenizer,
            args=args,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            train_dataset=dataset,
        )
    # What transformers.Trainer's training loop sets before calling compute_loss.
    trainer.current_gradient_accumulation_steps = micro_batches
    trainer.model.train()
    return trainer


def _micro_batches(batch, micro_batches):
    """For each of ``micro_batches`` equal slices of the batch: its rows, TRL's inputs,
    and its input ids and attention mask."""
    total_tokens = batch["completion_mask"].sum()
    size = B // micro_batches
    for k in range(micro_batches):
        rows = slice(k * size, (k + 1) * size)
        inputs = {key: batch[key][rows] for key in
                  ["prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                   "advantages"]}
        inputs["num_items_in_batch"] = total_tokens
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        yield rows, inputs, input_ids, attention


def _assert_matches_trl(loss, trl_loss, model, trl_grads, where):
    """Our loss and the parameters' gradients equal TRL's to round-off."""
    assert abs(loss.item() - trl_loss.item()) < 1e-6, where
    for ours, theirs in zip((p.grad for p in model.parameters()), trl_grads):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5,
                                   msg=lambda m: f"{where}: {m}")


def _old_and_ref(trainer, batch, rows, inputs, input_ids, attention, off_policy,
                 beta):
    """The micro-batch's old log-probs (noised when off-policy, else None) and
    reference log-probs, put into TRL's ``inputs`` the way its trainer puts them."""
    with torch.no_grad():
        logp0, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention, L_MAX)  # [b, C]
    old = (logp0 + batch["old_noise"][rows]) if off_policy else None
    ref = logp0 + batch["ref_noise"][rows]
    if old is not None:
        inputs["old_per_token_logps"] = old
    if beta != 0.0:
        inputs["ref_per_token_logps"] = ref
    return old, ref


def _trl_loss_and_grads(trainer, inputs):
    """TRL's own ``_compute_loss`` on ``inputs``, and the parameter gradients."""
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss, [p.grad.clone() for p in trainer.model.parameters()]


# Each case: (beta, use_bias_correction_kl, epsilon_high, micro-batches, off-policy).
# beta = 0: no KL; correction False: KL as DeepSeekMath writes it; True: KL * ratio
# (TRL's default: same value, different gradient). Off-policy = old log-probs differ
# from the current ones (mu > 1), which drives ratios out of the clip range; two
# micro-batches exercise gradient accumulation.
GSPO_EPS, GSPO_EPS_HIGH = 3e-4, 4e-4
SETTINGS = [
    (0.0, True, None, 1, False),
    (0.0, True, 0.28, 2, True),
    (0.04, True, None, 1, False),
    (0.04, True, 0.28, 2, True),
    (0.04, False, None, 2, True),
]
CASES = [
    (loss_type, *setting, "token")
    for loss_type in ["grpo", "bnpo", "dr_grpo", "dapo"]
    for setting in SETTINGS
]
# GSPO: the sequence-level ratio, with GSPO's own aggregation (grpo) and with dapo,
# and GSPO's clip range [1 - 3e-4, 1 + 4e-4] (Zheng et al. 2025, sec. 5.1): the mean
# of the token log-ratios moves far less than one token's, so 0.2 would never bind.
CASES += [
    (loss_type, beta, correction, None if high is None else GSPO_EPS_HIGH, micro, off,
     "sequence")
    for loss_type in ["grpo", "dapo"]
    for (beta, correction, high, micro, off) in SETTINGS
]
# CISPO: epsilon_high is the cap on the ratio itself. 5.0 (TRL's docs) never binds
# on this batch; 1.1 binds on the off-policy tokens, so the cap is tested too.
CASES += [
    ("cispo", beta, correction, cap, micro, off, level)
    for (beta, correction, _, micro, off) in SETTINGS
    for cap in (5.0, 1.1)
    for level in ("token", "sequence")
]


@pytest.mark.parametrize(
    "loss_type,beta,correction,epsilon_high,micro_batches,off_policy,level", CASES
)
def test_matches_trl_compute_loss(
    model_dir,
    batch,
    tmp_path,
    loss_type,
    beta,
    correction,
    epsilon_high,
    micro_batches,
    off_policy,
    level,
):
    epsilon = GSPO_EPS if level == "sequence" and loss_type != "cispo" else 0.2
    trainer = _trl_trainer(
        model_dir, tmp_path, loss_type, beta, correction, epsilon_high, micro_batches,
        level, epsilon,
    )
    capped = []  # CISPO: was any weight capped?
    model = trainer.model
    total_tokens = batch["completion_mask"].sum()
    parts = _micro_batches(batch, micro_batches)
    for k, (rows, inputs, input_ids, attention) in enumerate(parts):
        old, ref = _old_and_ref(trainer, batch, rows, inputs, input_ids, attention,
                                off_policy, beta)

        # TRL's own loss code, unmodified
        trl_loss, trl_grads = _trl_loss_and_grads(trainer, inputs)

        # ours, on the same per-token log-probs (a fresh forward through TRL's path)
        model.zero_grad()
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention, L_MAX
        )
        loss, stats = policy_loss(
            logp,
            old,
            inputs["advantages"],
            inputs["completion_mask"],
            loss_type=loss_type,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            beta=beta,
            ref_logp=ref if beta != 0.0 else None,
            max_completion_length=L_MAX,
            use_bias_correction_kl=correction,
            num_micro_batches=micro_batches,
            num_items_in_batch=total_tokens,
            importance_sampling_level=level,
        )
        loss.backward()

        where = (
            f"{loss_type} {level} beta={beta} correction={correction} "
            f"eps_high={epsilon_high} micro-batches={micro_batches} #{k}"
        )
        _assert_matches_trl(loss, trl_loss, model, trl_grads, where)
        metrics = trainer._metrics["train"]
        if loss_type == "cispo" and level == "token":
            assert stats["clip_frac_high"] == pytest.approx(
                metrics["cispo_clip_ratio"][-1], abs=1e-7), where
            capped.append(stats["clip_frac_high"])
        elif level == "token":  # TRL averages sequence-level flags per sequence
            assert stats["clip_frac_low"] == pytest.approx(
                metrics["clip_ratio/low_mean"][-1], abs=1e-7
            ), where
            assert stats["clip_frac_high"] == pytest.approx(
                metrics["clip_ratio/high_mean"][-1], abs=1e-7
            ), where
        if beta != 0.0:
            assert stats["kl"] == pytest.approx(metrics["kl"][-1], abs=1e-6), where
    if off_policy and loss_type != "cispo":  # the noise drove some ratios out
        assert sum(trainer._metrics["train"]["clip_ratio/region_mean"]) > 0
    if off_policy and loss_type == "cispo" and level == "token" and epsilon_high < 2:
        assert sum(capped) > 0, "the 1.1 cap never bound: the CISPO case tests nothing"


@pytest.mark.parametrize("loss_type,micro_batches", [
    ("grpo", 1), ("grpo", 2), ("dapo", 2), ("cispo", 2)])
def test_entropy_bonus_matches_trl(model_dir, batch, tmp_path, loss_type,
                                   micro_batches):
    # TRL's entropy_coef: loss - c * (token-mean entropy of the micro-batch) / K
    coef = 0.05
    high = 5.0 if loss_type == "cispo" else None
    trainer = _trl_trainer(model_dir, tmp_path, loss_type, 0.0, True, high,
                           micro_batches, entropy_coef=coef)
    model = trainer.model
    total_tokens = batch["completion_mask"].sum()
    parts = _micro_batches(batch, micro_batches)
    for k, (_, inputs, input_ids, attention) in enumerate(parts):
        trl_loss, trl_grads = _trl_loss_and_grads(trainer, inputs)

        model.zero_grad()
        logp, ent, _ = trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention, L_MAX, compute_entropy=True)
        mask = inputs["completion_mask"]
        loss, _ = policy_loss(logp, None, inputs["advantages"], mask,
                              loss_type=loss_type, epsilon_high=high,
                              num_micro_batches=micro_batches,
                              num_items_in_batch=total_tokens)
        loss = loss - coef * entropy_bonus(ent, mask) / micro_batches
        loss.backward()
        where = f"{loss_type} micro-batches={micro_batches} #{k}"
        _assert_matches_trl(loss, trl_loss, model, trl_grads, where)


# The knobs that cap or drop single terms, and SAPO's gate: (loss_type, level, beta,
# entropy_coef, micro-batches, off-policy, knobs). Off-policy drives ratios past
# delta = 1.3 and mean log-ratios past 0.05; the test checks that each knob acted.
KNOB_CASES = [
    ("grpo", "token", 0.04, 0.0, 2, True, dict(delta=1.3)),
    ("dapo", "token", 0.0, 0.0, 2, True, dict(delta=1.3, epsilon_high=0.28)),
    ("sapo", "token", 0.0, 0.0, 1, False, {}),
    ("sapo", "token", 0.04, 0.0, 2, True, {}),
    ("sapo", "sequence", 0.0, 0.0, 2, True,
     dict(sapo_temperature_pos=2.0, sapo_temperature_neg=3.0)),
    ("grpo", "token", 0.0, 0.0, 1, False, dict(top_entropy_quantile=0.2)),
    ("dapo", "token", 0.04, 0.05, 2, True, dict(top_entropy_quantile=0.5)),
    ("grpo", "token", 0.0, 0.0, 2, True, dict(off_policy_mask_threshold=0.05)),
    ("dapo", "token", 0.04, 0.05, 2, True,
     dict(top_entropy_quantile=0.5, off_policy_mask_threshold=0.05)),
    ("luspo", "sequence", 0.0, 0.0, 2, True, {}),
    ("luspo", "token", 0.04, 0.0, 2, True, dict(delta=1.3)),
    ("vespo", "token", 0.0, 0.0, 1, False, {}),
    ("vespo", "token", 0.04, 0.0, 2, True, {}),
    ("vespo", "sequence", 0.0, 0.05, 2, True,
     dict(vespo_k_pos=1.0, vespo_lambda_pos=0.5, vespo_k_neg=4.0,
          vespo_lambda_neg=1.5)),
]


@pytest.mark.parametrize("loss_type,level,beta,coef,micro_batches,off_policy,knobs",
                         KNOB_CASES)
def test_knobs_match_trl_compute_loss(model_dir, batch, tmp_path, loss_type, level,
                                      beta, coef, micro_batches, off_policy, knobs):
    from types import SimpleNamespace

    from grpo_lib.trainer import GRPOConfig, GRPOTrainer

    knobs = dict(knobs)
    high = knobs.pop("epsilon_high", None)
    trainer = _trl_trainer(model_dir, tmp_path, loss_type, beta, True, high,
                           micro_batches, level, entropy_coef=coef, **knobs)
    ours = SimpleNamespace(config=GRPOConfig(loss_type=loss_type, epsilon_high=high,
                                             importance_sampling_level=level, **knobs))
    model, total_tokens = trainer.model, batch["completion_mask"].sum()
    acted = []  # did the knob change anything on this batch?
    for k, (rows, inputs, input_ids, attention) in enumerate(
            _micro_batches(batch, micro_batches)):
        old, ref = _old_and_ref(trainer, batch, rows, inputs, input_ids, attention,
                                off_policy, beta)
        trl_loss, trl_grads = _trl_loss_and_grads(trainer, inputs)

        model.zero_grad()
        logp, ent, _ = trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention, L_MAX, compute_entropy=True)
        mask, adv = inputs["completion_mask"], inputs["advantages"]
        need_entropy = coef > 0 or ours.config.top_entropy_quantile < 1
        keep, counted = GRPOTrainer._kept_terms(
            ours, logp, ent if need_entropy else None, adv, mask, old)
        loss, stats = policy_loss(
            logp, old, adv, mask, loss_type=loss_type, epsilon_high=high, beta=beta,
            ref_logp=ref if beta else None, num_micro_batches=micro_batches,
            num_items_in_batch=total_tokens, importance_sampling_level=level,
            delta=knobs.get("delta"), keep=keep,
            sapo_temperatures=(ours.config.sapo_temperature_pos,
                               ours.config.sapo_temperature_neg),
            vespo_shape=ours.config.vespo_shape)
        if coef:
            loss = loss - coef * entropy_bonus(ent, counted) / micro_batches
        loss.backward()
        where = f"{loss_type} {level} {knobs} #{k}"
        _assert_matches_trl(loss, trl_loss, model, trl_grads, where)
        if keep is not None:
            acted.append(bool((keep * mask).sum() < mask.sum()))
        if "delta" in knobs and old is not None:
            rho = (logp - old).exp().detach()
            acted.append(bool(((rho > knobs["delta"]) & (adv[:, None] < 0)
                               & mask.bool()).any()))
        if loss_type == "vespo" and old is not None:  # weights away from phi(1) = 1
            phi = vespo_weights(logp - old, adv[:, None], mask, ours.config.vespo_shape)
            acted.append(bool((phi - 1).abs().max() > 0.01))
    if set(knobs) & {"delta", "top_entropy_quantile", "off_policy_mask_threshold"} or (
            loss_type == "vespo" and off_policy):
        assert any(acted), f"{knobs} never changed a term: the case tests nothing"


@pytest.mark.parametrize("start,target", [(0.0, 50.0), (0.3, 0.0)],
                         ids=["entropy under target", "entropy over target"])
def test_adaptive_entropy_matches_trl_over_three_steps(model_dir, batch, tmp_path,
                                                       start, target):
    # Skywork-OR1's control as TRL runs it: each call of _compute_loss here is one
    # optimizer step (one micro-batch); the coefficient moves after it and is applied
    # from the next step on, only while the last step's entropy was <= the target
    from types import SimpleNamespace

    from grpo_lib.trainer import GRPOConfig, GRPOTrainer

    control = dict(use_adaptive_entropy=True, entropy_target=target,
                   entropy_coef_delta=0.05, entropy_coef_min=0.0, entropy_coef_max=0.12)
    trainer = _trl_trainer(model_dir, tmp_path, "grpo", 0.0, True, None, 1,
                           entropy_coef=start, **control)
    config = GRPOConfig(entropy_coef=start, **control).validate()
    ours = SimpleNamespace(config=config, _entropy_coef=start, _last_entropy=None)
    model, total_tokens = trainer.model, batch["completion_mask"].sum()
    (_, inputs, input_ids, attention), = _micro_batches(batch, 1)
    mask, applied = inputs["completion_mask"], []
    for step in range(3):
        trl_loss, trl_grads = _trl_loss_and_grads(trainer, inputs)
        model.zero_grad()
        logp, ent, _ = trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention, L_MAX, compute_entropy=True)
        coef = GRPOTrainer._entropy_coef_now(ours)
        loss, _ = policy_loss(logp, None, inputs["advantages"], mask,
                              num_items_in_batch=total_tokens)
        loss = loss - coef * entropy_bonus(ent, mask)
        loss.backward()
        _assert_matches_trl(loss, trl_loss, model, trl_grads, f"step {step + 1}")
        GRPOTrainer._adapt_entropy_coef(ours, entropy_bonus(ent, mask).item())
        assert ours._entropy_coef == pytest.approx(trainer.entropy_coef, abs=1e-12)
        applied.append(coef)
    if target > 0:  # climbs by 0.05 to the 0.12 cap; none applied at the first step
        assert applied == pytest.approx([0.0, 0.05, 0.1])
        assert ours._entropy_coef == pytest.approx(0.12)
    else:  # entropy over the target: falls by 0.05 a step, never applied
        assert applied == [0.0, 0.0, 0.0]
        assert ours._entropy_coef == pytest.approx(0.15)


def test_adaptive_entropy_coef_by_hand():
    step = dict(target=0.2, delta=0.005, coef_min=0.0, coef_max=0.012)
    assert adaptive_entropy_coef(0.0, 0.1, **step) == pytest.approx(0.005)
    assert adaptive_entropy_coef(0.005, 0.2, **step) == pytest.approx(0.01)  # <=
    assert adaptive_entropy_coef(0.01, 0.15, **step) == pytest.approx(0.012)  # cap
    assert adaptive_entropy_coef(0.012, 0.3, **step) == pytest.approx(0.007)
    assert adaptive_entropy_coef(0.003, 0.3, **step) == 0.0  # floor


@pytest.mark.parametrize("values,message", [
    (dict(target=-0.1), "entropy_target=-0.1: must be a number >= 0"),
    (dict(target=float("nan")), "entropy_target=nan"),
    (dict(delta=0.0), "entropy_coef_delta=0 with use_adaptive_entropy"),
    (dict(coef_min=0.5, coef_max=0.1), "entropy_coef_min=0.5 is above"),
    (dict(coef=-1.0), "entropy_coef=-1.0: must be a number >= 0"),
])
def test_check_entropy_control_names_the_setting(values, message):
    settings = dict(coef=0.0, target=0.2, delta=0.005, coef_min=0.0, coef_max=1.0)
    with pytest.raises(ValueError, match=message):
        check_entropy_control(**{**settings, **values})


def test_delta_caps_the_unclipped_ratio_by_hand():
    ratio = torch.tensor([[0.5, 1.0, 1.25, 3.0]])  # [1, T]
    neg, pos = torch.tensor([-1.0]), torch.tensor([1.0])
    # A < 0: PPO keeps rho * A (unbounded); delta = 2 caps it at 2 * A
    torch.testing.assert_close(clipped_token_loss(ratio, neg),
                               torch.tensor([[0.8, 1.0, 1.25, 3.0]]))
    torch.testing.assert_close(clipped_token_loss(ratio, neg, delta=2.0),
                               torch.tensor([[0.8, 1.0, 1.25, 2.0]]))
    # A > 0: the clip already binds first; delta changes nothing
    assert torch.equal(clipped_token_loss(ratio, pos, delta=2.0),
                       clipped_token_loss(ratio, pos))
    ratio = ratio.clone().requires_grad_()
    clipped_token_loss(ratio, neg, delta=2.0).sum().backward()
    assert ratio.grad.tolist() == [[0.0, 1.0, 1.0, 0.0]]  # capped: no gradient


def test_sapo_gradient_is_grpos_on_policy_and_fades_off_it():
    adv = torch.tensor([[1.5], [-0.5]])  # [B, 1]
    logp = torch.log(torch.tensor([[0.3, 0.6], [0.2, 0.9]])).requires_grad_()
    sapo_token_loss((logp - logp.detach()).exp(), adv).sum().backward()
    torch.testing.assert_close(logp.grad, -adv.expand(2, 2))  # = -A, as GRPO's
    ratio = torch.tensor([[1.0, 1.5, 3.0]], requires_grad=True)
    sapo_token_loss(ratio, torch.tensor([[1.0]])).sum().backward()
    g = ratio.grad[0]
    assert g[0] == pytest.approx(-1.0) and -1.0 < g[1] < g[2] < 0  # fades smoothly


def test_vespo_weights_by_hand():
    """phi(w) = w^k e^(lambda (1 - w)) of the product of a completion's ratios."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    log_ratio = torch.log(torch.tensor([[2.0, 1.0, 9.0],     # w = 2 (the 9 is padding)
                                        [1.0, 1.0, 1.0],     # w = 1
                                        [0.5, 1.0, 1.0]]))   # w = 0.5
    adv = torch.tensor([[1.0], [-1.0], [-1.0]])  # [B, 1]
    phi = vespo_weights(log_ratio, adv, mask)  # (k, lambda): (2, 3) for A >= 0, (3, 2)
    expected = [4 * math.exp(-3), 1.0, 0.5 ** 3 * math.exp(1)]
    assert phi.flatten().tolist() == pytest.approx(expected, rel=1e-5)
    # the sampler's weights pi_old / pi_sampler join the product, padding left out
    sampler = torch.tensor([[0.5, 0.5, 0.1], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    folded = vespo_weights(log_ratio, adv, mask, sampling_weights=sampler)
    assert folded[0].item() == pytest.approx(0.5 ** 2 * math.exp(3 * 0.5), rel=1e-5)
    # the peak is at w = k / lambda; far ratios weigh 0, never NaN or inf
    w = torch.tensor([[0.5], [2 / 3], [0.9]]).log()
    peak = vespo_weights(w, torch.ones(3, 1), torch.ones(3, 1))
    assert peak[1] > peak[0] and peak[1] > peak[2]
    wild = torch.tensor([[50.0, 50.0], [-1e30, 0.0]])
    far = vespo_weights(wild, adv[:2], torch.ones(2, 2))  # w = e^40 and 1e-8: clamped
    assert torch.isfinite(far).all() and far.max() < 1e-20


def test_vespo_refuses_sequence_sampling_weights():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="use a token_\\* mode"):
        policy_loss(logp, None, torch.tensor([1.0, -1.0]), torch.ones(2, 3),
                    loss_type="vespo", sampling_weights=torch.ones(2, 1))


def test_masks_by_hand():
    entropy = torch.tensor([[0.1, 2.0, 0.5, 9.0], [1.0, 3.0, 0.0, 0.0]])  # [B, T]
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    # active entropies 0.1, 2.0, 0.5, 1.0, 3.0: the top 40% are 2.0 and 3.0
    kept = high_entropy_mask(entropy, mask, 0.4)
    assert kept.tolist() == [[0, 1, 0, 0], [0, 1, 0, 0]]
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == mask.tolist()
    assert high_entropy_mask(entropy, torch.zeros_like(mask), 0.2).sum() == 0
    with pytest.raises(ValueError, match="between 0 and 1"):
        high_entropy_mask(entropy, mask, 1.5)
    logp = torch.zeros(3, 2)
    behaviour = torch.tensor([[0.9, 0.9], [0.9, 0.9], [0.1, 0.1]])  # mean gaps
    adv = torch.tensor([1.0, -1.0, -1.0])
    keep = off_policy_sequence_mask(adv, logp, behaviour, torch.ones(3, 2), 0.5)
    assert keep.tolist() == [[1.0], [0.0], [1.0]]  # only A < 0 and far is dropped
    on_policy = off_policy_sequence_mask(adv, logp, logp, torch.ones(3, 2), 0.0)
    assert on_policy.tolist() == [[1.0], [1.0], [1.0]]


@pytest.mark.parametrize("knobs,message", [
    (dict(delta=1.1), "above the clip range's top"),
    (dict(delta=2.0, loss_type="cispo", epsilon_high=5.0), "does not use"),
    (dict(top_entropy_quantile=-0.1), "between 0 and 1"),
    (dict(off_policy_mask_threshold=-1.0), ">= 0"),
    (dict(sapo_temperature_neg=0.0), "must be > 0"),
    (dict(loss_type="vespo", vespo_k_pos=-1.0), "needs k >= 0"),
    (dict(loss_type="vespo", vespo_lambda_neg=0.0), "lambda > 0"),
    (dict(loss_type="vespo", sampling_correction=True, rollout_engine="fast"),
     "token_truncate or token_mask"),
])
def test_config_refuses_bad_knobs(knobs, message):
    from grpo_lib.trainer import GRPOConfig

    with pytest.raises(ValueError, match=message):
        GRPOConfig(**knobs).validate()


@pytest.mark.parametrize("temperatures", [(0.0, 1.05), (1.0, -2.0), (1.0, math.inf)])
def test_policy_loss_refuses_a_bad_sapo_gate(temperatures):
    """Called directly, as the config would: an error, not an inf or NaN loss."""
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        policy_loss(logp, None, torch.tensor([1.0, -1.0]), torch.ones(2, 3),
                    loss_type="sapo", sapo_temperatures=temperatures)
