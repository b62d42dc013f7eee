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
# (ch20)=
# # Asynchronous RL
#
# In chapter 7's loop the sampler and the update take turns: while the model samples,
# the optimizer waits, and while it updates, the sampler waits. Systems built for
# scale, such as AReaL {cite}`fu2025areal`, run them at the same time: rollout workers
# keep sampling with slightly older weights while the trainer updates. This chapter
# builds that on two CPU cores, one sampling and one training:
#
# 1. **where a synchronous step waits**, measured;
# 2. **versions and bounded staleness**: the rule that keeps samples at most
#    $\Delta$ updates old, on paper first;
# 3. **the objective on stale data**: plain GRPO against AReaL's decoupled PPO;
# 4. **a run**, live, with a rollout worker in its own process;
# 5. **the sweep** $\Delta = 0, 1, 2, 4$, two seeds each, from stored runs in
#    `data/runs/`: throughput and accuracy against wall-clock time;
# 6. **a worker that dies** mid-run, and a trainer that loses no step.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import json
import os
import signal
import tempfile

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.async_rl import (AsyncConfig, AsyncGRPOTrainer, simulate_schedule,
                               worker_main)
from grpo_lib.display import say, show_source
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import load_config

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
transformers.utils.logging.disable_progress_bar()

ROOT = DATA_DIR.parents[1]  # the repository root
RUNS = ROOT / "data" / "runs"
CONFIG = ROOT / "configs" / "r1_zero_arithmetic.yaml"  # chapter 7's run
MODEL = ROOT / "data" / "models" / "tiny-qwen2-base"


def chapter7(overrides=()):
    """Chapter 7's configuration with ``overrides`` (``key=value`` strings)."""
    return load_config(CONFIG, [f"model_name_or_path={MODEL}", *overrides])

# %% [markdown]
# ## Where a synchronous step waits
#
# The sweep at the end of this chapter includes two synchronous runs of chapter 7's
# configuration ($\Delta = 0$, two seeds, 100 steps): the worker samples while the
# trainer waits, then the trainer updates while the worker waits. Their logs split
# every step into the two. With one core each, a sampler that runs during the update
# would hide the shorter of the two:
#
# $$t_{\text{sync}} = t_{\text{gen}} + t_{\text{upd}}, \qquad
# t_{\text{async}} \approx \max(t_{\text{gen}}, t_{\text{upd}}).$$

# %%
# NBVAL_IGNORE_OUTPUT
sync = pd.concat([pd.read_csv(RUNS / f"ch20_eta0_seed{s}_cpu" / "metrics.csv")
                  for s in (0, 1)])
sync = sync[sync.step > 1]  # the first step carries the start-up
t_gen, t_upd = sync["time_worker_generate"].median(), sync["time_update"].median()
predicted = (t_gen + t_upd) / max(t_gen, t_upd)
say(f"A synchronous step: {t_gen:.2f} s of sampling and {t_upd:.2f} s of update "
    f"(medians over both runs, one torch thread each). Overlapped, a step would take "
    f"about {max(t_gen, t_upd):.2f} s instead of {t_gen + t_upd:.2f} s: "
    f"{predicted:.2f}x the throughput.")

# %% [markdown]
# ## Versions and bounded staleness
#
# The policy after $k$ updates is **version** $k$. Batch $s$ (counting from 0)
# feeds update $s+1$. If the worker sampled it with version $v$, the batch is
# $s - v$ versions stale when it is used. A bound $\Delta$ on that (AReaL calls it
# `max_head_offpolicyness`) is kept by one rule in the worker:
#
# > start batch $s$ only once version $s - \Delta$ is published, and sample it with
# > the newest published version.
#
# $\Delta = 0$ is the synchronous loop: batch $s$ waits for version $s$. TRL's
# asynchronous trainer bounds the same number, `max_staleness`, the other way round:
# its workers keep sampling ahead and the trainer drops a sample that arrives more
# than $\Delta$ versions old, so sampling time can be lost but is never waited for.
# Our rule, simulated for the two measured durations (`simulate_schedule` plays it
# out for fixed times):

# %%
# NBVAL_IGNORE_OUTPUT
plan = pd.DataFrame({
    eta: {"seconds per step": (d := simulate_schedule(t_gen, t_upd, eta, 150))
          ["update_end"].iloc[-1] / 150,
          "mean staleness": d["staleness"].mean()}
    for eta in (0, 1, 2, 4)}).T.rename_axis("Δ")
