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
# # When GRPO goes wrong
#
# A GRPO run rarely crashes. It fails quietly: the reward goes up while the model gets
# worse, or nothing moves at all, or the completions fill up with the same phrase. The
# only way to notice is to read the right metric. This chapter causes five classic
# failures on purpose, each from a setting that looks harmless, and reads each one off
# the columns the trainer logs (`metrics.csv`, chapter 7) and the evaluation harness
# (chapter 5):
#
# 1. a **hackable reward**: the reward climbs, the held-out accuracy falls;
# 2. a **large KL coefficient**: the policy is held near the reference model;
# 3. **zero-variance groups**: every completion of a prompt gets the same reward, so
#    there is no advantage and nothing to learn, and DAPO's dynamic sampling as the fix;
# 4. **repetition**: completions that repeat a step;
# 5. the **"loss is zero"** puzzle: why the logged loss of GRPO is about 0 while the
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
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.advantages import group_advantages
from grpo_lib.display import show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.objective import kl_estimate
from grpo_lib.profiles import profile
from grpo_lib.rewards import format_reward, repetition_penalty_reward
from grpo_lib.sampling import generate
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import GRPOTrainer, load_config

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
# Every run below starts from the tiny base model with chapter 7's configuration
# (`configs/r1_zero_arithmetic.yaml`, loaded with `load_config`) and changes one or
# two settings. These are **short runs**, sized for a CPU: in the `cpu` profile a few
# dozen steps of a few prompts each, and a held-out evaluation on a few hundred
# problems after each run. That is enough to see each failure start and to read it off
# the metrics; the `gpu` profile runs the configuration's full length (150 steps of 16
# prompts, 500 held-out problems). Sizes come from `P.pick`:

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
fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), constrained_layout=True)
for ax, (m, title) in zip(axes, [(hack_metrics, "reward = format only"),
                                 (ref_metrics, "reward = accuracy + 0.1 format")]):
    for col, label in [("reward/format_reward", "format reward (rewarded)"),
                       ("accuracy", "strict accuracy of the samples")]:
        line, = ax.plot(m["step"], m[col], alpha=0.25)
        ax.plot(m["step"], m[col].rolling(5, min_periods=1).mean(), label=label,
                color=line.get_color())
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
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
    print(f"  {row['question']} = {row['answer']}:  {row['completion'][:110]}")

# %% [markdown]
# **Diagnosis.** The signature of a hacked reward is a rewarded metric that improves
# while an unrewarded measure of the real goal does not, or gets worse. Here the
# format rate goes up and the strict accuracy (logged by the trainer, and measured on
# held-out problems by the harness) goes down: nothing in the reward holds the
# arithmetic in place, and the updates that make the format more likely also shift
# the digits. Chapter 3 showed two more hacks of rule rewards (lenient parsing, a
# length bonus). The defence is the same for all of them: log every reward function
# separately, log the task metric even when it is not rewarded, and evaluate on
# held-out data with strict parsing.
#
# ## KL to a reference with a large $\beta$
#
# DeepSeekMath's objective subtracts $\beta\,\mathbb D_{KL}(\pi_\theta \| \pi_{ref})$,
# estimated per token with Schulman's $k_3$ {cite}`schulman2020kl`, to keep the policy
# near the model it started from; DeepSeekMath used $\beta = 0.04$
# {cite}`shao2024deepseekmath`. With $\beta > 0$ the trainer keeps a frozen copy of
# the base model and logs the mean $k_3$ per token as `kl`. How strongly does the
# penalty hold the policy? Differentiate one token's loss, $-A\,r + \beta k_3$ with
# $k_3 = \rho - \log\rho - 1$ and $\rho = \pi_{ref}/\pi_\theta$, with respect to
# $\log\pi_\theta$ at $r = 1$ ($\mu = 1$):
#
# $$
# \frac{\partial}{\partial \log\pi_\theta}\big(-A\,r + \beta k_3\big)
#   = -A + \beta\,(1 - \rho) \approx -A + \beta\,\delta,
#   \qquad \delta = \log\pi_\theta - \log\pi_{ref}.
# $$
#
# The penalty's pull is zero where the policy starts ($\delta = 0$) and grows with the
# distance travelled; the push of the advantage and the pull of the penalty balance at
# $\delta \approx A/\beta$. Group advantages are of order 1 (chapter 8's table), so
# with $\beta = 0.04$ a token's log-probability may move by tens of nats before the
# penalty matters, which is no limit at all, while with $\beta = 5$ it can move by a
# fraction of a nat. Train the same configuration at several $\beta$ (the $\beta = 0$
# run is the reference run above):

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
# both models with `sequence_logprobs` (chapter 4), and average $k_1 = \log
# \pi_\theta - \log\pi_{ref}$ and $k_3$ (chapter 2) over the tokens:

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
        "logged kl, last third": m["kl"].tail(last).mean() if beta > 0 else float("nan"),
        "k1 to base": k1, "k3 to base": k3,
        "update s / step": m["time_update"].mean()}
