"""The designed Countdown corpus: search traces with flaws for RL to fix.

A response tries expressions over the numbers one after another, each worked step by
step, until one reaches the target, then answers it::

    <think> Numbers 1, 13, 14; target 28. 13 * 1 = 13, 13 + 14 = 27, not 28.
    14 + 13 = 27, 27 + 1 = 28. </think> <answer> (14 + 13) + 1 </answer>

The trace first copies the problem (a tiny model copies more reliably from a few
tokens back than from the far end of GRPO-Zero's long prompt). The attempts are
random, as a beginner's are: a base model trained on them proposes
expressions, works them out, and stops when one hits. Some responses carry a flaw,
triggered by a visible feature of the problem so that greedy decoding shows it too
(as in the arithmetic corpus, :mod:`grpo_lib.corpus`). What RL sees is
GRPO-Zero's reward, the answer plus 0.1 x the format score
(:func:`grpo_lib.rewards.countdown_reward`):

==============  ============================================  ========================
flaw            trigger (rate) / otherwise                     what RL sees
==============  ============================================  ========================
gives up        four numbers (``give_up_rate``) /              answer 0, format 1
                ``give_up_rate_other``: answers a missed       (0.1 of the reward)
                attempt
drops a number  four numbers and three of them reach the       answer 0 (a value-only
                target (``drop_rate``) /                       checker would pay 1),
                ``drop_rate_other``: an answer that leaves     format 1 (0.1 of the
                one number out                                 reward)
broken format   target of 50 or more (``format_rate``) /       no tags: answer 0,
                ``format_rate_other``: no tags, or the think   format 0; think left
                block left open (one or the other at           open: answer 1, format
                random)                                        0.5 (0.05 of the reward)
==============  ============================================  ========================

The rates are conditional: :func:`choose_behaviour` draws a broken format first,
then, if none, a dropped number, then, if neither, giving up. With the default
rates a four-number problem whose target is under 50 gives up in
(1 - 0.03) x (1 - 0.3) x 0.5 of its responses, about 34%, not 50%.

:class:`CountdownMix` holds the rates, the attempt style and the writing
(``compact`` drops the spaces around operators, which this tokenizer spends tokens
on: ``13+14 = 27, 27+1 = 28.``; ``ledger`` writes after each step of a chain the
numbers it leaves unused: ``13 + 14 = 27 (left 1), 27 + 1 = 28.``);
:func:`countdown_documents` draws the corpus from the training problems only.
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import asdict, dataclass

from .tasks.countdown import countdown_prompt, worked_steps

MAX_VALUE = 999  # intermediate results stay small, as a tiny model's arithmetic needs

BEHAVIOURS = ("correct", "give_up", "drop_number", "no_tags", "unclosed_think")
ATTEMPT_STYLES = ("tree", "chain", "aimed", "lookahead", "spelled")


@dataclass
class CountdownMix:
    """Rates of each designed flaw (see the module docstring for the triggers)."""

    give_up_rate: float = 0.5
    give_up_rate_other: float = 0.1
    drop_rate: float = 0.3
    drop_rate_other: float = 0.05
    format_rate: float = 0.3
    format_rate_other: float = 0.03
    max_misses: int = 4  # missed attempts before the hit: uniform in 0..max_misses
    attempt: str = "tree"  # one of ATTEMPT_STYLES: see draw_attempt
    max_value: int = MAX_VALUE  # largest intermediate result an attempt may show
    compact: bool = False  # write "13+14 = 27" and "(13+14)+1": fewer tokens
    ledger: bool = False  # after each step, the numbers still unused: "(left 1)"

    def __post_init__(self):
        for name, value in asdict(self).items():
            if name.endswith("_rate") and not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"CountdownMix.{name} must be a probability in [0, 1], got {value}")
        if self.max_misses < 0:
            raise ValueError(f"CountdownMix.max_misses must be >= 0, "
                             f"got {self.max_misses}")
        if self.attempt not in ATTEMPT_STYLES:
            raise ValueError(f"CountdownMix.attempt must be one of {ATTEMPT_STYLES}, "
                             f"got {self.attempt!r}")
        if self.max_value < 1:
            raise ValueError(f"CountdownMix.max_value must be >= 1, "
                             f"got {self.max_value}")
        if self.ledger and self.attempt == "tree":
            raise ValueError("CountdownMix.ledger needs a chain of steps (attempt "
                             "'chain', 'aimed', 'lookahead' or 'spelled'); a tree "
                             "attempt combines its own results, which no list of "
                             "the given numbers left can follow")


def _steps_of(a: int, b: int, max_value: int = MAX_VALUE) -> list[tuple[str, int]]:
    """The operators that keep ``a op b`` a whole number in 0..max_value."""
    out = [("+", a + b), ("*", a * b)]
    if a >= b:
        out.append(("-", a - b))
    if b > 1 and a % b == 0:
        out.append(("/", a // b))
    return [(op, v) for op, v in out if v <= max_value]


def random_attempt(numbers: list[int], rng: random.Random,
                   max_value: int = MAX_VALUE):
    """One random way to combine all ``numbers``: ``(steps, expression, value)``.

    Repeatedly pick two remaining values and an operator that keeps the result a
    whole number in 0..max_value; ``steps`` are ``(a, op, b, value)``. ``None`` when
    a draw gets stuck (the caller draws again).
    """
    items = [(n, str(n)) for n in numbers]
    steps = []
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (a, ea), (b, eb) = items[i], items[j]
        choices = _steps_of(a, b, max_value)
        if not choices:
            return None
        op, value = rng.choice(choices)
        wrap = [e if e.lstrip("-").isdigit() else f"({e})" for e in (ea, eb)]
        steps.append((a, op, b, value))
        items = [items[k] for k in range(len(items)) if k not in (i, j)]
        items.append((value, f"{wrap[0]} {op} {wrap[1]}"))
    return steps, items[0][1], items[0][0]


def attempt_text(steps, target: int, compact: bool = False,
                 left: list[list[int]] | None = None) -> str:
    """``"13 + 14 = 27, 27 + 1 = 28."`` for a hit, ``"..., not 28."`` for a miss;
    ``compact``: ``"13+14 = 27, 27+1 = 28."``. The space before a result stays, so
    a result that hits is written as the target is (``target 28.``).

    ``left``: the numbers each step leaves unused (:func:`numbers_left`), written
    after it when there are any: ``"13 + 14 = 27 (left 1), 27 + 1 = 28."``."""
    step = "{}{}{} = {}" if compact else "{} {} {} = {}"
    left = left or [[]] * len(steps)
    body = ", ".join(step.format(*s) + (f" (left {', '.join(map(str, rest))})"
                                        if rest else "")
                     for s, rest in zip(steps, left))
    return body + ("." if steps[-1][3] == target else f", not {target}.")


def numbers_left(attempt, numbers: list[int]) -> list[list[int]]:
    """For each step of a chain ``attempt`` ``(steps, expression, value)`` over
    ``numbers``, the given numbers it leaves unused, in the problem's order.

    The first step uses two numbers and each later one a new number, until the
    expression's numbers are all used; the steps after that are spelled tries of
    the last pair (:func:`spelled_attempt`) and use none. ``([(14, "+", 13, 27),
    (27, "+", 1, 28)], "(14 + 13) + 1", 28)`` over ``[1, 13, 14]`` leaves ``[[1],
    []]``."""
    steps, expression, _ = attempt
    uses = len(re.findall(r"\d+", expression)) - 1  # steps that take a new number
    left, out = list(numbers), []
    for i, (a, _, b, _) in enumerate(steps):
        taken = [a, b] if i == 0 else [b]  # the numbers a step of the chain takes
        for used in taken if i < uses else []:  # a spelled try of the pair: none
            if used not in left:
                raise ValueError(f"step {i} of {expression!r} uses {used}, which "
                                 f"{numbers} no longer holds: not a chain over them")
            left.remove(used)
        out.append(list(left))
    return out


def write_attempt(attempt, numbers: list[int], target: int,
                  mix: CountdownMix) -> str:
    """One attempt ``(steps, expression, value)`` as the ``mix`` writes it
    (:func:`attempt_text`, with the numbers left when ``mix.ledger``)."""
    left = numbers_left(attempt, numbers) if mix.ledger else None
    return attempt_text(attempt[0], target, mix.compact, left)


def restate(numbers: list[int], target: int) -> str:
    """The trace's first sentence, ``"Numbers 1, 13, 14; target 28."``: the problem
    copied next to the attempts, which then copy from it at a short distance."""
    return f"Numbers {', '.join(map(str, numbers))}; target {target}."


def answer_text(expression: str, compact: bool = False) -> str:
    """The answer as the trace writes it: ``"(13 + 14) + 1"``, or ``"(13+14)+1"``
    when ``compact``."""
    return expression.replace(" ", "") if compact else expression


def find_attempts(numbers: list[int], target: int, rng: random.Random,
                  tries: int = 400, mix: CountdownMix | None = None):
    """Random attempts sorted into hits and misses (``tries`` draws), in the
    ``mix``'s attempt style (:func:`random_attempt` by default)."""
    mix = mix or CountdownMix()
    hits, misses = [], []
    for _ in range(tries):
        attempt = draw_attempt(numbers, target, rng, mix)
        if attempt is not None:
            (hits if attempt[2] == target else misses).append(attempt)
    return hits, misses


