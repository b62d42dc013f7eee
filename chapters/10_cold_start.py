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
# (ch10)=
# # Cold start: a little supervised data before RL
#
# {doc}`Chapter 7 <07_full_loop>` trained the tiny base model with GRPO and two rule
# rewards, and nothing else: DeepSeek-R1-Zero's recipe. It worked, and it left two
# flaws that the R1 report names for R1-Zero itself {cite}`deepseekai2025r1`: the
# reasoning is hard to read and mixes languages, and the first steps of RL from a base
# model are spent learning *how* to answer (the tags, the order of the steps) before
# the model can learn what to answer.
#
# DeepSeek-R1 is the answer to both. Its pipeline has four stages: this chapter and
# the next two build the first three on the tiny model, and {doc}`chapter 13
# <13_reward_model>` takes up the fourth. **Stage 1**, this chapter, is the
# **cold start** ({cite}`deepseekai2025r1`, section 2.3.1): before any RL, fine-tune
# the base model on a small set of good reasoning traces, so that RL starts from a
# model that already answers in a readable, consistent form. The report says how the
# data was gathered:
#
# - "thousands" of long chain-of-thought examples, not millions;
# - from several sources: few-shot prompting with a long chain of thought as the
#   example; prompting a model directly for detailed answers with reflection and
#   verification; R1-Zero's own outputs, kept where they were readable; and human
#   annotators post-processing the results;
# - in a fixed, readable output format,
#   `|special_token|<reasoning_process>|special_token|<summary>`: the reasoning, then
#   a summary of it, and responses that are not reader-friendly filtered out.
#
# The report credits the cold start with two things: readability, and a better
# starting point ("potential") for the reasoning RL that follows. This chapter builds
# two of those sources for arithmetic, fine-tunes the base model on each, measures what
# the fine-tuning changed with the harness of {doc}`chapter 5 <05_tiny_base_model>`,
# and then runs chapter 7's GRPO from the cold-start model instead of the base model.
# The output format stays the one the rewards read,
# `<think> ... </think> <answer> ... </answer>`: the answer block plays the part of the
# summary.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import json
import re
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib import evaluate
from grpo_lib.display import say, show_source
from grpo_lib.logprobs import assistant_mask
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.profiles import profile
from grpo_lib.rejection import sample_candidates
from grpo_lib.safe_math import safe_eval
from grpo_lib.sft import (SFTConfig, SFTTrainer, collate, prepare_dataset, sft_loss,
                          tokenize_conversation)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.tasks.cold_start import annotate, normalize_trace, r1_zero_rows

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 100)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

ROOT = DATA_DIR.parents[1]  # the repository root
MODELS, RUNS = ROOT / "data" / "models", ROOT / "data" / "runs"
COLD_DATA = ROOT / "data" / "cold_start"
N_EVAL = P.pick(smoke=20, cpu=500, gpu=500)  # held-out problems for the harness
MAX_NEW = 128  # the cold-start traces are longer than the base model's answers
test_set = load_task_split("arithmetic", "test")
base, tok = load_model_and_tokenizer(MODELS / "tiny-qwen2-base", device=P.device)
r1_zero, _ = load_model_and_tokenizer(MODELS / "tiny-qwen2-r1-zero", device=P.device)
print(f"{N_EVAL} held-out problems, greedy, at most {MAX_NEW} new tokens")

# %% [markdown]
# (ch10-why)=
# ## What R1-Zero left behind
#
# `data/models/tiny-qwen2-r1-zero` is chapter 7's R1-Zero configuration run to the
# end from the base model (150 steps, seed 0), exported with its model card. Its run
# evaluated the held-out problems every 25 steps:

# %%
# NBVAL_IGNORE_OUTPUT
r1z_run = pd.read_csv(RUNS / "ch11_base_acc_seed0_cpu" / "eval.csv")
r1z_run[["step", "strict_acc", "format_rate", "lang_mix_rate", "mean_length"]]

# %%
# NBVAL_IGNORE_OUTPUT
first_90 = r1z_run.loc[r1z_run.strict_acc >= 0.9, "step"].min()
say(f"The base model starts at strict accuracy {r1z_run.strict_acc.iloc[0]:.3f} with "
    f"{r1z_run.format_rate.iloc[0]:.0%} of its answers well formatted; R1-Zero first "
    f"passes 0.9 at the evaluation of step {first_90} and ends at "
    f"{r1z_run.strict_acc.iloc[-1]:.3f}. Its language-mixed rate goes from "
    f"{r1z_run.lang_mix_rate.iloc[0]:.3f} to {r1z_run.lang_mix_rate.iloc[-1]:.3f} "
    f"(peak {r1z_run.lang_mix_rate.max():.3f}): the rewards never look at the "
    f"language, and in this run RL made the mixing more common, not less (a second "
    f"seed, in the last section of this chapter, shows that where it ends is left to "
    f"chance).")

# %% [markdown]
# What a mixed answer looks like, from the exported model on the held-out problems:

# %%
# NBVAL_IGNORE_OUTPUT
r1z_table, r1z_samples = evaluate(r1_zero, tok, test_set, n=N_EVAL,
                                  max_new_tokens=MAX_NEW, return_samples=True)
mixed = r1z_samples[r1z_samples.lang_mixed]
print(f"{len(mixed)} of {len(r1z_samples)} greedy answers mix in Chinese, "
      f"{int(mixed.correct.sum())} of them correct; two of them:")