print(plan.to_string(float_format=lambda v: f"{v:.2f}"))

# %% [markdown]
# When sampling is the faster half, as here, one version of slack gives all the
# speed there is. A larger $\Delta$ only lets the worker run further ahead, so the
# samples get older and nothing gets faster. When sampling is the slower half, the
# staleness settles at 1 whatever $\Delta \ge 1$ allows (exercise 20.1 asks why).
#
# The worker is `worker_main`, a function run in its own process. The versions
# reach it through a file (`policy.pt`, written to a temporary name and renamed, so
# it never reads half a file) and a shared counter, kept without a lock: a worker
# killed while holding one would leave it held, and the next worker and the
# trainer would wait on it forever. The loop:

# %%
show_source(worker_main, start="while not stop.value:", end="index += 1")

# %% [markdown]
# ## The objective on stale data
#
# GRPO's ratio compares the policy being updated with the policy that sampled. On a
# stale batch that sampler is an older version, the **behaviour** policy
# $\pi_{\text{behav}}$. Two ways to train on it:
#
# - **plain GRPO** (`objective="ignore"`): pretend the batch is on-policy, so the
#   ratio is taken against the **proximal** policy $\pi_{\text{prox}}$, the
#   trainer's weights at the start of the step;
# - **decoupled PPO** (`objective="decoupled"`, AReaL {cite}`fu2025areal`): clip
#   against that proximal policy too, but weight each token by how much more likely
#   $\pi_{\text{prox}}$ finds it than the behaviour policy did:
#
# $$\mathcal L_{i,t} = -\,\underbrace{\min\!\Big(\frac{\pi_{\text{prox}}}
# {\pi_{\text{behav}}}, c\Big)}_{\text{behaviour weight}}
# \min\big(\rho_{i,t}\hat A_i,\ \operatorname{clip}(\rho_{i,t}, 1-\varepsilon,
# 1+\varepsilon)\,\hat A_i\big), \qquad
# \rho_{i,t} = \frac{\pi_\theta}{\pi_{\text{prox}}}.$$
#
# Our asynchronous trainer makes one update per batch (it refuses any other
# `num_iterations`), and at that update $\pi_\theta$ is still $\pi_{\text{prox}}$:
# $\rho_{i,t} \equiv 1$, the clip never binds, and the objective reduces to a
# policy gradient with each token weighted by its behaviour weight. Here the two
# objectives differ by that weight alone; the clip would matter if a batch fed
# several updates.
#
# The worker returns the log-probs it sampled with, so the weight costs nothing
# extra. In `grpo_lib` it is the sampling correction of chapter 19 in mode
# `token_truncate`, with the cap $c$ = `behaviour_weight_cap`: a weight above $c$
# counts as $c$, as in TRL's truncated importance sampling. AReaL drops such a
# token instead (its weight becomes 0); `behaviour_weight_mode="token_mask"` does
# that here.
#
# ## A run, live
#
# Chapter 7's configuration with a worker process and $\Delta = 1$. Both processes use
# one torch thread:

# %%
# NBVAL_IGNORE_OUTPUT
torch.set_num_threads(1)
steps = P.pick(smoke=3, cpu=30, gpu=100)
live_dir = tempfile.mkdtemp(prefix="ch20_async_")
config = chapter7([
    f"output_dir={live_dir}", f"max_steps={steps}", "eval_every=0",
    "eval_on_start=false", "save_every=0", "save_final=false", "print_every=0",
    "sample_every=0", f"device={P.device}",
    *(["per_step_prompts=2", "num_generations=4", "micro_batch_size=8",
       "max_completion_length=32"] if P.is_smoke else [])])
model, tok = load_model_and_tokenizer(MODEL, device=P.device)
trainer = AsyncGRPOTrainer(model, tok, None, config,
                           load_task_split("arithmetic", "train"),
                           async_config=AsyncConfig(max_staleness=1))
