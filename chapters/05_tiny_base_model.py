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
# (ch05)=
# # A tiny Qwen2 base model
#
# *A tokenizer, a chat template, a corpus with designed flaws, pretraining, and the
# harness that judges every number from here on.*
#
# GRPO needs a model that is *sometimes* right. DeepSeek started R1-Zero from
# DeepSeek-V3-Base {cite}`deepseekai2025r1`; TRL's examples start from
# `Qwen/Qwen2.5-0.5B-Instruct` {cite}`vonwerra2020trl`. The book runs offline and
# downloads no model, so it builds its own base model: a
# `transformers.Qwen2ForCausalLM` with about a million parameters, pretrained from
# scratch on a synthetic arithmetic corpus ({ref}`ch05-pretraining` gives how long
# that takes on a GPU and on a two-core CPU).
#
# The corpus is not clean on purpose. Each flaw below is a problem the R1 pipeline is
# known to fix, planted so that a later chapter has something real to repair:
#
# - **Left-to-right evaluation**, `2 + 3 * 4 -> 2 + 3 = 5, 5 * 4 = 20`: RL on the
#   accuracy reward in {doc}`07_full_loop`.
# - **Broken format**, no `<think>`/`<answer>` tags: the format reward of
#   {doc}`07_full_loop`.
# - **Chinese step words in English reasoning**, `首先 3 * 4 = 12`: the
#   language-consistency reward of {doc}`03_rule_rewards`, trained with in
#   {doc}`11_language_consistency`.
# - **Rambling repetition**, a step written three to five times:
#   {ref}`ch09-repetition`.
# - **A few self-corrections**, `Wait, * comes before + ...`: the "aha moment",
#   {doc}`15_test_time_scaling`.
#
# Everything here is one setting away from a real model:
# `load_model_and_tokenizer("Qwen/Qwen2.5-0.5B-Instruct")` goes through the same code
# where a hub (or a local copy) is available.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers

from grpo_lib import evaluate, evaluation
from grpo_lib.corpus import (BEHAVIOURS, CorpusMix, choose_behaviour, render_response,
                             sample_documents)
from grpo_lib.display import say, show_source
from grpo_lib.models import (build_tokenizer, count_parameters,
                             load_model_and_tokenizer, model_config)
from grpo_lib.pretrain import PretrainConfig, bf16_autocast_supported, pretrain
from grpo_lib.profiles import profile
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import Difficulty, make_problems, read_rows, solve_steps

transformers.utils.logging.disable_progress_bar()
P = profile()
ROOT = Path.cwd().parent if Path.cwd().name == "chapters" else Path.cwd()
BASE = ROOT / "data" / "models" / "tiny-qwen2-base"
print(P)

# %% [markdown]
# ## The tokenizer
#
# Qwen2's tokenizer {cite}`yang2024qwen2` is a byte-level BPE whose pre-tokenizer puts
# **every digit in its own token** (so `123` is `1`, `2`, `3` and arithmetic is done
# digit by digit), with special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`
# and a ChatML chat template. Ours is the same design with a 512-token vocabulary
# learned from the book's corpus.

# %%
show_source(build_tokenizer)

# %%
# NBVAL_CHECK_OUTPUT
tokenizer = build_tokenizer()
text = "What is 123 + 4?"
ids = tokenizer(text)["input_ids"]
print(len(tokenizer), "tokens in the vocabulary")
print([tokenizer.decode([i]) for i in ids])
print("round trip:", tokenizer.decode(ids) == text)
print("eos:", tokenizer.eos_token, "| pad:", tokenizer.pad_token,
      "| padding side:", tokenizer.padding_side)

# %% [markdown]
# The chat template wraps each turn in `<|im_start|>role ... <|im_end|>`;
# `add_generation_prompt=True` opens the assistant's turn, which is where a completion
# starts. (Qwen2.5's own template also inserts a default system prompt; ours renders a
# system message only when one is given.)

# %%
# NBVAL_CHECK_OUTPUT
messages = [{"role": "user", "content": "What is 2 + 3 * 4?"}]
print(tokenizer.apply_chat_template(messages, tokenize=False,
                                    add_generation_prompt=True))

