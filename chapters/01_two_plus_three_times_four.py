# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# (ch01)=
# # What is 2 + 3 * 4?
#
# *A group of answers, rule rewards and advantages, computed by hand and by the
# library.*
#
# Ask a language model "What is 2 + 3 * 4?" and it may answer 14, or it may add first
# and answer 20. Reinforcement learning with a *verifiable* reward turns that difference
# into a training signal: sample several answers, check each one with a rule, and make
# the model more likely to produce the ones that did better than the others. That is the
# whole idea of Group Relative Policy Optimization (GRPO) {cite}`shao2024deepseekmath`,
# the algorithm DeepSeek used to train R1-Zero and R1 {cite}`deepseekai2025r1`.
#
# This chapter follows one question through one step of GRPO, up to the number that
# drives learning, the **advantage**:
#
# 1. the prompt and a **group** of $G = 4$ sampled outputs;
# 2. a **rule-based reward** for each output (accuracy + 0.1 × format);
# 3. the group's mean and standard deviation;
# 4. each output's advantage: its reward, standardised within its group;
# 5. what happens when every output gets the same reward, how the group size $G$ and the
#    small constant $\epsilon_{\mathrm{std}}$ change the picture;
# 6. an interactive table to try your own rewards, a group sampled from the book's base
#    model, and exercises.
#
# {doc}`02_objective` then turns advantages into a loss.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
import pandas as pd
import torch

from grpo_lib.advantages import group_advantages, group_stats
from grpo_lib.display import show_source
from grpo_lib.plots import bar_table
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.tasks.arithmetic import evaluate_expression, r1_zero_prompt

P = profile()
pd.set_option("display.precision", 4)

# %% [markdown]
# ## The question and the prompt
#
# DeepSeek-R1-Zero was trained from a base model with a deliberately plain prompt: it
# asks for the reasoning inside `<think> … </think>` and the answer inside
# `<answer> … </answer>`, and says nothing about *how* to reason
# ({cite}`deepseekai2025r1`, Table 1). Here is that template around our question:

# %%
question = "2 + 3 * 4"
print(r1_zero_prompt(question))

# %% [markdown]
# Multiplication binds tighter than addition, so the answer is $2 + (3 \cdot 4)$.
# Reading strictly left to right gives $(2 + 3) \cdot 4$ instead — the classic mistake:

# %%
# NBVAL_CHECK_OUTPUT
gold = evaluate_expression(question)
left_to_right = evaluate_expression(question, precedence=False)
print(f"with precedence: {gold}    left to right: {left_to_right}")

# %% [markdown]
# ## A group of four outputs
#
# GRPO samples a **group** of $G$ outputs $o_1, \dots, o_G$ for the same prompt from the
# current model (the *old policy* $\pi_{\theta_{\mathrm{old}}}$). Suppose $G = 4$ and
# the model produced these four. They are the running example of Fareed Khan's
# illustrated walkthrough of DeepSeek-R1 {cite}`khan2025r1scratch`, which we follow here
# and check number by number:
#
# - $o_1$ reasons left to right and gets the wrong answer;
# - $o_2$ multiplies first and gets it right;
# - $o_3$ gives the right answer but skips the `<think>` block;
# - $o_4$ rambles and gets it wrong.

# %%
outputs = [
    "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>",
    "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
    "<answer> 14 </answer>",
    "<think> two, three, four... add, or not, maybe 7 </think> <answer> 7 </answer>",
]
labels = [f"o{i + 1}" for i in range(len(outputs))]
G = len(outputs)
for label, text in zip(labels, outputs):
    print(f"{label}: {text}")

# %% [markdown]
# ## Rule-based rewards
#
# R1-Zero is scored by rules, not by a learned reward model ({cite}`deepseekai2025r1`,
# section 2.2.2): an **accuracy reward** (is the final answer right?) and a **format
# reward** (is the reasoning inside `<think>` and the answer inside `<answer>`?). Rules
# cannot be flattered the way a neural reward model can, and they cost nothing to run.
# The book's reward functions follow the convention of TRL {cite}`vonwerra2020trl`: a
# plain function `fn(completions, **columns) -> list[float]`, where the dataset's
# columns (here the gold `answer`) arrive as keyword arguments, one value per
# completion.

# %%
show_source(accuracy_reward)