for _, row in mixed.head(2).iterrows():
    print(f"  {row.question} = {row.answer}\n    {row.completion}")

# %% [markdown]
# The Chinese traces are not a different way of computing: the model writes the same
# steps and swaps the English connectives ("First", "now", "Then", "Finally") for
# Chinese ones, a habit of the pretraining corpus ({doc}`chapter 5
# <05_tiny_base_model>`) that the accuracy reward pays for as long as the answer is
# right.
#
# (ch10-sources)=
# ## Two sources of cold-start data
#
# ### (a) A programmatic annotator
#
# The few-shot and "detailed answer with verification" sources of the R1 report need a
# strong model to write the traces. For arithmetic a program can write them:
# `annotate` states the rule that fixes the order of the steps, does every step
# (`a op b = value`, then what remains), stays in English, and ends with a check of
# the last step by its inverse operation. The rule sentence has a flaw: for a product
# alone (only `*`, no brackets) it is the sentence for + and -, which says nothing
# about the order of a product. The traces carry this flaw, and the models trained on
# them repeat it.

# %%
show_source(annotate)

# %%
# NBVAL_CHECK_OUTPUT
for question in ["2 + 3 * 4", "(7 + 8 - 4) - 3", "9 - 4"]:
    print(f"{question:>16}  {annotate(question)}")

# %% [markdown]
# The rule sentence and the step words use the operator symbols, not words: the tiny
# model's 512-token vocabulary spells a word such as "multiplication" letter by
# letter, and a short trace is easier to learn. `data/cold_start/annotator.jsonl` holds
# such conversations for problems of the training split, in TRL's conversational
# format (a `messages` column: the user's question, the assistant's trace), made by
# `python -m grpo_lib make-data --stage cold-start`:

# %%
annotator_rows = [json.loads(line) for line in
                  (COLD_DATA / "annotator.jsonl").read_text().splitlines()]
print(f"{len(annotator_rows):,} conversations; the first:")
print(json.dumps(annotator_rows[0]["messages"], indent=1))

# %% [markdown]
# ### (b) R1-Zero's own outputs, filtered
#
# The second source is the model we already have. Ask the R1-Zero model each of the
# same training questions $k = 4$ times (temperature 1, as in its training) and keep a
# sample only if it passes, in order:
#
# 1. **correct**: the answer inside `<answer>` tags is right (strict parsing);
# 2. **formatted**: exactly one think block and one answer block, nothing around them;
# 3. **single language**: no Chinese character in the text (the question is English);
# 4. **non-repetitive** and **not truncated**: no looping trace, no trace cut off at
#    the token limit;
# 5. **deduplicate**: one copy of each distinct text per question;
#
# then keep one sample per question (the first that survived, so no preference for
# short or long ones), and tidy it with `normalize_trace`. The tidy changes whitespace
# only: every run of spaces, tabs and newlines becomes one space, each tag gets one
# space inside it, the two blocks one space between them, and nothing stands before or
# after; a word, digit or symbol is never added, removed or moved. It refuses
# (`ValueError`) a text that is not well formatted, so it cannot make a broken answer
# look like a good one:

# %%
# NBVAL_CHECK_OUTPUT
messy = "<think>3 * 4 = 12,\n 2 +  12 = 14</think>\n<answer>14 </answer>"
print(repr(normalize_trace(messy)))
try:
    normalize_trace("3 * 4 = 12, so 14")
except ValueError as err:
    print("ValueError:", str(err)[:70], "...")

# %% [markdown]
# `r1_zero_rows` runs the chain on the scored samples of
# `grpo_lib.rejection.sample_candidates` and returns the conversations and a yield
# table. Here on a few questions, live:

# %%
# NBVAL_IGNORE_OUTPUT
N_LIVE = P.pick(smoke=4, cpu=100, gpu=400)
live_questions = [{"question": r["question"], "answer": r["answer"]}
                  for r in annotator_rows[:N_LIVE]]
t0 = time.perf_counter()
live_candidates = sample_candidates(r1_zero, tok, live_questions, k=4,
                                    max_new_tokens=96, seed=0)
live_rows, live_yields = r1_zero_rows(live_candidates)
print(f"{N_LIVE} questions x 4 samples in {time.perf_counter() - t0:.0f} s")
live_yields

# %% [markdown]
# The stored data set `data/cold_start/r1_zero.jsonl` is the same chain on all the
# annotator's questions, made by
# `python -m grpo_lib.tasks.cold_start r1-zero --model data/models/tiny-qwen2-r1-zero`,
# which also stored its yield table:

# %%
# NBVAL_IGNORE_OUTPUT
yields = pd.read_csv(COLD_DATA / "r1_zero_yield.csv", index_col="stage")
r1z_rows = [json.loads(line) for line in
            (COLD_DATA / "r1_zero.jsonl").read_text().splitlines()]
display(yields)
y = yields["kept / previous"]
say(f"Of {yields.kept['sampled']:,} samples, {y['correct']:.1%} are correct; of "
    f"those, {y['formatted']:.1%} are well formatted and {y['single_language']:.1%} "
    f"of the formatted ones are in one language. Deduplication keeps "
    f"{y['deduplicate']:.1%} of what is left: at temperature 1 the R1-Zero model "
    f"still writes the same trace most of the time. One trace per question leaves "
    f"{len(r1z_rows):,} conversations, for "
    f"{yields.kept['one_per_question'] / len(annotator_rows):.1%} of the questions; "
    f"the tidy changed {sum(r['normalized'] for r in r1z_rows)} of them (the sampler "
    f"decodes the tokenizer's own spacing, so there was little to tidy).")

