"""grpo_lib.test_time: votes, pass@k, step grades, budget forcing and searches."""
import math
from itertools import combinations
from math import comb

import pytest
import torch

from grpo_lib.models import build_tokenizer, load_model_and_tokenizer, random_model
from grpo_lib.reward_model import RewardModel, score_texts
from grpo_lib.rewards import REWARD_FUNCTIONS, process_reward
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.test_time import (WAIT_CUE, Node, _choose, _next_step, backup, expand,
                                first_wrong_step, force_wait, learned_value,
                                majority_vote, pass_at_k, process_ok, rollout_value,
                                select, settled_text, step_labels, step_prefixes,
                                step_search, step_value, train_value_model,
                                tree_search, ucb, value_targets, verified_vote,
                                vote_at_k)

TINY_BASE = DATA_DIR.parents[1] / "data" / "models" / "tiny-qwen2-base"
Q = "3 + 6 + 5 * 2"  # = 19; left to right gives 28
RIGHT = ("<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. "
         "Finally 9 + 10 = 19. </think> <answer> 19 </answer>")
LEFT_TO_RIGHT = ("<think> First 3 + 6 = 9, now 9 + 5 * 2. Then 9 + 5 = 14, now 14 * 2. "
                 "Finally 14 * 2 = 28. </think> <answer> 28 </answer>")


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 2, 1), (5, 2, 2), (6, 3, 4),
                                   (16, 1, 16), (10, 10, 3), (8, 5, 4)])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_right_answer(n, c, k):
    right = set(range(c))
    subsets = list(combinations(range(n), k))
    expected = sum(bool(right & set(s)) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(expected)
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def _rendered(tokenizer, questions):
    """Each question as a user turn, rendered with the chat template."""
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                          add_generation_prompt=True, tokenize=False)
            for q in questions]


def test_pass_at_1_is_the_share_right():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)


