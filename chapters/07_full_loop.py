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
# (ch07)=
# # The full loop: R1-Zero on arithmetic
#
# Parts I and II built every piece of GRPO as a separate function: a sampler that
# writes a group of answers, rule rewards that score them, group advantages that turn
# the scores into credit, per-token log-probabilities, and the clipped loss. This
# chapter puts them together into the loop and runs it on the tiny base model of
# {doc}`chapter 5 <05_tiny_base_model>`, the model that still thinks
# $2 + 3 \cdot 4$ might be 20.
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
# \;\to\; \underbrace{r_i = r^{\mathrm{acc}}_i
#   + 0.1\, r^{\mathrm{fmt}}_i}_{\text{rewards}}
# \;\to\; \underbrace{\hat A_i = \frac{r_i - \bar r}
#                        {\sigma_r + \epsilon_{\mathrm{std}}}}_{\text{credit}}
# \;\to\; \underbrace{\mathcal L(\theta) = -\frac1G \sum_i \frac1{|o_i|}\sum_t
#   \min\!\big(\rho_{i,t} \hat A_i,\;
#   \operatorname{clip}(\rho_{i,t}, 1-\varepsilon, 1+\varepsilon)\, \hat A_i\big)
#   }_{\text{loss}}
# \;\to\; \theta \leftarrow \theta - \eta\, \nabla_\theta \mathcal L
# $$
#
# (the last arrow schematically: the book's step clips the gradient norm and takes an
# AdamW step), with $\bar r$ and $\sigma_r$ the mean and standard deviation of the
# group's rewards,
# $\rho_{i,t} = \pi_\theta(o_{i,t}\mid q, o_{i,<t}) /
# \pi_{\theta_{\mathrm{old}}}(o_{i,t}\mid q, o_{i,<t})$ the policy ratio, $\varepsilon$
# the clip range and $\eta$ the learning rate (the symbols are those of
# {ref}`notation`).

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import copy
import json
import os
import re
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
import transformers
from IPython.display import Image, display

from grpo_lib import evaluate
from grpo_lib.advantages import group_advantages
from grpo_lib.corpus import CorpusMix
from grpo_lib.display import environment, say, show_source
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.parsing import extract_answer
from grpo_lib.plots import plot_run, read_metrics
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.runs import parting_step
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
# (ch07-one-step)=
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
# **Rollout.** `generate` ({doc}`chapter 6 <06_rollouts>`) repeats each prompt $G$
# times contiguously, so that rows $0..G-1$ are the first prompt's group, and decodes
# them together at temperature 1 with the token loop of chapter 6:

# %%
show_source(generate, start="texts, ids, mask = tokenize_prompts",
            end="model.train(was_training)")

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
# **Rewards.** The rule rewards of {doc}`chapter 3 <03_rule_rewards>`, combined by
# `combine_rewards` (chapter 3 shows it): accuracy plus 0.1 times format. R1-Zero used
# these two rewards; the weights are this book's, as the R1 paper gives none.
# Each reward function receives the dataset columns repeated to line up with the
# completions.

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
# **Credit.** `group_advantages` ({doc}`chapter 1 <01_two_plus_three_times_four>`
# shows it) centres each group on its mean and divides by its standard deviation; a
# group whose rewards are all equal gets zeros and contributes nothing to the
# gradient.

# %%
# NBVAL_IGNORE_OUTPUT
advantages = group_advantages(rewards, G)  # [B]
print(advantages.view(-1, G))  # [num_prompts, G]
zero = (rewards.view(-1, G) == rewards.view(-1, G)[:, :1]).all(1)
print(f"groups with zero reward variance: {int(zero.sum())} of {len(rows)}")

