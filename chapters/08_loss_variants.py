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
# # Loss variants and their biases
#
# Chapter 7 trained the tiny base model with one recipe: DeepSeekMath's GRPO loss
# {cite}`shao2024deepseekmath`. Since then, papers and libraries have proposed several
# variants with new names: BNPO, Dr. GRPO {cite}`liu2025drgrpo`, DAPO
# {cite}`yu2025dapo`, plain REINFORCE with a group baseline. Most of them change one of
# only two things:
#
# * the **credit assigner**: how the $G$ rewards of a group become one advantage
#   per completion (subtract the group mean; divide by the group's standard deviation
#   or not);
# * the **loss**: how the per-token terms $\ell_{i,t}$ are averaged into the one number
#   we differentiate (per completion then per batch, per token, or by a constant).
#
# "Algorithm = credit assigner + loss" (the picoRL notes of the seed material say it
# this way) is not just a slogan here: in `grpo_lib` they are two functions, and the
# trainer calls them one after the other. This chapter takes each one apart on a batch
# small enough to check by hand, shows what each choice does to the weight of every
# token, and then runs the same R1-Zero training under each variant.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
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
from grpo_lib.display import show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.losses import policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
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
# The credit assigner sees only rewards and the group size; the loss (inside `_update`)
# sees only advantages, log-probabilities and masks:

# %%
source = inspect.getsource(trainer.GRPOTrainer.train_step).splitlines()
start = next(i for i, s in enumerate(source) if "advantages = group_advantages" in s)
print("\n".join(line.strip() for line in source[start - 1:start + 3]))

# %% [markdown]
# Two knobs, `scale_rewards` and `loss_type`, choose each half on its own. The rest of
# the chapter is about those two knobs.
#
# ## The credit assigner and the difficulty bias
#
# For a group with rewards $r_1, \dots, r_G$, GRPO's advantage is
#
# $$
# A_i = \frac{r_i - \operatorname{mean}(\mathbf r)}{\operatorname{std}(\mathbf r)
#       + \varepsilon}
# \qquad\text{(DeepSeekMath, outcome supervision)},
# $$
#
# and Dr. GRPO {cite}`liu2025drgrpo` drops the denominator: $A_i = r_i -
# \operatorname{mean}(\mathbf r)$ (`scale_rewards="none"`). The function is chapter 1's:

# %%
show_source(group_advantages, docstring=False)

# %% [markdown]
# Why drop the std? Take binary rewards (right = 1, wrong = 0) and $G = 8$. A group
# with $k$ right answers has mean $p = k/G$. Without the std the advantages are
# $1 - p$ and $-p$; the total size of the group's push,
# $\sum_i |A_i| = 2Gp(1-p)$, is largest for a question the model gets right half the
# time and small for one it nearly always or nearly never gets right. Dividing by the
# std $\sqrt{\tfrac{G}{G-1}\,p(1-p)}$ turns that total into
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
# batch-independent size.
#
# ## The loss: five ways to average the same terms
#
# On the first pass over a batch ($\mu = 1$) the clipped GRPO term of token $t$ of
# completion $i$ is $\ell_{i,t} = -r_{i,t} A_i$ with a ratio $r_{i,t}$ that equals 1
# but still carries the gradient $\nabla \log \pi_\theta(o_{i,t})$. What differs
# between the variants is the **aggregation** of $\ell_{i,t}$ over a batch of $B$
# completions with lengths $|o_i|$ and a generation limit $L_{\max}$:
#
# | `loss_type` | aggregation | from |
# | --- | --- | --- |
# | `grpo` | $\frac1B\sum_i \frac{1}{\lvert o_i\rvert}\sum_t \ell_{i,t}$ | DeepSeekMath eq. 3 |
# | `bnpo` | $\sum_{i,t}\ell_{i,t} \,/\, \sum_i \lvert o_i\rvert$ per micro-batch | TRL |
# | `dr_grpo` | $\sum_{i,t}\ell_{i,t} \,/\, (B\,L_{\max})$ | Dr. GRPO |
# | `dapo` | $\sum_{i,t}\ell_{i,t} \,/\, N_{\text{tokens}}$ of the whole step | DAPO §3.3 |
# | `reinforce` | $-\frac1B\sum_i A_i \sum_t \log\pi_\theta(o_{i,t})$ | REINFORCE + group baseline |
#
# Each aggregation is one short function in `grpo_lib.losses`:

# %%
for fn in (losses.aggregate_grpo, losses.aggregate_bnpo, losses.aggregate_dr_grpo,
           losses.aggregate_dapo, losses.aggregate_reinforce):
    show_source(fn, docstring=False)

# %% [markdown]
# and `policy_loss` (chapter 7) computes the per-token term, adds the KL penalty when
# $\beta > 0$, and hands the result to one of them.
#
# ### A batch you can check by hand
#
# One question, $G = 2$ completions: a **short right** answer of 4 tokens and a
# **long wrong** answer of 12 tokens, padded to $L_{\max} = 16$. The credit assigner
# gives them $\pm A$; the loss then decides how much each *token* is pushed. The
# push on token $t$ of completion $i$ is the derivative of the loss with respect to
# that token's log-probability, $-\partial L / \partial \log\pi_\theta(o_{i,t})$;
# dividing it by $A_i$ leaves the weight the aggregation gives the token. Autograd
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
# Check the first row by hand: `grpo` divides each completion by its own length and
# the batch by $B = 2$, so a token of the short answer weighs $1/(2 \cdot 4) = 0.125$
# and a token of the long answer $1/(2 \cdot 12) \approx 0.0417$. Each *completion*
# gets the same total push, $\pm A/B = \pm 0.25$, whatever its length. The token-level
# losses (`bnpo`, `dapo`) give every token $1/16$; `dr_grpo` gives every token
# $1/(B \cdot L_{\max}) = 1/32$; `reinforce` sums over tokens, $1/B = 0.5$ per token.

# %%
fig, ax = plt.subplots(figsize=(7.5, 3.2))
x = np.arange(len(LOSS_TYPES))
ax.bar(x - 0.2, toy_table["weight/token, short right"], 0.4,
       label="a token of the short right answer (4 tokens)")
ax.bar(x + 0.2, toy_table["weight/token, long wrong"], 0.4,
       label="a token of the long wrong answer (12 tokens)")
ax.set_xticks(x, LOSS_TYPES)
ax.set_yscale("log")
ax.set_ylabel("weight per token (log scale)")
ax.set_title("What each aggregation gives one token")
ax.legend(fontsize=8)
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
# the upper clip bound to $1 + \varepsilon_{high}$ with $\varepsilon_{high} = 0.28$
# while keeping $1 - \varepsilon = 0.8$ below {cite}`yu2025dapo`, so that a token the
# old policy found unlikely, and which turned out good, can grow its probability more
# before the clip stops its gradient (chapter 2 drew the surrogate). On one token
# with ratio 1.25 and a positive advantage:

# %%
# NBVAL_CHECK_OUTPUT
one_mask = torch.ones(1, 1)
for eps_high in (None, 0.28):
    logp = torch.tensor([[np.log(1.25)]], requires_grad=True)  # ratio 1.25
    loss, stats = policy_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), one_mask,
                              loss_type="dapo", epsilon=0.2, epsilon_high=eps_high)
    (grad,) = torch.autograd.grad(loss, logp)
    print(f"epsilon_high={eps_high}: clip_frac_high={stats['clip_frac_high']:.0f}, "
          f"dL/dlogp={grad.item():+.4f}")

# %% [markdown]
# With the symmetric clip the token is clipped and gets no gradient; with
# clip-higher it still gets one. Note the condition: a ratio different from 1. On the
# first pass over a batch every ratio is exactly 1, so neither clip acts; clipping
# starts only with $\mu > 1$ passes over the same batch (`num_iterations`). DAPO's
# fourth change, leaving truncated completions out of the loss, is the trainer flag
# `mask_truncated_completions=True`.
#
# ## The same R1-Zero run under each variant
#
# Now the real thing: chapter 7's configuration (`configs/r1_zero_arithmetic.yaml`:
# accuracy + 0.1 · format, $G = 8$, completions up to 96 tokens, AdamW at $5 \cdot
# 10^{-4}$ with a cosine schedule, $\beta = 0$, $\mu = 1$), loaded with
# `load_config`, with one override per variant, from the same seed, so every run
# starts from the same model, sees the same prompts in the same order and samples the
# same first batch.
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
# Response length over training, every variant in one plot (a 5-step rolling mean;
# the faint lines are the raw per-step means):

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), constrained_layout=True)
panels = [("completion_length", "mean completion length (tokens)"),
          ("accuracy", "training accuracy (strict)"),
          ("entropy", "entropy (nats / token)")]