kl_table = pd.DataFrame(kl_rows).T.rename_axis("beta")
kl_table.round(4)

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.4), constrained_layout=True)
labels = [f"{b:g}" for b in kl_table.index]
axes[0].plot(labels, kl_table["held-out strict"], marker="o", label="trained")
axes[0].axhline(base_eval["strict_acc"], color="gray", ls="--", label="base model")
axes[0].set_title("held-out strict accuracy after training")
axes[0].set_xlabel("beta")
axes[0].legend(fontsize=8)
for i, (beta, (m, _, _)) in enumerate(beta_runs.items()):
    style = dict(label=f"beta = {beta:g}", color=f"C{i}")  # one colour per beta
    if beta > 0:
        axes[1].plot(m["step"], m["kl"].rolling(5, min_periods=1).mean(), **style)
    axes[2].plot(m["step"], m["accuracy"].rolling(5, min_periods=1).mean(), **style)
axes[1].set_title("logged KL (mean k3 per token, 5-step mean)")
axes[2].set_title("training accuracy (5-step mean)")
for ax in axes[1:]:
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
for ax in axes:
    ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
big = max(BETAS)
print(f"held-out strict: base model {base_eval['strict_acc']:.3f}; " + ", ".join(
    f"beta = {b:g}: {r['held-out strict']:.3f}" for b, r in kl_table.iterrows()))
print(f"beta = {big:g} keeps {kl_table.loc[big, 'share of beta=0 gain']:.0%} of the "
      f"beta = 0 gain; its k3 to the base model is "
      f"{kl_table.loc[big, 'k3 to base']:.4f} against "
      f"{kl_table.loc[0.0, 'k3 to base']:.4f} for beta = 0")
print(f"update time per step: beta = 0 {kl_table.loc[0.0, 'update s / step']:.2f} s, "
      f"beta > 0 {kl_table.loc[BETAS, 'update s / step'].mean():.2f} s on average")

# %% [markdown]
# **Reading it.** The held-out accuracy never gains from a larger $\beta$, and once
# $\beta$ is large it falls back towards the base model's; the panels show why. A
# small $\beta$ such as DeepSeekMath's 0.04 behaves like $\beta = 0$ in a run this
# short: the balance point $A/\beta$ is far beyond anything the policy reaches. The
# largest $\beta$ holds the policy in place: its distance from the base model ($k_1$,
# $k_3$ measured after training) is the smallest, its training accuracy stays where it
# started (first third against last third in the table), and it keeps only a small
# share of the gain of the $\beta = 0$ run (printed above). Its logged `kl` is small
# *because* the penalty works, so a small `kl` on its own is no evidence that a run is
# healthy: read it next to the reward and the held-out accuracy, and against a
# $\beta = 0$ run. Note also that every per-token KL here is small, even for the
# $\beta = 0$ run: the tiny model's next-token distribution is sharp, and getting an
# answer right changes the probabilities of a handful of tokens in a trace of fifty.
# The price of any $\beta > 0$ is the reference model: a second copy of the weights
# in memory and a forward pass in every update, about a third of the compute of the
# policy's forward and backward pass. For this 1M-parameter model that cost is lost in
# the noise of the update times printed above; for a 0.5B model it is a real share of
# the step and of
# the GPU memory. This is why DAPO {cite}`yu2025dapo` and Dr. GRPO
# {cite}`liu2025drgrpo` drop the KL term for reasoning RL from a base model
# ($\beta = 0$ is TRL's default too): there the policy is *supposed* to move far from
# the base model, and the KL term holds back exactly that.
#
# ## Zero-variance groups: all-easy prompts
#
# A group whose $G$ rewards are all equal has advantages of exactly zero
# (`group_advantages` sets them so), and a zero advantage contributes no gradient.
# The trainer logs the share of such groups as `zero_std_frac`. Groups go dead when
# the prompts are too easy (all right) or too hard (all wrong) for the current
# policy. To see it, build a set of prompts that are easy *for this model*: sample 8
# completions at $T = 1$ from the base model for each of the first training problems
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
easy_metrics, easy_eval, _, _ = train_run("easy", [], steps=EASY_STEPS, rows=easy_set)
dyn_metrics, dyn_eval, _, _ = train_run("easy_dynamic", ["dynamic_sampling=true"],
                                        steps=EASY_STEPS, rows=easy_set)