# %%
show_source(format_reward)

# %% [markdown]
# The example weights the format reward by 0.1, so the total reward is
# $r_i = 1 \cdot \text{accuracy}_i + 0.1 \cdot \text{format}_i$.
# `combine_rewards` builds exactly that weighted sum and keeps each part:

# %%
# NBVAL_CHECK_OUTPUT
reward_fn = combine_rewards([accuracy_reward, format_reward], weights=[1.0, 0.1])
answers = [str(gold)] * G  # the dataset column, one value per completion
rewards = reward_fn(outputs, answer=answers)

table = pd.DataFrame(reward_fn.last_breakdown, index=labels)
table["total reward"] = rewards
print(reward_fn)
table

# %% [markdown]
# Only $o_2$ earns both parts. $o_3$ is right but unformatted, $o_1$ and $o_4$ are
# formatted but wrong — and the reward cannot tell a near miss ($o_1$ made one ordering
# mistake) from nonsense ($o_4$): both get the same score. Outcome rewards judge the
# answer, not the path.
#
# ## The group's baseline: mean and standard deviation
#
# Is a reward of 1.0 good? It depends on the question: on an easy one every output may
# score 1.0. GRPO judges each output **against its own group**: the group mean is the
# baseline, and the group's standard deviation sets the scale,
#
# $$
# \bar r = \frac1G \sum_{i=1}^G r_i, \qquad
# \sigma_r = \sqrt{\frac{1}{G} \sum_{i=1}^G (r_i - \bar r)^2}
# \quad\text{or}\quad
# \sigma_r = \sqrt{\frac{1}{G - 1} \sum_{i=1}^G (r_i - \bar r)^2},
# $$
#
# where dividing by $G$ gives the *population* standard deviation and dividing by
# $G - 1$ the *sample* standard deviation (Bessel's correction). Both are in use:
# GRPO-Zero {cite}`grpozero`, a from-scratch implementation, divides by the population
# std (it calls `numpy.std`), while TRL divides by the sample std (like `torch.std`).
# The library computes either:

# %%
# NBVAL_CHECK_OUTPUT
mean, std_population = group_stats(rewards, G, std="population")
_, std_sample = group_stats(rewards, G, std="sample")
mean, std_population, std_sample = (mean.item(), std_population.item(),
                                    std_sample.item())
print(f"mean reward          {mean:.4f}")
print(f"population std (/G)   {std_population:.4f}")
print(f"sample std (/(G-1))   {std_sample:.4f}")
print(f"ratio sample/population = {std_sample / std_population:.4f} "
      f"= sqrt(G / (G - 1)) = {np.sqrt(G / (G - 1)):.4f}")
walkthrough_std = 0.5  # the walkthrough's "approximated" std
print(f"walkthrough's std {walkthrough_std}: "
      f"{walkthrough_std - std_population:+.4f} from the population std, "
      f"{walkthrough_std - std_sample:+.4f} from the sample std")

# %% [markdown]
# The walkthrough gives the standard deviation as 0.5, "approximated". Neither
# convention gives 0.5: it is a rounded value, and with only four outputs the choice
# between $G$ and $G - 1$ moves the std by more than that rounding does (the two
# stds printed above against the last line's distances from 0.5).
#
# ## Advantages
#
# With *outcome supervision* — one reward for the whole output — GRPO gives every token
# of output $o_i$ the same advantage, the reward standardised within the group
# ({cite}`shao2024deepseekmath`, section 4.1.2):
#
# $$
# \hat A_{i,t} = \frac{r_i - \bar r}{\sigma_r + \epsilon_{\mathrm{std}}},
# $$
#
# with a small $\epsilon_{\mathrm{std}}$ (TRL and GRPO-Zero use $10^{-4}$) so that the
# division is defined when all rewards are equal. The library's `group_advantages`
# takes a flat list of `rewards`, the group size, the `std` convention and `eps`; here
# is the part that computes them (`scale` chooses the denominator: the group's std,
# the whole batch's, or none):

# %%
show_source(group_advantages, start="r = _as_reward_tensor",
            end="return advantages.reshape")

# %% [markdown]
# Here are the advantages under both conventions, next to the numbers the walkthrough
# prints, which are what you get by dividing by its rounded std of 0.5:

# %%
# NBVAL_CHECK_OUTPUT
walkthrough_advantages = [-0.95, 1.05, 0.85, -0.95]  # as printed there

adv_population = group_advantages(rewards, G, std="population")
adv_sample = group_advantages(rewards, G, std="sample")
centred = group_advantages(rewards, G, scale="none")  # r_i - mean, no division

advantages = pd.DataFrame({
    "reward": rewards,
    "r - mean": centred.numpy(),
    "A (population std)": adv_population.numpy(),
    "A (sample std)": adv_sample.numpy(),
    "(r - mean) / 0.5": (centred / walkthrough_std).numpy(),
    "walkthrough": walkthrough_advantages,
}, index=labels)
advantages

# %%
# NBVAL_CHECK_OUTPUT
reproduced = np.allclose(centred.numpy() / walkthrough_std, walkthrough_advantages)
print(f"dividing by the rounded std reproduces the walkthrough: {reproduced}")
gap = (adv_population - adv_sample).abs().max().item()
print(f"largest gap between the two conventions: {gap:.4f}")
for name, adv in [("population", adv_population), ("sample", adv_sample)]:
    print(f"{name:>10}: sum of advantages = 0 (to 1e-6): "
          f"{abs(adv.sum().item()) < 1e-6}, sum of squares = {(adv ** 2).sum():.4f}")

# %% [markdown]
# Things to notice:
#
# - **Signs and order agree** under every convention: $o_2$ and $o_3$ are pushed up,
#   $o_1$ and $o_4$ down, and $o_2$ gets a bit more than $o_3$ thanks to its format
#   reward. The conventions only change the *size* of the step.
# - **Advantages sum to zero** in each group: what one output gains, the others lose.
#   The sums of squares come out near $G$ (population) and $G - 1$ (sample), slightly
#   less because of $\epsilon_{\mathrm{std}}$. Exercise 1 asks you to see why.
# - The choice matters in practice: with the sample std every advantage is smaller by
#   the factor $\sqrt{(G-1)/G}$, so the same learning rate takes a smaller step.

# %%
fig, (ax_r, ax_a) = plt.subplots(1, 2, figsize=(7.5, 3.3), width_ratios=[1, 2.6],
                                 constrained_layout=True)
bar_table({"reward": rewards}, labels, fmt="{:.1f}", title="reward $r_i$", ax=ax_r)
baseline = ax_r.axhline(mean, color="black", ls="--", lw=1, label="group mean")
ax_r.legend(handles=[baseline], loc="upper right")
ax_r.set_ylim(0, 1.6)
bar_table(advantages[["A (population std)", "A (sample std)"]], fmt="{:.2f}",
          title=r"advantage $\hat A_i$", ax=ax_a)
fig.suptitle(f"{question} = ?  (G = {G})")
for text in fig.findobj(matplotlib.text.Text):  # every label at least 9 pt
    text.set_fontsize(max(text.get_fontsize(), 9))
plt.show()

# %% [markdown]
# ### Every token of an output shares its advantage
#
# The policy is a model of *tokens*, so the advantage is applied per token. With outcome
# rewards, $\hat A_{i,t}$ does not depend on $t$: the advantage vector of shape `[G]` is
# broadcast over each output's tokens with the completion mask. Below, the four outputs
# are tokenized with the book's tokenizer ({doc}`05_tiny_base_model` builds it) and
# right-padded; the
# grid shows the per-token advantage (sample std) for the first tokens of each output;
# the short $o_3$ ends early, and its padding positions get 0.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.models import build_tokenizer  # noqa: E402

tokenizer = build_tokenizer()
token_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in outputs]
T = max(len(ids) for ids in token_ids)
completion_mask = torch.zeros(G, T)  # [G, T], 1 = a real completion token
for i, ids in enumerate(token_ids):
    completion_mask[i, : len(ids)] = 1.0
per_token = adv_sample[:, None] * completion_mask  # [G, 1] * [G, T] -> [G, T]
print(f"advantages {tuple(adv_sample.shape)} x mask {tuple(completion_mask.shape)} "
      f"-> per-token advantages {tuple(per_token.shape)}")
print("tokens per output:", [len(ids) for ids in token_ids])
shown = 10
pd.DataFrame(per_token[:, :shown].numpy(), index=labels,
             columns=[f"t{t}" for t in range(shown)])