# %% [markdown]
# A question that R1-Zero never answered right in one language is simply missing from
# source (b): the filters can only keep what the model already does well. The
# annotator has no such gap. Side by side, for the same questions:

# %%
by_question = {r["question"]: r["messages"][1]["content"] for r in r1z_rows}
for r in annotator_rows[:3]:
    print(f"{r['question']} = {r['answer']}")
    print(f"  (a) {r['messages'][1]['content']}")
    print(f"  (b) {by_question.get(r['question'], '(no trace kept)')}")

# %% [markdown]
# The R1-Zero traces do every step too (R1-Zero learned it from a corpus that shows
# steps), but state no rule and check nothing. A right final answer does not make every
# step right; the steps can be checked by evaluating each `a op b = c`:

# %%
# NBVAL_IGNORE_OUTPUT
STEP = re.compile(r"(-?\d+) ([-+*/]) (-?\d+) = (-?\d+)")


def wrong_steps(trace):
    """The equations `a op b = c` of a trace whose two sides differ."""
    return [m.group(0) for m in STEP.finditer(trace)
            if safe_eval(f"{m.group(1)} {m.group(2)} {m.group(3)}") != int(m.group(4))]


for name, rows in [("(a) annotator", annotator_rows), ("(b) R1-Zero", r1z_rows)]:
    traces = [r["messages"][1]["content"] for r in rows]
    bad = [t for t in traces if wrong_steps(t)]
    lengths = [len(tok(t)["input_ids"]) for t in traces]
    print(f"{name}: {len(traces):,} traces, median {np.median(lengths):.0f} tokens, "
          f"{len(bad)} with a wrong step" + (f", e.g. {bad[0]}" if bad else ""))
n_bad_b = sum(bool(wrong_steps(r["messages"][1]["content"])) for r in r1z_rows)
if n_bad_b:
    say(f"{n_bad_b} of the {len(r1z_rows):,} kept R1-Zero traces reach the right "
        f"answer through a wrong step: the answer filter cannot see them. A step "
        f"checker like `wrong_steps` would drop them; in R1 this is the kind of "
        f"error the human annotators were there to fix. They are left in the data "
        f"here, as the answer-only filters left them.")

# %% [markdown]
# (ch10-sft)=
# ## Supervised fine-tuning with an assistant-only loss
#
# SFT is next-token cross-entropy on the examples, with one choice that matters for
# chat data: **which tokens are targets**. The user's question is given, not something
# the model should learn to write, so with `assistant_only_loss=True` (TRL's name) only
# the assistant's tokens count. With $K_i$ the kept positions of example $i$ and $N$
# their number over the whole batch,
#
# $$
# \mathcal L_{\mathrm{SFT}}(\theta) = -\frac1N \sum_i \sum_{t \in K_i}
#   \log \pi_\theta(x_{i,t} \mid x_{i,<t}), \qquad N = \sum_i |K_i| .
# $$
#
# `grpo_lib.sft` finds the kept tokens with chapter 4's `assistant_mask` and turns the
# others into the label $-100$, which PyTorch's cross-entropy skips:

# %%
show_source(tokenize_conversation)
show_source(collate, start="for i, e in enumerate(examples):",
            end="labels[i, :n] = ids.masked_fill")
show_source(sft_loss, docstring=False)

# %% [markdown]
# A check you can verify by eye: the mask of one short conversation. Every token of
# the user's turn and of the role headers is 0; the assistant's text and its closing
# `<|im_end|>` (the model must learn to stop) are 1.

# %%
# NBVAL_CHECK_OUTPUT
talk = [{"role": "user", "content": "What is 2 + 3 * 4?"},
        {"role": "assistant", "content": annotate("2 + 3 * 4")}]
ids, mask = assistant_mask(tok, talk)  # [T], [T]
print("mask 0:", repr(tok.decode(ids[mask == 0])))
print("mask 1:", repr(tok.decode(ids[mask == 1])))
prompt_text = tok.apply_chat_template(talk[:1], tokenize=False,
                                      add_generation_prompt=True)
n_prompt = len(tok(prompt_text)["input_ids"])  # user turn + assistant header
print(f"{n_prompt} prompt tokens (user turn + assistant header), all 0:",
      bool((mask[:n_prompt] == 0).all()))
print("mask 1 = the assistant's text + <|im_end|>:",
      tok.decode(ids[mask == 1]) == talk[1]["content"] + "<|im_end|>")

# %% [markdown]
# And the loss: on a batch of three conversations, `sft_loss` must equal the
# cross-entropy computed by hand, one kept token at a time, from the base model's
# logits (position $t - 1$ predicts token $t$):

# %%
# NBVAL_CHECK_OUTPUT
cfg = SFTConfig(assistant_only_loss=True, max_length=256)
examples = prepare_dataset(annotator_rows[:3], tok, cfg, "check")
batch = collate(examples, tok.pad_token_id)
with torch.no_grad():
    logits = base(input_ids=batch["input_ids"].to(P.device),
                  attention_mask=batch["attention_mask"].to(P.device)
                  ).logits.float().cpu()  # [3, T, V]