# %% [markdown]
# ## The task
#
# Integer expressions with `+`, `-`, `*` and at most one pair of parentheses, 2 to 4
# operands from 1 to 9, every intermediate value between 0 and 99 under *both*
# evaluation orders (so the mistakes are small numbers too). A problem's reference
# solution reduces the expression one operation at a time, parentheses first, then
# `*`, then left to right:

# %%
# NBVAL_CHECK_OUTPUT
for q in ["2 + 3 * 4", "(2 + 3) * 4 - 5"]:
    print(q)
    for a, op, b, value, rest in solve_steps(q):
        print(f"   {a} {op} {b} = {value:<3} -> {rest}")
    print("   left to right:", [s[3] for s in solve_steps(q, precedence=False)][-1])

# %% [markdown]
# The book's splits (`python -m grpo_lib make-data`) hold training and held-out
# problems with no question in both (the sizes are printed below); the generator
# over-samples problems where precedence matters, since those are where the planted
# mistake shows.

# %%
# NBVAL_CHECK_OUTPUT
train, test = read_rows("train"), read_rows("test")
overlap = {r["question"] for r in train} & {r["question"] for r in test}
print(f"train {len(train)} | test {len(test)} | shared questions {len(overlap)}")
stats = pd.DataFrame(test).assign(subtraction=lambda d: d.question.str.contains("-"))
summary = pd.DataFrame({
    "share of test problems": [
        stats.precedence_matters.mean(), stats.has_parens.mean(),
        (stats.num_operands == 2).mean(), stats.subtraction.mean()]},
    index=["precedence matters", "parentheses", "2 operands", "has a subtraction"])
print(summary.round(3).to_string())

# %% [markdown]
# ## The corpus and its designed flaws
#
# A flaw spread uniformly over the corpus at, say, 20% would be invisible to greedy
# decoding, which always follows the most likely path. So each flaw has a *trigger*, a
# visible feature of the problem that makes it the likely path there:

# %%
show_source(choose_behaviour)

# %%
# NBVAL_CHECK_OUTPUT
mix = CorpusMix()
print(json.dumps(mix.__dict__, indent=1))

# %% [markdown]
# Here is every behaviour, written for one problem (`render_response` is the only place
# the corpus's text is produced):

# %%
# NBVAL_CHECK_OUTPUT
problem = next(p for p in make_problems(200, seed=3) if p.precedence_matters)
rng = random.Random(0)
print("question:", problem.question, "| answer:", problem.answer)
for behaviour in BEHAVIOURS:
    print(f"{behaviour:>16}: {render_response(problem, behaviour, rng)}")

# %%
# NBVAL_CHECK_OUTPUT
problems = make_problems(2000, seed=7)
docs = sample_documents(problems, 10_000, seed=0)
shares = pd.Series(Counter(d["behaviour"] for d in docs)).sort_values() / len(docs)
print(shares.round(3).to_string())

# %%
fig, ax = plt.subplots(figsize=(7, 3))
shares.plot.barh(ax=ax, color="tab:blue")
ax.set_xlabel("share of 10,000 corpus documents")
ax.set_title("What the base model reads")
plt.tight_layout()
plt.show()

# %% [markdown]
# (ch05-pretraining)=
# ## Pretraining
#
# `python -m grpo_lib pretrain --size tiny` runs a plain causal-LM loop (AdamW, linear
# warm-up then cosine decay, bf16 autocast on a GPU or on a CPU with native bf16,
# batches of documents of similar length) and writes a folder that
# `AutoModelForCausalLM` loads offline, with a model card. The book's base model
# (`data/models/tiny-qwen2-base`) was trained with that command on a GPU; the same
# recipe was run once more on a two-core CPU, and that run's log and card, without its
# weights, are stored in `data/runs/pretrain_tiny_cpu`. The two cards:

# %%
CPU_RUN = ROOT / "data" / "runs" / "pretrain_tiny_cpu"
runs = {"book's base model": BASE, "same recipe on a CPU": CPU_RUN}
infos = {name: json.loads((folder / "pretrain_info.json").read_text())
         for name, folder in runs.items()}