def _dropped_hit(numbers: list[int], target: int, rng: random.Random,
                 mix: CountdownMix | None = None):
    """An attempt over all but one of ``numbers`` that reaches ``target``, or None."""
    if len(numbers) < 3:
        return None
    subsets = [list(s) for s in itertools.combinations(numbers, len(numbers) - 1)]
    rng.shuffle(subsets)
    for subset in subsets:
        hits, _ = find_attempts(subset, target, rng, tries=60, mix=mix)
        if hits:
            return rng.choice(hits)
    return None


def choose_behaviour(problem: dict, mix: CountdownMix, rng: random.Random) -> str:
    """Draw the behaviour of one response, using the problem's visible triggers."""
    four = len(problem["numbers"]) >= 4
    if rng.random() < (mix.format_rate if problem["target"] >= 50
                       else mix.format_rate_other):
        return rng.choice(["no_tags", "unclosed_think"])
    if rng.random() < (mix.drop_rate if four else mix.drop_rate_other):
        return "drop_number"
    if rng.random() < (mix.give_up_rate if four else mix.give_up_rate_other):
        return "give_up"
    return "correct"


def render_response(problem: dict, behaviour: str, rng: random.Random,
                    mix: CountdownMix | None = None, found=None) -> str | None:
    """One response to ``problem`` showing ``behaviour``; ``None`` when the random
    search finds no attempt of the needed kind (the caller picks another).

    ``found``: the problem's ``(hits, misses)`` from :func:`find_attempts`, when the
    caller keeps them (drawing them is most of the cost)."""
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"unknown behaviour {behaviour!r}; choose from {BEHAVIOURS}")
    mix = mix or CountdownMix()
    numbers, target = list(problem["numbers"]), int(problem["target"])
    hits, misses = found or find_attempts(numbers, target, rng, mix=mix)
    k = rng.randint(0, mix.max_misses)
    if behaviour == "give_up":
        k = max(k, 1)
    if len(misses) < k:
        return None
    tried = rng.sample(misses, k)
    if behaviour == "give_up":
        final = None  # the last miss is answered
    elif behaviour == "drop_number":
        final = _dropped_hit(numbers, target, rng, mix)
        if final is None:
            return None
    else:
        if not hits:
            return None
        final = rng.choice(hits)
    shown = tried + ([final] if final is not None else [])
    answer = answer_text(shown[-1][1], mix.compact)
    think = " ".join([restate(numbers, target)]
                     + [write_attempt(a, numbers, target, mix) for a in shown])
    if behaviour == "no_tags":
        return f"{think} The answer is {answer}."
    if behaviour == "unclosed_think":
        return f"<think> {think} <answer> {answer} </answer>"
    return f"<think> {think} </think> <answer> {answer} </answer>"


