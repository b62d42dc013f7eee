"""The designed Countdown corpus (grpo_lib.countdown_corpus), the Countdown verdicts
and the Countdown pretraining path."""
import json
import random
import re
import time
from collections import Counter
from fractions import Fraction

import pytest

from transformers import AutoTokenizer

from grpo_lib import countdown_corpus as cc
from grpo_lib.evaluation import completion_correct
from grpo_lib.rewards import (COUNTDOWN_VERDICTS, countdown_answer_reward,
                              countdown_format_reward, countdown_value_only_reward,
                              countdown_verdict)
from grpo_lib.safe_math import expression_literals, safe_eval
from grpo_lib.tasks.countdown import DATA_DIR

PROBLEM = {"numbers": [1, 13, 14], "target": 28}
FOUR = {"numbers": [7, 16, 4, 5], "target": 18}
CHAIN_BASE = DATA_DIR.parents[0] / "models" / "tiny-qwen2-countdown-chain-base"
DESIGNED_VERDICTS = {"correct": "correct", "give_up": "wrong_value",
                     "drop_number": "wrong_numbers_hits_target"}  # a flaw's verdict


def train_rows(n=300):
    lines = (DATA_DIR / "train.jsonl").read_text().splitlines()[:n]
    return [json.loads(line) for line in lines]


def draws(attempt, max_value, seed=0):
    """``(numbers, (steps, expression, value))`` of ``attempt`` on 200 random
    problems (a stuck draw is skipped, as the corpus skips it)."""
    rng = random.Random(seed)
    for _ in range(200):
        numbers = [rng.randint(1, 20) for _ in range(rng.choice([3, 4]))]
        drawn = attempt(numbers, rng, max_value)
        if drawn is not None:
            yield numbers, drawn


@pytest.mark.parametrize("attempt, max_value", [(cc.random_attempt, cc.MAX_VALUE),
                                                (cc.chain_attempt, 100)])
def test_an_attempt_is_a_worked_expression_over_all_numbers(attempt, max_value):
    seen = 0
    for numbers, (steps, expression, value) in draws(attempt, max_value):
        seen += 1
        assert len(steps) == len(numbers) - 1
        assert safe_eval(expression) == Fraction(value) == Fraction(steps[-1][3])
        assert sorted(expression_literals(expression)) == sorted(numbers)
        for a, op, b, v in steps:  # every step's arithmetic is right, whole, small
            assert safe_eval(f"{a} {op} {b}") == v and 0 <= v <= max_value
    assert seen >= 150


def test_attempt_text_says_hit_or_miss():
    steps = [(14, "+", 13, 27), (27, "+", 1, 28)]
    assert cc.attempt_text(steps, 28) == "14 + 13 = 27, 27 + 1 = 28."
    assert cc.attempt_text(steps, 30) == "14 + 13 = 27, 27 + 1 = 28, not 30."


@pytest.mark.parametrize("behaviour, verdict", [
    ("correct", "correct"), ("give_up", "wrong_value"),
    ("drop_number", "wrong_numbers_hits_target"), ("no_tags", "no_answer"),
])
def test_each_behaviour_earns_its_designed_verdict(behaviour, verdict):
    rng, seen = random.Random(1), 0
    for problem in train_rows(60):
        text = cc.render_response(problem, behaviour, rng)
        if text is None:  # no attempt of that kind was found: the caller redraws
            continue
        seen += 1
        assert countdown_verdict(text, problem["numbers"], problem["target"]) == verdict
    assert seen >= 20


def test_broken_format_loses_format_credit_and_correct_ones_keep_it():
    rng = random.Random(2)
    texts = {b: [t for p in train_rows(40)
                 if (t := cc.render_response(p, b, rng)) is not None]
             for b in ("correct", "unclosed_think", "no_tags")}
    assert set(countdown_format_reward(texts["correct"])) == {1.0}
    assert max(countdown_format_reward(texts["unclosed_think"])) < 1.0
    assert max(countdown_format_reward(texts["no_tags"])) == 0.0


