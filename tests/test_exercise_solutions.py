"""Every appendix solution passes its checker; every checker rejects a wrong attempt.

* ``book/solutions/chNN.md``: the ```python blocks of each file run in order in one
  namespace, in the repository root; each checker call must return True. Every
  ``check_*`` of ``grpo_lib/exercises/chNN.py`` is called by that chapter's solutions,
  and the solutions import checkers from their own chapter's module only.
* ``WRONG_ATTEMPTS``: one typical mistake per checker, which must raise AssertionError
  with the message given. The table must name every ``check_*`` function of every
  chapter, so a new checker without a wrong attempt fails
  :func:`test_every_checker_has_a_wrong_attempt`.
"""
from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_lib.exercises import all_checkers, chapter_modules
from grpo_lib.tasks.arithmetic import evaluate_expression

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "book" / "solutions").glob("ch*.md"))
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> list[str]:
    return _BLOCK.findall(path.read_text(encoding="utf-8"))


def test_every_chapter_with_checkers_has_a_solution_file():
    chapters = set(chapter_modules())
    files = {p.stem for p in SOLUTIONS}
    assert chapters <= files, f"no book/solutions/<chapter>.md for {chapters - files}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solutions_pass_their_checkers(path, monkeypatch, capsys):
    chapter = path.stem  # "ch01"
    blocks = python_blocks(path)
    assert blocks, f"{path.name} has no ```python block"
    source = "\n".join(blocks)
    wrong_home = re.findall(r"grpo_lib\.exercises(?:\.(ch\d\d))?\s+import", source)
    assert all(home == chapter for home in wrong_home), (
        f"{path.name} imports checkers from {sorted(set(wrong_home))}; a chapter's "
        f"solutions import from grpo_lib.exercises.{chapter} only ('' = the package)")

    # Record every call of this chapter's checkers (the blocks import them by name from
    # the module, so the recording wrappers are what they get).
    module = chapter_modules().get(chapter)
    checkers = {name: fn for name, fn in vars(module).items()
                if name.startswith("check_") and callable(fn)} if module else {}
    results: list[tuple[str, object]] = []
    for name, fn in checkers.items():
        def recording(*args, _name=name, _fn=fn, **kwargs):
            result = _fn(*args, **kwargs)
            results.append((_name, result))
            return result
        monkeypatch.setattr(module, name, recording)

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    namespace: dict = {"__name__": f"solutions_{chapter}"}
    for i, code in enumerate(blocks, 1):
        try:
            exec(compile(code, f"{path.name}, python block {i}", "exec"), namespace)
        except AssertionError as err:
            pytest.fail(f"{path.name}, python block {i}: the checker rejects the "
                        f"solution: {err}")
    capsys.readouterr()

    not_true = [(name, result) for name, result in results if result is not True]
    assert not not_true, f"{path.name}: checkers that did not return True: {not_true}"
    missing = set(checkers) - {name for name, _ in results}
    assert not missing, f"{path.name} never calls {sorted(missing)}"


# ------------------------------------------------------------------ wrong attempts
def _population_std_advantages(rewards, std="sample", eps=1e-4):
    r = np.asarray(rewards, dtype=float)
    return (r - r.mean()) / (r.std() + eps)  # always the population std


def _ch09_informative_groups(rewards, group_size):
    grouped = torch.tensor(rewards).view(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1).nonzero().flatten().tolist()


def _ch01_informative_groups(rewards, group_size):
    groups = np.asarray(rewards, dtype=float).reshape(-1, group_size)
    return [bool(np.any(row != row[0])) for row in groups]


def _swapped_k3(logp, ref_logp):
    delta = ref_logp - logp  # the roles swapped
    return torch.exp(-delta) + delta - 1


def _reinforce_without_baseline(logits, actions, rewards, baseline):
    score = torch.nn.functional.one_hot(actions, 4) - torch.softmax(logits, -1)
    return (rewards[actions][:, None] * score).mean(0)  # the baseline forgotten


