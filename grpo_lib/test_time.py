"""Test-time scaling: more compute for one problem at inference (chapter 15).

In parallel, draw :math:`n` answers to a problem and combine them:

===========================  ==========================================================
``pass_at_k(n, c, k)``       the chance that at least one of :math:`k` of the
                             :math:`n` answers (:math:`c` of them right) is right:
                             :math:`1 - \\binom{n-c}{k} / \\binom{n}{k}`
``majority_vote(answers)``   the most frequent answer (self-consistency; R1's
                             ``cons@64``)
``verified_vote``            the majority among the answers a verifier accepts
``vote_at_k``                the expected accuracy of a vote over :math:`k` answers
===========================  ==========================================================

In sequence, :func:`force_wait` makes a model think longer (budget forcing): the end of
its reasoning is replaced by ``" Wait,"`` and it goes on.

:func:`step_labels` grades each step of an arithmetic trace, the process supervision
that the R1 paper could not define for general reasoning: a step is right when its
equation holds and the expression it leaves still has the problem's value.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod

import torch

from .parsing import THINK_CLOSE, parse_number, think_text
from .safe_math import safe_eval
from .tasks.arithmetic import evaluate_expression

__all__ = ["pass_at_k", "majority_vote", "verified_vote", "vote_at_k", "step_labels",
           "first_wrong_step", "process_ok", "force_wait", "WAIT_CUE", "step_search",
           "SearchResult", "step_value", "rollout_value", "Node", "ucb", "select",
           "expand", "backup", "settled_text", "tree_search", "step_prefixes",
           "value_targets", "train_value_model", "learned_value"]

WAIT_CUE = " Wait,"
"""What budget forcing writes where the model wanted to stop thinking."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` answers of which ``c`` are right (Chen et al., 2021):
    :math:`1 - \\binom{n-c}{k} / \\binom{n}{k} = 1 - \\prod_{i=n-c+1}^{n} (1 - k/i)`."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}")
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n and 0 <= c <= n, got n={n}, "
                         f"c={c}, k={k}")
    if n - c < k:  # every draw of k answers holds a right one
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _key(answer) -> str | None:
    """An answer as a vote counts it: a number by its value (``14``, ``14.0`` and
    ``"14"`` are one answer, ``"14"``), other text with its spaces collapsed, ``None``
    for no answer (``None``, NaN, blank)."""
    if answer is None or (isinstance(answer, float) and answer != answer):  # NaN
        return None
    value = parse_number(answer)
    if value is not None:
        return str(value)
    text = " ".join(str(answer).split())
    return text or None


def majority_vote(answers: Sequence) -> str | None:
    """The most frequent answer, compared by value (:func:`_key`); a tie goes to the
    one seen first. Missing answers (``None``, NaN, blank) do not vote; ``None`` when
    no answer is left."""
    counts = Counter(k for k in map(_key, answers) if k is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(k for k in map(_key, answers) if counts.get(k) == top)


def verified_vote(answers: Sequence, verified: Sequence[bool]) -> str | None:
    """:func:`majority_vote` over the answers whose ``verified`` flag is true; over all
    of them when the verifier accepts none."""
    if len(answers) != len(verified):
        raise ValueError(f"{len(answers)} answers but {len(verified)} verifier flags")
    kept = [a for a, ok in zip(answers, verified) if ok]
    return majority_vote(kept if any(_key(a) is not None for a in kept) else answers)


def vote_at_k(answers: Sequence, gold, k: int, draws: int = 64, seed: int = 0,
              vote: Callable | None = None, verified: Sequence[bool] | None = None
              ) -> float:
    """Expected accuracy of voting over ``k`` of one problem's ``n`` answers: the
    share of ``draws`` random subsets of size ``k`` whose vote equals ``gold``.

    ``vote`` defaults to :func:`majority_vote`, or :func:`verified_vote` when
    ``verified`` flags are given. ``k = n`` is one exact draw."""
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"vote_at_k needs 1 <= k <= {n} (the answers given), got {k}")
    if verified is not None and len(verified) != n:
        raise ValueError(f"{n} answers but {len(verified)} verifier flags")
    gold, rng = _key(gold), random.Random(seed)
    hits = 0
    subsets = [list(range(n))] if k == n else [rng.sample(range(n), k)
                                                for _ in range(draws)]
    for idx in subsets:
        picked = [answers[i] for i in idx]
        if verified is None:
            winner = (vote or majority_vote)(picked)
        else:
            winner = (vote or verified_vote)(picked, [verified[i] for i in idx])
        hits += winner is not None and winner == gold
    return hits / len(subsets)


