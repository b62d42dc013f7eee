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
# (ch18)=
# # The same run with TRL
#
# Most readers will train their next model with TRL's `GRPOTrainer`
# {cite}`vonwerra2020trl`, not with the trainer this book built. This chapter hands
# TRL chapter 7's task, rewards and configuration, and checks piece by piece that it
# trains the same objective:
#
# 1. **rewards**: our reward functions, called the way TRL calls them;
# 2. **knobs**: our configuration translated field by field, and the TRL defaults
#    that differ from the GRPO paper;
# 3. **one batch**: the same prompt tokens, the same loss and the same gradient from
#    TRL's own loss code and ours;
# 4. **a run**: TRL trains the tiny model, logged and evaluated as our runs are;
# 5. **two trainers, two seeds each**: accuracy during training, held-out accuracy
#    and seconds per step, from stored runs in `data/runs/`, made on one machine.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import dataclasses
import tempfile
import textwrap

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers
import trl

from grpo_lib.display import say, show_source
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, format_reward
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import load_config
from grpo_lib.trl_bridge import TRLReward, knob_table, to_trl_config, trl_reward
from grpo_lib.trl_run import loss_parity, train_with_trl

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 60)
transformers.utils.logging.disable_progress_bar()

ROOT = DATA_DIR.parents[1]  # the repository root
RUNS = ROOT / "data" / "runs"
CONFIG = ROOT / "configs" / "r1_zero_arithmetic.yaml"  # chapter 7's run
MODEL = ROOT / "data" / "models" / "tiny-qwen2-base"


def chapter7(overrides=()):
    """Chapter 7's configuration with ``overrides`` (``key=value`` strings)."""
    return load_config(CONFIG, [f"model_name_or_path={MODEL}", *overrides])


base, tok = load_model_and_tokenizer(MODEL, device=P.device)
train_rows = load_task_split("arithmetic", "train")

# %% [markdown]
# ## A reward function, called TRL's way
#
# Our trainer calls a reward function with the completions as text and the dataset's
# columns as keywords: $r_k(\texttt{texts}, \texttt{answer}=\ldots, \ldots)$. TRL
# calls it with keywords only, and in the conversational format a completion is a
# list of messages, not a string:
#
# $$r_k(\texttt{prompts}, \texttt{completions}=[[\{\texttt{role}: \texttt{assistant},
# \texttt{content}: o_i\}]], \texttt{completion\_ids}, \texttt{answer}, \ldots,
# \texttt{trainer\_state}, \texttt{log\_extra}, \texttt{log\_metric}).$$
#
# One small wrapper turns the second call into the first. It takes each completion's
# last message, passes on the dataset's columns, drops what only TRL passes, and keeps
# our function's name for TRL's logs:

# %%
show_source(TRLReward.__call__)

# %% [markdown]
# A check on four completions to two questions: the scores of our trainer's call and
# of TRL's call through the wrapper. The third completion is an adversarial answer
# that the safe evaluator of chapter 3 refuses to compute.

# %%
# NBVAL_CHECK_OUTPUT
texts = ["<think> 2 * 3 = 6 </think> <answer> 6 </answer>",
         "<think> 2 + 3 </think> <answer> 5 </answer>",
         "<answer> 9**9**9**9 </answer>",
         "<think> 4 - 1 = 3 </think> <answer> 3 </answer>"]
columns = dict(answer=["6", "6", "3", "3"])
as_trl = dict(prompts=[[{"role": "user", "content": "What is 2 * 3?"}]] * 2
              + [[{"role": "user", "content": "What is 4 - 1?"}]] * 2,
              completions=[[{"role": "assistant", "content": t}] for t in texts],
              completion_ids=[[0]] * 4, trainer_state=None, **columns)
table = pd.DataFrame({
    "completion": texts,
    "accuracy (ours)": accuracy_reward(texts, **columns),
    "accuracy (TRL's call)": trl_reward(accuracy_reward)(**as_trl),
    "format (ours)": format_reward(texts, **columns),
    "format (TRL's call)": trl_reward(format_reward)(**as_trl),
})
print(table.to_string(index=False))