# %%
# NBVAL_IGNORE_OUTPUT
zero_table = pd.DataFrame({
    name: {"zero_std_frac (all sampled)": m["zero_std_frac"].mean(),
           "groups trained on per step": m["num_groups"].mean(),
           "steps with grad_norm = 0": int((m["grad_norm"].fillna(0) == 0).sum()),
           "mean grad_norm": m["grad_norm"].mean(),
           "generation s / step": m["time_generate"].mean(),
           "update s / step": m["time_update"].mean()}
    for name, m in [("reference (all prompts)", ref_metrics.head(EASY_STEPS)),
                    ("easy prompts", easy_metrics),
                    ("easy + dynamic sampling", dyn_metrics)]}).T
zero_table.round(3)

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
for m, label in [(ref_metrics.head(EASY_STEPS), "reference (all prompts)"),
                 (easy_metrics, "easy prompts"),
                 (dyn_metrics, "easy + dynamic sampling (all rounds)")]:
    ax.plot(m["step"], m["zero_std_frac"], marker=".", label=label)
ax.set_xlabel("step")
ax.set_ylabel("share of groups with equal rewards")
ax.set_ylim(-0.05, 1.05)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
cost = (zero_table.loc["easy + dynamic sampling", "generation s / step"]
        / zero_table.loc["easy prompts", "generation s / step"])
dead_share = zero_table.loc["easy prompts", "zero_std_frac (all sampled)"]
print(f"dynamic sampling: {cost:.1f}x the generation time per step, "
      f"{zero_table.loc['easy + dynamic sampling', 'groups trained on per step']:.1f} "
      f"groups with a signal per step instead of "
      f"{zero_table.loc['easy prompts', 'groups trained on per step']:.1f} groups of "
      f"which a share {dead_share:.2f}"
      f" had none")

# %% [markdown]
# **Reading it.** On the easy prompts most groups are dead (compare their
# `zero_std_frac` with the reference run's in the table), the gradient is smaller,
# and the held-out accuracy does not improve: the steps cost a full rollout and teach
# little, because only the few groups with a slip in them carry a signal. A `grpo` or
# `dapo` loss also *dilutes* those live groups: the dead completions still count in
# the denominator. Dynamic sampling keeps only groups with a signal: here its extra
# rounds filled almost the whole batch with live groups, and the price is the
# generation time per step printed above. When the prompt pool is nearly all easy the
# extra rounds cannot fill the batch, and the right fix is upstream, in the data:
# drop prompts the policy always solves (or never solves) and keep the ones at the
# edge of its ability, which is what DAPO's filter approximates online.
#
# ## Repetition
#
# Responses get longer during R1-Zero's training, and longer thinking helps on hard
# problems {cite}`deepseekai2025r1`; so it is tempting to *reward* length. A reward
# for length pays for the cheapest way to be long, and this base model knows one: its
# pretraining corpus contains "rambling" traces that repeat a step (chapter 5). Here
# is a well-meant "think longer" reward, tokens / 96 capped at 1, with the format
# reward at 0.1, and no accuracy term:

# %%
def longer_is_better(completions, completion_ids=None, **kwargs):
    """A misguided "think longer" reward: completion tokens / 96, capped at 1."""
    return [min(len(ids), 96) / 96 for ids in completion_ids]


show_source(repetition_penalty_reward, docstring=False)

# %% [markdown]
# The trainer does not compute a repetition metric itself, but any reward function
# with weight 0 is a free logged metric: `repetition_penalty_reward` (Open-R1's
# n-gram penalty, $-1 \times$ the share of repeated word trigrams) goes in with
# weight 0, so `reward/repetition_penalty_reward` tracks repetition without changing
# the reward. The callables passed to `GRPOTrainer` replace the configuration's
# reward names; `train_run` also hands them to `load_config(..., reward_funcs=...)`,
# which records their names so that the three weights are checked against three
# functions.

# %%
# NBVAL_IGNORE_OUTPUT
rep_metrics, rep_eval, rep_samples, _ = train_run(
    "longer_is_better", ["reward_weights=[0.1, 1.0, 0.0]"],
    reward_funcs=[format_reward, longer_is_better, repetition_penalty_reward])

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.4), constrained_layout=True)
panels = [
    ("completion_length", "mean completion length (tokens)"),
    ("reward/repetition_penalty_reward", "-(share of repeated trigrams)"),
    ("truncated_frac", "share truncated at 96 tokens"),
]
for ax, (col, title) in zip(axes, panels):
    ax.plot(rep_metrics["step"], rep_metrics[col], marker=".", label="longer is better")
    if col in ref_metrics:
        ax.plot(ref_metrics["step"], ref_metrics[col], marker=".", label="reference")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
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
          f"  {row['completion'][:150]}")

# %% [markdown]
# **Diagnosis.** Three logged columns move together: `completion_length` climbs,
# `truncated_frac` climbs (the loops run into the 96-token limit, where the length
# reward is maxed out), and the logged repetition share grows; the harness's
# `repetition_rate` and `truncated_rate` confirm it on held-out problems, and the
# answers are gone with the closing tags that never come. Nothing in the reward asked
# for repetition; it paid for length, and repeating a known step is the easiest
# length this policy can produce. The fixes are on the reward side: pay for the task,
# not for
# length; if length must be controlled, penalise overlong completions (DAPO's soft
# overlong punishment, `soft_overlong_punishment`) or reward brevity among right
# answers (Kimi 1.5's `length_reward`, {cite}`kimi2025k15`), and add
# `repetition_penalty_reward` with a negative weight when loops appear.
#
# ## Why the logged loss is about 0
#
# Look at the `loss` column of the reference run next to its gradient norm:

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2), constrained_layout=True)
axes[0].plot(ref_metrics["step"], ref_metrics["loss"], marker=".")
axes[0].set_title("logged loss (loss_type = grpo, mu = 1)")
axes[1].plot(ref_metrics["step"], ref_metrics["grad_norm"], marker=".", color="C1")
axes[1].set_title("gradient norm (before clipping)")
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
# updated, so every ratio is
#
# $$
# r_{i,t} = \frac{\pi_\theta(o_{i,t})}{\pi_{\theta_{old}}(o_{i,t})}
#         = \exp\big(\log\pi_\theta - \operatorname{sg}[\log\pi_\theta]\big) = 1,
# $$
#
# where $\operatorname{sg}$ is stop-gradient (`logp.detach()`). The clip does not act
# at $r = 1$, so each token's loss is $-r_{i,t} A_i = -A_i$ and, with $\beta = 0$,
# `grpo`'s aggregation gives
#
# $$
# L = -\frac1B \sum_i \frac{1}{|o_i|}\sum_t A_i = -\frac1B\sum_i A_i = 0,
# $$
#
# because a group's advantages $A_i = (r_i - \bar r)/(\sigma + \varepsilon)$ sum to
# zero. But the derivative of $r_{i,t}$ is $r_{i,t}\,\nabla\log\pi_\theta(o_{i,t}) =
# \nabla\log\pi_\theta(o_{i,t})$, so
#
# $$
# \nabla L = -\frac1B\sum_i \frac{A_i}{|o_i|}\sum_t \nabla\log\pi_\theta(o_{i,t})
#          \neq 0:
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
    value = round(loss.item(), 6) + 0.0  # no "-0.000000"
    print(f"{lt:>9}: loss {value:+.6f}   |grad| {grad.norm():.6f}   "
          f"ratio mean {stats['ratio_mean']:.1f}")