_SENTENCE = re.compile(r"(?<=\.)\s+")
_STEP = re.compile(r"^(?:\w+:?\s+)?(?P<a>-?\d+)\s*(?P<op>[-+*/])\s*(?P<b>-?\d+)\s*=\s*"
                   r"(?P<value>-?\d+)(?:,\s*(?:now|现在)\s*(?P<rest>.+?))?\.?$")


def _value(expression: str):
    """The exact value of an expression, ``None`` when it is not one."""
    try:
        return safe_eval(expression)
    except (ValueError, ArithmeticError, TypeError):
        return None


def step_labels(text, question: str, keep_value: bool = True
                ) -> list[tuple[str, bool]]:
    """Each step of the reasoning with its grade: ``[(step, right), ...]``.

    A step is a sentence of the think block that states one operation, ``"Then
    3 * 4 = 12, now 2 + 12."``. It is right when the operation is true *and* what it
    leaves (the expression after ``now``, or its result when it ends the trace) still
    has the value of ``question``; with ``keep_value=False`` only the operation is
    graded, a weaker grader that passes left-to-right steps. A check (``"Check: 14 -
    12 = 2."``) needs only to be true. Sentences without an operation ("* comes before
    + and -.") are not steps. Empty when there is no closed think block. Never raises
    on a completion."""
    think = think_text(text)
    if not think:
        return []
    target = evaluate_expression(question)
    labels = []
    for sentence in _SENTENCE.split(think):
        sentence = sentence.strip()
        m = _STEP.match(sentence)
        if m is None:
            continue
        true = _value(f"{m['a']} {m['op']} {m['b']}") == int(m["value"])
        if sentence.lower().startswith("check") or not keep_value:
            labels.append((sentence, true))
            continue
        left = m["rest"] if m["rest"] is not None else m["value"]
        labels.append((sentence, true and _value(left) == target))
    return labels


def first_wrong_step(text, question: str) -> int | None:
    """Index of the first wrong step of :func:`step_labels`; ``None`` when all are
    right (or there are none)."""
    return next((i for i, (_, ok) in enumerate(step_labels(text, question))
                 if not ok), None)


def process_ok(text, question: str) -> bool:
    """The process verifier: at least one step, and every step right."""
    labels = step_labels(text, question)
    return bool(labels) and all(ok for _, ok in labels)


def _thinking_prefix(completion: str) -> str:
    """The completion up to where it stops thinking, with the cue appended."""
    cut = completion.find(THINK_CLOSE)
    if cut < 0:
        cut = completion.find("<answer>")
    return (completion if cut < 0 else completion[:cut]).rstrip() + WAIT_CUE


def force_wait(model, tokenizer, prompts: Sequence[str], completions: Sequence[str],
               times: int = 1, **generate_kwargs) -> list[list[str]]:
    """Budget forcing (Muennighoff et al., 2025): ``times`` rounds of cutting each
    completion where its reasoning ends (``</think>``, else ``<answer>``), writing
    :data:`WAIT_CUE` and letting the model continue.

    ``prompts`` are rendered strings (the chat template applied); ``generate_kwargs``
    go to :func:`grpo_lib.sampling.generate` (``do_sample=False`` for greedy). Returns
    one list per round of the forced completions (cue and continuation included)."""
    from .sampling import generate

    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if not isinstance(times, int) or times < 1:
        raise ValueError(f"times (rounds of forcing) must be an integer >= 1, got "
                         f"{times!r}")
    rounds, current = [], list(completions)
    for _ in range(times):
        prefixes = [_thinking_prefix(c) for c in current]
        more = generate(model, tokenizer, [p + x for p, x in zip(prompts, prefixes)],
                        **generate_kwargs).texts
        current = [x + m for x, m in zip(prefixes, more)]
        rounds.append(current)
    return rounds


_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _next_step(continuation: str) -> tuple[str, str | None]:
    """The head of a continuation up to the end of its first step, and its kind:
    ``"step"`` (a sentence with ``=``), ``"end"`` (the reasoning closes first: the
    whole continuation) or ``None`` (neither: cut off by the token budget)."""
    close, equals = continuation.find(THINK_CLOSE), continuation.find("=")
    if close >= 0 and (equals < 0 or close < equals):
        return continuation, "end"
    end = _SENTENCE_END.search(continuation, equals) if equals >= 0 else None
    return (continuation[:end.end()], "step") if end else (continuation, None)


@dataclass
class SearchResult:
    """What :func:`step_search` wrote and what it cost."""

    completions: list[str]  # one per prompt
    candidates: list[int]  # continuations sampled per prompt
    tokens: list[int]  # tokens generated per prompt


