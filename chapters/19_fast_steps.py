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
# (ch19)=
# # Fast steps
#
# Every training chapter waits on the same loop: sample completions, score them, take
# a gradient step. Chapter 7's run is 150 of those steps, and on a laptop CPU each one
# takes about a second or more. This chapter asks how long a step *has* to take,
# measures where the rest goes, and removes what it can, with the library's own code:
#
# 1. **the floor**: the arithmetic of one step divided by the fastest rate this machine
#    multiplies matrices at;
# 2. **where the time goes**: operator calls per decode step, and the cost of a call
#    against the cost of its arithmetic;
# 3. **a decode step with few calls** (`grpo_lib.fast_decode`), checked against the
#    full forward pass of chapter 16;
# 4. **one random number per row**: sampling by inverting the cumulative distribution;
# 5. **each prompt once**: in the rollout's prefill and in the update, where a group's
#    G completions share their prompt;
# 6. **before and after**: the sampler and whole steps, measured here, beside TRL,
#    the update's products by packed weights, and the update compiled;
# 7. **numerics**: the sampler's log-probs against the trainer's, and the truncated
#    importance-sampling correction TRL applies for their gap;
# 8. **chapter 7 again**, with the fast path: a worked example of telling a real
#    difference from seed luck, with twelve seeds each way, one piece of the fast
#    path swapped at a time, `torch.multinomial`'s own numbers made faster, and a
#    control on new seeds for the reference itself;
# 9. **on a GPU**: the decode step replayed as one CUDA graph, measured on an H100
#    and an H200 against `generate`, TRL and the bytes a step must read.
#
# The from-scratch Qwen2 of {doc}`16_qwen2_from_scratch` is the starting point.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import copy
import functools
import os
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.display import say, show_source
from grpo_lib.evaluation import score_groups
from grpo_lib.fast_decode import (Projection, decode_fast, decode_step, fuse_weights,
                                  exponential_is_rand, pack_for_rows, prefill_once,
                                  rotate_half_matrix, sample_inverse_cdf,
                                  sample_multinomial, sample_race, sampling_probs)
from grpo_lib.graph_decode import decode_graphed, graph_step
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import sampling_importance_weights
from grpo_lib.packing import packing, packing_pays
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.qwen2 import (Qwen2, StaticKVCache, decode_static, rope_cos_sin,
                            rotate_half)
from grpo_lib.runs import final_eval, load_run, load_seeds, mean_range, parting_step
from grpo_lib.sampling import generate, tokenize_prompts
from grpo_lib.shared_prompt import group_logprobs, prompt_share
from grpo_lib.speed import (decode_step_ops, forward_flops, machine_description,
                            matmul_peak, step_flops, sync)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.trainer import GRPOConfig, GRPOTrainer

P = profile()
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
TINY = REPO / "data" / "models" / "tiny-qwen2-base"
hf, tok = load_model_and_tokenizer(TINY, device=P.device)
ours = Qwen2.from_transformers(hf, share_weights=True)  # the policy's own tensors
DEVICE = hf.device


prompts = list(load_task_split("arithmetic", "test")["prompt"])
# the step of benchmarks/step_vs_trl.py: 8 prompts x G = 8, 64 tokens each
N_PROMPTS, G = 8, 8
LENGTH = P.pick(smoke=16, cpu=64, gpu=64)

# %% [markdown]
# ## The floor
#
# A step's arithmetic is almost all matrix products. A forward pass over one token
# multiplies its activations by every weight matrix once: $2 N_{\mathrm{mm}}$ FLOPs,
# with $N_{\mathrm{mm}}$ the weights inside matrix products (the output layer included),
# plus $4 H d$ per query–key pair and layer for attention ($H$ query heads of width $d$,
# as in chapter 16). The rollout is a prefill over the prompts and then one such token
# per row per step; the update is a forward and a backward over prompt and completion,
# about three forwards (the backward computes gradients for the activations and for the
# weights):

# %%
show_source(forward_flops)

# %% [markdown]
# Divided by the fastest rate this machine multiplies matrices at, a large
# `torch.matmul` in the training dtype, that is the time a step cannot go below. The
# description of the machine says whether its CPU has bfloat16 hardware: without it,
# PyTorch computes a bfloat16 product through float32 and it is slower, not faster.

# %%
# NBVAL_IGNORE_OUTPUT
machine = machine_description()
_, ids, _ = tokenize_prompts(tok, prompts[:N_PROMPTS], tok.pad_token_id)
prompt_len = ids.shape[1]
flops = step_flops(hf.config, N_PROMPTS * G, prompt_len, LENGTH)
size = P.pick(smoke=256, cpu=1024, gpu=1024)
peaks = {"float32": matmul_peak(torch.float32, size=size)}
peaks["bfloat16"] = matmul_peak(torch.bfloat16, size=size, repeats=3)
floor = sum(flops) / peaks["float32"]
print(f"{machine['machine']}: {machine['cores']} cores, {machine['threads']} torch "
      f"threads, CPU capability {machine['cpu_capability']}, bfloat16 hardware: "
      f"{machine['bf16_hardware']}")
print(f"matmul peak: float32 {peaks['float32'] / 1e9:.0f} GFLOP/s ({size}^2), "
      f"bfloat16 {peaks['bfloat16'] / 1e9:.1f} GFLOP/s (same size, best of 3)")
print(f"one step, {N_PROMPTS} prompts x G={G}, {LENGTH} tokens after {prompt_len}: "
      f"{flops[0] / 1e9:.1f} GFLOP rollout + {flops[1] / 1e9:.1f} GFLOP update; "
      f"float32 floor {floor:.3f} s ({flops[0] / peaks['float32']:.3f} + "
      f"{flops[1] / peaks['float32']:.3f})")

# %%
fast_dtype = "bfloat16" if peaks["bfloat16"] > peaks["float32"] else "float32"
say(f"On this machine the faster dtype for matrix products is **{fast_dtype}**: "
    f"a bfloat16 product runs at {peaks['bfloat16'] / peaks['float32']:.2g} times "
    f"the float32 rate. The floor above is computed in float32: "
    f"{floor:.3f} s per step, of which the update is "
    f"{flops[1] / sum(flops):.0%}.")

# %% [markdown]
# The update holds most of the arithmetic. The rollout's share is done one token at a
# time, in many small steps, and that is where the measurements start.
#
# (ch19-calls)=
# ## Where the time goes
#
# A decode step of the tiny model multiplies 64 rows by matrices of 128 to 1,024
# columns: a few hundredths of a millisecond of arithmetic per matrix. Every operator
# call (a matmul, an addition, a view, a dtype cast) also has a fixed cost in Python
# and in PyTorch's dispatcher, whatever its size. Count the aten
# calls one decode step makes with the three decode loops: `transformers`' model with
# the book's sampler ({doc}`06_rollouts`), the from-scratch model with its static
# cache ({doc}`16_qwen2_from_scratch`), and the fast step of this chapter:

# %%
# NBVAL_IGNORE_OUTPUT
loops = {"transformers": (hf, None), "scratch": (ours, decode_static),
         "fast": (ours, decode_fast)}
few = prompts[:2]
calls = {name: decode_step_ops(model, tok, few, fn) for name, (model, fn)
         in loops.items()}
PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise")
ops = pd.DataFrame({name: {"operator calls per decode step": sum(c.values()),
                           "matrix products": sum(v for k, v in c.items()
                                                  if k in PRODUCTS)}
                    for name, c in calls.items()}).T
ops

# %% [markdown]
# The cost of a call shows when the arithmetic goes away. Time one decode step of
# each loop on 1 row (almost no arithmetic: the calls alone) and on 64 rows:

# %%
def decode_step_time(model, fn, rows, steps=32):
    """Seconds per decode step: a rollout of `steps + 1` tokens minus one of 1 token,
    over `rows` rows (one prompt repeated), the best of 5."""
    batch = [prompts[0]] * rows

    def rollout(n):
        start = time.perf_counter()
        generate(model, tok, batch, max_new_tokens=n, seed=0, ignore_eos=True,
                 decode_fn=fn)
        return time.perf_counter() - start

    rollout(steps + 1)  # warm-up
    return min((rollout(steps + 1) - rollout(1)) / steps for _ in range(5))


step_ms = pd.DataFrame({
    name: {f"{rows} row{'s' * (rows > 1)} (ms)": 1e3 * decode_step_time(m, fn, rows)
           for rows in (1, 64)} for name, (m, fn) in loops.items()}).T
step_ms

# %%
overhead = step_ms.iloc[:, 0] / step_ms.iloc[:, 1]
per_call_us = 1e3 * step_ms.iloc[:, 0] / ops["operator calls per decode step"]
say(f"With the `transformers` model a decode step costs "
    f"{step_ms.iloc[0, 0]:.2f} ms on one row and {step_ms.iloc[0, 1]:.2f} ms on 64: "
    f"the calls alone are {overhead.iloc[0]:.0%} of the 64-row step. The fast step "
    f"makes {ops.loc['fast', 'operator calls per decode step']:.0f} calls instead of "
    f"{ops.loc['transformers', 'operator calls per decode step']:.0f} and costs "
    f"{step_ms.loc['fast'].iloc[0]:.2f} ms on one row, "
    f"{step_ms.loc['fast'].iloc[1]:.2f} ms on 64. On one row a call costs about "
    + ", ".join(f"{us:.1f} µs ({name})" for name, us in per_call_us.items())
    + ": the one-row step over its calls.")

# %% [markdown]
# ## A decode step with few calls
#
# The fast step computes the same function as chapter 16's model with fewer, larger
# operations. Once per rollout, `fuse_weights` stacks the query, key and value
# projections into one matrix, and the gate and up projections into another. It folds
# the attention's $1/\sqrt d$ into the query weights (RoPE is a rotation, so the scale
# passes through it). It also folds in `rotate_half`, which is a product with a fixed
# matrix $R$ of $\pm 1$:
#
# $$\mathrm{RoPE}(x) = x \odot \cos + (xR) \odot \sin, \qquad
#   (hW + b)R = h(WR) + bR,$$
#
# so one `addmm` returns the queries, keys, values and the rotated queries and keys:

# %%
show_source(fuse_weights)

# %% [markdown]
# A step is then the layer of chapter 16 written with those matrices. Each matrix sits
# in a `Projection`, which adds the bias or the residual inside the product that
# produces it (`addmm(x, a, W)` is $x + aW$; on a CPU in float32 it may take another
# route, where that is faster, which {ref}`ch19-what-is-left` explains). RoPE's angles
# come from a table indexed by position, and the one new query of each row attends to
# the cache through two batched matrix products:

# %%
show_source(decode_step, start="for i, w in enumerate(layers)", end="return x @")

# %% [markdown]
# Is it the same function? Prefill 4 left-padded prompts into a static cache, feed
# 8 more tokens through `decode_step` one at a time, and compare every step's logits
# with one full forward pass over the whole sequence:

# %%
s = ours.settings
_, p_ids, p_mask = tokenize_prompts(tok, prompts[:4], tok.pad_token_id, DEVICE)
extra = torch.randint(3, s.vocab_size, (4, 8),
                      generator=torch.Generator().manual_seed(0)).to(DEVICE)
full_ids = torch.cat([p_ids, extra], 1)
full_mask = torch.cat([p_mask, torch.ones_like(extra)], 1)
positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
Pw, width = p_ids.shape[1], full_ids.shape[1]
with torch.no_grad():
    reference = ours(full_ids, full_mask, positions)[:, Pw:]  # [4, 8, V]
    cache = StaticKVCache(s, 4, width, device=DEVICE)
    ours(p_ids, p_mask, positions[:, :Pw], cache=cache)
    layers = fuse_weights(ours)
    cos, sin = rope_cos_sin(positions, s.head_dim, s.rope_theta, torch.float32)
    bias = torch.full((4, width), torch.finfo(torch.float32).min, device=DEVICE)
    bias[:, :Pw].masked_fill_(p_mask.bool(), 0.0)
    steps = []
    for j in range(8):
        bias[:, Pw + j] = 0.0
        steps.append(decode_step(ours, layers, extra[:, j], Pw + j,
                                 cos[:, Pw + j, None], sin[:, Pw + j, None], bias,
                                 cache))
gap = (torch.stack(steps, 1) - reference).abs().max().item()
x = torch.randn(5, s.head_dim)
print(f"largest |logit difference| over 4 rows x 8 steps: {gap:.1e}")
print(f"x @ R == rotate_half(x), bit for bit: "
      f"{torch.equal(x @ rotate_half_matrix(s.head_dim), rotate_half(x))}")

# %% [markdown]
# Float32 round-off, from summing in another order: the same logits.
#
# ## One random number per row
#
# `torch.multinomial` draws a token from each row's distribution by generating a
# random number *per vocabulary entry*. There is a cheaper way to draw from a
# categorical distribution. Lay the probabilities end to end on $[0, 1)$, draw one
# uniform number $u$, and take the token whose interval contains it:
#
# $$y = \min\{v : F_v > u\}, \qquad F_v = \sum_{w \le v} p_w ,$$
#
# so token $v$ is drawn with probability $F_v - F_{v-1} = p_v$.

