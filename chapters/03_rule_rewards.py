# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (ch03)=
# # Rule-based rewards
#
# GRPO needs one number per completion: the reward. {doc}`01_two_plus_three_times_four`
# took the rewards of the four outputs o1..o4 as given; this chapter writes the
# functions that compute them.
#
# DeepSeek-R1-Zero was trained without a learned reward model {cite}`deepseekai2025r1`.
# Its rewards are *rules*: an **accuracy reward** (is the final answer right?) and a
# **format reward** (is the reasoning inside `<think>` and the answer inside
# `<answer>`?). The paper's reason: a neural reward model can be *hacked* by the policy
# during large-scale RL, and retraining it costs resources and complicates the pipeline.
# Rules are cheap, transparent and hard to fool — if they are written carefully. That
# "if" is the subject of this chapter: every rule below is shown, applied to a table of
# completions (well-behaved and hostile), and two careless ones are hacked on purpose.
#
# All reward functions of `grpo_lib.rewards` share one signature, TRL's convention
# {cite}`vonwerra2020trl` without the chat wrapping:
#
# ```python
# fn(completions: list[str], **columns) -> list[float]
# ```
#
# `completions` holds one string per sample; dataset columns (`answer`, `numbers`,
# `target`, ...) arrive as lists aligned with it; columns a function does not use are
# swallowed. A reward function **never raises on model output**: `None`, an empty
# string, a megabyte of text or an injected tag all get a finite score, the one its
# rule gives, in bounded time. It **does raise on programmer mistakes** (a missing
# column, lists of different lengths) with a message that says what to pass.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import math
import random
import time

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lib import parsing
from grpo_lib import rewards as R
from grpo_lib.advantages import group_advantages
from grpo_lib.display import show_source
from grpo_lib.profiles import profile
from grpo_lib.safe_math import ExpressionError, safe_eval

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 60)
pd.set_option("display.width", 120)

# %% [markdown]
# ## The four outputs again
#
# The running example of {doc}`01_two_plus_three_times_four`: the question is *What is
# 2 + 3 \* 4?* and the policy samples a group of four outputs.

# %%
o1 = "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>"
o2 = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
o3 = "<answer> 14 </answer>"
o4 = "<think> two, three, four... add, or not, maybe 7 </think> <answer> 7 </answer>"
outputs = [o1, o2, o3, o4]
gold = ["14"] * 4  # the `answer` column, repeated for each of the G = 4 completions
names = ["o1", "o2", "o3", "o4"]

# %% [markdown]
# ## The format reward
#
# R1-Zero's template asks for `<think> reasoning </think> <answer> answer </answer>`.
# Two readings of "follows the format" are in use:
#
# * **strict** (`format_reward`) — the *whole* completion is exactly one think block
#   followed by one answer block, up to whitespace; both blocks non-blank, no nested or
#   repeated tags, nothing outside:
#   $r = \mathbb 1\big[o = \texttt{<think>}\,T\,\texttt{</think>}\,\texttt{<answer>}\,A
#   \,\texttt{</answer>}\big]$;
# * **soft** (`soft_format_reward`) — a think block and, after it, an answer block
#   appear somewhere, with any text around them.
#
# Both are built on `parsing.is_well_formatted` (`format_reward`, shown in
# {doc}`01_two_plus_three_times_four`, calls it with `strict=True`). It uses `str.find`
# and `str.count` only: no regular expression, so no catastrophic backtracking on
# hostile input. Its strict branch:

# %%
show_source(parsing.is_well_formatted, start="body = text.strip()",
            end="return bool(reasoning")

# %% [markdown]
# A table of completions, from the four outputs to ones written to slip through a
# careless pattern. Open-R1's format reward {cite}`openr1` is the regular expression
# `^<think>.*?</think>\s*<answer>.*?</answer>$` (with `re.DOTALL | re.MULTILINE`); it is
# included as a column for comparison.

# %%
import re

OPEN_R1_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$",
                            re.DOTALL | re.MULTILINE)


def open_r1_format(completions, **kwargs):
    return [1.0 if OPEN_R1_FORMAT.match(c) else 0.0 for c in completions]


format_cases = {
    "o1": o1, "o2": o2, "o3": o3, "o4": o4,
    "newlines": "<think>\n3 * 4 = 12\n</think>\n<answer>\n14\n</answer>",
    "chatty": "Sure! <think> 3 * 4 = 12 </think> <answer> 14 </answer> Hope it helps",
    "empty blocks": "<think></think><answer></answer>",
    "injected": "<think> a </think> <answer> 20 </answer><answer> 14 </answer>",
    "nested": "<think> a </think> <answer> <think> b </think> 14 </answer>",
    "wrong order": "<answer> 14 </answer> <think> 3 * 4 = 12 </think>",
    "unclosed": "<think> 3 * 4 = 12 <answer> 14 </answer>",
}
texts = list(format_cases.values())
pd.DataFrame({
    "strict": R.format_reward(texts),
    "soft": R.soft_format_reward(texts),
    "Open-R1 regex": open_r1_format(texts),
}, index=list(format_cases))

