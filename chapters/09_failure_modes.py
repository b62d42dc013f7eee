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
# (ch09)=
# # When GRPO goes wrong
#
# A GRPO run rarely crashes. It fails quietly: the reward goes up while the model gets
# worse, or nothing moves at all, or the completions fill up with the same phrase. The
# only way to notice is to read the right metric. This chapter causes six classic
# failures on purpose, each from a setting that looks harmless, and reads each one off
# the columns the trainer logs (`metrics.csv`, {doc}`07_full_loop`) and the
# evaluation harness ({doc}`05_tiny_base_model`):
#
# 1. a **hackable reward**: the reward climbs, the held-out accuracy falls; then five
#    graders with loopholes, each trained on, and the one loophole RL takes;
# 2. a **large KL coefficient**: the policy is held near the reference model;
# 3. **zero-variance groups**: every completion of a prompt gets the same reward, so
#    there is no advantage and nothing to learn, and DAPO's dynamic sampling as the fix;
# 4. **entropy collapse**: the policy grows certain and its groups alike, four
#    remedies measured, and a bonus that sets its own size;
# 5. **repetition**: completions that repeat a step;
# 6. the **"loss is zero"** puzzle: why the logged loss of GRPO is about 0 while the
#    model learns.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import shutil
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.advantages import group_advantages
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import adaptive_entropy_coef, policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.objective import kl_estimate, sync_reference
from grpo_lib.profiles import profile
from grpo_lib.runs import (compare_seeds, early_mean, final_eval, late_mean, load_seeds,
                           mean_range, seed_table)
from grpo_lib.rewards import (accuracy_reward, answer_anywhere_reward, format_reward,
                              length_bonus_reward, repetition_penalty_reward,
                              signed_accuracy_reward)
from grpo_lib.sampling import generate
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import GRPOTrainer, load_config, task_prompts

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 100)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
MODEL_DIR = REPO / "data" / "models" / "tiny-qwen2-base"
CONFIG = REPO / "configs" / "r1_zero_arithmetic.yaml"

# %% [markdown]
# ## Setup: short runs from one configuration
#
# Every run below starts from the tiny base model with {doc}`chapter 7 <07_full_loop>`'s
# configuration (`configs/r1_zero_arithmetic.yaml`, loaded with `load_config`) and
# changes one or two settings. These are **short runs**, sized for a CPU: in the `cpu`
# profile a few dozen steps of a few prompts each, and a held-out evaluation on a few
# hundred problems after each run. That is enough to see each failure start and to read
# it off the metrics; the `gpu` profile runs the configuration's full length (150 steps
# of 16 prompts, 500 held-out problems). A short run of one seed cannot rank two
# settings a few points apart, so every comparison also comes with two seeds per
# setting, shown as the mean of the seeds and their range: from full-length runs
# stored in `data/runs/`, or, for the cheap runs on easy prompts, from a second seed
# trained here. Sizes come from `P.pick`:

# %%
STEPS = P.pick(smoke=1, cpu=30, gpu=150)
PROMPTS = P.pick(smoke=2, cpu=8, gpu=16)
EASY_STEPS = P.pick(smoke=1, cpu=12, gpu=50)
N_SCREEN = P.pick(smoke=8, cpu=160, gpu=1000)
N_EVAL = P.pick(smoke=10, cpu=200, gpu=500)
runs_dir = tempfile.mkdtemp(prefix="ch09_runs_")
COMMON = [f"model_name_or_path={MODEL_DIR}", f"per_step_prompts={PROMPTS}",
          "eval_on_start=false", "eval_every=0", "save_every=0", "save_final=false",
          "sample_every=0", "progress_bar=false", f"micro_batch_size={PROMPTS * 8}"]
train_set = load_task_split("arithmetic", "train")
test_set = load_task_split("arithmetic", "test")


def train_run(name, overrides, steps=STEPS, rows=train_set, reward_funcs=None):
    """One short run from the base model: (metrics, greedy eval row, samples, model)."""
    config = load_config(CONFIG, COMMON + [f"max_steps={steps}",
                                           f"output_dir={runs_dir}/{name}"] + overrides,
                         reward_funcs=reward_funcs)  # callables replace the names
    model, tok = load_model_and_tokenizer(config.model_name_or_path, device=P.device)
    t0 = time.perf_counter()
    metrics = GRPOTrainer(model, tok, reward_funcs, config, rows).train()
    seconds = time.perf_counter() - t0
    table, samples = evaluate(model, tok, test_set, n=N_EVAL, return_samples=True,
                              max_new_tokens=config.max_completion_length)
    print(f"{name}: {steps} steps in {seconds:.0f} s, held-out strict "
          f"{table.loc['greedy', 'strict_acc']:.3f}")
    return metrics, table.loc["greedy"], samples, model


base_model, tok = load_model_and_tokenizer(MODEL_DIR, device=P.device)
base_eval = evaluate(base_model, tok, test_set, n=N_EVAL, max_new_tokens=96)
base_eval = base_eval.loc["greedy"]
print(f"{STEPS} steps x {PROMPTS} prompts x G=8 per run; {N_EVAL} held-out problems")

# %% [markdown]
# The reference run: the configuration as it is (accuracy + 0.1 · format, $\beta = 0$,
# `loss_type="grpo"`, $\mu = 1$).

# %%
# NBVAL_IGNORE_OUTPUT
ref_metrics, ref_eval, ref_samples, ref_model = train_run("reference", [])

# %% [markdown]
# (ch09-hackable-reward)=
# ## A hackable reward
#
# A reward is a specification, and the policy optimises the specification, not the
# intention. The R1 report chose rule-based rewards for R1-Zero partly for this
# reason: a learned reward model "may suffer from reward hacking"
# {cite}`deepseekai2025r1`. Rules can be hacked too. Here is the simplest hackable
# reward: **format only**. It pays 1 for
# `<think> ... </think> <answer> ... </answer>` whatever the answer is.

# %%
# NBVAL_IGNORE_OUTPUT
hack_metrics, hack_eval, hack_samples, _ = train_run(
    "format_only", ["reward_funcs=[format_reward]", "reward_weights=null"])

# %% [markdown]
# The trainer logs each reward function's mean (`reward/<name>`) and, separately, the
# strict accuracy of the sampled completions (`accuracy`), whether or not accuracy is
# part of the reward. That second column is the alarm: a metric you do *not* optimise.

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), sharey=True,
                         constrained_layout=True)
for ax, (m, title) in zip(axes, [(hack_metrics, "reward: format only"),
                                 (ref_metrics, "reward: accuracy + 0.1 format")]):
    for col, label in [("reward/format_reward", "format reward"),
                       ("accuracy", "strict accuracy")]:
        line, = ax.plot(m["step"], m[col], alpha=0.25)
        ax.plot(m["step"], m[col].rolling(5, min_periods=1).mean(), label=label,
                color=line.get_color())
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
axes[0].set_ylabel("share of sampled completions")
axes[0].legend(fontsize=9, loc="lower left")
plt.show()

# %% [markdown]
# The held-out harness (greedy, strict parsing) settles it:

# %%
# NBVAL_IGNORE_OUTPUT
cols = ["strict_acc", "lenient_acc", "format_rate", "mean_length"]
hack_table = pd.DataFrame({"base model": base_eval[cols],
                           "accuracy + 0.1 format": ref_eval[cols],
                           "format only": hack_eval[cols]}).T
third = max(1, STEPS // 3)
hack_trend = {name: (m["accuracy"].head(third).mean(), m["accuracy"].tail(third).mean())
              for name, m in [("format only", hack_metrics),
                              ("accuracy + 0.1 format", ref_metrics)]}
display(hack_table.round(3))
for name, (early, late) in hack_trend.items():
    print(f"{name}: training accuracy {early:.3f} (first third) -> {late:.3f} "
          f"(last third)")

# %% [markdown]
# And what the hacked model writes: well-formed traces with wrong answers.

# %%
# NBVAL_IGNORE_OUTPUT
formatted_wrong = hack_samples[hack_samples["formatted"] & ~hack_samples["correct"]]
print(f"{len(formatted_wrong)} of {len(hack_samples)} held-out answers are well "
      f"formatted and wrong; three of them:")
for _, row in formatted_wrong.head(3).iterrows():
    print(f"{row['question']} = {row['answer']}\n  {row['completion'][:84]}")

# %% [markdown]
# **Diagnosis.** The signature of a hacked reward is a rewarded metric that improves
# while an unrewarded measure of the real goal does not, or gets worse. Here:

# %%
# NBVAL_IGNORE_OUTPUT
early, late = hack_trend["format only"]
say(f"with the format-only reward the held-out format rate went from "
    f"{base_eval['format_rate']:.3f} (base model) to {hack_eval['format_rate']:.3f}, "
    f"while the held-out strict accuracy went from {base_eval['strict_acc']:.3f} to "
    f"{hack_eval['strict_acc']:.3f} and the strict accuracy of the sampled "
    f"completions, logged but not rewarded, from {early:.3f} in the first third of "
    f"the run to {late:.3f} in the last.")

# %% [markdown]
# Nothing in the reward holds the arithmetic in place, and the updates that make the
# format more likely also shift the digits. {ref}`ch03-reward-hacking` hacked two more
# rule rewards on purpose: a substring test that a list of numbers passes, and a grader
# that evaluates an expression copied from the question; {ref}`ch03-lenient-parsing`
# showed how a lenient answer extraction is gamed. The defence is the same for all of
# them: log every reward function separately, log the task metric even when it is not
# rewarded, and evaluate on held-out data with strict parsing.

# %% [markdown]
# (ch09-format-only-seeds)=
# ### Two seeds, full length
#
# The runs above are one seed each, and short. The repository keeps two full-length
# runs of the format-only reward (chapter 7's configuration, 150 steps of 16 prompts,
# seeds 0 and 1, two overrides: `reward_funcs=[format_reward]` and
# `reward_weights=null`), next to chapter 8's
# pair with accuracy + 0.1 · format; each run's `README.md` holds its command.
# `grpo_lib.runs` reads them back, one row per reward, each cell the mean of the two
# seeds and their range:

# %%
# NBVAL_IGNORE_OUTPUT
hack_pairs = {"accuracy + 0.1 format": load_seeds("ch08_grpo"),
              "format only": load_seeds("ch09_format_only")}
hack_seeds = seed_table(hack_pairs, {
    "held-out strict @150": final_eval,
    "held-out format @150": lambda rs: final_eval(rs, "format_rate"),
    "train acc, first 10": lambda rs: early_mean(rs, "accuracy"),
    "train acc, last 25": lambda rs: late_mean(rs, "accuracy"),
    "train format, last 25": lambda rs: late_mean(rs, "format_rate")})
hack_seeds

# %%
# NBVAL_IGNORE_OUTPUT
fmt_runs, acc_runs = hack_pairs["format only"], hack_pairs["accuracy + 0.1 format"]
base_500 = acc_runs[0].evals.loc[0, "strict_acc"]  # the base model, 500 problems
fmt_acc, acc_acc = final_eval(fmt_runs), final_eval(acc_runs)
say(f"After 150 steps the format-only runs answer {mean_range(fmt_acc)} of the "
    f"held-out problems right, against {base_500:.3f} for the base model and "
    f"{mean_range(acc_acc)} for accuracy + 0.1 format "
    f"({compare_seeds(fmt_acc, acc_acc, 'that pair')}); their held-out format "
    f"rate is {mean_range(final_eval(fmt_runs, 'format_rate'))}. The strict "
    f"accuracy of their sampled completions, logged but not rewarded, is "
    f"{hack_seeds.loc['format only', 'train acc, first 10']} over the first 10 "
    f"steps and {hack_seeds.loc['format only', 'train acc, last 25']} over the "
    f"last 25. Over those last 25 steps "
    f"{mean_range(late_mean(fmt_runs, 'zero_std_frac'), 2)} of the groups have equal "
    f"rewards, and the mean gradient norm of the last 50 steps is "
    f"{mean_range(late_mean(fmt_runs, 'grad_norm', last=50))}, against "
    f"{mean_range(early_mean(fmt_runs, 'grad_norm', first=30))} over the first 30.")

# %% [markdown]
# The full-length runs repeat the short one in both seeds, and they show when the
# damage is done: while the format is being learned, until nearly every group scores
# alike. From then on the gradient all but vanishes, and the accuracy lost on the way
# stays lost, because nothing in the reward would bring it back.

# %% [markdown]
# (ch09-loophole)=
# ## Graders with loopholes, trained on
#
# Format-only is a wrong specification: nothing in it asks for the right answer. A
# subtler bug is a grader that asks for the right answer and pays for something else
# besides. This section trains on five such graders, one of them at two settings.
# Whether RL takes a loophole depends on what the policy already samples and on what
# honest work pays, and the runs land on both sides.
#
# ### A grader that searches the whole text
#
# A common one-liner checks whether the gold answer occurs anywhere in the completion,
# `str(answer) in completion`. Every right answer passes it, so a few spot checks
# look fine. `grpo_lib.rewards` keeps it, for this section only:

# %%
show_source(answer_anywhere_reward, docstring=False)

# %% [markdown]
# Before any training, how often does it pay a wrong answer? Sample the base model on
# training prompts and score the same completions both ways:

# %%
# NBVAL_IGNORE_OUTPUT
screen_rows = [train_set[i] for i in range(P.pick(smoke=4, cpu=64, gpu=256))]
screen = generate(base_model, tok, task_prompts(screen_rows, "chat"),
                  num_generations=8, max_new_tokens=96, seed=0)
screen_gold = [r["answer"] for r in screen_rows for _ in range(8)]
paid = np.array(answer_anywhere_reward(screen.texts, answer=screen_gold))
right = np.array(accuracy_reward(screen.texts, answer=screen_gold))
say(f"Of {len(paid)} sampled completions, the grader pays {paid.mean():.1%} and "
    f"{right.mean():.1%} are right: {(paid > right).mean():.1%} are paid although "
    f"their answer is wrong, because the gold number turns up somewhere else in the "
    f"text.")

# %% [markdown]
# The runs stored in `data/runs/` train chapter 7's configuration with this grader in
# place of `accuracy_reward` (reward = grader + 0.1 · format), 150 steps, two seeds,
# one torch thread each; the commands are in each run's `README.md`. The trainer logs
# the grader's mean, which is rewarded, and the strict accuracy of the same sampled
# completions, which is not. The gap between the two is the share of completions paid
# for a wrong answer. The comparison is the pair of full-length `grpo` runs of chapter
# 8, identical except for the grader (`accuracy_reward`).

# %%
# NBVAL_IGNORE_OUTPUT
RUNS = REPO / "data" / "runs"


def run_metrics(stem):
    """(metrics, held-out evaluations by step) of the stored runs, seeds 0, 1."""
    return [(run.metrics, run.evals) for run in load_seeds(stem)]


loop = dict(enumerate(m for m, _ in run_metrics("ch09_answer_anywhere")))
grpo_runs = run_metrics("ch08_grpo")  # chapter 8's pair, graded by accuracy_reward
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), constrained_layout=True)
for s, m in loop.items():
    smooth = m.rolling(10, min_periods=1).mean()
    line, = axes[0].plot(m["step"], smooth["reward/answer_anywhere_reward"],
                         label=f"grader (rewarded), seed {s}")
    axes[0].plot(m["step"], smooth["accuracy"], ls="--", color=line.get_color(),
                 label=f"strict accuracy, seed {s}")
    axes[1].plot(m["step"], smooth["completion_length"], color=line.get_color(),
                 label=f"grader, seed {s}")