# %%
show_source(sample_inverse_cdf)

# %%
probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05])
draws = sample_inverse_cdf(probs.log().expand(100_000, -1),
                           generator=torch.Generator().manual_seed(0))
freq = torch.bincount(draws, minlength=5) / len(draws)
logits = torch.randn(64, s.vocab_size, generator=torch.Generator().manual_seed(1))
gen = torch.Generator().manual_seed(0)


def mean_us(fn, n=200):  # microseconds per call, the mean of n after one
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return 1e6 * (time.perf_counter() - start) / n


sampler_us = {
    "torch.multinomial": mean_us(lambda: torch.multinomial(
        logits.softmax(-1), 1, generator=gen)),
    "inverse CDF": mean_us(lambda: sample_inverse_cdf(logits, generator=gen))}
display(pd.DataFrame({"probability": probs, "share of 100,000 draws": freq}).T)
print(f"one draw for 64 rows of {s.vocab_size} logits: "
      + ", ".join(f"{k} {v:.0f} µs" for k, v in sampler_us.items()))

# %% [markdown]
# The token of probability 0 is never drawn: its interval is empty. The draws come
# from the same distribution as `torch.multinomial`'s but from another random stream.
# So a seeded run with the fast step repeats itself, not a run with the other decode
# loops, which agree with each other token for token.
#
# ## Each prompt once
#
# A GRPO batch repeats every prompt $G$ times. In a causal model nothing at a prompt
# position depends on what comes after it, so the prompt's hidden states, keys and
# values are the same in all $G$ rows. The fast rollout prefills each distinct prompt
# once and copies its keys and values into the $G$ rows of the cache (`prefill_once`).
# The update can do the same: compute the prompt once per group and let each
# completion attend to it. That is `grpo_lib.shared_prompt.group_logprobs`, switched on
# by `GRPOConfig.share_group_prompt`. Autograd adds the $G$ rows' gradients into the
# shared prompt, so the log-probs and gradients are those of the usual forward, with a
# share of the layers' work removed:
#
# $$\frac{(G-1)\,P}{G\,(P + C)}$$
#
# for prompts of $P$ tokens and completions of $C$.

# %%
show_source(group_logprobs, start="for layer in body.layers",
            end="x = x + lin(m.down_proj")

# %%
n_groups = 2
g_prompts = prompts[:n_groups]
_, gp_ids, gp_mask = tokenize_prompts(tok, g_prompts, tok.pad_token_id, DEVICE)
c_ids = torch.randint(3, s.vocab_size, (n_groups * G, LENGTH),
                      generator=torch.Generator().manual_seed(2)).to(DEVICE)
c_mask = torch.ones(n_groups * G, LENGTH, device=DEVICE)
c_mask[3, LENGTH // 2:] = 0  # one completion that stopped early


def logp_and_grads(fn):
    """Log-probs and the gradient of their sum, for one way of computing them."""
    hf.zero_grad()
    start = time.perf_counter()
    logp = fn()
    logp.sum().backward()
    sync(DEVICE)
    seconds = time.perf_counter() - start
    grads = torch.cat([p.grad.flatten() for p in hf.parameters()])
    return logp.detach(), grads, seconds


def usual():  # every row carries its prompt: G copies per group
    return sequence_logprobs(hf, gp_ids.repeat_interleave(G, 0),
                             gp_mask.repeat_interleave(G, 0), c_ids, c_mask)


def shared():  # one prompt row per group
    return group_logprobs(hf, gp_ids, gp_mask, c_ids, c_mask)


for fn in (usual, shared):
    logp_and_grads(fn)  # warm-up
(lp_u, g_u, _), (lp_s, g_s, _) = logp_and_grads(usual), logp_and_grads(shared)
t_usual = min(logp_and_grads(usual)[2] for _ in range(3))
t_shared = min(logp_and_grads(shared)[2] for _ in range(3))
print(f"{n_groups} groups of G={G}: prompt {gp_ids.shape[1]} tokens, completions "
      f"{LENGTH}; work removed {prompt_share(gp_ids.shape[1], LENGTH, G):.1%}")
print(f"largest |log-prob difference| {(lp_u - lp_s).abs().max():.1e}, largest "
      f"|gradient difference| {(g_u - g_s).abs().max():.1e} (largest gradient "
      f"{g_u.abs().max():.1e})")
print(f"forward + backward: {1e3 * t_usual:.0f} ms usual, {1e3 * t_shared:.0f} ms "
      f"with the prompt once")

# %% [markdown]
# `attend` is torch's fused attention kernel, as in `transformers`, with one
# exception. In bfloat16 on a CPU, `group_logprobs` takes chapter 16's formula
# instead (`grouped_query_attention`, its softmax in float32), because there the fused
# kernel's backward pass is slow. The same forward and backward on a bfloat16 copy of
# the model, with each attention:

# %%
# NBVAL_IGNORE_OUTPUT
half = copy.deepcopy(hf).to(torch.bfloat16)


def bf16_seconds(attention):
    def once():
        half.zero_grad()
        start = time.perf_counter()
        group_logprobs(half, gp_ids, gp_mask, c_ids, c_mask,
                       attention=attention).float().sum().backward()
        sync(DEVICE)
        return time.perf_counter() - start

    once()  # warm-up
    return min(once() for _ in range(3))


bf16_attention = pd.Series({name: 1e3 * bf16_seconds(name)
                            for name in ("sdpa", "eager")},
                           name="forward + backward, bfloat16 (ms)")
bf16_attention.to_frame()

# %%
say(f"Here the formula takes {bf16_attention['eager']:.0f} ms and the fused kernel "
    f"{bf16_attention['sdpa']:.0f} ms, so the default is "
    + ("the faster one." if bf16_attention["eager"] < bf16_attention["sdpa"] else
       "the slower one on this machine: pass `attention=\"sdpa\"` to change it."))

# %% [markdown]
# (ch19-before-after)=
# ## Before and after
#
# The sampler first: 64 rows of `LENGTH` new tokens (every row forced to the full
# length), `transformers`' `generate` against the book's sampler with each decode loop
# (the fast one with its inverse-CDF and its multinomial draw, {ref}`ch19-ablation`
# says why), each timed
# three times after a warm-up, the best time counting:

# %%
# NBVAL_IGNORE_OUTPUT
def run_generate():
    texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
             for p in prompts[:N_PROMPTS]]
    enc = tok(texts, return_tensors="pt", padding=True,
              add_special_tokens=False).to(DEVICE)
    with torch.inference_mode():
        hf.generate(**enc, num_return_sequences=G, do_sample=True, top_k=0,
                    max_new_tokens=LENGTH, min_new_tokens=LENGTH,
                    pad_token_id=tok.pad_token_id)


def run_sampler(model, fn):
    return lambda: generate(model, tok, prompts[:N_PROMPTS], num_generations=G,
                            max_new_tokens=LENGTH, ignore_eos=True, seed=0,
                            decode_fn=fn)


samplers = {"transformers generate": run_generate,
            **{f"sampler, {name}": run_sampler(m, fn) for name, (m, fn)
               in loops.items()},
            "sampler, fast, multinomial draw": run_sampler(  # rollout_sampler=
                ours, functools.partial(decode_fast, sampler="multinomial"))}
for fn in samplers.values():
    fn()  # warm-up
best = {}
for _ in range(3):  # interleaved, so a change in load hits every contender
    for name, fn in samplers.items():
        start = time.perf_counter()
        fn()
        sync(DEVICE)
        best[name] = min(best.get(name, 1e9), time.perf_counter() - start)
sampler_table = pd.DataFrame({"seconds": best,
                              "tokens/s": {k: N_PROMPTS * G * LENGTH / v
                                           for k, v in best.items()}})
sampler_table["vs generate"] = (sampler_table["tokens/s"]
                                / sampler_table.loc["transformers generate",
                                                    "tokens/s"])
sampler_table

# %% [markdown]
# Then whole GRPO steps: the trainer with each way of rolling out and with the prompt
# once or $G$ times in the update, on the step of the floor above. The reward is the
# share of digits in a completion (cheap, with variance in every group). Each setting
# runs 2 warm-up steps and then `MEASURED` steps, in three rounds of all settings one
# after the other; the table keeps each setting's round with the fastest median step. On
# a shared machine the same code can run tens of percent slower from one minute to the
# next, and a slower round is a disturbed one:

# %%
# NBVAL_IGNORE_OUTPUT
MEASURED = P.pick(smoke=1, cpu=5, gpu=5)
train_rows = [{"prompt": p} for p in load_task_split("arithmetic", "train")
              .select(range(N_PROMPTS * (MEASURED + 2)))["prompt"]]


def digit_share(completions, **kwargs):
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]


def step_seconds(engine, share):
    """Median seconds of a step, of its generation and of the rest."""
    model = load_model_and_tokenizer(TINY, device=P.device)[0]
    ends = []
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, per_step_prompts=N_PROMPTS, num_generations=G,
            max_completion_length=LENGTH, ignore_eos=True, micro_batch_size=16,
            max_steps=MEASURED + 2, learning_rate=1e-5, loss_type="dapo",
            progress_bar=False, sample_every=0, seed=0, rollout_engine=engine,
            share_group_prompt=share)
        trainer = GRPOTrainer(model, tok, [digit_share], config, train_rows,
                              callbacks=[lambda tr, m: ends.append(
                                  time.perf_counter())])
        start = time.perf_counter()
        metrics = trainer.train()
    ends.insert(0, start)
    steps = pd.Series([b - a for a, b in zip(ends, ends[1:])][2:])
    gen = metrics["time_generate"].iloc[2:].reset_index(drop=True)
    return {"step (s)": steps.median(), "generation (s)": gen.median(),
            "the rest (s)": (steps - gen).median()}


settings = {"transformers rollout": ("transformers", False),
            "scratch rollout": ("scratch", False),
            "fast rollout": ("fast", False),
            "fast rollout, prompt once": ("fast", True)}
rounds = [{name: step_seconds(*args) for name, args in settings.items()}
          for _ in range(3)]
step_table = pd.DataFrame({name: min((r[name] for r in rounds),
                                     key=lambda t: t["step (s)"])
                           for name in settings}).T
step_table["vs floor"] = step_table["step (s)"] / floor
step_table

# %% [markdown]
# TRL's `GRPOTrainer` on the same step is measured by `benchmarks/step_vs_trl.py`, in
# one process with ours, and stored in `benchmarks/results/step_vs_trl.csv`. Its
# latest CPU rows with the fast rollout, the trainer's draw and the prompt once, in
# float32 and in bfloat16 (TRL with `bf16=True`), each against the floor in its own
# dtype:

# %%
# NBVAL_IGNORE_OUTPUT
bench = pd.read_csv(REPO / "benchmarks" / "results" / "step_vs_trl.csv")
for dtype in ("float32", "bfloat16"):
    latest = bench[(bench["device"] == "cpu") & (bench["dtype"] == dtype)
                   & (bench["engine"] == "fast")
                   & (bench["sampler"] == "multinomial")].iloc[-1]
    print(f"{dtype}: {latest['date']} UTC, {latest['machine']}, bfloat16 hardware "
          f"{latest['bf16_hardware']}, {latest['threads']} threads: grpo_lib "
          f"{latest['ours_s']:.3f} s/step, TRL {latest['trl_s']:.3f} s/step "
          f"({latest['trl_over_ours']:.2f}x), floor {latest['floor_s']:.3f} s, "
          f"ours / floor {latest['ours_over_floor']:.2f}x")

# %%
first, last = step_table.iloc[0], step_table.iloc[-1]
draws = sampler_table["vs generate"]
say(f"Here the step went from {first['step (s)']:.3f} s with the `transformers` "
    f"rollout to {last['step (s)']:.3f} s with the fast rollout and the prompt once: "
    f"{first['step (s)'] / last['step (s)']:.2f} times faster, "
    f"{last['vs floor']:.2f} times the floor. Generation went from "
    f"{first['generation (s)']:.3f} s to {last['generation (s)']:.3f} s, the rest "
    f"of the step from {first['the rest (s)']:.3f} s to "
    f"{last['the rest (s)']:.3f} s. Against their own floors "
    f"({flops[0] / peaks['float32']:.3f} s and {flops[1] / peaks['float32']:.3f} s), "
    f"generation went from {first['generation (s)'] * peaks['float32'] / flops[0]:.1f}"
    f" to {last['generation (s)'] * peaks['float32'] / flops[0]:.1f} times, the rest "
    f"from {first['the rest (s)'] * peaks['float32'] / flops[1]:.1f} to "
    f"{last['the rest (s)'] * peaks['float32'] / flops[1]:.1f} times. The sampler "
    f"alone writes "
    f"{draws['sampler, fast']:.2f} times as many tokens per second as `generate`, "
    f"{draws['sampler, fast, multinomial draw']:.2f} times with the trainer's default "
    f"draw, `torch.multinomial`'s own tokens, made faster in the section on "
    f"its own numbers below.")

