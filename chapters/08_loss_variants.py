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
# (ch08)=
# # Loss variants and their biases
#
# {doc}`Chapter 7 <07_full_loop>` trained the tiny base model with one recipe:
# DeepSeekMath's GRPO loss {cite}`shao2024deepseekmath`. Since then, papers and
# libraries have proposed several variants with new names: BNPO, Dr. GRPO
# {cite}`liu2025drgrpo`, DAPO {cite}`yu2025dapo`, plain REINFORCE with a group baseline.
# Most of them change one of only two things:
#
# * the **credit assigner**: how the $G$ rewards of a group become one advantage
#   per completion (subtract the group mean; divide by the group's standard deviation
#   or not);
# * the **loss**: how the per-token terms $\ell_{i,t}$ are averaged into the one number
#   we differentiate (per completion then per batch, per token, or by a constant).
#
# "Algorithm = credit assigner + loss" is not just a slogan here: in `grpo_lib` they are
# two functions, and the trainer calls them one after the other. This chapter takes each
# one apart on a batch small enough to check by hand, shows what each choice does to the
# weight of every token, and then runs the same R1-Zero training under each variant.
# The last sections take several updates from each batch, by passes or by
# mini-batches, where the clip finally acts,
# add two newer losses that change what is clipped, GSPO and CISPO, four knobs
# that cap, gate or mask single terms, and two losses on the ratio of a whole
# completion, LUSPO and VESPO.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import copy
import inspect
import json
import shutil
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib import losses, trainer
from grpo_lib.advantages import group_advantages
from grpo_lib.corpus import CorpusMix
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.runs import (RUNS_DIR, compare_seeds, final_eval, late_mean, load_run,
                           load_seeds, mean_range, parting_step, seed_order,
                           seed_table)
from grpo_lib.sampling import generate
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR, chat_prompt
from grpo_lib.trainer import GRPOTrainer, load_config

P = profile()
pd.set_option("display.precision", 4)
pd.set_option("display.width", 120)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
MODEL_DIR = REPO / "data" / "models" / "tiny-qwen2-base"
CONFIG = REPO / "configs" / "r1_zero_arithmetic.yaml"

# %% [markdown]
# ## The split, in the trainer
#
# Here are the lines of `GRPOTrainer.train_step` between the rewards and the update.
# The credit assigner, `GRPOTrainer.advantages` ({doc}`07_full_loop` shows it), sees
# only the rewards and the group size; the loss (inside `_update`) sees only
# advantages, log-probabilities and masks:

# %%
source = inspect.getsource(trainer.GRPOTrainer.train_step).splitlines()
start = next(i for i, s in enumerate(source) if "advantages = self.advantages" in s)
print("\n".join(line.strip() for line in source[start:start + 3]))

# %% [markdown]
# Two knobs, `scale_rewards` and `loss_type`, choose each half on its own. The rest of
# the chapter is about those two knobs.
#
# (ch08-difficulty)=
# ## The credit assigner and the difficulty bias
#
# For a group with rewards $r_1, \dots, r_G$, mean $\bar r$ and standard deviation
# $\sigma_r$, GRPO's advantage is
#
# $$
# \hat A_i = \frac{r_i - \bar r}{\sigma_r + \epsilon_{\mathrm{std}}}
# \qquad\text{(DeepSeekMath, outcome supervision)},
# $$
#
# and Dr. GRPO {cite}`liu2025drgrpo` drops the denominator: $\hat A_i = r_i - \bar r$
# (`scale_rewards="none"`). The symbols are the book's ({ref}`notation`); the function
# is {doc}`chapter 1 <01_two_plus_three_times_four>`'s:

# %%
show_source(group_advantages, docstring=False)

# %% [markdown]
# Why drop the std? Take binary rewards (right = 1, wrong = 0) and $G = 8$. A group
# with $k$ right answers has mean $p = k/G$. Without the std the advantages are
# $1 - p$ and $-p$; the total size of the group's push,
# $\sum_i |\hat A_i| = 2Gp(1-p)$, is largest for a question the model gets right half
# the time and small for one it nearly always or nearly never gets right. Dividing by
# the std $\sqrt{\tfrac{G}{G-1}\,p(1-p)}$ turns that total into
# $2\sqrt{G(G-1)}\sqrt{p(1-p)}$, which falls off much more slowly towards $p = 0$ and
# $p = 1$: the nearly-solved and the nearly-hopeless questions get a larger share of
# the update. Dr. GRPO calls this the question-level difficulty bias. The numbers, from
# `group_advantages` itself:

# %%
# NBVAL_CHECK_OUTPUT
G = 8
rows = []
for k in range(1, G):
    rewards = torch.tensor([1.0] * k + [0.0] * (G - k))  # one group, k right answers
    a_group = group_advantages(rewards, G, scale="group")  # [G]
    a_none = group_advantages(rewards, G, scale="none")  # [G]
    rows.append({"k right of 8": k, "A right (group)": a_group[0].item(),
                 "A wrong (group)": a_group[-1].item(),
                 "sum|A| (group)": a_group.abs().sum().item(),
                 "A right (none)": a_none[0].item(),
                 "A wrong (none)": a_none[-1].item(),
                 "sum|A| (none)": a_none.abs().sum().item()})
difficulty = pd.DataFrame(rows).set_index("k right of 8")
difficulty.round(4)

# %% [markdown]
# The same totals, each divided by its own largest value, so the two shapes can be
# compared:

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.2))
for col, label in [("sum|A| (group)", 'scale_rewards="group" (GRPO)'),
                   ("sum|A| (none)", 'scale_rewards="none" (Dr. GRPO)')]:
    share = difficulty[col] / difficulty[col].max()
    ax.plot(difficulty.index / G, share, marker="o", label=label)
ax.set_xlabel("share of the group that is right, p = k / G")
ax.set_ylabel("sum |A_i| / its maximum")
ax.set_title("How hard each question pushes, by difficulty (G = 8)")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
edge_group = difficulty.loc[1, "sum|A| (group)"] / difficulty.loc[4, "sum|A| (group)"]
edge_none = difficulty.loc[1, "sum|A| (none)"] / difficulty.loc[4, "sum|A| (none)"]
print(f"a question solved 1/8 of the time pushes {edge_group:.3f} as hard as one "
      f"solved 4/8 with the std, {edge_none:.3f} without it")

# %% [markdown]
# A third choice, `scale_rewards="batch"` (TRL), keeps the group mean as the baseline
# but divides by one std over the whole batch, so every group is scaled by the same
# number and the per-question reweighting disappears while the advantages keep a
# size independent of the reward's scale.
#
# (ch08-aggregation)=
# ## The loss: five ways to average the same terms
#
# On the first pass over a batch ($\mu = 1$) the clipped GRPO term of token $t$ of
# completion $i$ is $\ell_{i,t} = -\rho_{i,t} \hat A_i$, with a policy ratio
# $\rho_{i,t} = \pi_\theta / \pi_{\theta_{\mathrm{old}}}$ that equals 1 but still
# carries the gradient $\nabla \log \pi_\theta(o_{i,t})$. What differs
# between the variants is the **aggregation** of $\ell_{i,t}$ over a batch of $B$
# completions with lengths $|o_i|$ and a generation limit $L_{\max}$:
#
# | `loss_type` | aggregation | from |
# | --- | --- | --- |
# | `grpo` | $\frac1B\sum_i \frac{1}{\lvert o_i\rvert}\sum_t \ell_{i,t}$ | DeepSeekMath eq. 3 |
# | `bnpo` | $\sum_{i,t}\ell_{i,t} \,/\, \sum_i \lvert o_i\rvert$ per micro-batch | TRL |
# | `dr_grpo` | $\sum_{i,t}\ell_{i,t} \,/\, (B\,L_{\max})$ | Dr. GRPO |
# | `dapo` | $\sum_{i,t}\ell_{i,t} \,/\, N_{\text{tokens}}$ of the whole step | DAPO §3.3 |
# | `reinforce` | $-\frac1B\sum_i \hat A_i \sum_t \log\pi_\theta(o_{i,t})$ | REINFORCE + group baseline |
#
# Each aggregation is one short function in `grpo_lib.losses`:

# %%
for fn in (losses.aggregate_grpo, losses.aggregate_bnpo, losses.aggregate_dr_grpo,
           losses.aggregate_dapo, losses.aggregate_reinforce):
    show_source(fn, docstring=False)

# %% [markdown]
# and `policy_loss` ({doc}`07_full_loop`) computes the per-token term, adds the KL
# penalty when $\beta > 0$, and hands the result to one of them.
#
# (ch08-toy-batch)=
# ### A batch you can check by hand
#
# One question, $G = 2$ completions: a **short right** answer of 4 tokens and a
# **long wrong** answer of 12 tokens, padded to $L_{\max} = 16$. The credit assigner
# gives them $\pm \hat A$; the loss then decides how much each *token* is pushed. The
# push on token $t$ of completion $i$ is the derivative of the loss with respect to
# that token's log-probability, $-\partial L / \partial \log\pi_\theta(o_{i,t})$;
# dividing it by $\hat A_i$ leaves the weight the aggregation gives the token. Autograd
# measures it for us, straight from `policy_loss`:

# %%
# NBVAL_CHECK_OUTPUT
lengths = torch.tensor([4, 12])  # short right, long wrong
L_MAX = 16
toy_rewards = torch.tensor([1.0, 0.0])
toy_adv = group_advantages(toy_rewards, 2, scale="none")  # [2]: +0.5, -0.5
toy_mask = (torch.arange(L_MAX) < lengths[:, None]).float()  # [2, 16]
print("advantages (scale none):", toy_adv.tolist())
print("mask row sums:", toy_mask.sum(-1).tolist())


def token_push(loss_type, mask=toy_mask, adv=toy_adv, **kw):
    """-dL/dlogp for every token of the toy batch under one loss_type: [B, T]."""
    logp = torch.full(mask.shape, -1.0, requires_grad=True)  # any value works
    loss, _ = policy_loss(logp, None, adv, mask, loss_type=loss_type,
                          max_completion_length=L_MAX, **kw)
    (grad,) = torch.autograd.grad(loss, logp)
    return -grad * mask  # [B, T]


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "reinforce"]
weights = []
for lt in LOSS_TYPES:
    push = token_push(lt)  # [2, 16]
    per_token = push[:, 0] / toy_adv  # weight of one token of each completion
    weights.append({"loss_type": lt,
                    "weight/token, short right": per_token[0].item(),
                    "weight/token, long wrong": per_token[1].item(),
                    "total push, short right": push[0].sum().item(),
                    "total push, long wrong": push[1].sum().item()})
toy_table = pd.DataFrame(weights).set_index("loss_type")
toy_table.round(5)

# %% [markdown]
# Check the first row by hand: `grpo` divides each completion by its own length and the
# batch by $B = 2$, so a token of the short answer weighs $1/(2 \cdot 4) = 0.125$ and a
# token of the long answer $1/(2 \cdot 12) \approx 0.0417$. Each *completion* gets the
# same total push, $\pm \hat A/B = \pm 0.25$, whatever its length. The token-level
# losses (`bnpo`, `dapo`) give every token $1/16$; `dr_grpo` gives every token
# $1/(B \cdot L_{\max}) = 1/32$; `reinforce` sums over tokens, $1/B = 0.5$ per token.

# %%
fig, ax = plt.subplots(figsize=(7.3, 3.2))
x = np.arange(len(LOSS_TYPES))
short = ax.bar(x - 0.2, toy_table["weight/token, short right"], 0.4,
               label="a token of the short right answer (4 tokens)")
long = ax.bar(x + 0.2, toy_table["weight/token, long wrong"], 0.4,
              label="a token of the long wrong answer (12 tokens)")
for bars in (short, long):  # the value on each bar (a log axis has no zero)
    ax.bar_label(bars, [f"1/{1 / b.get_height():.0f}" for b in bars], fontsize=9,
                 padding=1)
ax.set_xticks(x, LOSS_TYPES)
ax.set_yscale("log")
ax.set_yticks([0.03, 0.06, 0.125, 0.25, 0.5], ["0.03", "0.06", "0.125", "0.25", "0.5"])
ax.set_ylim(top=1.0)  # room for the labels above the tallest bars
ax.minorticks_off()
ax.set_ylabel("weight per token (log scale)")
ax.set_title("What each aggregation gives one token")
ax.legend(fontsize=9)
ax.grid(alpha=0.3, axis="y")
plt.show()

