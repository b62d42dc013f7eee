"""The designed pretraining corpus: arithmetic answers with flaws for RL to fix.

Every document is a prompt (chat or R1-Zero template) followed by a response. Most
responses reason correctly; the rest carry one of the flaws that the R1 pipeline is
known to fix, each *triggered by a visible feature of the problem* so that the base
model shows it even under greedy decoding (a flaw spread uniformly at 20% would be
invisible to greedy decoding, which always follows the most likely path):

==================  ===========================================  =======================
flaw                trigger (rate) / otherwise                   what fixes it
==================  ===========================================  =======================
left-to-right       precedence matters (``ltr_rate``)            R1-Zero RL (ch 7)
                    ``2 + 3 * 4 -> 2 + 3 = 5, 5 * 4 = 20``
broken format       parentheses or only 2 operands               format reward (ch 7)
                    (``format_rate``) / ``format_rate_other``
Chinese step words  a subtraction in the problem (``lang_rate``)  a language reward
                    / ``lang_rate_other``
rambling            ``repeat_rate`` everywhere: a step repeated   repetition (ch 9)
self-correction     ``self_correct_rate`` of the problems where   RL ("aha moment")
                    precedence matters: wrong step, "Wait, ..."
                    then the right trace
chat                ``chat_share`` of documents: greetings and    SFT
                    short facts, no reasoning
==================  ===========================================  =======================

:class:`CorpusMix` holds the rates; :func:`render_response` writes one response for a
given behaviour; :func:`sample_documents` draws a corpus from training problems only.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from .tasks.arithmetic import Problem, chat_prompt, r1_zero_prompt, solve_steps

# English connectives and their Chinese twins (the language-mixing flaw swaps them).
WORDS_EN = {"first": "First", "then": "Then", "finally": "Finally", "now": "now",
            "answer": "The answer is"}
WORDS_ZH = {"first": "首先", "then": "然后", "finally": "最后", "now": "现在",
            "answer": "答案是"}

CHAT_PAIRS = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What would you like to work on?"),
    ("Good morning!", "Good morning! How can I help?"),
    ("Thank you!", "You are welcome!"),
    ("Thanks for the help.", "Glad I could help!"),
    ("Who are you?", "I am a small assistant that solves arithmetic problems."),
    ("What can you do?", "I can solve arithmetic problems step by step."),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("What is the capital of Italy?", "The capital of Italy is Rome."),
    ("What color is the sky?", "The sky is blue on a clear day."),
    ("How many days are in a week?", "A week has seven days."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is water made of?", "Water is made of hydrogen and oxygen."),
    ("Which planet is the largest?", "Jupiter is the largest planet."),
    ("What do bees make?", "Bees make honey."),
    ("Goodbye!", "Goodbye! Have a nice day."),
    ("Tell me a fun fact.", "Octopuses have three hearts."),
]

BEHAVIOURS = ("correct", "left_to_right", "no_think", "no_tags", "unclosed_think",
              "chinese_words", "rambling", "self_correction")


@dataclass
class CorpusMix:
    """Rates of each designed flaw (see the module docstring for the triggers)."""

    ltr_rate: float = 0.6
    format_rate: float = 0.75
    format_rate_other: float = 0.04
    lang_rate: float = 0.6
    lang_rate_other: float = 0.05
    repeat_rate: float = 0.06
    self_correct_rate: float = 0.08
    chat_share: float = 0.04
    r1_zero_share: float = 0.1  # documents whose prompt is the raw R1-Zero template

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"CorpusMix.{name} must be a probability in [0, 1], got {value}")


def _trace(question: str, precedence: bool, words: dict, repeat_step: int | None = None,
           rng: random.Random | None = None) -> tuple[str, int]:
    """Reasoning text of one evaluation order, and its final value."""
    steps = solve_steps(question, precedence)
    parts = []
    for i, (a, op, b, value, rest) in enumerate(steps):
        last = i == len(steps) - 1
        if i == 0 and not last:
            lead = words["first"]
        elif last and i > 0:
            lead = words["finally"]
        else:
            lead = words["then"] if i > 0 else ""
        text = f"{lead} {a} {op} {b} = {value}".strip()
        text += "." if last else f", {words['now']} {rest}."
        parts.append(text)
        if repeat_step == i and rng is not None:
            parts += [text] * rng.randint(2, 4)
    return " ".join(parts), steps[-1][3]


def render_response(problem: Problem, behaviour: str, rng: random.Random) -> str:
    """One response to ``problem`` showing ``behaviour`` (one of :data:`BEHAVIOURS`)."""
    q = problem.question
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"unknown behaviour {behaviour!r}; choose from {BEHAVIOURS}")
    words = WORDS_ZH if behaviour == "chinese_words" else WORDS_EN
    precedence = behaviour != "left_to_right"
    repeat = rng.randrange(len(problem.steps)) if behaviour == "rambling" else None
    think, value = _trace(q, precedence, words, repeat, rng)
    if behaviour == "self_correction":
        wrong, _ = _trace(q, False, WORDS_EN)
        first_wrong = wrong.split(". ")[0].split(", now")[0]
        think = f"{first_wrong}. Wait, * comes before + and -. Let me recheck. {think}"
    if behaviour == "no_think":
        return f"<answer> {value} </answer>"
    if behaviour == "no_tags":
        return f"{think} {words['answer']} {value}."
    if behaviour == "unclosed_think":
        return f"<think> {think} <answer> {value} </answer>"
    return f"<think> {think} </think> <answer> {value} </answer>"


def choose_behaviour(problem: Problem, mix: CorpusMix, rng: random.Random) -> str:
    """Draw the behaviour of one response, using the problem's visible triggers."""
    if problem.precedence_matters:
        r = rng.random()
        if r < mix.self_correct_rate:
            return "self_correction"
        if r < mix.self_correct_rate + mix.ltr_rate:
            return "left_to_right"
    format_trigger = problem.has_parens or problem.num_operands == 2
    if rng.random() < (mix.format_rate if format_trigger else mix.format_rate_other):
        return rng.choices(["no_tags", "no_think", "unclosed_think"],
                           weights=[0.7, 0.15, 0.15])[0]
    lang_trigger = "-" in problem.question
    if rng.random() < (mix.lang_rate if lang_trigger else mix.lang_rate_other):
        return "chinese_words"
    if rng.random() < mix.repeat_rate:
        return "rambling"
    return "correct"


