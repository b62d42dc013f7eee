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
# (ch21)=
# # Scaling out
#
# Everything so far ran in one process. The same task, rewards and configuration also
# run on the engines that spread a run over many processes and GPUs. This chapter
# hands chapter 7's run to two of them and checks each hand-off here, on a CPU:
#
# 1. **TRL on N processes**, launched by `accelerate`: the batch arithmetic that
#    keeps one of our steps one step, and a real run on two processes;
# 2. **the files a reader changes for N GPUs**: DeepSpeed ZeRO-2/3 and vLLM in
#    colocate mode, each read by the installed packages' own parsers;
# 3. **verl**: the task exported in the layout its GRPO recipes read, a reward
#    module with its signature, and the command line with every knob mapped;
# 4. **a recipe for Qwen2.5-0.5B on GSM8K**, the model and the task as settings.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pandas as pd
import trl
import yaml
from accelerate.commands.config.config_args import load_config_from_file

from grpo_lib.display import say, show_source
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.qwen2 import Qwen2Settings, parameter_count
from grpo_lib.rewards import accuracy_reward, format_reward
from grpo_lib.sampling import generate
from grpo_lib.speed import step_flops
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import load_config
from grpo_lib.trl_bridge import _split_over_processes, to_trl_config
from grpo_lib.verl_bridge import (compute_score, export_verl_parquet, knob_table,
                                  shell_command, verl_command)

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 70)

ROOT = DATA_DIR.parents[1]  # the repository root
CONFIG = ROOT / "configs" / "r1_zero_arithmetic.yaml"  # chapter 7's run
ACCELERATE = ROOT / "configs" / "accelerate"
config7 = load_config(CONFIG)

# %% [markdown]
# ## TRL on N processes
#
# With `accelerate`, every process holds a copy of the policy, generates and scores
# its share of the step's completions, and the gradients are averaged over the
# processes. TRL splits its generation batch of $B = P \times G$ completions over the
# $N$ processes, so the batch fields change with $N$. For one of our steps to remain
# one generation batch, with one optimizer step per mini-batch
# ({ref}`ch08-mini-batches`; one, unless `num_mini_batches` asks for more), of
# $B_u = B / \texttt{num\_mini\_batches}$ completions each:
#
# $$b = \min\!\big(\texttt{micro\_batch\_size}, B_u/N\big), \qquad
# \texttt{gradient\_accumulation\_steps} = \frac{B_u}{N\,b},$$
#
# with $b$ the completions per micro-batch and $P$ a multiple of $N$, so that every
# process holds whole groups. The advantages would survive a split group, since TRL
# gathers every process's rewards before it normalises them; but each process calls
# the reward functions on its own completions only, and a reward that reads its group
# (a length penalty relative to the group's shortest answer) would see part of it:

# %%
show_source(_split_over_processes, docstring=False)

# %%
# NBVAL_CHECK_OUTPUT
split = pd.DataFrame({n: _split_over_processes(config7, n) for n in (1, 2, 4, 8, 16)}).T
split.index.name = "processes"
print(split.to_string())

# %% [markdown]
# `scripts/trl_multiprocess.py` trains our YAML configuration with TRL on as many
# processes as it is launched on. Two processes on a CPU, with gloo averaging the
# gradients (a few steps of a small batch):

# %%
# NBVAL_IGNORE_OUTPUT
out_dir = tempfile.mkdtemp(prefix="ch21_2proc_")
steps = P.pick(smoke=2, cpu=4, gpu=4)
command = [sys.executable, "-m", "accelerate.commands.launch",
           "--config_file", str(ACCELERATE / "cpu_2proc.yaml"),
           str(ROOT / "scripts/trl_multiprocess.py"),
           "--config", str(CONFIG), "--smoke", "--set", f"max_steps={steps}",
           "--set", "max_completion_length=96",
           "--set", f"model_name_or_path={ROOT / 'data/models/tiny-qwen2-base'}",
           "--set", f"output_dir={out_dir}"]