n_kept = int((batch["labels"][:, 1:] != -100).sum())
library = sft_loss(logits, batch["labels"], n_kept)
by_hand, count = 0.0, 0
for i, e in enumerate(examples):
    for t, (token, kept) in enumerate(zip(e["input_ids"], e["keep"])):
        if kept:
            by_hand -= torch.log_softmax(logits[i, t - 1], -1)[token].item()
            count += 1
by_hand /= count
print(f"{count} kept tokens (the assistant's) of {batch['input_ids'].numel()} "
      f"positions in the padded batch")
print("sft_loss equals the hand cross-entropy (to 1e-5):",
      abs(library.item() - by_hand) < 1e-5)

# %%
# NBVAL_IGNORE_OUTPUT
say(f"Here both are {library.item():.4f} nats per kept token: the base model's "
    f"average surprise at an annotator trace, before any fine-tuning.")

# %% [markdown]
# (ch10-runs)=
# ## The SFT runs
#
# One recipe for both sources, `configs/cold_start_annotator.yaml`: the tiny base
# model, the assistant-only loss, batches of 16 conversations, AdamW at
# $\eta = 5 \times 10^{-4}$ with a cosine schedule, 3 epochs, seed 0.
# `configs/cold_start_r1_zero.yaml` is the same file with the other data; since 3
# epochs of fewer conversations are fewer steps, its run is shorter. The annotator run
# made `data/models/tiny-qwen2-cold-start`; both runs' logs are stored under
# `data/runs/` with their commands:

# %%
# NBVAL_IGNORE_OUTPUT
sft_runs = {"(a) annotator": RUNS / "cold_start_annotator_cpu",
            "(b) R1-Zero outputs": RUNS / "cold_start_r1_zero_cpu"}
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
summary = {}
for name, run in sft_runs.items():
    m, ev = pd.read_csv(run / "metrics.csv"), pd.read_csv(run / "eval.csv")
    line, = axes[0].plot(m.step, m.loss.rolling(10, min_periods=1).mean(), label=name)
    axes[1].plot(ev.step, ev.eval_loss, marker="o", ms=3, color=line.get_color())
    summary[name] = {"steps": int(m.step.max()),
                     "final train loss": m.loss.tail(25).mean(),
                     "final token accuracy": m.mean_token_accuracy.tail(25).mean(),
                     "held-out loss (annotator traces)": ev.eval_loss.iloc[-1]}
axes[0].set_title("training loss (10-step mean)", fontsize=10)
axes[1].set_title("loss on held-out annotator traces", fontsize=10)
for ax in axes:
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=9)
plt.show()
pd.DataFrame(summary).T

# %% [markdown]
# Both runs fit their own data almost perfectly (the final training loss and token
# accuracy in the table): the traces are short and regular. The right panel measures
# each model on *annotator* traces of held-out problems; for run (b) that is another
# source's style (a rule sentence, "So", a check it never saw), so its held-out loss
# stays near where it started while it fits its own traces: it measures the style,
# not the arithmetic. The harness below measures the arithmetic.
#
# A short SFT run, live, shows what the model learns first: a fraction of the
# logged run's 750 steps on the annotator's data, then the harness (`P.pick` sizes
# it).

# %%
# NBVAL_IGNORE_OUTPUT
LIVE_STEPS = P.pick(smoke=2, cpu=100, gpu=750)
live_dir = tempfile.mkdtemp(prefix="ch10_sft_")
student, _ = load_model_and_tokenizer(MODELS / "tiny-qwen2-base", device=P.device)
live_cfg = SFTConfig(assistant_only_loss=True, max_length=256,
                     per_device_train_batch_size=16, learning_rate=5e-4,
                     lr_scheduler_type="cosine", warmup_steps=10,
                     max_steps=LIVE_STEPS, seed=0, output_dir=live_dir,
                     logging_steps=0, progress_bar=False)
t0 = time.perf_counter()
SFTTrainer(student, tok, live_cfg, annotator_rows).train()
live_seconds = time.perf_counter() - t0
live_eval = evaluate(student, tok, test_set, n=N_EVAL, max_new_tokens=MAX_NEW)
print(f"{LIVE_STEPS} SFT steps in {live_seconds:.0f} s")
live_eval[["strict_acc", "format_rate", "lang_mix_rate", "mean_length"]]

# %%
# NBVAL_IGNORE_OUTPUT
live = live_eval.loc["greedy"]
base_strict = r1z_run.strict_acc.iloc[0]  # the base model, step 0 of the R1-Zero run
say(f"After {LIVE_STEPS} steps the model writes the annotator's form in "
    f"{live.format_rate:.1%} of its answers, with traces of {live.mean_length:.0f} "
    f"tokens on average and {live.lang_mix_rate:.1%} language mixing, while its "
    f"strict accuracy is {live.strict_acc:.3f} (the base model: {base_strict:.3f}). "
    + ("The form comes first: the model copies the rule sentence and the shape of "
       "the steps before it can do the arithmetic in that new shape, and for a while "
       "it is worse at arithmetic than the base model it started from. The full run "
       "below trains long enough for the content to catch up."
       if live.strict_acc < base_strict else
       "Form and arithmetic come together here."))

# %% [markdown]
# (ch10-harness)=
# ## Before and after: the harness
#
# The base model, R1-Zero, and the two SFT models, on the same held-out problems
# (greedy, at most 128 new tokens). The first three are evaluated here, live; the model
# of source (b) is not stored in `data/models/`, so its row is read from the scores
# its run stored (`data/runs/cold_start_r1_zero_cpu/harness.csv`, the same harness on
# the first 500 problems).

