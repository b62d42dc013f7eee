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
# # The full loop: R1-Zero on arithmetic
#
# Part I built every piece of GRPO as a separate function: a sampler that writes a
# group of answers, rule rewards that score them, group advantages that turn the
# scores into credit, per-token log-probabilities, and the clipped loss. This chapter
# puts them together into the loop and runs it on the tiny base model of chapter 5,
# the model that still thinks $2 + 3 \cdot 4$ might be 20.
#
# The recipe is DeepSeek-R1-Zero's {cite}`deepseekai2025r1`: reinforcement learning
# straight from a *base* model, with no supervised fine-tuning first. The policy is
# trained with GRPO {cite}`shao2024deepseekmath`, and the reward is computed by rules,
# not by a learned reward model: an **accuracy** reward (is the final answer right?)
# and a **format** reward (is the reasoning inside `<think>…</think>` and the answer
# inside `<answer>…</answer>`?). DeepSeek chose rules because a neural reward model
# can be hacked during large-scale RL; on AIME 2024 their R1-Zero's pass@1 rose from
# 15.6% to 71.0% during training (as reported in {cite}`deepseekai2025r1`). Here the
# task is far smaller, but every step is the same, and the question is the same: does
# the held-out accuracy go up, and what else changes?
#
# One step of the loop, for a batch of prompts $q$:
#
# $$
# \underbrace{o_{1..G} \sim \pi_\theta(\cdot\mid q)}_{\text{rollout}}
# \;\to\; \underbrace{r_i = r^{acc}_i + 0.1\, r^{fmt}_i}_{\text{rewards}}
# \;\to\; \underbrace{A_i = \frac{r_i - \operatorname{mean}(\mathbf r)}
#                        {\operatorname{std}(\mathbf r) + \varepsilon}}_{\text{credit}}
# \;\to\; \underbrace{\mathcal L(\theta) = -\frac1G \sum_i \frac1{|o_i|}\sum_t
#   \min\!\big(\rho_{i,t} A_i,\ \operatorname{clip}(\rho_{i,t}, 1\pm\epsilon) A_i\big)
#   }_{\text{loss}}
# \;\to\; \theta \leftarrow \theta - \eta\, \nabla_\theta \mathcal L
# $$
#
# with $\rho_{i,t} = \pi_\theta(o_{i,t}\mid q, o_{i,<t}) /
# \pi_{\theta_{old}}(o_{i,t}\mid q, o_{i,<t})$.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import copy
import json
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers
from IPython.display import Image, display

from grpo_lib import evaluate
from grpo_lib.advantages import group_advantages
from grpo_lib.display import environment, show_source
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.plots import plot_run, read_metrics
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.sampling import generate
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR, chat_prompt
from grpo_lib.trainer import GRPOTrainer, load_config

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 80)
torch.set_printoptions(precision=3, sci_mode=False)
transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar

ROOT = DATA_DIR.parents[1]  # the repository root
MODEL_DIR = ROOT / "data" / "models" / "tiny-qwen2-base"
model, tok = load_model_and_tokenizer(MODEL_DIR, device=P.device)
train_set = load_task_split("arithmetic", "train")
test_set = load_task_split("arithmetic", "test")
print(f"{MODEL_DIR.name}: {sum(p.numel() for p in model.parameters()):,} parameters; "
      f"{len(train_set):,} training and {len(test_set):,} held-out problems")

# %% [markdown]
# ## One step by hand
#
# Before handing the loop to a trainer we take one step ourselves, on a copy of the
# base model, with the functions of Part I. Four prompts, $G = 8$ completions each; the
# first prompt is the question of chapter 1.

# %%
policy = copy.deepcopy(model)  # the step below changes this copy, not the base model
G = 8
MAX_NEW = 96
rows = [{"question": "2 + 3 * 4", "answer": "14"}]
rows += [{"question": r["question"], "answer": r["answer"]}
         for r in train_set.select(range(P.pick(smoke=1, cpu=3, gpu=3)))]
prompts = [chat_prompt(r["question"]) for r in rows]
for r in rows:
    print(f"{r['question']:>22} = {r['answer']}")