# %% [markdown]
# **Log-probabilities.** `sequence_logprobs` ({doc}`chapter 4 <04_causal_lm_shift>`
# shows it) runs the policy once over prompt and completion and reads off
# $\log \pi_\theta(o_{i,t}\mid q, o_{i,<t})$ for every completion token; padding
# positions are 0.

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
# policy, so `old_logp=None` means $\pi_{\theta_{\mathrm{old}}} = \pi_\theta$
# detached: every ratio is 1 and nothing is clipped, but the gradient of
# $\rho_{i,t}$ is still $\nabla \log \pi_\theta$. `policy_loss` puts the clipped
# surrogate of {doc}`chapter 2 <02_objective>` per token, adds the KL penalty when
# $\beta > 0$, and averages the tokens as `loss_type` says
# ({doc}`chapter 8 <08_loss_variants>` compares the ways, and the other branches and
# `keep`). The part that builds the loss:

# %%
show_source(policy_loss, start="old_logp = logp.detach() if old_logp is None",
            end="loss = aggregate_grpo(per_token_loss, mask)")

# %%
# NBVAL_IGNORE_OUTPUT
adv = advantages.to(logp.device)  # rewards were scored on the CPU
loss, stats = policy_loss(logp, None, adv, mask, loss_type="grpo", epsilon=0.2)
print(f"loss = {loss.item():+.6f}")
print({k: round(v, 4) for k, v in stats.items()
       if k in ("ratio_mean", "clip_frac_region", "num_tokens")})

# %% [markdown]
# The loss is (almost) zero, yet it has a gradient. That is not a bug: on-policy, the
# per-token loss is $-\hat A_i$, its mean over each completion's tokens is
# $-\hat A_i$, and the mean of group-normalised advantages is zero. What is not zero is
# its gradient,
# $-\frac1G\sum_i \frac{\hat A_i}{|o_i|}\sum_t \nabla\log\pi_\theta(o_{i,t})$.
# A case small enough to check by hand: two completions of two and three tokens with
# advantages $+1$ and $-1$.

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
change = ((new_logp - logp.detach()) * mask).sum(1).cpu()  # [B]
step_table = pd.DataFrame({"reward": rewards, "advantage": advantages,
                           "change in log pi(o|q)": change})
informative = advantages != 0
agree = (torch.sign(change[informative]) == torch.sign(advantages[informative]))
print(f"completions with A != 0 whose log-probability moved in the direction of A: "
      f"{int(agree.sum())} of {int(informative.sum())}")
step_table.head(G)

# %% [markdown]
# One step moved the log-probability of (most) completions with a positive advantage
# up and of those with a negative advantage down. A completion with $\hat A_i = 0$, in
# a group whose answers all score alike (the batch's count of such groups is printed
# above), would move only because it shares parameters with the rest. That is all of
# GRPO: the rest is doing it many times, with bookkeeping.
#
# ## The trainer
#
# `GRPOTrainer.train_step` runs exactly these stages. `_sample_batch` calls `generate`
# and the reward functions; most of the rest of `train_step` computes the step's
# metrics. The learning happens in these lines (`_deferred_sigint` lets a Ctrl-C
# wait until the update is complete; `_sync_reference` does nothing unless the KL
# reference is set to move, {ref}`chapter 9 <ch09-ref-sync>`):

# %%
show_source(GRPOTrainer.train_step, start="advantages = self.advantages(rewards)",
            end="self._last_batch = (rollout")

# %% [markdown]
# `advantages` weighs and sums the reward functions' scores, then normalises the
# sum within each group: `group_advantages` from chapter 1. (Its other branch
# normalises each reward within its group before summing, for rewards of very
# different scales.)

# %%
show_source(GRPOTrainer.advantages, docstring=False)

# %% [markdown]
# `_update` is the hand-made step above, split into micro-batches so that a large
# batch fits in memory: each micro-batch's loss is scaled by its share of the rows
# (`num_micro_batches=step_rows / rows`; here one update takes the whole batch, so
# `step_rows` is $B$), so the accumulated gradient is that of the whole batch. After
# the loop it clips the gradient norm, and steps the optimizer and the learning-rate
# schedule. `_kept_terms` and the arguments `delta`, `keep` and
# `sapo_temperatures` belong to knobs of {ref}`chapter 8 <ch08-four-knobs>`; at their
# defaults they change nothing.