def _objective_sign_flipped(logp, old_logp, ref_logp, advantages, mask, epsilon, beta):
    from grpo_lib.objective import clipped_surrogate, kl_estimate, probability_ratio

    rho = probability_ratio(logp, old_logp)
    per_token = (clipped_surrogate(rho, advantages, epsilon)
                 - beta * kl_estimate(logp, ref_logp, "k3"))
    return -((per_token * mask).sum(-1) / mask.sum(-1)).mean()


def _overlong_sign_flipped(lengths, max_len, cache):
    start = max_len - cache
    return [0.0 if n <= start else min(1.0, (n - start) / cache) for n in lengths]


def _logprobs_without_shift(logits, input_ids, prompt_len):
    logp = logits[:, prompt_len:].log_softmax(-1)
    return logp.gather(-1, input_ids[:, prompt_len:, None])[..., 0]


def _top_p_drops_crossing_token(logits, top_p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    remove_sorted = sorted_logits.softmax(-1).cumsum(-1) >= top_p  # no "- probs"
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def _mask_without_stop_token(completion_ids, stop_ids):
    is_stop = torch.isin(completion_ids, torch.as_tensor(list(stop_ids))).long()
    return (is_stop.cumsum(-1) == 0).long()  # stops at, not after, the stop token


def _grpo_loss_sign_flipped(logp, rewards, mask, G):
    r = rewards.view(-1, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    per_token = torch.exp(logp - logp.detach()) * adv * mask  # no minus sign
    return (per_token.sum(1) / mask.sum(1)).mean()


def _first_step_at_or_above(metrics, column, threshold):
    above = metrics[metrics[column] >= threshold]
    return None if above.empty else int(above["step"].min())


def _dr_grpo_by_tokens(x, mask, loss_type, max_completion_length):
    if loss_type == "grpo":
        return ((x * mask).sum(-1) / mask.sum(-1)).mean()
    return (x * mask).sum() / mask.sum()  # bnpo right, dr_grpo wrong


def _group_push_population_std(k, G, scale):
    p = k / G
    if k in (0, G) or scale == "none":
        return 2 * G * p * (1 - p)
    return 2 * G * p * (1 - p) / (math.sqrt(p * (1 - p)) + 1e-4)


def _pooled_length_gap(lengths, correct, group_size):
    ok = torch.tensor(correct)
    lens = lengths.float()
    if ok.all() or not ok.any():
        return float("nan")
    return (lens[~ok].mean() - lens[ok].mean()).item()


def _zero_std_transposed(rewards, group_size):
    grouped = torch.tensor(rewards).view(group_size, -1)  # (G, num_groups): wrong
    return (grouped == grouped[:, :1]).all(1).float().mean().item()


def _ch09_entropy_per_completion(logits, mask):
    logp = torch.log_softmax(logits, dim=-1)  # [B, T, V]
    entropy = -(logp.exp() * logp).sum(-1)  # [B, T]
    return ((entropy * mask).sum(-1) / mask.sum(-1)).mean().item()  # wrong: per row


def _ch08_vespo_without_mask(log_ratio, advantages, mask):
    """VESPO's weight with the padded positions' log-ratios counted."""
    log_w = log_ratio.sum(-1, keepdim=True)  # [B, 1]
    k = torch.where(advantages >= 0, 2.0, 3.0)
    lam = torch.where(advantages >= 0, 3.0, 2.0)
    return torch.exp(lam + k * log_w - lam * log_w.exp())


def _ch09_schedule_gated_now(entropies, target, delta, coef_min, coef_max, coef):
    applied = []
    for h in entropies:  # wrong: gated by the step's own entropy, from step 1 on
        applied.append(coef if h <= target else 0.0)
        coef = min(coef + delta, coef_max) if h <= target else max(coef - delta,
                                                                    coef_min)
    return applied


def _ch09_sync_swapped(policy, reference, alpha):
    with torch.no_grad():
        for ref, theta in zip(reference.parameters(), policy.parameters()):
            ref.mul_(alpha).add_(theta, alpha=1 - alpha)  # wrong: alpha on the old one


def _ch11_share_by_runs(reasoning):
    english = len(re.findall(r"[A-Za-z]+", reasoning))
    chinese = len(re.findall(r"[\u4e00-\u9fff]+", reasoning))  # runs, not characters
    return 1.0 if english + chinese == 0 else english / (english + chinese)


def _ch11_sum_then_normalize(rewards_per_func, weights, group_size):
    total = torch.tensor(rewards_per_func) @ torch.tensor(weights)  # summed first
    r = total.view(-1, group_size)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()


def _ch11_habit_over_the_batch(rewards, has_habit, group_size):
    r = torch.tensor(rewards)  # one baseline for the whole batch: wrong
    return ((r - r.mean()) / (r.std() + 1e-4))[torch.tensor(has_habit)].mean().item()


def _ch11_lower_on_average(treated, control, column="lang_mix_rate"):
    def final(frame):
        return frame.sort_values("step")[column].iloc[-1]

    return bool(np.mean([final(f) for f in treated.values()])
                < np.mean([final(f) for f in control.values()]))


def _ch12_samples_rounded_down(p, target):
    return 1 if p >= 1 else int(math.log(1 - target) / math.log(1 - p))


def _ch12_dedup_across_prompts(prompt_index, completions):
    seen, keep = set(), []
    for text in completions:  # the prompt left out of the key: wrong
        key = " ".join(text.split()).casefold()
        keep.append(key not in seen)
        seen.add(key)
    return keep


def _ch12_each_filter_alone(masks):
    return [len(next(iter(masks.values())))] + [sum(m) for m in masks.values()]


def _ch10_mask_without_im_end(tokens):
    mask, role, header = [0] * len(tokens), None, False
    for i, token in enumerate(tokens):
        if token == "<|im_start|>":
            role, header = "", True
        elif header:
            header = token != "Ċ"
            role += token if header else ""
        elif token == "<|im_end|>":
            role = None  # the turn ends before its <|im_end|> is marked
        elif role == "assistant":
            mask[i] = 1
    return mask


def _ch10_normalize_by_split(text):
    return " ".join(text.split())  # no ValueError, no space inside the tags


def _ch10_steps_with_partial_windows(metrics, column, threshold, window):
    frame = metrics.sort_values("step")
    smooth = frame[column].rolling(window, min_periods=1).mean()
    reached = frame["step"][smooth >= threshold]
    return None if reached.empty else int(reached.iloc[0])

def _ch16_layer_norm(x, weight, eps):
    centred = x.float() - x.float().mean(-1, keepdim=True)  # subtracts the mean: wrong
    return weight * (centred / torch.sqrt(centred.pow(2).mean(-1, True) + eps)).to(
        x.dtype)


def _ch16_interleaved_rope(x, positions, theta):
    from grpo_lib.exercises.ch16 import _interleaved_rope

    return _interleaved_rope(x, positions, theta)  # pairs (x_0, x_1): wrong for Qwen2


def _ch16_cache_all_query_heads(settings, batch_size, max_len, bytes_per_number):
    s = settings  # H query heads where the cache holds H_kv: wrong
    return (2 * s.num_hidden_layers * batch_size * s.num_attention_heads * max_len
            * s.head_dim * bytes_per_number)

def _ch19_rotate_the_other_way(d):
    from grpo_lib.fast_decode import rotate_half_matrix

    return -rotate_half_matrix(d)  # [x1, x2] -> [x2, -x1]: wrong sign


def _ch19_draw_at_or_above(probs, u):
    cdf = probs.cumsum(-1)  # F_v >= u: picks an empty interval on a boundary
    token = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=False)
    return token.squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _ch19_weights_with_padding(trainer_logp, sampler_logp, mask, clip_max):
    w = (trainer_logp - sampler_logp).sum(-1, keepdim=True).exp()  # no mask: wrong
    return w.masked_fill(w > clip_max, 0.0)

# "chNN.check_name": (the wrong attempt passed to the checker, regex of its message)
def _ch18_reward_of_the_messages(fn):  # str() of a message list, not its content
    return lambda completions, **kw: fn([str(c) for c in completions],
                                        answer=kw.get("answer"))


def _ch18_accumulation_per_prompt(P, G, m, mu, steps):
    return dict(generation_batch_size=P * G, per_device_train_batch_size=m,
                gradient_accumulation_steps=P // m, max_steps=steps * mu)


def _ch18_loss_sign_flipped(advantages, lengths, loss_type):
    if loss_type == "grpo":
        return sum(advantages) / len(advantages)
    return sum(a * n for a, n in zip(advantages, lengths)) / sum(lengths)


def _ch17_digits_as_numbers(expression, numbers):
    digits = sorted(int(ch) for ch in expression if ch.isdigit())
    return digits == sorted(int(d) for n in numbers for d in str(n))


def _ch17_python_eval(completion, target):
    import re

    found = re.findall(r"<answer>(.*?)</answer>", completion, re.DOTALL)
    try:
        return float(eval(found[-1]) == target) if found else 0.0  # noqa: S307
    except Exception:  # noqa: BLE001
        return 0.0


def _ch17_whole_numbers_only(numbers, target):
    def search(values):
        if len(values) == 1:
            return values[0] == target
        for i, j in itertools.permutations(range(len(values)), 2):
            rest = [v for k, v in enumerate(values) if k not in (i, j)]
            a, b = values[i], values[j]
            results = [a + b, a - b, a * b] + ([a // b] if b and a % b == 0 else [])
            if any(search(rest + [r]) for r in results):
                return True
        return False

    return search(list(numbers))


def _ch17_room_with_greedy_rows(answers):
    solved = answers.groupby("prompt_index")["correct"].any()
    return 100 * (solved.mean() - answers["correct"].mean())


def _ch20_oldest_allowed_version(generate_s, update_s, max_staleness, steps):
    return [max(0, s - max_staleness) for s in range(steps)]


def _ch20_weight_upside_down(prox_logp, behav_logp, cap):
    return [min(math.exp(b - p), cap) for p, b in zip(prox_logp, behav_logp)]


def _ch20_speedup_with_warmup(metrics):
    g, u = metrics["time_generate"].median(), metrics["time_update"].median()
    return (g + u) / max(g, u)


def _ch21_split_on_one_process(P, G, m, n):  # B / micro, as with one process
    return (m or P * G), P * G // (m or P * G)


def _ch21_answer_not_under_reward_model(row, task, split, index):
    return {"data_source": f"grpo_lib/{task}", "prompt": row["prompt"],
            "ability": "math", "reward_model": row["answer"],
            "extra_info": {"split": split, "index": index,
                           "question": row["question"], "answer": row["answer"]}}


def _ch15_equations_only(text, question):
    """Grades each step's operation and nothing else (the weaker grader)."""
    from grpo_lib.test_time import step_labels

    labels = step_labels(text, question, keep_value=False)
    return next((i for i, (_, ok) in enumerate(labels) if not ok), None)


def _ch15_hard_labels(completions, question):
    """value_targets' labels: each state keeps the grade of the last answer through
    it."""
    from grpo_lib.test_time import process_ok, step_prefixes

    return {state: float(process_ok(c, question))
            for c in completions for state in step_prefixes(c)}


def _ch14_topk_not_renormalised(s, t, k):
    top = t.topk(k, dim=-1)
    p_t = t.softmax(-1).gather(-1, top.indices)
    log_s = s.log_softmax(-1).gather(-1, top.indices)
    return (p_t * (p_t.log() - log_s)).sum(-1)


WRONG_ATTEMPTS = {
    "ch01.check_group_advantages": (_population_std_advantages, "which std"),
    # chapter 9's function (group indices) where chapter 1 wants one bool per group
    "ch01.check_informative_groups": (_ch09_informative_groups, "one bool per group"),
    "ch01.check_zero_variance_probability": (lambda p, G: p ** G, "two ways"),
    "ch02.check_clipped_surrogate": (
        lambda ratio, adv, eps: torch.maximum(
            ratio * adv[:, None], torch.clamp(ratio, 1 - eps, 1 + eps) * adv[:, None]),
        "You took the max"),
    "ch02.check_k3": (_swapped_k3, "roles swapped"),
    "ch02.check_grpo_objective": (_objective_sign_flipped, "sign is flipped"),
    "ch02.check_reinforce_gradient": (_reinforce_without_baseline,
                                      "ignored the baseline"),
    "ch03.check_strict_format_reward": (
        lambda completions: [1.0 if isinstance(c, str) and "<answer>" in c else 0.0
                             for c in completions],
        "it is not well formatted"),
    "ch03.check_soft_overlong_punishment": (_overlong_sign_flipped, "sign is flipped"),
    "ch03.check_spray_hack": ("<think> 3 * 4 = 12 </think> <answer> 14 </answer>",
                              "does not pay for"),
    "ch04.check_completion_logprobs": (_logprobs_without_shift, "its own position"),
    "ch04.check_position_ids": (lambda m: torch.arange(m.shape[1]).expand_as(m),
                                "count the padding"),
    "ch04.check_sft_labels": (lambda ids, m: torch.where(m.bool(), -100, ids),
                              "mask is inverted"),
    "ch05.check_left_to_right": (lambda q: evaluate_expression(q, precedence=True),
                                 r"\*correct\* value"),
    "ch05.check_precedence_matters": (lambda q: "*" in q, "is not enough"),
    "ch06.check_top_p_filter": (_top_p_drops_crossing_token,
                                "Every token was removed|one token too many"),
    "ch06.check_completion_mask": (_mask_without_stop_token, "stop token itself"),
    "ch07.check_grpo_loss": (_grpo_loss_sign_flipped, "sign is flipped"),
    "ch07.check_first_step_above": (_first_step_at_or_above, "strictly greater"),
    "ch08.check_aggregate": (_dr_grpo_by_tokens, r"constant B \* L_max"),
    "ch08.check_group_push": (_group_push_population_std, "population std"),
    "ch08.check_length_gap_in_group": (_pooled_length_gap, "pooled gap"),
    "ch08.check_sequence_log_ratio": (
        lambda logp, old, mask: ((logp - old) * mask).sum(-1, keepdim=True),
        "You summed"),
    "ch08.check_vespo_weights": (_ch08_vespo_without_mask, "padded positions"),
    "ch09.check_zero_std_frac": (_zero_std_transposed, "Groups are contiguous"),
    # chapter 1's function (one bool per group) where chapter 9 wants group indices
    "ch09.check_informative_groups": (_ch01_informative_groups,
                                      r"expected \[1\], got \[0, 1\].*indices"),
    "ch09.check_mean_entropy": (_ch09_entropy_per_completion,
                                "averaged each completion first"),
    "ch09.check_sync_reference": (_ch09_sync_swapped, "You gave alpha to the old"),
    "ch09.check_applied_entropy_coefs": (_ch09_schedule_gated_now,
                                         "gate it by the previous step's entropy"),
    "ch10.check_assistant_mask": (_ch10_mask_without_im_end, "learns to stop"),
    "ch10.check_normalize_trace": (_ch10_normalize_by_split, "one space inside it"),
    "ch10.check_steps_to_reach": (_ch10_steps_with_partial_windows, "full windows"),
    "ch12.check_samples_needed": (_ch12_samples_rounded_down, "round up"),
    "ch12.check_dedup_mask": (_ch12_dedup_across_prompts, "within one prompt"),
    "ch12.check_sequential_yields": (_ch12_each_filter_alone,
                                     "each filter sees only"),
    "ch11.check_language_share": (_ch11_share_by_runs, "each CJK character"),
    "ch11.check_normalize_then_sum": (_ch11_sum_then_normalize,
                                      "normalise each reward column"),
    "ch11.check_lower_in_every_seed": (_ch11_lower_on_average, "seed by seed"),
    "ch11.check_habit_advantage": (_ch11_habit_over_the_batch, "whole batch"),
    "ch16.check_rms_norm": (_ch16_layer_norm, "That is LayerNorm"),
    "ch16.check_rope": (_ch16_interleaved_rope, "pairs dimension i with i \\+ d/2"),
    "ch16.check_kv_cache_bytes": (_ch16_cache_all_query_heads, "key/value heads"),
    "ch19.check_rotate_half_matrix": (_ch19_rotate_the_other_way, "the other way"),
    "ch19.check_draw": (_ch19_draw_at_or_above, "probability 0"),
    "ch19.check_sequence_mask_weights": (_ch19_weights_with_padding,
                                         "padding after a completion"),
    "ch18.check_trl_reward": (_ch18_reward_of_the_messages,
                              r"completions\[i\]\[-1\]\['content'\]"),
    "ch18.check_trl_batch": (_ch18_accumulation_per_prompt, "Count completions"),
    "ch18.check_onpolicy_loss": (_ch18_loss_sign_flipped, "Check the sign"),
    "ch17.check_uses_each_once": (_ch17_digits_as_numbers, "Compare numbers"),
    "ch17.check_value_only_reward": (_ch17_python_eval, "never eval"),
    "ch17.check_reachable": (_ch17_whole_numbers_only, "exact fractions"),
    "ch17.check_room": (_ch17_room_with_greedy_rows, "sampled rows only"),
    "ch20.check_schedule": (_ch20_oldest_allowed_version, "newest one published"),
    "ch20.check_behaviour_weight": (_ch20_weight_upside_down, "Upside down"),
    "ch20.check_sync_speedup": (_ch20_speedup_with_warmup, "warm-up"),
    "ch21.check_split": (_ch21_split_on_one_process, "one-process answer"),
    # log(sigmoid(x)) is -inf for a very confident mistake
    "ch13.check_bt_loss": (lambda c, r: -torch.log(torch.sigmoid(c - r)).mean(),
                           "logsigmoid"),
    "ch13.check_ideal_margin": (lambda flip: 1 - flip, "whose sigmoid equals it"),
    # the reward model on every row, arithmetic included
    "ch13.check_all_scenarios_reward": (lambda c, task, answer, rm: list(rm(c)),
                                        "arithmetic answer"),
    # log(softmax) then 0 x -inf = nan where the student gives a token ~0
    "ch14.check_token_kl": (lambda s, t: (t.softmax(-1) * (t.softmax(-1).log()
                                          - s.softmax(-1).log())).sum(-1),
                            "log_softmax"),
    "ch14.check_kd_gradient": (lambda s, t, tau: (s / tau).softmax(-1)
                               - (t / tau).softmax(-1), "Short by a factor tau"),
    # the teacher's top-k probabilities not renormalised
    "ch14.check_topk_kl": (_ch14_topk_not_renormalised, "renormalised"),
    # drawn with replacement
    "ch15.check_pass_at_k": (lambda n, c, k: 1 - (1 - c / n) ** k, "with replacement"),
    # collections.Counter.most_common: a missing answer can win
    "ch15.check_majority_vote": (lambda a: max(a, key=a.count), "must not win"),
    # equations only: left to right passes
    "ch15.check_first_wrong_step": (_ch15_equations_only, "after 'now'"),
    "ch15.check_soft_labels": (_ch15_hard_labels, "one answer's grade"),
    "ch21.check_verl_row": (_ch21_answer_not_under_reward_model, "ground_truth"),
    "ch21.check_loss_agg": (lambda t: "token-mean", "averages each completion"),
}


def test_every_checker_has_a_wrong_attempt():
    checkers = set(all_checkers())
    assert len(checkers) >= 20
    missing = sorted(checkers - set(WRONG_ATTEMPTS))
    stale = sorted(set(WRONG_ATTEMPTS) - checkers)
    assert not missing, f"add a wrong attempt to WRONG_ATTEMPTS for {missing}"
    assert not stale, f"WRONG_ATTEMPTS names checkers that do not exist: {stale}"


@pytest.mark.parametrize("key", sorted(WRONG_ATTEMPTS))
def test_checker_rejects_a_wrong_attempt(key, capsys):
    checker = all_checkers()[key]
    attempt, message = WRONG_ATTEMPTS[key]
    with pytest.raises(AssertionError, match=message):
        checker(attempt)
    assert "all cases pass" not in capsys.readouterr().out


def test_package_does_not_reexport_checkers():
    import grpo_lib.exercises as exercises

    assert not [name for name in vars(exercises) if name.startswith("check_")]
    with pytest.raises(ImportError, match=r"exercises\.ch01 .*exercises\.ch09"):
        exec("from grpo_lib.exercises import check_informative_groups", {})
    with pytest.raises(ImportError,
                       match=r"from grpo_lib\.exercises\.ch02 import check_k3"):
        exec("from grpo_lib.exercises import check_k3", {})
    assert not hasattr(exercises, "not_a_checker")