# %%
# NBVAL_IGNORE_OUTPUT
cold, _ = load_model_and_tokenizer(MODELS / "tiny-qwen2-cold-start", device=P.device)
t0 = time.perf_counter()
base_table, base_samples = evaluate(base, tok, test_set, n=N_EVAL,
                                    max_new_tokens=MAX_NEW, return_samples=True)
cold_table, cold_samples = evaluate(cold, tok, test_set, n=N_EVAL,
                                    max_new_tokens=MAX_NEW, return_samples=True)
print(f"two harness runs in {time.perf_counter() - t0:.0f} s")
stored_b = pd.read_csv(RUNS / "cold_start_r1_zero_cpu" / "harness.csv",
                       index_col="mode")
cols = ["strict_acc", "lenient_acc", "format_rate", "lang_mix_rate",
        "repetition_rate", "mean_length", "n"]
harness = pd.DataFrame({
    "base": base_table.loc["greedy", cols],
    "R1-Zero (GRPO from base)": r1z_table.loc["greedy", cols],
    "SFT on (a) annotator = cold start": cold_table.loc["greedy", cols],
    "SFT on (b) R1-Zero outputs (stored)": stored_b.loc["greedy", cols],
}).T
harness["n"] = harness["n"].astype(int)
harness

# %% [markdown]
# The model R1's pipeline continues from, `tiny-qwen2-cold-start`, against what a
# cold start has to deliver: every answer in the format, and (almost) no language
# mixing.

# %%
# NBVAL_IGNORE_OUTPUT
fmt, mix = cold_table.loc["greedy", "format_rate"], cold_table.loc["greedy",
                                                                  "lang_mix_rate"]
print(f"cold-start model on {N_EVAL} held-out problems (greedy, {MAX_NEW} tokens):")
print(f"  format rate          {fmt:.3f}   (required >= 0.99: "
      f"{'met' if fmt >= 0.99 else 'NOT met'})")
print(f"  language-mixed rate  {mix:.3f}   (required <= 0.02: "
      f"{'met' if mix <= 0.02 else 'NOT met'})")

# %%
# NBVAL_IGNORE_OUTPUT
h = harness
a_row, b_row, z_row = h.iloc[2], h.iloc[3], h.iloc[1]
n_b = int(b_row.n)


def more_or_fewer(diff, n):
    """ "9 more" / "3 fewer" / "as many" problems for an accuracy difference."""
    k = round(diff * n)
    return "as many" if k == 0 else f"{abs(k)} {'more' if k > 0 else 'fewer'}"


se = np.sqrt(a_row.strict_acc * (1 - a_row.strict_acc) / n_b)  # one standard error
say(f"Fine-tuning on the annotator's traces takes the base model from strict "
    f"accuracy {h.iloc[0].strict_acc:.3f} to {a_row.strict_acc:.3f} and from format "
    f"{h.iloc[0].format_rate:.3f} to {a_row.format_rate:.3f}, with a language-mixed "
    f"rate of {a_row.lang_mix_rate:.3f}; R1-Zero, after 150 steps of RL, is at "
    f"{z_row.strict_acc:.3f} strict and {z_row.lang_mix_rate:.3f} mixed. Source (b) "
    f"gives {b_row.strict_acc:.3f} strict, format {b_row.format_rate:.3f}, mixed "
    f"{b_row.lang_mix_rate:.3f}: the language filter removed the mixing from the data "
    f"and the fine-tuned model does not mix either. It answers "
    f"{more_or_fewer(b_row.strict_acc - z_row.strict_acc, n_b)} problems of {n_b} "
    f"correctly than R1-Zero, the model that wrote its traces, and "
    f"{more_or_fewer(b_row.strict_acc - a_row.strict_acc, n_b)} than the "
    f"annotator's model; one standard error of an accuracy near "
    f"{a_row.strict_acc:.2f} on {n_b} problems is {se:.3f}, so "
    + ("the two SFT models are not told apart by this evaluation. "
       if abs(b_row.strict_acc - a_row.strict_acc) < 2 * se else
       "the difference between the two SFT models is larger than the noise. ")
    + f"Source (b)'s traces are shorter (mean length "
    f"{b_row.mean_length:.1f} vs {a_row.mean_length:.1f} tokens: no rule sentence, "
    f"no check), and neither SFT model repeats itself (repetition "
    f"{b_row.repetition_rate:.3f} and {a_row.repetition_rate:.3f}).")

# %% [markdown]
# Source (b) is not R1-Zero's behaviour but the best of it: of four samples per
# question only a correct, English one was kept, so the fine-tuned model imitates
# R1-Zero *when it was right*. That is rejection sampling, the subject of a later
# stage of the R1 pipeline; here it comes with the filters. What source (b) cannot do
# is teach a question R1-Zero never got right, nor a habit R1-Zero does not have (the
# rule sentence, the check). The annotator, a program that knows the answer, can.
#
# The same question before and after the cold start, where the base model was wrong:

# %%
pairs = base_samples[["question", "answer", "completion", "correct"]].join(
    cold_samples[["completion", "correct"]].add_suffix("_cold"))
example = pairs[~pairs.correct & pairs.correct_cold].head(2)
for _, row in example.iterrows():
    print(f"{row.question} = {row.answer}\n  base:       {row.completion}\n"
          f"  cold start: {row.completion_cold}")