@pytest.mark.parametrize("n,c,k", [(4, 1, 5), (4, 5, 1), (4, 1, 0), (0, 0, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_non_integers():
    with pytest.raises(TypeError, match="integers"):
        pass_at_k(4.0, 1, 1)


def test_majority_vote_ties_go_to_the_first_seen_and_blanks_do_not_vote():
    assert majority_vote(["20", "14", "14", "20"]) == "20"
    assert majority_vote([None, " 14 ", "", float("nan"), "20", "14"]) == "14"
    assert majority_vote([None, "", float("nan")]) is None
    assert majority_vote([14.0, "20", " 14 ", "20", "20/1"]) == "20"  # by value
    assert majority_vote(["twenty", "14.0", "twenty"]) == "twenty"
    assert majority_vote([]) is None


def test_verified_vote_prefers_accepted_answers_and_falls_back_to_all():
    assert verified_vote(["20", "20", "14"], [False, False, True]) == "14"
    assert verified_vote(["20", "20", "14"], [False, False, False]) == "20"
    assert verified_vote(["20", None], [False, True]) == "20"  # accepted but blank
    with pytest.raises(ValueError, match="2 answers but 1 verifier"):
        verified_vote(["1", "2"], [True])


def test_vote_at_k_counts_the_subsets_whose_vote_is_right():
    answers = ["14", "20", "20"]
    assert vote_at_k(answers, "20", 3) == 1.0  # k = n: the one exact vote
    assert vote_at_k(answers, "14", 3) == 0.0
    # k = 1: each answer alone; ~1/3 of draws pick "14"
    assert vote_at_k(answers, "14", 1, draws=3000) == pytest.approx(1 / 3, abs=0.03)
    assert vote_at_k(answers, "14", 3, verified=[True, False, False]) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= 3"):
        vote_at_k(answers, "14", 4)
    with pytest.raises(ValueError, match="verifier flags"):
        vote_at_k(answers, "14", 2, verified=[True])


def test_step_labels_find_where_left_to_right_goes_wrong():
    assert [ok for _, ok in step_labels(RIGHT, Q)] == [True, True, True]
    # 3 + 6 = 9 leaves 9 + 5 * 2 = 19 (still right); 9 + 5 = 14 leaves 28
    assert [ok for _, ok in step_labels(LEFT_TO_RIGHT, Q)] == [True, False, False]
    assert first_wrong_step(LEFT_TO_RIGHT, Q) == 1
    assert first_wrong_step(RIGHT, Q) is None
    assert process_ok(RIGHT, Q) and not process_ok(LEFT_TO_RIGHT, Q)


def test_a_false_equation_and_a_right_answer_is_caught():
    lucky = ("<think> First 5 * 2 = 11, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. "
             "Finally 9 + 10 = 19. </think> <answer> 19 </answer>")
    assert first_wrong_step(lucky, Q) == 0


def test_checks_need_only_be_true_and_rules_are_not_steps():
    text = ("<think> * comes before + and -. First 5 * 2 = 10, now 3 + 6 + 10. Then "
            "3 + 6 = 9, now 9 + 10. Then 9 + 10 = 19. Check: 19 - 10 = 9. </think>")
    labels = step_labels(text, Q)
    assert len(labels) == 4 and all(ok for _, ok in labels)
    assert not step_labels(text.replace("19 - 10 = 9", "19 - 10 = 8"), Q)[-1][1]


def test_a_self_correction_starts_with_a_wrong_step_and_chinese_steps_count():
    text = ("<think> First 3 + 6 = 9. Wait, * comes before + and -. Let me recheck. "
            "首先 5 * 2 = 10, 现在 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. Finally "
            "9 + 10 = 19. </think> <answer> 19 </answer>")
    assert [ok for _, ok in step_labels(text, Q)] == [False, True, True, True]


@pytest.mark.parametrize("text", [None, "", "no think", "<think> unclosed",
                                  "<think> 9**9**9**9 = 1, now 9**9**9**9. </think>",
                                  "<think> First 2 + 2 = 4, now 9 ** 9 ** 9. </think>",
                                  "<think> First 1 / 0 = 0, now 1 / 0. </think>"])
def test_step_labels_never_raise_on_completions(text):
    labels = step_labels(text, Q)
    assert all(not ok for _, ok in labels)
    assert not process_ok(text, Q)


def test_force_wait_cuts_at_the_end_of_thinking_and_continues(monkeypatch):
    seen = []

    class Out:
        def __init__(self, texts):
            self.texts = texts

    def fake_generate(model, tokenizer, prompts, **kwargs):
        seen.append(list(prompts))
        return Out([" then more. </think> <answer> 1 </answer>"] * len(prompts))

    monkeypatch.setattr("grpo_lib.sampling.generate", fake_generate)
    rounds = force_wait(None, None, ["P1|", "P2|"],
                        ["<think> a. </think> <answer> 2 </answer>", "b <answer> 3"],
                        times=2, do_sample=False)
    assert seen[0] == ["P1|<think> a." + WAIT_CUE, "P2|b" + WAIT_CUE]
    assert rounds[0][0] == ("<think> a." + WAIT_CUE
                            + " then more. </think> <answer> 1 </answer>")
    assert seen[1][0] == "P1|<think> a." + WAIT_CUE + " then more." + WAIT_CUE
    assert len(rounds) == 2


def test_force_wait_rejects_bad_arguments():
    with pytest.raises(ValueError, match="2 prompts but 1"):
        force_wait(None, None, ["a", "b"], ["x"])
    with pytest.raises(ValueError, match="times"):
        force_wait(None, None, ["a"], ["x"], times=0)


def test_force_wait_runs_the_tiny_base():
    model, tokenizer = load_model_and_tokenizer(TINY_BASE)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "2 + 3 * 4"}],
                                           add_generation_prompt=True, tokenize=False)
    (forced,) = force_wait(model, tokenizer, [prompt], ["<think> 3 * 4 = 12. </think>"],
                           do_sample=False, max_new_tokens=4)
    assert forced[0].startswith("<think> 3 * 4 = 12." + WAIT_CUE)
    assert len(forced[0]) > len("<think> 3 * 4 = 12." + WAIT_CUE)