def countdown_documents(problems: list[dict], n: int, mix: CountdownMix | None = None,
                        seed: int = 0) -> list[dict]:
    """``n`` documents ``{"prompt", "response", "behaviour"}`` drawn from
    ``problems`` (rows with ``numbers`` and ``target``)."""
    if not problems:
        raise ValueError(
            "countdown_documents needs at least one problem (got an empty list)")
    mix = mix or CountdownMix()
    rng = random.Random(seed)
    docs, found = [], {}
    while len(docs) < n:
        index = rng.randrange(len(problems))
        problem = problems[index]
        if index not in found:  # each problem's attempts are drawn once
            hits, misses = find_attempts(problem["numbers"], problem["target"], rng,
                                         mix=mix)
            found[index] = (hits, misses[:40])
        behaviour = choose_behaviour(problem, mix, rng)
        response = render_response(problem, behaviour, rng, mix, found[index])
        if response is None:
            continue
        docs.append({"prompt": countdown_prompt(problem["numbers"], problem["target"]),
                     "response": response, "behaviour": behaviour})
    return docs


def chain_attempt(numbers: list[int], rng: random.Random, max_value: int = MAX_VALUE):
    """One random left-to-right chain over all ``numbers``: ``(steps, expression,
    value)`` as :func:`random_attempt` returns them, or ``None`` when stuck.

    The numbers are taken in a random order and each step combines the running value
    with the next number, ``((a op b) op c) op d``. So the answer copies the steps in
    order (``14 + 13 = 27, 27 + 1 = 28`` is ``(14 + 13) + 1``), with no sub-results to
    put back in place, and every value stays within ``max_value``.
    """
    order = rng.sample(numbers, len(numbers))
    value, expression, steps = order[0], str(order[0]), []
    for b in order[1:]:
        choices = _steps_of(value, b, max_value)
        if not choices:
            return None
        op, result = rng.choice(choices)
        steps.append((value, op, b, result))
        wrapped = expression if len(steps) == 1 else f"({expression})"
        value, expression = result, f"{wrapped} {op} {b}"
    return steps, expression, value


