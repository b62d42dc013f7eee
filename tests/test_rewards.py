"""Tests for grpo_lib.rewards: the seed's worked examples, every function's known values,
adversarial completions (each call < 1 s, never raising), and clear programmer errors."""
import functools
import math
import threading
import time

import pytest

from grpo_lib.rewards import (
    REWARD_FUNCTIONS, CombinedReward, accuracy_reward, answer_anywhere_reward,
    combine_rewards,
    cosine_scaled_reward, countdown_answer_reward, countdown_format_reward,
    countdown_reward, format_reward, language_consistency_reward, length_bonus_reward,
    length_reward,
    countdown_repeat_penalty, countdown_sound_attempt_reward, reasoning_steps_reward,
    repetition_penalty_reward,
    reward_name,
    signed_accuracy_reward, soft_format_reward, soft_overlong_punishment, with_params,
)

# The seed's four outputs for "What is 2 + 3 * 4?" (seed 001, part 1 §8).
O1 = "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>"
O2 = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
O3 = "<answer> 14 </answer>"
O4 = "<think> ...some gibberish reasoning... </think> <answer> 7 </answer>"
SEED = [O1, O2, O3, O4]
GOLD = ["14"] * 4

CD_NUMBERS, CD_TARGET = [45, 43, 83, 38], 33
CD_GOOD = "<think> 83 - 45 = 38 ... </think>\n<answer>83-45-43+38</answer>"

ADVERSARIAL = {
    "none": None, "float": 3.5, "nan": float("nan"), "empty": "", "spaces": "   ",
    "10k chars": "<think> " + "2 + 3 " * 1700 + "</think> <answer> 14 </answer>",
    "1 MB": "<think> " + "a " * 500_000 + "</think> <answer> 14 </answer>",
    "1 MB digits": "9" * 1_000_000,
    "think x1e5": "<think>" * 100_000,
    "answer x1e5": "<answer>" * 100_000 + "</answer>",
    "power tower": "<think> x </think> <answer> 9**9**9**9 </answer>",
    "nested parens": "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>",
    "100k digits": "<answer>" + "1" * 100_000 + "</answer>",
    "div by zero": "<answer> 1 / 0 </answer>",
    "injected": "<think> a </think> <answer> 20 </answer><answer>14</answer>",
    "unicode": "<think> ٣ × ٤ </think> <answer> ١٤ </answer>",
    "latex bomb": "<answer> \\Gamma(99999999) </answer>",
    "chat form": [{"role": "assistant", "content": O2}],
}


@pytest.fixture(scope="module", autouse=True)
def warm_math_verify():
    """Import sympy/math_verify once so the timing asserts measure work, not imports."""
    assert accuracy_reward(["<answer> \\frac{1}{2} </answer>"], answer=["0.5"]) == [1.0]


def timed(fn, *args, limit=1.0, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    elapsed = time.perf_counter() - start
    assert elapsed < limit, f"{reward_name(fn)} took {elapsed:.2f}s (limit {limit}s)"
    assert isinstance(result, list) and all(isinstance(r, float) for r in result)
    return result


# ----------------------------------------------------------------------------- seed examples
def test_seed_worked_example_accuracy_plus_tenth_format():
    """Seed 001 §8: accuracy + 0.1 * format = 0.1, 1.1, 1.0, 0.1 for o1..o4."""
    reward = combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])
    assert reward(SEED, answer=GOLD) == [0.1, 1.1, 1.0, 0.1]
    assert reward.last_breakdown == {"accuracy_reward": [0.0, 1.0, 1.0, 0.0],
                                     "format_reward": [1.0, 1.0, 0.0, 1.0]}


def test_seed_language_consistency_example():
    """Seed 001 §14: 1 * accuracy + 0.2 * language consistency: o1 -> 0.2, o2 -> 1.2."""
    reward = combine_rewards([accuracy_reward, language_consistency_reward], [1.0, 0.2])
    assert reward([O1, O2], answer=["14", "14"]) == [0.2, 1.2]