# %%
show_source(GRPOTrainer._update, start="for k, sl in enumerate(step_chunks):",
            end="loss.backward()")

# %% [markdown]
# The configuration lives in `configs/r1_zero_arithmetic.yaml`; each key is a field of
# `GRPOConfig` (named as in TRL where TRL has the field). The profile decides the run's
# size: the smoke profile takes two small steps into a temporary folder, the CPU
# profile runs the config as it
# is and writes its logs to `data/runs/ch07_r1_zero_cpu/` (the run kept in the
# repository; model checkpoints are not written). The harness below evaluates before
# and after, so the trainer's own periodic evaluation is switched off.

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
         "micro_batch_size", "reward_funcs", "reward_weights", "seed",
         "rollout_engine"]
print(pd.Series({k: str(getattr(cfg, k)) for k in shown}).to_string())

# %% [markdown]
# ## The harness before training
#
# The evaluation harness of {doc}`chapter 5 <05_tiny_base_model>` on the first held-out
# problems: greedy decoding,
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
# printed; every `print_every` steps a one-line summary is printed. The cell measures
# the training time itself; on a CPU it takes minutes (the next table sets it beside
# two H100 runs of this config that rolled out with chapter 6's loop). The trainer
# rolls out with its default engine, `rollout_engine="fast"`: the decode step of
# {doc}`chapter 19 <19_fast_steps>`, which computes the logits of chapter 6's loop with
# fewer operations and draws each token as `torch.multinomial` does.
# {ref}`ch07-engines` checks what that changes.

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
# Where does the time go? Every step logs how long its generation and its update
# took. The same table for two H100 runs of this config that rolled out with
# chapter 6's loop (`rollout_engine=transformers`, on a GPU that other runs shared, as
# their device column says), stored in `data/runs/` with their logs (the whole chapter
# executed on an H100 is in `data/runs/ch07_gpu_h100/`), and for this config and seed
# rolled out by chapter 6's loop on a CPU:

# %%
# NBVAL_IGNORE_OUTPUT
def step_times(run_dir, device):
    m = read_metrics(run_dir)
    return {"device": device, "steps": len(m), "training (s)": m.time_step.sum(),
            "generation per step (s)": m.time_generate.mean(),
            "update per step (s)": m.time_update.mean()}


threads = torch.get_num_threads()
times = {"this run": step_times(RUN_DIR, f"{P.device}, {threads} torch thread(s)")}
for gpu_run in sorted((ROOT / "data" / "runs").glob("r1_zero_tiny_h100_seed*")):
    card = (gpu_run / "README.md").read_text()  # its table names the device
    device = re.search(r"^\| device \| (.+?) \|$", card, flags=re.M).group(1)
    times[gpu_run.name] = step_times(gpu_run, device)
loop_run = ROOT / "data" / "runs" / "ch07_r1_zero_transformers_cpu"  # chapter 6's loop
card = (loop_run / "README.md").read_text()
loop_device = re.search(r"^\| device \| (.+?) \|$", card, flags=re.M).group(1)
times[loop_run.name] = step_times(loop_run, loop_device)
times = pd.DataFrame(times).T
gpu = times.loc[[name for name in times.index if "h100" in name]]
say(f"On the H100, rolling out with chapter 6's loop, the {int(gpu.steps.iloc[0])} "
    f"steps took {gpu['training (s)'].min():.0f}-{gpu['training (s)'].max():.0f} s, "
    f"and generating took "
    f"{(gpu['generation per step (s)'] / gpu['update per step (s)']).mean():.0f} "
    f"times as long as updating: with that loop a model of a million parameters "
    f"leaves the GPU idle while it decodes one token at a time. Here, on "
    f"{times.loc['this run', 'device']}, the steps took "
    f"{times.loc['this run', 'training (s)']:.0f} s, and the fast engine generated "
    f"a step's completions in "
    f"{times.loc['this run', 'generation per step (s)']:.2f} s against "
    f"{gpu['generation per step (s)'].min():.2f}-"
    f"{gpu['generation per step (s)'].max():.2f} s for the H100's older loop.")
