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
# ways a careless checker pays for. This chapter runs it end to end, in four parts.
#
# *The task and a model that can attempt it.*
#
# 1. **the task**: problems whose targets are provably reachable, from a solver;
# 2. **scoring an answer**: the safe check, and why each wrong answer fails;
# 3. **a base model that can try**: a designed corpus of search traces, with flaws.
#
# *Getting GRPO to learn.*
#
# 4. **GRPO on the first base**: three stored runs that do not learn;
# 5. **why**: the first base's own answers, read step by step;
# 6. **a second corpus, and GRPO on it**: a base that computes and copies better,
#    live, then two seeds: success rate, format rate, response length;
# 7. **a fourth try**: a KL anchor, a lower learning rate and only groups that
#    teach; held-out success greedy and sampled, two seeds.
#
# *What sets the rise: corpora, budgets, rewards and model size.*
#
# 8. **how far the search could go**: the base's search run without a mistake, the
#    trained policies' mistakes by problem size, and a longer token budget;
# 9. **a base that aims**: two corpora whose attempts aim at the target, and how
#    much of the aim the models learn;
# 10. **aiming in writing**: a corpus that tries the operators of the last step in
#     turn, each worked out, until one hits; its base on a CPU, a second round, one
#     longer schedule on a GPU, larger groups and no KL anchor;
# 11. **more tries in the budget**: the same search written in fewer tokens;
# 12. **a longer budget**: two rounds again with 384 new tokens;
# 13. **keeping the books**: a corpus that writes the numbers each step leaves;
# 14. **a reward against repeats**: a penalty for an attempt worked out twice;
# 15. **a reward for sound work**: pay every attempt worked right with the given
#     numbers, whether or not the answer is;
# 16. **learning from its own right answers**: two rounds of rejection-sampling
#     fine-tuning, beside GRPO's rounds;
# 17. **a bigger model**: the same recipe on the book's small model, on a GPU.
#
# *Taking stock.*
#
# 18. **every try at a glance**: each try's rise from its base in one table and one
#     figure, against the room its base leaves;
# 19. **what the numbers check blocks**: the reward hacks, counted in real rollouts.

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
from dataclasses import asdict, replace

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers

from grpo_lib.countdown_corpus import (COUNTDOWN_MIXES, aimed_attempt,
                                       aimed_last_steps, attempt_text, chain_attempt,
                                       countdown_documents, flawless_search,
                                       render_response, restate, spelled_attempt)
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.rejection import COUNTDOWN_FILTERS
from grpo_lib.rewards import (COUNTDOWN_VERDICTS, countdown_format_reward,
                              countdown_repeat_penalty, countdown_reward,
                              countdown_sound_attempt_reward, countdown_verdict,
                              countdown_worked_answer_reward)
from grpo_lib.tasks import load_task_split
from grpo_lib.runs import final_eval, load_run, load_seeds, mean_range
from grpo_lib.tasks.countdown import (DATA_DIR, attempt_is_sound, attempt_numbers,
                                      attempts_of, solve, worked_steps)
from grpo_lib.trainer import train_from_yaml

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 70)
transformers.utils.logging.disable_progress_bar()

ROOT = DATA_DIR.parents[1]  # the repository root
RUNS = ROOT / "data" / "runs"
CONFIG = ROOT / "configs" / "countdown_tiny.yaml"
CHAIN_CONFIG = ROOT / "configs" / "countdown_chain_tiny.yaml"
BASE = ROOT / "data" / "models" / "tiny-qwen2-countdown-base"
BASE2 = ROOT / "data" / "models" / "tiny-qwen2-countdown-chain-base"

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
# GRPO-Zero's own checker (its `answer_reward_function`) guards `eval` with two
# tests: a character whitelist, `^[0-9+\-*/() ]+$`, and the numbers check (the
# literals must be the given numbers, each once). So `9**9**9**9` above would be
# refused before `eval` for want of the right numbers. But the whitelist admits `*`
# twice in a row, and a power tower built from the problem's own numbers passes both
# tests:

# %%
GRPO_ZERO_ALLOWED = r"^[0-9+\-*/() ]+$"
tower_problem = next(r for r in test_rows
                     if len(r["numbers"]) == 4 and min(r["numbers"]) > 1)
given, goal = tower_problem["numbers"], tower_problem["target"]
tower = "**".join(map(str, sorted(given)))  # a ** (b ** (c ** d))
own_numbers = sorted(map(int, re.findall(r"\d+", tower))) == sorted(given)
t0 = time.perf_counter()
tower_verdict = countdown_verdict(f"<answer> {tower} </answer>", given, goal)
tower_micros = (time.perf_counter() - t0) * 1e6
say(f"For the held-out problem {given} with target {goal}, `{tower}` matches the "
    f"whitelist (**{re.match(GRPO_ZERO_ALLOWED, tower) is not None}**) and uses "
    f"each given number once (**{own_numbers}**). That checker would hand it to "
    f"`eval`, which starts computing a number with more digits than the machine has "
    f"memory and does not return. Ours took {tower_micros:.0f} µs to call it "
    f"`{tower_verdict}`.")

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
# designed corpus (`grpo_lib/countdown_corpus.py`); this chapter makes two. In the
# first, a response copies the problem, then tries random expressions, works each
# out step by step, and stops at the first that hits:

# %%
show_source(render_response, docstring=False, start="hits, misses = found",
            end="return f\"<think> {think} </think>")

# %% [markdown]
# Some responses carry a flaw, triggered by a feature of the problem, so that the
# base model shows it even when it decodes greedily. A response draws its flaw in
# order (`choose_behaviour`): a broken format first; if not, a dropped number; if
# neither, giving up. So each rate applies only to the responses the draws before
# it left. A broken format is either no tags at all (`… The answer is X.`) or a
# think block left open, one or the other at random. The first corpus's rates:

# %%
tree_mix = COUNTDOWN_MIXES["tree"]
flaw_rates = pd.DataFrame(
    {"trigger": ["target of 50 or more", "four numbers", "four numbers"],
     "rate if triggered": [tree_mix.format_rate, tree_mix.drop_rate,
                           tree_mix.give_up_rate],
     "rate otherwise": [tree_mix.format_rate_other, tree_mix.drop_rate_other,
                        tree_mix.give_up_rate_other]},
    index=["breaks the format", "drops a number to hit the target",
           "gives up: answers a missed attempt"])
print("drawn in this order, each only when the draws above it drew no flaw")
print(flaw_rates.to_string())
four_targets = [t for n, t in zip(train_rows["numbers"], train_rows["target"])
                if len(n) == 4]
gives_up = sum((1 - (tree_mix.format_rate if t >= 50 else tree_mix.format_rate_other))
               * (1 - tree_mix.drop_rate) * tree_mix.give_up_rate
               for t in four_targets) / len(four_targets)
say(f"So a four-number training problem draws the give-up flaw for {gives_up:.0%} of "
    f"its responses, not {tree_mix.give_up_rate:.0%}.")

# %% [markdown]
# One response of each kind, for one training problem, with GRPO-Zero's reward:

# %%
rng, kinds = random.Random(3), ("correct", "give_up", "drop_number", "unclosed_think")
for problem in train_rows:  # the first problem that has a response of each kind
    texts = {b: render_response(problem, b, rng) for b in kinds}
    if None not in texts.values():
        break
texts["no_tags"] = render_response(problem, "no_tags", random.Random(3))
shown = []
for behaviour, text in texts.items():
    verdict = countdown_verdict(text, problem["numbers"], problem["target"])
    reward = countdown_reward([text], numbers=[problem["numbers"]],
                              target=[problem["target"]])[0]
    shown.append({"behaviour": behaviour, "verdict": verdict,
                  "format": countdown_format_reward([text])[0], "reward": reward,
                  "of it, format": reward - (verdict == "correct")})
    print(f"[{behaviour}] {text}\n")
print(f"numbers {problem['numbers']}, target {problem['target']}")
shown = pd.DataFrame(shown).set_index("behaviour")
print(shown.to_string(float_format=lambda v: f"{v:.2f}"))
left_open = shown.loc["unclosed_think"]
say(f"Giving up and dropping a number keep the full format, so they earn its "
    f"{shown.loc['give_up', 'of it, format']:.2f} alone. Without tags a response "
    f"has no answer block to check: format {shown.loc['no_tags', 'format']:.1f}, "
    f"reward {shown.loc['no_tags', 'reward']:.1f}. A think block left open keeps "
    f"its answer block: format {left_open['format']:.1f}, worth "
    f"{left_open['of it, format']:.2f} of the reward beside the answer's "
    f"{left_open['reward'] - left_open['of it, format']:.0f}.")

# %% [markdown]
# The first base model continues the arithmetic base's pretraining on 1,000 × 64 of
# these documents, with the arithmetic base's tokenizer, so that it starts out
# knowing how to write `a op b = c`:
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
say(f"Greedy, the first base solves {card.loc['greedy', 'strict_acc']:.1%} of the "
    f"first {int(card.loc['greedy', 'n'])} held-out problems; sampled at "
    f"temperature 1, {card.loc['sampled', 'strict_acc']:.1%} of its answers are "
    f"right, and "
    f"{card.loc['sampled', 'pass_at_k']:.1%} of the problems are solved by at least "
    f"one of {int(card.loc['sampled', 'k'])} samples. That last number is what GRPO "
    f"needs: a group in which some answers are right and some are not.")

# %% [markdown]
# ## GRPO on the first base
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
# The runs stored in `data/runs/` come from the command line, one torch thread
# each, with the same seed: GRPO-Zero's reward as configured, and the same
# configuration paying the answer only (the format score is still logged, at
# weight 0):
#
# ```
# python -m grpo_lib train --config configs/countdown_tiny.yaml --set seed=0 \
#     --set rollout_engine=transformers ...
# python -m grpo_lib train --config configs/countdown_tiny.yaml --set seed=0 \
#     --set rollout_engine=transformers --set "reward_weights=[1.0, 0.0, 0.0]" ...
# ```
#
# A third run pays the answer only at a fifth of the learning rate
# (`--set learning_rate=1e-4`). All three were stopped at or a few steps after the
# evaluation at step 40, of the 120 steps the configuration plans; `metrics.csv` has
# every step they finished.
# Each run's folder under `data/runs/` has its exact command, machine and timing.
# Held-out success is measured by the evaluation harness, greedily, on the first 500
# held-out problems, at steps 0 and 40.

# %%
# NBVAL_IGNORE_OUTPUT
runs = {"answer + 0.1 format": load_run("ch17_countdown_seed0_cpu"),
        "answer only": load_run("ch17_countdown_answer_only_seed0_cpu"),
        "answer only, lr 1e-4": load_run("ch17_countdown_answer_only_lr1e-4_seed0_cpu")}
metrics = {k: r.metrics for k, r in runs.items()}
evals = {k: r.evals for k, r in runs.items()}
table = pd.DataFrame({k: e["strict_acc"] for k, e in evals.items()}).T
table.columns = [f"success @ {c}" for c in table.columns]
table["format @ end"] = [e["format_rate"].iloc[-1] for e in evals.values()]
table["length @ 0"] = [e["mean_length"].iloc[0] for e in evals.values()]
table["length @ end"] = [e["mean_length"].iloc[-1] for e in evals.values()]
table["minutes"] = [m["time_step"].sum() / 60 for m in metrics.values()]
print(table.to_string(float_format=lambda v: f"{v:.3f}"))


# %%
# NBVAL_IGNORE_OUTPUT
FIRST_SCORES = {"answer": ("reward/countdown_answer_reward", 1.0),
                "0.1 × format": ("reward/countdown_format_reward", 0.1)}