for s, (m, _) in enumerate(grpo_runs):
    axes[1].plot(m["step"], m["completion_length"].rolling(10, min_periods=1).mean(),
                 color="grey", ls=(":", "-.")[s], label=f"accuracy_reward, seed {s}")
axes[0].set(xlabel="step", ylabel="share of sampled completions",
            title="What is paid and what is right")
axes[1].set(xlabel="step", ylabel="tokens", title="Sampled completion length")
for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
loop_rows = []
for name, stem in (("answer anywhere", "ch09_answer_anywhere"),
                   ("accuracy_reward", "ch08_grpo")):
    for s in (0, 1):
        ev = pd.read_csv(RUNS / f"{stem}_seed{s}_cpu" / "eval.csv").set_index("step")
        loop_rows.append({"grader": name, "seed": s,
                     "held-out strict @0": ev.loc[0, "strict_acc"],
                     "held-out strict @150": ev.loc[150, "strict_acc"],
                     "format @150": ev.loc[150, "format_rate"],
                     "length @150": ev.loc[150, "mean_length"],
                     "truncated @150": ev.loc[150, "truncated_rate"]})
loophole_table = pd.DataFrame(loop_rows).set_index(["grader", "seed"])
loophole_table.round(3)

# %% [markdown]
# The run saved its sampled completions every 25 steps (`samples.jsonl`). The
# completions the grader paid although they are wrong, and how many numbers the
# completions write, step by step:

# %%
# NBVAL_IGNORE_OUTPUT
loop_samples = pd.concat([pd.read_json(RUNS / f"ch09_answer_anywhere_seed{s}_cpu"
                                       / "samples.jsonl", lines=True).assign(seed=s)
                          for s in (0, 1)], ignore_index=True)
gold = loop_samples["answer"].astype(str).tolist()
loop_samples["right"] = accuracy_reward(loop_samples["completion"].tolist(),
                                        answer=gold)
loop_samples["paid"] = loop_samples["reward/answer_anywhere_reward"]
loop_samples["paid_but_wrong"] = ((loop_samples["paid"] > 0)
                                  & (loop_samples["right"] == 0))
loop_samples["numbers"] = loop_samples["completion"].str.count(r"\d+")
by_step = loop_samples.groupby("step")[["paid", "right", "paid_but_wrong", "numbers",
                                        "length"]].mean()
print(by_step.round(3).to_string())
hacked = loop_samples[loop_samples["paid_but_wrong"]]
for _, row in hacked[hacked["step"] == hacked["step"].max()].head(3).iterrows():
    print(f"\n{row['question']} = {row['answer']} (seed {row['seed']}):\n  "
          f"{row['completion'][:160]}")

# %%
# NBVAL_IGNORE_OUTPUT
gap = {s: m["reward/answer_anywhere_reward"] - m["accuracy"] for s, m in loop.items()}
lt = loophole_table
say(f"Paid but wrong, as a share of the sampled completions: "
    f"{gap[0].head(10).mean():.1%} and {gap[1].head(10).mean():.1%} (seeds 0 and 1) "
    f"over the first ten steps, "
    f"{gap[0].tail(10).mean():.1%} and {gap[1].tail(10).mean():.1%} over the last ten. "
    f"The completions write about as many numbers at the end as at step "
    f"{by_step.index[0]} ({by_step['numbers'].iloc[0]:.1f} and "
    f"{by_step['numbers'].iloc[-1]:.1f} on average). Held-out strict accuracy after "
    f"150 steps: {lt.loc[('answer anywhere', 0), 'held-out strict @150']:.3f} and "
    f"{lt.loc[('answer anywhere', 1), 'held-out strict @150']:.3f} with this grader, "
    f"{lt.loc[('accuracy_reward', 0), 'held-out strict @150']:.3f} and "
    f"{lt.loc[('accuracy_reward', 1), 'held-out strict @150']:.3f} with "
    f"`accuracy_reward`; held-out format "
    f"{lt.loc[('answer anywhere', 0), 'format @150']:.3f} and "
    f"{lt.loc[('answer anywhere', 1), 'format @150']:.3f} against "
    f"{lt.loc[('accuracy_reward', 0), 'format @150']:.3f} and "
    f"{lt.loc[('accuracy_reward', 1), 'format @150']:.3f}.")

# %% [markdown]
# The policy did not learn the cheap exploit, spraying numbers: it writes as many as
# before. Here the honest answer is paid most of the time, so aiming for the loophole
# gains little. What the grader changes is what gets reinforced. In the examples
# above the gold 2 is found in the `7 * 2`, the `6 * 2` and the 12 of a wrong trace,
# and a trace that reaches the right number but repeats its last step until the
# token limit, with no answer at all, is paid as if it had answered. The grader pays
# each of these in full, so wrong answers are pushed up with the right ones, and the
# runs end with a lower held-out accuracy than the same runs graded by
# `accuracy_reward`.
#
# Two measures reveal it, and neither is the reward. The first is the gap between
# the reward and the strict accuracy of the same samples, logged at every step: it
# is zero for a correct grader. The second is the held-out accuracy under strict
# parsing. The fix is the parsing of {doc}`03_rule_rewards`: read the `<answer>`
# block, compare it as a number, and never search the whole text.

# %% [markdown]
# ### A grader that pays for not answering
#
# A second grader penalises wrong answers, to discourage guessing: +1 for a right
# answer, $w < 0$ for a wrong one. Its author thought of a completion without an
# `<answer>` block as a formatting problem and gave it 0:

# %%
show_source(signed_accuracy_reward, docstring=False)

# %% [markdown]
# Nothing in it asks the policy not to answer. But on a prompt that the policy gets
# right with probability $p$, answering earns $p + (1 - p)\,w$ on average and not
# answering earns 0, so not answering pays more whenever $p < -w / (1 - w)$: below
# 1/2 for $w = -1$, below 2/3 for $w = -2$. The base model already writes some
# completions without the block (the first column of the table below), so the policy
# samples the loophole from the first step. Four runs train chapter 7's configuration
# on this grader alone, $w = -1$ and $w = -2$, seeds 0 and 1, 150 steps each; the
# comparison is chapter 8's `grpo` pair again. The trainer logs the grader's mean
# $\bar r$ and the strict accuracy $a$ of the same samples, and the two give the three
# shares: right $= a$, wrong $= (a - \bar r) / (-w)$, no answer $= 1 -$ right $-$ wrong.

# %%
# NBVAL_IGNORE_OUTPUT
SIGNED = {-1.0: ("ch09_signed", "reward/signed_accuracy_reward"),
          -2.0: ("ch09_signed2", "reward/signed_accuracy_reward(wrong_score=-2.0)")}
signed = {(w, s): pd.read_csv(RUNS / f"{stem}_seed{s}_cpu" / "metrics.csv")
          for w, (stem, _) in SIGNED.items() for s in (0, 1)}


def outcome_shares(m, w):
    """Right, wrong and no-answer shares per step, from the grader's mean."""
    right, mean = m["accuracy"], m[SIGNED[w][1]]
    wrong = (right - mean) / -w
    return pd.DataFrame({"right": right, "wrong": wrong,
                         "no answer": 1 - right - wrong})


fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), sharey=True,
                         constrained_layout=True)
for ax, w in zip(axes, SIGNED):
    for s in (0, 1):
        shares = outcome_shares(signed[w, s], w).rolling(10, min_periods=1).mean()
        steps = signed[w, s]["step"]
        line, = ax.plot(steps, shares["no answer"], label=f"no answer, seed {s}")
        ax.plot(steps, shares["right"], ls="--", color=line.get_color(),
                label=f"right, seed {s}")
    ax.set(title=f"signed grader, w = {w:g}", xlabel="step")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("share of sampled completions")
axes[0].set_ylim(0, 1)
axes[0].legend(fontsize=9)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
signed_rows = []
for w, (stem, _) in SIGNED.items():
    for s in (0, 1):
        shares = outcome_shares(signed[w, s], w)
        ev = pd.read_csv(RUNS / f"{stem}_seed{s}_cpu" / "eval.csv").set_index("step")
        signed_rows.append({
            "w": w, "seed": s,
            "no answer, first 10 steps": shares["no answer"].head(10).mean(),
            "no answer, last 25": shares["no answer"].tail(25).mean(),
            "right, first 10": shares["right"].head(10).mean(),
            "right, last 25": shares["right"].tail(25).mean(),
            "held-out strict @150": ev.loc[150, "strict_acc"]})
signed_table = pd.DataFrame(signed_rows).set_index(["w", "seed"])
display(signed_table.round(3))
fair_acc = [ev.loc[150, "strict_acc"] for _, ev in grpo_runs]


def steps_answering_loses(m, w):
    """Steps where answering paid less than not answering on the average prompt: the
    share right among the answered completions at most the break-even -w/(1-w)
    (the step's mean score at most 0, a missing answer's)."""
    shares = outcome_shares(m, w)
    right_when_answered = shares["right"] / (shares["right"] + shares["wrong"])
    return m["step"][right_when_answered <= -w / (1 - w)].tolist()


losing = {(w, s): steps_answering_loses(signed[w, s], w) for w, s in signed}
say(f"The policy stops not answering: the no-answer share falls from "
    f"{signed_table['no answer, first 10 steps'].min():.2f}-"
    f"{signed_table['no answer, first 10 steps'].max():.2f} over the first ten steps "
    f"to {signed_table['no answer, last 25'].min():.3f}-"
    f"{signed_table['no answer, last 25'].max():.3f} over the last 25, in all four "
    f"runs. Answering paid less than not answering on the average prompt (the "
    f"share right among the answered completions at most the break-even "
    f"$-w/(1-w)$) in " + "; ".join(
        f"{len(v)} of {len(signed[k])} steps"
        + (f" ({', '.join(map(str, v))})" if v else "")
        + f" for $w = {k[0]:g}$, seed {k[1]}" for k, v in losing.items())
    + f". Held-out strict accuracy after 150 steps: "
    + ", ".join(f"{v:.3f}" for v in signed_table["held-out strict @150"])
    + f", against {fair_acc[0]:.3f} and {fair_acc[1]:.3f} with `accuracy_reward`.")