# %% [markdown]
# (ch10-grpo)=
# ## GRPO from the cold start vs GRPO from the base
#
# The report's second claim for the cold start is a better start for RL. Here is the
# experiment: chapter 7's GRPO configuration (`configs/r1_zero_arithmetic.yaml`:
# accuracy + 0.1 · format, $G = 8$, 16 prompts per step, $\beta = 0$, 150 steps,
# $\eta = 5 \times 10^{-4}$ with a cosine schedule) from the base model (R1-Zero) and
# from the cold-start model, seeds 0 and 1 each. The cold-start runs get 128
# completion tokens instead of 96 for their longer traces, and a second pair of
# cold-start runs uses $\eta = 10^{-4}$. Each run evaluated the held-out problems
# (500, greedy) as it went; the logs are stored under `data/runs/`, each with its
# command in its `README.md`.

# %%
# NBVAL_IGNORE_OUTPUT
CONFIGS = {
    "from base, lr 5e-4 (R1-Zero)": "ch11_base_acc_seed{}_cpu",
    "cold start, lr 5e-4": "ch10_grpo_cold_start_seed{}_cpu",
    "cold start, lr 1e-4": "ch10_grpo_cold_start_lr1e-4_seed{}_cpu",
}
SEEDS = (0, 1)
evals = {(c, s): pd.read_csv(RUNS / p.format(s) / "eval.csv")
         for c, p in CONFIGS.items() for s in SEEDS}
metrics = {(c, s): pd.read_csv(RUNS / p.format(s) / "metrics.csv")
           for c, p in CONFIGS.items() for s in SEEDS}
SMOOTH = 10  # steps in the trailing mean of the training accuracy
colors = dict(zip(CONFIGS, ["tab:blue", "tab:red", "tab:green"]))
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), sharey=True,
                         constrained_layout=True)
for (c, s), ev in evals.items():
    style = dict(color=colors[c], ls="-" if s == 0 else "--")
    axes[0].plot(ev.step, ev.strict_acc, marker="o", ms=3,
                 label=c if s == 0 else None, **style)
    m = metrics[(c, s)]
    axes[1].plot(m.step, m.accuracy.rolling(SMOOTH).mean(), **style)
axes[0].set_title("held-out strict accuracy (greedy)", fontsize=10)
axes[1].set_title(f"training accuracy ({SMOOTH}-step mean)", fontsize=10)
for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("accuracy")
axes[0].legend(fontsize=9, loc="lower right")
fig.text(0.5, -0.04, "solid: seed 0, dashed: seed 1", ha="center", fontsize=9)
plt.show()

# %% [markdown]
# The training accuracy is that of the sampled completions (temperature 1), so it sits
# below the greedy held-out accuracy. The table reads the same logs: the held-out
# numbers at the start, at their lowest and at the end, the step at which each run
# first reaches a given accuracy, and the language mixing at the end.

# %%
# NBVAL_IGNORE_OUTPUT
TARGET_HELD_OUT, TARGET_TRAIN = 0.9, 0.85


def steps_to_reach(m, column, threshold, window):
    """First step whose trailing `window`-step mean of `column` is >= threshold."""
    smooth = m.sort_values("step")[column].rolling(window).mean()
    reached = m.sort_values("step").step[smooth >= threshold]
    return reached.iloc[0] if len(reached) else np.nan


rows = {}
for (c, s), ev in evals.items():
    hit = ev.loc[ev.strict_acc >= TARGET_HELD_OUT, "step"]
    rows[(c, s)] = {
        "held-out start": ev.strict_acc.iloc[0], "held-out min": ev.strict_acc.min(),
        "held-out final": ev.strict_acc.iloc[-1],
        f"first eval >= {TARGET_HELD_OUT}": hit.min() if len(hit) else np.nan,
        f"train acc >= {TARGET_TRAIN} (step)": steps_to_reach(
            metrics[(c, s)], "accuracy", TARGET_TRAIN, SMOOTH),
        "eval every": int(ev.step.diff().iloc[1]),
        "peak lang-mixed": ev.lang_mix_rate.max(),
        "final lang-mixed": ev.lang_mix_rate.iloc[-1],
        "final format": ev.format_rate.iloc[-1],
    }
grpo_table = pd.DataFrame(rows).T
grpo_table.index.names = ["run", "seed"]
grpo_table

# %%
# NBVAL_IGNORE_OUTPUT
g = grpo_table.groupby(level="run", sort=False)
mean, lo, hi = g.mean(), g.min(), g.max()


def seeds(run, column, fmt=".3f"):
    """The two seeds' values of a column: "0.944 in both seeds" or "0.818-0.820"."""
    a, b = lo.loc[run, column], hi.loc[run, column]
    return f"{a:{fmt}} in both seeds" if a == b else f"{a:{fmt}}-{b:{fmt}}"


base_c, hot_c, cool_c = CONFIGS
reach = f"train acc >= {TARGET_TRAIN} (step)"
cold_mix = hi.loc[[hot_c, cool_c], "peak lang-mixed"].max()
cold_words = ("none of their answers" if cold_mix == 0
              else f"at most {cold_mix:.3f} of their answers")