def test_process_reward_pays_for_right_steps_only():
    lucky = RIGHT.replace("5 * 2 = 10", "5 * 2 = 11")
    texts = [RIGHT, LEFT_TO_RIGHT, lucky, None, 3.5, "<answer> 19 </answer>"]
    assert process_reward(texts, question=[Q] * 6) == [1.0, 0, 0, 0, 0, 0]
    assert REWARD_FUNCTIONS["process_reward"] is process_reward
    with pytest.raises(TypeError, match="process_reward needs the column 'question'"):
        process_reward([RIGHT])
    with pytest.raises(ValueError, match="question has 1 entries but there are 2"):
        process_reward([RIGHT, RIGHT], question=[Q])


def test_keep_value_false_grades_the_operations_only():
    assert [ok for _, ok in step_labels(LEFT_TO_RIGHT, Q, keep_value=False)] == [
        True, True, True]


def test_next_step_cuts_after_the_first_operation():
    assert _next_step(" Then 3 + 6 = 9, now 9 + 10. Finally 9 + 10 = 19.") == (
        " Then 3 + 6 = 9, now 9 + 10.", "step")
    assert _next_step(" </think> <answer> 19 </answer>") == (
        " </think> <answer> 19 </answer>", "end")
    assert _next_step(" Then 3 + 6 = 9, now 9 +") == (" Then 3 + 6 = 9, now 9 +", None)


PREFIX = "<think> First 3 + 6 = 9, now 9 + 5 * 2."
GOOD = (" Then 5 * 2 = 10, now 9 + 10. Finally 9 + 10 = 19. </think> "
        "<answer> 19 </answer>")
BAD = (" Then 9 + 5 = 14, now 14 * 2. Finally 14 * 2 = 28. </think> "
       "<answer> 28 </answer>")
END = " </think> <answer> 28 </answer>"


def test_values_judge_the_step_or_where_it_leads():
    assert step_value(PREFIX, GOOD, Q) and not step_value(PREFIX, BAD, Q)
    assert rollout_value(PREFIX, GOOD, Q) and not rollout_value(PREFIX, BAD, Q)
    # a right step whose own sample then goes wrong: the step grader passes it
    detour = " Then 5 * 2 = 10, now 9 + 10. Finally 9 + 10 = 18. </think>"
    assert step_value(PREFIX, detour, Q) and not rollout_value(PREFIX, detour, Q)
    assert not step_value(PREFIX, END, Q)


def test_choose_keeps_the_first_accepted_step_then_an_ending():
    head, done = _choose(PREFIX, Q, [BAD, GOOD], step_value)
    assert (head, done) == (" Then 5 * 2 = 10, now 9 + 10.", False)
    assert _choose(PREFIX, Q, [BAD, END], step_value) == (END, True)
    assert _choose(PREFIX, Q, [BAD], step_value) == (" Then 9 + 5 = 14, now 14 * 2.",
                                                       False)


def test_step_search_runs_the_tiny_base_and_counts_its_cost():
    model, tokenizer = load_model_and_tokenizer(TINY_BASE)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                             add_generation_prompt=True,
                                             tokenize=False)
               for q in (Q, "2 + 3 * 4")]
    result = step_search(model, tokenizer, prompts, [Q, "2 + 3 * 4"], width=2,
                         max_rounds=2, max_new_tokens=24)
    assert len(result.completions) == 2
    assert all(c in (2, 4) for c in result.candidates)
    assert all(t > 0 for t in result.tokens)
    with pytest.raises(ValueError, match="2 prompts but 1 questions"):
        step_search(model, tokenizer, prompts, [Q])
    with pytest.raises(ValueError, match="width"):
        step_search(model, tokenizer, prompts, [Q, Q], width=0)


def test_ucb_is_infinite_unvisited_then_the_mean_plus_a_bonus():
    parent = Node("", visits=10)
    assert ucb(Node("a"), parent) == math.inf
    child = Node("a", visits=4, total=2.0)  # mean 0.5
    bonus = math.sqrt(math.log(10) / 4)
    assert ucb(child, parent, c=1.0) == pytest.approx(0.5 + bonus)
    assert ucb(child, parent, c=0.0) == 0.5