# %% [markdown]
# (ch19-what-is-left)=
# ### What is left
#
# What is left between the step and its floor? The floor assumes every product runs
# at the rate of a 1024 × 1024 matmul. The matrices of a decode step are far smaller,
# and small products run slower. A matrix library can claw some of it back when it
# knows the shapes in advance: oneDNN, which PyTorch ships on CPUs, copies a weight
# into a blocked layout for a given number of rows once, and then multiplies by it,
# on many CPUs faster. `torch.compile` does that to a CPU model's weights when it may
# freeze them (`torch._inductor.config.freezing = True`, for inference); the fast
# step does it by hand, once per rollout (`pack_for_rows`), because the weights
# change after every update. The rate of each product, and of the decode step's
# largest one with its weight packed:

# %%
# NBVAL_IGNORE_OUTPUT
def matmul_rate(m, k, n, packed=False, repeats=50):
    a, b = torch.randn(m, k), torch.randn(k, n)
    product = Projection(b, packed=pack_for_rows(b, m) if packed else None)
    product(a)
    start = time.perf_counter()
    for _ in range(repeats):
        product(a)
    return 2 * m * k * n * repeats / (time.perf_counter() - start)


D, F_ = s.hidden_size, s.intermediate_size
shapes = {"decode: 64 rows x gate/up": (64, D, 2 * F_),
          "decode: 64 rows x output layer": (64, D, s.vocab_size),
          "update: 16 x 87 rows x gate/up": (16 * 87, D, 2 * F_),
          "decode: 64 rows x gate/up, packed": (64, D, 2 * F_, True),
          "1024 x 1024, timed the same way": (1024, 1024, 1024)}
rates = pd.Series({name: matmul_rate(*shape) / 1e9 for name, shape in shapes.items()},
                  name="GFLOP/s")
rates.to_frame()

# %%
share = rates / rates.iloc[-1]
packed_ok = pack_for_rows(torch.randn(D, 2 * F_), 64) is not None
decode_pct = sorted({round(100 * v) for v in share.iloc[:2]})  # one value if equal
qkv_width = (2 * s.num_attention_heads + 3 * s.num_key_value_heads) * s.head_dim
decode_shapes = {"q/k/v": (D, qkv_width), "o": (D, D), "gate/up": (D, 2 * F_),
                 "down": (F_, D)}  # the fast step's products, [K, N]
chosen = [name for name, (k, n) in decode_shapes.items() if packing_pays(64, k, n)]
say(f"The update's products run at {share.iloc[2]:.0%} of the rate of a 1024 × 1024 "
    f"product timed the same way (the mean of 50 calls; the floor's peak above is "
    f"the best of 30), a decode step's at {'-'.join(f'{p}%' for p in decode_pct)}. "
    + (f"Packed, the gate/up product runs at {rates.iloc[3]:.0f} GFLOP/s, "
       f"{rates.iloc[3] / rates.iloc[0]:.1f} times its unpacked rate"
       + (", faster than the 1024 × 1024 product timed the same way. So here "
          "that product is not the fastest PyTorch can multiply, and the "
          "float32 floor above is one for `torch.matmul`, not for the machine"
          if share.iloc[3] > 1 else "")
       + ". Whether packing pays depends on the CPU, so the fast step packs a matrix "
       "only where `packing_pays` measured the packed product at least 10% faster on "
       "this machine (once per shape; a file, `grpo_lib.packing.decisions_file()`, "
       "keeps the choice for later runs, so a seeded run repeats itself)"
       + (": here it packs " + (", ".join(chosen) if chosen else "none")
          + f" of the decode step's {len(decode_shapes)} products."
          if hf.device.type == "cpu" else "; on a GPU it packs nothing.")
       if packed_ok else "This torch has no oneDNN, so nothing is packed here."))

# %% [markdown]
# The update multiplies by the same weights twice per layer: $y = xW^\top$ forward,
# and $gW$ backward for the gradient of its input. (The weight's own gradient,
# $g^\top x$, multiplies two activations, and nothing can be packed in advance.)
# `grpo_lib.packed_linear.linear` gives both products packed copies of $W$. The
# optimizer changes the weights in place after every step, so it keeps a plain copy
# beside the packed ones and packs a weight again whenever the two differ.
# `group_logprobs` uses it by default (`packed=True`) for the weights where both
# products pay. One micro-batch of the update above, forward and backward, with every
# weight packed and with none:

# %%
# NBVAL_IGNORE_OUTPUT
def update_ms(packed):
    def once():
        hf.zero_grad()
        start = time.perf_counter()
        group_logprobs(hf, gp_ids, gp_mask, c_ids, c_mask,
                       packed=packed).sum().backward()
        sync(DEVICE)
        return time.perf_counter() - start

    once()  # warm-up, and the packing
    return 1e3 * min(once() for _ in range(5))


with packing("always"):
    packed_update = pd.Series({"plain products": update_ms(False),
                               "packed weights": update_ms(True)},
                              name="forward + backward (ms)")
packed_update.to_frame()

# %%
update_rows = gp_mask.numel() + c_mask.numel()  # the micro-batch's tokens
update_shapes = {name: tuple(lin.weight.shape[::-1]) for name, lin in
                 hf.model.layers[0].named_modules()
                 if isinstance(lin, torch.nn.Linear)}  # [K, N] each
paying = [name.split(".")[-1] for name, (k, n) in update_shapes.items()
          if packing_pays(update_rows, k, n) and packing_pays(update_rows, n, k)]
say(f"With the weights packed the micro-batch takes "
    f"{packed_update['packed weights']:.1f} ms against "
    f"{packed_update['plain products']:.1f} ms, "
    f"{packed_update['plain products'] / packed_update['packed weights']:.2f} times "
    "as fast" + (f". Measured one product at a time, packing pays here for "
                 f"{', '.join(paying) if paying else 'none'} of a layer's "
                 f"{len(update_shapes)} weights, and the trainer packs "
                 + ("those." if paying else "nothing.")
                 if packed_ok and hf.device.type == "cpu" else
                 ": the same path, as packing applies to float32 on a CPU only."))

# %% [markdown]
# (ch19-compile)=
# ### Compiling the update
#
# Beside its products, the update runs many small element-wise operators: the norms,
# RoPE, SwiGLU's gate, the log-softmax, and each one's backward, each a pass over
# memory and a call. `torch.compile` traces `group_logprobs` and its backward into a few
# fused kernels, which a C++ compiler on the machine builds. Time the micro-batch
# above eager and compiled. The first compiled call compiles, here into an empty
# cache, as on a first run; the next calls run the kernels. Then give it completions
# 16 tokens shorter, as the next step of a run does when its longest completion is
# shorter:

# %%
# NBVAL_IGNORE_OUTPUT
def plain_logprobs(*args):  # a compiled graph takes plain weights, not packed copies
    return group_logprobs(*args, packed=False)


def update_seconds(fn, width):
    hf.zero_grad()
    start = time.perf_counter()
    fn(hf, gp_ids, gp_mask, c_ids[:, :width], c_mask[:, :width]).sum().backward()
    sync(DEVICE)
    return time.perf_counter() - start


compile_rows = {}
if P.is_smoke:  # compiling takes minutes; the other profiles measure it
    print("smoke profile: not compiled")
else:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()  # nothing cached
    torch._dynamo.reset()
    compiled = torch.compile(plain_logprobs)
    for width in (LENGTH, LENGTH - 16):
        first = update_seconds(compiled, width)
        eager_ms, compiled_ms = (1e3 * min(update_seconds(fn, width) for _ in range(5))
                                 for fn in (plain_logprobs, compiled))
        compile_rows[f"completions of {width} tokens"] = {
            "first compiled call (s)": first, "eager (ms)": eager_ms,
            "compiled (ms)": compiled_ms}
    display(pd.DataFrame(compile_rows).T.round(1))

# %%
ch07_metrics = load_run("ch07_r1_zero_cpu").metrics
widths = ch07_metrics["completion_length_max"].nunique()
if compile_rows:
    a, b = compile_rows.values()
    cut = 1 - a["compiled (ms)"] / a["eager (ms)"]
    saved = cut * ch07_metrics["time_update"].sum()
    cost = a["first compiled call (s)"] + b["first compiled call (s)"]
    say(f"Compiled, the micro-batch's forward and backward take "
        f"{a['compiled (ms)']:.0f} ms against {a['eager (ms)']:.0f} ms eager, "
        f"{a['eager (ms)'] / a['compiled (ms)']:.2f} times as fast. Compiling took "
        f"{a['first compiled call (s)']:.0f} s, and the shorter completions took "
        f"{b['first compiled call (s)']:.0f} s on their first call. Chapter 7's "
        f"run rolled out completions of {widths} different widths in its "
        f"{len(ch07_metrics)} steps, and its updates took "
        f"{ch07_metrics['time_update'].sum():.0f} s in all: cut by {cut:.0%}, that "
        f"would save about {saved:.0f} s, "
        + ("less than the first two widths cost to compile here. So the library does "
           "not compile the update: compiling pays where the shapes are fixed, as in "
           "the benchmark's steps, and where compiled kernels are kept from run to "
           "run." if saved < cost else
           f"more than the first two widths cost to compile here ({cost:.0f} s)."))
else:
    print(f"chapter 7's run rolled out completions of {widths} different widths")

# %% [markdown]
# ### Where the weights wait
#
# The rates above come from one product called again and again, so its weight stays
# in the core's cache from one call to the next. A decode step reads every weight of
# the model once, and the key/value cache of every layer, before it comes back to the
# first weight. Time the decode step's gate/up product three ways: called again and
# again alone; alone, with a 64 MB buffer written between calls (more than a core's
# cache holds); and inside the decode steps of a 64-row rollout, with plain
# products:

# %%
# NBVAL_IGNORE_OUTPUT
def product_us(x, W, flush=None, calls=200):
    """Median microseconds of `x @ W`, with `flush` written between calls if given."""
    times = []
    for _ in range(calls):
        if flush is not None:
            flush.add_(1.0)  # every byte of it passes through the caches
        start = time.perf_counter()
        x @ W
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times))


