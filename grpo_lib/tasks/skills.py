"""Non-reasoning skills for SFT stage 2, each scored by a rule.

DeepSeek-R1's second SFT stage mixes about 600k reasoning samples with about 200k
non-reasoning ones (writing, factual QA, self-cognition, translation) so the final
model is more than a solver (DeepSeek-R1 paper, section 2.3.3). The book's tiny model
gets four small skills of the same kinds, each with an exact answer a rule can check:

==================  ==========================================  ====================
skill               example question                            answer
==================  ==========================================  ====================
``number_words``    Write 47 in words.                          forty-seven
``compare``         Which is larger, 38 or 83?                  83
``translate``       Translate "seven" into Chinese.             七
                    Translate "四十七" into English.            forty-seven
``self_cognition``  Who are you?                                :data:`IDENTITY`
==================  ==========================================  ====================

:func:`make_skill_rows` draws rows (``messages`` for SFT plus ``skill``, ``question``,
``answer``); :func:`score_skill` scores one completion against its row, 1.0 or 0.0,
and never raises on malformed text.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from . import write_jsonl

SKILLS_DIR = Path(__file__).resolve().parents[2] / "data" / "skills"

SKILLS = ("number_words", "compare", "translate", "self_cognition")

IDENTITY = "I am a small assistant trained to solve arithmetic problems step by step."

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
        "ninety"]
DIGITS_ZH = "零一二三四五六七八九"

# The training questions come in many wordings: a core question (CORES) with an
# optional lead-in and an optional closing, several hundred distinct wordings per skill,
# the bare core twice as likely as each other lead-in and closing. A tiny model trained
# on two or three fixed wordings memorises them and answers a new wording as if it were
# arithmetic; varied wordings make it read what the question is about (one number, two
# numbers, a quoted word, "you").
#
# Two tests, neither used in training:
# * HELD_OUT: new wordings made of words the training wordings use ("Write the number
#   47 in words." where training has "Write 47 in words." and "Write the number 47 in
#   letters."): the skill's held-out set, data/skills/test.jsonl;
# * NEW_WORDS: one wording per question kind with a word no training wording uses
#   ("Spell out the number 47."): data/skills/test_new_words.jsonl. A model that learned
#   English before its SFT reads those; this one learned its English from this data.
CORES = {
    "number_words": ["Write {n} in words.", "How do you write {n} in English words?",
                     "Say {n} in words.", "What is {n} in words?",
                     "Write the number {n} in letters.", "{n} in English words?",
                     "Put {n} into words.", "How is {n} written in words?",
                     "Express {n} in words.", "Type {n} as words.", "Say {n}.",
                     "Read {n} aloud.", "Pronounce {n}.", "How do you say {n}?"],
    "compare": ["Which is larger, {a} or {b}?", "Which number is bigger: {a} or {b}?",
                "Which is bigger, {a} or {b}?", "What is the larger of {a} and {b}?",
                "{a} or {b}: which is larger?", "Pick the bigger number: {a} or {b}.",
                "Between {a} and {b}, which is bigger?",
                "Tell me the maximum of {a} and {b}.", "Is {a} or {b} the larger one?",
                "Name the bigger of {a} and {b}.",
                "{a} and {b}: which one is bigger?",
                "Take {a} and {b}. Which is larger?", "Larger one: {a} or {b}?"],
    "translate_en_zh": ['Translate "{w}" into Chinese.', 'What is "{w}" in Chinese?',
                        'How do you say "{w}" in Chinese?', 'Write "{w}" in Chinese.',
                        '"{w}" in Chinese?', 'Chinese for "{w}"?',
                        'Say "{w}" in Chinese.', 'Put "{w}" into Chinese.'],
    "translate_zh_en": ['Translate "{w}" into English.', 'What is "{w}" in English?',
                        'How do you say "{w}" in English?', 'Write "{w}" in English.',
                        '"{w}" in English?', 'English for "{w}"?',
                        'Say "{w}" in English.', 'Put "{w}" into English.'],
    "self_cognition": ["Who are you?", "What are you?", "Tell me about yourself.",
                       "What is your name?", "Describe yourself.",
                       "Who am I talking to?", "What can you do?",
                       "Say something about yourself.", "Are you a person?",
                       "What kind of assistant are you?"],
}
LEAD_INS = ["", "", "Please, ", "Quick question: ", "Hey, ", "Can you help? ",
            "I wonder: ", "Now: ", "Next one. "]
CLOSINGS = ["", "", " Thanks.", " Please.", " Be brief.", " Just the answer.",
            " One line."]
HELD_OUT = {
    "number_words": ["Write the number {n} in words.", "How do you say {n} in words?",
                     "What is the number {n} in English words?",
                     "Please write {n} as words."],
    "compare": ["Which number is larger: {a} or {b}?",
                "What is the bigger of {a} and {b}?",
                "Between {a} and {b}, which is larger?",
                "Pick the larger number: {a} or {b}."],
    "translate_en_zh": ['How do you write "{w}" in Chinese?',
                        'Please translate "{w}" into Chinese.',
                        'Put "{w}" in Chinese.', 'Say "{w}" in Chinese, please.'],
    "translate_zh_en": ['How do you write "{w}" in English?',
                        'Please translate "{w}" into English.',
                        'Put "{w}" in English.', 'Say "{w}" in English, please.'],
    "self_cognition": ["Tell me who you are.", "What are you? Describe yourself.",
                       "Who are you and what can you do?", "Describe what you are."],
}
"""Held-out wordings: none is a training wording, every word is in one."""
NEW_WORDS = {
    "number_words": "Spell out the number {n}.",
    "compare": "Of {a} and {b}, which is greater?",
    "translate_en_zh": 'Give the Chinese word for "{w}".',
    "translate_zh_en": 'Give the English word for "{w}".',
    "self_cognition": "Introduce yourself.",
}
"""One wording per question kind with a word that no training wording uses."""
NEW_WORDS_KEYS = ("spell", "greater", "give", "word ", "introduce")
"""Those words (case-folded)."""

TEMPLATES = {key: [lead + core + close for lead in LEAD_INS for core in cores
                   for close in CLOSINGS] for key, cores in CORES.items()}
"""Every training wording of each question kind."""
WORDINGS = ("train", "held_out", "new_words")


def number_to_words(n: int) -> str:
    """English words of ``0 <= n <= 99``: ``47 -> "forty-seven"``."""
    if not isinstance(n, int) or not 0 <= n <= 99:
        raise ValueError(f"number_to_words covers the integers 0..99, got {n!r}")
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("" if ones == 0 else "-" + ONES[ones])


def number_to_chinese(n: int) -> str:
    """Chinese numerals of ``0 <= n <= 99``: ``47 -> "四十七"``, ``10 -> "十"``."""
    if not isinstance(n, int) or not 0 <= n <= 99:
        raise ValueError(f"number_to_chinese covers the integers 0..99, got {n!r}")
    if n < 10:
        return DIGITS_ZH[n]
    tens, ones = divmod(n, 10)
    head = "十" if tens == 1 else DIGITS_ZH[tens] + "十"
    return head + ("" if ones == 0 else DIGITS_ZH[ones])


def _question(skill: str, rng: random.Random,
              wordings: str = "train") -> tuple[str, str, str]:
    """``(question, answer, template key)`` of one random item of ``skill``, asked in a
    wording of the set ``wordings`` ("train", "held_out" or "new_words")."""
    key = skill
    if skill == "translate":
        key = rng.choice(["translate_en_zh", "translate_zh_en"])
    if wordings == "train":
        template = rng.choice(TEMPLATES[key])
    elif wordings == "held_out":
        template = rng.choice(HELD_OUT[key])
    else:
        template = NEW_WORDS[key]
    n = rng.randint(0, 99)
    if key == "number_words":
        return template.format(n=n), number_to_words(n), key
    if key == "compare":
        a, b = rng.sample(range(100), 2)
        return template.format(a=a, b=b), str(max(a, b)), key
    if key == "translate_en_zh":
        return template.format(w=number_to_words(n)), number_to_chinese(n), key
    if key == "translate_zh_en":
        return template.format(w=number_to_chinese(n)), number_to_words(n), key
    return template, IDENTITY, key


def make_skill_rows(n_per_skill: int, seed: int = 0, skills: tuple = SKILLS,
                    wordings: str = "train") -> list[dict]:
    """``n_per_skill`` rows of each skill: ``{"messages", "skill", "question",
    "answer"}``, asked in training wordings (``wordings="train"``), in the held-out
    ones (``"held_out"``, :data:`HELD_OUT`) or in :data:`NEW_WORDS` (``"new_words"``).

    Self-cognition has only a few questions, so its rows repeat them."""
    unknown = set(skills) - set(SKILLS)
    if unknown:
        raise ValueError(f"unknown skill(s) {sorted(unknown)}; choose from {SKILLS}")
    if wordings not in WORDINGS:
        raise ValueError(f"wordings={wordings!r}; choose from {WORDINGS}")
    rng = random.Random(seed)
    rows = []
    for skill in skills:
        for _ in range(n_per_skill):
            question, answer, _key = _question(skill, rng, wordings)
            rows.append({"messages": [{"role": "user", "content": question},
                                      {"role": "assistant", "content": answer}],
                         "skill": skill, "question": question, "answer": answer})
    return rows


def _normalise(text: str) -> str:
    """Lower case, hyphens as spaces, outer punctuation and spaces dropped."""
    text = text.strip().lower().replace("-", " ")
    return re.sub(r"\s+", " ", text).strip(" .!。\"'")


def score_skill(skill: str, completion: str, answer: str) -> float:
    """1.0 when ``completion`` gives ``answer`` for ``skill``, else 0.0 (never raises).

    ``number_words``/``translate``/``self_cognition``: the whole completion equals the
    answer up to case, hyphens, spacing and a final full stop. ``compare``: the
    completion is the larger number, alone.
    """
    if not isinstance(completion, str) or skill not in SKILLS:
        return 0.0
    if skill == "compare":
        return float(completion.strip().rstrip(".") == str(answer).strip())
    return float(_normalise(completion) == _normalise(str(answer)))


def write_skills(out_dir: str | Path = SKILLS_DIR, n_train: int = 500,
                 n_test: int = 100, seed: int = 0) -> dict[str, Path]:
    """Write ``train.jsonl`` (``n_train`` rows per skill, training wordings),
    ``test.jsonl`` (``n_test`` per skill, held-out wordings) and
    ``test_new_words.jsonl`` (``n_test`` per skill, the new-word wordings) under
    ``out_dir``."""
    splits = {"train": make_skill_rows(n_train, seed=seed),
              "test": make_skill_rows(n_test, seed=seed + 1, wordings="held_out"),
              "test_new_words": make_skill_rows(n_test, seed=seed + 1,
                                                wordings="new_words")}
    paths = {}
    for name, rows in splits.items():
        paths[name] = write_jsonl(rows, Path(out_dir) / f"{name}.jsonl")
        print(f"wrote {len(rows)} skill rows to {paths[name]}")
    return paths


def skill_prompts(rows) -> list[list[dict]]:
    """The user turn of each row, as a one-message conversation for the sampler."""
    return [[{"role": "user", "content": r["question"]}] for r in rows]


def evaluate_skills(model, tokenizer, rows, max_new_tokens: int = 64,
                    batch_size: int = 64):
    """Greedy answers to every row and their rule scores.

    ``max_new_tokens`` must leave room for the longest answer: :data:`IDENTITY` alone
    is 41 tokens of the book's tokenizer (it spells most words letter by letter).

    Returns ``(table, samples)``: ``table`` has one row per skill (``accuracy``, ``n``);
    ``samples`` one row per question (``skill, question, answer, completion,
    correct``).
    """
    import pandas as pd

    from ..sampling import generate

    rows = list(rows)
    if not rows:
        raise ValueError("evaluate_skills needs at least one row; make them with "
                         "make_skill_rows(...) or read data/skills/test.jsonl")
    rollout = generate(model, tokenizer, skill_prompts(rows), do_sample=False,
                       max_new_tokens=max_new_tokens, batch_size=batch_size)
    samples = pd.DataFrame({
        "skill": [r["skill"] for r in rows], "question": [r["question"] for r in rows],
        "answer": [r["answer"] for r in rows], "completion": rollout.texts})
    samples["correct"] = [score_skill(s, c, a) for s, c, a in zip(
        samples["skill"], samples["completion"], samples["answer"])]
    table = samples.groupby("skill")["correct"].agg(accuracy="mean", n="size")
    return table, samples