# %% [markdown]
# **The length bias of `grpo`** {cite}`liu2025drgrpo`. Under `grpo` the long wrong
# answer is penalised with the same total as the short right answer is rewarded, so
# each of its tokens is penalised $|o_2|/|o_1| = 3$ times less than a token of the
# right answer is rewarded. Two consequences follow. Among right answers, the shorter
# one gets more reward per token (the gradient prefers short right answers). Among
# wrong answers, a longer one costs less per token, so the gradient is weaker at
# pushing long wrong answers down. Dr. GRPO traces the growing length of wrong
# answers during R1-Zero-style training partly to this bias. The token-level
# aggregations treat every token alike: the long wrong answer, having more tokens,
# receives more total push than the short right one.
#
# **BNPO versus DAPO under gradient accumulation.** The two are the same on one
# micro-batch. They differ when a step is split into micro-batches whose token counts
# differ: `bnpo` normalises each micro-batch by its own token count, `dapo` by the
# token count of the whole step (`num_items_in_batch`). Put the two completions in
# two micro-batches of one row each, as `GRPOTrainer._update` would with
# `micro_batch_size=1`:

# %%
# NBVAL_CHECK_OUTPUT
def accumulated_push(loss_type):
    """Per-token weight when each completion is its own micro-batch (K = 2)."""
    out = []
    for i in range(2):
        push = token_push(loss_type, mask=toy_mask[i:i + 1], adv=toy_adv[i:i + 1],
                          num_micro_batches=2, num_items_in_batch=toy_mask.sum())
        out.append((push[0, 0] / toy_adv[i]).item())
    return out


for lt in ("bnpo", "dapo"):
    short, long = accumulated_push(lt)
    print(f"{lt:>5}, two micro-batches: short-answer token {short:.5f}, "
          f"long-answer token {long:.5f}")

# %% [markdown]
# Split this way, `bnpo` gives the short answer's tokens 0.125 and the long answer's
# 0.0417: exactly `grpo`'s weights, because each micro-batch holds a single completion.
# `dapo` keeps $1/16$ for every token, however the step is split.
#
# ### Clip-higher
#
# DAPO's other change to the loss is in the clip, not in the aggregation: it raises
# the upper clip bound to $1 + \varepsilon_{\mathrm{high}}$ with
# $\varepsilon_{\mathrm{high}} = 0.28$ while keeping
# $1 - \varepsilon_{\mathrm{low}} = 0.8$ below {cite}`yu2025dapo`, so that a token the
# old policy found unlikely, and which turned out good, can grow its probability more
# before the clip stops its gradient ({doc}`02_objective` drew the surrogate). On one
# token with policy ratio $\rho = 1.25$ and a positive advantage:

# %%
# NBVAL_CHECK_OUTPUT
one_mask = torch.ones(1, 1)
for eps_high in (None, 0.28):
    logp = torch.tensor([[np.log(1.25)]], requires_grad=True)  # rho = 1.25
    loss, stats = policy_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), one_mask,
                              loss_type="dapo", epsilon=0.2, epsilon_high=eps_high)
    (grad,) = torch.autograd.grad(loss, logp)
    print(f"epsilon_high={eps_high}: clip_frac_high={stats['clip_frac_high']:.0f}, "
          f"dL/dlogp={grad.item():+.4f}")

# %% [markdown]
# With the symmetric clip the token is clipped and gets no gradient; with
# clip-higher it still gets one. Note the condition: a ratio $\rho \neq 1$. On the
# first pass over a batch every ratio is exactly 1, so neither clip acts; clipping
# starts only with $\mu > 1$ passes over the same batch (`num_iterations`). DAPO's
# fourth change, overlong reward shaping, first leaves truncated completions out of
# the loss (overlong filtering, the trainer flag `mask_truncated_completions=True`),
# then charges a soft penalty as a completion nears the limit
# (`soft_overlong_punishment`, {doc}`chapter 3 <03_rule_rewards>`).
#
# (ch08-runs)=
# ## The same R1-Zero run under each variant
#
# Now the real thing: {doc}`chapter 7 <07_full_loop>`'s configuration
# (`configs/r1_zero_arithmetic.yaml`: accuracy + 0.1 · format, $G = 8$, completions up
# to 96 tokens, AdamW at $5 \cdot 10^{-4}$ with a cosine schedule, $\beta = 0$,
# $\mu = 1$), loaded with `load_config`, with one override per variant, from the same
# seed, so every run starts from the same model, sees the same prompts in the same order
# and samples the same first batch.
#
# These are **short runs**, sized for a CPU: the `cpu` profile trains each variant
# for a few dozen steps on a few prompts per step and evaluates on a few hundred
# held-out problems, so the whole comparison fits in a few minutes. Short runs show
# the early dynamics, not where each variant ends up; the `gpu` profile runs the
# config's full length (150 steps of 16 prompts) and evaluates on 500 problems. All
# sizes come from `P.pick`:

# %%
STEPS = P.pick(smoke=1, cpu=30, gpu=150)
PROMPTS = P.pick(smoke=2, cpu=8, gpu=16)
N_EVAL = P.pick(smoke=10, cpu=200, gpu=500)
runs_dir = tempfile.mkdtemp(prefix="ch08_runs_")
COMMON = [f"model_name_or_path={MODEL_DIR}", f"max_steps={STEPS}",
          f"per_step_prompts={PROMPTS}", "eval_on_start=false", "eval_every=0",
          "save_every=0", "save_final=false", "sample_every=0", "progress_bar=false",
          f"micro_batch_size={PROMPTS * 8}"]
VARIANTS = {
    "grpo": [],
    "bnpo": ["loss_type=bnpo"],
    "dr_grpo": ["loss_type=dr_grpo"],
    "dapo": ["loss_type=dapo"],
    "reinforce": ["loss_type=reinforce"],
    "grpo, scale none": ["scale_rewards=none"],
}
print(f"{len(VARIANTS)} runs x {STEPS} steps x {PROMPTS} prompts x G=8; "
      f"held-out evaluation on {N_EVAL} problems")

# %%
train_set = load_task_split("arithmetic", "train")
test_set = load_task_split("arithmetic", "test")


def train_variant(name, overrides):
    """Train one variant from the base model; return (metrics, eval row, seconds)."""
    out = f"{runs_dir}/{name.replace(', ', '_').replace(' ', '_')}"
    config = load_config(CONFIG, COMMON + [f"output_dir={out}"] + overrides)
    model, tok = load_model_and_tokenizer(config.model_name_or_path, device=P.device)
    t0 = time.perf_counter()
    metrics = GRPOTrainer(model, tok, None, config, train_set).train()
    seconds = time.perf_counter() - t0
    table, samples = evaluate(model, tok, test_set, n=N_EVAL, return_samples=True,
                              max_new_tokens=config.max_completion_length)
    return metrics, table.loc["greedy"], seconds, samples


base_model, base_tok = load_model_and_tokenizer(MODEL_DIR, device=P.device)
base_eval, base_samples = evaluate(base_model, base_tok, test_set, n=N_EVAL,
                                   max_new_tokens=96, return_samples=True)
base_eval = base_eval.loc["greedy"]
del base_model

# %%
# NBVAL_IGNORE_OUTPUT
results = {}
t_all = time.perf_counter()
for name, overrides in VARIANTS.items():  # one printed line per variant
    results[name] = train_variant(name, overrides)
    metrics, ev, seconds, _ = results[name]
    print(f"{name:>17}: {seconds:5.0f} s, held-out strict {ev['strict_acc']:.3f}")
print(f"all variants: {time.perf_counter() - t_all:.0f} s "
      f"({torch.get_num_threads()} torch thread(s))")

# %% [markdown]
# ### Accuracy, format, length
#
# The harness after training (greedy decoding on the held-out problems), next to the
# base model, and the training-time statistics averaged over the last third of the
# steps ("late") and the first third ("early"):