def in_rollout_us(rows=64):
    """Median microseconds of the gate/up product in the decode steps of a rollout:
    each call timed by a wrapper around `Projection.__call__`, removed after."""
    times, call = [], Projection.__call__

    def timed(self, x, residual=None):
        start = time.perf_counter()
        y = call(self, x, residual)
        if x.shape[0] == rows and self.weight.shape == (D, 2 * F_):
            times.append(time.perf_counter() - start)
        return y

    Projection.__call__ = timed
    try:
        with packing("never"):
            generate(ours, tok, prompts[:rows // G], num_generations=G, seed=0,
                     max_new_tokens=LENGTH, ignore_eos=True, decode_fn=decode_fast)
    finally:
        Projection.__call__ = call
    return 1e6 * float(np.median(times))


if hf.device.type == "cpu":
    x, W = torch.randn(64, D), torch.randn(D, 2 * F_)
    where = pd.Series({"alone, again and again": product_us(x, W),
                       "alone, 64 MB written between calls":
                           product_us(x, W, flush=torch.zeros(16 * 2 ** 20)),
                       "inside the rollout's decode steps": in_rollout_us()},
                      name="gate/up product, 64 rows (us)")
    display(where.to_frame().round(0))
else:
    print("on a GPU: see the CUDA graphs below")

# %%
def decode_bytes(rows, keys):
    """The bytes a decode step reads: every weight, and the key/value cache of every
    layer at `keys` keys (float32)."""
    weights = sum(p.numel() * p.element_size() for p in ours.parameters())
    cache = 2 * s.num_hidden_layers * rows * s.num_key_value_heads * keys * s.head_dim
    return weights, 4 * cache


l2_file = "/sys/devices/system/cpu/cpu0/cache/index2/size"  # Linux: "2048K"
l2 = (f"the {int(open(l2_file).read().strip().rstrip('K')) / 1024:g} MB of one "
      "core's L2 cache" if os.path.exists(l2_file) else "a core's L2 cache")
if hf.device.type == "cpu":
    prompt_width = tokenize_prompts(tok, prompts[:8], tok.pad_token_id)[1].shape[1]
    weight_bytes, cache_bytes = decode_bytes(64, prompt_width + LENGTH)
    slower = where.iloc[2] / where.iloc[0]
    say(f"Alone and again, the product takes {where.iloc[0]:.0f} us; with the buffer "
        f"written between calls, {where.iloc[1]:.0f} us; inside the decode steps, "
        f"{where.iloc[2]:.0f} us, {slower:.1f} times as long as alone. A decode step "
        f"reads {weight_bytes / 2 ** 20:.1f} MB of weights and, at its last step, "
        f"{cache_bytes / 2 ** 20:.1f} MB of keys and values, more than {l2}. "
        + ("Inside a step each weight comes from farther away than in the rate "
           f"above, and {1 - 1 / slower:.0%} of the product's time is that trip: "
           "a floor for the rollout here would count the bytes it moves, "
           "not its FLOPs alone."
           if slower > 1.2 else
           "Here the product is about as fast inside a step as alone: this "
           "machine keeps the step's data close enough."))

# %% [markdown]
# On a GPU the same loop also waits on kernel launches, and {ref}`ch19-cuda-graphs`
# replays each step as one CUDA graph.
#
# ## Numerics: the sampler's log-probs and the trainer's
#
# The sampler and the trainer compute the same log-probabilities with different kernels
# (one token at a time against the whole sequence), and possibly in another dtype: a
# fast inference engine in bfloat16 and a trainer in float32 is TRL's situation with
# vLLM. The tokens are drawn from the sampler's distribution $\pi_{\mathrm{sampler}}$,
# but the loss is written for the trainer's $\pi_{\theta_{\mathrm{old}}}$. TRL corrects
# that by weighting each token's loss by their ratio, bounded
# (`vllm_importance_sampling_correction`, on by default with vLLM). The library's
# version, with TRL's four modes (per token or per completion, clip or drop):

# %%
show_source(sampling_importance_weights, docstring=False)

# %% [markdown]
# On numbers you can check: two completions whose token ratios are $[2, 0.5, 1]$ and
# $[4, 2]$ (the second has one padding token), bound 3. Per token, `truncate` clips
# the 4 to 3 and `mask` drops that token. Per completion the products are 1 and 8, so
# the second completion is clipped to 3 or dropped:

# %%
trainer_lp = torch.tensor([[0.5, 0.2, 0.9], [0.8, 0.8, 0.3]]).log()
sampler_lp = torch.tensor([[0.25, 0.4, 0.9], [0.2, 0.4, 0.01]]).log()
mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
    w = sampling_importance_weights(trainer_lp, sampler_lp, mask, mode, clip_max=3.0)
    print(f"{mode:<18}", w.round(decimals=4).tolist())

# %% [markdown]
# Does it matter here? The fast decode loop returns the log-prob of every token it
# draws, in its own numerics. Sample a rollout in float32 and one from a bfloat16 copy
# of the model, and compare both with the float32 trainer's log-probs of the same
# tokens:

# %%
# NBVAL_IGNORE_OUTPUT
def sampler_vs_trainer(model_dtype):
    policy = load_model_and_tokenizer(TINY, device=DEVICE)[0].to(model_dtype)
    rollout = generate(Qwen2.from_transformers(policy, share_weights=True), tok,
                       prompts[:4], num_generations=4, max_new_tokens=P.pick(
                           smoke=8, cpu=48, gpu=48), seed=0, decode_fn=decode_fast)
    with torch.no_grad():
        trainer = sequence_logprobs(hf, rollout.prompt_ids, rollout.prompt_mask,
                                    rollout.completion_ids, rollout.completion_mask)
    m = rollout.completion_mask.float()
    gap = (trainer - rollout.sampler_logprobs)[m > 0]
    row = {"tokens": int(m.sum()), "mean |gap|": gap.abs().mean().item(),
           "max |gap|": gap.abs().max().item()}
    for mode in ("token_truncate", "sequence_mask"):
        w = sampling_importance_weights(trainer, rollout.sampler_logprobs, m, mode)
        w = w[m > 0] if mode.startswith("token") else w.flatten()
        row[f"{mode}: weights in"] = f"[{w.min():.4f}, {w.max():.4f}]"
    return row


numerics = pd.DataFrame({f"sampler {name}": sampler_vs_trainer(dtype) for name, dtype
                         in (("float32", torch.float32),
                             ("bfloat16", torch.bfloat16))}).T
numerics.style.format({"mean |gap|": "{:.1e}", "max |gap|": "{:.1e}"})

# %%
say(f"In float32 the sampler and the trainer differ by at most "
    f"{numerics.iloc[0]['max |gap|']:.1e} per token, round-off, and every weight is "
    f"1 to four decimals. A bfloat16 sampler differs by up to "
    f"{numerics.iloc[1]['max |gap|']:.1e}; its weights stay in "
    f"{numerics.iloc[1]['sequence_mask: weights in']} per completion, far inside "
    "TRL's bound of 3, so no completion would be dropped. On this task and model the "
    "correction changes nothing that matters. It is there for the case it was made "
    "for: a separate inference engine whose kernels and dtype differ from the "
    "trainer's. `GRPOConfig(sampling_correction=True)` turns it on, and the "
    "trainer then logs the weights and the gap (`sampling_weight_*`, "
    "`sampling_logp_gap_*`).")

# %% [markdown]
# (ch19-ch07)=
# ## Chapter 7 again, with the fast path
#
# Does the fast path train as well? This section answers with runs, and it is also a
# worked example of a question that every speed-up raises: is a difference between
# two sets of seeds real? The first comparison says that the fast path ends lower, by
# more than chance often gives. The subsections then swap one piece of the fast path
# at a time to find the cause, and the last two turn the question around: the
# standard draw fed other random numbers, and the trainer's own random streams on new
# seeds, end as low as the fast arms do, and the standard path itself on those new
# seeds ends there too. The reference seeds sat high, and no piece of the fast path
# was found to train worse. The method is the lesson: many seeds a side, a
# permutation test, one piece swapped at a time, and a control on new seeds for the
# reference itself.
#
# Chapter 7's R1-Zero config was run from the command line with `rollout_engine=fast`,
# `rollout_sampler=inverse_cdf` (the fast engine's draw then) and
# `share_group_prompt=true`, seeds 0 to 11, and with `rollout_engine=transformers` (the
# standard path) for the same seeds. Seed 0 of the standard path is chapter 7's run with
# the `transformers` rollout (`ch07_r1_zero_seed0_cpu`, the standard path's rollout),
# and seed 1 is the accuracy-only run of {doc}`11_language_consistency` (a reward at
# weight 0 changes nothing in training). Two more runs use the fast rollout but keep the
# usual update (`noshare`, seeds 2 and 3), to tell the two changes apart. Chapter 7's
# run is the notebook's own execution, alone on the machine; every other run used one
# torch thread, two runs at a time, the fast and the standard run of a seed side by side
# from seed 4 on. Seeds 4 to 7 had the machine to themselves, so their times compare
# directly. The commands are in each folder's `README.md`; the held-out harness is
# greedy, on the first 500 test problems.

# %%
def ch07_run(path, seed):
    if path == "standard":
        return {1: "ch11_base_acc_seed1_cpu"}.get(
            seed, f"ch07_r1_zero_seed{seed}_cpu")
    if path == "standard, same machine":
        return f"ch07_r1_zero_standard_seed{seed}_avx512_cpu"
    if path == "standard, the control's machine":
        return f"ch07_r1_zero_standard_seed{seed}_cpu"
    if path == "fast, same machine":
        return f"ch07_r1_zero_fast_seed{seed}_avx512_cpu"
    infix = {"noshare": "_noshare", "multinomial": "_multinomial",
             "exponential_u": "_expu", "float64": "_float64",
             "packed": "_packed", "race": "_race", "stream": "_stream"}.get(path, "")
    return f"ch07_r1_zero_fast{infix}_seed{seed}_cpu"


def run_row(path, seed):
    """A stored run's final held-out scores and times."""
    run = load_run(ch07_run(path, seed))
    m = run.metrics
    return {"path": path, "seed": seed, "run": run.name,
            "strict accuracy": final_eval([run])[0],
            "language-mixed": final_eval([run], "lang_mix_rate")[0],
            "steps (s)": m["time_step"].sum(),
            "generation per step (s)": m["time_generate"].mean(),
            "update per step (s)": m["time_update"].mean()}


SEEDS = range(12)
ch07 = pd.DataFrame([run_row(path, seed) for path, seeds in (
    ("standard", SEEDS), ("fast", SEEDS), ("noshare", (2, 3))) for seed in seeds])
ch07.drop(columns="run")  # the folders are named in the text above

# %%
fig, ax = plt.subplots(figsize=(6.8, 2.8), constrained_layout=True)
paths = ["standard", "fast", "noshare"]
for i, path in enumerate(paths):
    group = ch07[ch07["path"] == path]
    ax.scatter(group["strict accuracy"], [i] * len(group), s=50, color=f"C{i}")
    ties = group.groupby("strict accuracy")["seed"].apply(  # equal ends share a label
        lambda seeds: ",".join(map(str, sorted(seeds))))
    last_x, below = -1.0, False
    for x, seeds in ties.items():
        below = (not below) if x - last_x < 0.004 else False  # near: the other side
        ax.annotate(seeds, (x, i), fontsize=9, textcoords="offset points",
                    xytext=(0, -13 if below else 6), ha="center")
        last_x = x
ax.set_yticks(range(len(paths)), paths)
ax.set_ylim(-0.7, len(paths) - 0.3)
ax.set_xlabel("held-out strict accuracy after 150 steps (seeds beside each point)")
ax.grid(alpha=0.3, axis="x")
plt.show()

# %%
summary = ch07.groupby("path", sort=False)["strict accuracy"].agg(
    ["count", "mean", "std", "min", "max"])
display(summary)
pairs = ch07[ch07["seed"].between(4, 7)].pivot(index="seed", columns="path",
                                                values="steps (s)")
display(pairs.assign(speed_up=pairs["standard"] / pairs["fast"]))
say(f"The standard path ends at {summary.loc['standard', 'min']:.3f}–"
    f"{summary.loc['standard', 'max']:.3f} over "
    f"{summary.loc['standard', 'count']:.0f} seeds (mean "
    f"{summary.loc['standard', 'mean']:.3f}, standard deviation "
    f"{summary.loc['standard', 'std']:.3f}); the fast path at "
    f"{summary.loc['fast', 'min']:.3f}–{summary.loc['fast', 'max']:.3f} (mean "
    f"{summary.loc['fast', 'mean']:.3f}, standard deviation "
    f"{summary.loc['fast', 'std']:.3f}). The fast rollout with the usual update "
    f"(`noshare`) ends at {summary.loc['noshare', 'min']:.3f} and "
    f"{summary.loc['noshare', 'max']:.3f}. Run side by side, seeds 4 to 7 took "
    f"{pairs['standard'].mean():.0f} s of steps on the standard path and "
    f"{pairs['fast'].mean():.0f} s on the fast one on average, "
    f"{(pairs['standard'] / pairs['fast']).mean():.2f} times faster.")

# %% [markdown]
# Is the fast sampler's distribution the one `torch.multinomial` draws from on real
# models, not only on the small example above? Sample the same training prompts with
# both decode loops, from the base model and from chapter 7's trained model
# (`data/models/tiny-qwen2-r1-zero`, the standard path's seed 0), and score the
# completions with the harness's measures:

# %%
# NBVAL_IGNORE_OUTPUT
def sampled_scores(model_dir, fn, n_prompts, seeds=(0, 1)):
    policy = load_model_and_tokenizer(model_dir)[0]
    sampler = Qwen2.from_transformers(policy, share_weights=True)
    rows = [dict(r) for r in load_task_split("arithmetic", "train")
            .select(range(n_prompts))]
    scores = []
    for seed in seeds:
        rollout = generate(sampler, tok, [r["prompt"] for r in rows],
                           num_generations=G, max_new_tokens=96, seed=seed,
                           decode_fn=fn)
        scores.append(score_groups(rows, G, rollout.texts,
                                   lengths=rollout.completion_lengths.tolist()))
    s = pd.concat(scores)
    return {"completions": len(s), "correct": s["correct"].mean(),
            "formatted": s["formatted"].mean(),
            "language-mixed": s["lang_mixed"].mean(), "length": s["length"].mean()}


models = {"base": TINY, "R1-Zero": REPO / "data" / "models" / "tiny-qwen2-r1-zero"}
n_check = P.pick(smoke=4, cpu=128, gpu=256)
check = pd.DataFrame({(name, loop): sampled_scores(path, fn, n_check)
                      for name, path in models.items()
                      for loop, fn in (("multinomial", decode_static),
                                       ("inverse CDF", decode_fast))}).T
check

# %%
var = check["correct"] * (1 - check["correct"]) / check["completions"]
se_gap = var.groupby(level=0).sum() ** 0.5  # standard error of the difference
gaps = check["correct"].groupby(level=0).agg(lambda v: abs(v.iloc[0] - v.iloc[1]))
say("The share of correct sampled answers differs between the two samplers by "
    + ", ".join(f"{gaps[name]:.3f} on the {name} model (standard error of the "
                f"difference {se_gap[name]:.3f})" for name in gaps.index) + ".")

# %% [markdown]
# A sharper check needs no sampling at all. The inverse CDF gives token $v$ the width
# $F_v - F_{v-1}$ of its step, computed by a float32 `cumsum`, where round-off could
# squeeze the rarest tokens. Compare these widths with the softmax in float64 at every
# position of real completions, by their total variation distance
# $\tfrac12 \sum_v |w_v - p_v|$ (the most any event's probability can differ by):

# %%
def cdf_width_gap(model_dir, n_prompts):
    """Total variation between the inverse CDF's float32 step widths and the exact
    softmax, at every position of sampled completions."""
    policy = load_model_and_tokenizer(model_dir, device=P.device)[0]
    batch = list(load_task_split("arithmetic", "test")["prompt"][:n_prompts])
    r = generate(policy, tok, batch, num_generations=2, max_new_tokens=96, seed=0)
    ids = torch.cat([r.prompt_ids, r.completion_ids], 1)  # [B, P + C]
    mask = torch.cat([r.prompt_mask, r.completion_mask], 1)  # [B, P + C]
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask,
                        position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    z = logits[:, r.prompt_ids.shape[1] - 1:-1][r.completion_mask.bool()].float()
    cdf = z.softmax(-1).cumsum(-1)  # [N, V], as sample_inverse_cdf builds it
    widths = cdf.diff(dim=-1, prepend=cdf.new_zeros(len(cdf), 1)) / cdf[:, -1:]
    tv = 0.5 * (widths.double() - z.double().softmax(-1)).abs().sum(-1)  # [N]
    return {"positions": len(z), "mean TV": tv.mean().item(), "max TV": tv.max().item()}


pd.DataFrame({name: cdf_width_gap(path, P.pick(smoke=4, cpu=32, gpu=32))
              for name, path in models.items()}).T.style.format(
    {"positions": "{:,.0f}", "mean TV": "{:.1e}", "max TV": "{:.1e}"})

# %%
low, high = summary.loc["standard", "min"], summary.loc["standard", "max"]
fast_acc = ch07.loc[ch07["path"] == "fast", "strict accuracy"]
inside = fast_acc.between(low, high)
say(f"{inside.sum()} of the fast path's {len(fast_acc)} seeds end inside the "
    f"standard path's range ({low:.3f}–{high:.3f}); "
    f"{(fast_acc < low).sum()} end below it.")

# %% [markdown]
# Are twelve seeds a side enough to call the gap real? Shuffle the path labels of the
# 24 final accuracies many times and count how often a shuffle puts the two means at
# least as far apart as the runs did (a permutation test: it assumes nothing about the
# shape of the spread):

# %%
def permutation_p(a, b, shuffles=20_000, seed=0):
    """Two-sided p-value of the difference of the means of `a` and `b`."""
    rng = np.random.default_rng(seed)
    both, n = np.concatenate([a, b]), len(a)
    observed = abs(np.mean(a) - np.mean(b))
    hits = sum(abs(x[:n].mean() - x[n:].mean()) >= observed - 1e-12
               for x in (rng.permutation(both) for _ in range(shuffles)))
    return hits / shuffles


standard_acc = ch07.loc[ch07["path"] == "standard", "strict accuracy"].to_numpy()
p_value = permutation_p(standard_acc, fast_acc.to_numpy())
say(f"Mean {standard_acc.mean():.3f} against {fast_acc.mean():.3f} over "
    f"{len(standard_acc)} and {len(fast_acc)} seeds: a shuffle of the labels puts the "
    f"means as far apart in a share {p_value:.3f} of 20,000 shuffles.")

# %% [markdown]
# (ch19-ablation)=
# ### Which piece?
#
# The fast path changes three things at once: the decode step's arithmetic (fused
# weights, the from-scratch model, the prompt prefilled once), the sampler (one
# uniform number per row instead of `torch.multinomial`), and the update (the prompt
# computed once per group). `scripts/fast_path_ablation.py` swaps one of them at a
# time, both times with the usual update: arm `numerics` runs the fast decode step but
# draws with `torch.multinomial`; arm `sampler` runs the standard path but draws by
# inverse CDF. Seeds 0 and 7, two on which the fast path ended far below the
# standard path:

# %%
def metrics_of(name):
    return load_run(name).metrics


def same_run(a, b):
    """Do two runs agree in every metrics column but the timings?"""
    ma, mb = metrics_of(a), metrics_of(b)
    shared = [c for c in ma.columns if c in mb.columns and not c.startswith("time_")]
    return all(ma[c].equals(mb[c]) for c in shared)


def parted_at(a, b):
    """The first step at which two runs' training accuracy differs (None: never)."""
    return parting_step(metrics_of(a), metrics_of(b), ["accuracy"])


def final_strict(name):
    return final_eval([load_run(name)])[0]


arms = {"standard": None, "numerics": "numerics", "sampler": "sampler", "fast": None}
ablation = pd.DataFrame([{
    "seed": seed,
    **{f"strict, {arm}": final_strict(
        f"ch07_r1_zero_ablation_{arm}_seed{seed}_cpu" if infix else ch07_run(arm, seed))
       for arm, infix in arms.items()},
    "numerics = standard": same_run(f"ch07_r1_zero_ablation_numerics_seed{seed}_cpu",
                                    ch07_run("standard", seed)),
    "sampler leaves fast at step": parted_at(
        f"ch07_r1_zero_ablation_sampler_seed{seed}_cpu", ch07_run("fast", seed))}
    for seed in (0, 7)]).set_index("seed")
ablation

# %%
same = bool(ablation["numerics = standard"].all())
say(f"With `torch.multinomial` the fast decode step trains "
    + ("exactly the standard run, every metric of all 150 steps equal, in both "
       "seeds: its arithmetic changes no sampled token and so nothing in training."
       if same else "a run that differs from the standard one.")
    + f" The inverse-CDF sampler on the standard path follows the fast run of the same "
    f"seed: the same training accuracy at every step before step "
    f"{ablation['sampler leaves fast at step'].iloc[0]} (seed 0) and "
    f"{ablation['sampler leaves fast at step'].iloc[1]} (seed 7). Both draw from the "
    f"same random numbers, and only the round-off of the decode step and of the "
    f"prompt-once update sets them apart. It ends at "
    f"{ablation['strict, sampler'].iloc[0]:.3f} and "
    f"{ablation['strict, sampler'].iloc[1]:.3f}, against the fast runs' "
    f"{ablation['strict, fast'].iloc[0]:.3f} and "
    f"{ablation['strict, fast'].iloc[1]:.3f}.")

# %% [markdown]
# So the fast decode step is exact where it matters: drawing with `torch.multinomial` it
# trains the standard run itself. The difference enters with the sampler. Its
# distribution is the right one, to a total variation of about $10^{-6}$ per token and
# by the scores of its sampled answers, yet its runs end lower on average and further
# apart, and the permutation test says that twelve seeds a side rarely look like this by
# chance. Two draws from the same distribution can still train differently only through
# which answers they happen to draw, and an R1-Zero run at this learning rate is
# sensitive to that: seed 7's sampler and fast runs share their random numbers and end
# far apart once round-off has separated them ({doc}`09_failure_modes`). What in the
# inverse-CDF stream tips the runs low is not found by these checks. The fast engine
# offers these two draws (and a third, the race below): `rollout_sampler="inverse_cdf"`
# (the fastest draw; see the timings
# in {ref}`ch19-race`) and `rollout_sampler="multinomial"`, the numerics arm above,
# which trains the standard run token for token and keeps the decode step's share of the
# speed-up.
#
# (ch19-multinomial)=
# ### The fast path with the standard draw
#
# That is a test too. Run the whole fast path, the prompt once in the update
# included, with `rollout_sampler="multinomial"`, for the same twelve seeds
# (`ch07_r1_zero_fast_multinomial_seed*_cpu`). Its rollouts follow the standard path
# token for token until the prompt-once update's round-off separates the runs. If the
# inverse-CDF draw is what tips the fast runs low, these end where the standard path
# does. These runs pack every float32 product of the decode step
# ({ref}`ch19-what-is-left`), and ran on another machine of the same kind with
# bfloat16 hardware, one torch thread each, two seeds at a time:

# %%
multinomial = pd.DataFrame([run_row("multinomial", seed) for seed in SEEDS])
by_path = pd.concat([ch07[ch07["path"] != "noshare"], multinomial])
by_path.groupby("path", sort=False)["strict accuracy"].agg(
    ["count", "mean", "std", "min", "max"])

# %%
def seeds_line(label, acc, against):
    """The range and mean of the final accuracies `acc`, how many fall inside the
    standard path's range, and a permutation test against each run set in `against`."""
    tests = "; ".join(f"against {name}, {permutation_p(other, acc):.3f}"
                      for name, other in against.items())
    return (f"{label} the fast path ends at {acc.min():.3f}–{acc.max():.3f} (mean "
            f"{acc.mean():.3f}); {((acc >= low) & (acc <= high)).sum()} of its "
            f"{len(acc)} seeds end inside the standard path's range and "
            f"{(acc < low).sum()} below it. The share of 20,000 shuffles of the labels "
            f"that put the means as far apart: {tests}.")


mult_acc = multinomial["strict accuracy"].to_numpy()
say(seeds_line("With the multinomial draw", mult_acc, {
    "the standard path": standard_acc,
    "the inverse-CDF fast path": fast_acc.to_numpy()}))

# %% [markdown]
# The two sets of fast runs come from different machines. To rule the machine out, the
# standard path (seeds 0 and 1) and the inverse-CDF fast path (seeds 0 to 3) were run
# again on the multinomial runs' machine, with the same commands, two runs of one path
# at a time. Each run's final strict accuracy, and its seconds of steps:

# %%
same_machine = pd.DataFrame([run_row(path, seed) for path, seeds in (
    ("standard, same machine", (0, 1)), ("fast, same machine", (0, 1, 2, 3)),
    ("multinomial", (0, 1, 2, 3))) for seed in seeds])
same_machine.pivot(index="seed", columns="path",
              values=["strict accuracy", "steps (s)"]).round(3)

# %%
acc = same_machine.pivot(index="seed", columns="path", values="strict accuracy")
sec = same_machine.pivot(index="seed", columns="path", values="steps (s)").loc[[0, 1]]
std, inv = "standard, same machine", "fast, same machine"
say(f"On one machine, seed 0 ends at {acc.loc[0, std]:.3f} on the standard "
    f"path, {acc.loc[0, 'multinomial']:.3f} on the fast path with the multinomial "
    f"draw and {acc.loc[0, inv]:.3f} with the inverse-CDF draw (on the "
    f"first machine: {final_strict(ch07_run('fast', 0)):.3f}). Seeds 0 and 1 took "
    f"{sec[std].mean():.0f} s of steps on the standard path and "
    f"{sec['multinomial'].mean():.0f} s on the fast path with the multinomial draw, "
    f"{sec[std].mean() / sec['multinomial'].mean():.2f} times faster "
    f"({sec[inv].mean():.0f} s with the inverse-CDF draw).")

# %% [markdown]
# The two draws give each token its probability, and the rollouts above pass every
# check of that. What else differs is where their random numbers come from.
# `torch.multinomial` draws a token as the winner of an exponential race,
# $\arg\max_v p_v / E_v$ with $E_v \sim \mathrm{Exp}(1)$, from `exponential_`; the
# inverse CDF takes its one number per row from `torch.rand`. Arm `exponential_u` of
# `scripts/fast_path_ablation.py` keeps the whole inverse-CDF fast path and only
# makes its uniform numbers from the race's source, $u = 1 - e^{-E}$, for the same
# twelve seeds on the same machine:

# %%
exp_u = pd.DataFrame([run_row("exponential_u", seed) for seed in SEEDS])
say(seeds_line("With $u$ from `exponential_`", exp_u["strict accuracy"].to_numpy(), {
    "the multinomial draw": mult_acc,
    "the `torch.rand` inverse CDF": fast_acc.to_numpy()}))

# %% [markdown]
# A last arm tests the rounding. Once the float32 cumulative sum has passed 1/2 it
# moves in steps of $2^{-24} \approx 6 \times 10^{-8}$, so a token there that is less
# likely than about half a step gets an empty interval and is never drawn; and
# `torch.rand`'s numbers are multiples of $2^{-24}$ too. Arm `float64` computes the
# softmax, its cumulative sum and the uniform numbers in float64, where the steps are
# about $2^{-53}$, for seeds 0 to 7:

# %%
f64 = pd.DataFrame([run_row("float64", seed) for seed in range(8)])
say(seeds_line("With the inverse CDF in float64", f64["strict accuracy"].to_numpy(), {
    "the multinomial draw": mult_acc,
    "the float32 inverse CDF": fast_acc.to_numpy()}))

# %% [markdown]
# So the fast decode step and the prompt-once update train as well as the standard path,
# and the inverse-CDF draw looks like the piece that costs accuracy
# ({ref}`ch19-other-numbers` below puts that reading to a test it fails). With the
# race's random source, and in float64, the inverse CDF ends between the two draws, and
# these seeds cannot tell which one either arm belongs with: the mechanism stays open
# (exercise 19.4 (d)). What to do meanwhile is clear. The trainer's fast engine draws
# with `torch.multinomial` by default (`rollout_sampler="multinomial"`), the draw the
# runs above show to train like the standard path. The inverse CDF stays available for
# its speed; the CUDA graph below replays it and the multinomial draw.

# %% [markdown]
# (ch19-packed-update)=
# ### The update's products packed
#
# None of the runs above packs the update's products ({ref}`ch19-what-is-left`).
# Packing changes only round-off, but round-off is enough for two runs to part, so it
# must be checked the same way. Seeds 0 and 1 of the multinomial runs,
# made again with the same command on the same kind of machine, two at a time, with the
# update's products packed (`ch07_r1_zero_fast_packed_seed*_cpu`):

# %%
packed_runs = pd.DataFrame([run_row(path, seed) for path in ("multinomial", "packed")
                            for seed in (0, 1)])
packed_runs.drop(columns="run").set_index(["path", "seed"])

# %%
by_seed = packed_runs.pivot(index="seed", columns="path")
packed_acc = by_seed[("strict accuracy", "packed")]
parted = [parted_at(ch07_run("multinomial", seed), ch07_run("packed", seed))
          for seed in (0, 1)]
say("The packed runs leave the multinomial runs of their seed at step "
    + " and ".join(str(p) for p in parted) + " (training accuracy). They end at "
    + " and ".join(f"{a:.3f}" for a in packed_acc)
    + " held-out strict accuracy, against "
    + " and ".join(f"{a:.3f}" for a in by_seed[("strict accuracy", "multinomial")])
    + " before, "
    + ("inside" if packed_acc.between(low, high).all() else "not all inside")
    + f" the standard path's range ({low:.3f}–{high:.3f}). The update "
    f"took {by_seed[('update per step (s)', 'packed')].mean():.2f} s per step "
    f"on average against {by_seed[('update per step (s)', 'multinomial')].mean():.2f}"
    f" s, and the 150 steps {by_seed[('steps (s)', 'packed')].mean():.0f} s "
    f"against {by_seed[('steps (s)', 'multinomial')].mean():.0f} s.")

# %% [markdown]
# (ch19-race)=
# ### The race, from uniform numbers
#
# `torch.multinomial` does not lay the probabilities end to end. It runs a race: one
# exponential number $E_v$ per token, and the token with the largest $p_v / E_v$ wins.
# $E_v / p_v$ is exponential with rate $p_v$, and of independent exponential clocks the
# one with rate $p_v$ rings first with probability $p_v / \sum_w p_w$, so the race draws
# token $v$ with probability $p_v$. On a CPU such as this one, most of the draw's time
# goes into making the exponential numbers (`exponential_`). An exponential number is
# also $-\log u$ for a uniform $u$, and uniform numbers are cheaper to make. The same
# race from them:

# %%
show_source(sample_race)

# %%
# NBVAL_IGNORE_OUTPUT
noise = torch.empty(64, s.vocab_size)
race_us = {
    "exponential_ (64 x V)": mean_us(lambda: noise.exponential_(generator=gen)),
    "uniform_ (64 x V)": mean_us(lambda: noise.uniform_(generator=gen)),
    "torch.multinomial": mean_us(lambda: torch.multinomial(
        logits.softmax(-1), 1, generator=gen)),
    "race from uniform numbers": mean_us(lambda: sample_race(logits, generator=gen)),
    "inverse CDF": mean_us(lambda: sample_inverse_cdf(logits, generator=gen))}
pd.Series(race_us, name="µs per call").round(0).to_frame()

# %% [markdown]
# The race from uniform numbers draws from `torch.multinomial`'s distribution, from
# another random stream, as the inverse CDF does, and the inverse CDF trained lower.
# So it gets the same test: chapter 7's config with `rollout_sampler="race"`, twelve
# seeds, on the same kind of machine, two runs at a time with one torch thread each
# (`ch07_r1_zero_fast_race_seed*_cpu`; they also have the packed update):

# %%
race = pd.DataFrame([run_row("race", seed) for seed in SEEDS])
by_draw = pd.concat([by_path, race])
by_draw.groupby("path", sort=False)[["strict accuracy", "generation per step (s)"]].agg(
    ["mean", "min", "max"])

# %%
race_acc = race["strict accuracy"].to_numpy()
say(seeds_line("With the race draw", race_acc, {
    "the standard path": standard_acc,
    "the multinomial draw": mult_acc,
    "the inverse-CDF fast path": fast_acc.to_numpy()})
    + f" Its generation took {race['generation per step (s)'].mean():.2f} s per step "
    f"on average, against {multinomial['generation per step (s)'].mean():.2f} s for "
    "the multinomial draw's runs.")

# %% [markdown]
# The runs of one seed share more than the seed's number. Seed by seed, the
# correlation of the final accuracies between the draws:

# %%
per_seed = pd.DataFrame({
    "standard": standard_acc, "multinomial": mult_acc,
    "inverse CDF": fast_acc.to_numpy(), "race": race_acc}, index=list(SEEDS))
seed_corr = per_seed.corr()
seed_corr.round(2)

# %%
say(f"The multinomial runs follow the standard path seed by seed (correlation "
    f"{seed_corr.loc['multinomial', 'standard']:.2f}): they are its own runs until "
    f"round-off parts them, so their agreement with it is not a second, independent "
    f"sample. The race's runs draw other tokens from the first step, yet they go with "
    f"the inverse CDF's runs of the same seed "
    f"({seed_corr.loc['race', 'inverse CDF']:.2f}) and not with the standard "
    f"path's ({seed_corr.loc['race', 'standard']:.2f}).")

# %% [markdown]
# So the twelve seeds may compare two families of runs more than two draws: the
# standard path with the multinomial draw that repeats it, and the draws from other
# random streams, which go together for a reason these runs do not show. On average
# the race from uniform numbers ends between the two, as the inverse CDF's other arms
# did.

# %% [markdown]
# (ch19-new-seeds)=
# ### Twelve new seeds
#
# If the seeds sort runs into families, part of the standard path's average belongs to
# its twelve seeds, and new seeds can show it. Seeds 12 to 23, on the standard path and
# with the race, on the race runs' machine, one torch thread, two runs of one path at a
# time (`ch07_r1_zero_standard_seed*_avx512_cpu` and
# `ch07_r1_zero_fast_race_seed*_cpu`):

# %%
NEW_SEEDS = range(12, 24)
new_seeds = pd.DataFrame({
    path: [run_row(name, seed)["strict accuracy"] for seed in NEW_SEEDS]
    for path, name in (("standard", "standard, same machine"), ("race", "race"))},
    index=list(NEW_SEEDS))
new_seeds.T

# %%
all_standard = np.concatenate([standard_acc, new_seeds["standard"]])
all_race = np.concatenate([race_acc, new_seeds["race"]])
say(f"On seeds 12 to 23 the standard path ends at "
    f"{new_seeds['standard'].min():.3f}–{new_seeds['standard'].max():.3f} (mean "
    f"{new_seeds['standard'].mean():.3f}, against {standard_acc.mean():.3f} on seeds 0 "
    f"to 11) and the race at {new_seeds['race'].min():.3f}–"
    f"{new_seeds['race'].max():.3f} (mean {new_seeds['race'].mean():.3f}, against "
    f"{race_acc.mean():.3f}). Over all 24 seeds: {all_standard.mean():.3f} against "
    f"{all_race.mean():.3f}, and a share "
    f"{permutation_p(all_standard, all_race):.3f} of 20,000 shuffles of the labels "
    f"put the means as far apart.")

# %% [markdown]
# On new seeds the standard path keeps its level and the race does not, one of its
# runs falling far (seed 20). So the family reading does not explain the gap. Over
# 24 seeds the race trained chapter 7 lower on average than the standard path, as
# the inverse CDF did over twelve, though that one collapsed run carries part of the
# difference. Why an exact draw of the same distribution should train lower is the
# question of {ref}`ch19-other-numbers` below. The trainer keeps `torch.multinomial`
# as its default. `rollout_sampler="race"` stays for its speed, with these 24 seeds
# as its record.

# %% [markdown]
# (ch19-same-numbers)=
# ### The race on `torch.multinomial`'s own numbers
#
# The race from uniform numbers is fast because it makes its exponential numbers
# another way, and so it draws other tokens. `torch.multinomial`'s numbers can be made
# faster *without* changing them. On a CPU, `exponential_` computes each
# $E_v = -\log(1 - u_v)$ from a uniform float64 number $u_v$ of the generator, one
# entry after another in row order, one number at a time.
# `torch.rand(..., dtype=torch.float64)` makes the same $u_v$ from the same
# generator, in a vectorised loop. The same race on the same numbers picks the same
# token, and leaves the generator where `torch.multinomial` leaves it:

# %%
show_source(sample_multinomial)

# %%
same_tokens = same_state = 0
for seed in range(200):
    row_logits = torch.randn(64, s.vocab_size,
                             generator=torch.Generator().manual_seed(seed))
    tau, top_p = (0.7, 0.9) if seed % 2 else (1.0, 1.0)
    ref_gen, our_gen = (torch.Generator().manual_seed(seed) for _ in range(2))
    want = torch.multinomial(sampling_probs(row_logits, tau, top_p), 1,
                             generator=ref_gen).squeeze(-1)
    got = sample_multinomial(row_logits, tau, top_p, generator=our_gen)
    same_tokens += torch.equal(got, want)
    same_state += torch.equal(ref_gen.get_state(), our_gen.get_state())
print(f"200 draws of 64 rows: the same tokens in {same_tokens}, the generator in the "
      f"same state after {same_state}; this torch makes exponential_'s numbers from "
      f"float64 torch.rand: {exponential_is_rand()}")

# %%
# NBVAL_IGNORE_OUTPUT
same_us = {
    "torch.multinomial": mean_us(lambda: torch.multinomial(
        logits.softmax(-1), 1, generator=gen)),
    "sample_multinomial": mean_us(lambda: sample_multinomial(logits, generator=gen)),
    "race from uniform numbers": mean_us(lambda: sample_race(logits, generator=gen))}
pd.Series(same_us, name="µs per call").round(0).to_frame()

# %% [markdown]
# The whole rollout gets the same test. The standard decode loop of chapter 6, which
# calls `torch.multinomial`, against the fast decode step with this draw
# (`rollout_sampler="multinomial"`, the trainer's default), on the tiny checkpoint,
# from one seed:

# %%
rollout_args = dict(num_generations=G, max_new_tokens=LENGTH, seed=5, top_p=0.95)
standard_rollout = generate(hf, tok, prompts[:N_PROMPTS], **rollout_args)
fast_rollout = generate(ours, tok, prompts[:N_PROMPTS], decode_fn=functools.partial(
    decode_fast, sampler="multinomial"), **rollout_args)
same = (fast_rollout.completion_ids == standard_rollout.completion_ids).float().mean()
say(f"The two rollouts agree on {same:.1%} of their "
    f"{standard_rollout.completion_ids.numel():,} token slots.")

# %%
gained = {name: same_us["torch.multinomial"] - same_us[name]
          for name in ("sample_multinomial", "race from uniform numbers")}
say(f"Here `sample_multinomial` takes {same_us['sample_multinomial']:.0f} µs where "
    f"`torch.multinomial` takes {same_us['torch.multinomial']:.0f} µs: "
    f"{gained['sample_multinomial'] * LENGTH / 1e3:.0f} ms less per rollout of "
    f"{LENGTH} tokens (one draw a token), against "
    f"{gained['race from uniform numbers'] * LENGTH / 1e3:.0f} ms for the race "
    "from uniform numbers.")

# %% [markdown]
# So the fast engine's default draw is `sample_multinomial`: the tokens of
# `torch.multinomial` and of the standard path, bit for bit, with most of the speed
# of the race from uniform numbers and none of its open question. The
# multinomial runs of {ref}`ch19-multinomial` are the runs it makes. Where the
# identity does not hold (a CUDA device, or a torch release whose `exponential_`
# draws otherwise, which `exponential_is_rand` checks once per process),
# `sample_multinomial` calls `torch.multinomial`, and a test of the library fails, so
# that the change is seen.

# %% [markdown]
# (ch19-other-numbers)=
# ### The standard draw on other numbers
#
# The race and the inverse CDF differ from the standard path in two ways at once: how
# they turn random numbers into a token, and which numbers they turn. With
# `sample_multinomial` the second can change alone. Arm `stream` of
# `scripts/fast_path_ablation.py` trains chapter 7's config on the fast path with the
# trainer's default draw, `torch.multinomial`'s own, and seeds every rollout's generator
# from another stream: `SeedSequence([seed, step, round, 1])` where the trainer uses
# `SeedSequence([seed, step, round])`. The prompts come in the same order, and the draw
# is the standard path's; only the rollouts' random numbers differ, and the machine.
# Seeds 0 to 23, on a 2-core Intel machine (the standard path and the race ran on AMD
# ones), two runs at a time with one torch thread each
# (`ch07_r1_zero_fast_stream_seed*_cpu`), beside the standard path and the race on the
# same 24 seeds:

# %%
stream = pd.DataFrame([run_row("stream", seed) for seed in range(24)])
stream_acc = stream["strict accuracy"].to_numpy()
by_numbers = pd.DataFrame({"standard path": all_standard, "race": all_race,
                           "standard draw, other numbers": stream_acc})
by_numbers.agg(["mean", "std", "min", "max"]).round(3)

# %%
fig, ax = plt.subplots(figsize=(6.8, 2.4), constrained_layout=True)
for i, (name, acc) in enumerate(by_numbers.items()):
    ax.scatter(acc, [i] * len(acc), s=40, alpha=0.5, color=f"C{i}")
    ax.plot([acc.mean()] * 2, [i - 0.3, i + 0.3], color="black", lw=1.5)
ax.set_yticks(range(by_numbers.shape[1]), by_numbers.columns)
ax.set_ylim(-0.6, by_numbers.shape[1] - 0.4)
ax.set_xlabel("held-out strict accuracy after 150 steps (black: mean of 24 seeds)")
ax.grid(alpha=0.3, axis="x")
plt.show()

# %%
LOW = 0.9
low_runs = (by_numbers < LOW).sum()
say(f"With the standard draw on other numbers the 24 runs end at "
    f"{stream_acc.min():.3f}–{stream_acc.max():.3f} (mean {stream_acc.mean():.3f}); "
    f"the standard path's at {all_standard.min():.3f}–{all_standard.max():.3f} (mean "
    f"{all_standard.mean():.3f}) and the race's at {all_race.min():.3f}–"
    f"{all_race.max():.3f} (mean {all_race.mean():.3f}). Runs that end below "
    f"{LOW}: " + ", ".join(f"{n} of 24 ({name})" for name, n in low_runs.items())
    + ". The share of 20,000 shuffles of the labels that put the means as far apart: "
    f"{permutation_p(all_standard, stream_acc):.3f} against the standard path, "
    f"{permutation_p(all_race, stream_acc):.3f} against the race, "
    f"{permutation_p(fast_acc.to_numpy(), stream_acc):.3f} against the inverse-CDF "
    f"fast path's twelve seeds (mean {fast_acc.mean():.3f}).")

# %% [markdown]
# The standard draw fed other random numbers ends where the race ends, below the
# standard path, and some of its runs fall far, as some of the race's do. So the draw is
# not the piece that set the standard path's runs apart: their random numbers did (or
# the machines they ran on). {ref}`ch19-ablation` could not see it, because swapping the
# sampler swapped the draw and its numbers together, and so did every arm after it. The
# choice among the three draws does not move training. The fast engine keeps
# `torch.multinomial`'s draw by default for another reason: its runs repeat the standard
# path's, which is what lets the book compare the two paths seed by seed.

# %% [markdown]
# Why do the standard path's 24 runs sit high? Either by chance (a run of this config
# now and then falls well below the rest, and 24 seeds hold few such falls) or because
# of something in the trainer's own streams, `SeedSequence([seed, step, round])`. A
# control tells the two apart: the stream arm's command with the trainer's own streams,
# on new seeds 24 to 35, on the same machine (`ch07_r1_zero_fast_multinomial_seed*_cpu`;
# seeds 0 to 11 of that name are the multinomial runs above):

# %%
control = np.array([run_row("multinomial", seed)["strict accuracy"]
                    for seed in range(24, 36)])
say(f"On seeds 24 to 35 the trainer's own streams end at {control.min():.3f}–"
    f"{control.max():.3f} (mean {control.mean():.3f}), {(control < LOW).sum()} of 12 "
    f"runs below {LOW}. The share of 20,000 shuffles that put the means as far apart: "
    f"{permutation_p(all_standard, control):.3f} against the standard path's 24 seeds, "
    f"{permutation_p(stream_acc, control):.3f} against the stream arm's.")

# %% [markdown]
# The control changed two things at once against the standard path's 24 runs: the
# seeds, and the path. Its runs use the fast engine and compute the prompt once in
# the update, whose round-off parts them from the standard path's runs (the steps are
# counted below). The standard path itself on the first eight of those seeds, on a
# 2-core Intel machine like the control's, one torch thread each, two at a time
# (`ch07_r1_zero_standard_seed*_cpu`), tells the seeds from the path:

# %%
CONTROL_SEEDS = range(24, 32)
same_seeds = pd.DataFrame({
    "standard path": [run_row("standard, the control's machine", seed)[
        "strict accuracy"] for seed in CONTROL_SEEDS],
    "fast path (the control)": [run_row("multinomial", seed)["strict accuracy"]
                                for seed in CONTROL_SEEDS]},
    index=list(CONTROL_SEEDS)).rename_axis("seed")
same_seeds.T.round(3)

# %%
std_new = same_seeds["standard path"].to_numpy()
ctl_new = same_seeds["fast path (the control)"].to_numpy()
ahead = int((std_new > ctl_new).sum())
tied = int((std_new == ctl_new).sum())
p_paths = permutation_p(std_new, ctl_new)
p_seeds = permutation_p(all_standard, std_new)
parts = [parted_at(ch07_run("standard, the control's machine", seed),
                   ch07_run("multinomial", seed)) for seed in CONTROL_SEEDS]
say(f"On seeds 24 to 31 the standard path ends at {std_new.min():.3f}–"
    f"{std_new.max():.3f} (mean {std_new.mean():.3f}), {(std_new < LOW).sum()} of "
    f"{len(std_new)} runs below {LOW}; the fast path on the same seeds at mean "
    f"{ctl_new.mean():.3f}; the two paths' training accuracy first differs at steps "
    f"{min(parts)}–{max(parts)}. Seed by seed the standard path is ahead on {ahead}, "
    f"level on {tied} and behind on {len(std_new) - ahead - tied}. The share of 20,000 "
    f"shuffles that put the means as far apart: {p_paths:.3f} between the two paths "
    f"on these seeds, {p_seeds:.3f} between the standard path's first 24 runs and "
    f"these. "
    + ("On the same seeds, on machines of the same kind, the two paths end alike, "
       "and the standard path's own new runs end below its first 24: what set those "
       "24 apart was their random numbers (or the machines they ran on), not a "
       "better path."
       if p_paths >= 0.1 and p_seeds < 0.1 else
       "On the same seeds, on machines of the same kind, the two paths end alike, "
       "but eight new seeds of the standard path are not told apart from its first "
       "24 either: these runs show no cost of the fast path, and cannot say why the "
       "first 24 sat high." if p_paths >= 0.1 else
       "On the same seeds, on machines of the same kind, the standard path ends "
       "higher: the fast path's lower runs are not only the seeds' luck."
       if std_new.mean() > ctl_new.mean() else
       "On the same seeds, on machines of the same kind, the fast path ends "
       "higher."))

# %% [markdown]
# What held throughout is the bit-for-bit check: where two paths draw the same
# tokens, they train the same runs until round-off parts them.
#
# That check is why the fast engine, with `torch.multinomial`'s draw and the usual
# update, is the trainer's default (`rollout_engine="fast"`): it trains the run of the
# standard path, faster. {doc}`Chapter 7 <07_full_loop>` trains with it and sets its
# run beside the same seed rolled out by chapter 6's loop.


# %% [markdown]
# (ch19-cuda-graphs)=
# ## On a GPU: one launch per step
#
# A GPU does the arithmetic of a small model's decode step in microseconds, so the step
# waits on something else. Each of its few hundred kernels is launched from Python, one
# after another, and the GPU idles between launches. The H100 rows of the step
# benchmark without CUDA graphs show it. The from-scratch rollout makes the same
# tokens as `transformers`', yet on the GPU it was not faster:

# %%
h100 = bench[bench["machine"].str.contains("H100", na=False)]
before = h100[h100["cuda_graph"].isna()
              & (h100["model"] == "random tiny Qwen2")].set_index("engine")
before[["date", "model", "ours_gen_s", "trl_gen_s"]]

# %%
say(f"The from-scratch rollout took {before.loc['scratch', 'ours_gen_s']:.3f} s "
    f"of generation per step, the `transformers` one "
    f"{before.loc['transformers', 'ours_gen_s']:.3f} s, for the same tokens of the "
    "tiny model.")

# %% [markdown]
# A **CUDA graph** removes the launches. PyTorch records the kernels of one step once
# (`torch.cuda.CUDAGraph`), and a replay runs all of them with one call. A replay runs
# the *same* kernels on the *same* memory, so a step that is replayed may keep nothing
# in Python numbers. Whatever changes from one step to the next must be a tensor that
# the step itself updates in place:
#
# - the cache column and the output column are `[1]` tensors, and the positions a
#   `[b]` tensor, each incremented by the step;
# - the attention reads all $P + L_{\max}$ columns of the cache ($P$ for the prompt,
#   $L_{\max}$ = `max_new_tokens` for the completion), and the bias hides the ones
#   not yet written (`decode_step` with a tensor column), so no shape depends on the
#   step;
# - the draw takes its random numbers from a buffer that the seeded generator fills
#   before each replay, the numbers the draw would have made itself: one uniform $u$
#   per row for `sample_inverse_cdf`, and for `torch.multinomial` the exponential
#   numbers of its race ({ref}`ch19-graph-multinomial`);
# - the chosen tokens, the alive mask and the log-probs go into $[b, L_{\max}]$
#   buffers at the step's column.
#
# `grpo_lib.graph_decode.graph_step` is the step written that way:

# %%
show_source(graph_step)

# %% [markdown]
# The loop around it runs step 0 eagerly on a side stream, which warms up the
# kernels and their workspaces as a capture requires. It records step 1 once
# (recording runs nothing), then replays the graph for step 1 and every step after it.
# `decode_fast` takes this path on a CUDA device for greedy decoding and for the
# inverse-CDF and multinomial draws; only the race of other uniform numbers
# (`sampler="race"`) keeps the eager loop.

# %%
show_source(decode_graphed, start="graph, done = None, 0", end="break")

# %% [markdown]
# On a CPU there is nothing to capture, but the step itself runs eagerly, so its
# correctness can be checked anywhere. The replayable step should draw the eager loop's
# tokens from the same seed, with log-probs equal to round-off:

# %%
check_kwargs = dict(num_generations=4, max_new_tokens=LENGTH, seed=1, top_p=0.95)
eager_run = generate(ours, tok, prompts[:4],
                     decode_fn=functools.partial(decode_fast, cuda_graph=False),
                     **check_kwargs)
graph_run = generate(ours, tok, prompts[:4], decode_fn=functools.partial(
    decode_graphed, capture=P.device == "cuda"), **check_kwargs)
logp_gap = (graph_run.sampler_logprobs - eager_run.sampler_logprobs).abs().max()
print(f"captured: {P.device == 'cuda'}; same tokens: "
      f"{torch.equal(graph_run.completion_ids, eager_run.completion_ids)}; "
      f"largest log-prob gap: {logp_gap.item():.1e}")

# %% [markdown]
# On the H100, `benchmarks/gpu_pass.sh` timed the sampler with and without the graph
# against `generate`, in bfloat16, with 64 rows of 128 tokens, drawing by inverse CDF
# (the default then). It used the tiny checkpoint and random weights of the small
# model's and of Qwen2.5-0.5B's shapes, since forced-length timings do not depend on the
# weights. For a GPU the floor is not FLOPs: a decode step must at least read every
# weight once and each row's cached keys and values. `speed.decode_read_bytes` counts
# those bytes, and `speed.memory_bandwidth` measures the rate of a large copy in the
# same run. Their ratio is the **weight-read floor**:

# %%
sampler_bench = pd.read_csv(REPO / "benchmarks" / "results" / "sampler_vs_generate.csv")
gpu_sampler = sampler_bench[sampler_bench["device"].str.contains("H100")
                            & sampler_bench["cuda_graph"].notna()].copy()
shape_names = r"(tiny|small|qwen2\.5-0\.5b)"
gpu_sampler["shape"] = gpu_sampler["model"].str.extract(shape_names)[0]
gpu_sampler = gpu_sampler.drop_duplicates(["shape", "cuda_graph"])  # the first pass
wide = gpu_sampler.pivot(index="shape", columns="cuda_graph")
graph_table = pd.DataFrame({
    "parameters (M)": wide[("params", True)] / 1e6,
    "generate (tok/s)": wide[("generate_tok_s", True)],
    "eager fast (tok/s)": wide[("sampler_tok_s", False)],
    "CUDA graph (tok/s)": wide[("sampler_tok_s", True)],
    "floor (tok/s)": wide[("floor_tok_s", True)]}).loc[["tiny", "small",
                                                        "qwen2.5-0.5b"]]
graph_table["graph vs generate"] = (graph_table["CUDA graph (tok/s)"]
                                    / graph_table["generate (tok/s)"])
graph_table["graph vs eager"] = (wide[("ratio", True)]  # each against generate
                                 / wide[("ratio", False)])  # in its own run
graph_table["time / floor"] = (graph_table["floor (tok/s)"]
                               / graph_table["CUDA graph (tok/s)"])
print(f"{gpu_sampler['device'].iloc[0]}, {gpu_sampler['date'].iloc[0]}, torch "
      f"{gpu_sampler['torch'].iloc[0]}, bfloat16, 64 rows x 128 tokens")
graph_table.style.format("{:,.1f}")

# %%
g = graph_table
say(f"With the graph the sampler writes {g['graph vs generate'].min():.1f} to "
    f"{g['graph vs generate'].max():.1f} times as many tokens per second as "
    f"`generate`, and {g['graph vs eager'].min():.1f} to "
    f"{g['graph vs eager'].max():.1f} times as many as the same step without the "
    f"graph (each measured against `generate` in its own run). For the Qwen2.5-0.5B "
    f"shape it is "
    f"{g.loc['qwen2.5-0.5b', 'time / floor']:.1f} times the weight-read floor, and "
    f"for the tiny model {g.loc['tiny', 'time / floor']:.0f} times. What is left is "
    "each step's count of small kernels, each one lasting a few microseconds even "
    "when it reads almost nothing. Fusing them into fewer kernels would take it "
    "further.")

# %% [markdown]
# Whole steps on the same GPU, against TRL 1.16 in the same process, on the benchmark's
# step (8 prompts × G = 8, 64 tokens, bfloat16, drawing by inverse CDF, the default
# then). The last row is one step of chapter 21's recipe for Qwen2.5-0.5B (16 prompts ×
# 8 completions × 512 tokens, micro-batches of 16), made on the same machine with ours
# only:

# %%
after = h100[h100["cuda_graph"].notna()].set_index("model")
after[["prompts", "length", "ours_s", "ours_gen_s", "ours_update_s", "trl_s",
       "trl_gen_s", "trl_over_ours", "peak_gpu_gib"]]

# %%
tiny_row = after.loc["random tiny Qwen2"]
say(f"TRL's step takes {tiny_row['trl_over_ours']:.2f} times as long as ours for the "
    f"tiny model and "
    f"{after.loc['random Qwen2 of the small shape', 'trl_over_ours']:.2f} times for "
    f"the small one. The whole gain is in generation "
    f"({tiny_row['trl_gen_s']:.3f} s against {tiny_row['ours_gen_s']:.3f} s). The "
    f"update takes as long as TRL's ({tiny_row['ours_update_s']:.3f} s and "
    f"{tiny_row['trl_update_s']:.3f} s) and is now most of the step: its kernels are "
    "still launched one by one.")

# %% [markdown]
# Chapter 7's run on the same H100, in float32, with the fast rollout (drawing by
# inverse CDF, the default then) and with the `transformers` rollout, seeds 0 and 1. The
# four runs were made one after another from the command line, with nothing else on the
# machine (their `README.md` has the command):

# %%
gpu_ch07 = {engine: load_seeds(f"ch07_{engine}", device="h100")
            for engine in ("transformers", "fast_graph")}
gpu_ch07_table = pd.DataFrame([
    {"rollout": engine, "seed": seed, "strict accuracy": acc,
     "steps (s)": run.metrics["time_step"].sum(),
     "generation (s)": run.metrics["time_generate"].sum(),
     "update (s)": run.metrics["time_update"].sum()}
    for engine, runs in gpu_ch07.items()
    for seed, (run, acc) in enumerate(zip(runs, final_eval(runs)))])
gpu_ch07_table

# %%
by = gpu_ch07_table.groupby("rollout").sum(numeric_only=True)
acc = gpu_ch07_table.groupby("rollout")["strict accuracy"]
say(f"The fast rollout cut the steps' time from "
    f"{by.loc['transformers', 'steps (s)']:.0f} s to "
    f"{by.loc['fast_graph', 'steps (s)']:.0f} s for both seeds together, and "
    f"generation from {by.loc['transformers', 'generation (s)']:.0f} s to "
    f"{by.loc['fast_graph', 'generation (s)']:.0f} s. Held-out strict accuracy was "
    f"{mean_range(acc.get_group('fast_graph'))} with it and "
    f"{mean_range(acc.get_group('transformers'))} without it. Two seeds a side "
    "cannot say whether the gap is the engine's; on the CPU, 24 seeds a side traced "
    "such gaps to the random numbers each run drew, not to the draw.")

# %% [markdown]
# (ch19-graph-multinomial)=
# ### The default draw in the graph
#
# The trainer's default draw is `torch.multinomial`'s, the one chapter 7 trains with.
# With one sample, `torch.multinomial` runs the race of `sample_race`: it fills a
# tensor the shape of the probabilities with `exponential_` from its generator,
# divides the probabilities by it and takes the argmax. A graph can do the same with
# the random numbers moved out of it. Before each replay the loop fills a $[b, V]$
# buffer with `exponential_` from the same generator, and the step does the division
# and the argmax (`sample_multinomial` given `e`). The generator is used exactly as
# `torch.multinomial` uses it, so the tokens are `torch.multinomial`'s, bit for bit;
# `tests/test_graph_decode.py` checks this on a CPU and on a CUDA device. The
# replayable step with this draw against the eager loop, from the same seed:

# %%
multi_eager = generate(ours, tok, prompts[:4], decode_fn=functools.partial(
    decode_fast, sampler="multinomial", cuda_graph=False), **check_kwargs)
multi_graph = generate(ours, tok, prompts[:4], decode_fn=functools.partial(
    decode_graphed, capture=P.device == "cuda", sampler="multinomial"), **check_kwargs)
multi_gap = (multi_graph.sampler_logprobs - multi_eager.sampler_logprobs).abs().max()
print(f"captured: {P.device == 'cuda'}; same tokens: "
      f"{torch.equal(multi_graph.completion_ids, multi_eager.completion_ids)}; "
      f"largest log-prob gap: {multi_gap.item():.1e}")

# %% [markdown]
# On one H200, with this draw, the sampler against `generate` (64 rows of 128 tokens,
# bfloat16, each row timed in its own run beside `generate`) and the benchmark's step
# against TRL 1.16 without and with the graph:

# %%
h200_sampler = sampler_bench[sampler_bench["device"].str.contains("H200", na=False)
                             & (sampler_bench["sampler"] == "multinomial")].copy()
h200_sampler["shape"] = h200_sampler["model"].str.extract(shape_names)[0]
# the first pass's row of each setting; later checks on an H200 append more rows
h200_sampler = h200_sampler.drop_duplicates(["shape", "cuda_graph"])
h200_sampler = h200_sampler.set_index(["shape", "cuda_graph"]).sort_index()
print(f"{h200_sampler['device'].iloc[0]}, {h200_sampler['date'].iloc[0]}, torch "
      f"{h200_sampler['torch'].iloc[0]}, multinomial draw")
display(h200_sampler[["sampler_tok_s", "generate_tok_s", "ratio",
                      "sampler_over_floor"]].style.format("{:,.1f}"))
h200 = bench[bench["machine"].str.contains("H200", na=False)
             & (bench["sampler"] == "multinomial")].drop_duplicates(
    ["model", "cuda_graph"])
h200[["model", "cuda_graph", "ours_s", "ours_gen_s", "ours_update_s", "trl_s",
      "trl_over_ours"]]

# %%
in_run = h200_sampler["ratio"]  # each run's sampler against its own generate
graphed_ratio = in_run.xs(True, level="cuda_graph")
tiny_steps = h200[h200["model"] == "random tiny Qwen2"].set_index("cuda_graph")
say(f"With the graph the multinomial draw writes "
    f"{in_run[('tiny', True)] / in_run[('tiny', False)]:.1f} times as many tokens per "
    f"second as without it for the tiny model and "
    f"{in_run[('qwen2.5-0.5b', True)] / in_run[('qwen2.5-0.5b', False)]:.1f} times "
    f"for the Qwen2.5-0.5B shape (each against `generate` in its own run), and "
    f"{graphed_ratio.min():.1f} to {graphed_ratio.max():.1f} "
    "times as many as `generate` measured in the same run. `generate` itself moved "
    f"between runs ({h200_sampler.loc['tiny', 'generate_tok_s'].min():,.0f} and "
    f"{h200_sampler.loc['tiny', 'generate_tok_s'].max():,.0f} tokens/s for the same "
    "model), which is why each ratio is taken inside one run. In the tiny model's "
    f"step, generation fell from {tiny_steps.loc[False, 'ours_gen_s']:.3f} s to "
    f"{tiny_steps.loc[True, 'ours_gen_s']:.3f} s and the whole step from "
    f"{tiny_steps.loc[False, 'ours_s']:.3f} s to "
    f"{tiny_steps.loc[True, 'ours_s']:.3f} s, "
    f"{tiny_steps.loc[False, 'ours_s'] / tiny_steps.loc[True, 'ours_s']:.2f} times as "
    f"fast, one run each. TRL's step took {tiny_steps.loc[False, 'trl_s']:.3f} s and "
    f"{tiny_steps.loc[True, 'trl_s']:.3f} s in the same two runs, so the ratio to TRL "
    f"went from {tiny_steps.loc[False, 'trl_over_ours']:.2f} to "
    f"{tiny_steps.loc[True, 'trl_over_ours']:.2f}: a factor "
    f"{tiny_steps.loc[False, 'ours_s'] / tiny_steps.loc[True, 'ours_s']:.2f} from our "
    f"step and {tiny_steps.loc[True, 'trl_s'] / tiny_steps.loc[False, 'trl_s']:.2f} "
    f"from TRL's, which moved between the runs.")

# %% [markdown]
# ## What to notice
#
# - The floor of a step is its FLOPs over the machine's matmul peak. For the tiny model
#   the update holds most of the FLOPs, but the rollout, made of many small steps,
#   runs further from its own floor, before the fast path and after it.
# - A small model's decode step pays a fixed cost per operator call, whatever the
#   call's size: on one row the calls are nearly the whole step, and they are a large
#   share of a 64-row step. Fusing projections, folding constants into the weights and
#   sampling with one random number per row remove a large share of the calls of
#   the `transformers` and scratch loops, and with them much of the 64-row step's
#   time (the counts and timings in {ref}`ch19-calls`), without changing the
#   function.
# - A group's $G$ completions share their prompt. Computing it once gives the same
#   function, to round-off, in the prefill and in the update.
# - The same product can run at very different rates depending on the library behind
#   it, the layout of its weight and the CPU. Measure the products of your own shapes
#   on your own machine: oneDNN with packed weights beat `torch.matmul` on one AMD
#   machine of `benchmarks/README.md`, matched it on another and lost to it on an
#   Intel one, so the library measures before it packs; in bfloat16 the formula's
#   attention beat the fused kernel in the backward pass.
# - Compiling fuses the small operators around the update's products, but
#   each compile is slow: the first call compiles for its shapes, and the first new
#   width compiles again, for widths in general. Count what the compiles cost against
#   what they save over the whole run, not per call.
# - A sampler and a trainer never compute exactly the same log-probs. Measure the gap
#   before correcting for it: here the importance weights that TRL applies for it
#   stay within a few percent of 1, even with a bfloat16 sampler.
# - A faster step must still train as well, and one seed cannot show that. Compare
#   many seeds of each path, and find the piece that moves a result by swapping one
#   piece at a time: here the decode step trained the standard run bit for bit, and
#   the difference entered with the sampler. Two more arms showed it was neither the
#   draw nor the streams: the standard draw on other numbers, and the trainer's own
#   streams on new seeds, trained as the other draws did, and the standard path on
#   those new seeds ended with them: the reference seeds had sat high. Swap one thing
#   at a time, the random numbers included, and run the reference on new seeds too.
#   The fast engine keeps the standard path's draw, with that draw's own random
#   numbers made faster: the same tokens in less time.
# - On a GPU a small model's decode step waits on kernel launches, not on arithmetic.
#   A CUDA graph replays the whole step with one launch, once everything that changes
#   between steps lives in tensors the step updates in place.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch19`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch19`.
#
# **19.1 — rotate_half as a matrix.** Write `my_rotate_half_matrix(d)`, the `[d, d]`
# matrix $R$ with `x @ R == rotate_half(x)` exactly.

# %%
from grpo_lib.exercises.ch19 import (check_draw, check_rotate_half_matrix,
                                     check_sequence_mask_weights)


def my_rotate_half_matrix(d):
    # your code here
    raise NotImplementedError


try:
    check_rotate_half_matrix(my_rotate_half_matrix)
except NotImplementedError:
    print("Not implemented yet: output column j of x @ R is sum_k x[k] R[k, j]; "
          "which single input does each output take, and with which sign?")

# %% [markdown]
# **19.2 — Inverse-CDF sampling.** Write `my_draw(probs, u)`: for probabilities
# `probs` `[B, V]` and uniform numbers `u` `[B]` in $[0, 1)$, the token
# $\min\{v : F_v > u\}$ of each row.

# %%
def my_draw(probs, u):
    # your code here
    raise NotImplementedError


try:
    check_draw(my_draw)
except NotImplementedError:
    print("Not implemented yet: cumulative sums, then the first one strictly above "
          "u; what happens to a token of probability 0?")

# %% [markdown]
# **19.3 — One weight per completion.** Write
# `my_sequence_mask_weights(trainer_logp, sampler_logp, mask, clip_max)`: TRL's
# default `sequence_mask` weights, `[B, 1]`.

# %%
def my_sequence_mask_weights(trainer_logp, sampler_logp, mask, clip_max):
    # your code here
    raise NotImplementedError


try:
    check_sequence_mask_weights(my_sequence_mask_weights)
except NotImplementedError:
    print("Not implemented yet: the log of a product is a sum; which tokens count, "
          "and what happens above the bound?")

# %% [markdown]
# **19.4 — Think.** (a) With prompts of 200 tokens and completions of 1,000, what
# share of the update does the prompt-once forward save at $G = 16$? (b) Why does the
# fast step's inverse-CDF draw not reproduce a seeded run of the `transformers` engine,
# and why does `rollout_sampler="multinomial"` reproduce it? (c) With a bfloat16
# sampler and a float32 trainer, why can the per-completion weight pass TRL's bound
# of 3 when no token's weight comes near it? (d) The inverse-CDF and the multinomial
# draw give every token its probability, yet chapter 7's runs trained differently
# with them. Name two explanations and an experiment that tells them apart. What does
# {ref}`ch19-other-numbers` settle, and what does it leave open?