done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                      env={**os.environ, "OMP_NUM_THREADS": "1"})
print(done.stdout.strip().splitlines()[-1] if done.returncode == 0 else done.stderr)
summary = json.loads(open(f"{out_dir}/multiprocess_summary.json").read())
print({k: summary[k] for k in ("num_processes", "distributed_type", "backend",
                               "generation_batch_size", "per_device_train_batch_size",
                               "gradient_accumulation_steps", "steps")})
print(pd.DataFrame(summary["scored_per_process"]).to_string(index=False))

# %% [markdown]
# Each process scored half of every step's completions, in whole groups. One detail
# of the launch: `accelerate`'s `MULTI_CPU` mode starts its processes with `mpirun`
# only when it is given an mpirun hostfile; without one it starts a single process.
# So `cpu_2proc.yaml` says `distributed_type: MULTI_GPU`, as the table below shows,
# only to get the `torchrun` launcher, which starts both copies with or without GPUs;
# in each copy TRL's `use_cpu=True` makes the run `MULTI_CPU` with the gloo backend,
# as the summary above reports.
#
# ## The files a reader changes for N GPUs
#
# On GPUs the same script takes another `accelerate` configuration. DeepSpeed ZeRO-2
# shards the optimizer state and the gradients over the processes; ZeRO-3 shards the
# weights too. vLLM in colocate mode runs a generation engine beside the policy in
# every process. `accelerate`'s own parser reads each file as `accelerate launch`
# would (DeepSpeed's engine itself is not checked: the book's environment does not
# include it):

# %%
# NBVAL_CHECK_OUTPUT
rows = {}
for name in ("cpu_2proc.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml"):
    parsed = load_config_from_file(str(ACCELERATE / name))
    ds = parsed.deepspeed_config or {}
    rows[name] = {"distributed_type": str(parsed.distributed_type).split(".")[-1],
                  "num_processes": parsed.num_processes,
                  "mixed_precision": parsed.mixed_precision,
                  "zero_stage": ds.get("zero_stage", "-")}
print(pd.DataFrame(rows).T.to_string())

# %%
# NBVAL_CHECK_OUTPUT
vllm_fields = yaml.safe_load((ACCELERATE / "vllm_colocate.yaml").read_text())
with tempfile.TemporaryDirectory() as tmp:
    trl_vllm = to_trl_config(load_config(CONFIG, [f"output_dir={tmp}"]), **vllm_fields)
print({k: getattr(trl_vllm, k) for k in vllm_fields})

# %% [markdown]
# `trl.GRPOConfig` accepts the vLLM fields without importing vLLM. The commands that
# use each file are in their headers; for example, eight GPUs with ZeRO-2 and vLLM:
#
# ```
# accelerate launch --config_file configs/accelerate/deepspeed_zero2.yaml \
#     --num_processes 8 scripts/trl_multiprocess.py \
#     --config configs/r1_zero_arithmetic.yaml --set device=cuda --trl bf16=true \
#     --trl-config configs/accelerate/vllm_colocate.yaml
# ```
#
# ## Handing the run to verl
#
# verl's GRPO recipes read parquet files with one row per prompt: the chat messages,
# a `data_source` that names the task, and the answer under
# `reward_model.ground_truth`. `export_verl_parquet` writes our splits in that layout:

# %%
# NBVAL_CHECK_OUTPUT
verl_dir = tempfile.mkdtemp(prefix="ch21_verl_")
train_file = export_verl_parquet("arithmetic", "train", verl_dir, n=64)
exported = pd.read_parquet(train_file)
print(exported.columns.tolist())
print(json.dumps(exported.iloc[0].to_dict(), default=list, indent=1))

# %% [markdown]
# verl scores each completion with a function
# `compute_score(data_source, solution_str, ground_truth, extra_info)`. Ours calls the
# book's own reward functions and returns chapter 7's accuracy + 0.1 $\times$ format.
# A check on completions sampled from the base model, against the reward functions
# called as our trainer calls them, plus two adversarial answers:

# %%
# NBVAL_IGNORE_OUTPUT
model, tok = load_model_and_tokenizer(ROOT / "data/models/tiny-qwen2-base")
test_rows = load_task_split("arithmetic", "test").select(range(4))
roll = generate(model, tok, [r["prompt"] for r in test_rows], num_generations=2,
                max_new_tokens=96, seed=0)
answers = [r["answer"] for r in test_rows for _ in range(2)]
ours = [a + 0.1 * f for a, f in zip(accuracy_reward(roll.texts, answer=answers),
                                    format_reward(roll.texts))]
verl = [compute_score("grpo_lib/arithmetic", t, a) for t, a in zip(roll.texts,
                                                                   answers)]
print(pd.DataFrame({"completion": [t[:60] for t in roll.texts], "answer": answers,
                    "ours": ours, "compute_score": verl}).to_string(index=False))
print("adversarial:", compute_score("grpo_lib/arithmetic",
                                    "<answer>9**9**9**9</answer>", "3"),
      compute_score("grpo_lib/arithmetic", None, "3"))

# %% [markdown]
# The command line is built from our configuration, one verl key per knob; a knob
# that verl cannot run as meant is refused with a reason, as with TRL:

# %%
# NBVAL_CHECK_OUTPUT
argv = verl_command(config7, data_dir="data/verl/arithmetic")
shown = ("adv_estimator", "train_batch_size", "rollout.n=", "max_response_length",
         "norm_adv", "loss_agg_mode", "optim.lr=", "clip_ratio_low", "use_kl_loss",
         "total_training_steps", "custom_reward_function")
picked = [a for a in argv[3:] if any(k in a for k in shown)]
print(shell_command(argv[:3] + picked) + f" \\\n    ... ({len(argv) - 3 - len(picked)}"
      f" more)")
verl_knobs = knob_table(config7)
print(verl_knobs.groupby("kind").size().to_string())

# %% [markdown]
# The book's environment does not include verl itself: its release pins an older
# transformers than the book uses, and it samples with vLLM or SGLang, which need a
# GPU. The export, the reward module and the command are tested without verl
# (`tests/test_verl_bridge.py`).
#
# ## A recipe for Qwen2.5-0.5B on GSM8K
#
# Where a hub is reachable, the same code trains a released model on a real
# benchmark: the model and the task are settings. `configs/qwen25_gsm8k.yaml` is
# chapter 7's recipe with `Qwen/Qwen2.5-0.5B-Instruct`, GSM8K (`task: gsm8k`, rows
# from the hub's `openai/gsm8k`, the final number after `####` as the answer) and 512
# completion tokens; its header lists every other change and why.
#
# ```
# python -m grpo_lib train     --config configs/qwen25_gsm8k.yaml
# python -m grpo_lib trl-train --config configs/qwen25_gsm8k.yaml
# ```
#
# Offline, the task stops with one line before anything trains, and at once. Where the
# hub is out of reach (an offline variable such as `HF_DATASETS_OFFLINE=1` is set, or
# the hub's host does not answer within a few seconds), `grpo_lib.hub.hub_access` runs
# the load in the Hugging Face libraries' own offline mode: a file in the local cache
# still loads, and a missing one fails without the retries with back-off that those
# libraries otherwise make for every file:

# %%
# NBVAL_CHECK_OUTPUT
recipe = load_config(ROOT / "configs" / "qwen25_gsm8k.yaml")
os.environ["HF_DATASETS_OFFLINE"] = "1"  # as on a machine without a hub
try:
    load_task_split("gsm8k", "train")
except OSError as err:
    message = str(err)
    print(textwrap.fill(message[message.index("It comes from"):], 88))

# %% [markdown]
# What one step of the recipe asks of a GPU follows from the shape the Instruct model
# shares with Qwen2.5-0.5B ({cite}`qwen25_05b_config`, quoted in chapter 16) and
# chapter 19's count of matrix-multiply work: 128 completions of up to 512 tokens
# after the prompt, for two prompt lengths.