dapo_by_hand = -(adv * lengths).sum() / lengths.sum()
reinforce_by_hand = -(adv * (logp.detach() * mask).sum(-1)).mean()
print(f"by hand: dapo -sum_i A_i |o_i| / N = {dapo_by_hand.item():+.6f}, "
      f"reinforce -mean_i A_i log pi(o_i) = {reinforce_by_hand.item():+.6f}")

# %% [markdown]
# Only `grpo` (and `scale_rewards` of any kind with it) logs exactly 0. The token-level
# losses log $-\sum_i A_i|o_i| / N$, the length-weighted advantage: not zero, but not
# a measure of progress either (it is negative when the longer completions of the
# step were the better ones). REINFORCE logs $-\frac1B\sum_i A_i \log\pi_\theta(o_i)$,
# which depends on how likely the sampled completions were. With $\mu > 1$ the ratios
# leave 1 on the later passes and the loss moves a little, by the amount the clipped
# surrogate improved. In no case is the loss a learning curve, as it is in supervised
# fine-tuning: read the reward, the held-out accuracy and the gradient norm instead.
#
# ## What to notice
#
# | failure | what you see in the metrics | what to do |
# | --- | --- | --- |
# | hackable reward | `reward/<fn>` rises, `accuracy` (unrewarded) and held-out strict accuracy fall | reward the goal, log the goal separately, evaluate held out |
# | large $\beta$ | `kl` held small while `accuracy` stays flat; a smaller distance to the base and a smaller held-out gain than a $\beta = 0$ run | $\beta = 0$ for reasoning RL from a base model, or a $\beta$ small against $A/\delta$ |
# | zero-variance groups | high `zero_std_frac`, smaller `grad_norm` (zero when every group is dead) | filter the prompts; `dynamic_sampling=True` at a generation cost |
# | repetition | `repetition_rate` of the harness, `completion_length` and `truncated_frac` rising | check what the reward pays for; a repetition penalty |
# | loss ≈ 0 | `loss` ≈ 0 while `grad_norm` > 0 | nothing is wrong: read the reward and held-out metrics |

# %%
shutil.rmtree(runs_dir, ignore_errors=True)  # the runs were only needed for this page

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises` that says
# what is wrong. As committed, the stubs raise `NotImplementedError` and the cell prints
# a hint; solutions are in the appendix (`book/solutions/ch09.md`).
#
# **9.1 — Dead groups.** Write `my_zero_std_frac(rewards, group_size)`: `rewards` is a
# list of $B$ floats, groups of `group_size` contiguous; return the share of groups
# whose rewards are all equal (the trainer's `zero_std_frac`).

# %%
from grpo_lib.exercises import check_informative_groups, check_zero_std_frac


def my_zero_std_frac(rewards, group_size):
    # your code here
    raise NotImplementedError


try:
    check_zero_std_frac(my_zero_std_frac)
except NotImplementedError:
    print("Not implemented yet: view the rewards as (num_groups, G); a group is dead "
          "when every entry equals its first one; average over groups.")

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
    print("Not implemented yet: the complement of 9.1's test, per group; return "
          "group indices (0 .. num_groups - 1), not completion indices.")

# %% [markdown]
# **9.3 — Think.** (a) A run with reward accuracy + 0.1 · format shows `reward`
# rising from 0.6 to 0.7 while the held-out strict accuracy stays flat. Which
# per-function columns tell you whether this is progress or a hack? (b) With
# $\mu = 2$, the logged loss of a `grpo` run is no longer exactly 0 on the second
# pass. What sign do you expect it to have, and why? (c) In 9.3, why would a batch of
# all-*hard* prompts (every sample wrong) look the same in `zero_std_frac` as
# all-easy ones, and which
# other column tells the two apart?