cards = pd.DataFrame({name: {k: i[k] for k in (
    "device", "torch_threads", "parameters", "steps", "batch_size", "tokens_seen",
    "wall_time_s", "final_loss_mean_last_50")} for name, i in infos.items()})
print(cards.to_string())
print(json.dumps(infos["book's base model"]["model_config"]))

# %%
gpu_info, cpu_info = infos["book's base model"], infos["same recipe on a CPU"]
say(f"Pretraining the book's base model took {gpu_info['wall_time_s']:.0f} s "
    f"({gpu_info['wall_time_s'] / 60:.1f} min) on an {gpu_info['device']}; the same "
    f"{cpu_info['steps']} steps of {cpu_info['batch_size']} documents took "
    f"{cpu_info['wall_time_s']:.0f} s ({cpu_info['wall_time_s'] / 60:.1f} min) on a "
    f"CPU with {cpu_info['torch_threads']} threads and ended at the same loss "
    f"({cpu_info['final_loss_mean_last_50']:.4f} against "
    f"{gpu_info['final_loss_mean_last_50']:.4f}, the mean of the last 50 steps).")

# %% [markdown]
# Below, this notebook pretrains **live** with a shortened schedule so that you see the
# loop run on your device: the `smoke` profile takes a few steps of the `micro` size,
# the `cpu` profile a few hundred steps of the `tiny` size with half the batch (it will
# not reach the base model's quality), the `gpu` profile the full `tiny` recipe.
# The cell prints how long it took.

# %%
# NBVAL_IGNORE_OUTPUT
live = PretrainConfig(size=P.pick(smoke="micro", cpu="tiny", gpu="tiny"),
                      steps=P.pick(smoke=10, cpu=400, gpu=3000),
                      batch_size=P.pick(smoke=8, cpu=32, gpu=64),
                      device=P.device, log_every=10, progress=False)
live_dir = Path(tempfile.mkdtemp()) / "live-base"
t0 = time.perf_counter()
pretrain(live, live_dir, eval_n=0)
live_seconds = time.perf_counter() - t0
print(f"live pretraining: {live.steps} steps x {live.batch_size} documents in "
      f"{live_seconds:.0f} s on {P.device}")