# %% [markdown]
# The correct first step of $o_1$, "2 + 3 = 5", is pushed down together with its wrong
# conclusion. Over many groups, steps that tend to lead to right answers collect
# positive advantages more often than negative ones; no single group can tell them
# apart. This is the price of outcome rewards, and the reason *process* supervision,
# which scores each step, exists; DeepSeekMath describes a GRPO variant for it
# ({cite}`shao2024deepseekmath`, section 4.1.3).
#
# ## When every output gets the same reward
#
# If the model answers an easy question correctly and well formatted four times out of
# four, every reward is the same, the mean equals each reward and the std is zero. The
# textbook formula then divides zero by zero:

# %%
# NBVAL_CHECK_OUTPUT
same = torch.tensor([1.1, 1.1, 1.1, 1.1], dtype=torch.float64)
naive = (same - same.mean()) / same.std()
print("naive (r - mean) / std:       ", naive.tolist())
print("group_advantages (eps = 1e-4):", group_advantages(same, G).tolist())

# %% [markdown]
# With $\epsilon_{\mathrm{std}}$ in the denominator (and, in the library, an exact zero
# numerator for an all-equal group) the advantages are exactly zero: the group
# contributes **no gradient**. That is the right answer (if every output is equally
# good, there is nothing to prefer), but it also means that questions the model always
# solves, or never solves, are wasted compute. DAPO {cite}`yu2025dapo` samples more
# prompts to replace such groups ("dynamic sampling"); {doc}`09_failure_modes` measures
# how often it happens in training.
#
# ### What $\epsilon_{\mathrm{std}}$ does to nearly-equal rewards
#
# $\epsilon_{\mathrm{std}}$ is not only a guard against 0/0. Standardising divides by
# the spread, so *any* difference, however tiny, is blown up to the same size. Take
# three wrong outputs and one whose reward is larger by a small $d$:

# %%
# NBVAL_CHECK_OUTPUT
rows = []
for d in [1e-6, 1e-4, 1e-2, 1.0]:
    r = [0.0, 0.0, 0.0, d]
    rows.append({
        "d": d,
        "A4 (eps = 0)": group_advantages(r, G, eps=0.0)[3].item(),
        "A4 (eps = 1e-4)": group_advantages(r, G, eps=1e-4)[3].item(),
        "A4 (eps = 1e-2)": group_advantages(r, G, eps=1e-2)[3].item(),
    })
pd.DataFrame(rows).set_index("d")

# %% [markdown]
# Without $\epsilon_{\mathrm{std}}$ the advantage does not depend on $d$ at all: a
# difference of one part in a million counts as much as a real success. With
# $\epsilon_{\mathrm{std}}$, differences much smaller than it fade out and differences
# much larger are untouched. That matters when rewards carry noise (a length penalty, a
# learned reward model) rather than clean 0/1 outcomes. Dr. GRPO {cite}`liu2025drgrpo`
# goes further and drops the division altogether (`scale="none"`,
# {doc}`08_loss_variants`).
#
# ## The group size G
#
# A group of one has no baseline: its mean is its own reward, so its advantage would
# always be zero. The library refuses it with an explanation:

# %%
# NBVAL_CHECK_OUTPUT
try:
    group_advantages([1.0], group_size=1)
except ValueError as err:
    print(f"ValueError: {err}")

# %% [markdown]
# With two outputs, standardising forgets *how much* better one was: any two rewards
# that differ by much more than $\epsilon_{\mathrm{std}}$ give the same pair of
# advantages.

# %%
# NBVAL_CHECK_OUTPUT
for pair in ([0.0, 1.0], [0.0, 0.01], [3.0, 100.0]):
    sample = group_advantages(pair, 2)
    population = group_advantages(pair, 2, std="population")
    print(f"rewards {str(pair):<12} -> sample std [{sample[0]:+.4f}, {sample[1]:+.4f}]"
          f", population std [{population[0]:+.4f}, {population[1]:+.4f}]")

# %% [markdown]
# With 0/1 accuracy rewards and larger groups, the advantage carries real information:
# how rare a success was. In a group of eight where $k$ outputs are correct, a correct
# output's advantage is large when $k$ is small (a rare success on a hard question) and
# small when $k$ is large; wrong outputs mirror it:

# %%
# NBVAL_CHECK_OUTPUT
G8 = 8
rows = []
for k in range(1, G8):
    r = [1.0] * k + [0.0] * (G8 - k)
    adv = group_advantages(r, G8)  # sample std, eps = 1e-4
    rows.append({"correct k": k, "A (correct)": adv[0].item(),
                 "A (wrong)": adv[-1].item()})
by_k = pd.DataFrame(rows).set_index("correct k")
by_k

# %%
fig, ax = plt.subplots(figsize=(7.5, 3.2), constrained_layout=True)
bar_table(by_k, labels=[f"k={k}" for k in by_k.index], fmt="{:+.2f}",
          title=f"Advantages in a group of {G8} with k correct (0/1 rewards)",
          ylabel="advantage", ax=ax)
for text in fig.findobj(matplotlib.text.Text):  # every label at least 9 pt
    text.set_fontsize(max(text.get_fontsize(), 9))
plt.show()

# %% [markdown]
# How often does a group teach nothing? If each output is correct independently with
# probability $p$, a group is all-correct or all-wrong with a probability that shrinks
# as $G$ grows. The simulation below samples many groups of 0/1 rewards and counts those
# whose advantages are all zero (the number of groups comes from the profile; exercise 3
# asks for the exact formula).

# %%
# NBVAL_IGNORE_OUTPUT
n_groups = P.pick(smoke=500, cpu=5000, gpu=20000)
generator = torch.Generator().manual_seed(0)
group_sizes = [2, 4, 8, 16, 32]
success_rates = [0.05, 0.2, 0.5, 0.8, 0.95]
dead = pd.DataFrame(index=pd.Index(group_sizes, name="G"), dtype=float)
for p in success_rates:
    for g in group_sizes:
        r = (torch.rand(n_groups * g, generator=generator) < p).double()  # [n * g]
        adv = group_advantages(r, g).view(n_groups, g)  # [n, g]
        dead.loc[g, f"p={p}"] = (adv == 0).all(dim=1).double().mean().item()
print(f"fraction of groups with zero advantages ({n_groups} groups per cell)")
dead

# %%
fig, ax = plt.subplots(figsize=(6, 3.5), constrained_layout=True)
for p, column in zip(success_rates, dead.columns):
    above = p > 0.5  # p and 1 - p give the same curve: dashed and open, both show
    ax.plot(dead.index, dead[column], marker="s" if above else "o",
            ls="--" if above else "-", mfc="none" if above else None, ms=8 if above
            else 5, label=column)
ax.set_xscale("log", base=2)
ax.set_xticks(group_sizes, [str(g) for g in group_sizes])
ax.set_xlabel("group size G")
ax.set_ylabel("fraction of groups that teach nothing")
ax.set_title(f"Zero-variance groups, simulated ({n_groups} groups per point)")
ax.legend(fontsize=9)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The curves for $p$ and $1 - p$ lie on top of each other: an all-wrong group is as
# useless as an all-right one. Larger groups rescue hard and easy questions (small or
# large $p$), at the price of generating more outputs per question. DeepSeekMath sampled
# 64 outputs per question ({cite}`shao2024deepseekmath`, section 4.2); TRL's default
# `num_generations` is 8.
#
# ## Several questions in one batch
#
# A training batch holds several prompts, each with its own group. The book's convention
# (and TRL's) is that groups are **contiguous**: the rewards of a batch of
# `num_prompts * G` outputs are laid out prompt by prompt, so `rewards.view(-1, G)` has
# one row per prompt, and every row is normalised on its own:

# %%
# NBVAL_CHECK_OUTPUT
batch_rewards = rewards + [1.1, 1.1, 1.1, 0.1] + [0.0, 0.0, 0.0, 0.0]
batch_adv = group_advantages(batch_rewards, G)
print("rewards    (one row per prompt):\n", torch.tensor(batch_rewards).view(-1, G))
print("advantages (one row per prompt):\n", batch_adv.view(-1, G))