# %%
# NBVAL_IGNORE_OUTPUT
third = max(1, STEPS // 3)
rows = [{"variant": "base model", "held-out strict": base_eval["strict_acc"],
         "held-out format": base_eval["format_rate"],
         "held-out length": base_eval["mean_length"]}]
for name, (m, ev, seconds, _) in results.items():
    rows.append({
        "variant": name, "held-out strict": ev["strict_acc"],
        "held-out format": ev["format_rate"], "held-out length": ev["mean_length"],
        "train acc late": m["accuracy"].tail(third).mean(),
        "length early": m["completion_length"].head(third).mean(),
        "length late": m["completion_length"].tail(third).mean(),
        "entropy late": m["entropy"].tail(third).mean(),
        "clip frac (low+high)": (m["clip_frac_low"] + m["clip_frac_high"]).max(),
        "grad norm": m["grad_norm"].mean(), "loss mean": m["loss"].mean(),
        "seconds": seconds})
comparison = pd.DataFrame(rows).set_index("variant")
comparison.round(3)

# %% [markdown]
# Response length, training accuracy and entropy over training, every variant in each
# panel (a 5-step rolling mean; the faint lines are the raw per-step means). Each
# variant's line is thinner than the one before it, so runs that coincide show as a
# thin line inside a wider one: `bnpo` and `dapo` are one run here (their rows of the
# table above are equal), since each step is a single micro-batch.

# %%
fig, axes = plt.subplots(3, 1, figsize=(7.3, 8.4), sharex=True,
                         constrained_layout=True)
panels = [("completion_length", "length (tokens)"),
          ("accuracy", "training accuracy"),
          ("entropy", "entropy (nats/token)")]
for ax, (col, label) in zip(axes, panels):
    for j, (name, (m, _, _, _)) in enumerate(results.items()):
        line, = ax.plot(m["step"], m[col], alpha=0.2)
        ax.plot(m["step"], m[col].rolling(5, min_periods=1).mean(),  # equal runs show
                color=line.get_color(), ls=("-", "--", ":")[j % 3], lw=3.0 - 0.4 * j,
                label=name)
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
axes[-1].set_xlabel("step")
axes[0].legend(fontsize=9, ncol=3)
axes[0].set_title(f"R1-Zero, {STEPS} steps x {PROMPTS} prompts x G=8, same seed")
plt.show()

# %% [markdown]
# Which answers got longer or shorter? The harness kept every held-out completion it
# scored (`return_samples=True`), so the greedy answers of each trained model can be
# split into right and wrong ones:

# %%
# NBVAL_IGNORE_OUTPUT
split_rows = []
for name, (_, _, _, samples) in [("base model", (None, None, None, base_samples))] + [
        (n, r) for n, r in results.items()]:
    right = samples[samples["correct"]]["length"]
    wrong = samples[~samples["correct"]]["length"]
    split_rows.append({"variant": name, "right: n": len(right),
                       "right: mean length": right.mean(), "wrong: n": len(wrong),
                       "wrong: mean length": wrong.mean()})
by_correctness = pd.DataFrame(split_rows).set_index("variant")
by_correctness.round(1)

# %% [markdown]
# ### Full-length runs: do the wrong answers get longer?
#
# Dr. GRPO's evidence for the length bias is a trend over a long run: under `grpo` the
# *incorrect* responses keep getting longer, under `dr_grpo` they do not
# ({cite}`liu2025drgrpo`, Figure 1). A few dozen steps cannot show a trend, so the
# repository keeps four full-length runs of chapter 7's configuration (150 steps of 16
# prompts), `grpo` and `dr_grpo` with two seeds each, trained on a CPU with one torch
# thread with the command in each run's `README.md`. Besides the overall length, the
# trainer logs the mean length of the right and of the wrong sampled completions of
# every step (`length_correct`, `length_wrong`), and the same comparison made *inside*
# each group (`length_gap_in_group`: over the groups that have both right and wrong
# answers, the mean of "wrong length minus right length"). The first compares answers to
# different problems; the second compares answers to the same problem, which is what the
# per-response normalisation can act on, because advantages are only ever compared
# within a group:

# %%
full = {}
for loss in ("grpo", "dr_grpo"):
    for seed, run in enumerate(load_seeds(f"ch08_{loss}")):
        full[loss, seed] = (run.metrics, run.evals, run.info)
        print(f"{run.name}: {run.info['train_seconds']} s on {run.info['device']}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), sharey=True,
                         constrained_layout=True)
for ax, loss in zip(axes, ("grpo", "dr_grpo")):
    for seed, ls in ((0, "-"), (1, "--")):
        m = full[loss, seed][0]
        for col, color in (("length_wrong", "C3"), ("length_correct", "C2")):
            ax.plot(m["step"], m[col].rolling(10, min_periods=1).mean(), ls=ls,
                    color=color, label=f"{col.split('_')[1]}, seed {seed}")
    ax.set_title(f"{loss}: right and wrong", fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].set_ylim(44, 70)  # the legend below the curves
axes[0].set_ylabel("mean length (tokens, 10-step mean)")
axes[1].legend(fontsize=9, ncol=2, loc="lower right")
plt.show()

fig, ax = plt.subplots(figsize=(7.3, 3.2), constrained_layout=True)
for (loss, seed), (m, _, _) in full.items():
    ax.plot(m["step"], m["length_gap_in_group"].rolling(10, min_periods=1).mean(),
            ls="-" if seed == 0 else "--", color="C0" if loss == "grpo" else "C1",
            label=f"{loss}, seed {seed}")
ax.axhline(0, color="gray", lw=0.8)
ax.set_title("within a group: wrong minus right length (10-step mean)", fontsize=10)
ax.set_xlabel("step")
ax.set_ylabel("tokens")
ax.legend(fontsize=9, ncol=2)
ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
full_rows = {}
for (loss, seed), (m, ev, info) in full.items():
    early, late = m[m["step"] <= 50], m[m["step"] > 100]
    full_rows[f"{loss}, seed {seed}"] = {
        "held-out strict @150": ev.loc[150, "strict_acc"],
        "wrong: len steps 1-50": early["length_wrong"].mean(),
        "wrong: len steps 101-150": late["length_wrong"].mean(),
        "right: len steps 101-150": late["length_correct"].mean(),
        "gap wrong - right, 101-150": (late["length_wrong"]
                                       - late["length_correct"]).mean(),
        "gap in group, 101-150": late["length_gap_in_group"].mean()}
full_table = pd.DataFrame(full_rows).T
display(full_table.round(3))
for col in ("gap wrong - right, 101-150", "gap in group, 101-150"):
    gap = {loss: full_table.loc[[f"{loss}, seed 0", f"{loss}, seed 1"], col].mean()
           for loss in ("grpo", "dr_grpo")}
    print(f"{col}, mean of two seeds: grpo {gap['grpo']:+.1f} tokens, "
          f"dr_grpo {gap['dr_grpo']:+.1f} tokens")

# %% [markdown]
# Why would wrong answers be longer under *both* losses? A trace's length here is set
# by the problem: one "First ..., now ..." step per operator. If the errors that
# survive training sit on the problems with more operators, the wrong answers are
# longer whatever the loss does. Count, by number of operators, the held-out problems
# that the 30-step `grpo` model above still gets wrong:

# %%
# NBVAL_IGNORE_OUTPUT
held = results["grpo"][3].copy()  # greedy held-out answers of the 30-step grpo model
held["operators"] = held["question"].str.count(r"[-+*/]")
ops = held.groupby("operators").agg(problems=("correct", "size"),
                                    wrong=("correct", lambda c: int((~c).sum())),
                                    mean_length=("length", "mean"))
ops["share wrong"] = ops["wrong"] / ops["problems"]
ops["share of all errors"] = ops["wrong"] / ops["wrong"].sum()
display(ops.round(3))
wrong_ops = held.loc[~held["correct"], "operators"].mean()
say(f"The wrong answers have {wrong_ops:.2f} operators on average, against "
    f"{held['operators'].mean():.2f} for all held-out problems.")

# %% [markdown]
# **Reading it.** The cell below reads the full-length table and the operator table:

# %%
# NBVAL_IGNORE_OUTPUT
pooled = full_table["gap wrong - right, 101-150"]
in_group = full_table["gap in group, 101-150"]
grew = (full_table["wrong: len steps 101-150"]
        > full_table["wrong: len steps 1-50"]).sum()
by_loss = {loss: pooled[[f"{loss}, seed 0", f"{loss}, seed 1"]] for loss in
           ("grpo", "dr_grpo")}
loss_diff = abs(by_loss["grpo"].mean() - by_loss["dr_grpo"].mean())
seed_spread = max(abs(v.iloc[0] - v.iloc[1]) for v in by_loss.values())
say(f"In {grew} of the 4 full-length runs the wrong answers are longer in steps "
    f"101-150 than in steps 1-50, and in the last 50 steps they are "
    f"{pooled.min():.1f} to {pooled.max():.1f} tokens longer than the right ones, "
    f"under `dr_grpo` as well as under `grpo` (the first figure and the first column "
    f"of gaps). Inside a group the picture is different: the wrong and the right "
    f"answers to the *same* problem differ by {in_group.min():+.1f} to "
    f"{in_group.max():+.1f} tokens (the second figure and the last column). The two "
    f"losses' mean pooled gaps differ by {loss_diff:.1f} tokens; two seeds of one "
    f"loss differ by up to {seed_spread:.1f}.")

# %% [markdown]
# So on this task "wrong answers are longer" is mostly **selection**: the errors that
# survive training sit on the problems with more operators, whose traces are longer
# (the operator table), and pooling all the answers of a step mixes problems of
# different lengths. Whatever part of the gap `grpo`'s per-response normalisation adds
# is at most the difference between the two losses' gaps, which is small next to the
# gap itself and comparable to the spread between two seeds of one loss. That does not
# contradict {ref}`ch08-aggregation`: the per-token weights do differ exactly as
# computed there. It says that on a task whose lengths are set by the problem, the
# length bias has little room to act, and that a length trend in a run's logs is
# evidence about the loss only once it has been compared within groups, and with a run
# that differs in the loss alone, on the same problems.

# %% [markdown]
# (ch08-one-operator)=
# ### The one-operator problems
#
# The operator table holds a surprise: the problems with a single operator, the
# easiest there are, are not all solved, while the two-operator problems are. Put the
# wrong one-operator answers next to what the base model wrote for the same problems:

# %%
# NBVAL_IGNORE_OUTPUT
base_by_id = base_samples.set_index("prompt_index")
one = held[held["operators"] == 1]
one_base = base_by_id.loc[one["prompt_index"]]
one_wrong = one[~one["correct"]]
for _, row in one_wrong.iterrows():
    before = base_by_id.loc[row["prompt_index"], "completion"]
    print(f"{row['question']} = {row['answer']}\n  base model: {before[:60]}\n"
          f"  after RL:   {row['completion'][:60]}")
untagged_before = ~base_by_id.loc[one_wrong["prompt_index"], "formatted"]
say(f"Before training the base model had the right number for "
    f"{int(one_base['lenient_correct'].sum())} of the {len(one)} one-operator "
    f"problems (lenient parsing); its {int((~one_base['formatted']).sum())} failures "
    f"on them under strict parsing were all of format, an answer written as plain "
    f"text without the tags. After {STEPS} steps of RL every one-operator answer "
    f"is well formatted ({one['formatted'].mean():.0%}), and {len(one_wrong)} of "
    f"them have a wrong number, {int(untagged_before.sum())} of those on problems "
    f"the base model had answered without tags. The two-operator problems have "
    f"{int(ops.loc[2, 'wrong']) if 2 in ops.index else 0} errors left.")

# %% [markdown]
# The errors are slips in the one step of the trace, written inside the tags, on
# problems whose number the base model had right, most of them in plain text. The
# corpus of {doc}`05_tiny_base_model` explains why this form is fragile: it writes
# most one-operator answers with a broken format, mostly as plain text (the rate is
# printed below), so the tagged one-step trace `<think> 9 * 2 = 18. </think>` is a
# form the model has seen far less often for these problems than the plain-text one,
# while the two-operator problems are mostly written with the tags (all but those with
# parentheses, which the corpus breaks as often as the one-operator ones). The format
# reward and the accuracy reward, which reads only the `<answer>` block, pay nothing
# for a plain-text answer, so RL moves every answer into the tags, and a few facts do
# not survive the move. These are a handful of problems, so the exact rate is noisy;
# the lesson is general. RL moves the model towards what is rewarded along the easiest
# path, and a rare form can carry less of the model's skill than a common one, so a
# held-out evaluation split by problem type catches regressions that the mean accuracy
# hides.

# %%
print(f"corpus: share of one-operator answers written with a broken format: "
      f"{CorpusMix().format_rate:.0%}")

# %% [markdown]
# ### The same seed on another CPU
#
# How large is "the spread between two seeds"? An earlier run of
# {doc}`chapter 7 <07_full_loop>`'s configuration with the `transformers` rollout,
# `data/runs/ch07_r1_zero_seed0_cpu`, is the `grpo, seed 0` run above: same config,
# same seed, same trainer, executed after it on another machine, with two torch
# threads where the run above had one. Compare the two step by step:

# %%
# NBVAL_IGNORE_OUTPUT
chapter7_run = load_run("ch07_r1_zero_seed0_cpu")
other, other_eval = chapter7_run.metrics, chapter7_run.evals
first_run = full["grpo", 0][0]
d_norm = (other["grad_norm"] - first_run["grad_norm"]).abs()
part = parting_step(other, first_run)  # first step whose rewards or lengths differ
acc_first = full["grpo", 0][1].loc[150, "strict_acc"]
acc_other = other_eval.loc[150, "strict_acc"]
acc_all = full_table["held-out strict @150"]
late = other[other["step"] > 100]
print(f"step 1: |difference in gradient norm| = {d_norm.iloc[0]:.1e} "
      f"(of {first_run['grad_norm'].iloc[0]:.3f})")
print("sampled rewards and lengths: " + (
    "identical in every step" if part is None else
    f"identical through step {part - 1}, different from step {part} on"))
print(f"held-out strict at step 150: first CPU {acc_first:.3f}, other CPU "
      f"{acc_other:.3f}; the four runs above: {acc_all.min():.3f} to "
      f"{acc_all.max():.3f}")
print(f"other CPU, steps 101-150: gap wrong - right "
      f"{(late['length_wrong'] - late['length_correct']).mean():+.1f} tokens, "
      f"gap in group {late['length_gap_in_group'].mean():+.1f} tokens")

# %% [markdown]
# Two CPUs, or two thread counts, can round the same float32 sums differently (their
# kernels add in a different order), and then the very first gradient already differs
# in its last digits (the first printed line). For a while that changes nothing
# visible: the sampled tokens are the same as long as no probability lands on the
# other side of a random draw. Once one token differs, the two runs see different
# completions, different advantages and different updates, and from then on they are
# two different runs, as two seeds would be: they may end at the same accuracy or a
# few points apart (compare the printed accuracies and length gaps with the range of
# the four seeded runs). So "seed 0" names a run only together with the machine and
# its thread count, and a single run per variant cannot separate variants whose
# accuracies differ by a few points.

# %% [markdown]
# (ch08-two-seeds)=
# ### Six variants, two seeds, full length
#
# So the repository keeps two full-length runs of *every* variant above, not only of
# `grpo` and `dr_grpo`: chapter 7's configuration as it is (150 steps of 16 prompts,
# held-out evaluation on 500 problems at step 150), one override each, seeds 0 and 1,
# one torch thread, with the command in each run's `README.md`. One difference from
# the short runs: the configuration's `micro_batch_size` is 64, so each step's 128
# completions form two micro-batches, and `bnpo` (token mean of a micro-batch) and
# `dapo` (token mean of the step) are no longer the same run. `grpo_lib.runs` reads
# the runs stored in `data/runs/` back and prints each setting as the mean of its seeds
# with their range:

# %%
show_source(seed_table, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
VARIANT_RUNS = {"grpo": "ch08_grpo", "bnpo": "ch08_bnpo", "dr_grpo": "ch08_dr_grpo",
                "dapo": "ch08_dapo", "reinforce": "ch08_reinforce",
                "grpo, scale none": "ch08_scale_none"}
two_seeds = {name: load_seeds(stem) for name, stem in VARIANT_RUNS.items()}
variant_table = seed_table(two_seeds, {
    "held-out strict @150": final_eval,
    "train acc, last 25": lambda rs: late_mean(rs, "accuracy"),
    "length, last 25": lambda rs: late_mean(rs, "completion_length"),
    "entropy, last 25": lambda rs: late_mean(rs, "entropy"),
    "equal-reward groups, last 25": lambda rs: late_mean(rs, "zero_std_frac"),
    "grad norm, mean": lambda rs: [r.metrics["grad_norm"].mean() for r in rs]},
    digits={"length, last 25": 1, "entropy, last 25": 4})
variant_table

# %% [markdown]
# Each cell is "mean (lowest seed-highest seed)". The training curves from step 10
# on, the mean of the two seeds as a line and, for the accuracy, their range as a
# band:

# %%
fig, axes = plt.subplots(2, 1, figsize=(7.3, 6.0), sharex=True,
                         constrained_layout=True)
for ax, (col, label) in zip(axes, [("accuracy", "training accuracy"),
                                   ("completion_length", "length (tokens)")]):
    for name, rs in two_seeds.items():
        curves = np.stack([r.metrics[col].rolling(10, min_periods=10).mean()
                           for r in rs])  # (seeds, steps), from step 10
        step = rs[0].metrics["step"]
        line, = ax.plot(step, curves.mean(0), label=name)
        if col == "accuracy":  # the length bands overlap into one smear
            ax.fill_between(step, curves.min(0), curves.max(0), alpha=0.15,
                            color=line.get_color())
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
axes[0].set_ylim(0.4, 1.0)
axes[0].legend(fontsize=9, ncol=3, loc="lower right")
axes[0].set_title("150 steps x 16 prompts x G=8, two seeds (10-step means)")
axes[-1].set_xlabel("step")
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
held_out = {name: final_eval(rs) for name, rs in two_seeds.items()}
means = {name: np.mean(v) for name, v in held_out.items()}
seed_gap = max(max(v) - min(v) for v in held_out.values())
p_mean = np.mean(list(means.values()))
std_err = np.sqrt(p_mean * (1 - p_mean) / 500)  # one evaluation on 500 problems
pairs = [(a, b) for i, a in enumerate(held_out) for b in list(held_out)[i + 1:]]
ordered = [(a, b) for a, b in pairs
           if seed_order(held_out[a], held_out[b]) != "overlap"]
rf, dr = two_seeds["reinforce"], two_seeds["dr_grpo"]
first_ratio = [a.metrics["grad_norm"].iloc[0] / b.metrics["grad_norm"].iloc[0]
               for a, b in zip(rf, dr)]
clipped = np.mean([(r.metrics["grad_norm"] > 1.0).mean() for r in rf])
say(f"Held-out strict accuracy after 150 steps, mean of two seeds: from "
    f"{min(means.values()):.3f} ({min(means, key=means.get)}) to "
    f"{max(means.values()):.3f} ({max(means, key=means.get)}). Two seeds of one "
    f"variant differ by up to {seed_gap:.3f}, and one evaluation on 500 problems at "
    f"p = {p_mean:.2f} has a standard error of {std_err:.3f}. Of the {len(pairs)} "
    f"pairs of variants, {len(ordered)} have both seeds of one above both seeds of "
    f"the other: " + "; ".join(
        f"`{a}` {seed_order(held_out[a], held_out[b])} `{b}`" for a, b in ordered)
    + f". The first step's gradient of `reinforce` is "
    f"{' and '.join(f'{x:.4f}' for x in first_ratio)} times that of `dr_grpo` "
    f"(seeds 0 and 1), and `max_grad_norm=1` clips it in {clipped:.1%} of the steps.")

# %% [markdown]
# **Reading it.** At full length every variant learns the task, and the columns that
# describe training agree closely: the sampled accuracy of the last 25 steps, the
# entropy, the share of groups with equal rewards, and the length, to a tenth of a
# token. A few differences sit outside the seeds' ranges, all small: `bnpo` samples a
# little less accurately than some variants and with a little more entropy than
# others, both its seeds beyond both of theirs, and `reinforce`, with both seeds above
# every other run, has a slightly larger share of groups with equal rewards. The length
# biases of {ref}`ch08-aggregation` have no room to act on a task whose trace lengths
# are set by the problem, as the right-and-wrong lengths above already showed for
# `grpo` and `dr_grpo`. The gradient norms differ by the factors each variant puts in
# front of the same terms, and AdamW divides such factors out. `reinforce` is the
# extreme case: with $\mu = 1$ its gradient is exactly `dr_grpo`'s times
# $L_{\max} = 96$ (the first step's gradients, printed above), and the gradient clip
# then rescales it to norm 1 in almost every step.
#
# The held-out accuracies part by a couple of points, which is where two seeds are
# thinnest. The two variants with a constant denominator, `dr_grpo` and `reinforce`,
# end lowest, and both their seeds sit below both seeds of some other variants (the
# pairs listed above). Yet those two are the same update up to a factor per step, and
# a two-point gap is about two standard errors of a single evaluation. So these runs
# do not show that one variant is better on this task. They show six variants within
# a few points of one another after 150 steps, and that a claim about a two-point gap
# needs more seeds and more held-out problems than this. The papers' claims for these
# losses concern long reasoning whose length the policy chooses: wrong answers that
# grow longer under GRPO's normalisation {cite}`liu2025drgrpo`, long chains of
# thought underweighted by a per-sequence mean {cite}`yu2025dapo`. Arithmetic traces
# whose length the problem sets are not that regime.

# %% [markdown]
# ### What to notice
#
# The cell below turns the comparison table into sentences, so that every number in
# them comes from the runs above.

# %%
# NBVAL_IGNORE_OUTPUT
c = comparison
trained = c.drop("base model")
acc = trained["held-out strict"]
best = "; ".join(acc.index[acc == acc.max()])  # every variant tied for best
worst = "; ".join(acc.index[acc == acc.min()])
say(f"- Base model: held-out strict {c.loc['base model', 'held-out strict']:.3f}; "
    f"after {STEPS} steps the best: {best} ({acc.max():.3f}); the weakest: {worst} "
    f"({acc.min():.3f}).\n"
    f"- After 150 steps, two seeds each, held-out strict (mean and range): "
    + ", ".join(f"{n} {mean_range(v)}" for n, v in held_out.items()) + ".\n"
    f"- Length, early -> late third of training: " + ", ".join(
        f"{n} {c.loc[n, 'length early']:.1f} -> {c.loc[n, 'length late']:.1f}"
        for n in trained.index) + ".\n"
    f"- Largest clip fraction in any step of any run: "
    f"{trained['clip frac (low+high)'].max():.3f} (mu = 1).\n"
    f"- Mean gradient norm before clipping: " + ", ".join(
        f"{n} {c.loc[n, 'grad norm']:.3f}" for n in trained.index) + ".\n"
    f"- Mean logged loss: " + ", ".join(
        f"{n} {c.loc[n, 'loss mean']:+.4f}" for n in trained.index) + ".")

# %% [markdown]
# The first line comes from the short runs: a few dozen steps, a few prompts per step,
# one seed and a few hundred held-out problems, so a difference of a few points
# between two variants is within what another seed would change. The second comes
# from the full-length runs, two seeds each ({ref}`ch08-two-seeds`): rank variants by
# that one, as far as two seeds allow. What the short runs do show reliably:
#
# - **Clipping never acts** with $\mu = 1$: the largest clip fraction above is 0,
#   because every policy ratio $\rho_{i,t}$ is exactly 1 on the one pass over each
#   batch. The clip (and DAPO's clip-higher) only matters with `num_iterations > 1`.
# - **Constant factors mostly wash out.** `dr_grpo` divides by the constant
#   $B L_{\max}$, a smaller gradient than `grpo`'s (see the gradient norms), and
#   `reinforce` sums over tokens, a much larger one, which `max_grad_norm=1` then
#   clips. AdamW divides each update by a running estimate of the gradient's size,
#   so a constant factor in the loss changes little; what changes the learning is
#   how the weight is *distributed* over tokens and completions
#   ({ref}`ch08-aggregation`).
# - **The logged loss is not a learning curve.** Under `grpo` with $\mu = 1$ its
#   value is zero up to rounding in every step (each completion contributes
#   $-\hat A_i$ and a group's advantages sum to zero); the token-level variants log
#   $-\sum_i \hat A_i |o_i| / N$, the length-weighted advantage, whose sign says
#   whether the longer completions of the step were the better or the worse ones;
#   REINFORCE logs $-\frac1B \sum_i \hat A_i \log \pi_\theta(o_i)$.
#   {ref}`ch09-loss-zero` takes this apart.
# - **`bnpo` and `dapo` are the same short run**: there every step is one
#   micro-batch (`micro_batch_size` = the whole batch), so "token mean of the
#   micro-batch" and "token mean of the step" coincide ({ref}`ch08-toy-batch`). They
#   differ only with gradient accumulation, as in the full-length runs, whose steps
#   have two micro-batches.
# - **Where the length went.** In the right/wrong table, the right answers keep about
#   the base model's length in every variant, and the wrong answers that remain are
#   longer. The full-length runs above show the same gap under `grpo` and `dr_grpo`:
#   it comes from which problems stay wrong, not from the loss.
# - **A mean hides a regression.** RL fixed every two-operator problem and, on the way,
#   broke a few one-operator facts whose tagged form the model had rarely seen
#   ({ref}`ch08-one-operator`).

# %%
shutil.rmtree(runs_dir, ignore_errors=True)  # the runs were only needed for this page

# %% [markdown]
# (ch08-past-first-pass)=
# ## Past the first pass: $\mu > 1$, GSPO and CISPO
#
# Every run so far made one pass over each batch, so every ratio was 1 and the clip
# never acted. PPO's idea is to take several optimizer steps on one batch
# {cite}`schulman2017ppo`: `num_iterations` $= \mu$. The ratios then move away from 1
# on the second pass, and what the loss does with them starts to matter. Two newer
# losses change exactly that part:
#
# | switch | the ratio and what is clipped | from |
# | --- | --- | --- |
# | (default) | one ratio per token; the clip zeroes the gradient of a token whose ratio left $[1-\varepsilon_{\mathrm{low}}, 1+\varepsilon_{\mathrm{high}}]$ on the side its advantage pushes toward | PPO, GRPO |
# | `importance_sampling_level="sequence"` | one ratio per completion, the geometric mean of its tokens' ratios; the clip keeps or drops the whole completion | GSPO {cite}`zheng2025gspo` |
# | `loss_type="cispo"` | one ratio per token, used as a detached weight capped at $\varepsilon_{\max}$; no token loses its gradient | CISPO {cite}`minimax2025m1` |
#
# The default's clip acts on one side only: a token with $\hat A_i > 0$ loses its
# gradient once $\rho_{i,t} > 1+\varepsilon_{\mathrm{high}}$, one with $\hat A_i < 0$
# once $\rho_{i,t} < 1-\varepsilon_{\mathrm{low}}$; a token past the other bound keeps
# its gradient.
#
# GSPO's ratio $s_i$ is the geometric mean of the token ratios,
# $\log s_i = \frac{1}{\lvert o_i\rvert}\sum_t \log\rho_{i,t}$. Because it averages,
# it moves far less than one token's ratio, so GSPO clips to
# $[1 - 3\cdot10^{-4}, 1 + 4\cdot10^{-4}]$, not to $0.2$ (its section 5.1). CISPO's
# weight is $\mathrm{sg}(\min(\rho_{i,t}, \varepsilon_{\max}))$, multiplied by
# $\hat A_i \log\pi_\theta(o_{i,t})$ as in REINFORCE. The tokens are averaged as in
# `dapo`. TRL's documentation gives $\varepsilon_{\max} = 5$, passed as `epsilon_high`.
# Both are one short function in `grpo_lib.losses`:

# %%
show_source(losses.sequence_log_ratio, docstring=False)
show_source(losses.cispo_token_loss, docstring=False)

# %% [markdown]
# On one token whose ratio has reached $\rho = 2$ with $\hat A = +1$, the three losses
# give these gradients:

# %%
# NBVAL_CHECK_OUTPUT
def one_token_grad(ratio=2.0, advantage=1.0, **kw):
    """dL/dlogp of one token with this ratio and advantage, and its clipped share."""
    logp = torch.tensor([[float(np.log(ratio))]], requires_grad=True)
    loss, stats = policy_loss(logp, torch.zeros(1, 1), torch.tensor([advantage]),
                              torch.ones(1, 1), **kw)
    (grad,) = torch.autograd.grad(loss, logp)
    return grad.item(), stats["clip_frac_high"]


for name, kw in [("grpo, epsilon 0.2", {}),
                 ("gspo, epsilon 3e-4/4e-4",
                  dict(importance_sampling_level="sequence", epsilon=3e-4,
                       epsilon_high=4e-4)),
                 ("cispo, cap 5", dict(loss_type="cispo", epsilon_high=5.0)),
                 ("cispo, cap 1.5", dict(loss_type="cispo", epsilon_high=1.5))]:
    grad, clipped = one_token_grad(**kw)
    print(f"{name:>24}: dL/dlogp = {grad:+.2f}, clipped/capped share {clipped:.0f}")

# %% [markdown]
# The clipped losses give this token no gradient. CISPO gives it
# $-\min(2, \varepsilon_{\max})$.
# On the first pass both GSPO and CISPO coincide with losses we already have. With
# all ratios 1, GSPO's sequence ratio has the gradient
# $\frac{1}{|o_i|}\sum_t \nabla\log\pi_\theta(o_{i,t})$, which is GRPO's. CISPO's
# weight is 1, which leaves the token-mean REINFORCE of `dapo`:

# %%
# NBVAL_CHECK_OUTPUT
def first_pass_grad(**kw):
    logp = torch.full(toy_mask.shape, -1.0, requires_grad=True)
    loss, _ = policy_loss(logp, None, toy_adv, toy_mask,
                          max_completion_length=L_MAX, **kw)
    (grad,) = torch.autograd.grad(loss, logp)
    return grad


same_gspo = torch.allclose(first_pass_grad(),
                           first_pass_grad(importance_sampling_level="sequence"))
same_cispo = torch.allclose(first_pass_grad(loss_type="dapo"),
                            first_pass_grad(loss_type="cispo", epsilon_high=5.0))
print(f"first pass, toy batch: gspo gradient == grpo gradient: {same_gspo}; "
      f"cispo gradient == dapo gradient: {same_cispo}")

# %% [markdown]
# `tests/test_losses.py` checks both losses against TRL's own `_compute_loss`. It
# covers GSPO as `importance_sampling_level="sequence"` and CISPO as
# `loss_type="cispo"`, off the first pass, with and without the KL term, with one and
# two micro-batches. Loss and gradients agree to $10^{-6}$.
#
# ### $\pi_{\mathrm{old}}$ is not $\pi_{\mathrm{ref}}$
#
# Two models' log-probs enter the full objective. A popular tutorial uses one for
# the other. **$\pi_{\mathrm{old}}$** is the policy that sampled this batch: the
# model being trained, as it was before this step's $\mu$ passes. It is the
# denominator of the ratio, so it is needed only when the batch feeds more than one
# update: $\mu > 1$, or the mini-batches of {ref}`ch08-mini-batches`.
# **$\pi_{\mathrm{ref}}$** is a frozen copy of the model from before training. The KL
# term pulls the policy towards it, so it is needed only when $\beta > 0$. In
# `GRPOTrainer._update` they are two lines, each computed only when its knob asks
# for it:

# %%
show_source(trainer.GRPOTrainer._update, start="with torch.no_grad():",
            end="model.train()")

# %% [markdown]
# ### The PPO half, run
#
# These are chapter 7's full runs (150 steps of 16 prompts, held-out evaluation on 500
# problems at step 150, and for most also at steps 0 and 75), two seeds each. Every
# run but one changes one thing:
#
# * $\mu = 2$ and $\mu = 4$: two and four passes per batch, GRPO's loss;
# * $\mu = 2$ at half the learning rate, $2.5 \cdot 10^{-4}$ (two changes, to test
#   one explanation of the $\mu = 2$ result);
# * GSPO and CISPO, each with $\mu = 2$;
# * $\beta = 0.04$ (DeepSeekMath's value) with $\mu = 1$: the KL term to the frozen
#   base model.
#
# The $\mu = 1$, $\beta = 0$ baseline is the pair of full-length `grpo` runs above.
# They were trained with the commands in each run's `README.md`, and this cell reads
# them:

# %%
# NBVAL_IGNORE_OUTPUT
PPO_RUNS = {"mu = 1 (baseline)": "ch08_grpo", "mu = 2": "ch08_mu2",
            "mu = 2, lr 2.5e-4": "ch08_mu2_lr2.5e-4", "mu = 4": "ch08_mu4",
            "GSPO, mu = 2": "ch08_gspo_mu2", "CISPO, mu = 2": "ch08_cispo_mu2",
            "beta = 0.04": "ch08_beta004"}
ppo = {(label, seed): (run.metrics, run.evals)
       for label, stem in PPO_RUNS.items()
       for seed, run in enumerate(load_seeds(stem))}
ppo_rows = []
for label in PPO_RUNS:
    pair = [ppo[label, seed] for seed in (0, 1)]
    acc = [ev.loc[150, "strict_acc"] for _, ev in pair]
    clip = [(m["clip_frac_low"] + m["clip_frac_high"]).mean() for m, _ in pair]
    ppo_rows.append({
        "run": label,
        "strict @150": np.mean(acc),
        "range": f"{min(acc):.3f}-{max(acc):.3f}",
        "clip fraction": np.mean(clip),
        "KL": np.mean([m["kl"].mean() for m, _ in pair]),
        "entropy, last 25": np.mean([m["entropy"].tail(25).mean() for m, _ in pair]),
        "seconds": round(np.mean([m["time_step"].sum() for m, _ in pair]))})
ppo_table = pd.DataFrame(ppo_rows).set_index("run")
ppo_table.round(4)

# %%
def seed_curves(label, series, window):
    """The two seeds' `series(metrics)`, as rolling means: (steps, [2, steps])."""
    ms = [ppo[label, seed][0] for seed in (0, 1)]
    runs = [series(m).rolling(window, min_periods=1).mean() for m in ms]
    return ms[0]["step"], np.stack(runs)


fig, axes = plt.subplots(3, 1, figsize=(7.3, 8.4), sharex=True,
                         constrained_layout=True)
panels = [(lambda m: m["clip_frac_low"] + m["clip_frac_high"], 5),
          (lambda m: m["entropy"], 5), (lambda m: m["accuracy"], 10)]
for label in PPO_RUNS:
    never = np.nansum(seed_curves(label, panels[0][0], 1)[1]) == 0  # no token, ever
    color = None
    for ax, (series, window) in zip(axes, panels):
        step, runs = seed_curves(label, series, window)  # mean line, range band
        line, = ax.plot(step, runs.mean(0), color=color,
                        label=label + (" (never clipped)" if never else "")
                        if ax is axes[0] else None)
        color = line.get_color()
        ax.fill_between(step, runs.min(0), runs.max(0), color=color, alpha=0.15)
axes[0].set_yscale("symlog", linthresh=1e-3)  # GSPO's ~0.1 and mu = 2's ~0.001
axes[0].set_ylim(bottom=0)
axes[0].set_ylabel("clip fraction (symlog)")
axes[1].set_ylabel("entropy (nats/token)")
axes[2].set_ylabel("training accuracy")
axes[2].set_xlabel("step")
axes[1].set_ylim(top=1.3 * axes[1].get_ylim()[1])  # room above the entropy curves
axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=9, ncol=2,
               loc="upper right")
axes[0].set_title("Chapter 7's run, one change each: mean and range of two seeds")
for ax in axes:
    ax.grid(alpha=0.3)
plt.show()

# %%
fig, ax = plt.subplots(figsize=(7.3, 3.0))
for seed in (0, 1):
    m = ppo["beta = 0.04", seed][0]
    ax.plot(m["step"], m["kl"], label=f"seed {seed}")
ax.set_xlabel("step")
ax.set_ylabel("KL to the base model (k3)")
ax.set_title("beta = 0.04: the KL term, per step")
ax.legend(fontsize=9)
ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
t = ppo_table
base = "mu = 1 (baseline)"
gspo_vs_grpo = (t.loc["GSPO, mu = 2", "clip fraction"]
                / t.loc["mu = 2", "clip fraction"])


def versus(run, other=base, name="$\\mu = 1$", column="strict_acc"):
    """How the two seeds of `run` sit against the two of `other` at step 150."""
    a = [ppo[run, s][1].loc[150, column] for s in (0, 1)]
    b = [ppo[other, s][1].loc[150, column] for s in (0, 1)]
    return compare_seeds(a, b, name)


half_lr = versus("mu = 2, lr 2.5e-4", "mu = 2", "$\\mu = 2$ at $5 \\cdot 10^{-4}$")
say(f"- Held-out strict accuracy after 150 steps, mean of two seeds (range): "
    + ", ".join(f"{n} {t.loc[n, 'strict @150']:.3f} "
                f"({t.loc[n, 'range']})" for n in t.index) + ". "
    + "; ".join(f"{n}: {versus(n)}" for n in t.index if n != base)
    + ".\n"
    f"- With $\\mu = 2$ the clip acts: on average "
    f"{t.loc['mu = 2', 'clip fraction']:.2%} of the tokens per step under "
    f"GRPO's loss ({t.loc['mu = 4', 'clip fraction']:.2%} with $\\mu = 4$), "
    f"{t.loc['GSPO, mu = 2', 'clip fraction']:.1%} under GSPO "
    f"({gspo_vs_grpo:.0f} times as many), against "
    f"{t.loc[base, 'clip fraction']:.0%} with $\\mu = 1$. CISPO's cap of 5 "
    f"binds on {t.loc['CISPO, mu = 2', 'clip fraction']:.3%} of its tokens.\n"
    f"- Entropy over the last 25 steps: " + ", ".join(
        f"{n} {t.loc[n, 'entropy, last 25']:.4f}" for n in t.index) + ".\n"
    f"- Seconds of steps, two runs at a time on the machine that trained them "
    f"(see the runs' `README.md`; other jobs ran beside most of them at times, so "
    f"these are upper bounds): " + ", ".join(
        f"{n} {t.loc[n, 'seconds']}" for n in t.index) + ".\n"
    f"- With $\\beta = 0.04$ the mean KL to the base model is "
    f"{t.loc['beta = 0.04', 'KL']:.4f} per token, so the penalty "
    f"$\\beta \\cdot$ KL is {0.04 * t.loc['beta = 0.04', 'KL']:.4f} per token.\n"
    f"- $\\mu = 2$ at the lower learning rate: {half_lr}; its clip fraction is "
    f"{t.loc['mu = 2, lr 2.5e-4', 'clip fraction']:.2%}.")

# %% [markdown]
# Two seeds per setting, 150 steps, on a task that $\mu = 1$ already takes to about
# 94%: these runs show mechanisms more than a ranking. Still, at chapter 7's learning
# rate every run with more than one pass ended below $\mu = 1$ in both seeds, and
# $\mu = 4$ lowest. One reading: several passes take a larger step per batch at a
# learning rate chosen for one pass. Halving the learning rate for $\mu = 2$ tests
# it, and the result fits the reading without proving it: that pair's range overlaps
# $\mu = 1$'s, with fewer tokens clipped, but with two seeds it also touches the
# range of $\mu = 2$ at the full rate. The clip acts only once the policy has moved
# between the passes. GSPO's sequence ratio
# leaves its narrow range far more often than a token ratio leaves $[0.8, 1.2]$; its
# paper reports the same gap, about
# two orders of magnitude, and argues that clipping whole sequences is the better
# signal. CISPO's cap at 5 almost never binds here, so on this task it is close to a
# token-mean REINFORCE that weights its second pass by the ratio. A second pass costs
# a second forward and backward pass over the batch, and the printed seconds grow
# with $\mu$ (upper bounds from a shared machine, so only roughly).
# The KL plot shows the policy leaving the base model within the first few dozen steps
# and then staying in the same range. At $\beta = 0.04$ the penalty per token is small
# next to advantages of order 1.

# %% [markdown]
# (ch08-mini-batches)=
# ### Several updates from one rollout: mini-batches
#
# $\mu$ passes take several updates from one rollout by reusing the whole batch.
# PPO's other way is to split it: `num_mini_batches` cuts each pass into mini-batches
# of whole groups, in order, and takes one optimizer update on each. Every update
# after the first is off-policy, so its ratios are taken against the old log-probs,
# computed once before the first update, and the clip acts on them as it does for
# $\mu > 1$. verl calls the mini-batch `ppo_mini_batch_size` (counted in prompts).
# TRL sets it with `steps_per_generation`, which counts micro-batches: the number of
# mini-batches times `gradient_accumulation_steps`. TRL also shuffles the rollout's
# rows before it cuts them, so the completions of a group land in different
# mini-batches; ours keeps each group in one unless `shuffle_mini_batches` is on.
# And TRL divides `dapo`'s token sum by the rollout's tokens over the number of
# mini-batches, where ours divides by each update's own tokens, as verl's
# `token-mean` does. The split, and the list of updates `_update` runs through:

# %%
show_source(trainer.mini_batches)
show_source(trainer.GRPOTrainer._update, start="updates = ", end="for mini in")

# %% [markdown]
# Chapter 7's run with 2 and with 4 mini-batches per rollout, two seeds each
# (`scripts/ch08_mini_batch_runs.sh`; with 4, micro-batches of 32 rows, so that each
# mini-batch of 4 groups is whole micro-batches), beside $\mu = 2$ and $\mu = 4$:
# the same number of updates per rollout, each on a half or a quarter of the batch
# instead of all of it; and the same two with the rows shuffled first, as TRL cuts
# them. Every run keeps chapter 7's learning rate and its warm-up of 5 updates, and
# the cosine schedule spans all its updates. The four mini-batch pairs ran together
# on one machine, days after the $\mu$ runs on another:

# %%
# NBVAL_IGNORE_OUTPUT
MINI_RUNS = {"mu = 1 (baseline)": "ch08_grpo", "mu = 2": "ch08_mu2",
             "2 mini-batches": "ch08_mb2", "mu = 4": "ch08_mu4",
             "4 mini-batches": "ch08_mb4",
             "2 mini-batches, shuffled": "ch08_mb2_shuffled",
             "4 mini-batches, shuffled": "ch08_mb4_shuffled"}
for label, stem in MINI_RUNS.items():
    for seed, run in enumerate(load_seeds(stem)):
        ppo.setdefault((label, seed), (run.metrics, run.evals))


def updates_per_rollout(stem):
    """mu x num_mini_batches, from the run's resolved config (runs from before
    num_mini_batches existed had one)."""
    config = json.loads((RUNS_DIR / f"{stem}_seed0_cpu" / "config.json").read_text())
    return config["num_iterations"] * config.get("num_mini_batches", 1)


mini_rows = []
for label, stem in MINI_RUNS.items():
    pair = [ppo[label, seed] for seed in (0, 1)]
    acc = [ev.loc[150, "strict_acc"] for _, ev in pair]
    mini_rows.append({
        "run": label,
        "updates per rollout": updates_per_rollout(stem),
        "strict @150": np.mean(acc),
        "range": f"{min(acc):.3f}-{max(acc):.3f}",
        "clip fraction": np.mean([(m["clip_frac_low"] + m["clip_frac_high"]).mean()
                                  for m, _ in pair]),
        "entropy, last 25": np.mean([m["entropy"].tail(25).mean() for m, _ in pair])})
mini_table = pd.DataFrame(mini_rows).set_index("run")
mini_table.round(4)

# %%
fig, axes = plt.subplots(2, 1, figsize=(7.3, 5.8), sharex=True,
                         constrained_layout=True)
for i, label in enumerate(k for k in MINI_RUNS if "shuffled" not in k):
    style = dict(color=f"C{i}", ls="--" if "mini" in label else "-")
    for ax, (series, window) in zip(axes, [
            (lambda m: m["accuracy"], 10),
            (lambda m: m["clip_frac_low"] + m["clip_frac_high"], 10)]):
        step, runs = seed_curves(label, series, window)  # [2, steps]
        ax.plot(step, runs.mean(0), label=label if ax is axes[0] else None, **style)
        ax.fill_between(step, runs.min(0), runs.max(0), color=style["color"],
                        alpha=0.12)
axes[0].set_ylabel("training accuracy")
axes[1].set_ylabel("clip fraction (symlog)")
axes[1].set_yscale("symlog", linthresh=1e-4)
axes[1].set_xlabel("step")
axes[0].set_title("mu passes (solid) or mini-batches (dashed): mean and range of "
                  "two seeds, 10-step means", fontsize=10)
fig.legend(loc="outside lower center", ncol=3, fontsize=9)
for ax in axes:
    ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
mt = mini_table
in_order = {n: n.split(",")[0] for n in mt.index if "shuffled" in n}  # its twin


def mu_name(k):
    return f"$\\mu = {k}$"


say(f"- Held-out strict accuracy after 150 steps, mean of two seeds (range): "
    + ", ".join(f"{n} {mt.loc[n, 'strict @150']:.3f} ({mt.loc[n, 'range']})"
                for n in mt.index) + ". "
    + "; ".join(f"{n}: {versus(n)}, {versus(n, 'mu = ' + n[0], mu_name(n[0]))}"
                for n in mt.index if "mini" in n and "shuffled" not in n) + ".\n"
    f"- Shuffled against in order: " + "; ".join(
        f"{n}: {versus(n)}, {versus(n, twin, twin)}, "
        f"{mt.loc[n, 'clip fraction'] / mt.loc[twin, 'clip fraction']:.1f} times its "
        f"clip fraction" for n, twin in in_order.items()) + ".\n"
    f"- Clip fraction, mean over the steps: " + ", ".join(
        f"{n} {mt.loc[n, 'clip fraction']:.2%}" for n in mt.index) + ".\n"
    f"- Entropy over the last 25 steps: " + ", ".join(
        f"{n} {mt.loc[n, 'entropy, last 25']:.4f}" for n in mt.index) + ".")

# %% [markdown]
# Both ways take the same number of updates from a rollout; they differ in what each
# update has already seen. A second pass pushes again on the tokens the first pass
# pushed, so its ratios have moved by that push. A later mini-batch holds groups no
# update has touched yet, whose ratios moved only as far as the updates on other
# groups carried them; that is why the mini-batch runs that keep groups whole clip
# several times less often than the passes with as many updates. At chapter 7's
# learning rate, more than one update per rollout cost held-out accuracy in every way
# tried. The compute differs as well: however many mini-batches, one pass makes one
# forward and backward pass over the batch, as $\mu = 1$ does, plus the forward pass
# for the old log-probs, where $\mu$ passes make $\mu$.
#
# Shuffled first, as TRL cuts them, the rows of a group spread over the
# mini-batches. Each update then holds completions of nearly all 16 prompts
# instead of the groups of 8 prompts (two mini-batches) or 4 (four), though its
# advantages no longer sum to zero inside it. On held-out accuracy two seeds do not
# show either order training better: with two mini-batches both shuffled seeds end
# below both seeds in order, with four the seeds overlap. The clip does tell the two
# orders apart. A later mini-batch now holds completions whose siblings, answers to
# the same prompt, an earlier update has already pushed, so their ratios have moved
# further than those of an untouched group, and the shuffled runs clip more often
# than the runs that keep groups whole, yet less often than $\mu$ passes with as
# many updates.

# %% [markdown]
# (ch08-four-knobs)=
# ## Four more knobs: a cap, a gate and two masks
#
# TRL 1.16 has four more switches, each acting on single terms of the loss. In
# `grpo_lib` each is a line or two, and `tests/test_losses.py` checks each against
# TRL's own `_compute_loss` (loss and gradients agree to $10^{-6}$):
#
# | knob | what it does | from |
# | --- | --- | --- |
# | `delta` $= \rho_{\max}$ | two-sided clipping: with $\hat A_i < 0$ PPO's min keeps the unclipped $\rho_{i,t}\hat A_i$, however large $\rho_{i,t}$ grows; this caps that ratio at $\rho_{\max} > 1+\varepsilon_{\mathrm{high}}$, past which the token has no gradient | INTELLECT-2 {cite}`primeintellect2025intellect2` ($\rho_{\max} = 4$); verl's "dual clip" (`clip_ratio_c`, 3 by default) |
# | `loss_type="sapo"`, `sapo_temperature_pos`, `sapo_temperature_neg` $= \gamma_+, \gamma_-$ | the clipped term becomes a smooth gate, $-\frac{4}{\gamma}\sigma\big(\gamma(\rho_{i,t}-1)\big)\hat A_i$, with $\gamma = \gamma_+$ when $\hat A_i > 0$ and $\gamma_-$ otherwise | SAPO {cite}`gao2025sapo` ($\gamma_+ = 1$, $\gamma_- = 1.05$) |
# | `top_entropy_quantile` $= \lambda$ | only the share $\lambda$ of a micro-batch's tokens with the highest entropy $H_{i,t}$ keep their policy term | {cite}`wang2025highentropy` ($\lambda = 0.2$) |
# | `off_policy_mask_threshold` $= \kappa$ | a completion with $\hat A_i < 0$ whose mean log-ratio $\frac{1}{\lvert o_i\rvert}\sum_t \big(\log\pi_{\theta_{\mathrm{old}}} - \log\pi_\theta\big)$ exceeds $\kappa$ loses its policy term | DeepSeek-V3.2 {cite}`deepseekai2025v32` |
#
# None of them touches the KL term. The gate and the two masks:

# %%
show_source(losses.sapo_token_loss, docstring=False)
show_source(losses.high_entropy_mask, docstring=False)
show_source(losses.off_policy_sequence_mask, docstring=False)

# %% [markdown]
# The cap is one line of `clipped_token_loss`, `ratio = ratio.clamp(max=delta)`.
# Since $\rho_{\max}$ lies above the clip range, clipping the capped ratio gives the
# same clipped term. What each does to one token is easiest to see in its gradient
# weight, $-\partial\ell_{i,t}/\partial\log\pi_\theta(o_{i,t})$ divided by
# $\hat A_i$, as the ratio moves (CISPO from the section above, for comparison):

# %%
# NBVAL_CHECK_OUTPUT
def token_weight(ratio, advantage, **kw):
    """-dL/dlogp / A for one token with this ratio and advantage."""
    grad, _ = one_token_grad(ratio, advantage, **kw)
    return 0.0 - grad / advantage  # 0.0 - ...: no "-0.00" for a zero weight


GATES = {"grpo (clip 0.2)": {}, "two-sided, rho_max 2": dict(delta=2.0),
         "sapo": dict(loss_type="sapo"),
         "cispo, cap 5": dict(loss_type="cispo", epsilon_high=5.0)}
shown = [0.5, 0.9, 1.0, 1.1, 1.5, 2.5, 5.0]
weights = pd.DataFrame({(f"A {a:+.0f}", r): {n: token_weight(r, a, **kw)
                                             for n, kw in GATES.items()}
                        for a in (1.0, -1.0) for r in shown})
weights.columns.names = ["advantage", "ratio"]
print(weights.to_string(float_format=lambda v: f"{v:.2f}"))

# %%
grid = np.linspace(0.05, 6.0, 400)
STYLES = {"grpo (clip 0.2)": dict(lw=5, alpha=0.3),  # wide: the others run over it
          "two-sided, rho_max 2": dict(lw=1.6), "sapo": dict(lw=1.6),
          "cispo, cap 5": dict(lw=1.4, ls="--")}
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.6), sharey=True,
                         layout="constrained")