# %%
# NBVAL_CHECK_OUTPUT
QWEN25_05B = dict(  # Qwen/Qwen2.5-0.5B's config.json; -Instruct has the same shape
    model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
    num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
    max_position_embeddings=32768, use_sliding_window=False)
qwen = Qwen2Settings.from_dict(QWEN25_05B)
params = parameter_count(qwen)
work = pd.DataFrame({
    f"prompt {n} tokens": dict(zip(("rollout TFLOP", "update TFLOP"), [
        f / 1e12 for f in step_flops(qwen, recipe.batch_size, n,
                                     recipe.max_completion_length)]))
    for n in (100, 200)}).T
print(f"parameters: {params / 1e6:.0f}M; bfloat16 weights {2 * params / 2**30:.2f} "
      f"GiB, AdamW's two moments in float32 {8 * params / 2**30:.2f} GiB")
print(work.to_string(float_format=lambda v: f"{v:.1f}"))

# %% [markdown]
# How long that takes was measured once, on an H100. `benchmarks/gpu_pass.sh` timed
# steps of this recipe's batch (one warm-up, two measured) on a model of the same
# shape, with random weights (the time does not depend on them): 16 prompts × 8
# completions, every completion forced to 512 tokens, micro-batches of 16, bfloat16,
# our fast rollout (chapter 19's decode step replayed as a CUDA graph), after the
# benchmark's short prompts.
# The row in `benchmarks/results/step_vs_trl.csv`:

# %%
bench = pd.read_csv(ROOT / "benchmarks" / "results" / "step_vs_trl.csv")
measured = bench[bench["model"].str.contains("qwen2.5-0.5b", na=False)].iloc[-1]
print(f"{measured['machine']}, {measured['date']} UTC, torch {measured['torch']}: "
      f"{measured['prompts']} prompts x G={measured['G']}, {measured['length']} "
      f"tokens after {measured['prompt_len']}, micro-batch {measured['micro_batch']}")
print(f"step {measured['ours_s']:.3f} s = rollout {measured['ours_gen_s']:.3f} s + "
      f"the rest {measured['ours_update_s']:.3f} s; peak GPU memory "
      f"{measured['peak_gpu_gib']:.1f} GiB")

# %% [markdown]
# GSM8K's prompts are longer than the benchmark's. To carry the measurement over,
# take the rollout's time as it is (512 decode steps, each reading every weight once,
# as chapter 19 found on the GPU) and scale the rest of the step with the tokens it
# processes, prompt plus completion:

# %%
rollout_s, rest_s = measured["ours_gen_s"], measured["ours_update_s"]
tokens = measured["prompt_len"] + recipe.max_completion_length
steps = recipe.max_steps
estimate = pd.DataFrame({
    f"prompt {n} tokens": {
        "seconds per step": rollout_s + rest_s * (n + recipe.max_completion_length)
        / tokens,
        f"minutes for {steps} steps": (rollout_s + rest_s * (
            n + recipe.max_completion_length) / tokens) * steps / 60}
    for n in (100, 200)}).T
estimate.round(2)

# %%
sampler = pd.read_csv(ROOT / "benchmarks" / "results" / "sampler_vs_generate.csv")
half_b = sampler[sampler["model"].str.contains("qwen2.5-0.5b", na=False)
                 & (sampler["sampler"] == "multinomial")]