# %% [markdown]
# The second prompt is easy (three of four right) and its one failure gets a large
# negative advantage; the third prompt is hopeless and teaches nothing. Dividing by the
# group's own std puts easy and hard prompts on one scale — which is exactly what
# Dr. GRPO {cite}`liu2025drgrpo` questions ({doc}`08_loss_variants`).
#
# ## Try it: edit the rewards
#
# The table below recomputes the advantages (both conventions) with `group_advantages`
# whenever you change a reward. Some things to try: make every reward equal; make $o_4$
# correct; give $o_3$ a reward of 10; use negative rewards. (In the rendered book the
# table is static; run the notebook to edit it.)

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.widgets import advantage_table  # noqa: E402

advantage_table(rewards, labels=labels)

# %% [markdown]
# ## A live group from the book's base model
#
# The four outputs above were written by hand. Here is the same step on outputs
# *sampled* from the book's base model (`data/models/tiny-qwen2-base`, pretrained in
# {doc}`05_tiny_base_model`): a group of $G = 8$ completions for the same question, at
# temperature 1, scored by the same reward function and turned into advantages by the
# same `group_advantages` call. The numbers change with the random seed; the mechanics
# do not.

# %%
# NBVAL_IGNORE_OUTPUT
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import transformers  # noqa: E402

from grpo_lib.models import load_model_and_tokenizer  # noqa: E402
from grpo_lib.sampling import generate  # noqa: E402
from grpo_lib.tasks.arithmetic import chat_prompt  # noqa: E402

transformers.utils.logging.disable_progress_bar()
root = Path.cwd().parent if Path.cwd().name == "chapters" else Path.cwd()
model, tokenizer = load_model_and_tokenizer(root / "data/models/tiny-qwen2-base",
                                            device=P.device)
G_live = 8
rollout = generate(model, tokenizer, [chat_prompt("2 + 3 * 4")], num_generations=G_live,
                   max_new_tokens=96, temperature=1.0, seed=0)
live_rewards = reward_fn(rollout.texts, answer=["14"] * G_live)
live_parts = reward_fn.last_breakdown  # {name of each reward function: its scores}
live_adv = group_advantages(live_rewards, G_live, std="sample")
for i, (text, r, a) in enumerate(zip(rollout.texts, live_rewards, live_adv.tolist())):
    lines = textwrap.wrap(text, 70) or [""]
    print(f"o{i + 1}  reward {r:.1f}  advantage {a:+.3f}")
    print("\n".join("    " + line for line in lines))
print(f"group mean {np.mean(live_rewards):.3f}, sample std "
      f"{np.std(live_rewards, ddof=1):.3f}")

# %% [markdown]
# What this group shows, read from the rewards above:

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import say  # noqa: E402
from grpo_lib.parsing import extract_answer  # noqa: E402

answers_live = [extract_answer(t) for t in rollout.texts]
right = [acc == 1.0 for acc in live_parts["accuracy_reward"]]
formatted = [f == 1.0 for f in live_parts["format_reward"]]
habit = [a == str(left_to_right) for a in answers_live]  # 20: left to right
other = sorted({str(a) for a, ok, h in zip(answers_live, right, habit)
                if not ok and not h})


def advantage_of(flags):
    """The advantages of the completions with a flag, as text (one value if equal)."""
    values = sorted({round(a, 3) for a, f in zip(live_adv.tolist(), flags) if f})
    return ", ".join(f"{v:+.3f}" for v in values)


def verb(n, one, many):
    """The verb that agrees with a count: verb(1, "answers", "answer")."""
    return one if n == 1 else many


n_right = sum(right)
parts = [f"{n_right} of {G_live} completions {verb(n_right, 'answers', 'answer')} "
         f"{gold}" + (f" (advantage {advantage_of(right)})" if any(right) else "")]
if any(habit):
    parts.append(f"{sum(habit)} {verb(sum(habit), 'answers', 'answer')} "
                 f"{left_to_right}, the left-to-right habit the base model learned "
                 f"from its corpus (advantage {advantage_of(habit)})")
wrong_other = [not ok and not h for ok, h in zip(right, habit)]
if any(wrong_other):
    n_other = sum(wrong_other)
    parts.append(f"{n_other} {verb(n_other, 'gives', 'give')} another wrong answer "
                 f"({', '.join(other)}; advantage {advantage_of(wrong_other)})")
if all(formatted):
    fmt = ("Every completion keeps the `<think>`/`<answer>` format, so the format "
           "reward adds the same 0.1 to all of them and the advantages come from "
           "accuracy alone.")