def plot_runs(metrics, evals, title, scores=FIRST_SCORES):
    """Three panels, one above the other: two sampled scores (label: (column,
    scale)), held-out success, sampled length."""
    fig, axes = plt.subplots(3, 1, figsize=(7.3, 8.4), sharex=True)
    for i, (k, m) in enumerate(metrics.items()):
        smooth = m.rolling(10, min_periods=1).mean()
        for (label, (column, scale)), ls in zip(scores.items(), ("-", "--")):
            axes[0].plot(m.step, scale * smooth[column], ls=ls, color=f"C{i}",
                         label=f"{label} ({k})")
        axes[1].plot(evals[k].index, evals[k]["strict_acc"], color=f"C{i}",
                     marker="os^v"[i % 4], ms=9 - 2 * (i % 3), mfc="none",
                     lw=2.4 - 0.6 * (i % 3), ls=("-", "--", ":")[i % 3],
                     label=k)  # wider and larger first: equal runs both show
        axes[2].plot(m.step, smooth["completion_length"], color=f"C{i}", label=k)
    axes[0].set(ylabel="mean score (10-step mean)",
                title="Sampled answers: the two scores")
    axes[1].set(ylabel="held-out success (greedy)", ylim=(-0.005, None),
                title="Held-out success")
    axes[2].set(xlabel="step", ylabel="tokens (10-step mean)",
                title="Sampled response length")
    axes[0].set_ylim(top=1.7 * axes[0].get_ylim()[1])  # room for the legend above
    axes[0].legend(fontsize=9, ncol=2, loc="upper center")
    for ax in axes[1:]:
        ax.legend(fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    plt.show()


plot_runs(metrics, evals, "GRPO on the first base")

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
# ## Why the first base fails
#
# RL sharpens what a base model can already do now and then; it does not teach a
# skill the samples never show. So before changing the RL settings again, read the
# base model's own answers. `worked_steps` reads every `a op b = c` a response
# writes and checks it:

# %%
show_source(worked_steps, docstring=False)


# %%
# NBVAL_IGNORE_OUTPUT
n_check = P.pick(smoke=8, cpu=200, gpu=500)


def with_verdicts(samples):
    """Held-out answers (one row each) with their verdict, whether the work shows
    the answer, and the problem's count of numbers."""
    rows = [test_rows[i] for i in samples["prompt_index"]]
    samples["verdict"] = [countdown_verdict(text, row["numbers"], row["target"])
                          for text, row in zip(samples["completion"], rows)]
    samples["work shows it"] = countdown_worked_answer_reward(
        list(samples["completion"]), numbers=[r["numbers"] for r in rows],
        target=[r["target"] for r in rows])
    samples["size"] = [len(r["numbers"]) for r in rows]
    return samples


def sample_base(path):
    """Greedy and 4 sampled answers of a base model on the first n_check held-out
    problems, with their verdicts."""
    model, tok = load_model_and_tokenizer(path, device=P.device)
    _, samples = evaluate(model, tok, test_rows, n=n_check, batch_size=200,
                          num_samples=4, seed=0, return_samples=True,
                          max_new_tokens=P.pick(smoke=48, cpu=256, gpu=256))
    return with_verdicts(samples)


def diagnose(samples):
    """What the sampled answers show: right answers, answers with the wrong
    numbers, answers without an answer block, and the worked steps."""
    sampled = samples[samples["mode"] == "sampled"]
    steps = [ok for text in sampled["completion"] for *_, ok in worked_steps(text)]
    wrong_numbers = sampled["verdict"].str.startswith("wrong_numbers")
    right = sampled["verdict"] == "correct"
    return {"right": right.mean(),
            "right, work wrong": (right & (sampled["work shows it"] == 0)).mean(),
            "wrong numbers": wrong_numbers.mean(),
            "wrong value": (sampled["verdict"] == "wrong_value").mean(),
            "no answer": (sampled["verdict"] == "no_answer").mean(),
            "cut off": sampled["truncated"].mean(),
            "steps per answer": len(steps) / len(sampled),
            "steps miscomputed": 1 - sum(steps) / max(1, len(steps))}


base_samples = {"first base": sample_base(BASE)}
print(pd.Series(diagnose(base_samples["first base"])).to_string(
    float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
first_diag = diagnose(base_samples["first base"])
say(f"Of the first base's sampled answers, {first_diag['right']:.1%} are right and "
    f"{first_diag['wrong numbers']:.1%} use the wrong numbers; "
    f"{first_diag['steps miscomputed']:.1%} of the steps it works out are wrong.")
print(base_samples["first base"].query("mode == 'sampled'")["completion"].iloc[0])

# %% [markdown]
# Two skills the corpus asks for are beyond a model of a million parameters. The
# first is arithmetic on values up to 999 (`13 * 14 = 182`), which the tree corpus
# allows for intermediate results. The second is rebuilding the answer from the
# steps: the steps `3 * 4 = 12, 5 - 2 = 3, 12 + 3 = 15` are the answer
# `3 * 4 + (5 - 2)` only once each sub-result is put back where it came from.
# Wrong sums make a right search miss, and a wrong rebuild turns a hit into an
# answer with the wrong numbers. Neither is rare enough for GRPO to find the
# right answers it needs.
#
# ## A second corpus: chains
#
# The second corpus keeps the task, the prompt, the restated problem and the three
# flaws, and changes the attempts. Each attempt takes the numbers in a random order
# and combines the running value with the next number, so the answer copies the
# steps in order; no value along the way exceeds 100:

# %%
show_source(chain_attempt, docstring=False)

# %%
chain_mix = COUNTDOWN_MIXES["chain"]
rng = random.Random(3)
print(render_response(problem, "correct", rng, chain_mix))
print(render_response(problem, "give_up", rng, chain_mix))
print({k: v for k, v in asdict(chain_mix).items()
       if v != asdict(COUNTDOWN_MIXES["tree"])[k]})

# %% [markdown]
# The second base gets the first one's budget: 1,000 steps of 64 documents from
# the arithmetic base, with the same learning rate:
#
# ```
# python -m grpo_lib pretrain --task countdown --countdown-mix chain --size tiny \
#     --init-from data/models/tiny-qwen2-base --steps 1000 --lr 1e-3 \
#     --save-dtype bfloat16 --out data/models/tiny-qwen2-countdown-chain-base
# ```

# %%
# NBVAL_IGNORE_OUTPUT
info2 = json.loads((BASE2 / "pretrain_info.json").read_text())
card2 = pd.read_csv(BASE2 / "eval.csv", index_col=0)
say(f"{info2['steps']} steps of {info2['batch_size']} documents, "
    f"{info2['tokens_seen'] / 1e6:.1f} M tokens, {info2['wall_time_s'] / 60:.0f} min "
    f"on {info2['device']}; final loss {info2['final_loss_mean_last_50']:.3f}.")
cards = pd.concat({"first base": card, "chain base": card2})
print(cards[["strict_acc", "format_rate", "mean_length", "truncated_rate", "k",
             "pass_at_k"]].to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
base_samples["chain base"] = sample_base(BASE2)
diagnosis = pd.DataFrame({k: diagnose(s) for k, s in base_samples.items()})
print(diagnosis.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
say(f"On the same {n_check} problems, the chain base miscomputes "
    f"{diagnosis.loc['steps miscomputed', 'chain base']:.1%} of its steps (first "
    f"base: {diagnosis.loc['steps miscomputed', 'first base']:.1%}) and "
    f"{diagnosis.loc['right', 'chain base']:.1%} of its sampled answers are right "
    f"(first base: {diagnosis.loc['right', 'first base']:.1%}). On the first "
    f"{int(card2.loc['sampled', 'n'])} held-out problems (the model cards), "
    f"{card2.loc['sampled', 'pass_at_k']:.1%} are solved by at least one of "
    f"{int(card2.loc['sampled', 'k'])} samples, against "
    f"{card.loc['sampled', 'pass_at_k']:.1%} for the first base.")

# %% [markdown]
# ## GRPO on the chain base
#
# First the first base's configuration, unchanged but for the model: GRPO-Zero's
# reward at chapter 7's learning rate, two seeds, one torch thread each. Both runs
# were stopped once the answers had plainly gone the way of the first base's runs:

# %%
# NBVAL_IGNORE_OUTPUT
early = load_seeds("ch17_chain_grpozero")
cols = ["reward/countdown_answer_reward", "format_rate", "completion_length"]
collapse = pd.DataFrame({
    f"seed {i}, steps {a}-{b}": r.metrics.query("@a <= step <= @b")[cols].mean()
    for i, r in enumerate(early) for a, b in ((1, 5), (11, 15))}).T
collapse.columns = ["sampled success", "sampled format", "length"]
print(collapse.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
say(f"Sampled success falls from "
    f"{mean_range(collapse.iloc[[0, 2], 0].tolist())} over steps 1-5 to "
    f"{mean_range(collapse.iloc[[1, 3], 0].tolist())} over steps 11-15, while the "
    f"format rate climbs to {mean_range(collapse.iloc[[1, 3], 1].tolist(), 2)} and "
    f"the answers shrink to {mean_range(collapse.iloc[[1, 3], 2].tolist(), 0)} "
    f"tokens. At the start, {card2.loc['sampled', 'truncated_rate']:.0%} of the "
    f"chain base's sampled answers run out of tokens before they answer.")

# %% [markdown]
# The better base has not removed the cheap way to the format score. A group in
# which every answer is wrong still ranks its answers by format: the finished ones
# beat the truncated ones, and the quickest way to finish is the designed flaw that
# gives up after a miss. So most groups teach the policy to stop searching.
#
# Paying the answer only removes that: a group in which every answer is wrong
# teaches nothing. Two more seeds, the answer reward alone, at a learning rate of
# 3e-4, stopped after the evaluation at step 25 (seed 0's run stored only its
# console log, `train.log`, which keeps both evaluations):

# %%
# NBVAL_IGNORE_OUTPUT
answer_only = load_run("ch17_chain_answer_only_seed1_cpu")
log0 = (RUNS / "ch17_chain_answer_only_seed0_cpu" / "train.log").read_text()
evals0 = {int(step): float(acc) for step, acc in
          re.findall(r"eval @ step (\d+): strict_acc=([\d.]+)", log0)}
ao_table = pd.DataFrame({"seed 0": pd.Series(evals0),
                         "seed 1": answer_only.evals["strict_acc"]}).T
ao_table.columns = [f"success @ {c}" for c in ao_table.columns]
print(ao_table.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# Held-out success falls in both seeds. The answers GRPO paid at step 25 (seed 1's
# `samples.jsonl`) show why: the reward reads the answer block and nothing else.

# %%
# NBVAL_IGNORE_OUTPUT
def parse_question(question):
    """``samples.jsonl``'s ``"[numbers] -> target"`` as ``(numbers, target)``."""
    numbers, target = question.split("->")
    return json.loads(numbers), int(target)


step25 = pd.read_json(RUNS / answer_only.name / "samples.jsonl", lines=True)
paid = step25[step25["reward/countdown_answer_reward"] == 1].copy()
numbers, targets = zip(*map(parse_question, paid["question"]))
paid["work shows it"] = countdown_worked_answer_reward(
    list(paid["completion"]), numbers=list(numbers), target=list(targets))
for _, row in paid.iterrows():
    print(f"[work shows it: {row['work shows it']:.0f}] {row['completion']}\n")

# %%
# NBVAL_IGNORE_OUTPUT
lucky, right = diagnosis.loc[["right, work wrong", "right"], "chain base"]
say(f"Held-out success at step 25: {ao_table.iloc[0, -1]:.3f} and "
    f"{ao_table.iloc[1, -1]:.3f}, from {ao_table.iloc[0, 0]:.3f}. Of the chain "
    f"base's own sampled answers, {right:.1%} are right, and {lucky:.1%} are right "
    f"after work that is wrong: {lucky / right if right else float('nan'):.0%} of "
    f"the right answers.")

# %% [markdown]
# A right answer after wrong work is a lucky guess: the expression happens to hit
# while the steps above it say something else. Paying it as much as an honest
# answer teaches the policy that the steps do not matter, and a policy that stops
# computing stops finding answers at all: greedy decoding, which cannot count on
# luck, falls.
#
# `countdown_worked_answer_reward` pays a right answer only when the work shows it:
# every step the response writes is right, and the last one reaches the target. An
# `=` that the step reader cannot read (`4 *  12 = 88`, `12 ÷ 4 = 3`) counts as work
# not shown.

# %%
show_source(countdown_worked_answer_reward, docstring=False)

# %% [markdown]
# `configs/countdown_chain_tiny.yaml` trains on it, with the answer-only reward,
# GRPO-Zero's format score and the value-only monitor logged at weight 0, at a
# learning rate of 3e-4 for 100 steps, evaluating every 25. A short run, live:

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(0)
live_dir = tempfile.mkdtemp(prefix="ch17_")
live_steps = P.pick(smoke=2, cpu=12, gpu=100)
live_metrics = train_from_yaml(CHAIN_CONFIG, [
    f"model_name_or_path={BASE2}", f"output_dir={live_dir}",
    f"max_steps={live_steps}", "eval_on_start=false", "eval_every=0", "save_every=0",
    "save_final=false", "sample_every=0", "print_every=4", f"device={P.device}",
    "progress_bar=false",
    *(["per_step_prompts=2", "num_generations=4", "micro_batch_size=8",
       "max_completion_length=48"] if P.is_smoke else [])])

# %% [markdown]
# The stored runs in `data/runs/` are two seeds of that configuration, from the
# command line, one torch thread each, two at a time, stopped after the evaluation
# at step 25:
#
# ```
# python -m grpo_lib train --config configs/countdown_chain_tiny.yaml --set seed=0 \
#     --set rollout_engine=transformers ...
# python -m grpo_lib train --config configs/countdown_chain_tiny.yaml --set seed=1 \
#     --set rollout_engine=transformers ...
# ```

# %%
# NBVAL_IGNORE_OUTPUT
chain = load_seeds("ch17_chain_worked")
chain_metrics = {f"seed {i}": r.metrics for i, r in enumerate(chain)}
chain_evals = {f"seed {i}": r.evals for i, r in enumerate(chain)}
plot_runs(chain_metrics, chain_evals, "GRPO on the chain base, the work checked",
          scores={"answer": ("reward/countdown_answer_reward", 1.0),
                  "work shows it": ("reward/countdown_worked_answer_reward", 1.0)})
tries = pd.DataFrame({
    "answer only": ao_table.iloc[:, -1].to_numpy(),
    "work checked": [e["strict_acc"].loc[25] for e in chain_evals.values()]},
    index=["seed 0", "seed 1"]).T
tries.insert(0, "base", chain[0].evals["strict_acc"].loc[0])
print("held-out success (greedy) at step 25")
print(tries.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
lucky_share = [(m["reward/countdown_answer_reward"]
                - m["reward/countdown_worked_answer_reward"]).mean()
               for m in chain_metrics.values()]
say(f"With the work checked, held-out success at step 25 is "
    f"{mean_range(tries.loc['work checked', ['seed 0', 'seed 1']].tolist())} "
    f"(answer only: "
    f"{mean_range(tries.loc['answer only', ['seed 0', 'seed 1']].tolist())}; base: "
    f"{tries['base'].iloc[0]:.3f}). A share of "
    f"{mean_range(lucky_share)} of the sampled answers were lucky and went unpaid.")

# %% [markdown]
# The fall is slower and it is still a fall. The policy's samples at step 25 show
# where it starts: the copy of the problem at the top of the trace, which every
# attempt reads its numbers from.

# %%
# NBVAL_IGNORE_OUTPUT
def copies_problem(text, question):
    """True when a response starts by restating its problem exactly."""
    return text.removeprefix("<think> ").startswith(restate(*parse_question(question)))


base_sampled = base_samples["chain base"].query("mode == 'sampled'")
copied = {"chain base (held-out)": [
    copies_problem(t, f"{test_rows[i]['numbers']} -> {test_rows[i]['target']}")
    for t, i in zip(base_sampled["completion"], base_sampled["prompt_index"])]}
for i, r in enumerate(chain):
    last = pd.read_json(RUNS / r.name / "samples.jsonl", lines=True).query("step == 25")
    copied[f"seed {i}, step 25"] = [copies_problem(t, q) for t, q in
                                    zip(last["completion"], last["question"])]
copied = pd.Series({k: sum(v) / len(v) for k, v in copied.items()})
print(copied.to_string(float_format=lambda v: f"{v:.3f}"))
print(last["completion"].iloc[0][:200])

# %%
# NBVAL_IGNORE_OUTPUT
say(f"The chain base copies its problem exactly in "
    f"a share of {copied.iloc[0]:.2f} of its sampled answers; after 25 steps, in "
    f"{mean_range(copied.iloc[1:].tolist(), 2)} of the training samples.")

# %% [markdown]
# Nothing in the reward asks the model to stop copying well. The likeliest cause
# is how few answers carry the signal. With a sampled success near one in ten, most
# groups of 8 are all wrong and teach nothing, so each update comes from a handful
# of groups, and Adam moves every weight by about the learning rate whatever the
# gradient's size. The direction that fits those few answers is not one that keeps
# a million-parameter model's copying intact, and 25 such steps undo part of what
# pretraining built. The levers against this drift are a KL penalty toward the base
# ($\beta$, chapter 8), a lower learning rate, and more prompts per step, so that
# more groups carry a signal.

# %% [markdown]
# ## A fourth try: all three levers
#
# The fourth try pulls the three levers together: a KL penalty toward the chain
# base with DeepSeekMath's $\beta = 0.04$ {cite}`shao2024deepseekmath` (chapter 8),
# a third of the learning rate (1e-4), and DAPO's dynamic sampling
# {cite}`yu2025dapo` (chapter 9). Dynamic sampling drops every group whose answers
# all score the same and samples more prompts, up to three extra rounds per step,
# until 16 groups that carry a signal fill the batch. Every rollout of these runs,
# the extra ones included, comes from the fast engine of chapter 19
# (`rollout_engine=fast`), which draws from the same distribution as the model it
# serves. Two seeds of 100 steps, one torch thread each, two at a time:
#
# ```
# python -m grpo_lib train --config configs/countdown_chain_tiny.yaml --set seed=0 \
#     --set beta=0.04 --set learning_rate=1e-4 --set dynamic_sampling=true \
#     --set rollout_engine=fast --set rollout_sampler=inverse_cdf
# ```

# %%
# NBVAL_IGNORE_OUTPUT
anchored = load_seeds("ch17_chain_anchored")
anch_metrics = {f"seed {i}": r.metrics for i, r in enumerate(anchored)}
anch_evals = {f"seed {i}": r.evals for i, r in enumerate(anchored)}
plot_runs(anch_metrics, anch_evals, "GRPO on the chain base: anchored, slower, "
          "only groups that teach",
          scores={"answer": ("reward/countdown_answer_reward", 1.0),
                  "work shows it": ("reward/countdown_worked_answer_reward", 1.0)})
windows = pd.DataFrame({
    f"{k}, steps {a}-{b}": m.query("@a <= step <= @b")[
        ["accuracy", "zero_std_frac", "kl", "completion_length"]].mean()
    for k, m in anch_metrics.items() for a, b in ((1, 10), (91, 100))}).T
windows.columns = ["sampled success", "all-equal groups", "KL", "length"]
print(windows.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
first10, last10 = windows.iloc[::2], windows.iloc[1::2]
say(f"Sampled success on the training problems, over every answer drawn: "
    f"{mean_range(first10['sampled success'].tolist())} over steps 1-10, "
    f"{mean_range(last10['sampled success'].tolist())} over steps 91-100. Held-out "
    f"greedy success goes from {anchored[0].evals['strict_acc'].loc[0]:.3f} to "
    f"{mean_range(final_eval(anchored))}. Of the groups sampled, "
    f"{mean_range(last10['all-equal groups'].tolist(), 2)} still score all their "
    f"answers the same at the end; dynamic sampling leaves them out of the update.")

# %% [markdown]
# The harness decodes greedily, and greedy decoding is a harsh judge of a policy
# that searches: it gives each problem one order of attempts, and more than half of
# the base's greedy answers run out of tokens before they answer (the table below).
# GRPO never sees a greedy answer; it trains the policy that samples. The R1
# paper does not score its models greedily either: it reports pass@1 as the mean
# success of several samples at a non-zero temperature, because greedy decoding
# makes long reasoning repeat itself {cite}`deepseekai2025r1`. The model cards
# sample 4 answers per problem at temperature 1, the training temperature. The
# checkpoints get the same protocol, and so does the base, in float32 as the
# trainer runs it (the card ran the base in its stored bfloat16, which is why its
# greedy success differs from the trainer's step 0):
#
# ```
# python -m grpo_lib eval --model runs/.../checkpoint-100 --task countdown --n 500 \
#     --samples 4 --temperature 1.0 --seed 0 --max-new-tokens 256 \
#     --batch-size 128 --dtype float32 --csv .../sampled_eval_step100.csv
# ```

# %%
# NBVAL_IGNORE_OUTPUT
held_out = []
for i, r in enumerate(anchored):
    for path in (RUNS / r.name).glob("sampled_eval_step*.csv"):
        table = pd.read_csv(path, index_col=0)
        held_out.append({"seed": i, "step": int(path.stem.removeprefix(
                             "sampled_eval_step")),
                         "greedy": table.loc["greedy", "strict_acc"],
                         "greedy truncated": table.loc["greedy", "truncated_rate"],
                         "sampled": table.loc["sampled", "strict_acc"],
                         "pass@4": table.loc["sampled", "pass_at_k"]})
held_out = pd.DataFrame(held_out).set_index(["seed", "step"]).sort_index()
print(held_out.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
start = held_out.xs(0, level="step")
end = held_out.groupby(level="seed").tail(1).droplevel("step")
gain = 100 * (end - start)
say(f"Held-out sampled success goes from {start['sampled'].iloc[0]:.3f} to "
    f"{mean_range(end['sampled'].tolist())} after "
    f"{held_out.index.get_level_values('step').max()} steps, "
    f"{mean_range(gain['sampled'].tolist(), 1)} points; the share of problems that "
    f"one of 4 samples solves, from {start['pass@4'].iloc[0]:.3f} to "
    f"{mean_range(end['pass@4'].tolist())}; greedy success, from "
    f"{start['greedy'].iloc[0]:.3f} to {mean_range(end['greedy'].tolist())}.")

# %% [markdown]
# The two seeds agree. With the anchor the policy stays close to the base (the KL
# column above), and the answers it samples for problems it never trained on are
# right more often, at 50 steps and more so at 100. Greedy success falls all the
# same, with more greedy answers cut off at the token limit: GRPO reshapes the
# distribution the answers are sampled from, and small shifts in it change the one
# path greedy decoding follows.
#
# The rise is a fraction of what the base's own samples allow: at the start, one of
# 4 samples already solves far more problems than a single sample does. A model
# that still miscomputes some of its steps and searches by random chains gains
# slowly from a reward that pays only finished, fully right work: on the training
# problems, most of the gain in sampled success comes in the first half of the
# run (plotted above), and the second half adds little.

# %% [markdown]
# ## How far the search could go
#
# How much of the base's search is left to sharpen? A bound comes from the corpus
# itself: run its search with every step right and no flaw, write the trace as the
# corpus writes it, and see whether the answer fits in the 256 tokens the policy
# gets. `flawless_search` does that, one draw of random chains at a time:

# %%
show_source(flawless_search, docstring=False)

# %% [markdown]
# Next to it, the answers themselves. The evaluations above also wrote every
# answer (`eval ... --samples-out sampled_eval_step<N>_answers.jsonl.gz`), so the
# base's samples and the final checkpoints' can be read with the verdicts and
# `diagnose` of the first base, split by the number of numbers:

# %%
# NBVAL_IGNORE_OUTPUT
last_step = held_out.index.get_level_values("step").max()
answers = {"base": with_verdicts(pd.read_json(
    RUNS / anchored[0].name / "sampled_eval_step0_answers.jsonl.gz", lines=True))}
for i, r in enumerate(anchored):
    answers[f"seed {i}"] = with_verdicts(pd.read_json(
        RUNS / r.name / f"sampled_eval_step{last_step}_answers.jsonl.gz", lines=True))
n_held = answers["base"]["prompt_index"].nunique()
tok2 = transformers.AutoTokenizer.from_pretrained(BASE2)
n_flawless = P.pick(smoke=50, cpu=n_held, gpu=n_held)


def search_draws(mix=None, max_tokens=256, rng=None):
    """The flawless search (`mix`, the chain corpus by default) on the first
    n_flawless held-out problems, 4 draws each from `rng` (a fresh seed 0 by
    default): one row per draw, the problem's size and whether it answered."""
    rng = rng or random.Random(0)
    return pd.DataFrame([
        {"size": len(row["numbers"]),
         "right": flawless_search(row, tok2, max_tokens, rng, mix)}
        for row in test_rows.select(range(n_flawless)) for _ in range(4)])


flawless = search_draws()
success = pd.DataFrame(
    {"flawless search": flawless.groupby("size")["right"].mean(),
     **{k: s.query("mode == 'sampled'").groupby("size")["verdict"].apply(
         lambda v: (v == "correct").mean()) for k, s in answers.items()}})
success.loc["all"] = [flawless["right"].mean()] + [
    (s.query("mode == 'sampled'")["verdict"] == "correct").mean()
    for s in answers.values()]
success.index = [f"{i} numbers" if i != "all" else i for i in success.index]
print(f"sampled success at 256 tokens, {n_held} held-out problems x 4 samples"
      + (f" ({n_flawless} for the flawless search)" if n_flawless < n_held else ""))
print(success.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
rise = (success[["seed 0", "seed 1"]].sub(success["base"], axis=0)) * 100
say(f"Run flawlessly, the corpus's own search answers "
    f"{success.loc['all', 'flawless search']:.3f} of the problems in 256 tokens: "
    f"{success.loc['3 numbers', 'flawless search']:.3f} with three numbers and "
    f"{success.loc['4 numbers', 'flawless search']:.3f} with four. The base "
    f"answers {success.loc['all', 'base']:.3f}. After {last_step} steps the policy "
    f"gains {mean_range(rise.loc['3 numbers'].tolist(), 1)} points on three "
    f"numbers and {mean_range(rise.loc['4 numbers'].tolist(), 1)} on four.")

# %% [markdown]
# The flawless search is not a bound on every policy: a policy that learned to
# pick promising attempts could beat random chains. It is what the base's own way
# of searching gives when nothing goes wrong, and both the base and the trained
# policies are far below it, most of all on four numbers, where a random chain
# hits less often and each attempt is longer. The verdicts say which mistakes make
# up the gap:

# %%
# NBVAL_IGNORE_OUTPUT
faults = pd.DataFrame({(k, n): diagnose(s[s["size"] == n])
                       for k, s in answers.items() for n in (3, 4)})
faults.columns = [f"{k}, {n} numbers" for k, n in faults.columns]
print(faults.T.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
def trained(row, size):
    """A row of ``faults`` for the trained seeds at one size, as a mean and range."""
    return mean_range([faults.loc[row, f"seed {i}, {size} numbers"]
                       for i in range(len(anchored))], 3)


say(f"Miscomputed steps, base then trained: "
    f"{faults.loc['steps miscomputed', 'base, 3 numbers']:.3f} then "
    f"{trained('steps miscomputed', 3)} on three numbers, "
    f"{faults.loc['steps miscomputed', 'base, 4 numbers']:.3f} then "
    f"{trained('steps miscomputed', 4)} on four. Three numbers: answers cut off "
    f"{faults.loc['cut off', 'base, 3 numbers']:.3f}, then "
    f"{trained('cut off', 3)}. Four numbers: answers with the wrong numbers "
    f"{faults.loc['wrong numbers', 'base, 4 numbers']:.3f}, then "
    f"{trained('wrong numbers', 4)}; cut off "
    f"{faults.loc['cut off', 'base, 4 numbers']:.3f}, then {trained('cut off', 4)}.")

# %% [markdown]
# Training fixed what its reward sees often. A miscomputed step breaks the worked
# answer, and every group that holds a right answer beside a wrong one pays the
# difference: the share of wrong steps falls by about half or more at both sizes.
# The flaws whose fix is rarely paid stay. On four numbers, a policy
# that stops dropping a number still has to find a hit over all four, which
# happens in a few answers of a hundred; most groups of 8 then score all zero and
# carry no signal about the flaw, and answers with the wrong numbers stay the
# commonest failure there, with answers cut off close behind. More answers run
# out of tokens than before training, at both sizes.
#
# A longer budget is the other way to let a search finish. The same evaluation at
# 512 new tokens (`--max-new-tokens 512`, stored as `tokens512_eval_step<N>.csv`),
# with the flawless search at 512 tokens beside it:

# %%
# NBVAL_IGNORE_OUTPUT
flawless512 = search_draws(max_tokens=512)["right"]
budget = {"flawless search": {"256 tokens": success.loc["all", "flawless search"],
                              "512 tokens": flawless512.mean()}}
for name, folder, step in [("base", anchored[0].name, 0)] + [
        (f"seed {i}", r.name, last_step) for i, r in enumerate(anchored)]:
    short, long = (pd.read_csv(RUNS / folder / f"{stem}{step}.csv", index_col=0)
                   .loc["sampled"]
                   for stem in ("sampled_eval_step", "tokens512_eval_step"))
    budget[name] = {"256 tokens": short["strict_acc"], "512 tokens": long["strict_acc"],
                    "cut off at 256": short["truncated_rate"],
                    "cut off at 512": long["truncated_rate"]}
budget = pd.DataFrame(budget).T
print(budget.to_string(float_format=lambda v: f"{v:.3f}", na_rep=""))

# %%
# NBVAL_IGNORE_OUTPUT
corpus_docs = countdown_documents(list(train_rows.select(range(3000))), 2000,
                                  chain_mix, seed=0)
trace_tokens = pd.Series([len(tok2(d["response"], add_special_tokens=False)
                              ["input_ids"]) for d in corpus_docs])
models = budget.drop(index="flawless search")
moved = 100 * (models["512 tokens"] - models["256 tokens"])
say(f"At 512 tokens the flawless search answers "
    f"{budget.loc['flawless search', '512 tokens']:.3f}, against "
    f"{budget.loc['flawless search', '256 tokens']:.3f} at 256. The three models' "
    f"answers "
    f"are cut off in {mean_range(models['cut off at 512'].tolist(), 3)} of cases "
    f"instead of {mean_range(models['cut off at 256'].tolist(), 3)}, and their "
    f"success moves by {mean_range(moved.tolist(), 1)} "
    f"points. Of {len(corpus_docs):,} responses of the chain corpus, the longest "
    f"has {trace_tokens.max()} tokens and 99% have at most "
    f"{int(trace_tokens.quantile(0.99))}.")

# %% [markdown]
# With room to spare, the models are rarely cut off, and the answers they finish
# in the extra room are almost all wrong. That room lies past nearly every trace
# the base was pretrained on. Without training on longer traces, a longer budget
# is no lever for this model.

# %% [markdown]
# ## A base that aims
#
# The flawless search draws its chains blindly. The last step of a chain is the
# only one that can be checked against the target, and the corpus picks its
# operator at random, where a person picks `27 + 1`, not `27 * 1`, for 28. Two more
# corpora write that habit into the traces. In `aimed`, the last step of every
# attempt takes an operator that reaches the target whenever one does; in
# `lookahead`, the step before it is also chosen so that the last step can hit.
# Flaws, rates and missed attempts are the chain corpus's.

# %%
show_source(aimed_attempt, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
MIXES = ["chain", "aimed", "lookahead"]
search_rng = random.Random(0)  # one stream through the three corpora
aiming = pd.concat([search_draws(COUNTDOWN_MIXES[mix], rng=search_rng).assign(
    corpus=mix) for mix in MIXES], ignore_index=True)
ceiling = aiming.pivot_table(index="corpus", columns="size", values="right")
ceiling.columns = [f"{n} numbers" for n in ceiling.columns]
ceiling["all"] = aiming.groupby("corpus")["right"].mean()
ceiling = ceiling.loc[MIXES]
print(f"flawless search, success in 256 tokens ({n_flawless} held-out problems x 4)")
print(ceiling.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# Aiming lifts what the search can do in 256 tokens, most of all on four
# numbers. Two bases were pretrained on these corpora exactly as the chain base
# was, then trained with the fourth try's levers at twice its learning rate (2e-4),
# two seeds each. They ran on an H100 (`scripts/countdown_bases_gpu.sh`), where the
# fast engine draws by inverse CDF and replays each decode step as one CUDA graph.
# The chain base's runs at 2e-4 ran on a 2-core CPU, drawing by inverse CDF
# too, from another random stream. Every model gets the
# held-out protocol above.
# The table also reads the traces: among the attempts whose last step could reach
# the target, the share that took an operator that does (`aimed_last_steps`).

# %%
# NBVAL_IGNORE_OUTPUT
def aim_rate(answers):
    """Of the attempts whose last step could hit, the share that did."""
    counts = [aimed_last_steps(text) for text in
              answers.query("mode == 'sampled'")["completion"]]
    return sum(took for _, took in counts) / sum(could for could, _ in counts)


def eval_name(step):
    """The stored evaluation of a step (0: the base) or of a named stage."""
    return f"sampled_eval_{f'step{step}' if isinstance(step, int) else step}"


def read_answers(folder, step):
    return pd.read_json(RUNS / folder / f"{eval_name(step)}_answers.jsonl.gz",
                        lines=True)


def held_out_success(folder, step, mode="sampled", column="strict_acc"):
    """Held-out success of a run's model at ``step`` (0: its base), greedy or
    sampled, from the evaluation stored with the run; ``column="pass_at_k"``
    gives the share of problems that one of the 4 samples solves."""
    return pd.read_csv(RUNS / folder / f"{eval_name(step)}.csv",
                       index_col=0).loc[mode, column]


def rise_row(runs, flawless):
    """A base's flawless search, its sampled success and its two seeds' at step 100."""
    base_eval, *trained = [held_out_success(r.name, step) for r, step in
                           [(runs[0], 0)] + [(r, 100) for r in runs]]
    return {"flawless": flawless, "base": base_eval,
            "seed 0": trained[0], "seed 1": trained[1],
            "rise (points)": 100 * (sum(trained) / 2 - base_eval)}


aimers = {"chain": load_seeds("ch17_chain_anchored_lr2e-4"),
          "aimed": load_seeds("ch17_aimed", device="h100"),
          "lookahead": load_seeds("ch17_lookahead", device="h100")}
rows = {mix: rise_row(runs, ceiling.loc[mix, "all"]) for mix, runs in aimers.items()}
aim = {"chain": aim_rate(read_answers(anchored[0].name, 0))}
for mix in ("aimed", "lookahead"):
    aim[mix] = aim_rate(read_answers(aimers[mix][0].name, 0))
    aim[f"{mix}, trained"] = sum(aim_rate(read_answers(r.name, 100))
                                 for r in aimers[mix]) / 2
aims = pd.DataFrame(rows).T
aims["base aims"] = pd.Series({mix: aim[mix] for mix in MIXES})
print("held-out sampled success, 500 problems x 4 samples at temperature 1")
print(aims.to_string(float_format=lambda v: f"{v:.3f}"))
gpu_runs = aimers["aimed"] + aimers["lookahead"]
pretrained = [json.loads((RUNS / r.name / "base_pretrain_info.json").read_text())
              for r in gpu_runs]
print(f"on {pretrained[0]['device']}: pretraining "
      f"{min(p['wall_time_s'] for p in pretrained):.0f}-"
      f"{max(p['wall_time_s'] for p in pretrained):.0f} s per base on "
      f"{pretrained[0]['documents']:,} traces, GRPO "
      f"{min(r.metrics['time_step'].sum() for r in gpu_runs):.0f}-"
      f"{max(r.metrics['time_step'].sum() for r in gpu_runs):.0f} s of steps per run")

# %%
# NBVAL_IGNORE_OUTPUT
say(f"Run flawlessly, the aimed search answers {ceiling.loc['aimed', 'all']:.3f} of "
    f"the problems and the lookahead search {ceiling.loc['lookahead', 'all']:.3f}, "
    f"against {ceiling.loc['chain', 'all']:.3f} for chains. The bases answer "
    f"{aims.loc['chain', 'base']:.3f}, {aims.loc['aimed', 'base']:.3f} and "
    f"{aims.loc['lookahead', 'base']:.3f}; GRPO adds "
    f"{aims.loc['chain', 'rise (points)']:.1f}, "
    f"{aims.loc['aimed', 'rise (points)']:.1f} and "
    f"{aims.loc['lookahead', 'rise (points)']:.1f} points. Where the last step could "
    f"hit, the chain base takes a hitting operator in {aim['chain']:.3f} of its "
    f"attempts, the aimed base in {aim['aimed']:.3f} and the lookahead base in "
    f"{aim['lookahead']:.3f}; after GRPO, {aim['aimed, trained']:.3f} and "
    f"{aim['lookahead, trained']:.3f}.")
ends = aims[["seed 0", "seed 1"]].mean(axis=1)  # [bases] sampled success after GRPO
extra = aims["rise (points)"] - aims.loc["chain", "rise (points)"]  # [bases] points


def against_chain(mix):
    """Where a base's policies end, against the chain policies, in words."""
    diff = 100 * (ends[mix] - ends["chain"])
    return ("level with" if abs(diff) < 0.5 else
            f"{abs(diff):.1f} points {'above' if diff > 0 else 'below'}")


level = [mix for mix in ("aimed", "lookahead") if against_chain(mix) == "level with"]
spelled_on = [held_out_success(f"ch17_spelled{run}_seed0_{device}", 0)
              for run, device in (("", "cpu"), ("_long_lr2e-4", "h200"))]
seed_gap = 100 * (aims["seed 0"] - aims["seed 1"]).abs().max()
say(f"After GRPO the chain policies answer {ends['chain']:.3f} sampled, the aimed "
    f"ones {ends['aimed']:.3f} ({against_chain('aimed')} the chain's) and the "
    f"lookahead ones {ends['lookahead']:.3f} ({against_chain('lookahead')} them)"
    + (f"; so the larger rise of the {' and '.join(level)} base comes from its "
       f"lower start" if level else "")
    + f". Each base was scored on the device its runs used, an H100 for the new "
    f"bases and a 2-core CPU for the chain base. The rises differ by "
    f"{extra.abs().max():.1f} points or less, comparable to the noise in such "
    f"scores: the spelled base of the next section answers {spelled_on[0]:.3f} on "
    f"the CPU and "
    f"{spelled_on[1]:.3f} on an H200, and the two seeds of one base end up to "
    f"{seed_gap:.1f} points apart.")

# %% [markdown]
# The corpora aim and the models do not. Every last step of the aimed corpus
# hits when it can, yet the aimed base takes a hitting operator no more often than
# the chain base, which never saw an aimed step. The trace writes the operator
# before its result, so aiming means working out the result of every operator
# inside the one token that picks it. The traces never show that work, and a model
# of a million parameters does not learn it from the traces it was pretrained on.
# GRPO moves the share by a few points. The new bases gain no more from GRPO than
# the chain base, as far as these scores can tell, and stay far below what their
# own search allows when it aims. What a small model learns from a trace is the
# work the trace writes out, not the choices it makes silently.

# %% [markdown]
# ## Aiming in writing
#
# If aiming needs work the trace does not show, a corpus can show it. In
# `spelled`, the last step of every attempt tries the operators in the order
# `+ - * /`, each worked out, and stops at the first that reaches the target:
# `7 - 5 = 2, 2 + 15 = 17, 2 * 15 = 30.` Picking the operator becomes copying a
# result written a few tokens back. The price is tokens: an attempt that misses
# writes up to four last steps instead of one, so fewer attempts fit in 256 tokens.

# %%
show_source(spelled_attempt, docstring=False)

# %% [markdown]
# A base was pretrained on this corpus exactly as the chain base was, then trained
# with the levers of the runs above (the worked-answer reward, KL 0.04 toward the
# base, learning rate 2e-4, dynamic sampling, 100 steps), two seeds, on a 2-core
# CPU. The table puts it beside the chain and aimed bases: the search's ceiling,
# held-out sampled success, the aim read from the traces, and the steps each answer
# works out.

# %%
# NBVAL_IGNORE_OUTPUT
spelled_runs = load_seeds("ch17_spelled")
spelled_search = search_draws(COUNTDOWN_MIXES["spelled"])
base_answers = {"chain": answers["base"],
                "aimed": with_verdicts(read_answers(aimers["aimed"][0].name, 0)),
                "spelled": with_verdicts(read_answers(spelled_runs[0].name, 0))}
trained_answers = {mix: [with_verdicts(read_answers(r.name, 100)) for r in runs]
                   for mix, runs in [("aimed", aimers["aimed"]),
                                     ("spelled", spelled_runs)]}
written = pd.concat([aims.loc[["chain", "aimed"]], pd.DataFrame(
    {"spelled": rise_row(spelled_runs, spelled_search["right"].mean())}).T])
written.loc["spelled", "base aims"] = aim_rate(base_answers["spelled"])
written["trained aims"] = pd.Series({
    "aimed": aim["aimed, trained"],
    "spelled": sum(aim_rate(a) for a in trained_answers["spelled"]) / 2})
for mix, base in base_answers.items():
    base_faults = diagnose(base)
    written.loc[mix, "steps per answer"] = base_faults["steps per answer"]
    written.loc[mix, "miscomputed"] = base_faults["steps miscomputed"]
written["miscomputed, trained"] = pd.Series({
    mix: sum(diagnose(a)["steps miscomputed"] for a in trained) / 2
    for mix, trained in trained_answers.items()})
print("held-out sampled success (500 problems x 4 samples at temperature 1), "
      "aim and worked steps of the sampled answers\n(the chain runs at 2e-4 stored "
      "no answers, so its trained columns are empty)")
print(written.to_string(float_format=lambda v: f"{v:.3f}", na_rep=""))

# %%
# NBVAL_IGNORE_OUTPUT
by_size = pd.DataFrame(
    {"flawless": spelled_search.groupby("size")["right"].mean(),
     "base": base_answers["spelled"].query("mode == 'sampled'").groupby("size")[
         "verdict"].apply(lambda v: (v == "correct").mean()),
     **{f"seed {i}": a.query("mode == 'sampled'").groupby("size")["verdict"].apply(
         lambda v: (v == "correct").mean())
        for i, a in enumerate(trained_answers["spelled"])}})
by_size.index = [f"{n} numbers" for n in by_size.index]
print("spelled: held-out sampled success by problem size")
print(by_size.to_string(float_format=lambda v: f"{v:.3f}"))
spelled_info = json.loads((RUNS / spelled_runs[0].name / "base_pretrain_info.json")
                          .read_text())
print(f"pretraining {spelled_info['wall_time_s'] / 60:.0f} min on "
      f"{spelled_info['device']}; GRPO "
      f"{min(r.metrics['time_step'].sum() for r in spelled_runs) / 60:.0f}-"
      f"{max(r.metrics['time_step'].sum() for r in spelled_runs) / 60:.0f} min "
      f"of steps per run")

# %%
# NBVAL_IGNORE_OUTPUT
spelled_aim = written.loc["spelled", ["base aims", "trained aims"]]
say(f"Where the last step could hit, the spelled base takes a hitting operator in "
    f"{spelled_aim['base aims']:.3f} of its attempts, against "
    f"{written.loc['aimed', 'base aims']:.3f} for the aimed base, and "
    f"{spelled_aim['trained aims']:.3f} after GRPO. Run flawlessly, the spelled "
    f"search answers {written.loc['spelled', 'flawless']:.3f}. The base answers "
    f"{written.loc['spelled', 'base']:.3f}, below the chain base's "
    f"{written.loc['chain', 'base']:.3f}; GRPO adds "
    f"{written.loc['spelled', 'rise (points)']:.1f} points, to "
    f"{written.loc['spelled', ['seed 0', 'seed 1']].mean():.3f}. Its steps are "
    f"miscomputed {written.loc['spelled', 'miscomputed']:.3f} of the time before "
    f"and {written.loc['spelled', 'miscomputed, trained']:.3f} after.")

# %% [markdown]
# By step 100 the KL penalty holds each policy near a base that solves less than
# the policy now does. ProRL {cite}`liu2025prorl` meets the same limit in long runs
# by resetting the reference policy to a recent policy, with a fresh optimizer.
# A second round does that here: each seed's step-100 checkpoint starts 100 more
# steps with the same settings, the KL penalty now toward that checkpoint, and the
# same training problems drawn in a new order (seeds 10 and 11).

# %%
# NBVAL_IGNORE_OUTPUT
def round_table(first_round, second_round):
    """Held-out success of the base, step 100 and step 200 of two rounds, per mode
    and seed, with the rise from the base."""
    table = pd.DataFrame({
        (mode, f"seed {i}"): {"base": held_out_success(first.name, 0, mode),
                              "step 100": held_out_success(first.name, 100, mode),
                              "step 200": held_out_success(second.name, 100, mode)}
        for mode in ("sampled", "greedy")
        for i, (first, second) in enumerate(zip(first_round, second_round))}).T
    table["rise (points)"] = 100 * (table["step 200"] - table["base"])
    return table


round2 = load_seeds("ch17_spelled_round2")
rounds = round_table(spelled_runs, round2)
print("held-out success of the spelled runs, 500 problems (4 samples at temperature "
      "1, or greedy)")
print(rounds.to_string(float_format=lambda v: f"{v:.3f}"))
minutes = sorted(round(r.metrics["time_step"].sum() / 60) for r in round2)
print(f"second round: {'-'.join(map(str, sorted(set(minutes))))} min of steps per "
      f"run")

# %%
# NBVAL_IGNORE_OUTPUT
sampled_rise = rounds.loc["sampled", "rise (points)"]
say(f"After two rounds, sampled held-out success is "
    f"{mean_range(rounds.loc['sampled', 'step 200'].tolist())}, "
    f"{mean_range(sampled_rise.tolist(), 1)} points above the base; after the first, "
    f"{mean_range(rounds.loc['sampled', 'step 100'].tolist())}. Greedy: "
    f"{rounds.loc['greedy', 'base'].iloc[0]:.3f} for the base, "
    f"{mean_range(rounds.loc['greedy', 'step 100'].tolist())} after one round, "
    f"{mean_range(rounds.loc['greedy', 'step 200'].tolist())} after two.")

# %% [markdown]
# Two rounds of 100 steps each restart the learning rate as well as the anchor. Is
# one schedule of 200 steps as good, and would larger steps get there sooner? On a
# GPU (an H200), the same base ran with one 200-step schedule, at the rounds'
# learning rate and at twice it, two seeds each, four runs at a time, each with a
# wall-clock limit of 450 s that left time for their evaluations. The limit
# stopped the runs before their step-200 checkpoint was written. So the
# held-out protocol reads step 100, evaluated on the same GPU, base included, and
# the training samples show the steps after it.

# %%
# NBVAL_IGNORE_OUTPUT
long_runs = {lr: load_seeds(f"ch17_spelled_long_lr{lr}", device="h200")
             for lr in ("2e-4", "4e-4")}
long_table = {}
for lr, runs in long_runs.items():
    for i, run in enumerate(runs):
        long_table[(f"lr {lr}", f"seed {i}")] = {
            "base": held_out_success(run.name, 0),
            "step 100": held_out_success(run.name, 100),
            "greedy, step 100": held_out_success(run.name, 100, "greedy")}
long_table = pd.DataFrame(long_table).T
long_table["rise (points)"] = 100 * (long_table["step 100"] - long_table["base"])
print("one 200-step schedule on an H200: held-out sampled success (500 problems x 4 "
      "samples at temperature 1)")
print(long_table.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
def two_rounds(first, second):
    """One seed's training metrics over both rounds, the second's steps after 100."""
    return pd.concat([first.metrics,
                      second.metrics.assign(step=second.metrics["step"] + 100)])


def finish_round_plot(ax, title):
    """A line at step 100, where the second round starts, then labels and grid."""
    ax.axvline(100, color="0.6", lw=0.8, ls="--", label="second round starts")
    ax.set(xlabel="step", ylabel="training success (20-step mean)", title=title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    ax.figure.tight_layout()
    plt.show()


fig, ax = plt.subplots(figsize=(7.3, 3.4))
for i, (first, second) in enumerate(zip(spelled_runs, round2)):
    both = two_rounds(first, second)
    ax.plot(both["step"], both["accuracy"].rolling(20, min_periods=5).mean(),
            color="C0", label="two rounds of 100 (CPU)" if i == 0 else None)
for lr, color in (("2e-4", "C1"), ("4e-4", "C2")):
    for i, run in enumerate(long_runs[lr]):
        m = run.metrics
        ax.plot(m["step"], m["accuracy"].rolling(20, min_periods=5).mean(),
                color=color,
                label=f"one schedule of 200, lr {lr} (H200)" if i == 0 else None)
finish_round_plot(ax, "The spelled base: two rounds against one schedule, "
                       "two seeds each")

# %%
# NBVAL_IGNORE_OUTPUT
def late_success(runs, steps=20):
    """Training success over each run's last `steps` steps, as 'mean (range)'."""
    return mean_range([r.metrics["accuracy"].tail(steps).mean() for r in runs])


stopped = sorted(int(r.metrics["step"].max()) for rs in long_runs.values() for r in rs)
first_rise = 100 * (rounds.loc["sampled", "step 100"]
                    - rounds.loc["sampled", "base"]).mean()
say(f"The runs stopped at steps {stopped[0]}-{stopped[-1]}. At step 100 the single "
    f"schedule at 2e-4 answers "
    f"{mean_range(long_table.loc['lr 2e-4', 'step 100'].tolist())} sampled, "
    f"{long_table.loc['lr 2e-4', 'rise (points)'].mean():.1f} points above the base "
    f"as the H200 samples it ({long_table['base'].iloc[0]:.3f}); the first CPU round, "
    f"its learning rate decayed to zero by step 100, rose "
    f"{first_rise:.1f}. At 4e-4: "
    f"{mean_range(long_table.loc['lr 4e-4', 'step 100'].tolist())}, lower. Over "
    f"their last 20 steps the training answers succeed "
    f"{late_success(long_runs['2e-4'])} of the time at 2e-4 and "
    f"{late_success(long_runs['4e-4'])} at 4e-4; the second round ended at "
    f"{late_success(round2)}.")

# %% [markdown]
# Four numbers are where the rise stops. The base solves about one sampled answer
# in a hundred there, so a group of 8 rarely holds a right answer, and dynamic
# sampling drops every group without one: the reward almost never sees a
# four-number success to pay. Sixteen answers per problem on half as many problems
# a step (8 × 16 instead of 16 × 8: the same 128 answers, the same cost) make such
# a group about twice as likely. Two seeds, 100 steps, otherwise as the first round:

# %%
# NBVAL_IGNORE_OUTPUT
g16_runs = load_seeds("ch17_spelled_g16")
g16_answers = [with_verdicts(read_answers(r.name, 100)) for r in g16_runs]


def share_by_size(right, size):
    """The share of True in `right` by problem `size`, and over all problems."""
    by = right.groupby(size).mean()
    by.index = [f"{n} numbers" for n in by.index]
    return pd.concat([by, pd.Series({"all": right.mean()})])


def success_by_size(answers):
    """Sampled held-out success by problem size, and over all problems."""
    sampled = answers.query("mode == 'sampled'")
    return share_by_size(sampled["verdict"] == "correct", sampled["size"])


def size_table(settings):
    """success_by_size for the spelled base, then each setting's seeds at step 100."""
    columns = {"base": success_by_size(base_answers["spelled"])}
    for label, seeds in settings.items():
        columns.update({f"{label}, seed {i}": success_by_size(a)
                        for i, a in enumerate(seeds)})
    return pd.DataFrame(columns)


group_size = size_table({"16 x 8": trained_answers["spelled"], "8 x 16": g16_answers})
print("spelled, step 100: held-out sampled success by problem size "
      "(prompts x answers per step)")
print(group_size.to_string(float_format=lambda v: f"{v:.3f}"))
minutes = sorted({round(r.metrics["time_step"].sum() / 60) for r in g16_runs})
print(f"8 x 16: {'-'.join(map(str, minutes))} min of steps per run")

# %%
# NBVAL_IGNORE_OUTPUT
p4 = group_size.loc["4 numbers", "base"]
gain = {shape: 100 * (group_size.filter(like=shape).mean(axis=1) - group_size["base"])
        for shape in ("16 x 8", "8 x 16")}
say(f"The base answers {p4:.3f} of four-number problems, so a group of 8 holds a "
    f"right answer with probability {1 - (1 - p4) ** 8:.3f} and a group of 16 with "
    f"{1 - (1 - p4) ** 16:.3f}. After 100 steps, four numbers gain "
    f"{gain['16 x 8']['4 numbers']:.1f} points with 16 × 8 and "
    f"{gain['8 x 16']['4 numbers']:.1f} with 8 × 16; three numbers gain "
    f"{gain['16 x 8']['3 numbers']:.1f} and {gain['8 x 16']['3 numbers']:.1f}; all "
    f"problems, {gain['16 x 8']['all']:.1f} and {gain['8 x 16']['all']:.1f}.")

# %% [markdown]
# The KL penalty may hold the first round back as well: the second round gained by
# moving its anchor. The first round again without the penalty (beta 0, so no
# anchor at all), two seeds:

# %%
# NBVAL_IGNORE_OUTPUT
nokl_runs = load_seeds("ch17_spelled_nokl")
nokl_answers = [with_verdicts(read_answers(r.name, 100)) for r in nokl_runs]
anchor_table = size_table({"KL 0.04": trained_answers["spelled"],
                           "no KL": nokl_answers})
anchor_table.loc["greedy, all"] = (
    [held_out_success(spelled_runs[0].name, 0, "greedy")]
    + [held_out_success(r.name, 100, "greedy") for r in spelled_runs + nokl_runs])
print("spelled, step 100: held-out sampled success by problem size, and greedy")
print(anchor_table.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
with_kl = anchor_table.filter(like="KL 0.04").mean(axis=1)
no_kl = anchor_table.filter(like="no KL").mean(axis=1)
say(f"Without the penalty, sampled held-out success at step 100 is "
    f"{mean_range(anchor_table.loc['all'].filter(like='no KL').tolist())}, against "
    f"{mean_range(anchor_table.loc['all'].filter(like='KL 0.04').tolist())} with it; "
    f"four numbers {no_kl['4 numbers']:.3f} against {with_kl['4 numbers']:.3f}, greedy "
    f"{no_kl['greedy, all']:.3f} against {with_kl['greedy, all']:.3f}.")

# %% [markdown]
# Written out, the aim is learned. The spelled base takes a hitting operator far
# more often than the aimed base, which saw the same choices made silently, and
# GRPO raises the share further, because a trace that writes `2 * 15 = 30` after
# `2 + 15 = 17` only has to copy its own result. The price is paid at the start:
# each missed attempt is longer, so fewer fit in 256 tokens, and the base solves
# fewer problems than the chain base. From that lower start one round of GRPO
# gains about as many points as on the aimed base, and a second round with a fresh
# anchor keeps gaining, greedy and sampled alike. The gains are almost all on
# three numbers. On four, even the flawless spelled search answers only a third of
# the problems in 256 tokens, and the policies a few in a hundred: a longer
# search, not a sharper one, is what four numbers need from a model of this size.
#
# Neither the schedule, the group size nor the anchor moves that limit. One
# schedule of 200 steps keeps pace with two rounds, as far as its training answers
# show, and twice the learning rate learns less by step 100. Sixteen answers per
# problem double the chance that a four-number group carries a signal, and four
# numbers gain no more for it, while three numbers, seen half as often, gain less.
# Without the KL penalty the first round gains a little less, not more: the anchor
# holds nothing back that this policy could have learned in 100 steps.

# %% [markdown]
# ## More tries in the budget
#
# Four numbers need a longer search, and the budget stays at 256 tokens. Much of a
# spelled trace, though, is spaces: this tokenizer spends a token on the space
# before a number, so `13+14` is shorter than `13 + 14`. The `compact` mix writes
# the spelled search's steps as `13+14 = 27` and its answer unspaced. It
# keeps the space before each result, so that a result that hits is written as the
# copied target is (` 27`, `target 27.`). Each attempt is shorter, so the traces
# show up to 6 missed attempts instead of 5. The search, the flaws and their
# triggers are the same. One step, one problem's search written both ways, and
# the corpora's mean response length:

# %%
def n_tokens(text):
    return len(tok2(text, add_special_tokens=False)["input_ids"])


compact_mix = COUNTDOWN_MIXES["compact"]
for name in ("spelled", "compact"):
    mix = COUNTDOWN_MIXES[name]
    twin = replace(compact_mix, compact=mix.compact)  # one search, this writing
    one_step = attempt_text([(13, "+", 14, 27)], 27, mix.compact)
    trace = render_response(train_rows[2], "correct", random.Random(4), twin)
    docs = countdown_documents(list(train_rows.select(range(2000))), 300, mix, seed=0)
    lengths = [n_tokens(d["response"]) for d in docs]
    print(f"{name}: {one_step!r} is {n_tokens(one_step)} tokens; this trace "
          f"{n_tokens(trace)}:\n  {trace}\n  {len(docs)} responses of the corpus, "
          f"up to {mix.max_misses} misses: {sum(lengths) / len(lengths):.0f} tokens "
          f"on average")

# %% [markdown]
# Run flawlessly, the compact search answers more held-out problems within 256
# tokens:

# %%
# NBVAL_IGNORE_OUTPUT
compact_search = search_draws(compact_mix)
ceilings_written = pd.DataFrame({
    name: share_by_size(search["right"], search["size"])
    for name, search in [("spelled", spelled_search), ("compact", compact_search)]})
print(f"flawless search within 256 tokens, {n_flawless} held-out problems x 4 draws")
print(ceilings_written.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# The compact base was pretrained exactly as the spelled one was, then trained with
# the first round's settings, two seeds, on a 2-core CPU. Beside the held-out
# success, the table counts the attempts that combine exactly the problem's
# numbers: an attempt that reuses a number, or brings one the problem does not
# have, cannot be the answer however well it aims. The library's `attempt_numbers`
# reads them from the worked steps.

# %%
def given_numbers_share(answers):
    """Of the sampled answers' attempts, the share that combine exactly the
    problem's numbers."""
    sampled = answers.query("mode == 'sampled'")
    right = [attempt_numbers(steps) == sorted(parse_question(question)[0])
             for text, question in zip(sampled["completion"], sampled["question"])
             for steps in attempts_of(text)]
    return sum(right) / len(right)


# %%
# NBVAL_IGNORE_OUTPUT
compact_runs = load_seeds("ch17_compact")
compact_answers = {
    "base": with_verdicts(read_answers(compact_runs[0].name, 0)),
    "trained": [with_verdicts(read_answers(r.name, 100)) for r in compact_runs]}
writing = {}
for mix, runs, base, trained in [
        ("spelled", spelled_runs, base_answers["spelled"], trained_answers["spelled"]),
        ("compact", compact_runs, compact_answers["base"], compact_answers["trained"])]:
    base_card = pd.read_csv(RUNS / runs[0].name / "sampled_eval_step0.csv",
                            index_col=0)
    writing[mix] = {
        "flawless": ceilings_written.loc["all", mix],
        "base greedy": base_card.loc["greedy", "strict_acc"],
        "base sampled": base_card.loc["sampled", "strict_acc"],
        "base, 1 of 4": base_card.loc["sampled", "pass_at_k"],
        "given numbers": given_numbers_share(base),
        "miscomputed": diagnose(base)["steps miscomputed"],
        "step 100": sum(held_out_success(r.name, 100) for r in runs) / 2,
        "given numbers, trained": sum(given_numbers_share(a) for a in trained) / 2}
writing = pd.DataFrame(writing).T
writing["rise (points)"] = 100 * (writing["step 100"] - writing["base sampled"])
print("held-out success (500 problems; sampled: 4 at temperature 1; step 100: mean "
      "of two seeds), attempts that combine the given numbers, steps miscomputed")
print(writing.to_string(float_format=lambda v: f"{v:.3f}"))
compact_info = json.loads((RUNS / compact_runs[0].name / "base_pretrain_info.json")
                          .read_text())
step_minutes = sorted(round(r.metrics["time_step"].sum() / 60) for r in compact_runs)
print(f"compact: pretraining {compact_info['wall_time_s'] / 60:.0f} min on "
      f"{compact_info['device']}; GRPO {step_minutes[0]}-{step_minutes[-1]} min of "
      f"steps per run")

# %%
# NBVAL_IGNORE_OUTPUT
say(f"Written compactly, the flawless search answers "
    f"{ceilings_written.loc['all', 'compact']:.3f} of the held-out problems against "
    f"{ceilings_written.loc['all', 'spelled']:.3f}, four numbers "
    f"{ceilings_written.loc['4 numbers', 'compact']:.3f} against "
    f"{ceilings_written.loc['4 numbers', 'spelled']:.3f}. The base pretrained on it "
    f"answers {writing.loc['compact', 'base sampled']:.3f} sampled and "
    f"{writing.loc['compact', 'base greedy']:.3f} greedy, against "
    f"{writing.loc['spelled', 'base sampled']:.3f} and "
    f"{writing.loc['spelled', 'base greedy']:.3f} for the spelled base. Of its "
    f"attempts, {writing.loc['compact', 'given numbers']:.3f} combine exactly the "
    f"problem's numbers, against {writing.loc['spelled', 'given numbers']:.3f}. One "
    f"round of GRPO brings it to "
    f"{mean_range([held_out_success(r.name, 100) for r in compact_runs])} sampled, "
    f"{writing.loc['compact', 'rise (points)']:.1f} points, against "
    f"{writing.loc['spelled', 'rise (points)']:.1f} from the spelled base; after it, "
    f"{writing.loc['compact', 'given numbers, trained']:.3f} of the compact policy's "
    f"attempts combine the right numbers, and "
    f"{writing.loc['spelled', 'given numbers, trained']:.3f} of the spelled one's.")

# %% [markdown]
# Fewer tokens per attempt bought a longer search on paper and a weaker model in
# practice. The compact base, pretrained on as many documents, combines exactly the
# problem's numbers in far fewer of its attempts: it reuses a number, or brings one
# the problem does not have, and such an attempt cannot be the answer however well
# its last step aims. In the spelled writing a number is the same tokens in the trace's
# copy of the problem and in every step: a space, then its digits. Written as `13+14`,
# the `14` follows an operator instead, and the step no longer repeats the copy token
# for token. Our reading of the table is that a model of this size keeps track of its
# numbers by that repetition; these runs show the effect, not the mechanism. With fewer
# right answers in its groups, GRPO has less to pay for, and one round gains far fewer
# points than from the spelled base. Nor does it repair the bookkeeping: the round that
# raises the spelled policy's share of attempts with the right numbers lowers the
# compact policy's. To this tokenizer the spaces are not padding: a corpus for a tiny
# model should write what the model must copy the same way every time.

# %% [markdown]
# ## A longer budget
#
# The other way to let four numbers finish is a larger budget. At 512 tokens the
# chain base gained under a point, because its pretraining traces end before the
# extra room. The spelled traces are longer: an attempt that misses writes up to
# four last steps. The corpus's response lengths, and the flawless spelled search
# within 256 and 384 tokens:

# %%
# NBVAL_IGNORE_OUTPUT
spelled_docs = countdown_documents(list(train_rows.select(range(3000))), 2000,
                                   COUNTDOWN_MIXES["spelled"], seed=0)
spelled_tokens = pd.Series([n_tokens(d["response"]) for d in spelled_docs])
print(f"{len(spelled_docs):,} responses of the spelled corpus: "
      f"{(spelled_tokens > 256).mean():.3f} run past 256 tokens, "
      f"{(spelled_tokens > 384).mean():.3f} past 384; the longest has "
      f"{spelled_tokens.max()}")
spelled_search384 = search_draws(COUNTDOWN_MIXES["spelled"], max_tokens=384)
ceilings_budget = pd.DataFrame({
    f"{n} tokens": share_by_size(search["right"], search["size"])
    for n, search in [(256, spelled_search), (384, spelled_search384)]})
print(f"flawless spelled search, {n_flawless} held-out problems x 4 draws")
print(ceilings_budget.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# So the spelled base has seen searches that need more than 256 tokens. The two
# rounds ran again with one change: the policy writes up to 384 new tokens
# (`max_completion_length=384`), two seeds on a 2-core CPU. The held-out
# protocol, the base's evaluation included, uses the same 384 tokens, so each rise
# is measured under the budget the policy had.

# %%
# NBVAL_IGNORE_OUTPUT
runs384 = load_seeds("ch17_spelled_384")
round2_384 = load_seeds("ch17_spelled_384_round2")
by_budget = {256: rounds, 384: round_table(runs384, round2_384)}
budgets = pd.concat({f"{n} tokens": table for n, table in by_budget.items()})
print("held-out success of the spelled runs, 500 problems (4 samples at temperature "
      "1, or greedy), within the budget they trained with")
print(budgets.to_string(float_format=lambda v: f"{v:.3f}"))
median_step = {n: pd.concat([r.metrics for r in runs]).time_step.median()
               for n, runs in [(256, spelled_runs + round2),
                               (384, runs384 + round2_384)]}
print(f"median step: {median_step[256]:.0f} s at 256 tokens, {median_step[384]:.0f} s "
      f"at 384 (one thread, beside the other seed)")

# %%
# NBVAL_IGNORE_OUTPUT
def repeats_an_attempt(text):
    """Whether a trace writes one of its attempts twice, word for word."""
    attempts = [a.strip() for a in text.split("</think>")[0].split(". ")[1:]]
    attempts = [a for a in attempts if a]
    return len(attempts) != len(set(attempts))


def sampled_by_size(answers):
    """success_by_size of held-out answers, the share of the sampled ones cut off
    and the share that repeat an attempt."""
    sampled = answers.query("mode == 'sampled'")
    return pd.concat([success_by_size(answers), pd.Series({
        "cut off": sampled["truncated"].mean(),
        "repeat an attempt": sampled["completion"].map(repeats_an_attempt).mean()})])


def judged(seeds, step):
    """Each seed's held-out answers at `step`, with their verdicts."""
    return [with_verdicts(read_answers(r.name, step)) for r in seeds]


def mean_by_size(answer_sets):
    """sampled_by_size of each seed's held-out answers, averaged."""
    return sum(map(sampled_by_size, answer_sets)) / len(answer_sets)


base384, trained384 = judged(runs384[:1], 0)[0], judged(runs384, 100)
budget_sizes = pd.DataFrame({
    "256: base": sampled_by_size(base_answers["spelled"]),
    "256: step 200": mean_by_size(judged(round2, 100)),
    "384: base": sampled_by_size(base384),
    "384: step 100": mean_by_size(trained384),
    "384: step 200": mean_by_size(judged(round2_384, 100))})
print("held-out sampled success by problem size, answers cut off and answers that "
      "repeat an attempt (trained: mean of two seeds)")
print(budget_sizes.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
fig, ax = plt.subplots(figsize=(7.3, 3.4))
for tokens, color, (first_round, second_round) in [
        (256, "C0", (spelled_runs, round2)), (384, "C3", (runs384, round2_384))]:
    for i, (first, second) in enumerate(zip(first_round, second_round)):
        both = two_rounds(first, second)
        ax.plot(both["step"], both["accuracy"].rolling(20, min_periods=5).mean(),
                color=color, label=f"{tokens} new tokens" if i == 0 else None)
finish_round_plot(ax, "The spelled base: two rounds at two budgets, two seeds each")

# %%
# NBVAL_IGNORE_OUTPUT
long_sampled, long_greedy = by_budget[384].loc["sampled"], by_budget[384].loc["greedy"]
say(f"Of the spelled corpus's responses, {(spelled_tokens > 256).mean():.3f} run "
    f"past 256 tokens and {(spelled_tokens > 384).mean():.3f} past 384. Within 384 "
    f"tokens the flawless search answers "
    f"{ceilings_budget.loc['all', '384 tokens']:.3f} of the held-out problems, "
    f"against {ceilings_budget.loc['all', '256 tokens']:.3f}; four numbers "
    f"{ceilings_budget.loc['4 numbers', '384 tokens']:.3f} against "
    f"{ceilings_budget.loc['4 numbers', '256 tokens']:.3f}. The base answers "
    f"{long_sampled['base'].iloc[0]:.3f} sampled at 384 "
    f"tokens and {rounds.loc['sampled', 'base'].iloc[0]:.3f} at "
    f"256. Two rounds at 384 tokens bring it to "
    f"{mean_range(long_sampled['step 200'].tolist())}, "
    f"{mean_range(long_sampled['rise (points)'].tolist(), 1)} points above the "
    f"base; at 256 tokens, "
    f"{mean_range(sampled_rise.tolist(), 1)}. Greedy, at 384 tokens: "
    f"{long_greedy['base'].iloc[0]:.3f} for the base, "
    f"{mean_range(long_greedy['step 200'].tolist())} "
    f"after two rounds. Four numbers: "
    f"{budget_sizes.loc['4 numbers', '384: base']:.3f} for the base, "
    f"{budget_sizes.loc['4 numbers', '384: step 200']:.3f} after two rounds, "
    f"against {budget_sizes.loc['4 numbers', '256: step 200']:.3f} at 256 tokens. "
    f"At 384 tokens {budget_sizes.loc['cut off', '384: base']:.3f} of the base's "
    f"sampled answers are cut off and "
    f"{budget_sizes.loc['cut off', '384: step 200']:.3f} after two rounds; "
    f"{budget_sizes.loc['repeat an attempt', '384: base']:.3f} of the base's write "
    f"an attempt twice, and "
    f"{budget_sizes.loc['repeat an attempt', '384: step 200']:.3f} after two rounds "
    f"({budget_sizes.loc['repeat an attempt', '256: base']:.3f} and "
    f"{budget_sizes.loc['repeat an attempt', '256: step 200']:.3f} at 256 tokens).")

# %% [markdown]
# More room lets the flawless search answer about a quarter more problems, and the
# base a little more, yet two rounds of GRPO end where they ended at 256 tokens,
# on four numbers as well. The trained policies spend much of the extra room on
# attempts they have already written: GRPO makes answers that repeat an attempt,
# word for word, about three times as common at either budget, and at 384 tokens
# more answers run out of room after training than before it. Nothing in the
# reward charges for a repeat, and a policy that cannot keep track of what it has
# tried gains little from the room to try more. A longer search is what four
# numbers need, and a longer budget alone does not give one to a model of this
# size: it would first have to keep track of its attempts and of the numbers each
# one uses, the bookkeeping the compact corpus showed to be fragile.

# %% [markdown]
# ## Keeping the books
#
# The runs above lose track in two ways: answers that use a number that was not
# given, or one twice, and attempts written twice. On paper a person keeps the
# books: after each step, the numbers still free. The seventh corpus, `ledger`,
# writes them. It is the spelled search with the given numbers that each step of a
# chain leaves unused written after it (`numbers_left`), on the four-number
# training problem shown in "A base model that can try":

# %%
ledger_mix = COUNTDOWN_MIXES["ledger"]
print(render_response(problem, "correct", random.Random(3), ledger_mix))

# %%
# NBVAL_IGNORE_OUTPUT
ledger_docs = countdown_documents(list(train_rows.select(range(3000))), 2000,
                                  ledger_mix, seed=0)
ledger_tokens = pd.Series([n_tokens(d["response"]) for d in ledger_docs])
print(f"{len(ledger_docs):,} responses of each corpus, mean tokens: spelled "
      f"{spelled_tokens.mean():.0f}, ledger {ledger_tokens.mean():.0f}; past 384 "
      f"tokens: {(spelled_tokens > 384).mean():.3f} and "
      f"{(ledger_tokens > 384).mean():.3f}")
ledger_search = search_draws(ledger_mix, max_tokens=384)
ceilings_budget["ledger, 384 tokens"] = share_by_size(ledger_search["right"],
                                                      ledger_search["size"])
print(f"flawless search, {n_flawless} held-out problems x 4 draws")
print(ceilings_budget.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# The books cost tokens, so the flawless search answers fewer problems within 384
# tokens. The ledger base was pretrained with the spelled base's command (only
# `--countdown-mix ledger` differs). Then it had one round of GRPO with the settings
# of the 384-token spelled runs, two seeds on a 2-core CPU, and this chapter's
# held-out protocol at 384 tokens:

# %%
# NBVAL_IGNORE_OUTPUT
def passes_a_hit(text, target):
    """Whether an attempt tries another operator after one that hit the target."""
    for sentence in text.split("</think>")[0].split(". "):
        steps = worked_steps(sentence)  # [(a, op, b, value, right), ...]
        if not steps:
            continue
        pair = (steps[-1][0], steps[-1][2])  # the last step's two numbers
        tries = [s for s in steps if (s[0], s[2]) == pair]  # each operator tried
        if any(value == target for *_, value, _ in tries[:-1]):
            return True
    return False


def miscopies_the_target(text, target):
    """Whether a missed attempt names a target other than the problem's."""
    named = re.findall(r"not (\d{1,12})\.", text.split("</think>")[0])
    return any(int(n) != target for n in named)


LISTED_STEP = re.compile(  # a worked step, and the list of numbers left after it
    r"(\d{1,6}) [-+*/] (\d{1,6}) = \d{1,6}(?: \(left ([\d, ]+)\))?")


def lists_balance(text, numbers):
    """For each list of numbers left that a trace writes, whether it balances: the
    list before it (the given numbers, at an attempt's first step) less the numbers
    its step used."""
    balanced = []
    for attempt in text.split("</think>")[0].split(". ")[1:]:
        free, first = collections.Counter(numbers), True
        for a, b, listed in LISTED_STEP.findall(attempt):
            if listed:
                left = collections.Counter(map(int, re.findall(r"\d+", listed)))
                used = collections.Counter([int(a), int(b)] if first else [int(b)])
                balanced.append(left + used == free)
                free = left
            first = False
    return balanced


def book_faults(answers):
    """Sampled held-out success and the faults of the sampled answers."""
    sampled = answers.query("mode == 'sampled'")
    problems = [test_rows[i] for i in sampled["prompt_index"]]
    share = lambda test: pd.Series(  # noqa: E731
        [test(t, p["target"]) for t, p in zip(sampled["completion"], problems)]).mean()
    lists = pd.Series([ok for t, p in zip(sampled["completion"], problems)
                       for ok in lists_balance(t, p["numbers"])], dtype=float)
    by_size = sampled_by_size(answers)  # success, cut off and repeats, as above
    return pd.Series({
        "success": by_size["all"],
        "wrong numbers": sampled["verdict"].str.startswith("wrong_numbers").mean(),
        "lists that balance": lists.mean(),
        "miscopied target": share(miscopies_the_target),
        "passes a hit": share(passes_a_hit),
        "repeat an attempt": by_size["repeat an attempt"],
        "cut off": by_size["cut off"]})


def rise_by_seed(runs):
    """Each seed's rise from its base to step 100, sampled and greedy (points)."""
    return pd.DataFrame({
        f"seed {i}": {mode: 100 * (held_out_success(r.name, 100, mode)
                                   - held_out_success(r.name, 0, mode))
                      for mode in ("sampled", "greedy")}
        for i, r in enumerate(runs)})


ledger_runs = load_seeds("ch17_ledger")
books = {"spelled": (base384, trained384),  # the answers read above
         "ledger": (judged(ledger_runs[:1], 0)[0], judged(ledger_runs, 100))}
book_table = pd.DataFrame({
    **{f"{name} base": book_faults(base) for name, (base, _) in books.items()},
    **{f"{name}, step 100": sum(map(book_faults, trained)) / len(trained)
       for name, (_, trained) in books.items()}})
print("held-out sampled answers at 384 tokens (step 100: mean of two seeds)")
print(book_table.to_string(float_format=lambda v: f"{v:.3f}", na_rep="-"))

ledger_rise = rise_by_seed(ledger_runs)
print("ledger: rise from the base (points)")
print(ledger_rise.to_string(float_format=lambda v: f"{v:.1f}"))

# %%
# NBVAL_IGNORE_OUTPUT
spelled_384 = by_budget[384].loc["sampled"]
spelled_rise = 100 * (spelled_384["step 100"] - spelled_384["base"])
ledger_end = [held_out_success(r.name, 100) for r in ledger_runs]
ledger_greedy = [held_out_success(r.name, 100, "greedy") for r in ledger_runs]
ledger_budget = json.loads((RUNS / ledger_runs[0].name / "config.json").read_text())[
    "max_completion_length"]
say(f"The ledger base answers {book_table.loc['success', 'ledger base']:.3f} of the "
    f"held-out problems sampled at {ledger_budget} tokens, the spelled base "
    f"{book_table.loc['success', 'spelled base']:.3f}. In "
    f"{book_table.loc['miscopied target', 'ledger base']:.3f} of its sampled answers "
    f"a missed attempt names a target that is not the problem's (spelled: "
    f"{book_table.loc['miscopied target', 'spelled base']:.3f}), and "
    f"{book_table.loc['wrong numbers', 'ledger base']:.3f} answer with the wrong "
    f"numbers (spelled: {book_table.loc['wrong numbers', 'spelled base']:.3f}); "
    f"{book_table.loc['lists that balance', 'ledger base']:.3f} of the lists it "
    f"writes balance, and "
    f"{book_table.loc['lists that balance', 'ledger, step 100']:.3f} of the trained "
    f"policies'. One "
    f"round of GRPO brings it to {mean_range(ledger_end)} sampled, "
    f"{mean_range(ledger_rise.loc['sampled'].tolist(), 1)} points above its base; "
    f"the spelled base's round at the same budget rose "
    f"{mean_range(spelled_rise.tolist(), 1)}.")
greedy_384 = by_budget[384].loc["greedy"]
spelled_greedy_rise = 100 * (greedy_384["step 100"] - greedy_384["base"])
ledger_greedy_rise = ledger_rise.loc["greedy"]
ledger_cut = [held_out_success(ledger_runs[0].name, 0, "greedy", "truncated_rate")] + [
    held_out_success(r.name, 100, "greedy", "truncated_rate") for r in ledger_runs]
ledger_repeats = held_out_success(ledger_runs[0].name, 0, "greedy", "repetition_rate")
say(f"Greedy, the ledger base answers "
    f"{held_out_success(ledger_runs[0].name, 0, 'greedy'):.3f} and the trained "
    f"policies {mean_range(ledger_greedy)}, a rise of "
    f"{mean_range(ledger_greedy_rise.tolist(), 1)} points, "
    f"{'more' if ledger_greedy_rise.mean() > spelled_greedy_rise.mean() else 'less'} "
    f"than the spelled base's greedy "
    f"{mean_range(spelled_greedy_rise.tolist(), 1)} at {ledger_budget} tokens. The "
    f"ledger base's greedy score starts near zero because {ledger_cut[0]:.1%} of its "
    f"greedy answers run out of the {ledger_budget} tokens (the evaluation flags "
    f"{ledger_repeats:.1%} of all of them as repetitive), where its samples, which do "
    f"not all follow one likeliest path, are cut off in "
    f"{book_table.loc['cut off', 'ledger base']:.1%}; after the round, "
    f"{mean_range(ledger_cut[1:])} of the greedy answers are cut off.")

# %% [markdown]
# Writing the books down does not keep them. The ledger base writes a wrong list
# nearly as often as a right one, and so do the policies trained from it; its
# answers use the wrong numbers as often as the spelled base's. What the lists do
# change is the rest of the trace. More numbers stand between each attempt and the
# problem's copy, and the base names a wrong target in a missed attempt nearly five
# times as often. Sampled, it starts at about a third of the spelled base's success,
# and one round of GRPO gains about a third as much. Greedy, the base's answers
# nearly all run out of tokens, so its greedy score starts near zero, and the
# round's greedy rise (above) comes with far fewer greedy answers cut off, as any
# greedy gain from that start must. Across the corpora of this chapter, the tiny
# model fails at the same point: keeping track of numbers. A new way to write the
# search does not teach it that; it is the first thing to measure on a larger
# model.

# %% [markdown]
# ## A reward against repeats
#
# At both budgets GRPO made answers that write an attempt twice about three times as
# common, and nothing in the reward charges for a repeat. `countdown_repeat_penalty`
# does. It reads each attempt of the reasoning as the steps it works out (`a op b`,
# in order, whatever results it writes) and pays minus the share of the attempts that
# repeat an earlier one:
#
# $$r_\text{repeat} = -\,\frac{\#\text{attempts} - \#\text{distinct attempts}}
#   {\#\text{attempts}}$$

# %%
show_source(countdown_repeat_penalty, docstring=False)

# %%
opening = "<think> Numbers 1, 13, 14; target 28. "
missed = "13 * 1 = 13, 13 + 14 = 27, not 28. "
hits = "14 + 13 = 27, 27 + 1 = 28. </think> <answer> (14 + 13) + 1 </answer>"
for trace in (opening + missed + hits, opening + missed + missed + hits):
    print(f"{countdown_repeat_penalty([trace])[0]:+.3f}  ... {trace[len(opening):]}")

# %% [markdown]
# The round below adds it at weight 0.5 to the worked-answer reward, so a right
# answer still earns about 1. The penalty also changes which groups train. Dynamic
# sampling keeps a group whose total reward varies; with the penalty nearly every
# group varies, most of them only in how often their answers repeat, and those
# groups would crowd the ones that hold a right answer out of the batch. The
# setting `dynamic_sampling_metric` names the reward that must vary (verl's
# `algorithm.filter_groups.metric`). Here it is the worked-answer reward, so the
# round keeps the groups the spelled round kept, and within them an answer that
# repeats earns less than one that does not, right or wrong. Everything else is the
# spelled base's first round at 256 tokens, two seeds on a 2-core CPU:

# %%
# NBVAL_IGNORE_OUTPUT
repeat_runs = load_seeds("ch17_spelled_repeats")
repeat_config = json.loads((RUNS / repeat_runs[0].name / "config.json").read_text())
for key in ("reward_funcs", "reward_weights", "dynamic_sampling_metric"):
    print(f"{key}: {repeat_config[key]}")
repeat_sizes = pd.DataFrame({
    "base": sampled_by_size(base_answers["spelled"]),
    "spelled, step 100": mean_by_size(trained_answers["spelled"]),
    "penalty, step 100": mean_by_size(judged(repeat_runs, 100))})
print("held-out sampled success by problem size, answers cut off and answers that "
      "repeat an attempt (step 100: mean of two seeds)")
print(repeat_sizes.to_string(float_format=lambda v: f"{v:.3f}"))
repeat_rise = pd.concat({"spelled": rise_by_seed(spelled_runs),
                         "penalty": rise_by_seed(repeat_runs)}, axis=1)
print("rise from the base after one round (points)")
print(repeat_rise.to_string(float_format=lambda v: f"{v:.1f}"))

# %%
def plot_training_success(ax, arms, title):
    """Each arm's training success (20-step mean), one line per seed; `arms` is a
    sequence of (label, color, runs)."""
    for name, color, runs in arms:
        for i, run in enumerate(runs):
            ax.plot(run.metrics["step"],
                    run.metrics["accuracy"].rolling(20, min_periods=5).mean(),
                    color=color, label=name if i == 0 else None)
    ax.set(xlabel="step", ylabel="training success (20-step mean)", title=title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)


fig, ax = plt.subplots(figsize=(7.3, 3.4))
plot_training_success(ax, (("worked-answer reward", "C0", spelled_runs),
                           ("worked-answer reward + 0.5 x repeat penalty", "C3",
                            repeat_runs)),
                      "The spelled base's first round, with and without the penalty")
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
repeat_end = [held_out_success(r.name, 100) for r in repeat_runs]
penalty_paid = pd.concat([r.metrics["reward/countdown_repeat_penalty"]
                          for r in repeat_runs], axis=1).mean(axis=1)  # [steps]
say(f"With the penalty, one round brings the spelled base to "
    f"{mean_range(repeat_end)} sampled, "
    f"{mean_range(repeat_rise['penalty'].loc['sampled'].tolist(), 1)} points above "
    f"it; without it, "
    f"{mean_range(repeat_rise['spelled'].loc['sampled'].tolist(), 1)}. Greedy, "
    f"{mean_range(repeat_rise['penalty'].loc['greedy'].tolist(), 1)} points against "
    f"{mean_range(repeat_rise['spelled'].loc['greedy'].tolist(), 1)}. Answers that "
    f"write an attempt twice, word for word: "
    f"{repeat_sizes.loc['repeat an attempt', 'base']:.3f} of the base's, "
    f"{repeat_sizes.loc['repeat an attempt', 'spelled, step 100']:.3f} after the "
    f"round without the penalty and "
    f"{repeat_sizes.loc['repeat an attempt', 'penalty, step 100']:.3f} after the "
    f"round with it. The penalty's mean over the sampled answers went from "
    f"{penalty_paid.head(10).mean():.3f} in the first ten steps to "
    f"{penalty_paid.tail(10).mean():.3f} in the last ten (mean of the two seeds).")

# %% [markdown]
# Charging for a repeat does not stop repeats. In the groups that train, a right
# answer earns about 1 and a wrong one that repeats a third of its attempts about
# -0.17. Yet the penalty the sampled answers pay doubles from the start of the round
# to its end, as the policy writes its likeliest attempts again, and held-out success
# ends within a point or two of the round without it, sampled and greedy, on three
# numbers and on four. The repeats are a symptom of the same weakness as the
# ledger's wrong lists: a model of this size does not keep track of what it has
# already written, and a reward that asks for it does not supply it within one
# round.

# %% [markdown]
# ## A reward for sound work
#
# Every round so far learned from the answers alone: a group in which no answer is
# right carries no signal however its attempts were worked, and dynamic sampling drops
# it (in the repeat penalty's round too, by its `dynamic_sampling_metric`). On four
# numbers that is most groups. `countdown_sound_attempt_reward` pays for the
# work itself. It reads each attempt of the reasoning as the steps it works out and
# calls it sound when every step is right, each step continues from the result
# before it (or retries the step before it with another operator), and each given
# number is brought in exactly once: work that would answer the problem had it
# reached the target. It pays the share of sound attempts,
#
# $$r_\text{sound} = \frac{\#\text{sound attempts}}{\#\text{attempts}},$$
#
# a share rather than a count, so that writing more attempts is not paid for in
# itself.

# %%
show_source(attempt_is_sound, docstring=False)

# %%
opening = "<think> Numbers 7, 5, 15; target 30. "
for trace in (opening + "7 - 5 = 2, 2 + 15 = 17, 2 * 15 = 30. </think>",
              opening + "7 + 5 = 12, 12 + 15 = 27, not 30. 7 - 5 = 2, 2 + 2 = 4, "
                        "not 30. 7 - 5 = 3, 3 * 15 = 45, not 30. "
                        "7 + 5 = 12, 13 + 15 = 28, not 30."):
    paid = countdown_sound_attempt_reward([trace], numbers=[[7, 5, 15]])[0]
    print(f"{paid:.2f}  ... {trace[len(opening):]}")

# %% [markdown]
# The second trace has four attempts and one of them is sound: the second brings in
# a 2 it was not given, the third miscomputes $7 - 5$, the fourth does not continue
# from its own first result. In the chain base's held-out answers, and in those of
# the fourth try's policies, the answers whose every attempt is sound succeed far more
# often than the others:

# %%
# NBVAL_IGNORE_OUTPUT
def sound_shares(samples):
    """The sound-work reward of each sampled answer."""
    sampled = samples.query("mode == 'sampled'")
    numbers = [test_rows[i]["numbers"] for i in sampled["prompt_index"]]
    return pd.Series(countdown_sound_attempt_reward(list(sampled["completion"]),
                                                    numbers=numbers),
                     index=sampled.index)


def soundness_table(samples):
    """By problem size: the mean sound-work reward, the share of answers whose every
    attempt is sound, and the success of those answers and of all of them."""
    sampled = samples.query("mode == 'sampled'")
    share = sound_shares(samples)
    right = sampled["verdict"] == "correct"
    return pd.DataFrame({
        "sound share": share_by_size(share, sampled["size"]),
        "all sound": share_by_size(share == 1.0, sampled["size"]),
        "success": share_by_size(right, sampled["size"]),
        "success, all sound": share_by_size(right[share == 1.0],
                                            sampled["size"][share == 1.0])})


soundness = pd.concat({"chain base": soundness_table(answers["base"]),
                       "fourth try, seed 0": soundness_table(answers["seed 0"])})
print("held-out sampled answers (500 problems x 4)")
print(soundness.to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# Part of that gap is selection: an answer that hits early writes few attempts and
# has few chances to go wrong. But most of the answers fail with attempts that drop,
# reuse or miscopy a number or miscompute a step, and a reward on the answer alone
# pays for none of the attempts that were worked right on a problem nobody solved.
# The round below adds the sound-work reward at weight 0.5 to the worked-answer
# reward, so a right answer earns up to 1.5 and a wrong one at most 0.5.
# Dynamic sampling keeps the groups whose *total* reward varies, which is nearly every
# group now, four-number ones included. Everything else is the chain base's round at
# the learning rate of the aiming section (2e-4), two seeds on a 2-core CPU:

# %%
# NBVAL_IGNORE_OUTPUT
sound_runs = load_seeds("ch17_chain_sound")
sound_config = json.loads((RUNS / sound_runs[0].name / "config.json").read_text())
for key in ("model_name_or_path", "reward_funcs", "reward_weights", "learning_rate",
            "beta", "dynamic_sampling"):
    print(f"{key}: {sound_config[key]}")
sound_sizes = pd.DataFrame({
    "base": sampled_by_size(answers["base"]),
    "fourth try, step 100": mean_by_size([answers["seed 0"], answers["seed 1"]]),
    "sound work, step 100": mean_by_size(judged(sound_runs, 100))})
print("held-out sampled success by problem size, answers cut off and answers that "
      "repeat an attempt (step 100: mean of two seeds)")
print(sound_sizes.to_string(float_format=lambda v: f"{v:.3f}"))
sound_rise = pd.concat({"worked-answer reward, lr 2e-4": rise_by_seed(aimers["chain"]),
                        "+ 0.5 x sound work": rise_by_seed(sound_runs)}, axis=1)
print("rise from the chain base after one round (points)")
print(sound_rise.to_string(float_format=lambda v: f"{v:.1f}"))

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4))
plot_training_success(axes[0], (("worked-answer reward", "C0", aimers["chain"]),
                                ("+ 0.5 x sound work", "C3", sound_runs)),
                      "The chain base's round at lr 2e-4")
for i, run in enumerate(sound_runs):
    axes[1].plot(run.metrics["step"], run.metrics[
        "reward/countdown_sound_attempt_reward"].rolling(20, min_periods=5).mean(),
        color="C3", label=f"seed {i}", ls="-" if i == 0 else "--")
axes[1].set(xlabel="step", ylabel="sound-work reward (20-step mean)",
            title="The share of sound attempts")
axes[1].legend(fontsize=9)
axes[1].grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
def search_table(answer_sets):
    """By problem size, averaged over seeds: success, answers whose every attempt is
    sound, answers with a sound attempt that hits the target, attempts per answer and
    answers cut off by the budget."""
    def one(samples):
        sampled = samples.query("mode == 'sampled'")
        rows = [test_rows[i] for i in sampled["prompt_index"]]
        attempts = [attempts_of(t) for t in sampled["completion"]]
        sound = [[a for a in found if attempt_is_sound(a, r["numbers"])]
                 for found, r in zip(attempts, rows)]
        return pd.DataFrame({
            "success": sampled["verdict"] == "correct",
            "all sound": [bool(a) and len(f) == len(a)
                          for f, a in zip(sound, attempts)],
            "a sound hit": [any(a[-1][3] == r["target"] for a in f)
                            for f, r in zip(sound, rows)],
            "attempts": [len(a) for a in attempts],
            "cut off": sampled["truncated"]}, index=sampled.index).groupby(
                sampled["size"]).mean()
    return sum(map(one, answer_sets)) / len(answer_sets)


searched = pd.concat({
    "chain base": search_table([answers["base"]]),
    "fourth try": search_table([answers["seed 0"], answers["seed 1"]]),
    "sound work": search_table(judged(sound_runs, 100))}).rename(
        index=lambda n: f"{n} numbers" if isinstance(n, int) else n)
print("held-out sampled answers by problem size (trained: mean of two seeds, step 100)")
print(searched.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
sound_end = [held_out_success(r.name, 100) for r in sound_runs]
sound_paid = pd.concat([r.metrics["reward/countdown_sound_attempt_reward"]
                        for r in sound_runs], axis=1).mean(axis=1)  # [steps]
four = searched.xs("4 numbers", level=1)  # [arms, columns]
worked_rise = sound_rise["worked-answer reward, lr 2e-4"]  # [modes, seeds]


def equal_groups(runs):
    """The share of sampled groups with equal rewards, over both seeds' steps."""
    return pd.concat([r.metrics["zero_std_frac"] for r in runs]).mean()


say(f"With the sound-work reward, one round brings the chain base to "
    f"{mean_range(sound_end)} sampled, "
    f"{mean_range(sound_rise['+ 0.5 x sound work'].loc['sampled'].tolist(), 1)} "
    f"points above it; with the worked-answer reward alone at the same learning "
    f"rate, {mean_range(worked_rise.loc['sampled'].tolist(), 1)}. Greedy, "
    f"{mean_range(sound_rise['+ 0.5 x sound work'].loc['greedy'].tolist(), 1)} "
    f"points against "
    f"{mean_range(worked_rise.loc['greedy'].tolist(), 1)}. "
    f"The sound-work reward of the sampled training answers went from "
    f"{sound_paid.head(10).mean():.3f} in the first ten steps to "
    f"{sound_paid.tail(10).mean():.3f} in the last ten (mean of the two seeds). On "
    f"four-number problems, answers whose every attempt is sound went from "
    f"{four.loc['chain base', 'all sound']:.3f} of the base's to "
    f"{four.loc['sound work', 'all sound']:.3f}, and success from "
    f"{four.loc['chain base', 'success']:.3f} to "
    f"{four.loc['sound work', 'success']:.3f} (the fourth try: "
    f"{four.loc['fourth try', 'success']:.3f}); the answers hold "
    f"{four.loc['sound work', 'attempts']:.2f} attempts on average against the base's "
    f"{four.loc['chain base', 'attempts']:.2f}, and "
    f"{four.loc['sound work', 'cut off']:.3f} of them are cut off against "
    f"{four.loc['chain base', 'cut off']:.3f}. Sampled groups whose rewards were all "
    f"equal: {equal_groups(sound_runs):.1%}, against "
    f"{equal_groups(aimers['chain']):.1%} with the worked-answer reward alone.")

# %% [markdown]
# The reward got what it pays for, and success did not follow. Answers whose every
# attempt is sound became several times as common, most of all on four numbers, yet
# the round rose less than the worked-answer reward alone and greedy success fell.
# On four numbers, where the sound answers grew most, success ended where the
# fourth try's did, and so did the share of answers holding a sound attempt that
# hits the target: keeping every number, paid for directly, did not make the search
# find the answer.
#
# The table also shows how the policy raised its share: it wrote fewer attempts and
# was cut off far less often. A share does not pay for more attempts, but a response
# the budget cuts off ends in an unfinished attempt, and an unfinished attempt is not
# sound; so the share pays for stopping before the budget, and stopping early means
# searching less. A dense reward measures a precondition of success; the policy can
# meet it in ways that leave success where it was, and here one of those ways costs
# search. The worked-answer reward, which pays only for the thing itself, did better
# with the same base, budget and schedule.

# %% [markdown]
# ## Learning from its own right answers
#
# GRPO learns from every answer of a group: it pushes the right ones up and the
# wrong ones down. Rejection-sampling fine-tuning learns from the right ones only.
# RAFT {cite}`dong2023raft` samples several answers per prompt, keeps those the
# reward pays and fine-tunes on them, then samples again from the fine-tuned model.
# On math problems and models of a few billion parameters it comes close to GRPO
# {cite}`xiong2025minimalist`. It is R1's rejection sampling (chapter 12) started
# from the base instead of an RL checkpoint. For Countdown, `rejection-sample --task
# countdown` keeps an answer when it is right, its work shows it (every step right,
# the last one reaching the target: the worked-answer reward's rule), it ended, and
# it is no copy of another kept answer.
#
# A round samples 8 answers to each of the first 2,000 training problems, keeps at
# most 4 per problem (the shortest), and fine-tunes the spelled base on them for two
# epochs (`configs/countdown_rft.yaml`). The second round samples the round-1 model
# on the same problems and fine-tunes the base again on both rounds' answers. Two
# seeds ran on a 2-core CPU (`scripts/countdown_rft_cpu.sh`). What each filter
# left:

# %%
# NBVAL_IGNORE_OUTPUT
rft_folders = [f"ch17_rft_seed{s}_cpu" for s in (0, 1)]
rft_yields = pd.concat({
    (f"seed {s}", f"round {k}"): pd.read_csv(
        RUNS / folder / f"round{k}_yields.csv", index_col="stage")["kept"]
    for s, folder in enumerate(rft_folders) for k in (1, 2)}, axis=1)
print(f"answers left after each filter, in order ({', '.join(COUNTDOWN_FILTERS)}), "
      f"and after the cap of 4 per problem")
print(rft_yields.to_string())

# %% [markdown]
# Held-out, the same protocol as every run above, beside the spelled base's GRPO
# rounds:

# %%
# NBVAL_IGNORE_OUTPUT
raft_sizes = pd.DataFrame({
    "base": sampled_by_size(base_answers["spelled"]),
    "RAFT, 1 round": mean_by_size(
        [with_verdicts(read_answers(f, "round1")) for f in rft_folders]),
    "RAFT, 2 rounds": mean_by_size(
        [with_verdicts(read_answers(f, "round2")) for f in rft_folders]),
    "GRPO, 1 round": mean_by_size(trained_answers["spelled"]),
    "GRPO, 2 rounds": mean_by_size(judged(round2, 100))})
print("held-out sampled success by problem size, answers cut off and answers that "
      "repeat an attempt (trained: mean of two seeds)")
print(raft_sizes.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
def rft_seconds(folder):
    """Sampling and fine-tuning seconds of each round, read from the console log."""
    log = (RUNS / folder / "console.log").read_text()
    sampled = [int(s) for s in re.findall(r"sampling and scoring took (\d+) s", log)]
    tuned = [float(s) for s in re.findall(r"trained \d+ steps in ([\d.]+)s", log)]
    return [a + b for a, b in zip(sampled, tuned)]


rft_time = [sum(rft_seconds(f)) for f in rft_folders]
grpo_time = [r.metrics["time_step"].sum() + r2.metrics["time_step"].sum()
             for r, r2 in zip(spelled_runs, round2)]
base_success = held_out_success(spelled_runs[0].name, 0)
raft_end = {k: [held_out_success(f, f"round{k}") for f in rft_folders] for k in (1, 2)}
grpo_end = {1: [held_out_success(r.name, 100) for r in spelled_runs],
            2: [held_out_success(r.name, 100) for r in round2]}
say(f"Sampled held-out success from the base's {base_success:.3f}: one round of "
    f"RAFT {mean_range(raft_end[1])}, two rounds {mean_range(raft_end[2])}; one "
    f"round of GRPO {mean_range(grpo_end[1])}, two rounds {mean_range(grpo_end[2])}. "
    f"RAFT's two rounds took {mean_range(rft_time, 0)} s of sampling and "
    f"fine-tuning per seed, GRPO's two rounds {mean_range(grpo_time, 0)} s of "
    f"steps, each seed with one torch thread beside the other.")

# %% [markdown]
# Learning from its own right answers alone gains less than half of what GRPO gains
# in as many rounds, and in the same place: three numbers. RAFT's two rounds end
# below GRPO's first at both sizes; on four numbers a base that rarely solves a
# problem gives it almost nothing to copy. RAFT took less than half GRPO's
# time, and its answers repeat an attempt less often than GRPO's. What it lacks is
# GRPO's other half: in a group with one right answer, GRPO also pushes the wrong
# answers down, and RAFT never sees them. This is one recipe (8 samples per
# problem, two epochs at one learning rate); with more right answers to copy, as on
# the larger models of {cite}`xiong2025minimalist`, the two come closer.
#
# R1 runs the two in order: fine-tuning on the model's own answers, then RL. One
# GRPO round with the spelled round's settings, from each seed's round-2 RAFT model:

# %%
# NBVAL_IGNORE_OUTPUT
raft_grpo = [held_out_success(f"ch17_rft_grpo_seed{s}_cpu", 100) for s in (0, 1)]


def rise(after):
    """The seeds' mean sampled success minus the spelled base's, in points."""
    return f"{100 * (sum(after) / len(after) - base_success):+.1f}"


say(f"RAFT's two rounds, then one GRPO round: {mean_range(raft_end[2])} -> "
    f"{mean_range(raft_grpo)}, {rise(raft_grpo)} points from the base; one GRPO "
    f"round from the base: {rise(grpo_end[1])}, two: {rise(grpo_end[2])}.")

# %% [markdown]
# The fine-tuned start does not carry GRPO further: RAFT and a GRPO round together
# end about where one GRPO round from the base ends, below two GRPO rounds.

# %% [markdown]
# ## A bigger model
#
# Every try so far trained the tiny model. The book's small model
# (`data/models/small-qwen2-base`) has the same architecture, wider and deeper. The
# spelled corpus was pretrained into it with the tiny base's command (1000 steps of
# 64 traces), and one GRPO round with the spelled round's settings ran from it, two
# seeds side by side. Pretraining the small model needs a GPU, so the pretraining,
# both seeds and their evaluations ran as one script
# (`scripts/countdown_small_gpu.sh`) under one wall-clock limit, which stopped both
# seeds before the end of their 100-step schedule. Held-out, by problem size:

# %%
# NBVAL_IGNORE_OUTPUT
small_runs = load_seeds("ch17_small_spelled", device="h200")
small_steps = tuple(int(r.metrics["step"].max()) for r in small_runs)
small_base = with_verdicts(read_answers(small_runs[0].name, 0))
small_sizes = pd.DataFrame({
    "tiny: base": sampled_by_size(base_answers["spelled"]),
    "tiny: step 100": mean_by_size(trained_answers["spelled"]),
    "small: base": sampled_by_size(small_base),
    "small: last step": mean_by_size([with_verdicts(read_answers(r.name, k))
                                      for r, k in zip(small_runs, small_steps)])})
print("held-out sampled success by problem size, answers cut off and answers that "
      "repeat an attempt (trained: mean of two seeds)")
print(small_sizes.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
small_info, tiny_info = (json.loads((RUNS / f / "base_pretrain_info.json").read_text())
                         for f in (small_runs[0].name, spelled_runs[0].name))
small_end = [held_out_success(r.name, k) for r, k in zip(small_runs, small_steps)]
small_from = held_out_success(small_runs[0].name, 0)
teach = {size: mean_range([r.metrics["zero_std_frac"].mean() for r in runs], 2)
         for size, runs in (("tiny", spelled_runs), ("small", small_runs))}
planned = json.loads((RUNS / small_runs[0].name / "config.json").read_text())[
    "max_steps"]
small_rise = [100 * (e - small_from) for e in small_end]
tiny_rise = 100 * (sum(grpo_end[1]) / len(grpo_end[1]) - base_success)
against_tiny = ("no larger than" if max(small_rise) <= tiny_rise else
                "larger than" if min(small_rise) > tiny_rise else "about as large as")
say(f"On one {small_info['device']}: pretraining {small_info['wall_time_s']:.0f} s "
    f"({small_info['parameters']:,} parameters, "
    f"{small_info['parameters'] / tiny_info['parameters']:.1f} times the tiny "
    f"model's {tiny_info['parameters']:,}), GRPO stopped at steps "
    f"{small_steps[0]} and {small_steps[1]} of {planned} "
    f"({mean_range([r.metrics['time_step'].sum() for r in small_runs], 0)} s of "
    f"steps). Sampled success {small_from:.3f} -> {mean_range(small_end)}, a rise "
    f"of {mean_range(small_rise, 1)} points: "
    f"{against_tiny} the tiny model's full {planned}-step round on a 2-core CPU "
    f"({rise(grpo_end[1])}). Share of groups whose answers all "
    f"score alike, which teach nothing: tiny {teach['tiny']}, small "
    f"{teach['small']}.")

# %% [markdown]
# The bigger model starts far higher: from the same corpus and the same number of
# steps, its base solves more than the tiny model's best try (on four-number
# problems too, which the next section compares with every tiny try). Its
# round was cut short, on another device, so its rise (above) is not a full
# round's, though more of its groups teach. A third of its answers still run out
# of tokens. Size moved the start; what a full round would add to the rise, these
# runs do not show.

# %% [markdown]
# (ch17-glance)=
# ## Every try at a glance
#
# Every run of this chapter that was scored with the held-out protocol, in the order
# the sections tried them: its sampled success before and after (the mean of two
# seeds), the rise in points of each seed and the greedy rise. Each try is measured
# from its own base, so the bases differ between rows:

# %%
# NBVAL_IGNORE_OUTPUT
GLANCE = [  # (try, section, the trained runs, their step[, their base's runs])
    ("chain, lr 1e-4", "A fourth try", "ch17_chain_anchored_seed{}_cpu", 100),
    ("chain, lr 2e-4", "A base that aims", "ch17_chain_anchored_lr2e-4_seed{}_cpu",
     100),
    ("aimed", "A base that aims", "ch17_aimed_seed{}_h100", 100),
    ("lookahead", "A base that aims", "ch17_lookahead_seed{}_h100", 100),
    ("spelled", "Aiming in writing", "ch17_spelled_seed{}_cpu", 100),
    ("spelled, 2 rounds", "Aiming in writing", "ch17_spelled_round2_seed{}_cpu",
     100, "ch17_spelled_seed{}_cpu"),
    ("spelled, 200-step schedule, at 100", "Aiming in writing",
     "ch17_spelled_long_lr2e-4_seed{}_h200", 100),
    ("same at lr 4e-4, at 100", "Aiming in writing",
     "ch17_spelled_long_lr4e-4_seed{}_h200", 100),
    ("spelled, 8 x 16 groups", "Aiming in writing", "ch17_spelled_g16_seed{}_cpu",
     100),
    ("spelled, no KL", "Aiming in writing", "ch17_spelled_nokl_seed{}_cpu", 100),
    ("compact", "More tries in the budget", "ch17_compact_seed{}_cpu", 100),
    ("spelled, 384 tokens", "A longer budget", "ch17_spelled_384_seed{}_cpu", 100),
    ("spelled, 384 tokens, 2 rounds", "A longer budget",
     "ch17_spelled_384_round2_seed{}_cpu", 100, "ch17_spelled_384_seed{}_cpu"),
    ("ledger, 384 tokens", "Keeping the books", "ch17_ledger_seed{}_cpu", 100),
    ("spelled + repeat penalty", "A reward against repeats",
     "ch17_spelled_repeats_seed{}_cpu", 100),
    ("chain + sound-work reward", "A reward for sound work",
     "ch17_chain_sound_seed{}_cpu", 100),
    ("spelled, RAFT round 1", "Its own right answers", "ch17_rft_seed{}_cpu",
     "round1", "ch17_spelled_seed{}_cpu"),
    ("spelled, RAFT round 2", "Its own right answers", "ch17_rft_seed{}_cpu",
     "round2", "ch17_spelled_seed{}_cpu"),
    ("spelled, RAFT 2 rounds + GRPO", "Its own right answers",
     "ch17_rft_grpo_seed{}_cpu", 100, "ch17_spelled_seed{}_cpu"),
    ("small model, spelled (stopped early)", "A bigger model",
     "ch17_small_spelled_seed{}_h200", small_steps),
]


def four_number_success(folder, step):
    """Sampled held-out success on the four-number problems, from stored answers
    (NaN for a run that stored only its scores)."""
    if not (RUNS / folder / f"{eval_name(step)}_answers.jsonl.gz").exists():
        return float("nan")
    answers = read_answers(folder, step).query("mode == 'sampled'")
    sizes = [len(test_rows[i]["numbers"]) for i in answers["prompt_index"]]
    return share_by_size(answers["correct"], sizes)["4 numbers"]


def glance_row(runs, step, base_runs=None):
    """Base and trained success (mean of seeds 0 and 1), each seed's rise, four-number
    success after training and the base's room; the base's evaluation is stored with
    ``base_runs``, by default the runs' own. ``step`` is both seeds' step, or a pair
    with each seed's."""
    base_runs, row = base_runs or runs, {}
    steps = step if isinstance(step, tuple) else (step, step)
    for mode in ("sampled", "greedy"):
        base = [held_out_success(base_runs.format(s), 0, mode) for s in (0, 1)]
        after = [held_out_success(runs.format(s), steps[s], mode) for s in (0, 1)]
        rises = [100 * (a - b) for a, b in zip(after, base)]
        row |= {f"base {mode}": sum(base) / 2, f"after {mode}": sum(after) / 2,
                f"rise {mode}": sum(rises) / 2}
        if mode == "sampled":
            row |= {f"seed {s}": rise for s, rise in enumerate(rises)}
    row["4 numbers after"] = sum(four_number_success(runs.format(s), steps[s])
                                 for s in (0, 1)) / 2
    row["base 1 of 4"] = sum(held_out_success(base_runs.format(s), 0,
                                              column="pass_at_k") for s in (0, 1)) / 2
    row["room"] = 100 * (row["base 1 of 4"] - row["base sampled"])
    return row


glance = pd.DataFrame({label: glance_row(*spec) for label, _, *spec in GLANCE}).T
glance.insert(0, "section", [section for _, section, *_ in GLANCE])
print("held-out success, 500 problems: sampled (4 at temperature 1) and greedy; "
      "mean of two seeds; rise in points")
three, points = "{:.3f}".format, "{:+.1f}".format
print(glance.to_string(
    columns=["section", "base sampled", "after sampled", "rise sampled", "seed 0",
             "seed 1", "rise greedy", "4 numbers after"],
    formatters={"base sampled": three, "after sampled": three, "rise sampled": points,
                "seed 0": points, "seed 1": points, "rise greedy": points,
                "4 numbers after": three}, na_rep="-"))

# %%
fig, ax = plt.subplots(figsize=(7.5, 7.4))
rows = list(range(len(glance)))[::-1]  # the first try at the top
ax.barh(rows, glance["rise sampled"], color="C0", alpha=0.5,
        label="sampled, mean of two seeds")
for s, marker, shift in ((0, "o", 0.15), (1, "s", -0.15)):
    ax.scatter(glance[f"seed {s}"], [r + shift for r in rows], color="C0",
               marker=marker, s=25, edgecolors="black", linewidths=0.6,
               label=f"sampled, seed {s}")
ax.scatter(glance["rise greedy"], rows, color="C3", marker="|", s=150,
           label="greedy, mean of two seeds")
ax.scatter(glance["room"], rows, color="black", marker="x", s=22,
           label="the base's room: 1 of 4 minus sampled")
ax.axvline(0, color="black", lw=0.8)
ax.set_yticks(rows, glance.index, fontsize=9)
ax.set(xlabel="rise in held-out success from the try's own base (points)",
       title="Every try of this chapter")
ax.grid(axis="x", alpha=0.3)
ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.4, -0.1), ncol=2)
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
small_label = "small model, spelled (stopped early)"
tiny_four = glance["4 numbers after"].drop(small_label).dropna()
say(f"Four-number problems after training: at most {tiny_four.max():.3f} for the "
    f"tiny model ({tiny_four.idxmax()}; over the {len(tiny_four)} tries whose answers "
    f"are stored, '-' marking the others); the small model's base already solves "
    f"{success_by_size(small_base)['4 numbers']:.3f} of them, and its round ends at "
    f"{glance.loc[small_label, '4 numbers after']:.3f}.")

# %% [markdown]
# Most tries rise between 8 and 14 points from their base, whatever the corpus, the
# reward, the budget or the schedule. The largest rise comes from two rounds at 256
# tokens; one 200-step schedule read at its step 100, and two rounds at 384 tokens,
# come next. The corpora that ask the tiny model to keep more on the page (compact,
# ledger) start lowest and rise least. Learning from right answers alone and paying
# for sound work start from the spelled and chain bases, as other tries do, and rise
# less than every try but those two; a GRPO round after learning from right answers
# ends where a GRPO round from the base ends. On the chain, aimed and lookahead bases
# greedy success fell or stood still while sampled success rose; from the spelled
# base on, the two rise together.
# None of the tiny model's tries lifts four-number problems far (the table's last
# column). The small model starts higher on them and ends higher, but
# its round, cut short, rose no more than the tiny model's: what a model can keep
# track of sets where it starts, and a round of GRPO on this task added about ten
# points at either size, as far as these rounds go.

# %% [markdown]
# The black crosses mark how much room each base leaves: the share of problems that
# one of its 4 samples solves, minus its sampled success. A policy that answered
# every problem its base solves in 4 tries would rise that far. RL with verifiable
# rewards mostly makes a model give, more often, answers its base already finds in
# several tries {cite}`yue2025limit`. Measured against the room:

# %%
# NBVAL_IGNORE_OUTPUT
past = glance["rise sampled"] - glance["room"]  # [tries] points past the room
small_row = glance.loc["small model, spelled (stopped early)"]
tiny_rooms = glance["room"].drop(small_row.name)
used = glance["rise sampled"] / glance["room"]  # [tries] share of the room used
wide = ["chain, lr 1e-4", "chain, lr 2e-4", "aimed", "lookahead"]
say(f"Each try's sampled success after training minus its base's 1-of-4 success, "
    f"in points: from {past.min():+.1f} to {past.max():+.1f} ({past.idxmax()}), "
    f"below zero in {(past < 0).sum()} of {len(past)} tries. The room of the tiny "
    f"model's bases: {tiny_rooms.min():.1f} to {tiny_rooms.max():.1f} points "
    f"({glance.loc['spelled', 'room']:.1f} for the spelled base, "
    f"{glance.loc[wide, 'room'].min():.1f} to {glance.loc[wide, 'room'].max():.1f} "
    f"for the chain, aimed and lookahead bases, whose rounds used "
    f"{used[wide].min():.0%} to {used[wide].max():.0%} of it); the small model's "
    f"base: {small_row['room']:.1f}, of which its round used "
    f"{used[small_row.name]:.0%}.")
tiny = glance.drop(small_row.name)
best = tiny["after sampled"].idxmax()
low = tiny[tiny["base sampled"] <= tiny.loc[best, "after sampled"] - 0.2]
say(f"The tiny model's highest sampled success after any try is "
    f"{tiny.loc[best, 'after sampled']:.3f} ({best}), so a rise of 20 points would "
    f"need a base at or below {tiny.loc[best, 'after sampled'] - 0.2:.3f} that "
    f"trains as far. The bases that start that low ("
    + ", ".join(f"{name}: {r['base sampled']:.3f}" for name, r in low.iterrows())
    + ") end at " + " and ".join(f"{v:.3f}" for v in low["after sampled"]) + ".")

# %% [markdown]
# No try went past its room. Two rounds from the spelled base came closest, within a
# point of theirs, but that room is 15 points. The tiny bases with about 20 points of
# room, chain, aimed and lookahead, used about half of it in a round. So on the tiny
# model a rise of 20 points would need a policy that answers nearly every problem
# its base solves in 4 tries. The small model's base leaves more room than any tiny
# base, and its round, stopped early, used about a third of it: of all the tries, it
# leaves the most to gain. The same limit read from the top: a rise is at most where
# a policy ends minus where its base starts, and no tiny policy ended high enough
# above a base that low.

# %% [markdown]
# (ch17-reach)=
# ## The room with more samples
#
# Four samples are a short look at what a base can find. Drawing 64 answers for each
# held-out problem from the chain base (`scripts/countdown_reach.py`, the held-out
# protocol with 64 samples instead of 4) shows how the share of problems solved by
# at least one of $k$ samples, the unbiased pass@$k$ of chapter 15, grows with $k$:

# %%
# NBVAL_IGNORE_OUTPUT
reach_dir = RUNS / "ch17_chain_base_reach_cpu"
reach = pd.read_csv(reach_dir / "pass_at_k.csv", index_col="k")  # [k, sizes]
reach_info = json.loads((reach_dir / "info.json").read_text())
chain_start = glance.loc["chain, lr 2e-4", "base sampled"]
shown_k = [k for k in (1, 2, 4, 8, 16, 32, 64) if k in reach.index]
print(f"chain base, {reach_info['problems']} held-out problems x "
      f"{reach_info['samples']} samples: solved by one of k samples")
print(reach.loc[shown_k].to_string(float_format=lambda v: f"{v:.3f}"))

fig, ax = plt.subplots(figsize=(7.3, 3.2))
for column, style in zip(reach.columns, ("o-", "s--", "^--")):
    ax.plot(reach.index, reach[column], style, ms=3, label=column)
ax.axhline(reach.loc[1, "all"] + 0.2, color="0.4", ls=":",
           label="sampled success + 20 points")
ax.set(xscale="log", xticks=shown_k, xticklabels=shown_k,
       xlabel="samples per problem k", ylabel="problems solved by one of k",
       title="How far the chain base reaches")
ax.legend(fontsize=9)
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
goal = reach.loc[1, "all"] + 0.2
needed = reach.index[reach["all"] >= goal]
best_chain = glance.loc[["chain, lr 1e-4", "chain, lr 2e-4"], "after sampled"].max()
say(f"With one sample the chain base solves {reach.loc[1, 'all']:.3f} of the "
    f"problems (the 4-sample protocol's estimate: {chain_start:.3f}); with "
    f"{reach.index.max()} it solves {reach['all'].iloc[-1]:.3f}: "
    f"{reach['3 numbers'].iloc[-1]:.3f} of the three-number problems and "
    f"{reach['4 numbers'].iloc[-1]:.3f} of the four-number ones. A policy 20 points "
    f"above its base must answer {goal:.3f} with one sample, "
    + (f"which the base itself reaches with {needed.min()} samples a problem"
       if len(needed) else f"more than the base finds in {reach.index.max()}")
    + f". Its best round ended at {best_chain:.3f} sampled. The run took "
    f"{reach_info['seconds'] / 60:.0f} minutes on "
    f"{reach_info['environment']['device']}.")

# %% [markdown]
# The room measured with 4 samples is a floor, not a ceiling. The share of problems
# the chain base solves at least once keeps growing with the number of samples, for
# four-number problems too, which one sample almost never solves. A policy 20 points
# above this base would answer with one sample as often as the base finds an answer
# in a handful of tries, far below what it finds in 64. So the base's reach does not
# forbid a rise of 20 points; what the rounds of this chapter lacked is the power to
# turn an answer found in one try of many into the usual one. What would give a
# round that power (another recipe, a larger model, or many more steps: the longest
# schedule was still gaining, slowly, when its deadline stopped it), these runs do
# not show.

# %% [markdown]
# ## What the numbers check blocks
#
# `metrics.csv` logs, at every step, the share of the 128 sampled answers that a
# value-only checker would pay and the share our check pays. The difference is the
# share that reaches the target by dropping, reusing or inventing a number:

# %%
# NBVAL_IGNORE_OUTPUT
per_step = 16 * 8  # prompts x completions per step
all_metrics = {**{f"first base, {k}": m for k, m in metrics.items()},
               **{f"chain base, work checked, {k}": m
                  for k, m in chain_metrics.items()}}
hacks = {k: (m["reward/countdown_value_only_reward"]
             - m["reward/countdown_answer_reward"]) for k, m in all_metrics.items()}
fig, ax = plt.subplots(figsize=(6.5, 4.4), layout="constrained")
for i, (k, h) in enumerate(hacks.items()):
    ax.plot(all_metrics[k].step, h.rolling(10, min_periods=1).mean(), color=f"C{i}",
            label=k)
ax.set(xlabel="step", ylabel="share of sampled answers (10-step mean)",
       title="Right value, wrong numbers")
fig.legend(loc="outside lower center", ncol=2, fontsize=9)
plt.show()
counted = {k: int(round((h * per_step).sum())) for k, h in hacks.items()}
paid = {k: int(round((m["reward/countdown_answer_reward"] * per_step).sum()))
        for k, m in all_metrics.items()}
say(f"Sampled answers ({per_step} per step) that reach the target with the wrong "
    f"numbers, against right answers: " + "; ".join(
        f"{k}, {int(all_metrics[k]['step'].max())} steps: {counted[k]:,} against "
        f"{paid[k]:,}" for k in all_metrics) + ". Our check scores each of them 0 "
    f"for the answer; a value-only checker would have paid each one as much as a "
    f"right answer.")

# %% [markdown]
# The same verdicts for the two base models' own answers on held-out problems,
# greedy and 4 samples at temperature 1 (the samples read above):

# %%
# NBVAL_IGNORE_OUTPUT
shares = pd.concat({k: pd.crosstab(s["verdict"], s["mode"], normalize="columns")
                    for k, s in base_samples.items()}, axis=1)
shares = shares.reindex(list(COUNTDOWN_VERDICTS)).fillna(0.0)
print(shares.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
hit_wrong = shares.loc["wrong_numbers_hits_target"]
say(f"Sampled, {hit_wrong[('first base', 'sampled')]:.2%} of the first base's "
    f"answers and {hit_wrong[('chain base', 'sampled')]:.2%} of the chain base's "
    f"reach the target with the wrong numbers: the designed `drop_number` flaw, and "
    f"miscopied numbers that happen to land.")

# %% [markdown]
# ## Summary
#
# - Countdown's answers are checked completely by a rule: the answer must use each
#   given number exactly once and reach the target. The check runs on a parsed
#   expression in exact fractions and never calls `eval`; GRPO-Zero's checks let
#   a power tower of the problem's own numbers through to `eval`.
# - A model needs to be able to try before RL can help. The first Countdown base,
#   trained on random search traces over expression trees, solved too few problems
#   for GRPO to learn from, under either reward and at either learning rate. Its own
#   samples say why: it miscomputes its steps and rebuilds answers with the wrong
#   numbers.
# - The second corpus keeps the task and the flaws and makes the attempts chains
#   with small values. With the same budget, its base computes and copies better and
#   solves more held-out problems (the model cards above).
# - GRPO lost ground from it three times, each for a reason the logs show:
#   GRPO-Zero's format score taught the policy to give up and answer; the answer
#   reward paid lucky answers after wrong work; with the work checked, the copy of
#   the problem eroded under updates driven by a few groups.
# - The fourth try, anchored to the base by a KL penalty, at a third of the
#   learning rate and on groups that carry a signal only, raised held-out success
#   in both seeds when the answers are sampled, as GRPO trains them and as the R1
#   paper scores its models. Greedy success fell. The rise is small next to what
#   the base's samples allow: one of 4 samples solves far more problems than one.
# - Run without a mistake, the base's own search answers far more held-out
#   problems than the trained policies do. Training cut the share of miscomputed
#   steps, which its reward pays for wherever a group holds a right answer, and
#   gained most on three numbers. On four numbers right answers are too rare for
#   the reward to pay for keeping every number. A longer token budget does not
#   help a model pretrained on shorter traces.
# - Traces whose attempts aim at the target make a search that could answer far
#   more, but the bases pretrained on them aim no better than the chain base: the
#   choice of operator is made in one token, without the work written out. After
#   GRPO they end about where the chain base's policies end, far below what an
#   aimed search allows; their slightly larger rises come from lower base scores,
#   measured on another device, and are comparable to the noise in such scores.
# - Writing the aim out works where a silent aim did not. A base whose traces try
#   the operators of the last step in turn, each worked out, until one hits, aims
#   in most attempts. It starts lower; one round of GRPO gains about as much as on
#   the aimed base, and a second round, with the KL anchor reset to the first round's
#   policy, gains more. One longer schedule keeps pace with the rounds; a doubled
#   learning rate lags, and so does a round without the KL penalty. Four-number problems
#   stay out of reach in 256 tokens, even with twice as many answers per problem.
# - Writing the same search in fewer tokens, without the spaces around operators,
#   lets a flawless search answer more problems in 256 tokens. The base pretrained
#   on it keeps track of its numbers worse and answers fewer problems, and GRPO
#   gains little from it: to this tokenizer the spaces mark what the model copies.
# - A budget of 384 tokens, room for nearly every spelled trace, lets the flawless
#   search answer more. Two rounds of GRPO at that budget end where they ended at
#   256 tokens, four numbers included; the trained policies spend the room
#   repeating attempts they have already written.
# - Writing after each step the numbers it leaves does not help the tiny model keep
#   track of them: it writes nearly half of those lists wrong, miscopies its target
#   more often among the extra numbers, and its sampled success starts lower and
#   gains less from GRPO. Greedy, nearly all of its base's answers run out of
#   tokens, so its greedy score starts near zero and rises as more of them end.
# - A reward that charges for an attempt worked out twice does not stop repeats: in a
#   round from the spelled base they grow as they did without it, and success ends
#   where it ended without it.
# - A reward for sound work, the share of attempts worked right with the given
#   numbers, gets what it pays for: sound answers became several times as common,
#   four numbers included. Success rose less than with the worked-answer reward
#   alone: the policy wrote fewer attempts and was cut off less often, which the
#   share pays for, and on four numbers it found the answer no more often than the
#   fourth try's policies did.
# - Fine-tuning the base on its own right answers (RAFT, two rounds) gains less than
#   half of what two rounds of GRPO gain, in less than half the time: it never
#   learns from the wrong answers of a group. A GRPO round after it ends about where
#   one GRPO round from the base ends.
# - The same recipe on the small model, about 20 times larger, starts far higher,
#   four-number problems included; in its GRPO round, cut short, the rise was no
#   larger. Across every try of this chapter, the rise from the base stays at or below
#   about 14 points, and every trained policy solves fewer problems than its base
#   solves with one of 4 samples. On the tiny bases that room is at most about 21
#   points; the small base leaves 28. With 64 samples the chain base solves most of
#   the held-out problems, so the base's reach is not what stops a rise of 20 points.
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
from grpo_lib.exercises.ch17 import (check_reachable, check_room,  # noqa: E402
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
# 1.0 when the completion's answer block, an expression in whole numbers, `+ - * /`
# and parentheses (anything else, a decimal included, is not an expression),
# evaluates to the target, whatever numbers it uses, else 0.0. It must never raise
# and never hang. Then run it on the answers that
# `data/runs/ch17_chain_worked_seed0_cpu/samples.jsonl` stores (the chain base's run
# with the work checked, seed 0, at its last sampled step; the target follows `->`
# in `question`) and count how many of its payments went to answers with the wrong
# numbers.

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
# it to check that every held-out problem (`data/countdown/test.jsonl`) is
# reachable.

# %%
def my_reachable(numbers, target):
    # your code here
    raise NotImplementedError


try:
    check_reachable(my_reachable)
except NotImplementedError:
    print("Not implemented yet: combine two values into one, recurse, and keep "
          "fractions exact.")

# %% [markdown]
# **17.4 — A base's room.** Write `my_room(answers)`: the points between the share of
# problems that one of a model's samples solves and its sampled success, from a table
# of held-out answers like the ones this chapter reads (columns `mode`,
# `prompt_index`, `correct`). Then apply it to the spelled base's answers,
# `read_answers("ch17_spelled_seed0_cpu", 0)`, and compare with the room marked in
# the figure of {ref}`ch17-glance`.

# %%
def my_room(answers):
    # your code here
    raise NotImplementedError


try:
    check_room(my_room)
except NotImplementedError:
    print("Not implemented yet: keep the sampled rows, then compare the share of "
          "problems with a right sample with the share of right samples.")