def test_seed_countdown_example():
    """Seed 001 part 2: the logged episode with reward 1.1 (format 1.0, answer 1.0)."""
    cols = dict(numbers=[CD_NUMBERS], target=[CD_TARGET])
    assert countdown_reward([CD_GOOD], **cols) == [1.1]
    assert countdown_format_reward([CD_GOOD]) == [1.0]
    assert countdown_answer_reward([CD_GOOD], **cols) == [1.0]


# ----------------------------------------------------------------------------- format
def test_format_rewards():
    assert format_reward(SEED) == [1.0, 1.0, 0.0, 1.0]
    assert soft_format_reward(SEED) == [1.0, 1.0, 0.0, 1.0]
    loose = ["Sure! <think> a </think> <answer> 14 </answer> Hope it helps.",
             "<think> a </think> <answer> 20 </answer><answer>14</answer>"]
    assert format_reward(loose) == [0.0, 0.0]
    assert soft_format_reward(loose) == [1.0, 1.0]


# ----------------------------------------------------------------------------- accuracy
def test_accuracy_reward_equivalences():
    completions = [f"<think> x </think> <answer> {a} </answer>" for a in
                   ("14", "14.0", "  14  ", "１４", "١٤", "\\frac{28}{2}", "2 + 12", "15")]
    assert accuracy_reward(completions, answer=["14"] * 8) == [1.0] * 6 + [0.0, 0.0]
    assert accuracy_reward(completions[:1], answer=[14]) == [1.0]
    latex = ["<answer> \\frac{1}{2} </answer>", "<answer> 0.5 </answer>"]
    assert accuracy_reward(latex, answer=["0.5", "\\frac{1}{2}"]) == [1.0, 1.0]


def test_accuracy_reward_strict_vs_lenient():
    texts = ["2 + 3 * 4 = 14", "<answer> 14 </answer>", "<answer> 14 </answer> or 20"]
    assert accuracy_reward(texts, answer=GOLD[:3]) == [0.0, 1.0, 1.0]
    assert accuracy_reward(texts, answer=GOLD[:3], strict=False) == [1.0, 1.0, 0.0]


def test_accuracy_reward_injected_tags_read_the_last_block():
    texts = ["<answer> 20 </answer><answer>14</answer>", "<answer> 14 </answer><answer>20"]
    assert accuracy_reward(texts, answer=["14", "14"]) == [1.0, 1.0]


def test_accuracy_reward_huge_number():
    big = "3" * 100_000
    texts = [f"<answer>{big}</answer>", f"<answer>{big[:-1]}4</answer>"]
    assert timed(accuracy_reward, texts, answer=[big, big]) == [1.0, 0.0]
    assert timed(accuracy_reward, texts, answer=["14", "14"]) == [0.0, 0.0]