# %% [markdown]
# The loophole was there and the policy did not take it. The answered completions
# were right more often than the break-even from the start: in every step for
# $w = -1$, and for $w = -2$ in all but the few steps listed above. So answering paid
# on the average prompt, and the policy answered more. The completions without an
# answer are mostly a style of the pretraining corpus, a trace that ends in plain text
# or loops until the token limit. To profit, the policy would have to withhold its
# answer on the prompts it gets wrong and only there. A policy that can tell which
# prompts it fails would find this loophole, so score a missing answer at least as
# low as a wrong one, and log the share of completions without an answer.

# %% [markdown]
# (ch09-length-bonus)=
# ### A bonus for thinking longer
#
# Responses grow longer during R1-Zero's training, and longer thinking helps on hard
# problems {cite}`deepseekai2025r1`, so it is tempting to pay for length. A
# well-meant version keeps the task in the reward: accuracy + 0.1 · format + 0.1 ·
# a length bonus.

# %%
show_source(length_bonus_reward, docstring=False)

# %% [markdown]
# A weight of 0.1 looks harmless next to 1 for a right answer, but GRPO standardises
# the rewards inside each group. In a group whose eight answers are all right, the
# bonus is the only difference left between them, and after the division by the
# group's standard deviation it alone sets advantages of the usual size: the longest
# completion is pushed up as hard as a right answer in a mixed group. The more the
# policy gets right, the more groups are all right. Two runs train chapter 7's
# configuration on this reward, seeds 0 and 1, 150 steps, with
# `repetition_penalty_reward` at weight 0 to log the share of repeated word trigrams.

# %%
# NBVAL_IGNORE_OUTPUT
bonus_runs = run_metrics("ch09_length_bonus")
panels = [("completion_length", "length (tokens)"),
          ("repeated", "repeated trigrams (share)"),
          ("truncated_frac", "cut at 96 tokens (share)"),
          ("zero_std_frac", "groups with equal rewards")]
fig, axes = plt.subplots(2, 2, figsize=(7.3, 5.4), sharex=True,
                         constrained_layout=True)
for s, (m, _) in enumerate(bonus_runs):
    m = m.assign(repeated=-m["reward/repetition_penalty_reward"])
    for ax, (col, label) in zip(axes.flat, panels):
        ax.plot(m["step"], m[col].rolling(10, min_periods=1).mean(),
                label=f"length bonus, seed {s}")
        ax.set_title(label, fontsize=10)
for s, (m, _) in enumerate(grpo_runs):
    for ax, (col, _) in zip(axes.flat, panels):
        if col in m:
            ax.plot(m["step"], m[col].rolling(10, min_periods=1).mean(), color="grey",
                    ls=":", label="accuracy_reward" if s == 0 else None)
for ax in axes.flat:
    ax.grid(alpha=0.3)
for ax in axes[1]:
    ax.set_xlabel("step")
axes[0, 0].legend(fontsize=9)
fig.suptitle("Think-longer bonus, two seeds (10-step means)", fontsize=10)
plt.show()

# %% [markdown]
# The runs saved their completions every 25 steps. The most repetitive one of each
# seed at the last saved step:

# %%
# NBVAL_IGNORE_OUTPUT
bonus_samples = pd.concat(
    [pd.read_json(RUNS / f"ch09_length_bonus_seed{s}_cpu" / "samples.jsonl",
                  lines=True).assign(seed=s) for s in (0, 1)], ignore_index=True)
bonus_samples["repeated"] = -bonus_samples["reward/repetition_penalty_reward"]
final = bonus_samples[bonus_samples["step"] == bonus_samples["step"].max()]
for s, group in final.groupby("seed"):
    row = group.sort_values("repeated").iloc[-1]
    print(f"seed {s}, {row['question']} = {row['answer']} ({row['length']} tokens, "
          f"repeated trigrams {row['repeated']:.2f}):\n  {row['completion'][:84]}\n"
          f"  {row['completion'][84:168]}")

# %%
# NBVAL_IGNORE_OUTPUT
def window(m, col, steps):
    """Mean of a column over a window of steps, e.g. range(1, 26)."""
    return m.loc[m["step"].isin(steps), col].mean()


early, late = range(1, 26), range(126, 151)
for s, (m, ev) in enumerate(bonus_runs):
    say(f"Seed {s}: length {window(m, 'completion_length', early):.1f} tokens over "
        f"steps 1-25, {window(m, 'completion_length', late):.1f} over steps 126-150; "
        f"repeated trigrams "
        f"{-window(m, 'reward/repetition_penalty_reward', early):.3f} then "
        f"{-window(m, 'reward/repetition_penalty_reward', late):.3f}; cut at the "
        f"limit {window(m, 'truncated_frac', early):.3f} then "
        f"{window(m, 'truncated_frac', late):.3f}; groups with equal rewards "
        f"{window(m, 'zero_std_frac', early):.2f} then "
        f"{window(m, 'zero_std_frac', late):.2f}; training accuracy "
        f"{window(m, 'accuracy', late):.3f} over the last 25 steps; held-out strict "
        f"accuracy {ev['strict_acc'].iloc[-1]:.3f} at step 150.")

# %% [markdown]
# ### Two more graders, and when RL takes a loophole
#
# Two more graders with a loophole were trained on, two seeds each, with the
# commands in each run's `README.md`:
#
# * **Open-R1's cosine length reward** {cite}`openr1` in place of `accuracy_reward`
#   (`cosine_scaled_reward`, after {cite}`yeo2025longcot`, `max_len=96`): a short
#   right answer earns most, and a wrong answer loses less the longer it is, so when
#   the policy is going to be wrong it is paid to be long. Measure: how many tokens
#   longer the wrong answers of a group are than its right ones (`length_gap_in_group`).
# * **Countdown's value-only checker**, `countdown_value_only_reward` in place of
#   the honest grader on chapter 17's task ({doc}`17_countdown`: write an expression
#   that uses each given number once and equals the target), 50 steps. It pays an
#   expression that reaches the target with the wrong numbers, and on Countdown the
#   tiny model rarely solves a puzzle honestly ({doc}`17_countdown`), so the hack is
#   the cheaper road. Measure: the share paid by the checker but not by the honest
#   grader, which is logged at weight 0.
#
# The table puts the six settings of this section side by side: the measure of each
# exploit over the first 10 steps and the last 25 (mean over the two seeds, range in
# brackets), the share of groups whose rewards are all equal over the last 25 steps,
# and the held-out strict accuracy at the end.

# %%
# NBVAL_IGNORE_OUTPUT
def paid_but_wrong(paid_col, honest_col):
    """Per-step share of completions the grader pays and the honest check does not."""
    return lambda m: m[paid_col] - m[honest_col]


LOOPHOLES = {
    "answer anywhere": ("ch09_answer_anywhere", "paid but wrong",
                        paid_but_wrong("reward/answer_anywhere_reward", "accuracy")),
    "signed, w = -1": ("ch09_signed", "no answer",
                       lambda m: outcome_shares(m, -1.0)["no answer"]),
    "signed, w = -2": ("ch09_signed2", "no answer",
                       lambda m: outcome_shares(m, -2.0)["no answer"]),
    "cosine length reward": ("ch09_cosine", "wrong - right (tokens)",
                             lambda m: m["length_gap_in_group"]),
    "think-longer bonus": ("ch09_length_bonus", "length (tokens)",
                           lambda m: m["completion_length"]),
    "Countdown, value only": ("ch09_countdown_value_only", "paid, wrong numbers",
                              paid_but_wrong("reward/countdown_value_only_reward",
                                             "reward/countdown_answer_reward")),
}
loophole_rows = []
for name, (stem, measure, exploit) in LOOPHOLES.items():
    runs = run_metrics(stem)
    loophole_rows.append({
        "grader": name, "exploit measure": measure,
        "first 10 steps": mean_range([exploit(m).head(10).mean() for m, _ in runs]),
        "last 25 steps": mean_range([exploit(m).tail(25).mean() for m, _ in runs]),
        "dead groups, last 25": mean_range(
            [m["zero_std_frac"].tail(25).mean() for m, _ in runs], 2),
        "held-out strict, end": mean_range([ev["strict_acc"].iloc[-1]
                                            for _, ev in runs])})
pd.DataFrame(loophole_rows).set_index("grader")

# %%
# NBVAL_IGNORE_OUTPUT
fair_gap = [m["length_gap_in_group"] for m, _ in grpo_runs]
say(f"For comparison, in the `accuracy_reward` pair the difference wrong minus right "
    f"within a group is {np.mean([g.head(10).mean() for g in fair_gap]):+.1f} tokens "
    f"over the first 10 steps and {np.mean([g.tail(25).mean() for g in fair_gap]):+.1f}"
    f" over the last 25.")
cd_last = pd.read_json(RUNS / "ch09_countdown_value_only_seed0_cpu" / "samples.jsonl",
                       lines=True)
cd_last = cd_last[cd_last["step"] == cd_last["step"].max()]
print("Countdown, seed 0, the last saved step, three completions:")
for text in cd_last["completion"].head(3):
    print("  " + text[:84])

# %% [markdown]
# In five of the six settings the loophole was not taken. The paid-but-wrong and
# no-answer shares fell; the cosine reward's gap between wrong and right answers
# moved as it moved with `accuracy_reward`; Countdown's hack grew but stayed rare,
# about one answer in a hundred over the first steps and one to three over the last
# (the table above). The think-longer bonus
# was taken by one seed of two, in the second half of its run (the plot of its
# section).
#
# A loophole is taken only if the policy samples the exploit, and only if the exploit
# pays more than honest work in the groups where it is sampled. This policy samples
# little variety: its entropy is small and falls ({ref}`ch09-entropy`), and by the end
# most of its groups have equal rewards (the dead-groups column). In the length-bonus
# runs, where the reward counts tokens, equal rewards mean eight completions of the
# same length. The length bonus pays in every all-right group, and those are most
# groups; not answering, writing the gold somewhere, or being long when wrong pays
# only on the prompts the policy gets wrong, and the policy learned the arithmetic
# first. On Countdown the honest task was out of reach, but the policy did not find
# the hack either: it settled on the format reward, the only reward it collected
# reliably, with short answers built from ones (the same collapse as
# {doc}`17_countdown`). The seed that took the length loophole has the lowest
# dead-groups share of the table: its padded completions differ in length, so its
# groups came back to life.
#
# So a loophole that is not taken at this scale is still a loophole: a policy that
# samples more variety, or trains longer, meets it more often. Log the exploit's
# measure from the first step, next to the reward.