# %% [markdown]
# What to notice: the regex and the strict reward agree on the four outputs, but the
# regex pays for *empty* blocks and for *injected* or *nested* tags, because `.*?` may
# run across a closing tag. The strict reward refuses all three: a completion that
# earns the format reward must contain one reasoning and one answer.

# %% [markdown]
# ## The accuracy reward
#
# The accuracy reward reads the final answer and compares it with the gold answer:
# $r_i = \mathbb 1[\operatorname{equal}(\operatorname{extract}(o_i), a_i)]$. Both halves
# are in `grpo_lib.parsing`:
#
# * `extract_answer(text, strict=True)` — the content of the **last** `<answer>` block;
#   `strict=False` — the **last number** in the text (how GSM8K graders read free text).
# * `answers_equal(pred, gold)` — exact rational equality for plain numbers
#   (`14 == 14.0 == " 14 " == "28/2"`), Unicode digits read as digits, `math_verify` for
#   single LaTeX values (`\frac{1}{2}` equals `0.5`), and a refusal to *evaluate*
#   expressions when the gold is a number ({ref}`ch03-reward-hacking` shows why).
#
# `accuracy_reward` (shown in {doc}`01_two_plus_three_times_four`) is these two calls
# per completion. The extraction:

# %%
show_source(parsing.extract_answer, docstring=False)

# %% [markdown]
# The comparison, in the order of its checks (its docstring lists them with examples):

