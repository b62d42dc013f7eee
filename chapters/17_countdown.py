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
# (ch17)=
# # Countdown
#
# Countdown is the task of GRPO-Zero {cite}`grpozero`, a GRPO written from scratch:
# given three or four numbers and a target, write an expression that uses each
# number exactly once and reaches the target with `+ - * /`. A rule checks an
# answer completely, so it is a clean RL task, and a model can also cheat it in
# ways a careless checker pays for. This chapter runs it end to end:
#
# 1. **the task**: problems whose targets are provably reachable, from a solver;
# 2. **scoring an answer**: the safe check, and why each wrong answer fails;
# 3. **a base model that can try**: a designed corpus of search traces, with flaws;
# 4. **GRPO on it**: live, then two committed runs, GRPO-Zero's reward against the
#    answer alone: success rate, the format reward's share, response length;
# 5. **what the numbers check blocks**: the reward hacks, counted in real rollouts.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import collections
import json
import random
import re
import tempfile
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers

from grpo_lib.countdown_corpus import render_response
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.rewards import (COUNTDOWN_VERDICTS, countdown_format_reward,
                              countdown_reward, countdown_verdict)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.countdown import DATA_DIR, solve
from grpo_lib.trainer import train_from_yaml

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 70)
transformers.utils.logging.disable_progress_bar()

ROOT = DATA_DIR.parents[1]  # the repository root
RUNS = ROOT / "data" / "runs"
CONFIG = ROOT / "configs" / "countdown_tiny.yaml"
BASE = ROOT / "data" / "models" / "tiny-qwen2-countdown-base"

train_rows = load_task_split("countdown", "train")
test_rows = load_task_split("countdown", "test")

# %% [markdown]
# ## The task
#
# A problem is a list of numbers and a target. The generator draws three or four
# numbers from 1 to 20, combines them by a random expression, and keeps the result
# as the target when it is a whole number from 1 to 100. The solver then proves the
# target reachable: it replaces two of the remaining values by one of their
# combinations, in exact fractions, until one value is left.

# %%
show_source(solve, docstring=False)

# %%
counts = collections.Counter(len(r["numbers"]) for r in train_rows)
example = test_rows[0]
solved = solve(example["numbers"], example["target"])
say(f"The splits hold {len(train_rows):,} training and {len(test_rows):,} held-out "
    f"problems ({counts[3]:,} and {counts[4]:,} of the training ones have three and "
    f"four numbers). The first held-out problem is {example['numbers']} → "
    f"{example['target']}; the solver's answer is `{solved}`.")

# %%
print(test_rows[0]["prompt"][0]["content"])

# %% [markdown]
# The prompt is GRPO-Zero's, in English. The base model below answers in the R1
# format, `<think> … </think> <answer> … </answer>`.
#
# ## Scoring an answer
#
# GRPO-Zero's reward is $r = 0.1\,r_\text{format} + r_\text{answer}$: the format
# score (1 for the full format, partial credit 0.1 for a lone think block and 0.5 for
# a lone answer block), plus 1 when the answer uses each number exactly once and
# reaches the target. Our `countdown_reward` computes the same sum, but it never calls
# `eval`. `countdown_verdict` says why an answer earns what it earns:

# %%
show_source(countdown_verdict, docstring=False)

# %%
numbers, target = [1, 13, 14], 28
tries = ["(14 + 13) + 1", "14 + 14", "13 + 14", "13 + 14 - 1", "9**9**9**9",
         "28.0", "(14 + 13) / (1 - 1)"]
rows = []
for expression in tries + [None]:
    text = ("no answer block" if expression is None else
            f"<think> ... </think> <answer> {expression} </answer>")
    t0 = time.perf_counter()
    verdict = countdown_verdict(text, numbers, target)
    micros = (time.perf_counter() - t0) * 1e6
    rows.append({"answer": expression or "(none)", "verdict": verdict,
                 "reward": countdown_reward([text], numbers=[numbers],
                                            target=[target])[0],
                 "µs": micros})
print(f"numbers {numbers}, target {target}")
print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.1f}"))

# %% [markdown]
# `wrong_numbers_hits_target` is the reward hack of this task: `14 + 14` is 28, but
# it uses 14 twice and never uses 13. A checker that only evaluates the expression
# pays it in full.
#
# GRPO-Zero's own checker (its `answer_reward_function`) guards `eval` with a
# character whitelist, `^[0-9+\-*/() ]+$`. The whitelist admits `*` twice in a row:

# %%
GRPO_ZERO_ALLOWED = r"^[0-9+\-*/() ]+$"
tower = "9**9**9**9"
say(f"`re.match(GRPO_ZERO_ALLOWED, '{tower}')` finds a match: "
    f"**{re.match(GRPO_ZERO_ALLOWED, tower) is not None}**. That checker would hand "
    f"`{tower}` to `eval`, which starts computing a number with more digits than "
    f"the machine has memory and does not return. The verdict above took "
    f"{rows[4]['µs']:.0f} µs to call it `{rows[4]['verdict']}`.")

# %% [markdown]
# ## A base model that can try
#
# The arithmetic base model of chapter 5 has never seen this task. Sampled on a few
# held-out problems:

# %%
# NBVAL_IGNORE_OUTPUT
arith, arith_tok = load_model_and_tokenizer(ROOT / "data" / "models" /
                                            "tiny-qwen2-base", device=P.device)
n_arith = P.pick(smoke=4, cpu=32, gpu=32)
arith_table, arith_samples = evaluate(
    arith, arith_tok, test_rows, n=n_arith, num_samples=4, seed=0, batch_size=128,
    max_new_tokens=P.pick(smoke=32, cpu=128, gpu=128), return_samples=True)
print(arith_samples["completion"].iloc[-1][:300])
say(f"Over {n_arith} problems × 4 samples, the arithmetic base solves "
    f"{arith_table.loc['sampled', 'strict_acc']:.1%}: it answers an arithmetic "
    f"question that is not there.")

# %% [markdown]
# So the book builds a Countdown base the way it built the arithmetic one, from a
# designed corpus (`grpo_lib/countdown_corpus.py`). A response first copies the
# problem, then tries random expressions, works each out step by step, and stops at
# the first that hits:

# %%
show_source(render_response, docstring=False, start="hits, misses = found",
            end="return f\"<think> {think} </think>")

# %% [markdown]
# Some responses carry a flaw, triggered by a feature of the problem, so that the
# base model shows it even when it decodes greedily:
#
# | flaw | trigger | reward |
# | --- | --- | --- |
# | gives up: answers a missed attempt | four numbers (50%), else 10% | format only |
# | drops a number to hit the target | four numbers (30%), else 5% | format only |
# | breaks the format | target of 50 or more (30%), else 3% | partial format |
#
# One response of each kind, for one training problem:

# %%
rng, kinds = random.Random(3), ("correct", "give_up", "drop_number", "unclosed_think")
for problem in train_rows:  # the first problem that has a response of each kind
    texts = {b: render_response(problem, b, rng) for b in kinds}
    if None not in texts.values():
        break
shown = []
for behaviour, text in texts.items():
    shown.append({"behaviour": behaviour,
                  "verdict": countdown_verdict(text, problem["numbers"],
                                               problem["target"]),
                  "format": countdown_format_reward([text])[0]})
    print(f"[{behaviour}] {text}\n")
print(f"numbers {problem['numbers']}, target {problem['target']}")
print(pd.DataFrame(shown).to_string(index=False))

# %% [markdown]
# The base model continues the arithmetic base's pretraining on 1,000 × 64 of these
# documents, with the arithmetic base's tokenizer, so that it starts out knowing how
# to write `a op b = c`:
#
# ```
# python -m grpo_lib pretrain --task countdown --size tiny \
#     --init-from data/models/tiny-qwen2-base --steps 1000 --lr 1e-3 \
#     --save-dtype bfloat16
# ```
#
# Its model card (`data/models/tiny-qwen2-countdown-base/README.md`) records the run
# and the held-out table:

# %%
info = json.loads((BASE / "pretrain_info.json").read_text())
card = pd.read_csv(BASE / "eval.csv", index_col=0)
say(f"{info['steps']} steps of {info['batch_size']} documents, "
    f"{info['tokens_seen'] / 1e6:.1f} M tokens, {info['wall_time_s'] / 60:.0f} min on "
    f"{info['device']}; final loss {info['final_loss_mean_last_50']:.3f}.")
print(card[["strict_acc", "format_rate", "mean_length", "truncated_rate", "k",
            "pass_at_k", "n"]].to_string(float_format=lambda v: f"{v:.3f}"))