def test_select_descends_by_ucb_to_a_leaf_or_a_closed_node():
    root = Node("", visits=6)
    bad, good = Node("b", visits=3, total=0.0), Node("g", visits=3, total=3.0)
    root.children = [bad, good]
    good.children = [Node("g1", closed=True, visits=3, total=3.0)]
    assert [n.text for n in select(root, c=0.5)] == ["", "g", "g1"]
    assert [n.text for n in select(Node("x"))] == ["x"]
    # a huge bonus for the less visited child
    root.children = [Node("few", visits=1, total=0.0),
                     Node("many", visits=5, total=5.0)]
    assert select(root, c=10.0)[-1].text == "few"


def test_expand_merges_samples_that_take_the_same_step():
    node = Node(PREFIX)
    expand(node, [GOOD, BAD, GOOD, END], [1.0, 0.0, 1.0, 0.0])
    assert [c.text for c in node.children] == [
        PREFIX + " Then 5 * 2 = 10, now 9 + 10.",
        PREFIX + " Then 9 + 5 = 14, now 14 * 2.", PREFIX + END]
    assert [(c.visits, c.total, c.closed) for c in node.children] == [
        (2, 2.0, False), (1, 0.0, False), (1, 0.0, True)]
    expand(node, [BAD], [0.0])  # a second expansion adds to the same child
    assert (node.children[1].visits, len(node.children)) == (2, 3)


def test_backup_adds_a_simulations_values_along_its_path():
    path = [Node(""), Node("a", visits=1, total=1.0)]
    backup(path, [1.0, 0.0, 1.0])
    assert [(n.visits, n.total) for n in path] == [(3, 2.0), (4, 3.0)]


def test_settled_text_follows_the_most_visited_children():
    root = Node("")
    a, b = Node("a", visits=5, total=1.0), Node("b", visits=3, total=3.0)
    root.children = [b, a]
    a.children = [Node("a2", visits=2, total=0.0), Node("a1", closed=True, visits=2,
                                                         total=2.0)]
    assert settled_text(root) == ("a1", True)  # visits first, then the higher mean
    assert settled_text(Node("x")) == ("x", False)


def test_tree_search_runs_the_tiny_base_and_counts_its_cost():
    model, tokenizer = load_model_and_tokenizer(TINY_BASE)
    questions = [Q, "2 + 3 * 4"]
    prompts = _rendered(tokenizer, questions)
    result = tree_search(model, tokenizer, prompts, questions, simulations=2, width=2,
                         max_new_tokens=24)
    assert len(result.completions) == 2
    assert all(c in (2, 4) for c in result.candidates)
    assert all(t > 0 for t in result.tokens)
    with pytest.raises(ValueError, match="2 prompts but 1 questions"):
        tree_search(model, tokenizer, prompts, [Q])
    for bad in (dict(simulations=0), dict(width=1.5)):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            tree_search(model, tokenizer, prompts, questions, **bad)


def test_tree_search_values_each_simulation_in_one_call_when_it_can():
    """A value with ``many`` gets each simulation's candidates as one list, and the
    search ends where the one-at-a-time value's does."""
    model, tokenizer = load_model_and_tokenizer(TINY_BASE)
    questions = [Q, "2 + 3 * 4", "7 - 2 * 3"]
    prompts = _rendered(tokenizer, questions)
    calls = []

    def batched(prefix, continuation, question):
        return rollout_value(prefix, continuation, question)

    def many(triples):
        calls.append(len(triples))
        return [rollout_value(*t) for t in triples]

    batched.many = many
    kwargs = dict(simulations=3, width=2, max_new_tokens=32, seed=1)
    got = tree_search(model, tokenizer, prompts, questions, value=batched, **kwargs)
    want = tree_search(model, tokenizer, prompts, questions, **kwargs)
    assert got == want
    assert calls[0] == 3 * 2  # the first simulation: every tree's candidates at once
    assert len(calls) <= 2 * 3  # per simulation, closed leaves once and candidates once