loop = times.loc[loop_run.name]
say(f"The row `{loop_run.name}` is this config and seed from the command line with "
    f"`rollout_engine=transformers`, on {loop_device}: its generation took "
    f"{loop['generation per step (s)']:.2f} s per step against "
    f"{times.loc['this run', 'generation per step (s)']:.2f} s here, and its "
    f"{int(loop['steps'])} steps {loop['training (s)']:.0f} s against "
    f"{times.loc['this run', 'training (s)']:.0f} s.")
times

# %% [markdown]
# (ch07-curves)=
# ## The curves
#
# `plot_run` reads `metrics.csv` and draws the standard panels: reward, accuracy and
# format rate of the sampled completions, their length, entropy, and the clipping /
# truncation / zero-variance fractions. It leaves out what the run did not log: with
# $\beta = 0$ there is no reference model and no KL, and a line that is 0 at every
# step is named in its panel's legend instead of drawn (with $\mu = 1$ every ratio is
# 1, so nothing is ever clipped).

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
rolling = m.rolling(k, min_periods=1).mean(numeric_only=True)  # k-step means
for col, level in [("format_rate", 0.95), ("accuracy", 0.8)]:
    hit = m.step[rolling[col] >= level]
    where = f"step {int(hit.iloc[0])}" if len(hit) else "never"
    print(f"{k}-step mean of {col} first >= {level}: {where}")
peak = m.loc[m["zero_std_frac"].idxmax()]
print(f"zero-variance groups peak at {peak.zero_std_frac:.2f} (step {int(peak.step)})")
print(f"time per step: generation {m.time_generate.mean():.1f} s, update "
      f"{m.time_update.mean():.1f} s (means)")

# %% [markdown]
# What to notice (the numbers are the ones printed above):
#
# - **Format is learned first.** The format reward is worth only 0.1, but it is the
#   easiest thing to change: early in the run nearly every sampled completion closes
#   its tags (the printout gives the step at which the format rate's 10-step mean
#   passes 0.95), and the format rate stays near 1 from then on, while the accuracy
#   rises more slowly.
# - **Accuracy follows more slowly, and noisily**: each step sees a fresh batch of
#   prompts, some harder than others, so the per-step accuracy jumps around its trend;
#   the base model's arithmetic mistakes are the ones its pretraining corpus taught
#   (left-to-right evaluation), which need many groups where the right and the wrong
#   order compete.
# - **Zero-variance groups grow as the model improves.** When all $G$ completions of a
#   prompt are right, the group's advantages are all zero and it teaches nothing. The
#   share of such groups is the run's wasted compute, and it is the problem that DAPO's
#   dynamic sampling addresses ({doc}`chapter 9 <09_failure_modes>`).
# - **Length and entropy.** Completions do not grow long here: an arithmetic trace has
#   a natural length, and nothing in the reward pays for more. The entropy stays low
#   because the base model was already confident about most tokens; RL sharpens it
#   further.
#
# (ch07-after)=
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
# What a CPU run reaches in a few minutes, in one table: the held-out greedy strict
# accuracy and format rate after training, on how many problems, and the training
# time measured above.

# %%
# NBVAL_IGNORE_OUTPUT
greedy = after.loc["greedy"]
pd.Series({"held-out greedy strict accuracy": f"{greedy.strict_acc:.3f}",
           "held-out format rate": f"{greedy.format_rate:.3f}",
           "held-out problems": f"{int(greedy.n)}",
           "training time (s)": f"{train_seconds:.0f}"}).to_frame("this run")