# %% [markdown]
# ## The knobs
#
# `to_trl_config` translates our `GRPOConfig` into TRL's, field by field. The mapping
# lives in one table in `grpo_lib.trl_bridge`, and `knob_table` reads both libraries'
# defaults from their dataclasses, so the table below cannot drift from the code. It
# lists the fields where TRL's default differs from our default `GRPOConfig()`
# (`ours_in_trl` is our default, translated). Below it come the TRL fields that the
# bridge always sets, because our trainer has no knob for them
# (`knob_table(all_settings=True)` marks them `fixed`), where TRL's default differs.
# Together these are the settings a TRL user has to write down to train as this book
# does.

# %%
# NBVAL_IGNORE_OUTPUT
knobs = knob_table()
differ = knobs[knobs["same"] == False]  # noqa: E712 (None: no TRL default)
shown = differ[["ours", "trl", "trl_default", "ours_in_trl"]].map(str)  # 1e-06
print(shown.to_string(index=False))
fixed = knob_table(all_settings=True).query("kind == 'fixed'")
fixed_differ = fixed[fixed["trl_default"].map(str) != fixed["ours_in_trl"].map(str)]
for row in fixed_differ.itertuples():
    print(f"\n{row.trl} = {row.ours_in_trl!r} (TRL's default: {row.trl_default!r})")
    print(textwrap.fill(row.note, 88, initial_indent="  ", subsequent_indent="  "))
say(f"{len(differ)} of the {len(knobs)} mapped fields differ; the other "
    f"{int((knobs['same'] == True).sum())} have the same default in both "  # noqa: E712
    f"libraries. Of the {len(fixed)} TRL fields the bridge always sets, "
    f"{len(fixed_differ)} differ from TRL's default: "
    + ", ".join(f"`{name}`" for name in fixed_differ["trl"]) + ".")

# %% [markdown]
# TRL has more GRPO knobs than our trainer: vLLM's, logging, and some newer
# algorithms. `knob_table(all_settings=True)` lists them too (`kind == "TRL only"`),
# each with what it is for, and a test fails when a TRL release adds one the table
# does not explain. Grouped by what they are for:

# %%
# NBVAL_IGNORE_OUTPUT
only = knob_table(all_settings=True).query("kind == 'TRL only'")
for note, names in only.groupby("note", sort=False)["trl"]:
    print(textwrap.fill(", ".join(names), 88))
    print(textwrap.fill(note, 88, initial_indent="  -> ", subsequent_indent="     "))
say(f"TRL {trl.__version__} has {len(only)} GRPO fields of its own that our "
    f"configuration lacks, against the {len(knobs)} it maps.")

# %% [markdown]
# Two of TRL's defaults depart from the objective of the GRPO paper: `loss_type`, in
# the table above, and `beta`, which the table leaves out because our default is the
# same. TRL's own help text says what they mean:

# %%
# NBVAL_IGNORE_OUTPUT
fields = trl.GRPOConfig.__dataclass_fields__
for name in ("beta", "loss_type"):
    text = fields[name].metadata["help"].split("'dr_grpo':")[0]  # grpo and dapo
    print(f"{name} = {fields[name].default!r} (TRL {trl.__version__}):")
    print(textwrap.fill(text, 88, initial_indent="  ", subsequent_indent="  "))

# %% [markdown]
# - **`beta`.** TRL's 0.0 matches our default: no KL term, so no reference model is
#   loaded. DeepSeekMath {cite}`shao2024deepseekmath` used 0.04; the R1 value TRL
#   cites is 0.001.
# - **`loss_type`.** DeepSeekMath's objective (equation 3) averages each completion's
#   tokens, then the completions: a token of completion $i$ weighs
#   $\frac{1}{G\,|o_i|}$. TRL's default `"dapo"` {cite}`yu2025dapo` gives every token
#   of the batch the same weight $\frac{1}{\sum_j |o_j|}$, so long completions weigh
#   more. Chapter 8 measured the length effect that TRL's help text warns about, and
#   found it to be a selection effect between problems; here we keep `"grpo"`, the
#   setting chapter 7 trained with.
#
# The whole translated configuration of chapter 7, as TRL receives it (the fields
# that matter for one step):