# %% [markdown]
# **Rollout.** `generate` (chapter 6) repeats each prompt $G$ times contiguously and
# samples at temperature 1:

# %%
show_source(generate, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
rollout = generate(policy, tok, prompts, num_generations=G, max_new_tokens=MAX_NEW,
                   temperature=1.0, seed=0)
B = len(rollout)
print(f"B = {len(rows)} prompts x G = {G} = {B} completions")
print(f"prompt_ids {tuple(rollout.prompt_ids.shape)}, completion_ids "
      f"{tuple(rollout.completion_ids.shape)}, completion_mask "
      f"{tuple(rollout.completion_mask.shape)}")  # [B, P], [B, C], [B, C]
print(f"{int(rollout.finished.sum())} of {B} stopped before {MAX_NEW} tokens")
print("first completion:", rollout.texts[0])

# %% [markdown]
# **Rewards.** Chapter 3's rule rewards, combined as in R1-Zero: accuracy plus 0.1 times
# format. Each reward function receives the dataset columns repeated to line up with
# the completions.

# %%
show_source(combine_rewards)

# %%
# NBVAL_IGNORE_OUTPUT
reward_fn = combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])
answers = [r["answer"] for r in rows for _ in range(G)]  # [B], group-major
rewards = torch.tensor(reward_fn(rollout.texts, answer=answers))  # [B]
parts = reward_fn.last_breakdown
print("accuracy:", parts["accuracy_reward"][:G])
print("format:  ", parts["format_reward"][:G])
print("rewards of each group (one row per prompt):")
print(rewards.view(-1, G))  # [num_prompts, G]

# %% [markdown]
# **Credit.** `group_advantages` (chapter 2) centres each group on its mean and divides
# by its standard deviation; a group whose rewards are all equal gets zeros and
# contributes nothing to the gradient.