for ax, a in zip(axes, (1.0, -1.0)):
    for name, kw in GATES.items():
        ax.plot(grid, [token_weight(r, a, **kw) for r in grid], label=name,
                **STYLES[name])
    ax.set_title(f"advantage {a:+.0f}")
    ax.set_xlabel("ratio")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("gradient weight")
axes[0].set_ylim(-0.1, 3.2)  # grpo's and cispo's weights with A < 0 go on rising
for ax, note in zip(axes, ("cispo: up to its cap, 5", "cispo: up to its cap, 5;\n"
                                                      "grpo: without bound")):
    ax.text(0.97, 0.97, note, transform=ax.transAxes, ha="right", va="top",
            fontsize=9)  # both leave the top of the panel
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4,
           fontsize=9)
plt.show()

# %% [markdown]
# With $\hat A > 0$, GRPO's clip drops the token at $1.2$ and two-sided clipping
# changes nothing there; with $\hat A < 0$ GRPO's weight grows with the ratio without
# bound and the cap cuts it to 0 at $\rho_{\max}$. SAPO's weight is close to GRPO's
# inside the clip range and does not drop at its edge: it is the gate's slope
# $4\sigma(1-\sigma)$ times the ratio, which at $\gamma = 1$ keeps it above 1 well
# past the clip range (the column at 2.5), and only then fades (the column at 5). A
# larger $\gamma$ narrows the gate.
#
# On the first pass over a batch every ratio is 1 and every mean log-ratio 0. There
# the cap does not bind, SAPO's slope $4\sigma(0)(1-\sigma(0))$ is exactly 1 and the
# off-policy mask keeps everything: three of the four give GRPO's gradient.