# %% [markdown]
# (ch09-kl)=
# ## KL to a reference with a large $\beta$
#
# DeepSeekMath's objective subtracts
# $\beta\,\mathbb D_{\mathrm{KL}}(\pi_\theta \,\Vert\, \pi_{\mathrm{ref}})$, estimated
# per token with Schulman's $k_3$ {cite}`schulman2020kl`, to keep the policy near the
# model it started from; DeepSeekMath used $\beta = 0.04$ {cite}`shao2024deepseekmath`.
# With $\beta > 0$ the trainer keeps a frozen copy of the base model and logs the mean
# $k_3$ per token as `kl`.
#
# (ch09-kl-balance)=
# ### How far can one token move?
#
# How strongly does the penalty hold the policy? Take one token $o_t$ of one
# completion, on the one pass over its batch ($\mu = 1$), and follow the loss as a
# function of that token's log-probability $x = \log\pi_\theta(o_t)$, everything else
# fixed. (The real update moves weights that every token shares; this is the pull on
# one token.) With the notation of the {ref}`notation` page, the reference log-ratio
# is $\delta = x - \log\pi_{\mathrm{ref}}(o_t)$ and the per-token $k_3$ is
# $e^{-\delta} + \delta - 1$. The policy ratio is $\rho = e^{x - \operatorname{sg}[x]}$,
# with $\operatorname{sg}$ the stop-gradient: its value is 1 and its derivative with
# respect to $x$ is $\rho = 1$, so the clipped surrogate $-\rho\hat A$ contributes
# $-\hat A$ to $\partial\ell/\partial x$ (the clip does not act at $\rho = 1$). The
# per-token loss that `policy_loss` adds up is
#
# $$
# \ell(x) = -\rho\,\hat A + \beta\,\rho^{c}\,k_3(\delta),
# $$
#
# where $c = 0$ is DeepSeekMath's penalty as written (`use_bias_correction_kl=False`)
# and $c = 1$ multiplies $k_3$ by the ratio (`use_bias_correction_kl=True`, the default
# of the trainer and of TRL 1.16; {ref}`ch02-kl-gradient` shows that this turns the
# penalty's gradient into that of the reverse KL). The aggregation only multiplies
# $\ell$ by a positive weight, so it changes no sign. With
# $\partial k_3/\partial x = 1 - e^{-\delta}$ and $\rho = 1$:
#
# $$
# \frac{\partial \ell}{\partial x} = -\hat A + \beta\,(1 - e^{-\delta}) \quad (c = 0),
# \qquad
# \frac{\partial \ell}{\partial x} = -\hat A + \beta\,(k_3 + 1 - e^{-\delta})
#   = -\hat A + \beta\,\delta \quad (c = 1).
# $$
#
# Gradient descent moves $x$ against this derivative: up while it is negative, down
# while it is positive, and a token stops where it vanishes, its balance point
# $\delta^*$. The advantage pushes $x$ with a constant force $\hat A$; the penalty
# pulls back with $\beta(1 - e^{-\delta})$ or $\beta\delta$, which is zero where the
# policy starts ($\delta = 0$) and agrees to first order near it. Far from it the two
# differ:
#
# - **$k_3$ alone ($c = 0$).** The pull $\beta(1 - e^{-\delta})$ is bounded above by
#   $\beta$. For $\hat A \ge \beta$ there is no balance point: the gradient never
#   vanishes and the advantage wins, whatever the distance, until the token's
#   probability is close to 1. For $0 < \hat A < \beta$ the balance is at
#   $\delta^* = -\ln(1 - \hat A/\beta)$, and for $\hat A < 0$ at
#   $\delta^* = -\ln(1 + |\hat A|/\beta)$: pushing a probability *down* meets a pull
#   that grows like $e^{-\delta}$.
# - **$k_3$ times the ratio ($c = 1$).** The pull $\beta\delta$ is linear in both
#   directions, and the balance is at $\delta^* = \hat A/\beta$.
#
# Autograd on `policy_loss` itself checks both. For a single token (with
# $\log\pi_{\mathrm{ref}} = 0$, so that $x = \delta$), find where the gradient
# vanishes by bisection on its sign, and compare with the closed forms:

# %%
# NBVAL_CHECK_OUTPUT
def token_grad(delta, adv, beta, corrected):
    """d loss / d log pi of one on-policy token at reference log-ratio delta."""
    logp = torch.tensor([[delta]], dtype=torch.float64, requires_grad=True)
    one = torch.ones(1, 1, dtype=torch.float64)
    loss, _ = policy_loss(logp, None, torch.tensor([adv], dtype=torch.float64), one,
                          beta=beta, ref_logp=0 * one, use_bias_correction_kl=corrected)
    return torch.autograd.grad(loss, logp)[0].item()


def balance(adv, beta, corrected, lo=-30.0, hi=30.0):
    """The delta in [lo, hi] where the token's gradient vanishes; None if nowhere."""
    if token_grad(lo, adv, beta, corrected) * token_grad(hi, adv, beta, corrected) > 0:
        return None
    for _ in range(90):  # the gradient increases with delta: bisect on its sign
        mid = (lo + hi) / 2
        if token_grad(mid, adv, beta, corrected) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fmt(x):
    return "none" if x is None else f"{x:+.2f}"


print("    A   beta |  k3: autograd  closed form | k3 x ratio: autograd  A / beta")
for adv, beta in [(-1.0, 0.04), (0.02, 0.04), (1.0, 0.04), (-1.0, 0.5), (1.0, 0.5),
                  (-1.0, 5.0), (1.0, 5.0)]:
    closed = -np.log(1 - adv / beta) if adv < beta else None
    print(f"{adv:+5.2f} {beta:6.2f} | {fmt(balance(adv, beta, False)):>13} "
          f"{fmt(closed):>12} | {fmt(balance(adv, beta, True)):>20} "
          f"{adv / beta:+8.2f}")

# %% [markdown]
# Where the closed form says "none" ($\hat A \ge \beta$ for plain $k_3$), the gradient
# keeps its sign at every distance. Over a grid of $\delta$ from $-40$ to $40$ nats,
# its largest value stays below zero, and tends to $-(\hat A - \beta)$:

# %%
# NBVAL_CHECK_OUTPUT
grid = np.linspace(-40, 40, 801)
for adv, beta in [(1.0, 0.04), (0.1, 0.04), (1.0, 0.5)]:
    worst = max(token_grad(d, adv, beta, corrected=False) for d in grid)
    print(f"A = {adv:.2f}, beta = {beta:.2f}: largest dl/dx on the grid "
          f"{worst:+.4f}, -(A - beta) = {-(adv - beta):+.4f}")

# %% [markdown]
# What does this mean at DeepSeekMath's $\beta = 0.04$? Group advantages are of order
# 1 ({ref}`ch08-difficulty`); the cell below takes their range for binary rewards and
# $G = 8$ and reads the balance points off the formulas above:

# %%
# NBVAL_CHECK_OUTPUT
binary = [group_advantages(torch.tensor([1.0] * k + [0.0] * (8 - k)), 8)
          for k in range(1, 8)]
sizes = torch.cat(binary).abs()  # [56] all non-zero advantages of G = 8 groups
d_plain = -np.log(1 + 1.0 / 0.04)  # plain k3, A = -1, beta = 0.04
say(f"With binary rewards and $G = 8$ the non-zero $|\\hat A|$ run from "
    f"{sizes.min():.2f} to {sizes.max():.2f}, all larger than $\\beta = 0.04$. So "
    f"plain $k_3$ puts no limit on *raising* a token's probability, and the "
    f"ratio-weighted penalty balances only at $\\hat A/\\beta$ = "
    f"{sizes.min() / 0.04:.1f} to {sizes.max() / 0.04:.1f} nats. *Lowering* a "
    f"probability is where plain $k_3$ acts: at $\\hat A = -1$ it stops $\\delta$ at "
    f"{d_plain:.2f} nats, a probability divided by {np.exp(-d_plain):.0f}, where "
    f"the ratio-weighted penalty lets it fall to {-1 / 0.04:.0f} nats.")

# %% [markdown]
# Both are far beyond the distance a policy travels in a run this short (the $k_3$ to
# the base model is measured below), so at $\beta = 0.04$ neither form of the penalty
# binds here. With $\beta = 5$, every advantage of a $G = 8$ group is smaller than
# $\beta$, and both forms hold every token within a fraction of a nat of the base
# model (the last two rows of the table above). The runs below use the trainer's
# default (`use_bias_correction_kl=True`) and train the same configuration at several
# $\beta$ (the $\beta = 0$ run is the reference run above):

# %%
# NBVAL_IGNORE_OUTPUT
BETAS = P.pick(smoke=[5.0], cpu=[0.04, 0.5, 5.0], gpu=[0.04, 0.5, 2.0, 5.0, 50.0])
beta_runs = {0.0: (ref_metrics, ref_eval, ref_model)}  # beta -> (metrics, eval, model)
for beta in BETAS:
    metrics, ev, _, model = train_run(f"beta_{beta:g}", [f"beta={beta}"])
    beta_runs[beta] = (metrics, ev, model)

# %% [markdown]
# With $\beta = 0$ the trainer builds no reference model and logs no KL. To compare
# all runs on one scale, measure each trained policy's distance from the base model
# after training: sample completions from the trained policy, score their tokens under
# both models with `sequence_logprobs` ({doc}`04_causal_lm_shift`), and average
# $k_1 = \delta$ and $k_3 = e^{-\delta} + \delta - 1$ ({doc}`02_objective`) over the
# tokens:

# %%
N_KL = P.pick(smoke=4, cpu=64, gpu=256)


@torch.no_grad()
def kl_from_base(model, n=N_KL, seed=0):
    """Per-token k1 and k3 of `model` against the base model, on its own samples."""
    rollout = generate(model, tok, list(test_set[:n]["prompt"]), num_generations=2,
                       max_new_tokens=96, temperature=1.0, seed=seed)
    args = (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
            rollout.completion_mask)
    logp = sequence_logprobs(model, *args)  # [B, C]
    ref_logp = sequence_logprobs(base_model, *args)  # [B, C]
    mask = rollout.completion_mask.float()  # [B, C]

    def mean(x):
        return ((x * mask).sum() / mask.sum()).item()

    return mean(kl_estimate(logp, ref_logp, "k1")), mean(
        kl_estimate(logp, ref_logp, "k3"))


last = max(1, STEPS // 3)  # the last third of each run
gain_0 = ref_eval["strict_acc"] - base_eval["strict_acc"]
kl_rows = {}
for beta, (m, ev, model) in beta_runs.items():
    k1, k3 = kl_from_base(model)
    kl_rows[beta] = {
        "held-out strict": ev["strict_acc"],
        "share of beta=0 gain": ((ev["strict_acc"] - base_eval["strict_acc"]) / gain_0
                                 if gain_0 > 0 else float("nan")),
        "train acc, first third": m["accuracy"].head(last).mean(),
        "train acc, last third": m["accuracy"].tail(last).mean(),
        "logged kl, last third": (m["kl"].tail(last).mean() if beta > 0
                                  else float("nan")),
        "k1 to base": k1, "k3 to base": k3,
        "update s / step": m["time_update"].mean()}
kl_table = pd.DataFrame(kl_rows).T.rename_axis("beta")
kl_table.round(4)

# %%
labels = [f"{b:g}" for b in kl_table.index]
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
axes[0].plot(labels, kl_table["held-out strict"], marker="o", label="trained")
axes[0].axhline(base_eval["strict_acc"], color="gray", ls="--", label="base model")
axes[0].set_title("held-out strict accuracy", fontsize=10)
axes[0].legend(fontsize=9)
axes[1].plot(labels, kl_table["k3 to base"], marker="o", color="C1")
axes[1].set_title("k3 to the base model, per token", fontsize=10)
for ax in axes:
    ax.set_xlabel("beta")
    ax.grid(alpha=0.3)
plt.show()

fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
for i, (beta, (m, _, _)) in enumerate(beta_runs.items()):
    style = dict(label=f"beta = {beta:g}", color=f"C{i}")  # one colour per beta
    if beta > 0:
        axes[0].plot(m["step"], m["kl"].rolling(5, min_periods=1).mean(), **style)
    axes[1].plot(m["step"], m["accuracy"].rolling(5, min_periods=1).mean(), **style)
axes[0].set_title("logged kl (mean k3 per token, 5-step mean)", fontsize=10)
axes[1].set_title("training accuracy (5-step mean)", fontsize=10)
for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].legend(*axes[1].get_legend_handles_labels(), fontsize=9,
               loc="upper left")  # all four betas, where the kl panel is empty
plt.show()

# %% [markdown]
# **Reading it.** The cell below reads the table:

# %%
# NBVAL_IGNORE_OUTPUT
big, small = max(BETAS), min(BETAS)
t = kl_table
acc = t["held-out strict"]
never_gains = bool((acc.diff().dropna() <= 1e-9).all())
t_0, t_kl = t.loc[0.0, "update s / step"], t.loc[BETAS, "update s / step"].mean()
say(f"Held-out strict accuracy: base model {base_eval['strict_acc']:.3f}; " + ", ".join(
    f"$\\beta$ = {b:g}: {a:.3f}" for b, a in acc.items()) + ". "
    + ("It never gains from a larger $\\beta$. " if never_gains else "")
    + f"The largest $\\beta$ = {big:g} keeps {t.loc[big, 'share of beta=0 gain']:.0%} "
    f"of the gain of the $\\beta = 0$ run; its $k_3$ to the base model after training "
    f"is {t.loc[big, 'k3 to base']:.4f} per token against "
    f"{t.loc[0.0, 'k3 to base']:.4f} for $\\beta = 0$ and "
    f"{t.loc[small, 'k3 to base']:.4f} for $\\beta$ = {small:g}; its training "
    f"accuracy goes from {t.loc[big, 'train acc, first third']:.3f} in the first "
    f"third of the run to {t.loc[big, 'train acc, last third']:.3f} in the last, "
    f"against {t.loc[0.0, 'train acc, first third']:.3f} to "
    f"{t.loc[0.0, 'train acc, last third']:.3f} for $\\beta = 0$. Update time per "
    f"step: {t_0:.2f} s for $\\beta = 0$, {t_kl:.2f} s on average for "
    f"$\\beta > 0$ ({t_kl / t_0 - 1:+.0%}).")

# %% [markdown]
# Those are one short run per $\beta$. Two seeds of the full-length configuration
# (150 steps of 16 prompts) at $\beta$ = 0.5 and 5 are stored next to chapter 8's
# pairs at $\beta$ = 0 and 0.04, each with the command in its `README.md`. Each cell
# is the mean of two seeds and their range. The $k_3$ to the base model needs the
# trained weights, which these runs do not keep, so the logged `kl` of the last 25
# steps stands in for it; and the update times are left out, because the $\beta = 0$
# pair was trained on another machine:

# %%
# NBVAL_IGNORE_OUTPUT
BETA_RUNS = {0.0: "ch08_grpo", 0.04: "ch08_beta004", 0.5: "ch09_beta05",
             5.0: "ch09_beta5"}
beta_pairs = {beta: load_seeds(stem) for beta, stem in BETA_RUNS.items()}
beta_seeds = seed_table(beta_pairs, {
    "held-out strict @150": final_eval,
    "held-out format @150": lambda rs: final_eval(rs, "format_rate"),
    "train acc, first 10": lambda rs: early_mean(rs, "accuracy"),
    "train acc, last 25": lambda rs: late_mean(rs, "accuracy"),
    "logged kl, last 25": lambda rs: late_mean(rs, "kl")},
    digits={"logged kl, last 25": 4}).rename_axis("beta")
beta_seeds

# %%
# NBVAL_IGNORE_OUTPUT
acc_beta = {beta: final_eval(rs) for beta, rs in beta_pairs.items()}
base_row = beta_pairs[0.0][0].evals.loc[0]  # step 0: the base model, 500 problems
say(f"The base model: held-out strict {base_row['strict_acc']:.3f}, format "
    f"{base_row['format_rate']:.3f}. "
    "Held-out strict accuracy after 150 steps, two seeds each: " + "; ".join(
    f"$\\beta$ = {b:g}: {mean_range(v)}" + ("" if b == 0 else ", " + compare_seeds(
        v, acc_beta[0.0], "$\\beta = 0$")) for b, v in acc_beta.items()) + ".")

# %% [markdown]
# A small $\beta$ such as DeepSeekMath's 0.04 behaves like $\beta = 0$, in the short
# runs and over 150 steps, where its two seeds overlap those of $\beta = 0$: as
# {ref}`ch09-kl-balance` showed, its balance points lie many nats away, and every
# per-token distance measured here is a small fraction of a nat. The tiny model's
# next-token distribution is sharp, and getting an answer right changes the
# probabilities of a handful of tokens in a trace of fifty. Over 150 steps the mean
# accuracy falls with every larger $\beta$, and from $\beta = 0.5$ on both seeds end
# below both seeds of $\beta = 0$. The largest $\beta$ holds the policy in place: its
# balance points are within a fraction of a nat, and its distance from the base
# model, its training accuracy and its held-out gain all stay small, and after 150
# steps its held-out format rate has barely moved from the base model's. Its logged
# `kl` is the smallest *because* the penalty works, so a small `kl` on its own is no
# evidence that a run is healthy: read it next to the reward and the held-out
# accuracy, and against a $\beta = 0$ run.
#
# The price of any $\beta > 0$ is the reference model: a second copy of the weights in
# memory and a forward pass in every update, which by the usual rule of thumb (a
# backward pass costs two forwards) adds a third to the policy's forward and backward
# pass. The update times printed above show that cost
# even for this tiny model; for a 0.5B model the second copy is also a real share of
# the GPU memory. This is why DAPO {cite}`yu2025dapo` and Dr. GRPO
# {cite}`liu2025drgrpo` drop the KL term for reasoning RL from a base model
# ($\beta = 0$ is TRL's default too): there the policy is *supposed* to move far from
# the base model, and the KL term holds back exactly that.
#
# (ch09-ref-sync)=
# ### A reference that moves
#
# A frozen reference ties the policy to the base model for the whole run, and the
# larger $\beta$, the shorter the leash. Two recipes keep the penalty but move what it
# measures against. TR-DPO {cite}`gorbatovski2024trdpo` mixes the policy into the
# reference every few steps,
# $\theta_{\mathrm{ref}} \leftarrow \alpha\,\theta + (1 - \alpha)\,
# \theta_{\mathrm{ref}}$; ProRL {cite}`liu2025prorl` replaces the reference by the
# current policy from time to time during long runs ($\alpha = 1$, a reset). Either way
# the KL term then holds each stretch of the run near where that stretch began, not
# near the base model. The trainer does this after every `ref_model_sync_steps`-th
# step when `sync_ref_model=True`, with $\alpha$ = `ref_model_mixup_alpha` (TRL's
# names; its defaults are 0.6 and 512 steps). A checkpoint then keeps the reference
# too, so that a resumed run pulls toward the same one:

# %%
show_source(sync_reference, docstring=False)

# %% [markdown]
# The short run at $\beta = 5$ again, now with the reference reset to the policy
# every few steps (the legend gives how many). Right after a reset the reference
# *is* the policy that samples the next batch, so that step's `kl` is exactly 0, and
# it grows again until the next reset:

# %%
# NBVAL_IGNORE_OUTPUT
SYNC_EVERY = P.pick(smoke=1, cpu=10, gpu=25)
reset_metrics, reset_eval, _, reset_model = train_run(
    "beta_5_reset", ["beta=5.0", "sync_ref_model=true", "ref_model_mixup_alpha=1.0",
                     f"ref_model_sync_steps={SYNC_EVERY}"])
reset_k3 = kl_from_base(reset_model)[1]
sync_short = pd.DataFrame({
    "beta 0": kl_table.loc[0.0], "beta 5, frozen": kl_table.loc[5.0],
    f"beta 5, reset every {SYNC_EVERY}": {
        "held-out strict": reset_eval["strict_acc"],
        "train acc, last third": reset_metrics["accuracy"].tail(last).mean(),
        "logged kl, last third": reset_metrics["kl"].tail(last).mean(),
        "k3 to base": reset_k3}}).T
sync_short[["held-out strict", "train acc, last third", "logged kl, last third",
            "k3 to base"]].round(4)

# %%
fig, ax = plt.subplots(figsize=(7.3, 3.0), constrained_layout=True)
ax.plot(beta_runs[5.0][0]["step"], beta_runs[5.0][0]["kl"], label="frozen reference")
ax.plot(reset_metrics["step"], reset_metrics["kl"],
        label=f"reset every {SYNC_EVERY} steps")
for step in range(SYNC_EVERY, int(reset_metrics["step"].max()), SYNC_EVERY):
    ax.axvline(step + 0.5, color="gray", ls=":", lw=0.8)  # after step `step`
ax.set(xlabel="step", ylabel="logged kl (mean k3 per token)",
       title="beta = 5: the KL to the reference, frozen or reset (dotted)")
ax.legend(fontsize=9)
ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
after_reset = reset_metrics[reset_metrics["step"] % SYNC_EVERY == 1]["kl"].max()
say(f"With the reset, the logged `kl` measures the distance from the policy of at most "
    f"{SYNC_EVERY} steps before: it is "
    + ("exactly 0" if after_reset == 0 else f"at most {after_reset:.1e}")
    + f" on the first step after each reset, while the $k_3$ to the base model after "
    f"training is "
    f"{reset_k3:.4f} per token against {kl_table.loc[5.0, 'k3 to base']:.4f} with the "
    f"frozen reference and {kl_table.loc[0.0, 'k3 to base']:.4f} at $\\beta = 0$. "
    f"Held-out strict accuracy: {reset_eval['strict_acc']:.3f} with the reset, "
    f"{kl_table.loc[5.0, 'held-out strict']:.3f} frozen, "
    f"{kl_table.loc[0.0, 'held-out strict']:.3f} at $\\beta = 0$.")

# %% [markdown]
# A short run holds few resets, and one seed. Over the full length of chapter 7's
# configuration (150 steps), two seeds each, with the reference reset every 10 steps
# or mixed with $\alpha = 0.6$ every 10 steps,
# beside the frozen pairs at $\beta$ = 5 and 0 from above
# (`scripts/ch09_ref_sync_runs.sh` made the two new pairs):

# %%
# NBVAL_IGNORE_OUTPUT
SYNC_RUNS = {"beta 0": "ch08_grpo", "beta 5, frozen": "ch09_beta5",
             "beta 5, reset every 10": "ch09_beta5_reset10",
             "beta 5, mix 0.6 every 10": "ch09_beta5_mix10"}
sync_pairs = {name: load_seeds(stem) for name, stem in SYNC_RUNS.items()}
seed_table(sync_pairs, {
    "held-out strict @150": final_eval,
    "held-out format @150": lambda rs: final_eval(rs, "format_rate"),
    "train acc, first 10": lambda rs: early_mean(rs, "accuracy"),
    "train acc, last 25": lambda rs: late_mean(rs, "accuracy"),
    "logged kl, last 25": lambda rs: late_mean(rs, "kl")},
    digits={"logged kl, last 25": 4})

# %%
# NBVAL_IGNORE_OUTPUT
acc_sync = {name: final_eval(rs) for name, rs in sync_pairs.items()}
frozen_5, beta_0 = acc_sync["beta 5, frozen"], acc_sync["beta 0"]
say("Held-out strict accuracy after 150 steps, two seeds each: " + "; ".join(
    f"{name}: {mean_range(v)}" + ("" if name in ("beta 0", "beta 5, frozen") else
                                  f", {compare_seeds(v, frozen_5, 'the frozen one')}"
                                  f" and {compare_seeds(v, beta_0, 'beta 0')}")
    for name, v in acc_sync.items()) + ".")

# %% [markdown]
# A reference that moves frees the run that $\beta = 5$ held in place: with either
# sync, both seeds end far above the frozen pair, though below the $\beta = 0$ pair.
# Their logged `kl` over the last 25 steps is smaller still than the frozen runs',
# while their held-out accuracy has moved much further from the base model's. After a
# sync, `kl` measures the distance from the policy of a few steps before, so it
# starts again near zero; it no longer says how far the run has gone from where it
# began. With a moving reference the KL term is a trust region around recent
# policies, not a leash to the base model; to watch the drift from the base model,
# measure it separately, as `kl_from_base` does above. The reset's two seeds end
# further apart than the mix's; two seeds cannot say whether that is the reset or
# chance.
#
# (ch09-zero-variance)=
# ## Zero-variance groups: all-easy prompts
#
# A group whose $G$ rewards are all equal has advantages of exactly zero
# (`group_advantages` sets them so), and a zero advantage contributes no gradient.
# The trainer logs the share of such groups as `zero_std_frac`. Groups go dead when
# the prompts are too easy (all right) or too hard (all wrong) for the current
# policy. To see it, build a set of prompts that are easy *for this model*: sample 8
# completions at $\tau = 1$ from the base model for each of the first training problems
# and keep the problems where all 8 earn the full reward (right and well formatted).

# %%
# NBVAL_IGNORE_OUTPUT
screen = train_set.select(range(N_SCREEN))
_, screen_samples = evaluate(base_model, tok, screen, n=N_SCREEN, num_samples=8,
                             temperature=1.0, max_new_tokens=96, return_samples=True)
sampled = screen_samples[screen_samples["mode"] == "sampled"]
full_reward = sampled["correct"] & sampled["formatted"]
per_problem = full_reward.groupby(sampled["prompt_index"]).sum()  # right of 8
easy_ids = per_problem.index[per_problem == 8].tolist()
if len(easy_ids) < PROMPTS:  # only in the smoke profile: too few screened problems
    easy_ids = per_problem.sort_values(ascending=False).index[:PROMPTS].tolist()
easy_set = screen.select(easy_ids)
print(f"{len(easy_ids)} of {N_SCREEN} screened problems earned the full reward in "
      f"all 8 samples; distribution of full-reward samples per problem:")
print(per_problem.value_counts().sort_index().to_dict())
print("easy examples:", easy_set[:4]["question"])

# %% [markdown]
# Train on those prompts only, then again with DAPO's dynamic sampling
# {cite}`yu2025dapo` (`dynamic_sampling=True`): after each rollout the trainer drops
# the groups with equal rewards and samples more prompts (up to
# `dynamic_sampling_max_rounds` extra rounds) to refill the batch with groups that
# carry a signal.

# %%
# NBVAL_IGNORE_OUTPUT
easy_runs, dyn_runs = {}, {}  # seed -> (metrics, held-out eval row)
for seed in (0, 1):  # two seeds of each setting
    m, ev, _, _ = train_run(f"easy_seed{seed}", [f"seed={seed}"], steps=EASY_STEPS,
                            rows=easy_set)
    easy_runs[seed] = (m, ev)
    m, ev, _, _ = train_run(f"easy_dynamic_seed{seed}",
                            ["dynamic_sampling=true", f"seed={seed}"],
                            steps=EASY_STEPS, rows=easy_set)
    dyn_runs[seed] = (m, ev)

# %%
# NBVAL_IGNORE_OUTPUT
def live_groups(m, dynamic=False):
    """Groups per step whose rewards differ: the groups that carry a gradient."""
    if dynamic:  # dynamic sampling trains only on groups with a signal
        return m["num_groups"]
    return m["num_groups"] * (1 - m["zero_std_frac"])