# %%
show_source(group_advantages, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
advantages = group_advantages(rewards, G)  # [B]
print(advantages.view(-1, G))  # [num_prompts, G]
zero = (rewards.view(-1, G) == rewards.view(-1, G)[:, :1]).all(1)
print(f"groups with zero reward variance: {int(zero.sum())} of {len(rows)}")

# %% [markdown]
# **Log-probabilities.** `sequence_logprobs` (chapter 4) runs the policy once over
# prompt and completion and reads off $\log \pi_\theta(o_{i,t}\mid q, o_{i,<t})$ for
# every completion token; padding positions are 0.

# %%
show_source(sequence_logprobs, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
mask = rollout.completion_mask.float()  # [B, C]
logp = sequence_logprobs(policy, rollout.prompt_ids, rollout.prompt_mask,
                         rollout.completion_ids, rollout.completion_mask)  # [B, C]
print(f"logp {tuple(logp.shape)}, requires_grad={logp.requires_grad}")
seq_logp = (logp * mask).sum(1)  # [B], log pi(o_i | q)
print("log pi(o_i | q), first group:", seq_logp[:G].detach())

# %% [markdown]
# **Loss.** With one pass per batch ($\mu = 1$) the sampling policy *is* the current
# policy, so `old_logp=None` means $\pi_{\theta_{old}} = \pi_\theta$ detached: every
# ratio is 1 and nothing is clipped, but the gradient of $\rho_{i,t}$ is still
# $\nabla \log \pi_\theta$. `policy_loss` (chapter 2's surrogate with chapter 8's
# aggregations) returns the loss and a few statistics:

# %%
show_source(policy_loss, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
loss, stats = policy_loss(logp, None, advantages, mask, loss_type="grpo", epsilon=0.2)
print(f"loss = {loss.item():+.6f}")
print({k: round(v, 4) for k, v in stats.items()
       if k in ("ratio_mean", "clip_frac_region", "num_tokens")})

# %% [markdown]
# The loss is (almost) zero, yet it has a gradient. That is not a bug: on-policy, the
# per-token loss is $-A_i$, its mean over each completion's tokens is $-A_i$, and the
# mean of group-normalised advantages is zero. What is not zero is its gradient,
# $-\frac1G\sum_i \frac{A_i}{|o_i|}\sum_t \nabla\log\pi_\theta(o_{i,t})$. A case small
# enough to check by hand: two completions of two and three tokens with advantages
# $+1$ and $-1$.

# %%
# NBVAL_CHECK_OUTPUT
toy_logp = torch.tensor([[-0.5, -1.0, 0.0], [-0.2, -0.3, -0.4]], requires_grad=True)
toy_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # [2, 3]
toy_adv = torch.tensor([1.0, -1.0])  # [2]
toy_loss, _ = policy_loss(toy_logp, None, toy_adv, toy_mask, loss_type="grpo")
toy_loss.backward()
print(f"loss = {toy_loss.item():.4f}")
print("d loss / d logp =", toy_logp.grad)
print("by hand: -A_i / (G |o_i|) =", [-1 / (2 * 2), 1 / (2 * 3)])

# %% [markdown]
# Each token of the good completion gets gradient $-1/4$ (so a gradient *descent*
# step raises its log-probability), each token of the bad one $+1/6$, and the
# padding position 0.
#
# **Update.** Backward, clip the gradient norm to 1, one AdamW step at the config's
# learning rate:

# %%
# NBVAL_IGNORE_OUTPUT
CONFIG_PATH = ROOT / "configs" / "r1_zero_arithmetic.yaml"
lr = load_config(CONFIG_PATH).learning_rate
optimizer = torch.optim.AdamW(policy.parameters(), lr=lr)
optimizer.zero_grad()
loss.backward()
grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm=1.0)
optimizer.step()
print(f"learning rate {lr:g}; gradient norm before clipping: "
      f"{grad_norm.item():.3f}")
with torch.no_grad():
    new_logp = sequence_logprobs(policy, rollout.prompt_ids, rollout.prompt_mask,
                                 rollout.completion_ids, rollout.completion_mask)
change = ((new_logp - logp.detach()) * mask).sum(1)  # [B]
step_table = pd.DataFrame({"reward": rewards, "advantage": advantages,
                           "change in log pi(o|q)": change})
informative = advantages != 0
agree = (torch.sign(change[informative]) == torch.sign(advantages[informative]))
print(f"completions with A != 0 whose log-probability moved in the direction of A: "
      f"{int(agree.sum())} of {int(informative.sum())}")
step_table.head(G)

# %% [markdown]
# One step moved the log-probability of (most) completions with a positive advantage
# up and of those with a negative advantage down; the ones with $A_i = 0$ moved only
# because they share parameters with the rest. That is all of GRPO: the rest is
# doing it many times, with bookkeeping.
#
# ## The trainer
#
# `GRPOTrainer.train_step` runs exactly these stages: `_sample_batch` calls `generate`
# and the reward functions, `group_advantages` gives the credit, and `_update` loops
# over micro-batches calling `sequence_logprobs` and `policy_loss`, accumulates the
# gradients, clips them and steps the optimizer and the learning-rate schedule. Around
# it, it logs the metrics of each step.

# %%
show_source(GRPOTrainer.train_step, docstring=False)

# %% [markdown]
# The configuration lives in `configs/r1_zero_arithmetic.yaml`; each key is a field of
# `GRPOConfig` (named as in TRL). The profile decides the run's size: the smoke profile
# takes two small steps into a temporary folder, the CPU profile runs the config as it
# is and writes its logs to `data/runs/ch07_r1_zero_cpu/` (the committed run; model
# checkpoints are not written). The harness below evaluates before and after, so the
# trainer's own periodic evaluation is switched off.

# %%
EVAL_N = P.pick(smoke=20, cpu=500, gpu=500)
if P.is_smoke:
    RUN_DIR = Path(tempfile.mkdtemp(prefix="ch07_smoke_"))
    size = ["max_steps=2", "per_step_prompts=4", "num_generations=4",
            "micro_batch_size=16", "max_completion_length=48", "sample_every=1"]
else:
    RUN_DIR = ROOT / "data" / "runs" / f"ch07_r1_zero_{P.name}"
    size = []
OVERRIDES = size + [
    f"output_dir={RUN_DIR}", "eval_every=0", "eval_on_start=false",
    "save_every=0", "save_final=false", "progress_bar=false",
    f"print_every={P.pick(smoke=1, cpu=25, gpu=25)}", "num_print_samples=2",
]
cfg = load_config(CONFIG_PATH, OVERRIDES)
shown = ["per_step_prompts", "num_generations", "max_completion_length", "temperature",
         "loss_type", "scale_rewards", "beta", "epsilon", "num_iterations",
         "learning_rate", "lr_scheduler_type", "warmup_steps", "max_steps",
         "micro_batch_size", "reward_funcs", "reward_weights", "seed"]
print(pd.Series({k: str(getattr(cfg, k)) for k in shown}).to_string())

# %% [markdown]
# ## The harness before training
#
# The evaluation harness of chapter 5 on the first held-out problems: greedy decoding,
# strict accuracy (the answer inside `<answer>` tags must be right), lenient accuracy
# (the last number in the text), format rate, language mixing and length.

# %%
# NBVAL_IGNORE_OUTPUT
t0 = time.perf_counter()
before, before_samples = evaluate(model, tok, test_set, n=EVAL_N,
                                  max_new_tokens=cfg.max_completion_length,
                                  return_samples=True)
print(f"harness on {EVAL_N} problems: {time.perf_counter() - t0:.0f} s")
before

# %% [markdown]
# ## The run
#
# `max_steps` steps of `per_step_prompts` $\times$ `num_generations` completions, as
# printed above. Each step's metrics go to `metrics.csv`; every `sample_every` steps
# that step's completions go to `samples.jsonl` and a few of the first group's are
# printed; every `print_every` steps a one-line summary is printed. The cell measures the training time itself; on this machine's CPU
# (one torch thread, shared with other jobs) it takes minutes, on a GPU well under one.

# %%
# NBVAL_IGNORE_OUTPUT
trainer = GRPOTrainer(model, tok, None, cfg, train_set)
t0 = time.perf_counter()
history = trainer.train()
train_seconds = time.perf_counter() - t0
print(f"trained {trainer.step} steps in {train_seconds:.0f} s "
      f"({train_seconds / trainer.step:.1f} s/step) with "
      f"{torch.get_num_threads()} torch thread(s) on {P.device}")

# %% [markdown]
# ## The curves
#
# `plot_run` reads `metrics.csv` and draws the standard panels: reward (total and per
# function), accuracy and format rate of the sampled completions, their length,
# the KL to the reference (not logged here: $\beta = 0$, no reference model), entropy,
# and the clipping / truncation / zero-variance fractions.

# %%
show_source(plot_run, docstring=False)

# %%
# NBVAL_IGNORE_OUTPUT
png = plot_run(RUN_DIR, save=Path(tempfile.mkdtemp()) / "curves.png",
               smooth=P.pick(smoke=1, cpu=10, gpu=10),
               title="R1-Zero on arithmetic (tiny-qwen2-base)")
display(Image(filename=str(png)))

# %%
# NBVAL_IGNORE_OUTPUT
m = read_metrics(RUN_DIR)
k = max(1, min(10, len(m) // 3))  # average the first and last k steps
first, last = m.head(k).mean(numeric_only=True), m.tail(k).mean(numeric_only=True)
for col, label in [("reward", "reward"), ("accuracy", "accuracy (sampled)"),
                   ("format_rate", "format rate (sampled)"),
                   ("completion_length", "completion length (tokens)"),
                   ("entropy", "entropy (nats/token)"),
                   ("zero_std_frac", "zero-variance groups"),
                   ("truncated_frac", "truncated completions")]:
    print(f"{label:>28}: first {k} steps {first[col]:7.3f} -> last {k} steps "
          f"{last[col]:7.3f}")
peak = m.loc[m["zero_std_frac"].idxmax()]
print(f"zero-variance groups peak at {peak.zero_std_frac:.2f} (step {int(peak.step)})")
print(f"time per step: generation {m.time_generate.mean():.1f} s, update "
      f"{m.time_update.mean():.1f} s (means)")

# %% [markdown]
# What to notice (the numbers are the ones printed above):
#
# - **Format is learned first.** The format reward is worth only 0.1, but it is the
#   easiest thing to change: early in the run nearly every sampled completion closes
#   its tags, and the format rate stays near 1 from then on.
# - **Accuracy follows more slowly, and noisily**: each step sees a fresh batch of
#   prompts, some harder than others, so the per-step accuracy jumps around its trend;
#   the mistakes that remain are the ones the pretraining corpus taught (left-to-right
#   evaluation), which need many groups where the right and the wrong order compete.
# - **Zero-variance groups grow as the model improves.** When all $G$ completions of a
#   prompt are right, the group's advantages are all zero and it teaches nothing. The
#   share of such groups is the run's wasted compute, and it is the problem that DAPO's
#   dynamic sampling addresses (chapter 9).
# - **Length and entropy.** Completions do not grow long here: an arithmetic trace has
#   a natural length, and nothing in the reward pays for more. The entropy stays low
#   because the base model was already confident about most tokens; RL sharpens it
#   further.
#
# ## The harness after training
#
# The same problems, the same greedy decoding:

# %%
# NBVAL_IGNORE_OUTPUT
after, after_samples = evaluate(model, tok, test_set, n=EVAL_N,
                                max_new_tokens=cfg.max_completion_length,
                                return_samples=True)
table = pd.concat({"before": before.loc["greedy"], "after": after.loc["greedy"]},
                  axis=1)
table["change"] = table["after"] - table["before"]
table

# %% [markdown]
# The acceptance criteria for this chapter, checked on the numbers above:

# %%
# NBVAL_IGNORE_OUTPUT
greedy = after.loc["greedy"]
checks = {
    f"training time {train_seconds:.0f} s <= 600 s": train_seconds <= 600,
    f"held-out greedy strict accuracy {greedy.strict_acc:.3f} >= 0.85":
        greedy.strict_acc >= 0.85,
    f"format rate {greedy.format_rate:.3f} >= 0.95": greedy.format_rate >= 0.95,
    f"evaluated on n = {int(greedy.n)} >= 500 held-out problems": greedy.n >= 500,
}
for text, ok in checks.items():
    print(f"{str(bool(ok)):>5}  {text}")

# %% [markdown]
# The run directory keeps what the run produced: the trainer wrote `metrics.csv`,
# `samples.jsonl` and `config.json`; the cell below adds the harness results
# (`eval.csv`, step 0 and the last step) and a `README.md` with the command, the
# device, the thread count and the times.

# %%
# NBVAL_IGNORE_OUTPUT
eval_rows = pd.DataFrame([{"step": 0, **before.loc["greedy"]},
                          {"step": trainer.step, **after.loc["greedy"]}])
eval_rows.to_csv(RUN_DIR / "eval.csv", index=False)
config_json = json.loads((RUN_DIR / "config.json").read_text())
config_json["output_dir"] = f"data/runs/{RUN_DIR.name}"  # repo-relative, not this disk
(RUN_DIR / "config.json").write_text(json.dumps(config_json, indent=2))
env = environment()
readme = f"""# {RUN_DIR.name}: R1-Zero on arithmetic from tiny-qwen2-base

Written by `chapters/07_full_loop.ipynb` (profile `{P.name}`), executed with

    OMP_NUM_THREADS=1 python scripts/run_notebook.py chapters/07_full_loop.py \\
        --profile {P.name} --timeout 2400

Config: `configs/r1_zero_arithmetic.yaml` with the overrides
`{' '.join(o for o in OVERRIDES if not o.startswith('output_dir'))}`
(full resolved config in `config.json`).

- environment: {'; '.join(f'{k} {v}' for k, v in env.items())}
- torch threads: {torch.get_num_threads()}
- training: {trainer.step} steps in {train_seconds:.0f} s \
({train_seconds / trainer.step:.1f} s/step), measured in the notebook cell
- held-out harness (greedy, first {EVAL_N} test problems), before -> after:
  strict accuracy {before.loc['greedy'].strict_acc:.3f} -> {greedy.strict_acc:.3f},
  format rate {before.loc['greedy'].format_rate:.3f} -> {greedy.format_rate:.3f},
  language mixing {before.loc['greedy'].lang_mix_rate:.3f} -> \
{greedy.lang_mix_rate:.3f}

Files: `metrics.csv` (one row per step), `samples.jsonl` (every completion of every
{cfg.sample_every}th step), `eval.csv` (the harness before and after), `config.json`.
No model checkpoint is stored.
"""
(RUN_DIR / "README.md").write_text(readme)
print(sorted(p.name for p in RUN_DIR.iterdir()))

# %% [markdown]
# ### Where did the accuracy come from?
#
# The test set records, for each problem, whether operator precedence matters (whether
# evaluating left to right would give a different answer), whether it has parentheses,
# and how many operands it has. The per-sample results of the harness, joined with
# those columns:

# %%
# NBVAL_IGNORE_OUTPUT
meta = test_set.select(range(EVAL_N)).to_pandas()[
    ["precedence_matters", "has_parens", "num_operands"]]


def by_kind(samples, column):
    s = samples[samples["mode"] == "greedy"].join(meta, on="prompt_index")
    s["kind"] = s[column]
    return s.groupby("kind").agg(n=("correct", "size"), strict_acc=("correct", "mean"),
                                 format_rate=("formatted", "mean"))


pieces = []
for column in ("precedence_matters", "has_parens", "num_operands"):
    b, a = by_kind(before_samples, column), by_kind(after_samples, column)
    part = pd.DataFrame({"n": b.n, "acc before": b.strict_acc,
                         "acc after": a.strict_acc, "format before": b.format_rate,
                         "format after": a.format_rate})
    part.index = [f"{column}={v}" for v in part.index]
    pieces.append(part)
breakdown = pd.concat(pieces)
breakdown

# %%
# NBVAL_IGNORE_OUTPUT
for kind in ("precedence_matters=True", "precedence_matters=False",
             "has_parens=True", "has_parens=False"):
    r = breakdown.loc[kind]
    print(f"{kind:>24} (n={int(r.n):>3}): strict acc {r['acc before']:.3f} -> "
          f"{r['acc after']:.3f}, format {r['format before']:.3f} -> "
          f"{r['format after']:.3f}")

# %% [markdown]
# The base model's failures were not spread evenly, and the two columns tell two
# stories. Where precedence matters, the base model mostly kept its format but lost the
# answer to its left-to-right habit: that row's gain is arithmetic. On parenthesised
# problems the base model almost never closed its tags the strict way, so its strict
# accuracy there was near zero whatever its arithmetic: much of that row's gain is
# format. This is why the harness reports lenient accuracy next to strict accuracy
# (the table in 7.6): the gap between them is the share of right answers lost to
# format.
#
# ### The `2 + 3 * 4` group again
#
# The first group of 7.1 was the base model's answers to $2 + 3 \cdot 4$. The same
# prompt, the same seed, after training:

# %%
# NBVAL_IGNORE_OUTPUT
after_rollout = generate(model, tok, [chat_prompt("2 + 3 * 4")], num_generations=G,
                         max_new_tokens=MAX_NEW, temperature=1.0, seed=0)
after_rewards = reward_fn(after_rollout.texts, answer=["14"] * G)
group = pd.DataFrame({
    "before": rollout.texts[:G], "reward before": rewards[:G].tolist(),
    "after": after_rollout.texts, "reward after": after_rewards,
    "advantage after": group_advantages(after_rewards, G).tolist(),
})
n_right = sum(accuracy_reward(after_rollout.texts, answer=["14"] * G))
print(f"right before: {int(sum(parts['accuracy_reward'][:G]))} of {G}; right after: "
      f"{int(n_right)} of {G}; distinct completions after: "
      f"{len(set(after_rollout.texts))}")
group

# %% [markdown]
# When all $G$ answers after training are right and well formatted, the group's
# rewards are equal and its advantages are all zero: the model has learned this
# prompt, and it no longer contributes a gradient. The diversity is gone too: the
# completions collapse onto one trace, the sharpening that the falling entropy in 7.5
# showed.
#
# ## What RL did not fix
#
# The base model's corpus mixes Chinese words into some reasoning traces (chapter 5).
# Nothing in the reward looks at the language of the `<think>` block, so nothing
# pushes it away:

# %%
# NBVAL_IGNORE_OUTPUT
print(f"language mixing (greedy, held-out): {before.loc['greedy'].lang_mix_rate:.3f} "
      f"before -> {greedy.lang_mix_rate:.3f} after")
mixed = after_samples[(after_samples["mode"] == "greedy") & after_samples["lang_mixed"]]
if len(mixed):
    row = mixed.iloc[0]
    print(f"e.g. {row.question} -> {row.completion}  (correct: {bool(row.correct)})")

# %% [markdown]
# A completion can be right, well formatted and still mix languages: a reward that
# does not measure a behaviour neither rewards nor punishes it. Mixing can even grow:
# a right answer with a Chinese trace gets the same positive advantage as a right
# answer with an English one, so whatever habit co-occurs with right answers is
# reinforced along with them. DeepSeek saw the same
# in R1-Zero ("poor readability, and language mixing") and added a
# language-consistency reward in R1's RL stage {cite}`deepseekai2025r1`; chapter 11
# does the same here.
#
# ## Summary
#
# - One GRPO step is five library calls: `generate`, the reward functions,
#   `group_advantages`, `sequence_logprobs` + `policy_loss`, and an optimizer step.
# - On-policy, the loss value is about zero; its gradient is not.
# - R1-Zero on the tiny base model raises held-out accuracy and format with two rule
#   rewards and no SFT; the harness, not the training reward, is the measurement.
# - Groups whose completions all agree stop teaching; their share grows as the model
#   improves.
# - What is not rewarded is not fixed: language mixing survives RL.
#
# ## Exercises
#
# Stubs to fill in, each checked by a function from `grpo_lib.exercises`. As committed,
# the stubs raise `NotImplementedError` and the cell prints a hint; solutions are in
# the appendix (`book/solutions/ch07.md`).
#
# **7.1 — From rewards to loss.** Write `my_grpo_loss(logp, rewards, mask, G)`: given
# the per-token log-probs `logp` `[B, C]` (with gradient), the rewards `[B]` of
# contiguous groups of size `G` and the completion mask `[B, C]`, return the on-policy
# GRPO loss (a scalar): group advantages with the sample standard deviation and
# $\varepsilon = 10^{-4}$, ratio $\rho = \exp(\log\pi - \operatorname{sg}(\log\pi))$,
# per-token loss $-\rho A_i$, mean over each completion's tokens, mean over
# completions. Use only `torch`. The checker compares value *and* gradient.

# %%
from grpo_lib.exercises import check_first_step_above, check_grpo_loss


def my_grpo_loss(logp, rewards, mask, G):
    # your code here
    raise NotImplementedError


try:
    check_grpo_loss(my_grpo_loss)
except NotImplementedError:
    print("Not implemented yet: r = rewards.view(-1, G); A = (r - mean) / (std + 1e-4) "
          "per row; ratio = exp(logp - logp.detach()); average -ratio * A over each "
          "row's masked tokens, then over rows.")

# %% [markdown]
# **7.2 — Reading a log.** Write `my_first_step_above(metrics, column, threshold)`:
# given a `metrics.csv` read into a DataFrame, return the first `step` (the value of
# the `step` column, not the row number) at which `column` is strictly greater than
# `threshold`, or `None` if it never is. Then use it on this chapter's run: at which
# step did more than half of the groups have zero reward variance?

# %%
def my_first_step_above(metrics, column, threshold):
    # your code here
    raise NotImplementedError


try:
    check_first_step_above(my_first_step_above)
    print(my_first_step_above(read_metrics(RUN_DIR), "zero_std_frac", 0.5))
except NotImplementedError:
    print("Not implemented yet: filter the rows where metrics[column] > threshold, "
          "sort by step, return the first step as an int (None if there is none).")

# %% [markdown]
# **7.3 — Think.** (a) In 7.1 the loss printed as about $0$. Would it still be about
# $0$ with `scale_rewards="none"`? With `loss_type="dr_grpo"`? (b) Late in the run most
# groups have zero variance. Suggest two changes to the data or the sampling that would
# keep the gradient informative, and say what each costs. (c) The format reward has
# weight 0.1. Give one reason why a much larger weight could lower the final accuracy.