def step_value(prefix: str, continuation: str, question: str) -> bool:
    """The value of a candidate as a step grader sees it: is its next step right
    (:func:`step_labels`)? Local: it says nothing of where the step leads."""
    head, kind = _next_step(continuation)
    before = len(step_labels(prefix + THINK_CLOSE, question))
    labels = step_labels(prefix + head + " " + THINK_CLOSE, question)
    return kind == "step" and len(labels) == before + 1 and labels[-1][1]


def rollout_value(prefix: str, continuation: str, question: str) -> bool:
    """The value of a candidate from the rest of its own sample, a one-rollout Monte
    Carlo estimate: does the whole answer it leads to pass :func:`process_ok`?"""
    return process_ok(prefix + continuation, question)


def _choose(prefix: str, question: str, candidates: list[str],
            value: Callable) -> tuple[str, bool]:
    """The continuation to keep: the first step that ``value`` accepts, else the
    first that ends the reasoning, else the first step. Returns its head (up to the
    end of that step) and whether the reasoning is closed."""
    heads = [_next_step(c) for c in candidates]
    for c, (head, kind) in zip(candidates, heads):
        if kind == "step" and value(prefix, c, question):
            return head, False
    for c, (_, kind) in zip(candidates, heads):
        if kind == "end":
            return c, True
    return next(((h, False) for h, k in heads if k == "step"), (candidates[0], True))


def step_search(model, tokenizer, prompts: Sequence[str], questions: Sequence[str],
                value: Callable = step_value, width: int = 4, max_rounds: int = 8,
                max_new_tokens: int = 128, seed: int = 0, **generate_kwargs
                ) -> SearchResult:
    """A search over steps, one step per round: from each prompt's text so far, draw
    ``width`` continuations, keep the next step of the first one that
    ``value(prefix, continuation, question)`` accepts (:func:`_choose`), and go on,
    until the reasoning closes or ``max_rounds`` rounds have passed; then finish the
    answer greedily. ``prompts`` are rendered strings.

    A search with one path and no backtracking: MCTS keeps a tree and backs values
    up it, but its choices rest on the same thing, the value of a state."""
    from .sampling import generate

    if len(prompts) != len(questions):
        raise ValueError(f"{len(prompts)} prompts but {len(questions)} questions")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    prefixes, done = [""] * len(prompts), [False] * len(prompts)
    candidates, tokens = [0] * len(prompts), [0] * len(prompts)
    for r in range(max_rounds):
        active = [i for i, d in enumerate(done) if not d]
        if not active:
            break
        out = generate(model, tokenizer, [prompts[i] + prefixes[i] for i in active],
                       num_generations=width, max_new_tokens=max_new_tokens,
                       seed=seed + r, **generate_kwargs)
        lengths = out.completion_lengths.tolist()
        for j, i in enumerate(active):
            group = out.texts[j * width:(j + 1) * width]
            candidates[i] += width
            tokens[i] += sum(lengths[j * width:(j + 1) * width])
            head, done[i] = _choose(prefixes[i], questions[i], group, value)
            prefixes[i] += head
    open_ = [i for i, x in enumerate(prefixes) if "</answer>" not in x]
    _finish_greedily(model, tokenizer, prompts, prefixes, tokens, open_,
                     max_new_tokens, **generate_kwargs)
    return SearchResult(prefixes, candidates, tokens)


def _finish_greedily(model, tokenizer, prompts, texts: list[str], tokens: list[int],
                     open_: list[int], max_new_tokens: int, **generate_kwargs) -> None:
    """Finish the answers ``open_`` greedily: their continuations are added to
    ``texts`` and their lengths to ``tokens``, in place."""
    from .sampling import generate

    if not open_:
        return
    rest = generate(model, tokenizer, [prompts[i] + texts[i] for i in open_],
                    do_sample=False, max_new_tokens=max_new_tokens, **generate_kwargs)
    for i, text, n in zip(open_, rest.texts, rest.completion_lengths.tolist()):
        texts[i] += text
        tokens[i] += n


@dataclass
class Node:
    """A state of :func:`tree_search`: the answer written so far, and what the
    simulations through it have found."""

    text: str  # the completion up to this state
    closed: bool = False  # the reasoning ended here (or ran out of tokens): a leaf
    visits: int = 0  # samples whose values were backed up through it
    total: float = 0.0  # the sum of those values
    children: list["Node"] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return self.total / self.visits if self.visits else 0.0