for ax, (col, label) in zip(axes, panels):
    for name, (m, _, _, _) in results.items():
        line, = ax.plot(m["step"], m[col], alpha=0.2)
        ax.plot(m["step"], m[col].rolling(5, min_periods=1).mean(),
                color=line.get_color(), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
fig.suptitle(f"R1-Zero, {STEPS} steps x {PROMPTS} prompts x G=8, same seed")
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
# Dr. GRPO's evidence for the length bias is a trend over a long run: under `grpo`
# the *incorrect* responses keep getting longer, under `dr_grpo` they do not
# ({cite}`liu2025drgrpo`, Figure 1). A few dozen steps cannot show a trend, so the repository
# keeps four full-length runs of chapter 7's configuration (150 steps of 16 prompts),
# `grpo` and `dr_grpo` with two seeds each, trained on this book's CPU with the
# command in each run's `README.md`. Besides the overall length, the trainer logs the
# mean length of the right and of the wrong sampled completions of every step
# (`length_correct`, `length_wrong`), and the same comparison made *inside* each group
# (`length_gap_in_group`: over the groups that have both right and wrong answers, the
# mean of "wrong length minus right length"). The first compares answers to different
# problems; the second compares answers to the same problem, which is what the
# per-response normalisation can act on, because advantages are only ever compared
# within a group:

# %%
RUNS = REPO / "data" / "runs"
full = {}
for loss in ("grpo", "dr_grpo"):
    for seed in (0, 1):
        d = RUNS / f"ch08_{loss}_seed{seed}_cpu"
        info = json.loads((d / "run_info.json").read_text())
        full[loss, seed] = (pd.read_csv(d / "metrics.csv"),
                            pd.read_csv(d / "eval.csv").set_index("step"), info)
        print(f"{d.name}: {info['train_seconds']} s on {info['device']}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.6), constrained_layout=True)
for ax, loss in zip(axes, ("grpo", "dr_grpo")):
    for seed, ls in ((0, "-"), (1, "--")):
        m = full[loss, seed][0]
        for col, color in (("length_wrong", "C3"), ("length_correct", "C2")):
            ax.plot(m["step"], m[col].rolling(10, min_periods=1).mean(), ls=ls,
                    color=color, label=f"{col.split('_')[1]}, seed {seed}")
    ax.set_title(f"{loss}: mean length, right and wrong", fontsize=10)
    ax.set_ylim(50, 70)
axes[0].set_ylabel("tokens (10-step mean)")
axes[0].legend(fontsize=7, ncol=2)
for (loss, seed), (m, _, _) in full.items():
    axes[2].plot(m["step"], m["length_gap_in_group"].rolling(10, min_periods=1).mean(),
                 ls="-" if seed == 0 else "--", color="C0" if loss == "grpo" else "C1",
                 label=f"{loss}, seed {seed}")
axes[2].axhline(0, color="gray", lw=0.8)
axes[2].set_title("within a group: wrong minus right length", fontsize=10)
axes[2].legend(fontsize=7)
for ax in axes:
    ax.set_xlabel("step")
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
# longer whatever the loss does. Count the operators of the held-out problems that
# the 30-step `grpo` model above still gets wrong:

# %%
# NBVAL_IGNORE_OUTPUT
held = results["grpo"][3].copy()
held["operators"] = held["question"].str.count(r"[-+*/]")
ops = pd.DataFrame({
    "all held-out problems": held["operators"].value_counts(normalize=True),
    "answered wrong": held.loc[~held["correct"], "operators"].value_counts(
        normalize=True)}).fillna(0).sort_index()
ops.index.name = "operators"
display(ops.round(3))
print(f"mean operators: all {held['operators'].mean():.2f}, wrong "
      f"{held.loc[~held['correct'], 'operators'].mean():.2f}; mean greedy length by "
      f"operator count: " + ", ".join(
          f"{k}: {v:.1f}" for k, v in held.groupby("operators")["length"].mean().items()))

# %% [markdown]
# **Reading it.** In all four full-length runs the wrong answers get longer during
# training and end up several tokens longer than the right ones, and they do so under
# `dr_grpo` as well as under `grpo` (the first two panels and the first printed gap).
# Inside a group the picture is different: the wrong and the right answers to the
# *same* problem differ by about a token, in either direction (the third panel and the
# second printed gap). So on this task "wrong answers are longer" is mostly
# **selection**: the errors that survive training sit on the problems with more
# operators, whose traces are longer (the operator table), and pooling all the
# answers of a step mixes problems of different lengths. Whatever part of the gap
# `grpo`'s per-response normalisation adds is the difference between the two losses'
# gaps: small next to the gap itself, and no larger than the spread between two seeds
# of one loss. That does not contradict section 8.3: the per-token weights do differ
# exactly as computed there. It says that on a task whose lengths are set by the
# problem, the length bias has little room to act, and that a length trend in a
# run's logs is evidence about the loss only once it has been compared within groups,
# and with a run that differs in the loss alone, on the same problems.

# %% [markdown]
# ### The same seed on another CPU
#
# How large is "the spread between two seeds"? Chapter 7's stored run
# (`data/runs/ch07_r1_zero_cpu`) is the `grpo, seed 0` run above: same config, same
# seed, same trainer, one torch thread, executed later on a machine with a different
# CPU model. Compare the two step by step:

# %%
# NBVAL_IGNORE_OUTPUT
other = pd.read_csv(RUNS / "ch07_r1_zero_cpu" / "metrics.csv")
other_eval = pd.read_csv(RUNS / "ch07_r1_zero_cpu" / "eval.csv").set_index("step")
first_run = full["grpo", 0][0]
d_norm = (other["grad_norm"] - first_run["grad_norm"]).abs()
same_samples = (other["reward"] == first_run["reward"]) & (
    other["completion_length"] == first_run["completion_length"])
part = int(other.loc[~same_samples, "step"].min())
print(f"step 1: |difference in gradient norm| = {d_norm.iloc[0]:.1e} "
      f"(of {first_run['grad_norm'].iloc[0]:.3f})")
print(f"sampled rewards and lengths identical through step {part - 1}, "
      f"different from step {part} on")
print(f"held-out strict at step 150: first CPU {full['grpo', 0][1].loc[150, 'strict_acc']:.3f}, "
      f"other CPU {other_eval.loc[150, 'strict_acc']:.3f}; the four runs above range "
      f"from {full_table['held-out strict @150'].min():.3f} to "
      f"{full_table['held-out strict @150'].max():.3f}")
late = other[other["step"] > 100]
print(f"other CPU, steps 101-150: gap wrong - right {(late['length_wrong'] - late['length_correct']).mean():+.1f} "
      f"tokens, gap in group {late['length_gap_in_group'].mean():+.1f} tokens")

# %% [markdown]
# The two CPUs round the same float32 sums differently (their vectorised kernels add
# in a different order), so the very first gradient already differs in its last
# digits. For a while that changes nothing visible: the sampled tokens are the same
# as long as no probability lands on the other side of a random draw. Once one token
# differs, the two runs see different completions, different advantages and
# different updates, and they are as unrelated as two seeds: the final accuracy moves
# within the range that the four seeded runs span, while the length story (a pooled
# gap of several tokens, a within-group gap near zero) is the same.
# So "seed 0" names a run only together with the machine, and a single run per
# variant cannot separate variants whose accuracies differ by a few points.

# %% [markdown]
# ### What to notice
#
# The cell below turns the comparison table into sentences, so that every number in
# them comes from the runs above.

# %%
# NBVAL_IGNORE_OUTPUT
c = comparison
best = c["held-out strict"].drop("base model").idxmax()
worst = c["held-out strict"].drop("base model").idxmin()
grow = (c["length late"] - c["length early"]).drop("base model")
print(f"- Base model: held-out strict {c.loc['base model', 'held-out strict']:.3f}; "
      f"after {STEPS} steps the best variant is {best} "
      f"({c.loc[best, 'held-out strict']:.3f}), the weakest {worst} "
      f"({c.loc[worst, 'held-out strict']:.3f}).")
print(f"- Length, early -> late third of training: " + ", ".join(
    f"{n} {c.loc[n, 'length early']:.1f} -> {c.loc[n, 'length late']:.1f}"
    for n in grow.index) + ".")
print(f"- Largest clip fraction in any step of any run: "
      f"{c['clip frac (low+high)'].drop('base model').max():.3f} (mu = 1).")
print(f"- Mean gradient norm before clipping: " + ", ".join(
    f"{n} {c.loc[n, 'grad norm']:.3f}" for n in grow.index) + ".")
print(f"- Mean logged loss: " + ", ".join(
    f"{n} {c.loc[n, 'loss mean']:+.4f}" for n in grow.index) + ".")

# %% [markdown]
# Read these lines with the caveats of the setup: a few dozen steps, a few prompts per
# step, one seed, and a few hundred held-out problems, so a difference of a few
# points between two variants is within what another seed would change. What the
# short runs do show reliably:
#
# - **Clipping never acts** with $\mu = 1$: the largest clip fraction above is 0,
#   because every ratio is exactly 1 on the one pass over each batch. The clip (and
#   DAPO's clip-higher) only matters with `num_iterations > 1`.
# - **Constant factors mostly wash out.** `dr_grpo` divides by the constant
#   $B L_{\max}$, a smaller gradient than `grpo`'s (see the gradient norms), and
#   `reinforce` sums over tokens, a much larger one, which `max_grad_norm=1` then
#   clips. AdamW divides each update by a running estimate of the gradient's size,
#   so a constant factor in the loss changes little; what changes the learning is
#   how the weight is *distributed* over tokens and completions (section 8.3).
# - **The logged loss is not a learning curve.** Under `grpo` with $\mu = 1$ its
#   value is zero up to rounding in every step (each completion contributes
#   $-A_i$ and a group's advantages sum to zero); the token-level variants log
#   $-\sum_i A_i |o_i| / N$, the length-weighted advantage, whose sign says whether
#   the longer completions of the step were the better or the worse ones; REINFORCE
#   logs $-\frac1B \sum_i A_i \log \pi_\theta(o_i)$. Chapter 9 takes this apart.
#
# - **`bnpo` and `dapo` are the same run here**: every step is one micro-batch
#   (`micro_batch_size` = the whole batch), so "token mean of the micro-batch" and
#   "token mean of the step" coincide (section 8.3); they differ only with gradient
#   accumulation.
# - **Where the length went.** In the right/wrong table, the right answers keep about
#   the base model's length in every variant, and the wrong answers that remain are
#   longer. The full-length runs above show the same gap under `grpo` and `dr_grpo`:
#   it comes from which problems stay wrong, not from the loss.

# %%
shutil.rmtree(runs_dir, ignore_errors=True)  # the runs were only needed for this page

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises` that says
# what is wrong. As committed, the stubs raise `NotImplementedError` and the cell prints
# a hint; solutions are in the appendix (`book/solutions/ch08.md`).
#
# **8.1 — Three aggregations.** Write `my_aggregate(per_token_loss, mask, loss_type,
# max_completion_length)` for `per_token_loss` and `mask` of shape `[B, T]` and
# `loss_type` in `"grpo"`, `"bnpo"`, `"dr_grpo"`, returning one number, without
# calling `grpo_lib`.

# %%
from grpo_lib.exercises import (check_aggregate, check_group_push,
                                check_length_gap_in_group)


def my_aggregate(per_token_loss, mask, loss_type, max_completion_length):
    # your code here
    raise NotImplementedError


try:
    check_aggregate(my_aggregate)
except NotImplementedError:
    print("Not implemented yet: multiply by the mask first; grpo divides each row by "
          "its token count, bnpo the total by all tokens, dr_grpo by B * L_max.")

# %% [markdown]
# **8.2 — How hard a question pushes.** For binary rewards with `num_right` ones in a
# group of `group_size`, write `my_group_push(num_right, group_size, scale)` returning
# $\sum_i |A_i|$ for `scale` in `"group"` and `"none"`, from the closed forms of 8.2
# (sample std, $\varepsilon = 10^{-4}$), without calling `group_advantages`.

# %%
def my_group_push(num_right, group_size, scale):
    # your code here
    raise NotImplementedError


try:
    check_group_push(my_group_push)
except NotImplementedError:
    print("Not implemented yet: p = k / G; sum |A| = 2 G p (1 - p) without the std; "
          "divide by sqrt(G / (G - 1) * p * (1 - p)) + 1e-4 with it; 0 when k is 0 "
          "or G.")

# %% [markdown]
# **8.3 — Think.** (a) In the toy batch of 8.3, the long wrong answer has 12 tokens.
# How long would it have to be for `grpo` to give each of its tokens one tenth of the
# weight of a short-right-answer token, and what total push would it then receive?
# Under `dapo`? (b) Why is the largest clip fraction of every run above exactly 0,
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
    print("Not implemented yet: view lengths and correct as [P, G]; keep the rows with "
          "both kinds; average (wrong mean - right mean) over those rows.")