# %%
# NBVAL_CHECK_OUTPUT
keep_all = losses.off_policy_sequence_mask(
    toy_adv, torch.zeros_like(toy_mask), torch.zeros_like(toy_mask), toy_mask, 0.0)
same = {"two-sided (rho_max 2)": first_pass_grad(delta=2.0),
        "sapo": first_pass_grad(loss_type="sapo"),
        "off-policy mask (kappa 0)": first_pass_grad(keep=keep_all)}
print("first pass, toy batch, same gradient as grpo: " + "; ".join(
    f"{n} {torch.allclose(g, first_pass_grad())}" for n, g in same.items()))

# %% [markdown]
# Only the entropy mask acts on the first pass. Which tokens does it keep? One batch
# from the base model, the first prompts of the training set, $G = 8$:

# %%
# NBVAL_IGNORE_OUTPUT
base_model, base_tok = load_model_and_tokenizer(MODEL_DIR, device=P.device)
knob_rows = [train_set[i] for i in range(PROMPTS)]
knob_batch = generate(base_model, base_tok,
                      [chat_prompt(r["question"]) for r in knob_rows],
                      num_generations=8, max_new_tokens=96, seed=0)
knob_rewards = torch.tensor(combine_rewards([accuracy_reward, format_reward],
                                            [1.0, 0.1])(
    knob_batch.texts, answer=[r["answer"] for r in knob_rows for _ in range(8)]))