# The reference run's first EASY_STEPS steps; its held-out score belongs to its
# STEPS steps, not to this window, so its row leaves that column empty.
zero_runs = [("reference (all prompts)", 0, ref_metrics.head(EASY_STEPS), None,
              False)]
zero_runs += [("easy prompts", seed, m, ev, False)
              for seed, (m, ev) in easy_runs.items()]
zero_runs += [("easy + dynamic sampling", seed, m, ev, True)
              for seed, (m, ev) in dyn_runs.items()]
zero_table = pd.DataFrame([
    {"run": name, "seed": seed,
     "zero_std_frac (all sampled)": m["zero_std_frac"].mean(),
     "groups trained on per step": m["num_groups"].mean(),
     "... with a signal": live_groups(m, dyn).mean(),
     "steps with grad_norm = 0": int((m["grad_norm"].fillna(0) == 0).sum()),
     "mean grad_norm": m["grad_norm"].mean(),
     "generation s / step": m["time_generate"].mean(),
     "held-out strict": np.nan if ev is None else ev["strict_acc"]}
    for name, seed, m, ev, dyn in zero_runs]).set_index(["run", "seed"])
zero_table.round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.3, 4.2), constrained_layout=True)
for i, (name, seed, m, _, dyn) in enumerate(zero_runs):
    style = dict(color=f"C{(i + 1) // 2}", ls="-" if seed == 0 else "--", marker=".",
                 label=f"{name}, seed {seed}")
    axes[0].plot(m["step"], live_groups(m, dyn), **style)
    axes[1].plot(m["step"], m["time_generate"], **style)
axes[0].axhline(PROMPTS, color="gray", ls=":", lw=1.2)
axes[0].set_ylim(0, PROMPTS + 0.5)
axes[0].set_title("groups with a signal, trained on", fontsize=10)
axes[1].set_title("generation time per step (s)", fontsize=10)
for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, fontsize=9, ncol=2, loc="outside lower center")
plt.show()

# %% [markdown]
# The dotted grey line is the batch, `per_step_prompts` groups, and the dashed lines
# are the second seed. **Reading it**, with each easy setting as the mean of its two
# seeds and their range:

# %%
# NBVAL_IGNORE_OUTPUT
z = zero_table
ref_row = z.loc["reference (all prompts)"].iloc[0]
easy, dyn = z.loc["easy prompts"], z.loc["easy + dynamic sampling"]
gen_ratio = (dyn["generation s / step"] / easy["generation s / step"]).tolist()
say(f"On the easy prompts a share {mean_range(easy['zero_std_frac (all sampled)'], 2)} "
    f"of the groups is dead (the reference run: "
    f"{ref_row['zero_std_frac (all sampled)']:.2f}), so of the "
    f"{easy['groups trained on per step'].mean():.0f} groups of a step only "
    f"{mean_range(easy['... with a signal'], 1)} carry a signal on average; the mean "
    f"gradient norm is {mean_range(easy['mean grad_norm'])} against "
    f"{ref_row['mean grad_norm']:.3f}, and the held-out strict accuracy after "
    f"{EASY_STEPS} steps is {mean_range(easy['held-out strict'])} (base model "
    f"{base_eval['strict_acc']:.3f}). Dynamic sampling trains on "
    f"{mean_range(dyn['... with a signal'], 1)} groups with a signal per step, for "
    f"{mean_range(gen_ratio, 1)} times the generation time of the same seed without "
    f"it; its held-out strict accuracy is {mean_range(dyn['held-out strict'])}.")

# %% [markdown]
# The steps on easy prompts cost a full rollout and teach little, because only the few
# groups with a slip in them carry a signal. A `grpo` or `dapo` loss also *dilutes*
# those live groups: the dead completions still count in the denominator. Dynamic
# sampling refills the batch with groups that carry a signal, at the price of the
# extra generation rounds (right panel); when even `dynamic_sampling_max_rounds` extra
# rounds do not find enough live groups, the step trains on fewer (left panel). When
# the prompt pool is nearly all easy, the right fix is upstream, in the data: drop
# prompts the policy always solves (or never solves) and keep the ones at the edge of
# its ability, which is what DAPO's filter approximates online. In a run this short on
# a handful of prompts, neither run moves the held-out accuracy much: the point here
# is the signal per step, not the score.

# %% [markdown]
# (ch09-entropy)=
# ## Entropy collapse
#
# The trainer logs the policy's entropy at every step (`entropy`): the entropy of the
# next-token distribution that the completions were sampled from,
# $-\sum_v \pi_\theta(v \mid \cdot) \log \pi_\theta(v \mid \cdot)$, averaged over
# their tokens. In RL on reasoning tasks it falls fast and keeps falling, and the
# accuracy gains stop when it is spent {cite}`cui2025entropy`. For GRPO the harm is
# concrete: a group of $G$ near-identical completions earns equal rewards, and a
# group with equal rewards has no advantage and no gradient (the previous section).
# Chapter 7's configuration shows both: the two full-length `grpo` runs of
# {doc}`08_loss_variants` (150 steps, seeds 0 and 1), read from their metrics stored
# in `data/runs/`.

# %%
# NBVAL_IGNORE_OUTPUT
for seed, (m, _) in enumerate(grpo_runs):
    say(f"Seed {seed}: entropy {m['entropy'].head(10).mean():.4f} nats per token over "
        f"the first ten steps, {m['entropy'].tail(25).mean():.4f} over the last 25; "
        f"groups with equal rewards (`zero_std_frac`) "
        f"{m['zero_std_frac'].head(10).mean():.2f} then "
        f"{m['zero_std_frac'].tail(25).mean():.2f}.")

# %% [markdown]
# Part of the rise in dead groups is success (eight right answers are equal rewards
# too); the rest is the lost variety. Four remedies are in common use, and each is one
# setting of `GRPOConfig`:
#
# * **Clip-higher** (DAPO {cite}`yu2025dapo`, `epsilon_high=0.28`): PPO's clip caps how
#   far a ratio can rise in one update, $1 + \varepsilon$. For a token of probability
#   0.01 that allows 0.012; for one of 0.9, more than it can use. A higher upper bound
#   lets rare tokens with a positive advantage grow. The clip acts only when the ratio
#   can leave 1, so these runs use $\mu = 2$ and compare with chapter 8's $\mu = 2$
#   pair.
# * **A higher sampling temperature** (`temperature=1.2`): more varied samples per
#   group. The trainer computes the log-probs at the same temperature (as TRL does),
#   so the logged entropy is that of the tempered distribution: compare its
#   `zero_std_frac`, not its entropy.
# * **An entropy bonus** (`entropy_coef=0.02`): the loss becomes
#   $\mathcal{L} - c_H \cdot \bar H$, with $c_H$ the `entropy_coef`, which pushes
#   every token's distribution to spread.
# * **Overlong filtering** (DAPO, `mask_truncated_completions=True`): a completion
#   cut off at the token limit is graded as a failure although it may have been on its
#   way to a right answer; the filter drops its tokens from the loss. It matters only
#   when many completions are cut, so these runs use a 64-token limit, close to the
#   length of chapter 7's answers (the table below gives both), and compare with the
#   same limit unfiltered, for 75 steps.
#
# Each remedy is one change to chapter 7's run, two seeds, 150 steps unless noted, one
# torch thread per run and two runs at a time on the machine that trained them; the
# commands are in each run's `README.md`. The held-out columns are the harness at the
# run's first and last evaluation, at the run's own token limit.

# %%
# NBVAL_IGNORE_OUTPUT
REMEDIES = {"mu = 1 (chapter 7)": "ch08_grpo",
            "entropy bonus 0.02": "ch09_entropy_coef",
            "temperature 1.2": "ch09_temperature12",
            "mu = 2 (chapter 8)": "ch08_mu2",
            "mu = 2, clip-higher 0.28": "ch09_clip_higher_mu2",
            "64-token limit": "ch09_len64",
            "64 tokens, overlong filter": "ch09_len64_mask"}
remedy_runs = {label: run_metrics(stem) for label, stem in REMEDIES.items()}



remedy_rows = []
for label, runs in remedy_runs.items():
    remedy_rows.append({
        "run": label,
        "entropy, last 25": mean_range([m["entropy"].tail(25).mean() for m, _ in runs],
                                       4),
        "zero_std_frac, last 25": mean_range(
            [m["zero_std_frac"].tail(25).mean() for m, _ in runs], 2),
        "clipped high": mean_range([m["clip_frac_high"].mean() for m, _ in runs], 4),
        "truncated": mean_range([m["truncated_frac"].mean() for m, _ in runs]),
        "length, last 25": mean_range(
            [m["completion_length"].tail(25).mean() for m, _ in runs], 1),
        "steps": len(runs[0][0]),
        "held-out strict, start": mean_range([ev["strict_acc"].iloc[0]
                                              for _, ev in runs]),
        "held-out strict, end": mean_range([ev["strict_acc"].iloc[-1]
                                            for _, ev in runs])})
pd.DataFrame(remedy_rows).set_index("run")

# %%
groups = [["mu = 1 (chapter 7)", "entropy bonus 0.02", "temperature 1.2"],
          ["mu = 2 (chapter 8)", "mu = 2, clip-higher 0.28"],
          ["64-token limit", "64 tokens, overlong filter"]]
fig, axes = plt.subplots(3, 2, figsize=(7.3, 7.8), sharex="row", sharey="col",
                         constrained_layout=True)  # the last row's runs: 75 steps
for row, labels in enumerate(groups):
    for label in labels:
        color = None
        for seed, (m, _) in enumerate(remedy_runs[label]):
            line, = axes[row, 0].plot(m["step"], m["entropy"].rolling(10, 1).mean(),
                                      color=color, label=label if seed == 0 else None)
            color = line.get_color()
            axes[row, 1].plot(m["step"], m["zero_std_frac"].rolling(10, 1).mean(),
                              color=color)
    axes[row, 0].legend(fontsize=9, loc="upper right")
axes[0, 0].set_title("entropy (nats/token)", fontsize=10)
axes[0, 1].set_title("zero_std_frac", fontsize=10)
for ax in axes[-1]:
    ax.set_xlabel("step")
for ax in axes.flat:
    ax.grid(alpha=0.3)
fig.suptitle("One remedy at a time, two seeds each (10-step means)", fontsize=10)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
def tail_mean(label, col, n=25):
    """Mean over both seeds of a column's last n steps."""
    return np.mean([m[col].tail(n).mean() for m, _ in remedy_runs[label]])


def end_acc(label):
    """Mean over both seeds of the held-out strict accuracy at the last evaluation."""
    return np.mean([ev["strict_acc"].iloc[-1] for _, ev in remedy_runs[label]])


pairs = [("entropy bonus 0.02", "mu = 1 (chapter 7)"),
         ("temperature 1.2", "mu = 1 (chapter 7)"),
         ("mu = 2, clip-higher 0.28", "mu = 2 (chapter 8)"),
         ("64 tokens, overlong filter", "64-token limit")]
say("Each remedy against its comparison, means of two seeds over the last 25 steps "
    "(entropy; groups with equal rewards) and at the last evaluation (held-out "
    "strict accuracy):\n" + "\n".join(
        f"- {r}: entropy {tail_mean(r, 'entropy'):.4f} against "
        f"{tail_mean(b, 'entropy'):.4f}; equal-reward groups "
        f"{tail_mean(r, 'zero_std_frac'):.2f} against "
        f"{tail_mean(b, 'zero_std_frac'):.2f}; held-out {end_acc(r):.3f} against "
        f"{end_acc(b):.3f}" for r, b in pairs))

# %% [markdown]
# Read with the table and the figure:
#
# * **Temperature 1.2** is the remedy that kept groups alive here: fewer groups with
#   equal rewards over the last 25 steps, at a held-out accuracy within a point of
#   the $\tau = 1$ runs'. (Its logged entropy is that of the tempered distribution, so
#   it is higher by construction.)
# * **The entropy bonus at 0.02** raised the entropy a little and left the share of
#   groups with equal rewards where it was. Its gradient is small on tokens this
#   certain; a larger coefficient is the next experiment, and
#   {ref}`ch09-adaptive-entropy` lets the run choose it.
# * **Clip-higher** acts only on tokens whose ratio reaches
#   $1 + \varepsilon_{\mathrm{high}}$, and
#   with $\mu = 2$ that is a fraction of a percent of the tokens (the `clipped high`
#   column): too few for the higher bound to show in the entropy or in the accuracy
#   beyond the spread of two seeds.
# * **Overlong filtering** at a 64-token limit, where about a fifth or more of the
#   samples are cut off: without the filter a cut-off completion is scored as a wrong
#   one, and its tokens are pushed down with the tokens of real mistakes. With the
#   filter both seeds end with a higher held-out accuracy than both seeds without it,
#   while more of their completions are still cut off: nothing in the loss pushes
#   them to be shorter. Their entropy ends lower than without the filter, so here the
#   filter protected the accuracy, not the entropy.
#
# Entropy collapse is also why so few loopholes were taken in {ref}`ch09-loophole`: a
# policy whose groups are mostly alike rarely samples an exploit, and it cannot
# reinforce one it does not sample.