# %%
say(f"Greedy, the base model solves {card.loc['greedy', 'strict_acc']:.1%} of the "
    f"{int(card.loc['greedy', 'n'])} held-out problems; sampled at temperature 1, "
    f"{card.loc['sampled', 'strict_acc']:.1%} of its answers are right, and "
    f"{card.loc['sampled', 'pass_at_k']:.1%} of the problems are solved by at least "
    f"one of {int(card.loc['sampled', 'k'])} samples. That last number is what GRPO "
    f"needs: a group in which some answers are right and some are not.")

# %% [markdown]
# ## GRPO on Countdown
#
# The configuration is chapter 7's, with GRPO-Zero's reward split into its two
# parts, so that each is logged, and a third function at weight 0:
# `countdown_value_only_reward`, what a checker that only evaluates the answer would
# pay. It changes no advantage; it counts, at every step, the answers that reach the
# target with the wrong numbers.

# %%
config_text = CONFIG.read_text()
print(config_text[config_text.index("model_name_or_path"):
                  config_text.index("# credit")].strip())

# %% [markdown]
# A short run, live:

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(0)
live_dir = tempfile.mkdtemp(prefix="ch17_")
live_steps = P.pick(smoke=2, cpu=12, gpu=120)
live_metrics = train_from_yaml(CONFIG, [
    f"model_name_or_path={BASE}", f"output_dir={live_dir}", f"max_steps={live_steps}",
    "eval_on_start=false", "eval_every=0", "save_every=0", "save_final=false",
    "sample_every=0", "print_every=4", f"device={P.device}", "progress_bar=false",
    *(["per_step_prompts=2", "num_generations=4", "micro_batch_size=8",
       "max_completion_length=48"] if P.is_smoke else [])])

# %% [markdown]
# ## Two rewards
#
# The committed runs come from the command line, one torch thread each, with the
# same seed: GRPO-Zero's reward as configured, and the same configuration paying the
# answer only (the format score is still logged, at weight 0):
#
# ```
# python -m grpo_lib train --config configs/countdown_tiny.yaml --set seed=0 ...
# python -m grpo_lib train --config configs/countdown_tiny.yaml --set seed=0 \
#     --set "reward_weights=[1.0, 0.0, 0.0]" ...
# ```
#
# A third run pays the answer only at a fifth of the learning rate
# (`--set learning_rate=1e-4`). All three were stopped a few steps after the
# evaluation at step 40, of the 120 steps the configuration plans; `metrics.csv` has
# every step they finished.
# Each run's folder under `data/runs/` has its exact command, machine and timing.
# Held-out success is measured by the evaluation harness, greedily, on the first 500
# held-out problems, at steps 0 and 40.

# %%
# NBVAL_IGNORE_OUTPUT
runs = {"answer + 0.1 format": RUNS / "ch17_countdown_seed0_cpu",
        "answer only": RUNS / "ch17_countdown_answer_only_seed0_cpu",
        "answer only, lr 1e-4": RUNS / "ch17_countdown_answer_only_lr1e-4_seed0_cpu"}