else:
    n_broken = G_live - sum(formatted)
    fmt = (f"{n_broken} {verb(n_broken, 'breaks', 'break')} the format and "
           f"{verb(n_broken, 'loses', 'lose')} its 0.1 (advantage "
           f"{advantage_of([not f for f in formatted])}).")
if len(set(live_rewards)) == 1:
    fmt += (" All rewards are equal: every advantage is 0 and this group teaches "
            "nothing.")
say("In this group, " + "; ".join(parts) + ". " + fmt)

# %% [markdown]
# If all eight completions had earned the same reward, every advantage would be zero
# and this question would teach nothing at this step. {doc}`06_rollouts` measures how
# often that happens, and {doc}`07_full_loop` repeats this step on thousands of groups.

# %% [markdown]
# ## What to remember
#
# - GRPO needs no critic: the **group mean** is the baseline, so each output is judged
#   against other answers to the same question.
# - The advantage is the reward **standardised within the group**; every token of an
#   output shares it. Its sign says "more of this" or "less of this".
# - **Which std** matters for the step size, not for the direction: the sample std
#   (TRL) gives advantages smaller by $\sqrt{(G-1)/G}$ than the population std
#   (GRPO-Zero). Quoted numbers like the walkthrough's come from rounding.
# - **Equal rewards teach nothing**: their advantages are zero (the library sets them
#   to exactly zero); $\epsilon_{\mathrm{std}}$ keeps that case from dividing 0 by 0,
#   and it damps differences far smaller than itself.
# - **G** trades compute for signal: $G = 2$ only says which of two is better; larger
#   groups measure how rare a success is and leave fewer groups with nothing to learn.
#
# ## Exercises
#
# Each exercise has a function to complete and a checker from
# `grpo_lib.exercises.ch01` that runs it on cases with known answers. Until you fill it
# in, the cell prints a reminder; a wrong attempt raises an `AssertionError` that names
# the input, the expected value and what your function returned. Solutions are in the
# appendix, {doc}`../book/solutions/ch01`.
#
# **Exercise 1 — advantages by hand.** Write `my_group_advantages(rewards, std, eps)`
# for a single group without using `group_advantages` (plain Python or NumPy). Then
# explain why the squared advantages of a group sum to (almost) $G$ with the population
# std and $G - 1$ with the sample std.

# %%
from grpo_lib.exercises.ch01 import check_group_advantages  # noqa: E402


def my_group_advantages(rewards, std="sample", eps=1e-4):
    """Advantages of ONE group: (r_i - mean) / (std + eps); std: sample|population."""
    # your code here
    raise NotImplementedError


try:
    check_group_advantages(my_group_advantages)
except NotImplementedError:
    print("Exercise 1 not done yet: fill in my_group_advantages, then run this cell.")

# %% [markdown]
# **Exercise 2 — which groups teach anything?** Write `informative_groups(rewards,
# group_size)` that returns one boolean per group (groups contiguous, as above): `True`
# when the group's advantages are not all zero, that is, when its rewards are not all
# equal. Training code uses such a mask to log the `zero_std_frac` metric and, in DAPO,
# to drop groups.

# %%
from grpo_lib.exercises.ch01 import check_informative_groups  # noqa: E402


def informative_groups(rewards, group_size):
    """One bool per contiguous group: True when its rewards are not all equal."""
    # your code here
    raise NotImplementedError


try:
    check_informative_groups(informative_groups)
except NotImplementedError:
    print("Exercise 2 not done yet: fill in informative_groups, then run this cell.")

# %% [markdown]
# **Exercise 3 — how often is a group wasted?** Each of $G$ outputs is correct
# independently with probability $p$ and rewards are 0/1. Write
# `zero_variance_probability(p, G)`, the exact probability that the group's advantages
# are all zero, and compare it with the simulated table above. How large must $G$ be for
# a question the model solves 5% of the time to be wasted less than half the time?

# %%
from grpo_lib.exercises.ch01 import check_zero_variance_probability  # noqa: E402


def zero_variance_probability(p, G):
    """Probability that G independent 0/1 rewards (1 with probability p) are equal."""
    # your code here
    raise NotImplementedError


try:
    check_zero_variance_probability(zero_variance_probability)
except NotImplementedError:
    print("Exercise 3 not done yet: fill in zero_variance_probability, then run this "
          "cell.")