graph_b = half_b[half_b["cuda_graph"].astype(str) == "True"].iloc[-1]
eager_b = half_b[half_b["cuda_graph"].astype(str) == "False"].iloc[-1]
say(f"On that GPU the recipe's {steps} steps take about "
    f"{estimate.iloc[0, 1]:.0f}-{estimate.iloc[1, 1]:.0f} minutes of training, "
    "before the held-out evaluations, and less where completions stop before "
    f"{recipe.max_completion_length} tokens. With its {measured['prompt_len']}-token "
    f"prompts the step used {measured['peak_gpu_gib']:.0f} GiB of GPU memory at its "
    "peak. The measured step drew by inverse CDF; the recipe's default draw, "
    "`torch.multinomial`'s, is replayed by the CUDA graph too, and chapter 19, "
    "training with each draw on a CPU, shows that the choice does not change "
    "training ({ref}`ch19-other-numbers`). A separate benchmark, on an "
    f"{graph_b['device'].removeprefix('NVIDIA ')} with the multinomial draw and "
    f"this model's shape ({graph_b['rows']} rows of {graph_b['new_tokens']} "
    f"tokens), found that the graph wrote {graph_b['ratio']:.1f} times as many "
    f"tokens per second as `generate` and the step-by-step loop "
    f"{eager_b['ratio']:.1f} times.")

# %% [markdown]
# ## Summary
#
# - On N processes, TRL splits its generation batch; setting
#   `per_device_train_batch_size` and `gradient_accumulation_steps` from $B/N$ keeps
#   one of our steps one generation batch and one optimizer step, and $P$ a multiple
#   of $N$ keeps groups whole on each process.
# - Two processes ran here on the CPU with gloo; the GPU configurations were read by
#   `accelerate`'s and TRL's own parsers.
# - verl reads the task as parquet rows, scores with `compute_score`, and takes the
#   configuration as Hydra overrides, all generated from the same sources as our own
#   trainer's.
# - One step of the Qwen2.5-0.5B recipe's batch took a few seconds on an H100 with the
#   fast rollout, so the recipe's 500 steps fit in well under an hour of training.
#
# ## Exercises
#
# Solutions are in the appendix, {doc}`../book/solutions/ch21`.
#
# **21.1 — One step on N processes.** Write `my_split(per_step_prompts,
# num_generations, micro_batch_size, num_processes)`: return
# `(per_device_train_batch_size, gradient_accumulation_steps)`, or raise
# `ValueError` when a group would be cut between processes. As in `GRPOConfig`,
# `micro_batch_size=None` means the whole batch, and a process never takes a
# micro-batch larger than its own share of the step's completions.

# %%
from grpo_lib.exercises.ch21 import check_loss_agg, check_split, check_verl_row


def my_split(per_step_prompts, num_generations, micro_batch_size, num_processes):
    # your code here
    raise NotImplementedError


try:
    check_split(my_split)
except NotImplementedError:
    print("Not implemented yet: first the completions each process holds, then "
          "the micro-batch, then how many of them make one step.")

# %% [markdown]
# **21.2 — A verl row.** Write `my_verl_row(row, task, split, index)`: one of our
# task rows (`question`, `answer`, `prompt`) in verl's layout (the five columns
# above).

# %%
def my_verl_row(row, task, split, index):
    # your code here
    raise NotImplementedError


try:
    check_verl_row(my_verl_row)
except NotImplementedError:
    print("Not implemented yet: copy the exported row printed above, field by "
          "field.")

# %% [markdown]
# **21.3 — The same loss, another name.** verl names its loss aggregations
# `token-mean`, `seq-mean-token-mean`, `seq-mean-token-sum` and
# `seq-mean-token-sum-norm`. Write `my_loss_agg(loss_type)`: the verl mode for our
# `"grpo"`, `"dapo"` and `"dr_grpo"` (chapter 8 defines them).

# %%
def my_loss_agg(loss_type):
    # your code here
    raise NotImplementedError


try:
    check_loss_agg(my_loss_agg)
except NotImplementedError:
    print("Not implemented yet: for each loss, ask what is averaged first, and by "
          "what it is divided.")

# %% [markdown]
# **21.4 — Think.** (a) With 16 prompts per step, which process counts keep every
# group whole, and what breaks in a group-wise reward when a group is split? (b) ZeRO-3
# shards the weights, but generation needs all of them. What must TRL do before each
# rollout, and why does vLLM's colocate mode help? (c) verl's default loss
# aggregation is `token-mean`. Which of our losses is that, and what would a reader
# who ran chapter 7 with verl's defaults be comparing against?