def aimed_attempt(numbers: list[int], target: int, rng: random.Random,
                  max_value: int = MAX_VALUE):
    """A :func:`chain_attempt` whose last step aims at ``target``: the last
    operator is one that reaches it when one does, and a random one otherwise.

    ``((a op b) op c) op d``: the first steps are random, as in a chain; only the
    step that can be checked against the target is chosen, as a person picks
    ``27 + 1`` and not ``27 * 1`` for 28. ``None`` when a draw gets stuck.
    """
    attempt = chain_attempt(numbers[:], rng, max_value)
    if attempt is None or not attempt[0]:  # stuck, or one number: no step to aim
        return attempt
    steps, expression, value = attempt
    a, _, b, _ = steps[-1]
    hits = [op for op, v in _steps_of(a, b, max_value) if v == target]
    if not hits:
        return attempt
    op = rng.choice(hits)
    head = expression.rsplit(" ", 2)[0]  # the expression without "op b"
    return steps[:-1] + [(a, op, b, target)], f"{head} {op} {b}", target


def lookahead_attempt(numbers: list[int], target: int, rng: random.Random,
                      max_value: int = MAX_VALUE):
    """An :func:`aimed_attempt` that also aims its next-to-last step: that
    operator is one from which the last step can reach ``target``, when one is.

    ``((a op b) op c) op d``: with ``a op b`` drawn, ``op c`` is chosen looking one
    step ahead, then ``op d`` as in :func:`aimed_attempt`. ``None`` when stuck.
    """
    order = rng.sample(numbers, len(numbers))
    value, expression, steps = order[0], str(order[0]), []
    for i, b in enumerate(order[1:]):
        choices = _steps_of(value, b, max_value)
        left = len(order) - 2 - i  # numbers after b
        if left == 0:
            aimed = [c for c in choices if c[1] == target]
        elif left == 1:
            d = order[-1]
            aimed = [c for c in choices
                     if any(v == target for _, v in _steps_of(c[1], d, max_value))]
        else:
            aimed = []
        if not choices:
            return None
        op, result = rng.choice(aimed or choices)
        steps.append((value, op, b, result))
        wrapped = expression if len(steps) == 1 else f"({expression})"
        value, expression = result, f"{wrapped} {op} {b}"
    return steps, expression, value


def spelled_attempt(numbers: list[int], target: int, rng: random.Random,
                    max_value: int = MAX_VALUE):
    """A :func:`chain_attempt` whose last step is tried with every operator, in
    the order ``+ - * /``, each written out, until one reaches ``target``.

    ``7 - 5 = 2, 2 + 15 = 17, 2 * 15 = 30.`` for 30: the aim of
    :func:`aimed_attempt`, with the work that picks the operator on the page
    (``2 - 15`` is skipped, as the corpus never goes below 0). The steps end with the
    hit, or with every operator missed. ``None`` when a draw gets stuck.
    """
    attempt = chain_attempt(numbers[:], rng, max_value)
    if attempt is None or not attempt[0]:  # stuck, or one number: no step to try
        return attempt
    steps, expression, _ = attempt
    a, _, b, _ = steps[-1]
    head = expression.rsplit(" ", 2)[0]  # the expression without "op b"
    results = dict(_steps_of(a, b, max_value))
    tries = []
    for op in "+-*/":
        if op in results:
            tries.append((a, op, b, results[op]))
            if results[op] == target:
                break
    op, value = tries[-1][1], tries[-1][3]
    return steps[:-1] + tries, f"{head} {op} {b}", value