# %% [markdown]
# (ch09-adaptive-entropy)=
# ### A bonus that sets its own size
#
# A fixed coefficient has to be guessed: 0.02 did little here, and the size that
# helps depends on the model, the task and how far training has gone. Skywork-OR1
# {cite}`he2025skywork` lets the run set it. After every optimizer step the
# coefficient moves by a small step $\Delta c$ toward holding the entropy at a target
# $H_{\mathrm{target}}$: up while the step's mean entropy $\bar H$ is at or under
# the target, down once it is over, within $[c_{\min}, c_{\max}]$. The next step
# applies the bonus only if the last one was at or under the target, so a policy
# above its target trains without it. TRL runs this as `use_adaptive_entropy`, with
# `entropy_target` 0.2 nats, `entropy_coef_delta` 0.005 and the range $[0, 1]$ by
# default; `GRPOConfig` has the same five fields.

# %%
show_source(adaptive_entropy_coef)

# %% [markdown]
# The trainer keeps the coefficient and the last step's entropy between steps, and
# in its checkpoints, so a resumed run picks up the same coefficient. Two arms of
# chapter 7's run, two seeds each, the rest as the runs above
# (`scripts/ch09_adaptive_entropy_runs.sh`): TRL's default target of 0.2 nats, and a
# target of 0.03 nats, about the entropy chapter 7's runs start at.

# %%
# NBVAL_IGNORE_OUTPUT
ADAPTIVE = {"adaptive, target 0.2": "ch09_adaptive_target02",
            "adaptive, target 0.03": "ch09_adaptive_target003"}
adaptive_runs = {label: remedy_runs[label]  # the two runs to compare with, from above
                 for label in ("mu = 1 (chapter 7)", "entropy bonus 0.02")}
adaptive_runs |= {label: run_metrics(stem) for label, stem in ADAPTIVE.items()}
adaptive_rows = []
for label, runs in adaptive_runs.items():
    coef = [m["entropy_coef"] if "entropy_coef" in m else None for m, _ in runs]
    adaptive_rows.append({
        "run": label,
        "entropy, last 25": mean_range([m["entropy"].tail(25).mean() for m, _ in runs],
                                       4),
        "coefficient, mean": (mean_range([c.mean() for c in coef], 3)
                              if coef[0] is not None else "-"),
        "coefficient, last": (mean_range([c.iloc[-1] for c in coef], 3)
                              if coef[0] is not None else "-"),
        "zero_std_frac, last 25": mean_range(
            [m["zero_std_frac"].tail(25).mean() for m, _ in runs], 2),
        "held-out strict, end": mean_range([ev["strict_acc"].iloc[-1]
                                            for _, ev in runs])})
pd.DataFrame(adaptive_rows).set_index("run")

# %%
fig, axes = plt.subplots(1, 3, figsize=(7.3, 3.0), constrained_layout=True)
for label, runs in adaptive_runs.items():
    color = None
    for seed, (m, _) in enumerate(runs):
        smooth = m.rolling(10, 1).mean()
        line, = axes[0].plot(m["step"], smooth["entropy"], color=color,
                             label=label if seed == 0 else None)
        color = line.get_color()
        axes[1].plot(m["step"], smooth["zero_std_frac"], color=color)
        if "entropy_coef" in m:
            axes[2].plot(m["step"], m["entropy_coef"], color=color)
axes[0].set_yscale("log")
axes[0].set_yticks([0.02, 0.05, 0.1, 0.2], ["0.02", "0.05", "0.1", "0.2"])
axes[0].minorticks_off()  # a narrow panel: four labels, no crowded minor ones
for ax, title in zip(axes, ("entropy (nats/token, log scale)", "zero_std_frac",
                            "coefficient $c_H$")):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
fig.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)
fig.suptitle("Adaptive entropy control, two seeds each (10-step means)",
             fontsize=10)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
def per_seed(label, read):
    """``read(metrics, evals)`` for each seed of an arm of ``adaptive_runs``."""
    return [read(m, ev) for m, ev in adaptive_runs[label]]


high, near = "adaptive, target 0.2", "adaptive, target 0.03"
plain = "mu = 1 (chapter 7)"
peak = {label: per_seed(label, lambda m, _: m["entropy"].max())
        for label in (high, near)}
top = {label: per_seed(label, lambda m, _: m["entropy_coef"].max())
       for label in (high, near)}
end = {label: per_seed(label, lambda _, ev: ev["strict_acc"].iloc[-1])
       for label in adaptive_runs}
late = {label: per_seed(label, lambda m, _: m["entropy"].tail(25).mean())
        for label in adaptive_runs}
dead = {label: per_seed(label, lambda m, _: m["zero_std_frac"].tail(25).mean())
        for label in adaptive_runs}
say(f"Target 0.2: the coefficient climbs to {mean_range(top[high], 2)}, the entropy "
    f"peaks at {mean_range(peak[high], 3)} nats, and held-out strict accuracy ends "
    f"at {mean_range(end[high])}, against {mean_range(end[plain])} without a bonus. "
    f"Target 0.03: the coefficient reaches {mean_range(top[near], 2)}, the entropy "
    f"over the last 25 steps is {mean_range(late[near], 4)} against "
    f"{mean_range(late[plain], 4)} without a bonus, groups with equal rewards "
    f"{mean_range(dead[near], 2)} against {mean_range(dead[plain], 2)}, and held-out "
    f"accuracy ends at {mean_range(end[near])}.")

# %% [markdown]
# TRL's default target is a number for large models, whose token entropy starts far
# higher. Chapter 7's policy starts far under it, so the controller sees entropy under
# the target step after step and the coefficient only climbs, 0.005 at a time, until
# the bonus outweighs the reward's pull: then the entropy takes off and the accuracy
# falls with it, in one seed far more than in the other. In that seed the entropy
# passed the target and the coefficient turned down only after the damage was done;
# in the other the coefficient was still climbing at the last step. A target near
# the task's own starting entropy does what the fixed bonus of 0.02 could not: it
# holds the entropy where it started and keeps more groups alive. It did not buy
# accuracy here; both seeds end a little under the runs without a bonus. The target,
# not the coefficient, is now the setting to choose, and it is read from one's own
# run: the entropy logged in its first steps.

# %% [markdown]
# (ch09-repetition)=
# ## Repetition
#
# The think-longer bonus of {ref}`ch09-length-bonus` kept the task in the reward, and
# one seed of two found the padding. Without the task term the push is stronger. A
# reward for length pays for the cheapest way to be long, and this base model knows
# one: its pretraining corpus contains "rambling" traces that repeat a step
# ({doc}`05_tiny_base_model`). The run below pays the same bonus, tokens / 96 capped
# at 1, with the format reward at 0.1 and no accuracy term.
#
# The trainer does not compute a repetition metric itself, but any reward function
# with weight 0 is a free logged metric: `repetition_penalty_reward` (Open-R1's
# n-gram penalty, $-1 \times$ the share of repeated word trigrams) goes in with
# weight 0, so `reward/repetition_penalty_reward` tracks repetition without changing
# the reward. The callables passed to `GRPOTrainer` replace the configuration's
# reward names; `train_run` also hands them to `load_config(..., reward_funcs=...)`,
# which records their names so that the three weights are checked against three
# functions. The penalty:

# %%
show_source(repetition_penalty_reward, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
rep_metrics, rep_eval, rep_samples, _ = train_run(
    "longer_is_better", ["reward_weights=[0.1, 1.0, 0.0]"],
    reward_funcs=[format_reward, length_bonus_reward, repetition_penalty_reward])

# %%
fig, axes = plt.subplots(3, 1, figsize=(7.3, 7.2), sharex=True,
                         constrained_layout=True)
panels = [
    ("completion_length", "mean length (tokens)"),
    ("reward/repetition_penalty_reward", "-(repeated trigrams)"),
    ("truncated_frac", "truncated at 96"),
]
for ax, (col, label) in zip(axes, panels):
    ax.plot(rep_metrics["step"], rep_metrics[col], marker=".", label="longer is better")
    if col in ref_metrics:
        ax.plot(ref_metrics["step"], ref_metrics[col], marker=".", label="reference")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
axes[-1].set_xlabel("step")
axes[0].legend(fontsize=9)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
cols = ["strict_acc", "format_rate", "repetition_rate", "truncated_rate",
        "mean_length"]
rep_table = pd.DataFrame({"base model": base_eval[cols], "reference": ref_eval[cols],
                          "longer is better": rep_eval[cols]}).T
display(rep_table.round(3))
looping = rep_samples.sort_values("repeated_fraction", ascending=False).head(2)
for _, row in looping.iterrows():
    print(f"{row['question']} (repeated trigrams {row['repeated_fraction']:.2f}):\n"
          f"  {row['completion'][:84]}\n  {row['completion'][84:168]}")

# %% [markdown]
# **Diagnosis.**

# %%
# NBVAL_IGNORE_OUTPUT
def thirds(col):
    """Mean of a logged column over the first and the last third of the run."""
    return rep_metrics[col].head(third).mean(), rep_metrics[col].tail(third).mean()


(l0, l1), (t0, t1) = thirds("completion_length"), thirds("truncated_frac")
r0, r1 = (-x for x in thirds("reward/repetition_penalty_reward"))
say(f"From the first third of the run to the last, `completion_length` goes from "
    f"{l0:.1f} to {l1:.1f} tokens, `truncated_frac` from {t0:.2f} to {t1:.2f} and the "
    f"logged share of repeated trigrams from {r0:.2f} to {r1:.2f}. On held-out "
    f"problems the harness finds a `repetition_rate` of "
    f"{rep_eval['repetition_rate']:.2f} and a `truncated_rate` of "
    f"{rep_eval['truncated_rate']:.2f} (base model: "
    f"{base_eval['repetition_rate']:.2f} and {base_eval['truncated_rate']:.2f}), a "
    f"format rate of {rep_eval['format_rate']:.2f} and a strict accuracy of "
    f"{rep_eval['strict_acc']:.2f}.")

# %% [markdown]
# One short run again; two seeds of the full-length configuration with the same
# reward are stored (`ch09_longer_is_better`, 150 steps of 16 prompts, samples
# kept every 25 steps), next to chapter 8's `grpo` pair, which rewards accuracy and
# did not log the trigram share:

# %%
# NBVAL_IGNORE_OUTPUT
rep_pairs = {"accuracy + 0.1 format": load_seeds("ch08_grpo"),
             "longer is better": load_seeds("ch09_longer_is_better")}


def trigrams(rs, rows):
    """Logged share of repeated word trigrams, mean over `rows` (a slice of steps)."""
    col = "reward/repetition_penalty_reward"
    return [-r.metrics[col].iloc[rows].mean() if col in r.metrics else float("nan")
            for r in rs]


rep_seeds = seed_table(rep_pairs, {
    "length, first 10": lambda rs: early_mean(rs, "completion_length"),
    "length, last 25": lambda rs: late_mean(rs, "completion_length"),
    "trigrams, first 10": lambda rs: trigrams(rs, slice(0, 10)),
    "trigrams, last 25": lambda rs: trigrams(rs, slice(-25, None)),
    "truncated, last 25": lambda rs: late_mean(rs, "truncated_frac"),
    "held-out strict @150": final_eval,
    "held-out repetition": lambda rs: final_eval(rs, "repetition_rate"),
    "held-out format": lambda rs: final_eval(rs, "format_rate")},
    digits={"length, first 10": 1, "length, last 25": 1})
rep_seeds.T

# %%
# NBVAL_IGNORE_OUTPUT
longer = rep_pairs["longer is better"]
cut_steps = [int(r.metrics["step"][r.metrics["truncated_frac"].rolling(5).mean() > 0.9]
                 .iloc[0]) for r in longer]  # first step whose 5-step mean passes 0.9
say(f"Over 150 steps, two seeds: the mean length goes from "
    f"{rep_seeds.loc['longer is better', 'length, first 10']} tokens over the first "
    f"10 steps to {rep_seeds.loc['longer is better', 'length, last 25']} over the "
    f"last 25, the share of repeated trigrams from "
    f"{rep_seeds.loc['longer is better', 'trigrams, first 10']} to "
    f"{rep_seeds.loc['longer is better', 'trigrams, last 25']}, and "
    f"{rep_seeds.loc['longer is better', 'truncated, last 25']} of the samples of "
    f"the last 25 steps are cut at the limit. On held-out problems: strict accuracy "
    f"{rep_seeds.loc['longer is better', 'held-out strict @150']}, repetition rate "
    f"{rep_seeds.loc['longer is better', 'held-out repetition']}, format rate "
    f"{rep_seeds.loc['longer is better', 'held-out format']}. The 5-step mean of "
    f"the share cut at the limit passes 0.9 at steps "
    f"{' and '.join(map(str, cut_steps))} (seeds 0 and 1).")

# %% [markdown]
# Both seeds go all the way, and early: within a few dozen steps nearly every sample
# loops until the limit, and the held-out answers lose their tags and their numbers
# together. A reward that pays only for length is maxed out by the first completion
# that reaches the limit, and a loop is the quickest way there.

# %% [markdown]
# The three logged columns move together: the loops run into the 96-token limit, where
# the length reward is maxed out, and the answers are gone with the closing tags that
# never come. Nothing in the reward asked for repetition; it paid for length, and
# repeating a known step is the easiest length this policy can produce. The fixes are on
# the reward side: pay for the task, not for length; if length must be controlled,
# penalise overlong completions (DAPO's soft overlong punishment,
# `soft_overlong_punishment`) or reward brevity among right answers (Kimi 1.5's
# `length_reward`, {cite}`kimi2025k15`, in {ref}`ch03-length-rewards`), and add
# `repetition_penalty_reward` with a negative weight when loops appear.
#
# (ch09-loss-zero)=
# ## Why the logged loss is about 0
#
# Look at the `loss` column of the reference run next to its gradient norm:

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
axes[0].plot(ref_metrics["step"], ref_metrics["loss"], marker=".")
axes[0].set_title("logged loss (grpo, mu = 1)", fontsize=10)
axes[0].set_ylim(-0.01, 0.01)  # round-off around 0, not a curve
axes[1].plot(ref_metrics["step"], ref_metrics["grad_norm"], marker=".", color="C1")
axes[1].set_title("gradient norm (before clipping)", fontsize=10)
for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
print(f"reference run: max |loss| = {ref_metrics['loss'].abs().max():.2e}, "
      f"mean grad_norm = {ref_metrics['grad_norm'].mean():.3f}, held-out strict "
      f"{base_eval['strict_acc']:.3f} -> {ref_eval['strict_acc']:.3f}")

# %% [markdown]
# The loss is zero to float precision in every step, yet the gradient is not, and the
# model learns. With $\mu = 1$ the policy that samples the batch is the policy being
# updated, so every policy ratio is
#
# $$
# \rho_{i,t} = \frac{\pi_\theta(o_{i,t})}{\pi_{\theta_{\mathrm{old}}}(o_{i,t})}
#         = \exp\big(\log\pi_\theta - \operatorname{sg}[\log\pi_\theta]\big) = 1,
# $$
#
# where $\operatorname{sg}$ is stop-gradient (`logp.detach()`). The clip does not act
# at $\rho = 1$, so each token's loss is $-\rho_{i,t} \hat A_i = -\hat A_i$ and, with
# $\beta = 0$, `grpo`'s aggregation gives
#
# $$
# \mathcal L = -\frac1B \sum_i \frac{1}{|o_i|}\sum_t \hat A_i
#   = -\frac1B\sum_i \hat A_i = 0,
# $$
#
# because a group's advantages
# $\hat A_i = (r_i - \bar r)/(\sigma_r + \epsilon_{\mathrm{std}})$ sum to zero. But the
# derivative of $\rho_{i,t}$ is $\rho_{i,t}\,\nabla\log\pi_\theta(o_{i,t}) =
# \nabla\log\pi_\theta(o_{i,t})$, so
#
# $$
# \nabla \mathcal L = -\frac1B\sum_i \frac{\hat A_i}{|o_i|}\sum_t
#   \nabla\log\pi_\theta(o_{i,t}) \neq 0:
# $$
#
# the policy gradient with the group mean as baseline. The value is zero because the
# baseline is subtracted *inside* the sum; the gradient is not, because every
# completion has its own $\nabla\log\pi_\theta$. The same on a tensor:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
rewards = torch.tensor([0.1, 1.1, 1.0, 0.1, 1.1, 0.1, 0.1, 0.1])  # 2 groups of G=4
adv = group_advantages(rewards, 4)  # [8]
lengths = torch.tensor([5, 3, 4, 2, 5, 5, 3, 1])
mask = (torch.arange(6) < lengths[:, None]).float()  # [8, 6]
logp = (-torch.rand(8, 6) * 2).requires_grad_()  # [8, 6] any log-probs
print("advantages:", adv)
print("each group's advantages sum to 0 (to 1e-6):",
      bool(adv.view(2, 4).sum(1).abs().max() < 1e-6))
for lt in ("grpo", "dapo", "reinforce"):
    loss, stats = policy_loss(logp, None, adv, mask, loss_type=lt,
                              max_completion_length=6)
    (grad,) = torch.autograd.grad(loss, logp)
    value = round(loss.item(), 4) + 0.0  # no "-0.0000"
    print(f"{lt:>9}: loss {value:+.4f}   |grad| {grad.norm():.4f}   "
          f"ratio mean {stats['ratio_mean']:.1f}")
dapo_by_hand = -(adv * lengths).sum() / lengths.sum()
reinforce_by_hand = -(adv * (logp.detach() * mask).sum(-1)).mean()
print(f"by hand: dapo -sum_i A_i |o_i| / N = {dapo_by_hand.item():+.4f}, "
      f"reinforce -mean_i A_i log pi(o_i) = {reinforce_by_hand.item():+.4f}")

# %% [markdown]
# Only `grpo` (and `scale_rewards` of any kind with it) logs exactly 0. The token-level
# losses log $-\sum_i \hat A_i|o_i| / N$, the length-weighted advantage, with
# $N = \sum_i |o_i|$ the step's completion tokens (`bnpo`, `dapo`) or $B L_{\max}$
# (`dr_grpo`): not zero, but
# not a measure of progress either (it is negative when the longer completions of the
# step were the better ones). REINFORCE logs
# $-\frac1B\sum_i \hat A_i \log\pi_\theta(o_i)$, which depends on how likely the
# sampled completions were. With $\mu > 1$ the ratios $\rho_{i,t}$
# leave 1 on the later passes and the loss moves a little, by the amount the clipped
# surrogate improved. In no case is the loss a learning curve, as it is in supervised
# fine-tuning: read the reward, the held-out accuracy and the gradient norm instead.
#
# (ch09-summary)=
# ## What to notice
#
# | failure | what you see in the metrics | what to do |
# | --- | --- | --- |
# | hackable reward | `reward/<fn>` rises, `accuracy` (unrewarded) and held-out strict accuracy fall | reward the goal, log the goal separately, evaluate held out |
# | grader with a loophole | `reward/<fn>` above `accuracy` on the same samples (paid but wrong); the exploit's own measure rising (length and repeated trigrams under a length bonus); held-out strict accuracy below a run with a correct grader | parse the answer; score a missing answer as low as a wrong one; log each exploit's measure from step 1, as a reward function at weight 0 |
# | large $\beta$ | `kl` held small while `accuracy` stays flat; a smaller distance to the base and a smaller held-out gain than a $\beta = 0$ run | $\beta = 0$ for reasoning RL from a base model; otherwise pick $\beta$ from the balance points of {ref}`ch09-kl-balance`, or let the reference move ({ref}`ch09-ref-sync`) |
# | zero-variance groups | high `zero_std_frac`, smaller `grad_norm` (zero when every group is dead) | filter the prompts; `dynamic_sampling=True` at a generation cost |
# | entropy collapse | `entropy` falling and `zero_std_frac` rising while the accuracy levels off | a higher sampling temperature; clip-higher where the upper clip binds; an entropy bonus large enough to act, or adaptive control with a target read from the run's first steps (not TRL's 0.2 on a small model); judge each by `zero_std_frac` |
# | repetition | `repetition_rate` of the harness, `completion_length` and `truncated_frac` rising | check what the reward pays for; a repetition penalty |
# | loss ≈ 0 | `loss` ≈ 0 while `grad_norm` > 0 | nothing is wrong: read the reward and held-out metrics |

# %%
shutil.rmtree(runs_dir, ignore_errors=True)  # the runs were only needed for this page

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch09` that
# says what is wrong. As written, the stubs raise `NotImplementedError` and the cell
# prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch09`.
#
# **9.1 — Dead groups.** Write `my_zero_std_frac(rewards, group_size)`: `rewards` is a
# list of $B$ floats, groups of `group_size` contiguous; return the share of groups
# whose rewards are all equal (the trainer's `zero_std_frac`).

# %%
from grpo_lib.exercises.ch09 import check_informative_groups, check_zero_std_frac


def my_zero_std_frac(rewards, group_size):
    # your code here
    raise NotImplementedError


try:
    check_zero_std_frac(my_zero_std_frac)
except NotImplementedError:
    print("Not implemented yet: the groups are contiguous blocks of group_size "
          "rewards; decide for each block whether it is dead, then take the share.")

# %% [markdown]
# **9.2 — Dynamic sampling's filter.** Write `my_informative_groups(rewards,
# group_size)` returning the sorted indices of the groups that dynamic sampling keeps:
# those whose rewards are not all equal.

# %%
def my_informative_groups(rewards, group_size):
    # your code here
    raise NotImplementedError


try:
    check_informative_groups(my_informative_groups)
except NotImplementedError:
    print("Not implemented yet: start from 9.1's per-group test; the answer is a list "
          "of group numbers, not of completion positions.")

# %% [markdown]
# **9.3 — Think.** (a) A run with reward accuracy + 0.1 · format shows `reward`
# rising from 0.6 to 0.7 while the held-out strict accuracy stays flat. Which
# per-function columns tell you whether this is progress or a hack? (b) With
# $\mu = 2$, the logged loss of a `grpo` run is no longer exactly 0 on the second
# pass. What sign do you expect it to have, and why? (c) In
# {ref}`ch09-zero-variance`, why would a batch of all-*hard* prompts (every sample
# wrong) look the same in `zero_std_frac` as all-easy ones, and which other column
# tells the two apart?

# %% [markdown]
# **9.4 — Token entropy.** Write `my_mean_entropy(logits, mask)`: `logits` are
# $[B, T, V]$, `mask` is $[B, T]$ with 1 on completion tokens; return the trainer's
# `entropy` column, $\bar H = \sum_{i,t} m_{i,t} H_{i,t} / \sum_{i,t} m_{i,t}$ with
# $H_{i,t} = -\sum_v p_{i,t,v} \log p_{i,t,v}$, in nats.

# %%
from grpo_lib.exercises.ch09 import check_mean_entropy


def my_mean_entropy(logits, mask):
    # your code here
    raise NotImplementedError


try:
    check_mean_entropy(my_mean_entropy)
except NotImplementedError:
    print("Not implemented yet: torch.log_softmax gives log p without log(0); the "
          "mean runs over completion tokens only.")

# %% [markdown]
# **9.5 — A reference that moves.** Write `my_sync_reference(policy, reference,
# alpha)`: change each parameter of `reference`, in place, to
# $\alpha\,\theta + (1 - \alpha)\,\theta_{\mathrm{ref}}$ ({ref}`ch09-ref-sync`),
# leaving `policy` as it is. Then say why a resumed run must load the reference from
# its checkpoint once the reference has moved.

# %%
from grpo_lib.exercises.ch09 import check_sync_reference


def my_sync_reference(policy, reference, alpha):
    # your code here
    raise NotImplementedError


try:
    check_sync_reference(my_sync_reference)
except NotImplementedError:
    print("Not implemented yet: walk the two models' parameters side by side; "
          "parameters require grad, so change them under torch.no_grad().")

# %% [markdown]
# **9.6 — A bonus that sets its own size.** Write `my_applied_entropy_coefs(entropies,
# target, delta, coef_min, coef_max, coef=0.0)`: `entropies` are the mean token
# entropies of a run's optimizer steps, in order, and `coef` the first coefficient;
# return the coefficient each step applies under adaptive entropy control
# ({ref}`ch09-adaptive-entropy`; the first step has no step before it, so it applies
# no bonus). Then say what TRL's defaults make of a target the
# policy's entropy never reaches.

# %%
from grpo_lib.exercises.ch09 import check_applied_entropy_coefs


def my_applied_entropy_coefs(entropies, target, delta, coef_min, coef_max, coef=0.0):
    # your code here
    raise NotImplementedError


try:
    check_applied_entropy_coefs(my_applied_entropy_coefs)
except NotImplementedError:
    print("Not implemented yet: carry the coefficient and the last step's entropy "
          "from step to step; a step's bonus is fixed before its own entropy is "
          "measured.")