# %% [markdown]
# (ch07-engines)=
# ### The fast engine against chapter 6's loop
#
# The trainer rolled out with `rollout_engine="fast"`; the run
# `ch07_r1_zero_transformers_cpu` of the time table is the same config and seed rolled
# out by chapter 6's loop. On one machine, with the same torch threads, the two should
# sample the same tokens and so train the same run. Compare them step by step, and on
# the harness:

# %%
# NBVAL_IGNORE_OUTPUT
ours, loops = read_metrics(RUN_DIR), read_metrics(loop_run)
if P.is_smoke:  # two small steps of another size: nothing to compare
    print(f"smoke profile: {len(ours)} steps of another size; the cpu profile compares")
else:
    parted = parting_step(ours, loops)  # first step whose rewards or lengths differ
    loop_strict = pd.read_csv(loop_run / "eval.csv").iloc[-1]["strict_acc"]
    say((f"Sampled rewards and lengths are equal at all {len(ours)} steps"
         if parted is None else
         f"Sampled rewards and lengths are equal through step {parted - 1} and "
         f"differ from step {parted} on (two machines, or two thread counts, round "
         f"differently, as chapter 8 shows)")
        + f". Held-out strict accuracy: {greedy.strict_acc:.3f} with the fast "
        f"engine, {loop_strict:.3f} with chapter 6's loop.")

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
omp = os.environ.get("OMP_NUM_THREADS")
prefix = f"OMP_NUM_THREADS={omp} " if omp else ""
readme = f"""# {RUN_DIR.name}: R1-Zero on arithmetic from tiny-qwen2-base

Written by `chapters/07_full_loop.ipynb` (profile `{P.name}`), executed with

    {prefix}python scripts/run_notebook.py chapters/07_full_loop.py \\
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
  lenient accuracy {before.loc['greedy'].lenient_acc:.3f} -> \
{greedy.lenient_acc:.3f},
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
# (ch07-breakdown)=
# ### Where did the accuracy come from?
#
# The test set records, for each problem, whether operator precedence matters (whether
# evaluating left to right would give a different answer), whether it has parentheses,
# and how many operands it has. The per-sample results of the harness, joined with
# those columns (strict accuracy needs the answer inside the tags, lenient accuracy
# takes the last number in the text):

# %%
# NBVAL_IGNORE_OUTPUT
meta = test_set.select(range(EVAL_N)).to_pandas()[
    ["precedence_matters", "has_parens", "num_operands"]]


def by_kind(samples, column):
    s = samples[samples["mode"] == "greedy"].join(meta, on="prompt_index")
    s["kind"] = s[column]
    return s.groupby("kind").agg(n=("correct", "size"), strict=("correct", "mean"),
                                 lenient=("lenient_correct", "mean"),
                                 format=("formatted", "mean"))


pieces = []
for column in ("precedence_matters", "has_parens", "num_operands"):
    b, a = by_kind(before_samples, column), by_kind(after_samples, column)
    part = pd.DataFrame({"n": b.n, "strict before": b.strict, "strict after": a.strict,
                         "lenient before": b.lenient, "lenient after": a.lenient,
                         "format before": b.format, "format after": a.format})
    part.index = [f"{column}={v}" for v in part.index]
    pieces.append(part)
breakdown = pd.concat(pieces)
breakdown

# %%
# NBVAL_IGNORE_OUTPUT
def row(kind):
    return breakdown.loc[kind] if kind in breakdown.index else None


pm, pp = row("precedence_matters=True"), row("has_parens=True")
if pm is not None and pp is not None:
    say(f"The base model's failures were not spread evenly, and two rows of the table "
        f"tell two stories. Where precedence matters, the base model mostly kept its "
        f"format ({pm['format before']:.2f}) but lost the answer to its left-to-right "
        f"habit (strict {pm['strict before']:.2f}); after training, strict "
        f"{pm['strict after']:.2f}: that row's gain is arithmetic. On parenthesised "
        f"problems the base model wrote the tags the strict way in "
        f"{pp['format before']:.2f} of its answers, so its "
        f"strict accuracy there was {pp['strict before']:.2f} although the last "
        f"number it wrote was right in {pp['lenient before']:.2f}; after training, "
        f"strict {pp['strict after']:.2f}: much of that row's gain is format. This is "
        f"why the harness reports lenient accuracy next to strict accuracy: the gap "
        f"between them is the share of right answers lost to format.")

# %% [markdown]
# (ch07-two-operands)=
# ### Two-operand problems
#
# One row of the table needs a closer look: the problems with two operands, such as
# `9 + 4`, where the whole answer is one fact.

# %%
# NBVAL_IGNORE_OUTPUT
two = row("num_operands=2")
if two is not None:
    lost = two["lenient after"] < two["lenient before"]
    say(f"On the {int(two.n)} two-operand problems, strict accuracy went from "
        f"{two['strict before']:.3f} to {two['strict after']:.3f}, and lenient "
        f"accuracy from {two['lenient before']:.3f} to {two['lenient after']:.3f}"
        + (": the trained model gets some wrong whose right number the base model "
           "wrote." if lost else "."))

# %% [markdown]
# The base model wrote many of its answers to these problems without the tags
# (`9 + 4 = 13. The answer is 13.`), which strict accuracy counts as wrong; the trained
# model writes every answer inside them. To see what the base model knows *inside* the
# tags, make it start its answer with `<think>` and let it continue greedily. The
# problems on which the trained model, or the base model made to write `<think>`, is
# wrong:

# %%
# NBVAL_IGNORE_OUTPUT
base_model, _ = load_model_and_tokenizer(MODEL_DIR, device=P.device)  # untrained
greedy_before = before_samples[before_samples["mode"] == "greedy"].set_index(
    "prompt_index")
greedy_after = after_samples[after_samples["mode"] == "greedy"].set_index(
    "prompt_index")
two_ops = meta.index[meta.num_operands == 2]
questions = [test_set[int(i)]["question"] for i in two_ops]
right = [test_set[int(i)]["answer"] for i in two_ops]
think_prompts = [tok.apply_chat_template(chat_prompt(q), tokenize=False,
                                         add_generation_prompt=True) + "<think>"
                 for q in questions]  # raw text: generate uses it as it is
forced = generate(base_model, tok, think_prompts, do_sample=False,
                  max_new_tokens=cfg.max_completion_length)
forced_texts = ["<think>" + t for t in forced.texts]
probe = pd.DataFrame({
    "question": questions, "answer": right,
    "base": greedy_before.loc[two_ops, "completion"].to_numpy(),
    "base, made to write <think>": forced_texts,
    "trained": greedy_after.loc[two_ops, "completion"].to_numpy(),
    "base <think> right": [a == 1.0 for a in accuracy_reward(forced_texts,
                                                             answer=right)],
    "trained right": greedy_after.loc[two_ops, "correct"].to_numpy(),
}, index=two_ops)
probe[~probe["trained right"] | ~probe["base <think> right"]]

# %%
# NBVAL_IGNORE_OUTPUT
untagged = ~greedy_before.loc[two_ops, "formatted"]
wrong_after = probe[~probe["trained right"]]
also_wrong = wrong_after[~wrong_after["base <think> right"]]
same = sum(extract_answer(a, strict=True) == extract_answer(b, strict=True)
           for a, b in zip(also_wrong["trained"],
                           also_wrong["base, made to write <think>"]))
repaired = int((~probe["base <think> right"] & probe["trained right"]).sum())
broken = int((probe["base <think> right"] & ~probe["trained right"]).sum())
miscopied = sum(not t.startswith(f"<think> {q} ")  # the step starts elsewhere
                for q, t in zip(wrong_after["question"], wrong_after["trained"]))
share_train = (train_set.to_pandas().num_operands == 2).mean()
seen = trainer.step * cfg.per_step_prompts
say(f"The base model answered {int(untagged.sum())} of the {len(probe)} two-operand "
    f"problems without the tags, and the number it wrote was right in "
    f"{int(greedy_before.loc[two_ops][untagged]['lenient_correct'].sum())} of them. "
    f"Made to start with `<think>`, it gets {probe['base <think> right'].mean():.3f} "
    f"of the {len(probe)} right; the trained model gets "
    f"{probe['trained right'].mean():.3f}. Of the {len(wrong_after)} the trained "
    f"model gets wrong, the base model made to write `<think>` gets {len(also_wrong)} "
    f"wrong as well ({same} with the same wrong answer). Training fixed {repaired} "
    f"of the {int((~probe['base <think> right']).sum())} that the base model gets "
    f"wrong inside the tags and broke {broken} that it gets right; {miscopied} of the "
    f"trained model's {len(wrong_after)} wrong answers start their step from numbers "
    f"that are not the question's. Two-operand problems are "
    f"{share_train:.1%} of the training problems, so the run's {seen:,} prompts held "
    f"about {share_train * seen:.0f} of them; the pretraining corpus, written from the "
    f"same training problems, drew a broken format for {CorpusMix().format_rate:.0%} "
    f"of its two-operand problems (and of its parenthesised ones, unless they drew "
    f"the left-to-right flaw first).")

# %% [markdown]
# The base model has two ways to answer `9 + 4`, and they do not know the same facts.
# Written without tags, the one-step answer is right; written inside `<think>`, some
# are wrong, because a one-step answer inside the tags was rare in its corpus:
# two-operand problems are few among the training problems the corpus was written
# from, and {doc}`chapter 5 <05_tiny_base_model>` made most of those few come in a
# broken format. The format reward moved every answer into the tagged way, which is
# what it pays for. The tagged way's facts did not simply come along: the counts above
# say how many of its wrong answers training repaired and how many of its right ones
# it broke, and how many of the trained model's wrong answers start their step from
# numbers that are not the question's, a slip in copying rather than a wrong fact.
# Two-operand prompts were a handful in the whole run, so the updates that moved
# these answers were mostly made for longer problems, and nothing in them holds a
# right answer in place. A rule reward teaches what the training prompts exercise; a
# held-out category that training barely covers is where to look for a regression,
# and it shows only in a breakdown like the one above.
#
# ### The `2 + 3 * 4` group again
#
# The first group of {ref}`ch07-one-step` was the base model's answers to
# $2 + 3 \cdot 4$. The same prompt, the same seed, after training:

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
n_right = int(sum(accuracy_reward(after_rollout.texts, answer=["14"] * G)))
distinct = (len(set(rollout.texts[:G])), len(set(after_rollout.texts)))
print(f"right before: {int(sum(parts['accuracy_reward'][:G]))} of {G}; right after: "
      f"{n_right} of {G}; distinct completions {distinct[0]} before, "
      f"{distinct[1]} after")
if len(set(after_rewards)) == 1:
    say("After training the group's rewards are all equal, so its advantages are all "
        "zero: the model has learned this prompt, and it no longer contributes a "
        "gradient.")
else:
    say("After training the group's rewards still differ, so the prompt still "
        "contributes a gradient.")
if distinct[1] < distinct[0]:
    say("The diversity shrinks too: the completions collapse onto fewer traces, the "
        "sharpening that the falling entropy in the curves above showed.")
group

# %% [markdown]
# ## What RL did not fix
#
# The base model's corpus mixes Chinese words into some reasoning traces
# ({doc}`chapter 5 <05_tiny_base_model>`). Nothing in the reward looks at the language
# of the `<think>` block, so nothing pushes it away:

# %%
# NBVAL_IGNORE_OUTPUT
mix_before, mix_after = before.loc["greedy"].lang_mix_rate, greedy.lang_mix_rate
print(f"language mixing (greedy, held-out): {mix_before:.3f} before -> "
      f"{mix_after:.3f} after")
mixed = after_samples[(after_samples["mode"] == "greedy") & after_samples["lang_mixed"]]
if len(mixed):
    example = mixed.iloc[0]
    print(f"e.g. {example.question} -> {example.completion}  "
          f"(correct: {bool(example.correct)})")
if mix_after > mix_before:
    say("Here the mixing even grew.")

# %% [markdown]
# A completion can be right, well formatted and still mix languages: a reward that
# does not measure a behaviour neither rewards nor punishes it. Mixing can even grow:
# a right answer with a Chinese trace gets the same positive advantage as a right
# answer with an English one, so whatever habit co-occurs with right answers is
# reinforced along with them. DeepSeek saw the same in R1-Zero ("poor readability, and
# language mixing") and added a language-consistency reward in R1's RL stage
# {cite}`deepseekai2025r1`; chapter 3 wrote such a reward
# (`language_consistency_reward`), and {doc}`11_language_consistency` trains with
# it.
#
# ## Summary
#
# - One GRPO step is five library calls: `generate`, the reward functions,
#   `group_advantages`, `sequence_logprobs` + `policy_loss`, and an optimizer step.
# - On-policy, the loss value is about zero; its gradient is not.
# - R1-Zero on the tiny base model raises held-out accuracy and format with two rule
#   rewards and no SFT; the harness, not the training reward, is the measurement.
# - The format reward moves every answer into the tagged way of answering; where the
#   base model's facts differ between its two ways (two-operand problems), strict
#   accuracy hides what lenient accuracy shows.
# - Groups whose completions all agree stop teaching; their share grows as the model
#   improves.
# - What is not rewarded is not fixed: language mixing survives RL.
#
# ## Exercises
#
# Stubs to fill in, each checked by a function from `grpo_lib.exercises.ch07`. As
# written, the stubs raise `NotImplementedError` and the cell prints a hint;
# solutions are in the appendix, {doc}`../book/solutions/ch07`.
#
# **7.1 — From rewards to loss.** Write `my_grpo_loss(logp, rewards, mask, G)`: given
# the per-token log-probs `logp` `[B, C]` (with gradient), the rewards `[B]` of
# contiguous groups of size `G` and the completion mask `[B, C]`, return the on-policy
# GRPO loss (a scalar): group advantages with the sample standard deviation and
# $\epsilon_{\mathrm{std}} = 10^{-4}$, ratio
# $\rho = \exp(\log\pi_\theta - \operatorname{sg}(\log\pi_\theta))$, per-token loss
# $-\rho \hat A_i$, mean over each completion's tokens, mean over completions. Use only
# `torch`. The checker compares value *and* gradient.

# %%
from grpo_lib.exercises.ch07 import check_first_step_above, check_grpo_loss


def my_grpo_loss(logp, rewards, mask, G):
    # your code here
    raise NotImplementedError


try:
    check_grpo_loss(my_grpo_loss)
except NotImplementedError:
    print("Not implemented yet. Hint: one row per group makes the advantages easy; "
          "then ask what must stay attached to the graph for the ratio, which is 1, "
          "to still have a gradient.")

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
    print("Not implemented yet. Hint: pandas can select rows by a condition; think "
          "about what a log that was resumed, or is not sorted, does to 'the first'.")

# %% [markdown]
# **7.3 — Think.** (a) In {ref}`ch07-one-step` the loss printed as about $0$. Would it
# still be about $0$ with `scale_rewards="none"`? With `loss_type="dr_grpo"`? (b) Late
# in the run most groups have zero variance. Suggest two changes to the data or the
# sampling that would keep the gradient informative, and say what each costs. (c) The
# format reward has weight 0.1. Give one reason why a much larger weight could lower
# the final accuracy.