def test_flaws_follow_their_visible_triggers():
    mix, rng = cc.CountdownMix(), random.Random(3)
    three = Counter(cc.choose_behaviour({"numbers": [1, 2, 3], "target": 10}, mix, rng)
                    for _ in range(4000))
    four = Counter(cc.choose_behaviour({"numbers": [1, 2, 3, 4], "target": 10}, mix,
                                       rng) for _ in range(4000))
    big = Counter(cc.choose_behaviour({"numbers": [1, 2, 3], "target": 60}, mix, rng)
                  for _ in range(4000))
    assert four["give_up"] > 3 * three["give_up"]
    assert four["drop_number"] > 3 * three["drop_number"]
    assert big["no_tags"] + big["unclosed_think"] > 5 * (three["no_tags"]
                                                         + three["unclosed_think"])


def test_documents_are_reproducible_and_checked():
    rows = train_rows(50)
    a = cc.countdown_documents(rows, 30, seed=4)
    assert a == cc.countdown_documents(rows, 30, seed=4)
    assert a != cc.countdown_documents(rows, 30, seed=5)
    assert {d["behaviour"] for d in a} <= set(cc.BEHAVIOURS)
    with pytest.raises(ValueError, match="at least one problem"):
        cc.countdown_documents([], 3)
    with pytest.raises(ValueError, match="give_up_rate"):
        cc.CountdownMix(give_up_rate=1.5)
    with pytest.raises(ValueError, match="unknown behaviour"):
        cc.render_response(PROBLEM, "cheat", random.Random(0))


def answer(expression):
    return f"<think> ... </think> <answer> {expression} </answer>"


@pytest.mark.parametrize("text, verdict", [
    (answer("(14 + 13) + 1"), "correct"),
    (answer("14 * (1 + 1)"), "wrong_numbers_hits_target"),  # 1 reused, 13 dropped
    (answer("14 + 14"), "wrong_numbers_hits_target"),
    (answer("20 + 8"), "wrong_numbers_hits_target"),  # numbers of its own
    (answer("13 + 14"), "wrong_numbers"),
    (answer("13 + 14 - 1"), "wrong_value"),
    (answer("9**9**9**9"), "not_an_expression"),
    (answer("28.0"), "not_an_expression"),
    (answer("__import__('os')"), "not_an_expression"),
    (answer("(14 + 13) / (1 - 1)"), "not_an_expression"),  # division by zero
    ("14 + 13 + 1", "no_answer"), ("", "no_answer"), (None, "no_answer"),
])
def test_countdown_verdict_names_why(text, verdict):
    t0 = time.perf_counter()
    assert countdown_verdict(text, PROBLEM["numbers"], PROBLEM["target"]) == verdict
    assert time.perf_counter() - t0 < 0.5
    assert verdict in COUNTDOWN_VERDICTS
    reward = countdown_answer_reward([text], numbers=[PROBLEM["numbers"]],
                                     target=[PROBLEM["target"]])
    assert reward == [float(verdict == "correct")]


def test_countdown_verdict_refuses_malformed_problems():
    with pytest.raises(TypeError, match="list of integers"):
        countdown_verdict(answer("1"), "1, 2", 3)
    with pytest.raises(ValueError, match="not a number"):
        countdown_verdict(answer("1"), [1, 2], "three")


def test_completion_correct_reads_the_row_kind():
    assert completion_correct(answer("(14 + 13) + 1"), PROBLEM)
    assert not completion_correct(answer("28"), PROBLEM)  # the value alone is no answer
    assert completion_correct(answer("14"), {"answer": "14"})
    assert not completion_correct(answer("15"), {"answer": "14"})
    assert not completion_correct(answer("14"), {})


def test_countdown_tokenizer_shortens_the_prompt_and_round_trips():
    from grpo_lib.models import build_tokenizer
    from grpo_lib.tasks.countdown import countdown_prompt

    cd, ar = build_tokenizer(task="countdown"), build_tokenizer()
    prompt = ar.apply_chat_template(countdown_prompt([1, 13, 14], 28), tokenize=False)
    assert len(cd(prompt)["input_ids"]) < 0.7 * len(ar(prompt)["input_ids"])
    text = "<think> 13 * 1 = 13, not 28. </think> <answer> (14 + 13) + 1 </answer>"
    assert cd.decode(cd(text)["input_ids"]) == text
    with pytest.raises(ValueError, match="no tokenizer corpus"):
        build_tokenizer(task="chess")