say(f"From the base model (R1-Zero) the held-out accuracy climbs from "
    f"{mean.loc[base_c, 'held-out start']:.3f} to "
    f"{seeds(base_c, 'held-out final')}, passing {TARGET_HELD_OUT} at the evaluation "
    f"of step {seeds(base_c, f'first eval >= {TARGET_HELD_OUT}', '.0f')}; its "
    f"smoothed training accuracy first reaches {TARGET_TRAIN} at step "
    f"{grpo_table.loc[(base_c, 0), reach]:.0f} in seed 0 and "
    f"{grpo_table.loc[(base_c, 1), reach]:.0f} in seed 1. Its "
    f"language-mixed rate rises in both seeds at first (peaks "
    f"{seeds(base_c, 'peak lang-mixed')}) and then goes where chance takes it: it "
    f"ends at {seeds(base_c, 'final lang-mixed')}. No reward looks at the language, "
    f"so whether the English or the Chinese way of writing the same steps wins is "
    f"decided by which happened to be rewarded more often along the way. The "
    f"cold-start model starts where R1-Zero ends "
    f"({mean.loc[hot_c, 'held-out start']:.3f}, past {TARGET_HELD_OUT} before its "
    f"first RL step), and at the same learning rate GRPO "
    f"**loses** much of it: the held-out accuracy drops to "
    f"{seeds(hot_c, 'held-out min')} and ends at {seeds(hot_c, 'held-out final')}, "
    f"below R1-Zero. At $\\eta = 10^{{-4}}$ it keeps it "
    f"({seeds(cool_c, 'held-out final')} at the end). The cold-start runs mix "
    f"languages in {cold_words} at every evaluation.")

# %% [markdown]
# ### Why the cold start loses its accuracy at $\eta = 5 \times 10^{-4}$
#
# The first steps of the cold-start runs show what happens. Columns of `metrics.csv`,
# averaged over the two seeds: the training accuracy and the mean per-token entropy of
# the sampled completions (plotted), and in the table below them the gradient norm
# before clipping and the share of groups whose rewards are all equal.

# %%
# NBVAL_IGNORE_OUTPUT
EARLY = 20
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
early = {}
for c in CONFIGS:
    m = pd.concat([metrics[(c, s)].head(EARLY) for s in SEEDS]).groupby("step").mean()
    early[c] = m
    axes[0].plot(m.index, m.accuracy, color=colors[c], label=c)
    axes[1].plot(m.index, m.entropy, color=colors[c])
axes[0].set_title("training accuracy", fontsize=10)
axes[1].set_title("entropy (nats per token)", fontsize=10)
for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
fig.legend(fontsize=9, loc="outside lower center", ncol=3)
plt.show()
early_max_norm = max(metrics[k].grad_norm.head(EARLY).max() for k in metrics)
first5 = {c: m.head(5).mean() for c, m in early.items()}
last5 = {c: m.iloc[EARLY - 5:EARLY].mean() for c, m in early.items()}
pd.DataFrame({(c, when): d[["accuracy", "entropy", "grad_norm", "zero_std_frac"]]
              for when, src in [("steps 1-5", first5), (f"steps {EARLY - 4}-{EARLY}",
                                                         last5)]
              for c, d in src.items()}).T

# %%
# NBVAL_IGNORE_OUTPUT
say(f"Over the first {EARLY} steps, at $\\eta = 5 \\times 10^{{-4}}$ the cold-start "
    f"model's training accuracy falls from {first5[hot_c].accuracy:.3f} "
    f"(steps 1-5) to {last5[hot_c].accuracy:.3f} (steps {EARLY - 4}-{EARLY}) while "
    f"its entropy goes from {first5[hot_c].entropy:.3f} to "
    f"{last5[hot_c].entropy:.3f} nats per token; at $10^{{-4}}$ the accuracy stays at "
    f"{last5[cool_c].accuracy:.3f} and the entropy at {last5[cool_c].entropy:.3f}. "
    f"The gradient norm of that run grows from {first5[hot_c].grad_norm:.2f} to "
    f"{last5[hot_c].grad_norm:.2f} on average, and no run's goes above "
    f"{early_max_norm:.2f} in these steps, below the clipping threshold of 1: the "
    f"clip never acts. In the first steps {first5[hot_c].zero_std_frac:.0%} of the "
    f"cold-start groups have no reward variance at all.")

# %% [markdown]
# Three things combine, and the table above shows each of them. First, the
# cold-start model is sharp: its entropy is lower than the base model's and more of
# its groups are all right (`zero_std_frac`), so the groups that teach anything are
# mostly those with one or two wrong samples among right ones. Second, what such a
# group teaches is mostly "not this". Its advantages sum to zero: the right samples
# share a small positive advantage, the wrong one carries a large negative one. But
# the right samples are traces the model already writes with near-certainty, and the
# gradient of $\log\pi$ for a token of probability $p$ is $\mathbf e_{y} -
# \mathbf p$ in the logits, close to zero when $p$ is close to 1: the push-up on what
# the model already does barely moves anything. What is left is the push-down on the
# wrong sample, and a sharp model's wrong sample is made mostly of tokens it found
# likely (that is what sampling a sharp model gives). Lowering a likely token's logit
# hands its probability to the other tokens in proportion to theirs, which flattens the
# distribution, so the entropy rises; a push-down on a rare token would sharpen it
# instead {cite}`cui2025entropy`. In the base model's groups the right
# answers are not yet certain, both halves act, and the entropy falls. Third, Adam
# makes every step about $\eta$ per parameter whatever the size of the gradient, and
# the gradient norms stay below the clipping threshold, so nothing limits a step but
# $\eta$. At $5 \times 10^{-4}$, a step size chosen for a base model with everything
# to learn, the push-downs knock the sharp SFT solution off: answers it had right
# start to go wrong. At $10^{-4}$ the steps are five times smaller and the model stays
# where the SFT put it. The lesson is R1's own order of things: a cold start changes
# the starting point, and the RL stage after it needs settings for that starting
# point, not the ones tuned for a base model.