# %%
# NBVAL_CHECK_OUTPUT
config7 = chapter7(["output_dir=runs/ch18_knobs"])
trl_config = to_trl_config(config7)
for name in ("generation_batch_size", "num_generations",
             "per_device_train_batch_size", "gradient_accumulation_steps",
             "max_steps", "max_completion_length", "loss_type", "beta",
             "learning_rate", "lr_scheduler_type", "warmup_steps", "bf16",
             "scale_rewards", "reward_weights"):
    print(f"{name:>28} = {getattr(trl_config, name)!r}")

# %% [markdown]
# One of our steps is one TRL *generation batch*: `per_step_prompts` $\times$ $G$ =
# 128 completions, consumed as `gradient_accumulation_steps` micro-batches of
# `per_device_train_batch_size` rows and one optimizer step. What TRL cannot do is
# refused with a reason rather than silently dropped:

# %%
# NBVAL_CHECK_OUTPUT
try:
    to_trl_config(dataclasses.replace(config7, dynamic_sampling=True))
except ValueError as err:
    print(err)

# %% [markdown]
# ## One batch, two loss implementations
#
# `loss_parity` samples one real batch from the base model (4 prompts $\times$ 8
# completions), scores it with chapter 7's rewards and computes group advantages.
# Then each side takes its own copy of the model. TRL tokenises the prompts and runs
# its own `_compute_loss`, unmodified; ours runs `sequence_logprobs` and
# `policy_loss`. Both backpropagate, and the function compares the losses and every
# weight's gradient:

# %%
# NBVAL_IGNORE_OUTPUT
rows = [dict(r) for r in train_rows.select(range(4))]
with tempfile.TemporaryDirectory() as tmp:
    parity = pd.DataFrame({
        loss_type: loss_parity(base, tok, chapter7([
            f"output_dir={tmp}", f"loss_type={loss_type}"]), rows)._asdict()
        for loss_type in ("grpo", "dapo")}).T
print(parity.to_string(float_format=lambda v: f"{v:.3g}"))
worst = (parity["grad_max_abs_diff"] / parity["grad_max_abs"]).max()
say(f"TRL tokenises the prompts exactly as our sampler does "
    f"({bool(parity['prompts_equal'].all())}), and on "
    f"{int(parity['tokens'].iloc[0])} completion tokens the two losses agree to "
    f"{(parity['loss_ours'] - parity['loss_trl']).abs().max():.1e}; for each loss the "
    f"largest gradient gap is at most {worst:.1e} of that loss's largest gradient "
    f"entry.")

# %% [markdown]
# The `"grpo"` loss is almost exactly zero, and yet its gradient is not. At the first
# update of a step the ratio is 1, so each token's loss is $-\hat A_i$; `"grpo"`
# averages within a completion, which leaves $-\frac1B\sum_i \hat A_i$, and group
# advantages sum to zero in every group. The gradient
# $-\frac1B\sum_i \frac{\hat A_i}{|o_i|}\sum_t \nabla\log\pi_\theta(o_{i,t})$ does
# not vanish. `"dapo"` weighs each completion by its length, so its value
# $-\sum_i |o_i|\hat A_i / \sum_j |o_j|$ is not zero: it is negative when longer
# completions got higher advantages in this batch. A `loss` column hovering at zero
# in TRL's logs is therefore no sign that nothing is learned (exercise 18.3).
#
# ## TRL trains the tiny model
#
# `train_with_trl` runs a whole configuration through `trl.GRPOTrainer` and writes
# the run folder our tools read. It writes TRL's logged values under our column
# names in `metrics.csv`, splits each step's time into generation (inside TRL's
# `_generate`) and the rest, and evaluates with our harness into `eval.csv`.
# Checkpoints are TRL's own, so an interrupted run resumes with TRL's
# `resume_from_checkpoint`. The part that builds the trainer:

# %%
show_source(train_with_trl, start="rewards = trl_reward_funcs(config)",
            end="trainer.log = log_then_write")

# %% [markdown]
# Chapter 7's configuration, trained by TRL (a shorter run in the notebook; the full
# runs follow below):

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(0)
live_steps = P.pick(smoke=2, cpu=40, gpu=150)
live_dir = tempfile.mkdtemp(prefix="ch18_trl_")
live = chapter7([
    f"output_dir={live_dir}", f"max_steps={live_steps}", "eval_every=0",
    f"eval_n={P.pick(smoke=8, cpu=500, gpu=500)}", "save_every=0", "save_final=false",
    "print_every=0", f"device={P.device}",
    *(["per_step_prompts=2", "num_generations=4", "micro_batch_size=8",
       "max_completion_length=32"] if P.is_smoke else [])])
trainer = train_with_trl(live)

# %%
# NBVAL_IGNORE_OUTPUT
live_metrics = pd.read_csv(f"{live_dir}/metrics.csv")
live_eval = pd.read_csv(f"{live_dir}/eval.csv").set_index("step")
print(live_metrics[["step", "reward", "accuracy", "format_rate", "completion_length",
                    "loss", "time_generate", "time_update"]].iloc[
    [0, len(live_metrics) // 2, -1]].to_string(index=False))
first, last = live_eval.index.min(), live_eval.index.max()
before, after = live_eval.loc[first], live_eval.loc[last]
say(f"In {last} steps TRL lifts held-out strict accuracy from "
    f"{before['strict_acc']:.3f} to {after['strict_acc']:.3f} and the format rate "
    f"from {before['format_rate']:.3f} to {after['format_rate']:.3f} (greedy, "
    f"{int(after['n'])} held-out problems).")

# %% [markdown]
# ## Two trainers, two seeds each
#
# The full 150-step runs come from the command line, two at a time on a 2-core
# machine with one torch thread each, with the same configuration. Our runs take the
# library's standard path, in which the `transformers` policy samples its own
# rollouts (chapter 6's loop), as TRL's trainer does through `transformers`'
# `generate`. The library's default engine is chapter 19's fast one, so our command
# names the standard one:
#
# ```
# python -m grpo_lib train     --config configs/r1_zero_arithmetic.yaml --set seed=0 \
#                              --set rollout_engine=transformers ...
# python -m grpo_lib trl-train --config configs/r1_zero_arithmetic.yaml --set seed=0 ...
# ```
#
# Each run's folder under `data/runs/` has its exact command, machine and timing.
# The same seed does not give the two trainers the same samples: they draw prompts
# and tokens from different random streams. So the runs compare as distributions,
# not step by step.

# %%
# NBVAL_IGNORE_OUTPUT
runs = {("ours", s): RUNS / f"ch18_ours_seed{s}_cpu" for s in (0, 1)}
runs |= {("TRL", s): RUNS / f"ch18_trl_seed{s}_cpu" for s in (0, 1)}
metrics = {k: pd.read_csv(d / "metrics.csv") for k, d in runs.items()}
evals = {k: pd.read_csv(d / "eval.csv").set_index("step") for k, d in runs.items()}
held_out = pd.DataFrame({f"{who} seed {s}": e["strict_acc"]
                         for (who, s), e in evals.items()}).T
held_out.columns = [f"strict @ {c}" for c in held_out.columns]
held_out["mixed @ 150"] = [e["lang_mix_rate"].iloc[-1] for e in evals.values()]
timing = pd.DataFrame({
    f"{who} seed {s}": m.loc[m.step > 1, ["time_generate", "time_update",
                                          "time_step"]].median()
    for (who, s), m in metrics.items()}).T
table = held_out.join(timing.add_prefix("median ").rename(columns=lambda c:
                                                          c.replace("time_", "")))
print(table.to_string(float_format=lambda v: f"{v:.3f}"))

# %%
# NBVAL_IGNORE_OUTPUT
fig, (left, right) = plt.subplots(1, 2, figsize=(7.3, 3.6))
for (who, s), m in metrics.items():
    left.plot(m.step, m.accuracy.rolling(10, min_periods=1).mean(),
              ls="-" if s == 0 else "--", color="C0" if who == "ours" else "C1",
              label=f"{who}, seed {s}")
left.set(xlabel="step", ylabel="training accuracy (mean of 10 steps)",
         title="Sampled answers during training")
left.legend(fontsize=9)
per = timing.groupby(lambda name: name.split()[0]).mean()
right.bar(per.index, per["time_generate"], label="generation")
right.bar(per.index, per["time_update"], bottom=per["time_generate"], label="update")
both = (timing["time_generate"] + timing["time_update"]).groupby(
    lambda name: name.split()[0])  # each run's generation + update
top = per["time_generate"] + per["time_update"]
right.errorbar(per.index, top, yerr=[top - both.min()[per.index],
                                     both.max()[per.index] - top],
               fmt="none", color="k", capsize=5, label="range of the seeds")
right.set(ylabel="seconds per step (median)", title="One step: mean of two seeds")
right.set_ylim(top=1.4 * right.get_ylim()[1])  # the legend above the bars
right.legend(fontsize=9, loc="upper center", ncol=2)
fig.tight_layout()
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
twelve = [RUNS / ("ch11_base_acc_seed1_cpu" if s == 1 else f"ch07_r1_zero_seed{s}_cpu")
          for s in range(12)]  # chapter 19's standard path
final12 = pd.DataFrame([pd.read_csv(d / "eval.csv").iloc[-1] for d in twelve])
ours12, mixed12 = final12["strict_acc"], final12["lang_mix_rate"]
new8 = pd.Series([pd.read_csv(RUNS / f"ch07_r1_zero_standard_seed{s}_cpu"
                              / "eval.csv")["strict_acc"].iloc[-1]
                  for s in range(24, 32)])  # the same path on chapter 19's new seeds
trl_final = held_out.loc[["TRL seed 0", "TRL seed 1"], "strict @ 150"]
ours_final = held_out.loc[["ours seed 0", "ours seed 1"], "strict @ 150"]
ratio = per.loc["TRL", "time_step"] / per.loc["ours", "time_step"]
say(f"After 150 steps TRL's two runs reach {trl_final.iloc[0]:.3f} and "
    f"{trl_final.iloc[1]:.3f} held-out strict accuracy, ours {ours_final.iloc[0]:.3f} "
    f"and {ours_final.iloc[1]:.3f}. Our trainer's twelve seeds of chapter 19 span "
    f"{ours12.min():.3f} to {ours12.max():.3f} (mean {ours12.mean():.3f}), and they "
    f"sat high: chapter 19 ran the same path on seeds 24 to 31, which end at "
    f"{new8.min():.3f} to {new8.max():.3f} (mean {new8.mean():.3f}). A TRL step "
    f"takes {per.loc['TRL', 'time_step']:.2f} s at the median against our "
    f"{per.loc['ours', 'time_step']:.2f} s ({ratio:.2f}x): "
    f"{per.loc['TRL', 'time_generate']:.2f} s against "
    f"{per.loc['ours', 'time_generate']:.2f} s of generation, "
    f"{per.loc['TRL', 'time_update']:.2f} s against "
    f"{per.loc['ours', 'time_update']:.2f} s for the rest. TRL's final models mix "
    f"languages in {held_out.loc['TRL seed 0', 'mixed @ 150']:.3f} and "
    f"{held_out.loc['TRL seed 1', 'mixed @ 150']:.3f} of their greedy answers; "
    f"across our twelve seeds that rate ranges from {mixed12.min():.3f} to "
    f"{mixed12.max():.3f}, as chapter 11 found: without a language reward, mixing "
    f"is left to chance.")

# %% [markdown]
# ## Summary
#
# - A reward function written for our trainer runs in TRL behind one wrapper: take
#   the last message of each completion, pass the dataset's columns, drop TRL's own
#   extras.
# - Our configuration maps onto TRL's field by field. Two TRL defaults depart from
#   the GRPO paper's objective: `loss_type="dapo"` (one weight per token of the batch
#   instead of per completion; ours is `"grpo"`) and `beta=0.0` (no KL term, no
#   reference model; ours too). TRL's learning rate, schedule, precision and gradient
#   checkpointing also differ from ours and are set explicitly.
# - On one real batch TRL's loss code and ours give the same loss and the same
#   gradients to round-off, for both aggregations. The `"grpo"` loss is zero at the
#   first update of every step although its gradient is not.
# - TRL trains the tiny model on chapter 7's configuration. The table above puts its
#   two seeds beside ours, on held-out accuracy and on seconds per step.
#
# ## Exercises
#
# Each exercise has a stub and a checker from `grpo_lib.exercises.ch18`; solutions are
# in the appendix, {doc}`../book/solutions/ch18`.
#
# **18.1 — A reward for TRL.** Write `my_trl_reward(fn)`: it returns a function that
# TRL can call as `reward_func(prompts=..., completions=..., completion_ids=...,
# answer=..., trainer_state=..., log_extra=..., log_metric=...)`, with conversational
# completions, and that returns what `fn(texts, answer=...)` returns. Do not use
# `trl_reward`.

# %%
from grpo_lib.exercises.ch18 import (check_onpolicy_loss, check_trl_batch,
                                     check_trl_reward)


def my_trl_reward(fn):
    # your code here
    raise NotImplementedError


try:
    check_trl_reward(my_trl_reward)
except NotImplementedError:
    print("Not implemented yet: turn each completion into text first, then decide "
          "which keywords your reward function should see.")

# %% [markdown]
# **18.2 — One step in TRL's units.** Write `my_trl_batch(per_step_prompts,
# num_generations, micro_batch_size, num_iterations, max_steps)`: return a dict with
# TRL's `generation_batch_size`, `per_device_train_batch_size`,
# `gradient_accumulation_steps` and `max_steps` for one of our configurations.

# %%
def my_trl_batch(per_step_prompts, num_generations, micro_batch_size,
                 num_iterations, max_steps):
    # your code here
    raise NotImplementedError


try:
    check_trl_batch(my_trl_batch)
except NotImplementedError:
    print("Not implemented yet: count completions, not prompts, and count what TRL "
          "calls a step.")

# %% [markdown]
# **18.3 — The loss TRL logs.** Write `my_onpolicy_loss(advantages, lengths,
# loss_type)`: the value of the clipped loss at the first update of a step (ratio 1)
# for completions with these advantages and token lengths, for `"grpo"` and
# `"dapo"`. Then say what the sign of the `"dapo"` value tells you about a batch.

# %%
def my_onpolicy_loss(advantages, lengths, loss_type):
    # your code here
    raise NotImplementedError


try:
    check_onpolicy_loss(my_onpolicy_loss)
except NotImplementedError:
    print("Not implemented yet: at ratio 1 each token's loss is minus its "
          "completion's advantage; then aggregate the two ways.")

# %% [markdown]
# **18.4 — Think.** (a) TRL's help text recommends `"dapo"` over `"grpo"` because of
# a length bias. What did chapter 8 measure about the length of right and wrong
# answers inside a group, and what would you check before switching? (b) Our runs
# and TRL's use the same seed. Why are their first steps' rewards different, and what
# makes a comparison of the two trainers fair anyway? (c) The first row of a TRL
# run's `metrics.csv` shows a learning rate of 0, ours does not. Which setting
# explains it, and how many steps does it take for the two schedules to agree?