def ucb(child: Node, parent: Node, c: float = 1.0) -> float:
    r"""UCT's score of a child (Kocsis and Szepesvári, 2006), its mean value plus an
    exploration bonus: :math:`\bar v + c \sqrt{\ln N / n}` (unvisited: infinite)."""
    if child.visits == 0:
        return math.inf
    return child.mean + c * math.sqrt(math.log(parent.visits) / child.visits)


def select(root: Node, c: float = 1.0) -> list[Node]:
    """The path from the root down the children of highest :func:`ucb` to a node
    with no children yet, or a closed one."""
    path = [root]
    while path[-1].children and not path[-1].closed:
        parent = path[-1]
        path.append(max(parent.children, key=lambda child: ucb(child, parent, c)))
    return path


def expand(node: Node, continuations: Sequence[str], values: Sequence[float]) -> None:
    """Grow ``node``: one child per distinct next step of the sampled continuations
    (a continuation that ends the reasoning first is a closed child), each credited
    with the values of the samples that begin with it."""
    children = {child.text: child for child in node.children}
    for continuation, value in zip(continuations, values):
        head, kind = _next_step(continuation)  # not a step: head is all of it
        text, closed = node.text + head, kind != "step"
        if text not in children:
            children[text] = Node(text, closed=closed)
            node.children.append(children[text])
        children[text].visits += 1
        children[text].total += value


def backup(path: Sequence[Node], values: Sequence[float]) -> None:
    """Add one simulation's values to every node on its path."""
    for node in path:
        node.visits += len(values)
        node.total += sum(values)


def settled_text(root: Node) -> tuple[str, bool]:
    """The answer the tree settles on: from the root, the most visited child (ties:
    the higher mean) down to a closed node or a leaf. Returns its text and whether
    it is closed."""
    node = root
    while node.children and not node.closed:
        node = max(node.children, key=lambda child: (child.visits, child.mean))
    return node.text, node.closed


def _values(value: Callable, triples: Sequence[tuple[str, str, str]]) -> list[float]:
    """``value(prefix, continuation, question)`` of each triple, by one call of
    ``value.many`` when the value has it (a model scores them as one batch)."""
    if hasattr(value, "many") and triples:
        return [float(v) for v in value.many(triples)]
    return [float(value(*triple)) for triple in triples]