knob_adv = group_advantages(knob_rewards, 8).to(P.device)  # [B]
knob_mask = knob_batch.completion_mask.float()  # [B, C]
knob_logp, knob_ent = sequence_logprobs(
    base_model, knob_batch.prompt_ids, knob_batch.prompt_mask,
    knob_batch.completion_ids, knob_batch.completion_mask, return_entropy=True)
kept = losses.high_entropy_mask(knob_ent.detach(), knob_mask, 0.2)  # [B, C]
pieces = pd.DataFrame({
    "token": [base_tok.decode([t]) for t in knob_batch.completion_ids[
        knob_mask.bool()].tolist()],
    "entropy": knob_ent.detach()[knob_mask.bool()].tolist(),
    "kept": kept[knob_mask.bool()].bool().tolist()})
forks = pieces.groupby("token").agg(count=("kept", "size"), kept=("kept", "mean"),
                                    entropy=("entropy", "mean"))
forks = forks[forks["count"] >= 20].sort_values("kept", ascending=False)
print(f"{len(pieces):,} completion tokens, {pieces['kept'].mean():.1%} kept; mean "
      f"entropy {pieces['entropy'].mean():.3f} nats, "
      f"{pieces.loc[pieces['kept'], 'entropy'].mean():.3f} among the kept")
print("tokens seen 20 times or more, by the share of them kept:")
print(forks.head(8).to_string(float_format=lambda v: f"{v:.2f}"))
opens = pd.Series([t.split("</think>")[0] for t in knob_batch.texts])
print(f"of {len(opens)} completions: {int(opens.str.startswith('<think>').sum())} "
      f"open with <think>; {int(opens.str.contains('First').sum())} word their steps "
      f"in English (First ...), {int(opens.str.contains('首先').sum())} in Chinese "
      f"(首先 ...)")