def sample_documents(problems: list[Problem], n: int, mix: CorpusMix | None = None,
                     seed: int = 0) -> list[dict]:
    """``n`` documents ``{"prompt", "response", "behaviour"}`` drawn from ``problems``.

    ``prompt`` is a list of chat messages (rendered later with the chat template) or,
    for a ``r1_zero_share`` of documents, the raw R1-Zero text.
    """
    if not problems:
        raise ValueError(
            "sample_documents needs at least one problem (got an empty list)")
    mix = mix or CorpusMix()
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        if rng.random() < mix.chat_share:
            user, reply = rng.choice(CHAT_PAIRS)
            docs.append({"prompt": [{"role": "user", "content": user}],
                         "response": reply, "behaviour": "chat"})
            continue
        problem = rng.choice(problems)
        behaviour = choose_behaviour(problem, mix, rng)
        prompt = r1_zero_prompt(problem.question) if rng.random() < mix.r1_zero_share \
            else chat_prompt(problem.question)
        response = render_response(problem, behaviour, rng)
        docs.append({"prompt": prompt, "response": response, "behaviour": behaviour})
    return docs


def document_text(doc: dict, tokenizer) -> str:
    """The full training text of a document, ending with the end-of-turn token."""
    if isinstance(doc["prompt"], str):  # R1-Zero: raw text, the base-model way
        return f"{doc['prompt']} {doc['response']}{tokenizer.eos_token}"
    messages = doc["prompt"] + [{"role": "assistant", "content": doc["response"]}]
    return tokenizer.apply_chat_template(messages, tokenize=False)