def test_countdown_pretraining_runs_and_continued_pretraining_keeps_the_tokenizer(
        tmp_path):
    from grpo_lib.models import load_model_and_tokenizer
    from grpo_lib.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(size="micro", steps=2, batch_size=4, task="countdown",
                         progress=False)
    first = pretrain(cfg, tmp_path / "cd", eval_n=0)
    card = (first / "README.md").read_text()
    assert "--task countdown" in card and "CountdownMix" in card
    more = PretrainConfig(size="micro", steps=2, batch_size=4, task="countdown",
                          init_from=str(first), lr=1e-3, progress=False)
    second = pretrain(more, tmp_path / "cd2", eval_n=0)
    _, tok1 = load_model_and_tokenizer(first)
    _, tok2 = load_model_and_tokenizer(second)
    assert tok1.get_vocab() == tok2.get_vocab()
    assert f"--init-from {first}" in (second / "README.md").read_text()
    with pytest.raises(ValueError, match="no pretraining corpus"):
        pretrain(PretrainConfig(size="micro", steps=1, batch_size=2, task="chess"),
                 tmp_path / "x", eval_n=0)


def test_the_value_only_monitor_pays_the_hack_and_the_right_answers():
    texts = [answer("(14 + 13) + 1"), answer("14 + 14"), answer("13 + 14"),
             answer("9**9**9**9"), "no answer"]
    paid = countdown_value_only_reward(texts, target=[28] * 5)
    assert paid == [1.0, 1.0, 0.0, 0.0, 0.0]
    right = countdown_answer_reward(texts, numbers=[[1, 13, 14]] * 5, target=[28] * 5)
    assert [p - r for p, r in zip(paid, right)] == [0.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("name, base, trained_on", [
    ("countdown_tiny.yaml", "tiny-qwen2-countdown-base",
     {"countdown_answer_reward": 1.0, "countdown_format_reward": 0.1}),
    ("countdown_chain_tiny.yaml", "tiny-qwen2-countdown-chain-base",
     {"countdown_worked_answer_reward": 1.0})])
def test_the_countdown_configs_load_with_the_monitor_at_weight_zero(name, base,
                                                                    trained_on):
    from grpo_lib.trainer import load_config

    root = DATA_DIR.parents[1]
    cfg = load_config(root / "configs" / name)
    weights = dict(zip(cfg.reward_funcs, cfg.reward_weights))
    assert {k: w for k, w in weights.items() if w} == trained_on
    assert weights["countdown_value_only_reward"] == 0.0  # logged, never paid
    assert cfg.task == "countdown"
    assert cfg.model_name_or_path == f"data/models/{base}"
    assert (root / cfg.model_name_or_path / "config.json").exists()


def test_every_trace_starts_by_copying_the_problem():
    for doc in cc.countdown_documents(train_rows(40), 40, seed=6):
        numbers = re.search(r"Using the numbers \[(.*?)\]", doc["prompt"][0]["content"])
        target = re.search(r"equals (\d+)\.", doc["prompt"][0]["content"])
        opening = f"Numbers {numbers.group(1)}; target {target.group(1)}."
        assert doc["response"].removeprefix("<think> ").startswith(opening)
    assert cc.restate([1, 13, 14], 28) == "Numbers 1, 13, 14; target 28."


def test_a_chain_attempt_combines_the_running_value_with_the_next_number():
    for _, (steps, _, value) in draws(cc.chain_attempt, 100):
        results = [v for *_, v in steps]
        assert [a for a, *_ in steps[1:]] == results[:-1] and results[-1] == value
    steps = [(14, "+", 13, 27), (27, "+", 1, 28)]
    assert cc.attempt_text(steps, 28) == "14 + 13 = 27, 27 + 1 = 28."


def test_the_chain_mix_draws_chains_and_keeps_the_flaws_and_verdicts():
    mix = cc.COUNTDOWN_MIXES["chain"]
    assert (mix.attempt, mix.max_value) == ("chain", 100)
    assert cc.COUNTDOWN_MIXES["tree"] == cc.CountdownMix()
    rng = random.Random(7)
    for behaviour, verdict in DESIGNED_VERDICTS.items():
        seen = 0
        for problem in train_rows(40):
            text = cc.render_response(problem, behaviour, rng, mix)
            if text is None:
                continue
            seen += 1
            assert countdown_verdict(text, problem["numbers"],
                                     problem["target"]) == verdict
            # the worked results stay within the mix's max_value
            results = [int(v) for v in re.findall(r"= (\d+)", text)]
            assert max(results) <= 100
        assert seen >= 15
    docs = cc.countdown_documents(train_rows(30), 20, mix=mix, seed=1)
    assert docs != cc.countdown_documents(train_rows(30), 20, seed=1)
    with pytest.raises(ValueError, match="attempt must be one of"):
        cc.CountdownMix(attempt="random")
    with pytest.raises(ValueError, match="max_value"):
        cc.CountdownMix(max_value=0)


def test_pretraining_on_the_chain_mix_records_it_in_the_card(tmp_path):
    from grpo_lib.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(size="micro", steps=1, batch_size=2, task="countdown",
                         countdown_mix="chain", progress=False)
    card = (pretrain(cfg, tmp_path / "chain", eval_n=0) / "README.md").read_text()
    assert "--countdown-mix chain" in card and '"attempt": "chain"' in card
    with pytest.raises(ValueError, match="unknown Countdown corpus mix"):
        pretrain(PretrainConfig(size="micro", steps=1, batch_size=2, task="countdown",
                                countdown_mix="smart", progress=False),
                 tmp_path / "x", eval_n=0)


def test_worked_steps_reads_each_step_and_checks_it():
    from grpo_lib.tasks.countdown import worked_steps

    text = ("<think> Numbers 1, 13, 14; target 28. 13 * 14 = 180, 180 + 1 = 181, "
            "not 28. 14 / 0 = 3, 27 / 2 = 13, 26 / 2 = 13, 3.5 + 1 = 4.5. </think>")
    assert worked_steps(text) == [(13, "*", 14, 180, False), (180, "+", 1, 181, True),
                                  (14, "/", 0, 3, False), (27, "/", 2, 13, False),
                                  (26, "/", 2, 13, True)]
    assert worked_steps(None) == [] == worked_steps("no steps")
    rng = random.Random(0)
    for problem in train_rows(20):  # the corpus's own steps are all right
        for behaviour in ("correct", "give_up"):
            text = cc.render_response(problem, behaviour, rng)
            if text:
                assert all(ok for *_, ok in worked_steps(text))


def test_the_worked_answer_reward_pays_only_answers_the_work_shows():
    from grpo_lib.rewards import countdown_worked_answer_reward as worked

    numbers, target = [4, 4, 12], 44
    texts = {
        "shown": "<think> 4 + 12 = 16, not 44. 4 * 12 = 48, 48 - 4 = 44. </think> "
                 "<answer> (4 * 12) - 4 </answer>",
        "lucky": "<think> 4 * 12 = 88, 88 - 4 = 84. </think> "
                 "<answer> (4 * 12) - 4 </answer>",
        "a wrong step on the way": "<think> 4 + 12 = 17, not 44. 4 * 12 = 48, "
                                   "48 - 4 = 44. </think> <answer> (4 * 12) - 4 </answer>",
        "last step misses": "<think> 4 * 12 = 48, 48 - 4 = 44, not 44. 4 + 4 = 8. "
                            "</think> <answer> (4 * 12) - 4 </answer>",
        "no work": "<answer> (4 * 12) - 4 </answer>",
        "shown, wrong answer": "<think> 4 * 12 = 48, 48 - 4 = 44. </think> "
                               "<answer> (4 * 12) + 4 </answer>",
    }
    unread = {  # a wrong step the step reader cannot read is work not shown
        "two spaces": "4 *  12 = 88", "a times sign": "4 × 12 = 88",
        "a division sign": "12 ÷ 4 = 2", "a negative result": "5 - 8 = -4",
        "a decimal result": "4 * 12 = 88.0", "a 13-digit number": "9" * 13 + " + 1 = 2"}
    for name, step in unread.items():
        texts[name] = (f"<think> {step}, 4 * 12 = 48, 48 - 4 = 44. </think> "
                       "<answer> (4 * 12) - 4 </answer>")
    scores = dict(zip(texts, worked(list(texts.values()), numbers=[numbers] * 12,
                                    target=[target] * 12)))
    assert scores == {"shown": 1.0, "lucky": 0.0, "a wrong step on the way": 0.0,
                      "last step misses": 0.0, "no work": 0.0,
                      "shown, wrong answer": 0.0} | {name: 0.0 for name in unread}
    long_step = "9" * 5000 + " + 1 = 2. 4 * 12 = 48, 48 - 4 = 44."  # no int() of it
    assert worked([f"<think> {long_step} </think> <answer> (4 * 12) - 4 </answer>"],
                  numbers=[numbers], target=[target]) == [0.0]
    rng = random.Random(0)  # the corpus's right answers all show their work
    for problem in train_rows(30):
        text = cc.render_response(problem, "correct", rng,
                                  cc.COUNTDOWN_MIXES["chain"])
        if text:
            assert worked([text], numbers=[problem["numbers"]],
                          target=[problem["target"]]) == [1.0]


def test_flawless_search_answers_within_the_budget_or_reports_the_cut():
    from grpo_lib.models import build_tokenizer
    tok = build_tokenizer()
    easy = {"numbers": [2, 3], "target": 5}  # a chain of two numbers: 1 op in 4 hits
    assert cc.flawless_search(easy, tok, 10_000, random.Random(0))
    assert not cc.flawless_search(easy, tok, 5, random.Random(0))  # no room to answer
    # a trace that reached the target fits: the budget counts the whole response
    hits = [cc.flawless_search(PROBLEM, tok, 256, random.Random(s)) for s in range(20)]
    assert 0 < sum(hits) <= 20
    # an unreachable target ends at max_draws (or at the budget), never hangs
    start = time.perf_counter()
    assert not cc.flawless_search({"numbers": [1, 1], "target": 50}, tok, 10**9,
                                  random.Random(0), max_draws=200)
    assert time.perf_counter() - start < 5


def test_flawless_search_succeeds_more_often_with_more_tokens():
    from grpo_lib.models import build_tokenizer
    tok = build_tokenizer()
    rows = train_rows(40)
    rate = {budget: sum(cc.flawless_search(r, tok, budget, random.Random(i))
                        for i, r in enumerate(rows)) for budget in (64, 512)}
    assert rate[64] < rate[512]


def mix_draws(name, problems, seed):
    """``(numbers, target, (steps, expression, value))``: 20 draws of the mix's
    attempt on each problem (a stuck draw is skipped)."""
    rng = random.Random(seed)
    for problem in problems:
        numbers, target = problem["numbers"], problem["target"]
        for _ in range(20):
            attempt = cc.draw_attempt(numbers, target, rng, cc.COUNTDOWN_MIXES[name])
            if attempt is not None:
                yield numbers, target, attempt


def test_an_aimed_attempt_takes_an_operator_that_reaches_the_target_when_one_does():
    for numbers, target, (steps, expression, value) in mix_draws(
            "aimed", train_rows(60), 3):
        a, _, b, result = steps[-1]
        reachable = [v for _, v in cc._steps_of(a, b, 100)]
        assert (value == target) == (target in reachable)  # aimed: hit if possible
        assert safe_eval(expression) == Fraction(value) == Fraction(result)
        assert sorted(expression_literals(expression)) == sorted(numbers)


def test_a_lookahead_attempt_aims_its_next_to_last_step_too():
    four = [p for p in train_rows(200) if len(p["numbers"]) == 4][:40]
    for _, target, (steps, _, value) in mix_draws("lookahead", four, 5):
        (x, _, c, _), (_, _, d, _) = steps[-2], steps[-1]
        # a hit was within reach of the next-to-last step: the attempt found one
        within = any(v == target for _, mid in cc._steps_of(x, c, 100)
                     for _, v in cc._steps_of(mid, d, 100))
        assert (value == target) == within
    # searched flawlessly, aiming answers more problems in 256 tokens than chains do
    tok = AutoTokenizer.from_pretrained(CHAIN_BASE)
    problems = train_rows(60)
    rates = {}
    for name in ("chain", "aimed", "lookahead"):
        rng = random.Random(0)
        rates[name] = sum(cc.flawless_search(p, tok, 256, rng, cc.COUNTDOWN_MIXES[name])
                          for p in problems) / len(problems)
    assert rates["chain"] < rates["aimed"] < rates["lookahead"]


def test_a_spelled_attempt_writes_each_operator_of_its_last_step_until_one_hits():
    for numbers, target, (steps, expression, value) in mix_draws(
            "spelled", train_rows(60), 7):
        tries = steps[len(numbers) - 2:]  # the chain's steps before the last: n - 2
        a, _, b, _ = steps[-1]
        assert all((x, y) == (a, b) for x, _, y, _ in tries)
        reachable = dict(cc._steps_of(a, b, 100))
        written = [op for _, op, _, _ in tries]
        assert written == [op for op in "+-*/" if op in reachable][:len(written)]
        assert all(reachable[op] == v for _, op, _, v in tries)  # every try is right
        hit = target in reachable.values()
        assert (value == target) == hit  # the attempt hits whenever it can
        if not hit:  # a miss writes every operator
            assert len(written) == len(reachable)
        assert [v == target for *_, v in tries].count(True) == int(hit)  # stops there
        assert safe_eval(expression) == Fraction(value)
        assert sorted(expression_literals(expression)) == sorted(numbers)
    # a single number has no step to try or aim: the attempt is the number itself
    rng = random.Random(0)
    for draw in (cc.spelled_attempt, cc.aimed_attempt):
        assert draw([7], 7, rng) == ([], "7", 7)
    # the work is on the page: the rendered trace holds every try as a worked step
    steps, _, _ = cc.spelled_attempt([1, 13, 14], 30, rng)
    assert cc.attempt_text(steps, 30).endswith(", not 30.")


def test_aimed_last_steps_counts_the_attempts_that_could_hit_and_did():
    text = ("<think> Numbers 1, 13, 14; target 28. 13 * 1 = 13, 13 + 14 = 27, not 28. "
            "14 + 13 = 27, 27 * 1 = 27, not 28. 13 - 1 = 12, 12 + 14 = 26, not 28. "
            "14 + 13 = 27, 27 + 1 = 28. </think> <answer> (14 + 13) + 1 </answer>")
    assert cc.aimed_last_steps(text) == (2, 1)  # 27 and 1 could hit twice, did once
    assert cc.aimed_last_steps("<answer> 1 + 2 </answer>") == (0, 0)  # no trace
    assert cc.aimed_last_steps("<think> Numbers 3, 4; target 7. </think>") == (0, 0)
    # an adversarial trace: digits past int()'s limit are no step and no target
    huge = "9" * 5000
    assert cc.aimed_last_steps(f"target {huge}. {huge} + 1 = {huge}.") == (0, 0)
    assert cc.aimed_last_steps(f"target 28. {huge} + 1 = 2. 27 + 1 = 28.") == (1, 1)


def test_the_compact_mix_writes_the_spelled_search_in_fewer_tokens():
    from dataclasses import replace

    from grpo_lib.tasks.countdown import worked_steps

    compact = cc.COUNTDOWN_MIXES["compact"]
    assert (compact.attempt, compact.compact) == ("spelled", True)
    spaced = replace(compact, compact=False)
    tok = AutoTokenizer.from_pretrained(CHAIN_BASE)
    for behaviour, verdict in DESIGNED_VERDICTS.items():
        seen = 0
        for i, problem in enumerate(train_rows(30)):
            text = cc.render_response(problem, behaviour, random.Random(i), compact)
            twin = cc.render_response(problem, behaviour, random.Random(i), spaced)
            assert (text is None) == (twin is None)
            if text is None:
                continue
            seen += 1
            # the same search, step for step, written without the spaces
            assert worked_steps(text) == worked_steps(twin) != []
            assert all(ok for *_, ok in worked_steps(text))
            assert " + " not in text and text.count("</answer>") == 1
            assert countdown_verdict(text, problem["numbers"],
                                     problem["target"]) == verdict
            opening = cc.restate(problem["numbers"], problem["target"])
            assert text.startswith(f"<think> {opening} ")  # the spelled copy
            assert cc.aimed_last_steps(text) == cc.aimed_last_steps(twin)
            length = len(tok(text, add_special_tokens=False)["input_ids"])
            assert length < len(tok(twin, add_special_tokens=False)["input_ids"])
        assert seen >= 10
    steps = [(14, "+", 13, 27), (27, "+", 1, 28)]
    assert cc.attempt_text(steps, 30, compact=True) == "14+13 = 27, 27+1 = 28, not 30."
    assert worked_steps("14+13=27, 27 + 1 = 28") == [(14, "+", 13, 27, True),
                                                      (27, "+", 1, 28, True)]


def test_numbers_left_follows_a_chain_and_its_spelled_tries():
    chain = ([(14, "+", 13, 27), (27, "+", 1, 28)], "(14 + 13) + 1", 28)
    assert cc.numbers_left(chain, [1, 13, 14]) == [[1], []]
    assert (cc.attempt_text(chain[0], 28, left=cc.numbers_left(chain, [1, 13, 14]))
            == "14 + 13 = 27 (left 1), 27 + 1 = 28.")
    # spelled tries of the last pair use no number; duplicates are counted, and a
    # try that repeats the pair before it (5 * 1 = 5, then 5 + 1) still uses one
    spelled = ([(5, "*", 1, 5), (5, "+", 1, 6), (5, "-", 1, 4)], "(5 * 1) - 1", 4)
    assert cc.numbers_left(spelled, [5, 1, 1]) == [[1], [], []]
    # a chain over three of four numbers (the drop-number flaw) shows the one left
    dropped = ([(9, "-", 4, 5), (5, "*", 19, 95)], "(9 - 4) * 19", 95)
    assert cc.numbers_left(dropped, [9, 19, 8, 4]) == [[19, 8], [8]]
    with pytest.raises(ValueError, match="no longer holds"):
        cc.numbers_left(([(9, "+", 9, 18)], "9 + 9", 18), [9, 4, 1])
    with pytest.raises(ValueError, match="ledger needs a chain"):
        cc.CountdownMix(ledger=True)  # the tree style combines its own results


def test_the_ledger_mix_keeps_the_spelled_search_and_its_books_balance():
    from grpo_lib.tasks.countdown import worked_steps

    ledger = cc.COUNTDOWN_MIXES["ledger"]
    assert (ledger.attempt, ledger.ledger) == ("spelled", True)
    for behaviour, verdict in DESIGNED_VERDICTS.items():
        seen = 0
        for i, problem in enumerate(train_rows(30)):
            text = cc.render_response(problem, behaviour, random.Random(i), ledger)
            if text is None:
                continue
            seen += 1
            assert countdown_verdict(text, problem["numbers"],
                                     problem["target"]) == verdict
            assert all(ok for *_, ok in worked_steps(text))  # the lists are no steps
            lists = re.findall(r"\(left ([\d, ]+)\)", text)
            assert lists and text.count("(left") == len(lists)
            for listed in lists:  # every list is a sub-multiset of the numbers
                held = Counter(int(n) for n in listed.split(", "))
                assert not held - Counter(problem["numbers"])
            if behaviour == "correct":  # the hit uses every number: none left
                assert re.search(r"= \d+ \(left [^)]*\)\. </think>", text) is None
        assert seen >= 10