def test_accuracy_reward_works_from_a_thread():
    """math_verify's signal-based timeout would raise off the main thread; ours is off."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault(
        "r", accuracy_reward(["<answer> \\frac{1}{2} </answer>"], answer=["0.5"])))
    thread.start()
    thread.join(10)
    assert out["r"] == [1.0]


# ----------------------------------------------------------------------------- countdown
@pytest.mark.parametrize("answer_text, answer_score", [
    ("83-45-43+38", 1.0), ("(83 - 45) - 43 + 38", 1.0), ("38 + 83 - 45 - 43", 1.0),
    ("83-45-43+38+38", 0.0),            # 38 used twice
    ("83-45-38", 0.0),                  # 43 missing
    ("83-45-43+38.0", 0.0),             # a decimal is not a given number
    ("83-45-43+38 ", 1.0), ("٨٣-٤٥-٤٣+٣٨", 1.0),  # unicode digits read as digits
    ("(83-45-43+38)/(45-45)", 0.0), ("83/(45-45)+43-38", 0.0),  # division by zero
    ("83-45-43+37", 0.0),               # wrong numbers
    ("83 - 45 - 43 + 38 = 33", 0.0),    # not an expression
    ("9**9**9**9", 0.0), ("__import__('os')", 0.0), ("(" * 5000 + "1" + ")" * 5000, 0.0),
])
def test_countdown_answer_reward(answer_text, answer_score):
    text = f"<think> t </think>\n<answer>{answer_text}</answer>"
    got = timed(countdown_answer_reward, [text], numbers=[CD_NUMBERS], target=[CD_TARGET])
    assert got == [answer_score]


def test_countdown_division_and_exact_target():
    cols = dict(numbers=[[1, 2, 3]], target=[1])
    assert countdown_answer_reward(["<answer>(1 + 2) / 3</answer>"], **cols) == [1.0]
    assert countdown_answer_reward(["<answer>3 / 2 - 1</answer>"],
                                   numbers=[[3, 2, 1]], target=["0.5"]) == [1.0]


def test_countdown_format_partial_credit():
    texts = ["<think> a </think>\n<answer> 1 </answer>",     # strict: 1.0
             "<think> a </think> junk",                      # think only: 0.1
             "junk <answer> 1 </answer>",                    # answer only: 0.5
             "junk <think> a </think> <answer> 1 </answer>",  # both, not strict: 0.6
             " a </think>\n<answer> 1 </answer>", None, ""]
    assert countdown_format_reward(texts) == pytest.approx([1.0, 0.1, 0.5, 0.6, 0.5, 0, 0])
    # GRPO-Zero's prompt ends with "<think>": the seed checks "<think>" + response.
    assert countdown_format_reward(texts[4:5], response_prefix="<think>") == [1.0]


def test_countdown_reward_is_tenth_format_plus_answer():
    texts = [CD_GOOD, "<answer>83-45-43+38</answer>", "<think> t </think>\n<answer>1</answer>"]
    cols = dict(numbers=[CD_NUMBERS] * 3, target=[CD_TARGET] * 3)
    assert countdown_reward(texts, **cols) == pytest.approx([1.1, 1.05, 0.1])
    assert countdown_reward(texts, format_weight=0.0, **cols) == [1.0, 1.0, 0.0]


def test_countdown_column_errors():
    with pytest.raises(TypeError, match="needs the column 'numbers'"):
        countdown_reward([CD_GOOD], target=[33])
    with pytest.raises(ValueError, match="target has 2 entries but there are 1"):
        countdown_reward([CD_GOOD], numbers=[CD_NUMBERS], target=[33, 33])
    with pytest.raises(ValueError, match="not a number"):
        countdown_reward([CD_GOOD], numbers=[["a", 1]], target=[33])
    with pytest.raises(TypeError, match="list of integers"):
        countdown_reward([CD_GOOD], numbers=[7], target=[33])


# ----------------------------------------------------------------------------- language
def test_language_consistency_reward():
    texts = ["<think> multiply first, then add </think> <answer> 14 </answer>",
             "<think> 先算乘法 3 * 4 = 12 </think> <answer> 14 </answer>",
             "<think> 3 * 4 = 12, 所以 the answer is 14 </think> <answer> 14 </answer>",
             "<think> 2 + 3 = 5 </think> <answer> 5 </answer>",   # symbols only: 1.0
             "no tags at all, plain english",                       # whole text: 1.0
             "<think>   </think> <answer> 1 </answer>",              # blank: floor 0
             None, "", "<think>" * 1000, "<answer> 14 </answer>"]
    assert language_consistency_reward(texts) == pytest.approx(
        [1.0, 0.0, 0.6, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert language_consistency_reward(texts[:3], language="zh") == pytest.approx(
        [0.0, 1.0, 0.4])
    assert language_consistency_reward(texts[:2], language=["zh", "zh"]) == [0.0, 1.0]
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        language_consistency_reward(texts[:1], language="fr")


# ----------------------------------------------------------------------------- steps
def test_reasoning_steps_reward():
    texts = ["Step 1: multiply\nStep 2: add\nStep 3: check",
             "First, multiply. Next, add.",
             "1. multiply\n2. add\n3. check\n4. answer",
             "- a\n- b",                 # the first bullet has no newline before it
             O2, None]
    assert reasoning_steps_reward(texts) == pytest.approx([1, 2 / 3, 1, 1 / 3, 0, 0])
    assert reasoning_steps_reward(texts[1:2], min_steps=2) == [1.0]
    with pytest.raises(ValueError, match="min_steps"):
        reasoning_steps_reward(texts, min_steps=0)


# ----------------------------------------------------------------------------- length
def test_length_reward_kimi():
    # One group of 4: lengths in characters; lambda = 0.5 - (len - min) / (max - min).
    texts = ["<answer>14</answer>", "<think> " + "x" * 30 + " </think><answer>14</answer>",
             "<answer>20</answer>", "<think> " + "y" * 60 + " </think><answer>20</answer>"]
    lengths = [len(t) for t in texts]
    lo, hi = min(lengths), max(lengths)
    lam = [0.5 - (n - lo) / (hi - lo) for n in lengths]
    expected = [lam[0], lam[1], min(0.0, lam[2]), min(0.0, lam[3])]
    assert length_reward(texts, answer=GOLD) == pytest.approx(expected)
    assert expected[0] == 0.5 and expected[2] == 0.0 and expected[3] == -0.5


def test_length_reward_groups_and_tokens():
    texts = ["<answer>14</answer>", "<answer> 14 </answer>"] * 2
    # Two groups of two; per group the shorter correct answer gets +0.5, the longer -0.5.
    assert length_reward(texts, answer=GOLD, num_generations=2) == [0.5, -0.5, 0.5, -0.5]
    # With completion_ids the length is the number of tokens.
    ids = [[1, 2, 3], [1, 2], [1], [1]]
    assert length_reward(texts, answer=GOLD, num_generations=2, completion_ids=ids) == [
        -0.5, 0.5, 0.0, 0.0]
    assert length_reward(["same", "same"], answer=["1", "1"]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="divides the number of completions"):
        length_reward(texts, answer=GOLD, num_generations=3)


def test_cosine_scaled_reward():
    right, wrong = "<answer>14</answer>", "<answer>15</answer>"
    ids0, ids_half, ids_full, ids_over = [], [0] * 50, [0] * 100, [0] * 300
    got = cosine_scaled_reward([right] * 4 + [wrong] * 4, answer=["14"] * 8, max_len=100,
                               completion_ids=[ids0, ids_half, ids_full, ids_over] * 2)
    assert got == pytest.approx([1.0, 0.75, 0.5, 0.5, -1.0, -0.75, -0.5, -0.5])
    assert cosine_scaled_reward([None], answer=["14"]) == [-1.0]


# ----------------------------------------------------------------------------- repetition
def test_repetition_penalty_reward():
    texts = ["a b c a b c", "one two three four", "x " * 1000, "", None, "short"]
    got = repetition_penalty_reward(texts, ngram_size=3, max_penalty=-1.0)
    assert got == pytest.approx([-0.25, 0.0, -(1 - 1 / 998), 0.0, 0.0, 0.0])
    assert repetition_penalty_reward(texts[:1], max_penalty=-0.5) == [-0.125]
    assert math.copysign(1.0, got[1]) == 1.0  # 0.0, not -0.0, when nothing repeats
    with pytest.raises(ValueError, match="max_penalty must be <= 0"):
        repetition_penalty_reward(texts, max_penalty=1.0)


def test_countdown_repeat_penalty_counts_attempts_worked_twice():
    head = "<think> Numbers 1, 13, 14; target 28. "
    miss = "13 * 1 = 13, 13 + 14 = 27, not 28. "
    hit = "14 + 13 = 27, 27 + 1 = 28. </think> <answer> (14 + 13) + 1 </answer>"
    texts = [
        head + miss + hit,  # no attempt twice
        head + miss + miss + hit,  # one of three attempts is a repeat
        head + miss + "13 * 1 = 13, 13 + 14 = 28, not 28. " + hit,  # same steps,
        # another (wrong) result: still the same attempt
        head + miss + miss + miss,  # cut off: every sentence before the end counts
        head + miss + "</think> " + miss + miss,  # only the reasoning is read
        head + "1 * 13 = 13, 13 + 14 = 27, not 28. " + miss + hit,  # 1 * 13 != 13 * 1
        "", None, "no steps at all. none here. ",
    ]
    got = countdown_repeat_penalty(texts)
    assert got == pytest.approx([0.0, -1 / 3, -1 / 3, -2 / 3, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert countdown_repeat_penalty(texts[1:2], max_penalty=-0.5) == [
        pytest.approx(-1 / 6)]
    assert math.copysign(1.0, got[0]) == 1.0  # 0.0, not -0.0, without repeats
    assert REWARD_FUNCTIONS["countdown_repeat_penalty"] is countdown_repeat_penalty
    with pytest.raises(ValueError, match="max_penalty must be <= 0"):
        countdown_repeat_penalty(texts, max_penalty=0.5)
    with pytest.raises(TypeError, match="pass a list of completions"):
        countdown_repeat_penalty("one string")


def test_attempts_and_the_numbers_they_bring_in():
    from grpo_lib.tasks.countdown import attempt_numbers, attempts_of

    text = "<think> 7 + 5 = 12, 12 * 15 = 180. 7 * 5 = 35, 7 + 5 = 12. </think>"
    first, second = attempts_of(text)
    assert attempt_numbers(first) == [5, 7, 15]  # the chain brings in 7, 5, then 15
    assert attempt_numbers(second) == [5, 7]  # a retry of 7, 5 brings in nothing new
    assert attempts_of("no steps here") == [] and attempt_numbers([]) == []


def test_countdown_sound_attempt_reward_pays_the_share_of_sound_work():
    head = "<think> Numbers 7, 5, 15; target 30. "
    texts = [
        head + "7 - 5 = 2, 2 + 15 = 17, 2 * 15 = 30. </think> <answer> (7 - 5) * 15 "
               "</answer>",  # one sound attempt whose last step is retried: 1.0
        head + "7 + 5 = 12, 12 + 15 = 27, not 30. "  # sound
               "7 - 5 = 2, 2 + 2 = 4, not 30. "  # brings in a 2 it was not given
               "7 - 5 = 3, 3 * 15 = 45, not 30. "  # miscomputed
               "7 + 5 = 12, 13 + 15 = 28, not 30. "  # does not continue from 12
               "7 + 5 = 12, 12 + 15 = 27, 12 - 15",  # cut off: sound so far
        head + "7 + 5 = 12, not 30. ",  # leaves 15 out
        head + "7 + 5 = 12, 12 + 15 = 27, not 30. </think> 5 + 5 = 10. ",  # reasoning
        "<think> 15 + 7 = 22, 22 + 5 = 27, not 30. </think>",  # any order of numbers
        "", None, "no steps at all. none here. ",
    ]
    got = countdown_sound_attempt_reward(texts, numbers=[[7, 5, 15]] * len(texts))
    assert got == pytest.approx([1.0, 2 / 5, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    assert countdown_sound_attempt_reward(  # numbers as text are read as numbers
        texts[:1], numbers=[["7", "5", "15"]]) == [1.0]
    assert countdown_sound_attempt_reward(texts[:1], numbers=[[7, 5, 5]]) == [0.0]
    assert REWARD_FUNCTIONS["countdown_sound_attempt_reward"] is \
        countdown_sound_attempt_reward
    with pytest.raises(TypeError, match="needs the column 'numbers'"):
        countdown_sound_attempt_reward(texts)
    with pytest.raises(ValueError, match="is not a number"):
        countdown_sound_attempt_reward(texts[:1], numbers=[["seven", 5, 15]])
    for entry in (None, "7 5 15", 7):
        with pytest.raises(TypeError, match="each numbers entry must be a list"):
            countdown_sound_attempt_reward(texts[:1], numbers=[entry])


def test_soft_overlong_punishment_dapo():
    # L_max = 10, L_cache = 4: 0 up to 6, then (6 - |y|) / 4, then -1 beyond 10.
    texts = ["x" * n for n in (0, 6, 7, 8, 10, 11, 50)]
    got = soft_overlong_punishment(texts, max_completion_len=10, soft_punish_cache=4)
    assert got == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]
    ids = [[0] * 8]
    assert soft_overlong_punishment(["x"], max_completion_len=10, soft_punish_cache=4,
                                    completion_ids=ids) == [-0.5]
    with pytest.raises(ValueError, match="soft_punish_cache < max_completion_len"):
        soft_overlong_punishment(texts, max_completion_len=4, soft_punish_cache=4)


# ----------------------------------------------------------------------------- composing
def test_combine_rewards_names_breakdown_and_nan():
    cosine_200 = with_params(cosine_scaled_reward, max_len=200)
    assert cosine_200.__name__ == "cosine_scaled_reward(max_len=200)"
    combined = combine_rewards([accuracy_reward, format_reward, cosine_200])
    assert isinstance(combined, CombinedReward)
    assert combined.__name__ == ("combined(1*accuracy_reward + 1*format_reward + "
                                 "1*cosine_scaled_reward(max_len=200))")
    parts = combined.breakdown(SEED, answer=GOLD)
    assert list(parts) == ["accuracy_reward", "format_reward",
                           "cosine_scaled_reward(max_len=200)"]
    totals = combined(SEED, answer=GOLD)
    assert totals == pytest.approx([sum(v[i] for v in parts.values()) for i in range(4)])

    def maybe(completions, **kwargs):
        return [None, 1.0, None, 2.0]

    both = combine_rewards([maybe, lambda c, **k: [None] * len(c)], [1.0, 1.0])
    out = both(SEED)
    assert out[1] == 1.0 and out[3] == 2.0 and math.isnan(out[0])
    assert both.names == ["maybe", "<lambda>"]
    twice = combine_rewards([format_reward, format_reward])
    assert twice.names == ["format_reward", "format_reward#2"]
    assert reward_name(functools.partial(length_reward, num_generations=4)) == \
        "length_reward(num_generations=4)"


def test_combine_rewards_errors():
    with pytest.raises(ValueError, match="2 functions but 1 weights"):
        combine_rewards([accuracy_reward, format_reward], [1.0])
    for weight in (math.nan, math.inf):
        with pytest.raises(ValueError, match="each must be a finite number"):
            combine_rewards([accuracy_reward, format_reward], [1.0, weight])
    with pytest.raises(TypeError, match="non-empty list"):
        combine_rewards([])
    bad = combine_rewards([lambda c, **k: [1.0]])
    with pytest.raises(ValueError, match="returned 1 scores for 2 completions"):
        bad(["a", "b"])


# ----------------------------------------------------------------------------- contracts
def test_every_reward_swallows_extra_columns_and_has_a_name():
    cols = dict(answer=["14"], numbers=[[14]], target=[14], prompt=["p"], extra=[1],
                question=["2 + 3 * 4"])
    for name, fn in REWARD_FUNCTIONS.items():
        assert fn.__name__ == name
        assert len(fn([O2], **cols)) == 1


@pytest.mark.parametrize("name", sorted(REWARD_FUNCTIONS))
def test_adversarial_completions_score_within_one_second(name):
    fn = REWARD_FUNCTIONS[name]
    labels = list(ADVERSARIAL)
    completions = [ADVERSARIAL[k] for k in labels]
    n = len(completions)
    cols = dict(answer=["14"] * n, numbers=[[1, 2]] * n, target=[3] * n,
                question=["2 + 3 * 4"] * n)
    scores = dict(zip(labels, timed(fn, completions, **cols)))
    assert all(math.isfinite(s) for s in scores.values())
    floors = {"format_reward": 0.0, "soft_format_reward": 0.0, "accuracy_reward": 0.0,
              "answer_anywhere_reward": 0.0, "signed_accuracy_reward": 0.0,
              "countdown_format_reward": 0.0, "countdown_answer_reward": 0.0,
              "countdown_reward": 0.0, "countdown_value_only_reward": 0.0,
              "countdown_worked_answer_reward": 0.0, "countdown_repeat_penalty": 0.0,
              "countdown_sound_attempt_reward": 0.0, "language_consistency_reward": 0.0,
              "reasoning_steps_reward": 0.0, "repetition_penalty_reward": 0.0,
              "soft_overlong_punishment": 0.0, "length_reward": 0.0,
              "cosine_scaled_reward": -1.0, "length_bonus_reward": 0.0,
              "process_reward": 0.0}
    for label in ("none", "float", "nan", "empty"):
        assert scores[label] == floors[name], (label, scores[label])


def test_adversarial_known_scores():
    labels = list(ADVERSARIAL)
    completions = [ADVERSARIAL[k] for k in labels]
    gold = ["14"] * len(labels)
    acc = dict(zip(labels, accuracy_reward(completions, answer=gold)))
    assert acc["10k chars"] == acc["1 MB"] == acc["injected"] == acc["unicode"] == 1.0
    assert acc["chat form"] == 1.0
    assert acc["power tower"] == acc["nested parens"] == acc["latex bomb"] == 0.0
    assert acc["100k digits"] == acc["div by zero"] == acc["1 MB digits"] == 0.0
    fmt = dict(zip(labels, format_reward(completions)))
    assert fmt["10k chars"] == fmt["1 MB"] == fmt["unicode"] == 1.0
    assert fmt["injected"] == fmt["think x1e5"] == fmt["answer x1e5"] == 0.0
    lenient = dict(zip(labels, accuracy_reward(completions, answer=gold, strict=False)))
    assert lenient["1 MB digits"] == 0.0 and lenient["1 MB"] == 1.0


def test_programmer_errors_say_what_to_pass():
    with pytest.raises(TypeError, match=r"accuracy_reward needs the column 'answer'"):
        accuracy_reward(SEED)
    with pytest.raises(ValueError, match="answer has 1 entries but there are 4"):
        accuracy_reward(SEED, answer=["14"])
    with pytest.raises(TypeError, match="answer must be a list"):
        accuracy_reward(SEED, answer="14")
    with pytest.raises(TypeError, match="pass a list of completions"):
        format_reward(O2)
    with pytest.raises(TypeError, match="pass a list of completions"):
        format_reward(None)
    assert format_reward([]) == [] and accuracy_reward([], answer=[]) == []


# ----------------------------------------------------------------------------- checkers
def test_chapter3_checkers_accept_solutions_and_reject_mistakes():
    from grpo_lib.exercises.ch03 import (
        check_soft_overlong_punishment, check_spray_hack, check_strict_format_reward)

    assert check_strict_format_reward(format_reward)
    with pytest.raises(AssertionError, match="expected 0.0, got 1.0"):
        check_strict_format_reward(soft_format_reward)

    def overlong(lengths, max_len, cache):
        ids = [[0] * n for n in lengths]
        return soft_overlong_punishment(["x"] * len(lengths), max_completion_len=max_len,
                                        soft_punish_cache=cache, completion_ids=ids)

    assert check_soft_overlong_punishment(overlong)
    with pytest.raises(AssertionError, match="sign is flipped"):
        check_soft_overlong_punishment(lambda *a: [-x for x in overlong(*a)])

    spray = ("<think> spray </think> <answer> "
             + " ".join(str(k) for k in range(1000)) + " </answer>")
    assert check_spray_hack(spray)
    with pytest.raises(AssertionError, match="does not pay for"):
        check_spray_hack("<think> a </think> <answer> 14 </answer>")
    with pytest.raises(AssertionError, match="strict format"):
        check_spray_hack(" ".join(str(k) for k in range(1000)))


def test_answer_anywhere_reward_pays_the_loophole():
    # right answer, gold inside a wrong answer, gold as an intermediate result, miss
    texts = ["<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
             "<think> ... </think> <answer> 140 </answer>",
             "<think> 2 + 12 = 14 </think> <answer> 15 </answer>",
             "<think> 3 * 4 = 12 </think> <answer> 15 </answer>",
             None]
    gold = ["14"] * 5
    assert answer_anywhere_reward(texts, answer=gold) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert accuracy_reward(texts, answer=gold) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_signed_accuracy_reward_pays_no_answer_above_a_wrong_one():
    # right, wrong, no answer block (plain text), unclosed block, empty block, None
    texts = ["<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
             "<think> 3 * 4 = 12 </think> <answer> 15 </answer>",
             "3 * 4 = 12, 2 + 12 = 14. The answer is 14.",
             "<think> 3 * 4 = 12 </think> <answer> 14",
             "<answer> </answer>",
             None]
    gold = ["14"] * 6
    assert signed_accuracy_reward(texts, answer=gold) == [1.0, -1.0, 0.0, 0.0, -1.0,
                                                          0.0]
    harsh = signed_accuracy_reward(texts, answer=gold, wrong_score=-2.0)
    assert harsh == [1.0, -2.0, 0.0, 0.0, -2.0, 0.0]
    # break-even: answering with success p pays p + (1 - p) w, as much as not
    # answering (0) at p = -w / (1 - w): 1 of 2 right at w = -1, 2 of 3 at w = -2
    for w, right in ((-1.0, 1), (-2.0, 2)):
        batch = texts[:1] * right + texts[1:2]  # `right` right answers, one wrong
        paid = signed_accuracy_reward(batch, answer=gold[:len(batch)], wrong_score=w)
        assert math.isclose(sum(paid) / len(paid), 0.0, abs_tol=1e-12)
        assert signed_accuracy_reward(texts[2:3], answer=gold[:1]) == [0.0]
    for bad in (0.5, float("nan"), float("-inf")):
        with pytest.raises(ValueError, match="wrong_score must be a finite number"):
            signed_accuracy_reward(texts, answer=gold, wrong_score=bad)
    with pytest.raises(TypeError, match="needs the column 'answer'"):
        signed_accuracy_reward(texts)


def test_length_bonus_reward_counts_tokens_and_caps_at_one():
    texts = ["<answer> 14 </answer>", "x" * 500, None]
    ids = [[1] * 48, [1] * 200, []]
    assert length_bonus_reward(texts, completion_ids=ids) == [0.5, 1.0, 0.0]
    assert length_bonus_reward(texts, max_tokens=400) == [21 / 400, 1.0, 0.0]
    for bad in (0, math.nan):  # NaN paid every completion the full bonus
        with pytest.raises(ValueError, match="max_tokens must be >= 1"):
            length_bonus_reward(texts, max_tokens=bad)
    with pytest.raises(ValueError, match="min_steps must be >= 1"):
        reasoning_steps_reward(texts, min_steps=math.nan)
    with pytest.raises(ValueError, match="max_len must be positive"):
        cosine_scaled_reward(texts, answer=["14"] * 3, max_len=math.nan)
    for target in ("1e100000000", "9" * 50, "3 + 4"):  # Fraction would take minutes
        with pytest.raises(ValueError, match="target entry .* is not a number"):
            countdown_answer_reward(["<answer> 1 </answer>"], numbers=[[1]],
                                    target=[target])
    assert countdown_answer_reward(["<answer> 3 + 4 </answer>"], numbers=[[3, 4]],
                                   target=["7"]) == [1.0]



def test_substring_correctness_reads_greedily_and_fast():
    """Chapter 3's hackable rule matches the greedy pattern it names, from the first
    '<answer>' to the last '</answer>', and reads 64,000 open tags in linear time
    (the regex it replaced took seconds)."""
    from grpo_lib.exercises.ch03 import substring_correctness

    cases = [("<answer> 14 </answer>", 1.0), ("<answer> 1 </answer> <answer> 4 </answer>",
             0.0), ("<answer> 0 14 </answer> x </answer>", 1.0),
             ("</answer> 14 <answer>", 0.0), ("<answer></answer>14</answer>", 1.0),
             ("<answer> 14", 0.0), (None, 0.0)]
    texts, want = zip(*cases)
    assert substring_correctness(list(texts), answer=["14"] * len(texts)) == list(want)
    assert timed(substring_correctness, ["<answer>" * 64_000], answer=["14"]) == [0.0]