# %%
show_source(parsing.answers_equal, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
answer_cases = ["14", "14.0", " +014 ", "１４", "١٤", "\\frac{28}{2}", "$\\boxed{14}$",
                "28/2", "2 + 12", "2 + 3 * 4", "fourteen", "-14", "14.000001"]
completions = [f"<think> ... </think> <answer> {a} </answer>" for a in answer_cases]
pd.DataFrame({"answer block": answer_cases,
              "accuracy": R.accuracy_reward(completions, answer=["14"] * 13)})

# %% [markdown]
# Unicode digits: `'１４'` (full width) and `'١٤'` (Arabic-Indic) are the number 14
# written in other digit sets, so they count as correct (`parsing.normalize_digits`
# maps every Unicode decimal digit to ASCII).
#
# (ch03-lenient-parsing)=
# ### Strict and lenient extraction
#
# Strict extraction reads only the `<answer>` block; lenient extraction
# (`strict=False`) takes the last number anywhere in the text, which is how graders of
# free-text benchmarks such as GSM8K read an answer. They differ on free text, and the
# lenient one can be gamed: a completion that hedges, or simply ends on the right
# number, is graded correct.

# %%
# NBVAL_CHECK_OUTPUT
free_text = ["2 + 3 * 4 = 14", "<answer> 14 </answer> or maybe 20",
             "3 * 4 = 12, 2 + 12 = 14. The answer is 14.", o3,
             "<think> 20? </think> <answer> 20 </answer> or 14"]
free_gold = ["14"] * len(free_text)
lenient = [parsing.extract_answer(t, strict=False) for t in free_text]
pd.DataFrame({
    "strict extract": [str(parsing.extract_answer(t)) for t in free_text],
    "lenient extract": [str(x) for x in lenient],
    "strict reward": R.accuracy_reward(free_text, answer=free_gold),
    "lenient reward": R.accuracy_reward(free_text, answer=free_gold, strict=False),
}, index=free_text)

# %% [markdown]
# The last row is the hack: its answer block says 20, the wrong answer, and a trailing
# "or 14" makes the lenient reader grade it correct. Under lenient parsing a policy
# learns to end every completion on its best guess, whatever the `<answer>` block says;
# the strict reward gives it nothing. The evaluation harness reports both, and the
# book trains with the strict one.
#
# ### The worked example's rewards, computed
#
# The reward of the worked example in {doc}`01_two_plus_three_times_four` is accuracy
# plus a tenth of the format reward. `combine_rewards(funcs, weights)` builds
# $r = \sum_k w_k r_k$ as a new reward function that remembers each part (the trainer
# logs them separately); calling it runs every function and sums:

# %%
show_source(R.CombinedReward.__call__)

# %%
# NBVAL_CHECK_OUTPUT
r1_zero_reward = R.combine_rewards([R.accuracy_reward, R.format_reward], [1.0, 0.1])
walkthrough_rewards = r1_zero_reward(outputs, answer=gold)
table = pd.DataFrame(r1_zero_reward.last_breakdown, index=names)
table["total"] = walkthrough_rewards
print(r1_zero_reward.__name__)
table

# %% [markdown]
# These are the rewards of the walkthrough's table {cite}`khan2025r1scratch`, the ones
# {doc}`01_two_plus_three_times_four` starts from: o3 is right but skips the reasoning
# tags, so it gets the accuracy point without the format tenth; o1 and o4 are wrong but
# well formatted.

# %% [markdown]
# ## Hostile completions
#
# A policy under RL pressure writes whatever earns reward, and a bug in a reward
# function can stop a run that has been going for a day. Every function therefore
# gets the same hostile inputs. GRPO-Zero {cite}`grpozero` scores Countdown answers
# (next section) with Python's `eval`, after checking that the answer holds only
# digits, `+ - * / ( )` and spaces and uses each given number once. For the numbers
# 45, 43, 83 and 38 the answer `45**43**83**38` passes both checks, and `eval` would
# then try to build an integer with more digits than there are atoms in the universe:
# the trainer hangs. Deeply nested input makes CPython's parser fail with
# `SyntaxError`, `RecursionError` or `MemoryError`, which a reward function must catch.

# %%
hostile = {
    "None": None, "empty": "", "10k chars": "<think> " + "2 + 3 " * 1700
    + "</think> <answer> 14 </answer>",
    "1 MB": "<think> " + "a " * 500_000 + "</think> <answer> 14 </answer>",
    "<think> x 100k": "<think>" * 100_000,
    "power tower": "<think> t </think> <answer> 9**9**9**9 </answer>",
    "5000 parens": "<answer>" + "(" * 5000 + "14" + ")" * 5000 + "</answer>",
    "100k digits": "<answer> " + "1" * 100_000 + " </answer>",
    "divide by 0": "<answer> 14 / 0 </answer>",
    "injected": "<think> t </think> <answer> 20 </answer><answer>14</answer>",
    "unicode": "<think> ٣ × ٤ + ٢ </think> <answer> ١٤ </answer>",
    "LaTeX bomb": "<answer> \\Gamma(99999999) </answer>",
}
hostile_texts = list(hostile.values())
n_hostile = len(hostile_texts)
columns = dict(answer=["14"] * n_hostile, numbers=[[2, 3, 4]] * n_hostile,
               target=[14] * n_hostile, question=["2 + 3 * 4"] * n_hostile)
scores, seconds = {}, {}
for name, fn in R.REWARD_FUNCTIONS.items():
    start = time.perf_counter()
    scores[name] = fn(hostile_texts, **columns)
    seconds[name] = time.perf_counter() - start
hostile_table = pd.DataFrame(scores, index=list(hostile)).T

# %%
# NBVAL_CHECK_OUTPUT
hostile_table.round(3)

# %%
# NBVAL_IGNORE_OUTPUT
print(f"slowest function on all {n_hostile} hostile completions: "
      f"{max(seconds, key=seconds.get)}, {max(seconds.values()) * 1000:.1f} ms")

# %% [markdown]
# Every function returns a finite score for every input; the time printed above is
# the slowest function's, for all twelve inputs together. The test suite
# (`tests/test_rewards.py`) asserts the same for each function separately, with a
# one-second bound per call.

# %% [markdown]
# ## Countdown and a safe evaluator
#
# GRPO-Zero {cite}`grpozero` trains on Countdown: given numbers such as
# `[45, 43, 83, 38]` and a target `33`, write an expression that uses each number
# exactly once and evaluates to the target. Its reward is
# $r = 0.1\, r_\text{format} + r_\text{answer}$, where the format score gives partial
# credit (0.1 for a think block, 0.5 for an answer block, both 0.6, and 1 for the exact
# format); the library's `countdown_reward` computes the same sum.
#
# The answer is evaluated by `safe_math.safe_eval`: the expression is parsed with `ast`
# and walked by our own evaluator that knows numbers, `+ - * /`, unary minus and
# parentheses, and nothing else by default (`**` only with `allow_pow=True`). Length
# and nesting are checked *before* parsing, every
# intermediate value is bounded, arithmetic is exact (`fractions.Fraction`), and every
# parser failure (including `RecursionError` and `MemoryError`) comes back as an
# `ExpressionError`.

# %%
show_source(safe_eval, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
expressions = ["83-45-43+38", "(1 + 2) / 3", "0.1 + 0.2", "7 / 0", "9**9**9**9",
               "(" * 5000 + "1" + ")" * 5000, "__import__('os').system('ls')",
               "abs(-3)", "2(3)"]
rows = []
for expr in expressions:
    try:
        value, error = str(safe_eval(expr)), ""
    except ExpressionError as err:
        value, error = "", str(err)[:58]
    rows.append({"expression": expr[:30], "value": value, "error": error})
print(f"in floats, 0.1 + 0.2 = {0.1 + 0.2!r}; exactly, {safe_eval('0.1 + 0.2')}")
pd.DataFrame(rows)

# %% [markdown]
# Note `0.1 + 0.2`: in floats it misses `0.3`; in exact arithmetic it is `3/10`, so
# the Countdown check needs no tolerance (GRPO-Zero compares floats within `1e-5`).
# The answer reward is 1 when `countdown_verdict` calls the answer `correct`: the
# numbers used must be the numbers given, and the expression must evaluate to the
# target:

# %%
show_source(R.countdown_verdict, start="wanted = sorted(",
            end='return "correct" if value')

# %%
# NBVAL_CHECK_OUTPUT
numbers, target = [45, 43, 83, 38], 33
cd_answers = {
    "a solution": "83-45-43+38",
    "reordered": "38 + (83 - 45) - 43",
    "38 used twice": "83-45-43+38+38-38",
    "43 missing": "83-45-38+33",
    "decimal": "83-45-43+38.0",
    "division by 0": "83/(45-45)+43+38",
    "wrong value": "83+45-43-38",
    "power tower": "9**9**9**9",
}
cd_texts = [f"<think> try 83 - 45 = 38 </think>\n<answer>{a}</answer>"
            for a in cd_answers.values()]
cd_cols = dict(numbers=[numbers] * len(cd_texts), target=[target] * len(cd_texts))
pd.DataFrame({
    "format": R.countdown_format_reward(cd_texts),
    "answer": R.countdown_answer_reward(cd_texts, **cd_cols),
    "reward": R.countdown_reward(cd_texts, **cd_cols),
}, index=list(cd_answers))

# %% [markdown]
# A solution in any order scores $0.1 \cdot 1 + 1 = 1.1$; every way to break the rules
# keeps only the format tenth. The power tower is refused before anything is computed.

# %% [markdown]
# ## Language consistency
#
# R1-Zero's reasoning often mixed languages. DeepSeek-R1 added a
# **language-consistency reward** during reasoning-oriented RL
# {cite}`deepseekai2025r1`: the proportion of target-language words in the chain of
# thought. The paper does not define "word" for Chinese, which has no spaces. Here the
# reasoning (the think block) is cut into *language units* — one per Latin word, one per
# CJK character, one per word of any other alphabet; digits and symbols belong to no
# language — and
#
# $$ r_\text{lang} = \frac{u_\text{target}}{u_\text{latin} + u_\text{cjk} +
# u_\text{other}}. $$
#
# A reasoning made only of digits and symbols (o1's `2 + 3 = 5, 5 * 4 = 20`) is
# consistent with every language and scores 1. The counting:

# %%
show_source(parsing.script_counts, docstring=False)

# %% [markdown]
# and the reward, per completion (a completion without a think block is read whole):

# %%
show_source(R.language_consistency_reward, start="reasoning = think_text(text)",
            end="scores.append(1.0 if total")

# %%
# NBVAL_CHECK_OUTPUT
r1_reward = R.combine_rewards([R.accuracy_reward, R.language_consistency_reward],
                              [1.0, 0.2])
totals = r1_reward([o1, o2], answer=["14", "14"])
pd.DataFrame({**r1_reward.last_breakdown, "1·acc + 0.2·lang": totals},
             index=["o1", "o2"])

# %% [markdown]
# o1 is wrong but consistent, o2 right and consistent: the language term adds the
# same 0.2 to both. Now completions whose reasoning actually mixes languages, in the
# style of the flawed corpus of {doc}`05_tiny_base_model` (Chinese connectives in
# English reasoning):

# %%
# NBVAL_CHECK_OUTPUT
mixed = [
    "<think> First 3 * 4 = 12, then 2 + 12 = 14. </think> <answer> 14 </answer>",
    "<think> 首先 3 * 4 = 12, 然后 2 + 12 = 14. </think> <answer> 14 </answer>",
    "<think> First 3 * 4 = 12, 然后 2 + 12 = 14. </think> <answer> 14 </answer>",
    "<think> 先算乘法：3 * 4 = 12，再算加法：2 + 12 = 14。</think> <answer> 14 </answer>",
]
pd.DataFrame({
    "units": [parsing.script_counts(parsing.think_text(t)) for t in mixed],
    "lang=en": R.language_consistency_reward(mixed, language="en"),
    "lang=zh": R.language_consistency_reward(mixed, language="zh"),
}, index=[t[8:40] for t in mixed])

# %% [markdown]
# The paper reports that this reward costs a little accuracy but makes the reasoning
# readable. Counting by script is a proxy: French reasoning would score 1 for `"en"`.

# %% [markdown]
# ## Shaping rewards from Open-R1, Kimi 1.5 and DAPO
#
# R1-Zero trained on rule rewards only, accuracy and format, and R1's reasoning stage
# added language consistency; R1's last RL stage added learned reward models for
# general prompts {cite}`deepseekai2025r1`. Open-R1 {cite}`openr1` collected more, and
# later work added length control. They shape *how* the model answers rather than
# *whether* it is right.
#
# **Reasoning steps** (Open-R1): $r = \min(1, k/3)$ with $k$ the number of step markers
# (`Step 1:`, numbered lines, bullets, `First,` / `Next,` / `Finally,`). The library
# compiles the pattern with `re.MULTILINE`, so every line that starts with a numbered
# item (`1.`, `2.`) counts; Open-R1's code leaves the flag out, so its `^\d+\.`
# matches only at the very start of the text.

# %%
show_source(R.reasoning_steps_reward, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
step_texts = {"o2": o2, "markers": "Step 1: 3 * 4 = 12\nStep 2: 2 + 12 = 14",
              "connectives": "First, 3 * 4 = 12. Next, 2 + 12 = 14. Finally, 14.",
              "list": "1. multiply\n2. add\n3. answer"}
pd.Series(R.reasoning_steps_reward(list(step_texts.values())), index=list(step_texts),
          name="reasoning_steps_reward")

# %% [markdown]
# o2's two steps are equations, not markers, so it scores 0: a reward written for one
# output style says nothing about another.
#
# (ch03-length-rewards)=
# ### Length rewards
#
# **Length within the group** (Kimi 1.5 {cite}`kimi2025k15`): with $\text{len}_i$ the
# lengths of the $G$ completions of one prompt,
#
# $$ \lambda_i = 0.5 - \frac{\text{len}_i - \min_j \text{len}_j}{\max_j \text{len}_j -
# \min_j \text{len}_j}, \qquad r_i = \begin{cases}\lambda_i & \text{correct}\\
# \min(0, \lambda_i) & \text{wrong}\end{cases} $$
#
# The reward needs the group: pass `num_generations` (without it, the whole list is one
# group, which is what Open-R1's version does with the whole batch). Per group:

# %%
show_source(R.length_reward, start="for group in _groups",
            end="rewards[i] = lam")

# %%
# NBVAL_CHECK_OUTPUT
kimi = R.length_reward(outputs, answer=gold, num_generations=4)
pd.DataFrame({"length": [len(o) for o in outputs],
              "correct": R.accuracy_reward(outputs, answer=gold),
              "length_reward": kimi}, index=names)

# %% [markdown]
# o3, the shortest and correct, gets the largest reward the formula allows. o2 is
# correct too but among the longest of its group, so even a right answer is penalised:
# the reward is relative to the group. o4, the longest, gets the minimum; o1 is wrong
# and its $\lambda$ is negative, so it keeps it (a wrong answer is never rewarded for
# being short).
#
# **Cosine-scaled length** (Yeo et al. {cite}`yeo2025longcot`, in Open-R1): a correct
# answer earns from `max_value_correct` (length 0) down to `min_value_correct` (length
# `max_len`); a wrong answer is penalised *most* when short (a quick guess) and least
# when long (an honest attempt): $r = r_\text{end} + \tfrac12 (r_\text{start} -
# r_\text{end})\,(1 + \cos(\pi \min(1, L / L_\text{max})))$.
#
# **Repetition penalty** (Open-R1): $r = p_\text{max} \cdot (1 - \#\text{distinct
# n-grams} / \#\text{n-grams})$ over word trigrams.
#
# **Soft overlong punishment** (DAPO {cite}`yu2025dapo`, eq. 13): zero up to
# $L_\text{max} - L_\text{cache}$, then a linear ramp to −1 at $L_\text{max}$, −1
# beyond. Lengths are tokens when `completion_ids` is passed (TRL passes it), else
# characters. (Exercise 3.2 asks you to write it, so its source is not shown here;
# the solutions have one.)
#
# The cosine reward, per completion, and the repetition penalty:

# %%
show_source(R.cosine_scaled_reward, start="for length, ok in zip",
            end="rewards.append(end")

# %%
show_source(R.repetition_penalty_reward, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
loop = "<think> 3 * 4 = 12, " + "2 + 12 = 14, " * 6 + "</think> <answer> 14 </answer>"
penalties = R.repetition_penalty_reward([o2, loop])
print(f"repetition penalty of o2: {penalties[0]:.3f}")
print(f"repetition penalty of a looping answer: {penalties[1]:.3f}")

# %%
lengths = list(range(0, 1201, 10))
fake_ids = [[0] * n for n in lengths]  # token ids: only their count matters here
right = ["<answer> 14 </answer>"] * len(lengths)
wrong = ["<answer> 20 </answer>"] * len(lengths)
cols = dict(answer=["14"] * len(lengths), completion_ids=fake_ids)
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2), constrained_layout=True)
for texts_, label in ((right, "correct"), (wrong, "wrong")):
    axes[0].plot(lengths, R.cosine_scaled_reward(texts_, max_len=1000, **cols),
                 label=label)
axes[0].set(title="cosine_scaled_reward", xlabel="length (tokens)",
            ylabel="reward")
axes[0].legend()
overlong = R.soft_overlong_punishment(right, max_completion_len=1000,
                                      soft_punish_cache=250, completion_ids=fake_ids)
axes[1].plot(lengths, overlong, color="C3")
axes[1].axvline(750, ls=":", color="gray")
axes[1].set(title="soft_overlong_punishment", xlabel="length (tokens)")
for ax in axes:
    ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# Both are drawn with a limit of 1,000 tokens (`max_len`, $L_\text{max}$) and DAPO's
# ramp over the last 250 ($L_\text{cache}$, the dotted line). What to notice: past
# `max_len` the cosine curves stay flat (Open-R1's version does not clip
# $L / L_\text{max}$, so there its curve for correct answers turns back up and the one
# for wrong answers turns back down), and the DAPO ramp only starts in the last
# `soft_punish_cache` units, so it never touches answers of normal length.
#
# A length term is a bonus for something other than the answer, and a bonus can be
# collected. The cosine reward pays a *wrong* answer more the longer it is (an "honest
# attempt"), so padding a wrong answer raises its reward. The repetition penalty
# catches padding that loops, not padding that does not repeat itself:

# %%
# NBVAL_CHECK_OUTPUT
reasoning = "<think> 2 + 3 = 5, 5 * 4 = 20. "
padded = {
    "o1 (wrong)": o1,
    "o1 + a loop": reasoning + "Let me check that again. " * 38
    + "</think> <answer> 20 </answer>",
    "o1 + counting": reasoning + "Counting to be sure: "
    + " ".join(str(k) for k in range(1, 260)) + " </think> <answer> 20 </answer>",
}
pad_texts = list(padded.values())
pad_table = pd.DataFrame({
    "characters": [len(t) for t in pad_texts],
    "format": R.format_reward(pad_texts),
    "cosine_scaled": R.cosine_scaled_reward(pad_texts, answer=["14"] * 3, max_len=1000),
    "repetition": R.repetition_penalty_reward(pad_texts),
}, index=list(padded))
pad_table["cosine + repetition"] = pad_table["cosine_scaled"] + pad_table["repetition"]
pad_table.round(3)

# %% [markdown]
# Padding o1 to the length limit lifts its cosine reward from about −1 to −0.5, the most
# a wrong answer can earn, without touching the arithmetic. The looping padding pays
# that back in repetition penalty; counting does not repeat a single word trigram and
# keeps the bonus. Under such a reward a policy learns to pad its wrong answers, which
# is why a length term needs a penalty for padding that matches how the model actually
# pads, and why the length of wrong and right answers is worth logging separately
# ({doc}`08_loss_variants` does).

# %% [markdown]
# ## Every reward on the designed corpus
#
# {doc}`05_tiny_base_model` pretrains the book's base model on a corpus whose flaws are
# designed:
# left-to-right arithmetic (`2 + 3 * 4 = 20`), missing tags, Chinese connectives,
# rambling repetition, self-corrections. The base model imitates these responses, so
# they are the completions the rewards will meet in training. Here each behaviour is
# rendered for the same problems and scored by every reward.

# %%
from grpo_lib.corpus import BEHAVIOURS, render_response
from grpo_lib.tasks.arithmetic import make_problems

n_problems = P.pick(smoke=20, cpu=200, gpu=1000)
problems = [p for p in make_problems(n_problems, seed=3) if p.precedence_matters]
rng = random.Random(0)
rows = []
for problem in problems:
    for behaviour in BEHAVIOURS:
        rows.append({"behaviour": behaviour, "answer": str(problem.answer),
                     "completion": render_response(problem, behaviour, rng)})
corpus = pd.DataFrame(rows)
print(f"{len(problems)} problems where precedence matters x {len(BEHAVIOURS)} "
      f"behaviours = {len(corpus)} completions")
corpus.groupby("behaviour").head(1)[["behaviour", "completion"]]

# %%
shown = ["accuracy_reward", "format_reward", "soft_format_reward",
         "language_consistency_reward", "reasoning_steps_reward",
         "repetition_penalty_reward"]
texts, answers = corpus["completion"].tolist(), corpus["answer"].tolist()
for name in shown:
    corpus[name] = R.REWARD_FUNCTIONS[name](texts, answer=answers)
corpus["lenient_accuracy"] = R.accuracy_reward(texts, answer=answers, strict=False)
by_behaviour = corpus.groupby("behaviour")[shown + ["lenient_accuracy"]].mean()
by_behaviour.columns = [c.replace("_reward", "") for c in by_behaviour.columns]
by_behaviour.round(2)

# %% [markdown]
# Read the table column by column. Strict accuracy catches `left_to_right` (and
# `no_tags`, which has no `<answer>` block to read). The format rewards catch
# `no_think`, `no_tags` and `unclosed_think`; the soft one agrees with the strict one
# here, because these flaws break the blocks themselves, not what surrounds them.
# Language consistency catches `chinese_words`; the repetition penalty catches
# `rambling`. Lenient accuracy forgives `no_tags` — the answer is right, only the tags
# are missing — which is why the evaluation harness reports both. The step reward is
# zero throughout: the corpus writes `First 3 * 8 = 24` without the comma Open-R1's
# pattern looks for. And nothing penalises `self_correction`, nor should it: a model
# that notices and fixes its own mistake is what RL hopes to grow (DeepSeek-R1-Zero's
# "aha moment" was such a self-correction, {cite}`deepseekai2025r1`). No single rule
# sees every flaw; that is why R1's reward is a sum.

# %% [markdown]
# ## Composing and weighting
#
# A composed reward $r = \sum_k w_k r_k$ feeds the group advantages of
# {doc}`01_two_plus_three_times_four`, $\hat A_i = (r_i - \bar r)/(\sigma_r +
# \epsilon_{\mathrm{std}})$. The weights decide the *ranking* inside a group, which
# sets the direction of each push, and the size of every advantage. With a format
# weight of 0.1, o3 (right, no tags) beats o1 (wrong, tagged); with a weight of 1.5
# it is the other way round.

# %%
# NBVAL_CHECK_OUTPUT
rows = {}
for w in (0.1, 0.5, 1.0, 1.5):
    reward = R.combine_rewards([R.accuracy_reward, R.format_reward], [1.0, w])
    adv = group_advantages(reward(outputs, answer=gold), group_size=4)
    rows[f"format weight {w}"] = adv.tolist()
pd.DataFrame(rows, index=names).T.round(3)

# %% [markdown]
# With weight 1.5 the group prefers a wrong answer in tags to a right answer without
# them: the model would learn that the tags matter more than the arithmetic. R1-Zero's
# small format weight keeps correctness first.

# %% [markdown]
# (ch03-reward-hacking)=
# ## Rewards hacked on purpose
#
# Two rewards that look reasonable and are not.
#
# **Hack 1 — a substring test.** A tempting shortcut scores a completion as correct
# when the gold answer *occurs in* the extracted answer (`a in extracted`): it forgives
# spaces, units and a trailing full stop. A policy that lists many numbers is then
# "correct" for every question. Here is that rule, written out, and one completion that
# games it:

# %%
from grpo_lib.exercises.ch03 import substring_correctness

show_source(substring_correctness, docstring=False)

# %%
spray = ("<think> I am not sure. </think> <answer> "
         + " ".join(str(k) for k in range(100)) + " </answer>")
group = [o1, o2, o3, spray]
hack_table = pd.DataFrame({
    "substring rule": substring_correctness(group, answer=gold),
    "accuracy_reward": R.accuracy_reward(group, answer=gold),
}, index=["o1", "o2", "o3", "spray 0..99"])
for column, label in (("substring rule", "substring"), ("accuracy_reward", "accuracy")):
    hack_table[f"adv ({label})"] = group_advantages(hack_table[column].tolist(), 4)

# %%
# NBVAL_CHECK_OUTPUT
hack_table.round(3)

# %%
# NBVAL_CHECK_OUTPUT
answers_0_99 = [str(k) for k in range(100)]
hit_rate = sum(substring_correctness([spray] * 100, answer=answers_0_99)) / 100
fixed_rate = sum(R.accuracy_reward([spray] * 100, answer=answers_0_99)) / 100
print(f"the spray is 'correct' for {hit_rate:.0%} of the gold answers 0..99 under the "
      f"substring rule, {fixed_rate:.0%} under accuracy_reward")

# %% [markdown]
# The spray ties with the genuinely correct o2 under the substring rule, so GRPO gives
# it the same positive advantage, and the policy would learn to list numbers. The fix
# is to *parse* the answer (`extract_answer` then `answers_equal`), not to search it.
#
# **Hack 2 — letting the grader do the arithmetic.** `math_verify` is the standard tool
# for LaTeX answers (Open-R1 uses it), and it is right to call `\frac{28}{2}` equal to
# 14. But it also evaluates expressions: on the arithmetic task a policy can *copy the
# question into the answer* and be graded correct without computing anything.

# %%
import math_verify


def naive_math_verify(completions, answer, **kwargs):
    """Accuracy by math_verify alone on the <answer> block (short input: no timeout)."""
    scores = []
    for text, gold_answer in zip(completions, answer):
        pred = parsing.extract_answer(text) or ""
        ok = math_verify.verify(math_verify.parse(gold_answer, parsing_timeout=None),
                                math_verify.parse(pred, parsing_timeout=None),
                                timeout_seconds=None)
        scores.append(1.0 if ok else 0.0)
    return scores


copy_cat = ["<think> ok </think> <answer> 2 + 3 * 4 </answer>",
            "<think> ok </think> <answer> 7 * 8 - 5 </answer>",
            "<think> ok </think> <answer> (9 - 4) * 3 </answer>"]
golds = ["14", "51", "15"]

# %%
# NBVAL_CHECK_OUTPUT
pd.DataFrame({"answer block": [parsing.extract_answer(t) for t in copy_cat],
              "gold": golds,
              "naive math_verify": naive_math_verify(copy_cat, answer=golds),
              "accuracy_reward": R.accuracy_reward(copy_cat, answer=golds)})

# %% [markdown]
# `answers_equal` closes the hole with one rule: when the gold answer is a plain number,
# the prediction must be a plain number or a single closed-form LaTeX value
# (`\frac{a}{b}`, `\sqrt{n}`); an expression, a list or a sentence is not evaluated.
# An expression is a way to compute the answer, not the answer. (For Countdown the
# opposite holds — the expression *is* the answer — which is why it has its own reward.)
#
# The general lesson, which {doc}`09_failure_modes` meets again in a training run: a
# reward is a specification, and RL optimises the specification, not the intention.
# Before training, ask of every rule: *what is the cheapest text that scores 1?*

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub and a checker from `grpo_lib.exercises.ch03` that says what
# is wrong. Until you fill in a stub, its cell prints a hint; solutions are in the
# appendix, {doc}`../book/solutions/ch03`.
#
# **3.1 — The strict format reward.** Write `my_format_reward(completions)` returning
# 1.0 when a completion is exactly one non-blank think block followed by one non-blank
# answer block (whitespace around and between allowed), else 0.0 — also for `None`.

# %%
from grpo_lib.exercises.ch03 import (check_soft_overlong_punishment, check_spray_hack,
                                     check_strict_format_reward)


def my_format_reward(completions, **kwargs):
    # your code here
    raise NotImplementedError


try:
    check_strict_format_reward(my_format_reward)
except NotImplementedError:
    print("Not implemented yet: list what must hold for a well-formed completion; the "
          "format table above has one case for each way to fail.")

# %% [markdown]
# **3.2 — DAPO's overlong punishment.** Write `my_overlong(lengths, max_len, cache)`
# returning one penalty per length: 0 up to `max_len - cache`, then
# `(max_len - cache - length) / cache`, and −1 beyond `max_len`.

# %%
def my_overlong(lengths, max_len, cache):
    # your code here
    raise NotImplementedError


try:
    check_soft_overlong_punishment(my_overlong)
except NotImplementedError:
    print("Not implemented yet: the right panel of the length figure above is the "
          "function to write.")

# %% [markdown]
# **3.3 — Hack a reward.** Write one completion that the substring rule of
# {ref}`ch03-reward-hacking` scores as correct for *every* gold answer in 0..999, that
# has the strict format, and that `accuracy_reward` scores 0 for all of them. Then say
# in one sentence which part of `answers_equal` stops it.

# %%
def my_spray():
    # your code here: return a string
    raise NotImplementedError


try:
    check_spray_hack(my_spray())
except NotImplementedError:
    print("Not implemented yet: the spray above beats the substring rule for 0..99; "
          "what must change for 0..999, and what must the format be?")