def tree_search(model, tokenizer, prompts: Sequence[str], questions: Sequence[str],
                value: Callable = rollout_value, simulations: int = 8, width: int = 4,
                c: float = 1.0, max_new_tokens: int = 128, seed: int = 0,
                verify: Callable | None = None, **generate_kwargs) -> SearchResult:
    """Monte Carlo tree search over steps, one tree per prompt. Each simulation
    selects a leaf by :func:`ucb`, samples ``width`` continuations from it, values
    each by ``value(prefix, continuation, question)`` (as :func:`step_search` does;
    by default the grade of the whole answer it writes, a rollout; a value with a
    ``many(triples)`` method, as :func:`learned_value`'s, gets them all at once), and
    :func:`expand` and :func:`backup` the values; a closed leaf is valued again. Then
    :func:`settled_text`, finished greedily if the reasoning is still open. One
    ``generate`` call per simulation serves every tree. ``prompts`` are rendered
    strings.

    With ``verify(answer, question) -> bool``, every sampled answer (the leaf's text
    and a continuation) is checked whole, and a tree stops at the first that passes
    and returns it: a rollout the checker accepted is not thrown away."""
    from .sampling import generate

    if len(prompts) != len(questions):
        raise ValueError(f"{len(prompts)} prompts but {len(questions)} questions")
    for name, n in (("simulations", simulations), ("width", width)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {n!r}")
    roots = [Node("") for _ in prompts]
    candidates, tokens = [0] * len(prompts), [0] * len(prompts)
    found: list[str | None] = [None] * len(prompts)  # a sampled answer that verified
    for s in range(simulations):
        paths = [select(root, c) if found[i] is None else None
                 for i, root in enumerate(roots)]
        closed = [i for i, path in enumerate(paths) if path and path[-1].closed]
        again = _values(value, [(paths[i][-1].text, "", questions[i]) for i in closed])
        for i, v in zip(closed, again):  # nothing to expand: its value again
            backup(paths[i], [v])
        open_ = [i for i, path in enumerate(paths) if path and not path[-1].closed]
        if not open_:
            break
        leaves = [prompts[i] + paths[i][-1].text for i in open_]
        out = generate(model, tokenizer, leaves, num_generations=width,
                       max_new_tokens=max_new_tokens, seed=seed + s, **generate_kwargs)
        lengths = out.completion_lengths.tolist()
        groups = [out.texts[j * width:(j + 1) * width] for j in range(len(open_))]
        valued = _values(value, [(paths[i][-1].text, t, questions[i])
                                 for i, group in zip(open_, groups) for t in group])
        for j, (i, group) in enumerate(zip(open_, groups)):
            leaf, values = paths[i][-1], valued[j * width:(j + 1) * width]
            expand(leaf, group, values)
            backup(paths[i], values)
            candidates[i] += width
            tokens[i] += sum(lengths[j * width:(j + 1) * width])
            if verify is not None:
                found[i] = next((leaf.text + t for t in group
                                 if verify(leaf.text + t, questions[i])), None)
    settled = [settled_text(root) for root in roots]
    texts = [text if f is None else f for f, (text, _) in zip(found, settled)]
    open_ = [i for i, (_, closed) in enumerate(settled)
             if not closed and found[i] is None]
    _finish_greedily(model, tokenizer, prompts, texts, tokens, open_, max_new_tokens,
                     **generate_kwargs)
    return SearchResult(texts, candidates, tokens)


def step_prefixes(completion: str) -> list[str]:
    """The states a search over steps passes on its way to ``completion``: its text
    up to the end of each step, then the whole completion."""
    states, text, rest = [], "", completion
    while rest:
        head, kind = _next_step(rest)
        text += head
        states.append(text)
        if kind != "step":
            break
        rest = rest[len(head):]
    return states


def value_targets(completions: Sequence[str], questions: Sequence[str]):
    """Targets for a value model: every state of each completion
    (:func:`step_prefixes`), labelled 1.0 if the whole answer passes
    :func:`process_ok`, else 0.0. Math-Shepherd's hard estimate with the answer
    itself as the one rollout from each of its states (Wang et al., 2024). Returns a
    DataFrame with columns ``answer, step, question, state, label`` (the index of
    the completion and of the state in it)."""
    import pandas as pd

    if len(completions) != len(questions):
        raise ValueError(f"{len(completions)} completions but {len(questions)} "
                         "questions")
    rows = [(i, j, q, state, float(process_ok(c, q)))
            for i, (c, q) in enumerate(zip(completions, questions))
            for j, state in enumerate(step_prefixes(c))]
    return pd.DataFrame(rows, columns=["answer", "step", "question", "state", "label"])


def train_value_model(model, tokenizer, targets, steps: int = 300,
                      batch_size: int = 64, lr: float = 1e-4, seed: int = 0,
                      max_length: int = 256):
    r"""Fit ``model`` (a :class:`grpo_lib.reward_model.RewardModel`: a head on the
    last token) to the labels of :func:`value_targets` by binary cross-entropy on
    its score as a logit, :math:`-[y \log \sigma(v) + (1 - y) \log(1 - \sigma(v))]`,
    with AdamW and batches drawn without replacement. Returns the log: ``step,
    loss``."""
    import pandas as pd

    from .reward_model import encode_pairs_side, shuffled_batches

    if len(targets) == 0:
        raise ValueError("targets is empty: no states to learn a value from.")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, "
                         f"{batch_size}.")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    rows = []
    model.train()
    batches = shuffled_batches(len(targets), batch_size, steps, seed)
    for step, index in enumerate(batches, start=1):
        batch = targets.iloc[index]
        ids, mask = encode_pairs_side(tokenizer, list(batch["question"]),
                                      list(batch["state"]), max_length)
        logits = model(ids.to(device), mask.to(device))  # [N]
        labels = torch.tensor(batch["label"].to_numpy(), dtype=logits.dtype,
                              device=device)  # [N]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows.append({"step": step, "loss": loss.item()})
    model.eval()
    return pd.DataFrame(rows)


def learned_value(model, tokenizer, batch_size: int = 256) -> Callable:
    """A value for :func:`tree_search` from a trained value model: the probability
    it gives the state after the candidate's next step (the whole continuation when
    that ends the reasoning). Its ``many(triples)`` scores a list of ``(prefix,
    continuation, question)`` in batches of ``batch_size``."""
    from .reward_model import score_texts

    def many(triples: Sequence[tuple[str, str, str]]) -> list[float]:
        states = [prefix + _next_step(continuation)[0]  # head: all if not a step
                  for prefix, continuation, _ in triples]
        questions = [question for *_, question in triples]
        scores = score_texts(model, tokenizer, questions, states, batch_size)  # [N]
        return torch.sigmoid(scores).tolist()

    def value(prefix: str, continuation: str, question: str) -> float:
        return many([(prefix, continuation, question)])[0]

    value.many = many
    return value