def test_tree_search_stops_at_the_first_answer_that_verifies():
    model, tokenizer = load_model_and_tokenizer(TINY_BASE)
    questions = [Q, "2 + 3 * 4"]
    prompts = _rendered(tokenizer, questions)
    kwargs = dict(simulations=3, width=2, max_new_tokens=32, seed=1)
    plain = tree_search(model, tokenizer, prompts, questions, **kwargs)
    never = tree_search(model, tokenizer, prompts, questions,
                        verify=lambda answer, question: False, **kwargs)
    assert never == plain  # nothing verified: the settled path, as without verify
    checked = []

    def first_answer(answer, question):
        checked.append((answer, question))
        return True

    first = tree_search(model, tokenizer, prompts, questions, verify=first_answer,
                        **kwargs)
    assert first.candidates == [2, 2]  # one simulation, then every tree stopped
    assert [q for _, q in checked] == questions  # the first sample of each passed
    assert first.completions == [answer for answer, _ in checked]
    assert all(a <= b for a, b in zip(first.tokens, plain.tokens))  # a prefix of it


def test_step_prefixes_are_the_states_of_a_search_over_steps():
    states = step_prefixes(RIGHT)
    assert states == ["<think> First 5 * 2 = 10, now 3 + 6 + 10.",
                      "<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now "
                      "9 + 10.",
                      "<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now "
                      "9 + 10. Finally 9 + 10 = 19.", RIGHT]
    assert step_prefixes("") == []
    assert step_prefixes("<think> First 3 + 6 = 9, now") == [
        "<think> First 3 + 6 = 9, now"]  # cut off: the text is the one state


def test_value_targets_label_every_state_with_its_answers_grade():
    targets = value_targets([RIGHT, LEFT_TO_RIGHT], [Q, Q])
    assert list(targets.columns) == ["answer", "step", "question", "state", "label"]
    assert targets["label"].tolist() == [1.0] * 4 + [0.0] * 4
    assert targets["answer"].tolist() == [0] * 4 + [1] * 4
    assert targets["step"].tolist() == [0, 1, 2, 3] * 2
    assert targets["state"].iloc[3] == RIGHT and set(targets["question"]) == {Q}
    with pytest.raises(ValueError, match="2 completions but 1 questions"):
        value_targets([RIGHT, RIGHT], [Q])


def test_a_value_model_learns_its_targets_and_values_the_next_step():
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = RewardModel.from_causal_lm(random_model(tok, size="micro", seed=0))
    targets = value_targets([RIGHT, LEFT_TO_RIGHT], [Q, Q])
    log = train_value_model(model, tok, targets, steps=40, batch_size=8, lr=3e-3)
    assert list(log.columns) == ["step", "loss"] and len(log) == 40
    assert log["loss"].iloc[-5:].mean() < 0.5 * log["loss"].iloc[:5].mean()
    scores = score_texts(model, tok, [Q] * 2, [RIGHT, LEFT_TO_RIGHT])
    assert scores[0] > 0 > scores[1]
    value = learned_value(model, tok)
    next_state = PREFIX + " Then 5 * 2 = 10, now 9 + 10."
    want = torch.sigmoid(score_texts(model, tok, [Q], [next_state]))[0].item()
    assert value(PREFIX, GOOD, Q) == pytest.approx(want)
    assert 0.0 < value(PREFIX, END, Q) < 1.0
    triples = [(PREFIX, GOOD, Q), (PREFIX, END, Q), ("", RIGHT, Q)]
    assert value.many(triples) == pytest.approx([value(*t) for t in triples],
                                                 abs=1e-6)  # batched, padded: same
    assert value.many([]) == []
    with pytest.raises(ValueError, match="targets is empty"):
        train_value_model(model, tok, targets.iloc[:0])
    with pytest.raises(ValueError, match="steps and batch_size"):
        train_value_model(model, tok, targets, steps=0)