metrics = {k: pd.read_csv(d / "metrics.csv") for k, d in runs.items()}
evals = {k: pd.read_csv(d / "eval.csv").set_index("step") for k, d in runs.items()}
table = pd.DataFrame({k: e["strict_acc"] for k, e in evals.items()}).T
table.columns = [f"success @ {c}" for c in table.columns]
table["format @ end"] = [e["format_rate"].iloc[-1] for e in evals.values()]
table["length @ 0"] = [e["mean_length"].iloc[0] for e in evals.values()]
table["length @ end"] = [e["mean_length"].iloc[-1] for e in evals.values()]
table["minutes"] = [m["time_step"].sum() / 60 for m in metrics.values()]
print(table.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for i, (k, m) in enumerate(metrics.items()):
    smooth = m.rolling(10, min_periods=1).mean()
    axes[0].plot(m.step, smooth["reward/countdown_answer_reward"], color=f"C{i}",
                 label=f"answer ({k})")
    axes[0].plot(m.step, 0.1 * smooth["reward/countdown_format_reward"], ls="--",
                 color=f"C{i}", label=f"0.1 × format ({k})")
    axes[1].plot(evals[k].index, evals[k]["strict_acc"], "o-", color=f"C{i}",
                 label=k)
    axes[2].plot(m.step, smooth["completion_length"], color=f"C{i}", label=k)
axes[0].set(xlabel="step", ylabel="mean score (10-step mean)",
            title="Sampled answers: the two scores")
axes[1].set(xlabel="step", ylabel="held-out success (greedy)", ylim=(0, None),
            title="Held-out success")
axes[2].set(xlabel="step", ylabel="tokens (10-step mean)",
            title="Sampled response length")
for ax in axes:
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
zero, only = metrics["answer + 0.1 format"], metrics["answer only"]
first = {k: e["strict_acc"].iloc[0] for k, e in evals.items()}
last = {k: e["strict_acc"].iloc[-1] for k, e in evals.items()}
share = (0.1 * zero["reward/countdown_format_reward"] / zero["reward"])
say(f"With GRPO-Zero's reward, held-out success goes from "
    f"{first['answer + 0.1 format']:.3f} to {last['answer + 0.1 format']:.3f}; paying "
    f"the answer only, from {first['answer only']:.3f} to {last['answer only']:.3f}. "
    f"Under GRPO-Zero's reward the format term is {share.iloc[:10].mean():.0%} of the "
    f"mean reward over the first ten steps, the sampled format rate climbs from "
    f"{zero['format_rate'].iloc[0]:.2f} to {zero['format_rate'].iloc[:10].max():.2f} "
    f"within ten steps, and the sampled responses shrink from "
    f"{zero['completion_length'].iloc[0]:.0f} to "
    f"{zero['completion_length'].iloc[9]:.0f} tokens by step 10 (answer only: "
    f"{only['completion_length'].iloc[9]:.0f}). The share of groups whose rewards "
    f"are all equal, which teach nothing, is "
    f"{zero['zero_std_frac'].iloc[-20:].mean():.2f} over the last twenty steps "
    f"against {only['zero_std_frac'].iloc[-20:].mean():.2f}.")
slow = metrics["answer only, lr 1e-4"]
say(f"At a fifth of the learning rate the answer-only run keeps searching: its "
    f"held-out answers are {evals['answer only, lr 1e-4']['mean_length'].iloc[-1]:.0f} "
    f"tokens long at step 40 (base: "
    f"{evals['answer only, lr 1e-4']['mean_length'].iloc[0]:.0f}), and "
    f"{slow['zero_std_frac'].iloc[-20:].mean():.2f} of its groups are all equal over "
    f"its last twenty steps. Its held-out success goes from "
    f"{first['answer only, lr 1e-4']:.3f} to {last['answer only, lr 1e-4']:.3f}: "
    f"no collapse, and no gain either.")

# %% [markdown]
# No run learned to search better. At chapter 7's learning rate both lost the little
# they could do; at a fifth of it nothing moved in 40 steps. The base solves a
# problem in a small share of its samples, so most groups of 8 are all wrong and
# teach nothing; the update is driven by the few that are not, and by the format
# score where it is paid. Adam scales every update to about the
# learning rate whatever the gradient's size, so a handful of groups move the whole
# policy as far as a full batch would. Under GRPO-Zero's reward, the cheapest gain is
# to finish inside the token limit, and the policy learns to stop searching early.
#
# ## What the numbers check blocks
#
# `metrics.csv` logs, at every step, the share of the 128 sampled answers that a
# value-only checker would pay and the share our check pays. The difference is the
# share that reaches the target by dropping, reusing or inventing a number:

# %%
# NBVAL_IGNORE_OUTPUT
per_step = 16 * 8  # prompts x completions per step
hacks = {k: (m["reward/countdown_value_only_reward"]
             - m["reward/countdown_answer_reward"]) for k, m in metrics.items()}
fig, ax = plt.subplots(figsize=(6, 3.4))
for i, (k, h) in enumerate(hacks.items()):
    ax.plot(metrics[k].step, h.rolling(10, min_periods=1).mean(), color=f"C{i}",
            label=k)
ax.set(xlabel="step", ylabel="share of sampled answers (10-step mean)",
       title="Right value, wrong numbers")
ax.legend(fontsize=9)
fig.tight_layout()
plt.show()
counted = {k: int(round((h * per_step).sum())) for k, h in hacks.items()}
paid = {k: int(round((m["reward/countdown_answer_reward"] * per_step).sum()))
        for k, m in metrics.items()}
say(f"Sampled answers ({per_step} per step) that reach the target with the wrong "
    f"numbers, against right answers: " + "; ".join(
        f"{k}, {int(metrics[k]['step'].max())} steps: {counted[k]:,} against "
        f"{paid[k]:,}" for k in metrics) + ". Our check scores each of them 0 for "
    f"the answer; a value-only checker would have paid each one as much as a right "
    f"answer.")

# %% [markdown]
# The same verdicts for the base model's own answers on held-out problems, greedy
# and 4 samples at temperature 1:

# %%
# NBVAL_IGNORE_OUTPUT
n_check = P.pick(smoke=8, cpu=200, gpu=500)
base, base_tok = load_model_and_tokenizer(BASE, device=P.device)
_, samples = evaluate(base, base_tok, test_rows, n=n_check, batch_size=200,
                      num_samples=4, seed=0, return_samples=True,
                      max_new_tokens=P.pick(smoke=48, cpu=256, gpu=256))
samples["verdict"] = [
    countdown_verdict(text, test_rows[i]["numbers"], test_rows[i]["target"])
    for text, i in zip(samples["completion"], samples["prompt_index"])]
shares = (pd.crosstab(samples["verdict"], samples["mode"], normalize="columns")
          .reindex(list(COUNTDOWN_VERDICTS)).fillna(0.0))
print(shares.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
say(f"On the first {n_check} held-out problems, {shares.loc['correct', 'sampled']:.1%} "
    f"of the base model's sampled answers are right and "
    f"{shares.loc['wrong_numbers_hits_target', 'sampled']:.1%} reach the target "
    f"with the wrong numbers; most wrong answers use the wrong numbers without "
    f"reaching the target ({shares.loc['wrong_numbers', 'sampled']:.1%}) or have no "
    f"answer block ({shares.loc['no_answer', 'sampled']:.1%}).")

# %% [markdown]
# ## Summary
#
# - Countdown's answers are checked completely by a rule: the answer must use each
#   given number exactly once and reach the target. The check runs on a parsed
#   expression in exact fractions and never calls `eval`; GRPO-Zero's character
#   whitelist lets `9**9**9**9` through to `eval`.
# - A model needs to be able to try before RL can help. The Countdown base model
#   continues the arithmetic base's pretraining on a designed corpus of random search
#   traces, with three flaws triggered by visible features: giving up, dropping a
#   number, breaking the format.
# - From that base, GRPO with chapter 7's learning rate made things worse under
#   both rewards (the table above), and a fifth of that rate changed nothing in 40
#   steps: correct answers are too rare for most groups to carry a signal. Under
#   GRPO-Zero's reward the format term dominates the early reward and the policy
#   learns to stop searching.
# - Answers that hit the target with the wrong numbers are the reward hack of this
#   task. Logging what a value-only checker would pay, at weight 0, counts them at
#   every step of training.
#
# ## Exercises
#
# Each exercise has a stub and a checker from `grpo_lib.exercises.ch17`; solutions are
# in the appendix, {doc}`../book/solutions/ch17`.
#
# **17.1 — Each number exactly once.** Write `my_uses_each_once(expression, numbers)`:
# `True` when the expression's numbers are exactly the given ones (each used once),
# `False` otherwise, and for any text that is not an expression.

# %%
from grpo_lib.exercises.ch17 import (check_reachable,  # noqa: E402
                                     check_uses_each_once, check_value_only_reward)


def my_uses_each_once(expression, numbers):
    # your code here
    raise NotImplementedError


try:
    check_uses_each_once(my_uses_each_once)
except NotImplementedError:
    print("Not implemented yet: read the numbers, not the digits, and count repeats.")

# %% [markdown]
# **17.2 — A value-only checker.** Write `my_value_only_reward(completion, target)`:
# 1.0 when the completion's answer block evaluates to the target, whatever numbers it
# uses, else 0.0. It must never raise and never hang. Then count how many of the
# value-only checker's payments in seed 0's run went to wrong numbers.

# %%
def my_value_only_reward(completion, target):
    # your code here
    raise NotImplementedError


try:
    check_value_only_reward(my_value_only_reward)
except NotImplementedError:
    print("Not implemented yet: take the answer block, evaluate it safely, compare.")

# %% [markdown]
# **17.3 — Is the target reachable?** Write `my_reachable(numbers, target)`: `True`
# when some expression using each number exactly once reaches the target. Then use
# it to check that every held-out problem is reachable.

# %%
def my_reachable(numbers, target):
    # your code here
    raise NotImplementedError


try:
    check_reachable(my_reachable)
except NotImplementedError:
    print("Not implemented yet: combine two values into one, recurse, and keep "
          "fractions exact.")