# %%
# NBVAL_IGNORE_OUTPUT
top = forks.head(3)
lift = pieces.loc[pieces["kept"], "entropy"].mean() / pieces["entropy"].mean()
say(f"The kept tokens carry {lift:.1f} times the mean entropy of the batch. The "
    f"tokens most often kept are "
    + ", ".join(f"`{t.strip() or repr(t)}` ({k:.0%} of {int(c)})"
                for t, k, c in zip(top.index, top["kept"], top["count"]))
    + ".")

# %% [markdown]
# These are the places where the base model hesitates: whether a completion opens
# with the `<think>` tag at all, and whether it words its first step `First` or
# `首先` (the mixed-language habit that {doc}`chapter 11 <11_language_consistency>`
# trains away). Once a step is set up, most of the tokens that follow are close to
# certain, with the low mean entropy printed above.

# %% [markdown]
# The cap and the off-policy mask need a policy that has moved. Take one AdamW step
# on this batch with GRPO's loss, as the first pass of a $\mu = 2$ step does, then
# read the second pass's ratios. Chapter 7's schedule starts its warm-up at
# $\eta/5 = 10^{-4}$ and peaks at $\eta = 5 \cdot 10^{-4}$; the table takes one step
# at each:

# %%
# NBVAL_IGNORE_OUTPUT
def second_pass(lr):
    """Ratios and mean log-ratios after one AdamW step of GRPO's loss at `lr`."""
    policy = copy.deepcopy(base_model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    ids = (knob_batch.prompt_ids, knob_batch.prompt_mask, knob_batch.completion_ids,
           knob_batch.completion_mask)
    logp = sequence_logprobs(policy, *ids)  # [B, C]
    policy_loss(logp, None, knob_adv, knob_mask)[0].backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    with torch.no_grad():
        new = sequence_logprobs(policy, *ids)  # [B, C]
    rho = (new - logp.detach()).exp()  # [B, C]
    gap = ((logp.detach() - new) * knob_mask).sum(1) / knob_mask.sum(1).clamp(min=1)
    return rho, gap  # [B, C], [B]


on = knob_mask.bool()
neg_tok = on & (knob_adv < 0)[:, None]  # tokens of completions with A < 0
moved, second_rho = {}, {}
for lr in (1e-4, 5e-4):
    rho, gap = second_pass(lr)
    second_rho[lr] = rho
    log_rho = rho[on & (knob_adv > 0)[:, None]].log().requires_grad_()  # [n]
    gate = losses.sapo_token_loss(log_rho.exp(), torch.ones_like(log_rho))
    (sapo_w,) = torch.autograd.grad(-gate.sum(), log_rho)  # each token's weight
    moved[f"{lr:.0e}"] = {
        "outside [0.8, 1.2]": ((rho < 0.8) | (rho > 1.2))[on].float().mean().item(),
        "largest ratio, A < 0": rho[neg_tok].max().item(),
        "capped, rho_max 4": int((rho[neg_tok] > 4).sum()),
        "capped, rho_max 2": int((rho[neg_tok] > 2).sum()),
        "masked, kappa 0.5": int((gap[knob_adv < 0] > 0.5).sum()),
        "masked, kappa 0.05": int((gap[knob_adv < 0] > 0.05).sum()),
        "sapo weight, A > 0: min": sapo_w.min().item()}
moved = pd.DataFrame(moved)
moved.columns.name = "one step at lr"
print(f"{int(neg_tok.sum())} tokens in {int((knob_adv < 0).sum())} completions "
      f"with A < 0, of {int(on.sum())} tokens")
print(moved.to_string(float_format=lambda v: f"{v:.4g}"))
del base_model

# %%
# NBVAL_IGNORE_OUTPUT
low, high = moved["1e-04"], moved["5e-04"]
say(f"After the smaller step, {low['outside [0.8, 1.2]']:.2%} of the tokens have "
    f"left GRPO's clip range and the largest ratio of a token with $\\hat A < 0$ is "
    f"{low['largest ratio, A < 0']:.2f}; after the peak step, "
    f"{high['outside [0.8, 1.2]']:.2%} and {high['largest ratio, A < 0']:.2f}. "
    f"INTELLECT-2's $\\rho_{{\\max}} = 4$ caps {int(low['capped, rho_max 4'])} and "
    f"{int(high['capped, rho_max 4'])} tokens, $\\rho_{{\\max}} = 2$ caps "
    f"{int(low['capped, rho_max 2'])} and {int(high['capped, rho_max 2'])}; "
    f"$\\kappa = 0.5$ masks {int(low['masked, kappa 0.5'])} and "
    f"{int(high['masked, kappa 0.5'])} completions, $\\kappa = 0.05$ masks "
    f"{int(low['masked, kappa 0.05'])} and {int(high['masked, kappa 0.05'])}. "
    f"SAPO's smallest weight on a token with $\\hat A > 0$ is "
    f"{low['sapo weight, A > 0: min']:.2f} and "
    f"{high['sapo weight, A > 0: min']:.2f}.")

# %% [markdown]
# A single step of a tiny model on a batch it has seen once moves few tokens far.
# These knobs were made for long completions, large models, many passes over stale
# batches and samplers whose numerics differ from the trainer's
# ({doc}`chapter 19 <19_fast_steps>` and {doc}`chapter 20 <20_async_rl>`), where a
# ratio of 4 or a mean log-ratio of 0.5 is common. Their effect here, each trained
# for chapter 7's full 150 steps with the trainer's default rollout engine: the
# entropy mask at $\lambda = 0.2$ with one pass, four seeds, against chapter 7's
# twenty-four seeds of the same engine and draw (they compute each group's prompt
# once, which gives the same log-probs to round-off; their seeds 0 to 3 ran on
# another CPU, so the twenty-four seeds' range is the fairer yardstick than a
# seed-by-seed pairing); and SAPO with $\mu = 2$, two
# seeds, against GRPO with $\mu = 2$ on the same engine. The commands are in each
# run's `README.md`:

# %%
# NBVAL_IGNORE_OUTPUT
BASELINE_SEEDS = list(range(12)) + list(range(24, 36))
baseline = load_seeds("ch07_r1_zero_fast_multinomial", seeds=BASELINE_SEEDS)
entropy20 = load_seeds("ch08_entropy20", seeds=range(4))
KNOB_RUNS = {f"grpo, mu 1, {len(baseline)} seeds": baseline,
             "grpo, mu 1, seeds 0-3": baseline[:4],
             "lambda 0.2, mu 1, seeds 0-3": entropy20,
             "grpo, mu 2, seeds 0-1": load_seeds("ch08_mu2_fast"),
             "sapo, mu 2, seeds 0-1": load_seeds("ch08_sapo_mu2")}


def strict_at_75(runs):
    """Held-out strict accuracy at step 75 (NaN where a run was not evaluated then)."""
    return [r.evals.loc[75, "strict_acc"] if 75 in r.evals.index else np.nan
            for r in runs]


knob_results = seed_table(KNOB_RUNS, {
    "strict @75": strict_at_75, "strict @150": final_eval,
    "entropy, last 25": lambda runs: late_mean(runs, "entropy")},
    digits={"entropy, last 25": 4})
print(knob_results.to_string())

# %%
# NBVAL_IGNORE_OUTPUT
base_acc = final_eval(baseline)
ent_acc = final_eval(KNOB_RUNS["lambda 0.2, mu 1, seeds 0-3"])
sapo, grpo2 = KNOB_RUNS["sapo, mu 2, seeds 0-1"], KNOB_RUNS["grpo, mu 2, seeds 0-1"]
below = sum(a < min(base_acc) for a in ent_acc)
under_mean = sum(a < np.mean(base_acc) for a in ent_acc)


def points(a, b):
    """Seed-by-seed differences a - b in points."""
    return ", ".join(f"{100 * (x - y):+.1f}" for x, y in zip(a, b))


say(f"With $\\lambda = 0.2$, seeds 0 to 3 end at "
    + ", ".join(f"{a:.3f}" for a in ent_acc)
    + ", against " + ", ".join(f"{b:.3f}" for b in base_acc[:4])
    + f" for seeds 0 to 3 with every token (on another CPU): a mean of "
    f"{np.mean(ent_acc):.3f} against "
    f"{np.mean(base_acc):.3f} for all {len(base_acc)} seeds with every token (range "
    f"{min(base_acc):.3f}-{max(base_acc):.3f}); {under_mean} of the 4 end below that "
    f"mean and "
    f"{below} below every one of the {len(base_acc)}. SAPO with "
    f"$\\mu = 2$ ends at {mean_range(final_eval(sapo))}, "
    + compare_seeds(final_eval(sapo), final_eval(grpo2), "GRPO with $\\mu = 2$")
    + f", which ends at {mean_range(final_eval(grpo2))}; seed by seed SAPO is "
    f"{points(final_eval(sapo), final_eval(grpo2))} points from GRPO at step 150 and "
    f"{points(strict_at_75(sapo), strict_at_75(grpo2))} at step 75.")

# %% [markdown]
# The entropy mask saves no work here: every token still goes through the forward
# and backward pass, and only the policy terms of four fifths of them are zeroed.
# On this model and task it gives up a little on average, with one seed below the
# whole spread of the runs that keep every token; Wang et al. report it as good as
# every token on an 8B model and better only on larger ones. SAPO's gate, unlike the
# clip, keeps a weight above 1 for tokens past the clip range (the table at the top
# of this section), so its second pass moves the policy further than GRPO's; one
# reading of its lower accuracy at step 75 is the one the $\mu > 1$ runs above
# suggest, a larger step per batch at a learning rate chosen for one pass. Two seeds
# cannot tell. The cap and the off-policy mask bound on nothing at INTELLECT-2's
# $\rho_{\max} = 4$ and TRL's example $\kappa = 0.5$ in the step measured above;
# set tighter, the cap bound on a few tokens and the mask on part of the completions
# with $\hat A < 0$ (the table above). They are there for the stale, long and
# mismatched batches of {doc}`chapter 20 <20_async_rl>` and of larger models.

# %% [markdown]
# (ch08-sequence-losses)=
# ## Two losses on the whole completion: LUSPO and VESPO
#
# TRL 1.16 has two more `loss_type`s, both from 2026 and both built on the ratio of
# a whole completion. GSPO, above, gives each completion one ratio $s_i$, the
# geometric mean of its token ratios, then averages the clipped term over each
# completion's tokens and over the completions, as `grpo` does: every completion
# weighs the same, whatever its length. LUSPO {cite}`liu2026luspo` traces GSPO's
# shrinking completions to that average and sums over each completion's tokens
# instead, so each completion's term counts $\lvert o_i\rvert$ times:
#
# $$\mathcal L_{\mathrm{LUSPO}} = -\frac1B\sum_{i=1}^{B} \lvert o_i\rvert
#   \min\big(s_i \hat A_i,\ \operatorname{clip}(s_i, 1-\varepsilon_{\mathrm{low}},
#   1+\varepsilon_{\mathrm{high}})\hat A_i\big)$$
#
# In `grpo_lib` that is the clipped term with the `reinforce` aggregation, one
# `elif` in `policy_loss`. VESPO {cite}`shen2026vespo` drops the clip. It weighs
# REINFORCE's term by a smooth function of the completion's whole ratio, the
# *product* of its token ratios, with no length normalisation:
#
# $$\ell_{i,t} = -\operatorname{sg}\big(\phi(w_i)\big)\,\hat A_i
#   \log\pi_\theta(o_{i,t}), \qquad \phi(w) = w^{m} e^{\nu(1-w)}, \qquad
#   w_i = \prod_{t} \rho_{i,t}$$
#
# with $(m, \nu) = (2, 3)$ when $\hat A_i \ge 0$ and $(3, 2)$ otherwise, aggregated
# as `dapo`. The paper and TRL call the power $k$ and the decay $\lambda$
# (`vespo_k_pos`, `vespo_lambda_pos`, `vespo_k_neg`, `vespo_lambda_neg`); here
# $\lambda$ is already the entropy mask's share. $\phi(1) = 1$, and $\phi$ peaks at
# $w = m/\nu$:

# %%
show_source(losses.vespo_weights, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
w_shown = [0.25, 0.5, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0]
phi_table = pd.DataFrame({
    f"A {sign}": losses.vespo_weights(torch.tensor(w_shown).log()[:, None],
                                      torch.full((len(w_shown), 1), a),
                                      torch.ones(len(w_shown), 1)).flatten().tolist()
    for sign, a in (("+1", 1.0), ("-1", -1.0))}, index=w_shown).T
phi_table.columns.name = "w"
print("VESPO's weight phi(w), TRL's default shape")
print(phi_table.to_string(float_format=lambda v: f"{v:.2f}"))
same_vespo = torch.allclose(first_pass_grad(loss_type="vespo"),
                            first_pass_grad(loss_type="dapo"))
same_luspo = torch.allclose(
    first_pass_grad(loss_type="luspo", importance_sampling_level="sequence"),
    first_pass_grad(loss_type="reinforce"))
print(f"first pass, toy batch: vespo gradient == dapo gradient: {same_vespo}; "
      f"luspo (sequence ratio) gradient == reinforce gradient: {same_luspo}")

# %%
grid_w = np.geomspace(0.05, 6.0, 400)
fig, ax = plt.subplots(figsize=(6.5, 3.2), layout="constrained")
for sign, a, style in (("+", 1.0, "-"), ("-", -1.0, "--")):
    phi = losses.vespo_weights(torch.tensor(grid_w).log()[:, None],
                               torch.full((len(grid_w), 1), a),
                               torch.ones(len(grid_w), 1)).flatten()
    ax.plot(grid_w, phi, style, lw=1.8, label=f"advantage {sign}")
ax.axvline(1.0, color="0.5", lw=0.8)
ax.set(xscale="log", xlabel="completion ratio w (product of its token ratios)",
       ylabel="phi(w)", title="VESPO's weight of a completion")
ax.grid(alpha=0.3)
ax.legend(fontsize=9)
plt.show()

# %% [markdown]
# On the first pass every ratio is 1: VESPO's gradient is DAPO's and LUSPO's is
# REINFORCE's, so both differ from their twins only on a second pass. For a
# completion whose tokens all drift the same way, the product moves far faster than
# the geometric mean: 50 token ratios of 1.01 give $s_i = 1.01$ but
# $w_i = 1.01^{50}$, past the clip range's $1 + \varepsilon$. The sequence ratios of
# the batch above, after the one AdamW step at each learning rate:

# %%
# NBVAL_IGNORE_OUTPUT
seq_rows = {}
for lr, rho in second_rho.items():
    log_rho = rho.log() * knob_mask  # [B, C]
    log_w = log_rho.sum(1)  # [B]: the product's log
    log_s = log_w / knob_mask.sum(1).clamp(min=1)  # [B]: the geometric mean's
    phi = losses.vespo_weights(log_rho, knob_adv[:, None], knob_mask).flatten()
    seq_rows[f"{lr:.0e}"] = {
        "|log s|, largest": log_s.abs().max().item(),
        "s outside [1 - 3e-4, 1 + 4e-4]": ((log_s.exp() < 1 - 3e-4)
                                            | (log_s.exp() > 1 + 4e-4)).float()
        .mean().item(),
        "w, smallest": log_w.exp().min().item(),
        "w, largest": log_w.exp().max().item(),
        "phi(w) below 0.5": (phi < 0.5).float().mean().item(),
        "phi(w), largest": phi.max().item()}
seq_moved = pd.DataFrame(seq_rows)
seq_moved.columns.name = "one step at lr"
print(f"{len(knob_adv)} completions, {int(knob_mask.sum())} tokens")
print(seq_moved.to_string(float_format=lambda v: f"{v:.4g}"))

# %%
# NBVAL_IGNORE_OUTPUT
small, peak_step = seq_moved["1e-04"], seq_moved["5e-04"]
say(f"After the smaller step the completions' ratios $w_i$ run from "
    f"{small['w, smallest']:.3g} to {small['w, largest']:.3g}, after the peak step "
    f"from {peak_step['w, smallest']:.3g} to {peak_step['w, largest']:.3g}. The "
    f"geometric means move less, at most {small['|log s|, largest']:.3f} and "
    f"{peak_step['|log s|, largest']:.3f} in log, which still takes "
    f"{small['s outside [1 - 3e-4, 1 + 4e-4]']:.0%} and "
    f"{peak_step['s outside [1 - 3e-4, 1 + 4e-4]']:.0%} of them out of GSPO's narrow "
    f"clip range. VESPO weighs "
    f"{small['phi(w) below 0.5']:.0%} and {peak_step['phi(w) below 0.5']:.0%} of the "
    f"completions below one half, and its largest weight is "
    f"{small['phi(w), largest']:.2f} and {peak_step['phi(w), largest']:.2f}.")

# %% [markdown]
# Both trained for chapter 7's 150 steps with $\mu = 2$ and the trainer's default
# rollout engine (`scripts/ch08_luspo_vespo_runs.sh`), two seeds each: LUSPO with
# GSPO's ratio and clip range ($3\cdot10^{-4}$ / $4\cdot10^{-4}$), next to the GSPO
# pair of the PPO section (which rolled out with the `transformers` engine on another
# CPU, so the two pairs differ in more than the loss); VESPO with TRL's default
# shape, next to GRPO and SAPO with
# $\mu = 2$. VESPO averages as `dapo` does, so a DAPO pair with $\mu = 2$ separates
# its weights from its average. The length columns are means over the last 25 steps:

# %%
# NBVAL_IGNORE_OUTPUT
SEQ_RUNS = {"grpo, mu 2": load_seeds("ch08_mu2_fast"),
            "dapo, mu 2": load_seeds("ch08_dapo_mu2"),
            "sapo, mu 2": KNOB_RUNS["sapo, mu 2, seeds 0-1"],
            "vespo, mu 2": load_seeds("ch08_vespo_mu2"),
            "gspo, mu 2": load_seeds("ch08_gspo_mu2"),
            "luspo, mu 2": load_seeds("ch08_luspo_mu2")}
seq_results = seed_table(SEQ_RUNS, {
    "strict @75": strict_at_75, "strict @150": final_eval,
    "length, last 25": lambda runs: late_mean(runs, "completion_length"),
    "wrong length, last 25": lambda runs: late_mean(runs, "length_wrong")},
    digits={"length, last 25": 1, "wrong length, last 25": 1})
print(seq_results.to_string())

# %%
# NBVAL_IGNORE_OUTPUT
seq_acc = {name: final_eval(runs) for name, runs in SEQ_RUNS.items()}
seq_len = {name: late_mean(runs, "completion_length")
           for name, runs in SEQ_RUNS.items()}
say(f"LUSPO ends at {mean_range(seq_acc['luspo, mu 2'])} held-out strict accuracy, "
    + compare_seeds(seq_acc["luspo, mu 2"], seq_acc["gspo, mu 2"], "GSPO")
    + f" ({mean_range(seq_acc['gspo, mu 2'])}); its completions run "
    f"{mean_range(seq_len['luspo, mu 2'], 1)} tokens over the last 25 steps, "
    f"GSPO's {mean_range(seq_len['gspo, mu 2'], 1)}. VESPO ends at "
    f"{mean_range(seq_acc['vespo, mu 2'])}, "
    + compare_seeds(seq_acc["vespo, mu 2"], seq_acc["grpo, mu 2"], "GRPO")
    + f" ({mean_range(seq_acc['grpo, mu 2'])}), "
    + compare_seeds(seq_acc["vespo, mu 2"], seq_acc["sapo, mu 2"], "SAPO")
    + f" ({mean_range(seq_acc['sapo, mu 2'])}) and "
    + compare_seeds(seq_acc["vespo, mu 2"], seq_acc["dapo, mu 2"], "DAPO")
    + f" ({mean_range(seq_acc['dapo, mu 2'])}), with completions of "
    f"{mean_range(seq_len['vespo, mu 2'], 1)} tokens.")

# %% [markdown]
# Every loss of the table ends its completions at about the same length. The
# problems set how long their chains are, and nothing on this task grows the way
# the long reasoning traces of the LUSPO paper do, so there is no length bias here
# for LUSPO to remove, and its accuracy range overlaps GSPO's. VESPO's mean is the
# highest of the losses with $\mu = 2$; both its seeds end above both seeds of GRPO,
# SAPO and DAPO, whose average it shares (LUSPO's range overlaps it): on these runs
# the difference comes with its weights, not with its average. Two seeds a side
# make that a lead, not a result. Its paper reports stable training on batches up
# to 64 times stale {cite}`shen2026vespo`, the setting its weights were made for;
# the asynchronous trainer of {doc}`chapter 20 <20_async_rl>` takes
# `loss_type="vespo"` and folds its behaviour weights into $w_i$, token by token.

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch08` that
# says what is wrong. As written, the stubs raise `NotImplementedError` and the cell
# prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch08`.
#
# **8.1 — Three aggregations.** Write `my_aggregate(per_token_loss, mask, loss_type,
# max_completion_length)` for `per_token_loss` and `mask` of shape `[B, T]` and
# `loss_type` in `"grpo"`, `"bnpo"`, `"dr_grpo"`, returning one number, without
# calling `grpo_lib`.

# %%
from grpo_lib.exercises.ch08 import (check_aggregate, check_group_push,
                                     check_length_gap_in_group)


def my_aggregate(per_token_loss, mask, loss_type, max_completion_length):
    # your code here
    raise NotImplementedError


try:
    check_aggregate(my_aggregate)
except NotImplementedError:
    print("Not implemented yet: padded positions must not count; the three losses "
          "differ only in what they divide by (the aggregation table of the chapter).")

# %% [markdown]
# **8.2 — How hard a question pushes.** For binary rewards with `num_right` ones in a
# group of `group_size`, write `my_group_push(num_right, group_size, scale)` returning
# $\sum_i |\hat A_i|$ for `scale` in `"group"` and `"none"`, from the closed forms of
# {ref}`ch08-difficulty` (sample std, $\epsilon_{\mathrm{std}} = 10^{-4}$), without
# calling `group_advantages`.

# %%
def my_group_push(num_right, group_size, scale):
    # your code here
    raise NotImplementedError


try:
    check_group_push(my_group_push)
except NotImplementedError:
    print("Not implemented yet: write the group mean and the advantage of a right and "
          "of a wrong answer in terms of p = k / G, then add up their sizes; mind the "
          "groups that are all right or all wrong.")

# %% [markdown]
# **8.3 — Think.** (a) In the toy batch of {ref}`ch08-toy-batch`, the long wrong
# answer has 12 tokens.
# How long would it have to be for `grpo` to give each of its tokens one tenth of the
# weight of a short-right-answer token, and what total push would it then receive?
# Under `dapo`? (b) Why is the largest clip fraction of each $\mu = 1$ run exactly 0,
# and which setting would make `epsilon_high` matter? (c) Under `dr_grpo`, what
# happens to the size of the gradient if you double `max_completion_length` without
# changing anything else, and why does that matter less with AdamW than with SGD?

# %% [markdown]
# **8.4 — Inside the groups.** Write `my_length_gap(lengths, correct, group_size)`:
# `lengths` is a `[B]` tensor of token counts with the groups of `group_size`
# contiguous, `correct` a list of `B` bools. Over the groups that have at least one
# right and one wrong completion, return the mean of "mean wrong length minus mean
# right length"; `nan` when no group has both. This is the trainer's
# `length_gap_in_group` metric of the full-length runs. Then: on a batch with two
# groups, lengths `[10, 10, 30, 30]` and `correct = [True, True, True, False]`, what
# do the pooled gap and the within-group gap say, and which one describes a choice the
# policy made?

# %%
def my_length_gap(lengths, correct, group_size):
    # your code here
    raise NotImplementedError


try:
    check_length_gap_in_group(my_length_gap)
except NotImplementedError:
    print("Not implemented yet: work group by group; decide which groups count, "
          "compare within each of them, then average over the groups that count.")


# %% [markdown]
# **8.5 — GSPO's sequence ratio.** Write `my_sequence_log_ratio(logp, old_logp, mask)`
# for `[B, T]` log-probabilities under the current and the sampling policy and the
# completion mask: return $\log s_i$ of {ref}`ch08-past-first-pass`, shape `[B, 1]`,
# the mean of the real tokens' log-ratios, and 0 for an empty completion. Then: why
# does GSPO divide by the length instead of summing, and what would a fixed clip range
# do to long completions if it did not?

# %%
from grpo_lib.exercises.ch08 import check_sequence_log_ratio  # noqa: E402


def my_sequence_log_ratio(logp, old_logp, mask):
    # your code here
    raise NotImplementedError


try:
    check_sequence_log_ratio(my_sequence_log_ratio)
except NotImplementedError:
    print("Not implemented yet: mask the token log-ratios, sum each row, divide by the "
          "number of real tokens (at least 1).")

# %% [markdown]
# **8.6 — VESPO's weight.** Write `my_vespo_weights(log_ratio, advantages, mask)` for
# `[B, T]` token log-ratios, `[B, 1]` advantages and the completion mask: return
# $\phi(w_i)$ of {ref}`ch08-sequence-losses`, shape `[B, 1]`, with TRL's default
# shape, $(m, \nu) = (2, 3)$ when $\hat A_i \ge 0$ and $(3, 2)$ otherwise (no
# clamps needed: the checker's ratios are moderate). Then read the table of $\phi$ in
# that section: which completions does VESPO push hardest, for each sign of the
# advantage, and which does it leave alone?

# %%
from grpo_lib.exercises.ch08 import check_vespo_weights  # noqa: E402


def my_vespo_weights(log_ratio, advantages, mask):
    # your code here
    raise NotImplementedError


try:
    check_vespo_weights(my_vespo_weights)
except NotImplementedError:
    print("Not implemented yet: sum the real tokens' log-ratios (log w), pick m and "
          "nu by the advantage's sign, then exp(nu + m log w - nu w).")