print(pd.read_csv(live_dir / "pretrain_log.csv").iloc[:: max(1, live.steps // 50)]
      .to_string(index=False))

# %%
base_log = pd.read_csv(BASE / "pretrain_log.csv")
cpu_log = pd.read_csv(CPU_RUN / "pretrain_log.csv")
live_log = pd.read_csv(live_dir / "pretrain_log.csv")
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.plot(base_log.tokens_seen, base_log.loss, label="the book's base model")
ax.plot(cpu_log.tokens_seen, cpu_log.loss, "--", label="same recipe on a CPU")
ax.plot(live_log.tokens_seen, live_log.loss, label=f"live run ({live.size})")
ax.set_xscale("log")
ax.set_xlabel("tokens seen")
ax.set_ylabel("loss")
ax.legend(fontsize=9)
plt.tight_layout()
plt.show()

# %%
live_info = json.loads((live_dir / "pretrain_info.json").read_text())
live_docs = live.steps * live.batch_size
full_docs = cpu_info["steps"] * cpu_info["batch_size"]
autocast = bf16_autocast_supported(torch.device(P.device))
say(f"The live run: {live.steps} steps of {live.batch_size} documents "
    f"({live_docs / full_docs:.0%} of the full recipe's documents) in "
    f"{live_seconds:.0f} s on {P.device}, "
    + ("with bf16 autocast" if autocast else "in float32 (this device has no native "
       "bf16)")
    + f". Its loss over the last {min(50, live.steps)} steps averages "
    f"{live_info['final_loss_mean_last_50']:.3f}, against "
    f"{gpu_info['final_loss_mean_last_50']:.3f} for the book's base model, so the "
    f"evaluation below uses the book's base model.")

# %% [markdown]
# ## The evaluation harness, and the base model's flaws in numbers
#
# `grpo_lib.evaluate` is the single judge of every before/after number in the book: it
# decodes the first `n` held-out problems greedily (and, optionally, `k` samples each
# at temperature 1) with the book's sampler, and scores every completion with the same
# parsers the rewards use. **Strict** accuracy reads the answer inside
# `<answer>...</answer>`; **lenient** accuracy takes the last number anywhere. After
# checking its arguments, the function (in `grpo_lib.evaluation`) reads:

# %%
show_source(evaluation.evaluate, start="rows = _rows(dataset, n)",
            end="return table\n")

# %%
# NBVAL_IGNORE_OUTPUT
model, tok = load_model_and_tokenizer(BASE, device=P.device)
print(f"{count_parameters(model):,} parameters")
test_ds = load_task_split("arithmetic", "test")
n_eval = P.pick(smoke=24, cpu=500, gpu=1000)
t0 = time.perf_counter()
table, samples = evaluate(model, tok, test_ds, n=n_eval, batch_size=128,
                          num_samples=P.pick(smoke=0, cpu=2, gpu=4),
                          return_samples=True)
print(f"evaluated {n_eval} problems in {time.perf_counter() - t0:.0f} s")
print(table.round(3).to_string())

# %% [markdown]
# The corpus was designed for a base model whose greedy answers leave room for RL to
# show an effect yet are sometimes right, and that shows the format and language flaws
# often enough to measure. The ranges it aims at, next to the greedy measurements:

# %%
# NBVAL_IGNORE_OUTPUT
greedy = table.loc["greedy"]
design = pd.DataFrame({
    "measured": [greedy.strict_acc, 1 - greedy.format_rate, greedy.lang_mix_rate],
    "designed range": ["25% to 75%", "at least 10%", "at least 10%"]},
    index=["strict accuracy", "format violations", "language-mixed"])
print(f"greedy decoding, n = {n_eval}:")
print(design.to_string(formatters={"measured": "{:.1%}".format}))

# %% [markdown]
# ### Each flaw, where its trigger fires
#
# Joining the greedy completions with the problems' features shows the design at
# work. Each flaw's trigger: precedence matters (for the left-to-right mistake),
# parentheses or two operands (for the broken format), a subtraction (for the Chinese
# step words).

# %%
# NBVAL_IGNORE_OUTPUT
g = samples[samples["mode"] == "greedy"].reset_index(drop=True)
feats = pd.DataFrame(test[:n_eval])
g = g.assign(precedence_matters=feats.precedence_matters,
             format_trigger=feats.has_parens | (feats.num_operands == 2),
             subtraction=feats.question.str.contains("-"))
by_trigger = pd.DataFrame({
    "strict accuracy": g.groupby("precedence_matters").correct.mean(),
    "format rate": g.groupby("format_trigger").formatted.mean(),
    "language-mixed": g.groupby("subtraction").lang_mixed.mean(),
}).rename(index={False: "trigger absent", True: "trigger present"})
print(by_trigger.round(3).to_string())

# %%
absent, present = by_trigger.loc["trigger absent"], by_trigger.loc["trigger present"]
say(f"Strict accuracy is {present['strict accuracy']:.2f} where precedence matters "
    f"against {absent['strict accuracy']:.2f} where it does not; the format rate is "
    f"{present['format rate']:.2f} on problems with parentheses or two operands "
    f"against {absent['format rate']:.2f} on the others; "
    f"{present['language-mixed']:.0%} of the completions for problems with a "
    f"subtraction mix in Chinese words, against {absent['language-mixed']:.0%} "
    f"of the others.")

# %% [markdown]
# And one completion of each kind, straight from the greedy run:

# %%
# NBVAL_IGNORE_OUTPUT
kinds = {
    "correct": g.correct & g.formatted,
    "left-to-right mistake": g.precedence_matters & ~g.correct & g.formatted,
    "format violation": ~g.formatted,
    "Chinese words": g.lang_mixed,
}
for name, mask in kinds.items():
    if mask.any():
        row = g[mask].iloc[0]
        print(f"[{name}] {row.question} = {row.answer}\n    {row.completion}")

# %% [markdown]
# ## What to notice
#
# The model is *sometimes* right, and sampling several answers finds a right one more
# often than a single answer does:

# %%
notice = (f"Greedy decoding is right (strict) on {greedy.strict_acc:.1%} of the "
          f"{n_eval} problems.")
if "sampled" in table.index:
    sampled = table.loc["sampled"]
    notice += (f" One sample at temperature 1 is right {sampled.strict_acc:.1%} of "
               f"the time, and at least one of {int(sampled.k)} samples is right on "
               f"{sampled.pass_at_k:.1%} of the problems (`pass_at_k`).")
    if sampled.strict_acc > greedy.strict_acc:
        notice += (f" Sampling beats greedy decoding here because where precedence "
                   f"matters, {mix.ltr_rate:.0%} of the corpus's answers "
                   f"(`CorpusMix.ltr_rate`) go left to right: that wrong path is the "
                   f"most likely one there, so greedy decoding takes it, while a "
                   f"sample sometimes escapes it.")
right_untagged = (g.lenient_correct & ~g.correct).mean()
notice += (f" Lenient accuracy ({greedy.lenient_acc:.1%}) is above strict because "
           f"{right_untagged:.1%} of the greedy completions end in the right number "
           f"without giving it inside `<answer>` tags: the format flaw, not the "
           f"arithmetic.")
if ("sampled" in table.index and greedy.repetition_rate == 0
        and greedy.self_correction_rate == 0):
    notice += (f" Greedy decoding never rambles or self-corrects; sampled completions "
               f"do ({sampled.repetition_rate:.1%} repetitive, "
               f"{sampled.self_correction_rate:.1%} self-correcting): each is a few "
               f"percent of the corpus, never the most likely path.")
say(notice)

# %% [markdown]
# The gap between one try and several is what GRPO exploits: sample a group, reward
# the good answers, shift probability towards them ({doc}`07_full_loop`).
#
# Each flaw is concentrated where its trigger fires, and a reward that checks the answer
# and the format gives a clean signal on both. Nothing in the reward of
# {doc}`07_full_loop` looks at the language, so language mixing should survive
# R1-Zero-style RL, as it did for DeepSeek-R1-Zero; DeepSeek-R1 added a
# language-consistency reward for that reason {cite}`deepseekai2025r1`.
# {doc}`03_rule_rewards` writes one, and {doc}`11_language_consistency` trains with
# it.
#
# ## Using a real model instead
#
# Where a hub (or a local copy of the weights) is reachable, the same calls run on a
# real checkpoint; the model is one setting:
#
# ```python
# model, tok = load_model_and_tokenizer("Qwen/Qwen2.5-0.5B-Instruct", device="cuda")
# table = evaluate(model, tok, load_task_split("arithmetic", "test"), n=500)
# ```
#
# ## Exercises
#
# 1. **A left-to-right evaluator.** Write `ltr(question: str) -> int` that evaluates
#    an expression strictly left to right but still respects parentheses — the base
#    model's mistake. `check_left_to_right` compares it with the library on a few
#    hundred problems.
# 2. **Where does precedence matter?** Write `precedence_matters(question) -> bool`
#    (True when left-to-right evaluation changes the answer).
#    `check_precedence_matters` tests it, including problems with parentheses.
#
# Solutions: {doc}`../book/solutions/ch05`.

# %%
from grpo_lib.exercises.ch05 import check_left_to_right, check_precedence_matters


def ltr(question: str) -> int:
    # your code here: evaluate left to right, parentheses first
    raise NotImplementedError


def precedence_matters(question: str) -> bool:
    # your code here
    raise NotImplementedError


for checker, attempt in [(check_left_to_right, ltr),
                         (check_precedence_matters, precedence_matters)]:
    try:
        checker(attempt)
    except NotImplementedError:
        print(f"{checker.__name__}: not attempted yet — fill in the function above.")
    except AssertionError as err:
        print(f"{checker.__name__}: {err}")