# %%
# NBVAL_IGNORE_OUTPUT
gain = mean.loc[cool_c, "held-out final"] - mean.loc[cool_c, "held-out start"]
say(f"On this task the cold start's better start is the starting accuracy itself: "
    f"at $\\eta = 10^{{-4}}$ RL changes the held-out accuracy by {gain:+.3f} on "
    f"average over 150 steps, so the annotator's traces already taught nearly all "
    f"there was to learn. The clearer gain is the language: the runs from the base "
    f"model mix languages in up to {hi.loc[base_c, 'peak lang-mixed']:.1%} of their "
    f"answers on the way and end at {seeds(base_c, 'final lang-mixed', '.1%')}, the "
    f"runs from the cold start in {cold_words}. The next chapter adds R1's "
    f"language-consistency reward to the RL stage.")

# %% [markdown]
# (ch10-summary)=
# ## Summary
#
# - DeepSeek-R1 begins with a **cold start**: SFT of the base model on thousands of
#   readable reasoning traces (few-shot and directly prompted traces, filtered R1-Zero
#   outputs, human post-processing), in one fixed output format.
# - Two sources here: (a) a programmatic annotator writes a readable, checked trace for
#   any problem; (b) R1-Zero's own samples, kept when correct, well formatted and in
#   one language, one per question, whitespace tidied. The yield table shows what each
#   filter removes; source (b) can only contain what R1-Zero already does well.
#   The same filters work on any model's answers: chapter 11 applies them to the base
#   model's own, a cold start that changes the model least, and shows what that does
#   to a habit that RL later meets ({ref}`ch11-self`).
# - SFT trains on the assistant's tokens only: the mask is 0 on every prompt token and
#   the loss is the plain cross-entropy over the kept tokens.
# - On the held-out problems, the cold-start model answers in the format and in one
#   language, with an accuracy R1-Zero needed 150 RL steps to approach.
# - GRPO from the cold start with the base model's learning rate breaks what the SFT
#   built; a five times smaller learning rate keeps it. Read the first steps' accuracy,
#   entropy and gradient norm to see which is happening.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch10`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch10`.
#
# **10.1 — The assistant mask, read off the tokens.** Write
# `my_assistant_mask(tokens)`: `tokens` is the list of token strings of a ChatML
# conversation, as `tok.convert_ids_to_tokens` gives them (`Ċ` is a newline, `Ġ` a
# space; a turn is `<|im_start|>` role newline content `<|im_end|>` newline). Return
# one 0/1 per token: 1 on the content of every assistant turn and on its
# `<|im_end|>`, 0 elsewhere.

# %%
from grpo_lib.exercises.ch10 import (check_assistant_mask, check_normalize_trace,
                                     check_steps_to_reach)

print(tok.convert_ids_to_tokens(ids[:20].tolist()))  # the start of the example above


def my_assistant_mask(tokens):
    # your code here
    raise NotImplementedError


try:
    check_assistant_mask(my_assistant_mask)
except NotImplementedError:
    print("Not implemented yet: the role is spelled by the tokens between "
          "<|im_start|> and the first newline after it; decide per turn, not per "
          "token.")

# %% [markdown]
# **10.2 — Normalise a trace.** Write `my_normalize_trace(text)` with the contract of
# {ref}`ch10-sources`: for a well-formatted trace, the text
# `<think> T </think> <answer> A </answer>` with the whitespace of `T` and `A`
# collapsed to single spaces; for anything else, raise `ValueError`.

# %%
def my_normalize_trace(text):
    # your code here
    raise NotImplementedError


try:
    check_normalize_trace(my_normalize_trace)
except NotImplementedError:
    print("Not implemented yet: check the format first (grpo_lib.parsing has a "
          "function for it), then rebuild the text from its two blocks.")

# %% [markdown]
# **10.3 — Steps to reach an accuracy.** Write
# `my_steps_to_reach(metrics, column, threshold, window)`: the first value of the
# `step` column at which the mean of `column` over the last `window` steps (that step
# included; only full windows) is at least `threshold`, or `None` if it never is.
# Then use it on the runs above: how does the answer for the base runs change with
# `window` = 1, 5 and 20?

# %%
def my_steps_to_reach(metrics, column, threshold, window):
    # your code here
    raise NotImplementedError


try:
    check_steps_to_reach(my_steps_to_reach)
    for window in (1, 5, 20):
        print(window, [my_steps_to_reach(metrics[(base_c, s)], "accuracy", 0.85,
                                         window) for s in SEEDS])
except NotImplementedError:
    print("Not implemented yet: pandas' rolling mean is a trailing window; think "
          "about what it returns before the window is full.")

# %% [markdown]
# **10.4 — Think.** (a) Explain, with the advantage formula and Adam's update rule,
# why a run that starts from a model that is right 90% of the time can get *worse*
# at a learning rate that made the base model better. Name three changes that would
# protect it. (b) The R1-Zero samples dropped by the language filter differ from the
# kept ones in a few words. What post-processing would recover them, and what must it
# never change? (c) Source (b) holds only traces the R1-Zero model wrote. Name one
# kind of problem on which SFT on (b) cannot beat R1-Zero however the filters are
# set, and say what source (a) has that (b) lacks.