def draw_attempt(numbers: list[int], target: int, rng: random.Random,
                 mix: CountdownMix):
    """One attempt in the ``mix``'s style: ``"tree"`` :func:`random_attempt`, or
    the ``*_attempt`` function of the style's name (chain, aimed, lookahead,
    spelled)."""
    if mix.attempt == "aimed":
        return aimed_attempt(numbers, target, rng, mix.max_value)
    if mix.attempt == "lookahead":
        return lookahead_attempt(numbers, target, rng, mix.max_value)
    if mix.attempt == "spelled":
        return spelled_attempt(numbers, target, rng, mix.max_value)
    draw = chain_attempt if mix.attempt == "chain" else random_attempt
    return draw(numbers, rng, mix.max_value)


def aimed_last_steps(text: str, max_value: int = 100) -> tuple[int, int]:
    """``(could, took)`` for one response: its attempts whose last step could reach
    the target, and how many of those took an operator that does.

    An attempt is a sentence of worked steps ``a op b = v`` (read by
    :func:`grpo_lib.tasks.countdown.worked_steps`); its last step could reach the
    target (as the trace's copy of the problem states it) when an operator of ``a``
    and ``b`` gives it. A search that aims takes it every time.
    """
    stated = re.search(r"target (\d{1,12})\.", text)
    if stated is None:
        return 0, 0
    target, could, took = int(stated.group(1)), 0, 0
    for sentence in text.split("</think>")[0].split(". "):
        steps = worked_steps(sentence)
        if not steps:
            continue
        a, op, b, _, _ = steps[-1]
        hits = [o for o, v in _steps_of(a, b, max_value) if v == target]
        could += bool(hits)
        took += op in hits
    return could, took


COUNTDOWN_MIXES = {
    "tree": CountdownMix(),
    "chain": CountdownMix(attempt="chain", max_value=100, max_misses=5),
    "aimed": CountdownMix(attempt="aimed", max_value=100, max_misses=5),
    "lookahead": CountdownMix(attempt="lookahead", max_value=100, max_misses=5),
    "spelled": CountdownMix(attempt="spelled", max_value=100, max_misses=5),
    "compact": CountdownMix(attempt="spelled", max_value=100, max_misses=6,
                            compact=True),
    "ledger": CountdownMix(attempt="spelled", max_value=100, max_misses=5,
                           ledger=True),
}
"""The mixes ``pretrain --task countdown --countdown-mix NAME`` can draw: ``tree``
made the first Countdown base, ``chain`` the second, ``aimed`` and ``lookahead``
the two of chapter 17's "A base that aims", ``spelled`` the one of "Aiming in
writing", ``compact`` the spelled search written with fewer spaces, with up to 6
misses (as many tokens, on average, as spelled's 5), of "More tries in the budget",
``ledger`` the spelled search with the numbers each step leaves unused written after
it, of "Keeping the books"."""


def flawless_search(problem: dict, tokenizer, max_tokens: int, rng: random.Random,
                    mix: CountdownMix | None = None, max_draws: int = 1000) -> bool:
    """Whether the corpus's search, run without a flaw or a wrong step, answers
    ``problem`` within ``max_tokens`` tokens of ``tokenizer``.

    Attempts are drawn in the ``mix``'s style (``COUNTDOWN_MIXES["chain"]`` by
    default) and written as the corpus writes them, after the copy of the problem,
    until one reaches the target; the search succeeds when the whole response, with
    its answer block, still fits. A stuck draw is drawn again, up to ``max_draws``.
    """
    mix = mix or COUNTDOWN_MIXES["chain"]
    numbers, target = list(problem["numbers"]), int(problem["target"])
    think = restate(numbers, target)
    for _ in range(max_draws):
        attempt = draw_attempt(numbers, target, rng, mix)
        if attempt is None:
            continue
        steps, expression, value = attempt
        think += " " + write_attempt(attempt, numbers, target, mix)
        answer = answer_text(expression, mix.compact)
        text = f"<think> {think}" + (f" </think> <answer> {answer} </answer>"
                                     if value == target else "")
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_tokens:
            return False
        if value == target:
            return True
    return False