live = trainer.train()
print(live[["step", "accuracy", "staleness", "time_wait", "time_worker_generate",
            "time_update", "time_step"]].iloc[[0, 1, len(live) // 2, -1]]
      .to_string(index=False))

# %%
# NBVAL_IGNORE_OUTPUT
later = live[live.step > 1]
lo, hi = later["staleness"].min(), later["staleness"].max()
say("After the first step every batch is "
    + (f"{lo:.0f} version{'' if lo == 1 else 's'} old" if lo == hi
       else f"between {lo:.0f} and {hi:.0f} versions old")
    + f". The trainer waits {later['time_wait'].median():.2f} s per step for its "
    f"batch (the worker samples for {later['time_worker_generate'].median():.2f} s), "
    f"and a step takes {later['time_step'].median():.2f} s at the median.")

# %% [markdown]
# ## The sweep: $\Delta = 0, 1, 2, 4$
#
# The stored runs in `data/runs/` train chapter 7's configuration for 100 steps with
# the decoupled objective, two seeds for each $\Delta$, one run at a time on two CPU
# cores (the worker on one core, the trainer on the other). Two more runs
# train with plain GRPO at $\Delta = 4$. Each was made with
#
# ```
# python -m grpo_lib train-async --config configs/r1_zero_arithmetic.yaml \
#     --set max_steps=100 --set seed=0 ... --async max_staleness=2
# ```
#
# (the full line is in each run's `README.md`).

# %%
# NBVAL_IGNORE_OUTPUT
def load(name):
    m = pd.read_csv(RUNS / name / "metrics.csv")
    e = pd.read_csv(RUNS / name / "eval.csv").set_index("step")
    return m, e


sweep = {(eta, s): load(f"ch20_eta{eta}_seed{s}_cpu")
         for eta in (0, 1, 2, 4) for s in (0, 1)}
plain = {(4, s): load(f"ch20_eta4_ignore_seed{s}_cpu") for s in (0, 1)}
run_config = json.loads((RUNS / "ch20_eta4_seed0_cpu" / "config.json").read_text())
# completions per step, and the cap c on the behaviour weight
B = run_config["per_step_prompts"] * run_config["num_generations"]
CAP = run_config["sampling_correction_clip_max"]


def first_time(m, level):
    """Wall-clock seconds until the 10-step mean training accuracy reaches
    ``level`` (NaN: never)."""
    reached = m["time_total"][m["accuracy"].rolling(10).mean() >= level]
    return reached.iloc[0] if len(reached) else float("nan")


def summary(runs):
    rows = {}
    for (eta, s), (m, e) in runs.items():
        rows[(eta, s)] = {
            "samples/s": B / m.loc[m.step > 1, "time_step"].median(),
            "update s": m.loc[m.step > 1, "time_update"].median(),
            "wall s": m["time_total"].iloc[-1],
            "staleness": m.loc[m.step > 1, "staleness"].mean(),
            "s to 0.85": first_time(m, 0.85),
            "strict @ 0": e["strict_acc"].iloc[0],
            "strict @ end": e["strict_acc"].iloc[-1],
        }
    return pd.DataFrame(rows).T.rename_axis(["Δ", "seed"])


table = summary(sweep)
print(table.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
fig, (left, right) = plt.subplots(1, 2, figsize=(7.3, 3.6))
for (eta, s), (m, e) in sweep.items():
    left.plot(m["time_total"], m["accuracy"].rolling(10, min_periods=1).mean(),
              color=f"C{[0, 1, 2, 4].index(eta)}", ls="-" if s == 0 else "--",
              label=f"Δ = {eta}" if s == 0 else None)
for s, ls in ((0, "-"), (1, "--")):  # legend entries for the two line styles
    left.plot([], [], color="k", ls=ls, label=f"seed {s}")
left.set(xlabel="wall-clock seconds", ylabel="training accuracy (10 steps)",
         title="Accuracy against time")
left.legend(fontsize=9, ncol=2)
by_eta = table.groupby("Δ").mean()
right.bar(range(len(by_eta)), by_eta["samples/s"], color="C0", alpha=0.6,
          label="mean")
for s, marker in ((0, "o"), (1, "s")):
    right.scatter(range(len(by_eta)), table.xs(s, level="seed")["samples/s"],
                  color="k", marker=marker, zorder=3, label=f"seed {s}")
right.set_xticks(range(len(by_eta)), [str(e) for e in by_eta.index])
right.set_ylim(0, 1.3 * table["samples/s"].max())  # room for the legend
right.set(xlabel="Δ", ylabel="completions per second", title="Throughput")
right.legend(fontsize=9, ncol=3, loc="upper center")
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
plain_table = summary(plain)
sync_rate = by_eta.loc[0, "samples/s"]
slower = by_eta.loc[1, "update s"] / by_eta.loc[0, "update s"] - 1
rate0, rate1 = table.loc[0, "samples/s"], table.loc[1, "samples/s"]
upd0 = table.loc[0, "update s"]
low, high = rate1.min() / rate0.max(), rate1.max() / rate0.min()  # seed pairings
within = low <= predicted <= high
short = by_eta.loc[1, "samples/s"] / sync_rate < predicted  # the mean falls short
say(f"With $\\Delta = 0$ the runs sample {sync_rate:.1f} completions per second; with "
    f"$\\Delta = 1$ {by_eta.loc[1, 'samples/s']:.1f} "
    f"({by_eta.loc[1, 'samples/s'] / sync_rate:.2f}x), with $\\Delta = 2$ and 4 "
    f"{by_eta.loc[2, 'samples/s']:.1f} and {by_eta.loc[4, 'samples/s']:.1f}. "
    f"Held-out strict accuracy after 100 steps, mean of two seeds: "
    + ", ".join(f"{by_eta.loc[e, 'strict @ end']:.3f} at $\\Delta = {e}$"
                for e in by_eta.index)
    + f". The formula above predicted {predicted:.2f}x. The two $\\Delta = 0$ seeds "
    f"alone differ by {upd0.max() / upd0.min() - 1:.0%} in update time and by "
    f"{rate0.max() / rate0.min() - 1:.0%} in throughput, and pairing the seeds of "
    f"$\\Delta = 0$ and $\\Delta = 1$ every way gives speed-ups from {low:.2f}x to "
    f"{high:.2f}x, a range that "
    + ("includes the prediction: the measured speed-up agrees with it within the "
       "spread across seeds" if within else "misses the prediction: the gap is "
       "larger than the spread across seeds")
    + ". The update alone takes "
    f"{by_eta.loc[0, 'update s']:.2f} s per step at $\\Delta = 0$, when the worker is "
    f"idle during it, and {by_eta.loc[1, 'update s']:.2f} s at $\\Delta = 1$, with the "
    f"worker sampling beside it ({slower:+.0%})"
    + (": two busy processes on one machine slowing each other a little are a "
       "plausible cause of the mean speed-up falling short of the prediction"
       if slower > 0 and short else "")
    + f". Plain GRPO at $\\Delta = 4$ ends at "
    f"{plain_table['strict @ end'].mean():.3f} against the decoupled objective's "
    f"{by_eta.loc[4, 'strict @ end']:.3f}. Seconds until the training accuracy "
    f"(10-step mean) first reaches 0.85, seeds 0 and 1: "
    + "; ".join(f"$\\Delta = {e}$: " + " and ".join(
        "never" if pd.isna(v) else f"{v:.0f}" for v in table.loc[e, "s to 0.85"])
        for e in by_eta.index) + ".")

# %% [markdown]
# The two objectives at $\Delta = 4$ start from the same batches (the worker samples
# them ahead, with the first versions), and the runs part ways as their updates
# differ.
# Held-out accuracy and format of both, with the behaviour weights the decoupled
# runs logged:

# %%
# NBVAL_IGNORE_OUTPUT
rows = {}
for (eta, s), (m, e) in {**{("decoupled", s): sweep[(4, s)] for s in (0, 1)},
                         **{("plain", s): plain[(4, s)] for s in (0, 1)}}.items():
    rows[(eta, s)] = {f"strict @ {k}": v for k, v in e["strict_acc"].items()}
    rows[(eta, s)]["format @ 100"] = e["format_rate"].iloc[-1]
    if "sampling_weight_max" in m:
        rows[(eta, s)]["capped steps"] = int((m["sampling_weight_max"] >= CAP).sum())
print(pd.DataFrame(rows).T.rename_axis(["objective", "seed"])
      .to_string(float_format=lambda v: f"{v:.3f}", na_rep="-"))

# %% [markdown]
# Plain GRPO on four-version-old batches collapsed in both seeds, format included,
# while the decoupled objective trained. Without the behaviour weight, a token that
# the policy has already moved away from since it was sampled still gets the full
# push of its advantage, and at this learning rate those pushes add up from step to
# step. The weight $\pi_{\text{prox}}/\pi_{\text{behav}}$ shrinks exactly those
# tokens, and the cap bounds the ones the policy has moved towards (the "capped
# steps" column counts the steps in which some token hit the cap).
#
# ## A worker that dies
#
# A rollout worker can die: out of memory, a bad node, a killed process. The
# trainer notices when it waits for a batch and the worker is gone. It starts a new
# worker at the batch it needs next, from the newest published version, and goes
# on. Here a callback kills the worker with `SIGKILL` after step 2:

# %%
# NBVAL_IGNORE_OUTPUT
def kill_worker(trainer, metrics):
    if trainer.step == 2:
        os.kill(trainer._worker.pid, signal.SIGKILL)


fault_dir = tempfile.mkdtemp(prefix="ch20_fault_")
short = chapter7([
    f"output_dir={fault_dir}", "max_steps=5", "eval_every=0", "eval_on_start=false",
    "save_every=0", "save_final=false", "print_every=0", "sample_every=0",
    "per_step_prompts=2", "num_generations=4", "micro_batch_size=8",
    "max_completion_length=32", f"device={P.device}"])
model, tok = load_model_and_tokenizer(MODEL, device=P.device)
faulty = AsyncGRPOTrainer(model, tok, None, short,
                          load_task_split("arithmetic", "train"),
                          callbacks=[kill_worker],
                          async_config=AsyncConfig(max_staleness=1))
out = faulty.train()
print(out[["step", "staleness", "worker_restarts", "time_wait"]].to_string(index=False))

# %% [markdown]
# All five steps ran. The two long waits are two workers starting: the first one at
# step 1, and the new one at the step after the kill.
# The test suite runs the same experiment (`tests/test_async_rl.py`).
#
# ## Summary
#
# - A synchronous step is sampling plus update; with a worker process it costs about
#   the longer of the two. On the sweep's two CPU cores that gives the throughput of
#   its table.
# - Bounded staleness is one rule in the worker: sample batch $s$ only once version
#   $s-\Delta$ exists. $\Delta = 0$ is the synchronous loop; beyond the first version of
#   slack, a larger $\Delta$ here only buys older samples.
# - On stale data, the decoupled objective weights each token by
#   $\pi_{\text{prox}}/\pi_{\text{behav}}$, using the log-probs the worker already
#   has; with one update per batch its clip against the proximal policy never binds.
# - Weights travel by an atomically renamed file and a version counter; a dead
#   worker is restarted at the batch the trainer needs, and no step is lost.
#
# ## Exercises
#
# Solutions are in the appendix, {doc}`../book/solutions/ch20`.
#
# **20.1 — The schedule by hand.** Write `my_schedule(generate_s, update_s,
# max_staleness, steps)`: return the list of versions that sample batches
# $0, \ldots, \text{steps}-1$ under the rule above, without calling
# `simulate_schedule`. Then explain why the staleness settles at 1 when sampling is
# slower than the update, whatever $\Delta \ge 1$.

# %%
from grpo_lib.exercises.ch20 import (check_behaviour_weight, check_schedule,
                                     check_sync_speedup)


def my_schedule(generate_s, update_s, max_staleness, steps):
    # your code here
    raise NotImplementedError


try:
    check_schedule(my_schedule)
except NotImplementedError:
    print("Not implemented yet: keep two clocks (worker and trainer) and the times "
          "at which each version was published.")

# %% [markdown]
# **20.2 — The behaviour weight.** Write `my_behaviour_weight(prox_logp,
# behav_logp, cap)`: the per-token weight of the decoupled objective, from the two
# policies' log-probs of the sampled tokens (lists of floats).

# %%
def my_behaviour_weight(prox_logp, behav_logp, cap):
    # your code here
    raise NotImplementedError


try:
    check_behaviour_weight(my_behaviour_weight)
except NotImplementedError:
    print("Not implemented yet: a ratio of probabilities from a difference of "
          "log-probabilities, then the cap.")

# %% [markdown]
# **20.3 — What overlap can buy.** Write `my_sync_speedup(metrics)`: from a
# synchronous run's `metrics.csv` table (columns `step`, `time_generate`,
# `time_update`), the predicted throughput ratio of the asynchronous loop, using the
# medians over the steps after the first.

# %%
def my_sync_speedup(metrics):
    # your code here
    raise NotImplementedError


try:
    check_sync_speedup(my_sync_speedup)
except NotImplementedError:
    print("Not implemented yet: the two medians, then the formula at the top of "
          "the chapter.")

# %% [markdown]
# **20.4 — Think.** (a) At $\Delta = 4$ nearly every batch is four versions old. Which
# quantity logged by the runs shows how far the behaviour policy has drifted from
# the proximal one, and what would you expect it to do as the learning rate grows?
# (b) The worker loads a new version only between batches. What would change if it
# loaded one in the middle of a batch, and why does AReaL accept that for long
# generations? (c) Why does the trainer start a *new* queue when it restarts a dead
# worker instead of reusing the old one?
