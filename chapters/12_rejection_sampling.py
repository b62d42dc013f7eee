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
# (ch12)=
# # Rejection sampling and SFT stage 2
#
# The reasoning-RL model of the last chapter solves arithmetic in tidy, English-only
# traces, and that is all it does. Ask it who it is, or to write 47 in words, and it
# answers with a `<think>` block. DeepSeek-R1's third stage turns such a model into
# something more general without any further RL, in two moves
# {cite}`deepseekai2025r1`:
#
# 1. **Rejection sampling.** The RL checkpoint is used as a *data generator*: it
#    answers each training prompt several times, and only the answers that are
#    correct and readable are kept. The RL model's skill becomes a data set.
# 2. **SFT stage 2.** That data set, mixed with *non-reasoning* data (writing,
#    factual QA, self-cognition, translation), fine-tunes **the base model** again,
#    not the RL checkpoint.
#
# This chapter runs both on the tiny model, reports how many samples each filter
# removes, and checks the claims that matter: does a model trained only by supervised
# fine-tuning on its predecessor's filtered answers reason as well as the RL model,
# without mixing languages, and does it pick up the non-reasoning skills besides? A
# **control** answers the question of what the filters themselves buy: the same
# amount of data, drawn at random from the same samples.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import math
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
import yaml
from IPython.display import display

from grpo_lib import rejection
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.plots import read_metrics
from grpo_lib.profiles import profile
from grpo_lib.rejection import (DEFAULT_FILTERS, FILTERS, apply_filters,
                                random_control, sample_candidates, score_candidates,
                                to_sft_rows)
from grpo_lib.sft import read_jsonl
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR
from grpo_lib.tasks.skills import (HELD_OUT, NEW_WORDS, NEW_WORDS_KEYS, SKILLS,
                                   TEMPLATES, evaluate_skills, make_skill_rows)

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 90)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
MODELS = REPO / "data" / "models"
RUNS = REPO / "data" / "runs"
REJECTION = REPO / "data" / "rejection"
BASE_DIR = MODELS / "tiny-qwen2-base"
RL_DIR = MODELS / "tiny-qwen2-reasoning-rl"  # chapter 11's final checkpoint
STAGE2_DIR = MODELS / "tiny-qwen2-stage2"
CONTROL_DIR = RUNS / "stage2_control_cpu" / "model"
train_set = load_task_split("arithmetic", "train")
test_set = load_task_split("arithmetic", "test")

# %% [markdown]
# ## The recipe
#
# DeepSeek-R1's pipeline has four stages: a cold start (SFT on a few thousand readable
# long chains of thought), reasoning-oriented RL with a language-consistency reward,
# the stage of this chapter, and a last round of RL for all scenarios. The third
# stage, as the R1 report describes it {cite}`deepseekai2025r1`:
#
# - **Reasoning data.** When the reasoning RL has converged, its checkpoint samples
#   several responses to each reasoning prompt ("multiple"; 16 per prompt is the
#   usual reading) and only the correct ones are kept. Correctness is judged by rules
#   where rules exist and, for some prompts, by DeepSeek-V3 as a generative reward
#   model comparing the answer with the ground truth. Chains of thought with mixed
#   languages, long paragraphs or code blocks are filtered out. About **600k**
#   reasoning samples remain.
# - **Non-reasoning data.** Writing, factual QA, self-cognition and translation,
#   partly reused from DeepSeek-V3's own SFT data: about **200k** samples.
# - **SFT.** DeepSeek-V3-Base, the *base* model, is fine-tuned on the ~800k samples
#   for two epochs. The result then goes on to the final RL stage.
#
# In symbols, with $\pi_{\mathrm{RL}}$ the reasoning-RL policy, $k$ samples per
# prompt and filters $f_1, \dots, f_m$ (each 1 = keep):
#
# $$
# \mathcal K = \operatorname{dedup}\Big\{(q, o) \;:\; q \in \mathcal Q_{\text{train}},\;
#   o \in \{o_1, \dots, o_k\} \sim \pi_{\mathrm{RL}}(\cdot \mid q),\;
#   \textstyle\prod_{j=1}^m f_j(q, o) = 1\Big\},
# $$
#
# $$
# \theta_2 = \operatorname{SFT}\big(\theta_{\text{base}};\;
#   \mathcal K \cup \mathcal D_{\text{non-reasoning}}\big),
# $$
#
# the SFT loss being the assistant-only cross-entropy of the cold start
# ({doc}`chapter 10 <10_cold_start>`). Here the same recipe runs at the tiny model's
# scale; the table is filled in from the data files and configuration this chapter
# uses.

# %%
kept_rows = read_jsonl(REJECTION / "kept.jsonl")
skill_rows = read_jsonl(REPO / "data" / "skills" / "train.jsonl")
stage2_config = yaml.safe_load((REPO / "configs" / "stage2_sft.yaml").read_text())
committed_yields = pd.read_csv(REJECTION / "yields.csv", index_col="stage")
K_SAMPLES = int(committed_yields.loc["sampled", "kept"]
                / committed_yields.loc["sampled", "prompts"])
recipe = pd.DataFrame({
    "DeepSeek-R1": ["reasoning-RL checkpoint", "multiple; the paper gives no count",
                    "correct (rules or a V3 judge), one language, no long "
                    "paragraphs or code", "~600k", "~200k: writing, factual QA, "
                    "self-cognition, translation", "DeepSeek-V3-Base, 2 epochs"],
    "this chapter": [
        RL_DIR.name, f"{K_SAMPLES}",
        "correct, formatted, one language, known words, true steps, no loop, "
        "not cut off, no copies",
        f"{len(kept_rows):,}",
        f"{len(skill_rows):,}: " + ", ".join(SKILLS),
        f"{BASE_DIR.name}, {stage2_config['num_train_epochs']} epochs"],
}, index=["samples from", "samples per prompt", "filters", "reasoning samples",
          "non-reasoning samples", "fine-tuned model"])
display(recipe)

# %% [markdown]
# Two choices in this recipe are worth a moment before any code.
#
# **Why filter the model's own answers?** The RL model is right most of the time but
# not always, and when it samples at temperature 1 it also writes the occasional
# broken or rambling trace. Fine-tuning on everything it writes would teach those
# too. Rejection sampling keeps the part of the model's output distribution that
# passed every check: a *better* teacher than the model itself, made from the model.
#
# **Why restart from the base model?** The RL checkpoint has been shaped by a long
# RL run, with whatever habits that left. Starting again from the base model with a
# curated data set gives a model defined by its data, and makes the data the thing
# that carries the knowledge: R1's 800k samples were later used, unchanged, to distil
# smaller Qwen and Llama models.

# %% [markdown]
# ## The filters
#
# `grpo_lib.rejection` scores each candidate with the evaluation harness
# ({doc}`chapter 5 <05_tiny_base_model>`), so "correct" means exactly what it means in
# every accuracy number of the book: the answer inside `<answer>…</answer>` equals
# the gold answer. Each filter maps the candidates still in play to a keep/drop
# column:

# %%
show_source(rejection, start="FILTERS: dict", end='"""Each filter')

# %% [markdown]
# Arithmetic traces have no paragraphs or code blocks, so R1's readability filters
# are translated for this task. A trace is unreadable here when it misspells or
# invents a word (`known_words`: every word must be one of the readable pattern the
# cold start taught), when a step it writes is false (`steps_check_out`: every
# `a op b = c` in the think block must hold, the arithmetic version of "the reasoning
# makes sense"), when it loops (`non_repetitive`) or when it runs out of tokens before
# the answer (`not_truncated`). The rule for true steps, and the pattern's words:

# %%
show_source(rejection.steps_check_out)
print(sorted(rejection.readable_words()))

# %% [markdown]
# `apply_filters` runs the filters in order, each on what the previous ones kept, and
# returns the survivors and a **yield table**:

# %%
show_source(apply_filters, docstring=False)

# %% [markdown]
# ### A check by hand
#
# Sixteen candidates for four prompts, four each, written so that every filter has
# something to remove. Read the list, predict the table, then run the cell.

# %%
# NBVAL_CHECK_OUTPUT
hand_rows = [{"question": "2 + 3 * 4", "answer": "14"},
             {"question": "5 - 1", "answer": "4"},
             {"question": "7 * 2", "answer": "14"},
             {"question": "9 - 3", "answer": "6"}]
one_step = "<think> One step. So 9 - 3 = 6. {check} </think> <answer> 6 </answer>"
hand = [  # (completion, tokens, ended with a stop token)
    ("<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>", 20, True),
    ("<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>", 20, True),
    ("<think> 3 * 4 = 12, 然后 2 + 12 = 14 </think> <answer> 14 </answer>", 22, True),
    ("<think> * comes before + and -. First 3 * 4 = 12, now 2 + 12. Then "
     "2 + 12 = 14. </think> <answer> 14 </answer>", 30, True),
    ("<think> 5 - 1 = 4 </think> <answer> 4 </answer>", 12, True),
    ("<think> 5 - 1 =  4 </think>\n<answer> 4 </answer>", 13, True),
    ("5 - 1 = 4 <answer> 4 </answer>", 10, True),
    ("<think> 5 - 1 = 4, 5 - 1 = 4, 5 - 1 = 4, 5 - 1 = 4 </think> "
     "<answer> 4 </answer>", 28, True),
    ("<think> 7 * 2 = 14 </think> <answer> 14 </answer>", 16, False),
    ("7 * 2 = 14", 8, True),
    ("<think> 7 * 2 = 9 </think> <answer> 9 </answer>", 14, True),
    ("", 1, True),
    (one_step.format(check="Cheheck: 6 + 3 = 9."), 24, True),
    (one_step.format(check="Check: 6 + 3 = 8."), 24, True),
    (one_step.format(check="Check: 6 3 = 9."), 23, True),
    (one_step.format(check="Check: 6 + 3 = 9."), 24, True),
]
texts, lengths, finished = zip(*hand)
hand_candidates = score_candidates(hand_rows, 4, texts, lengths=lengths,
                                   finished=finished)
hand_kept, hand_yields = apply_filters(hand_candidates)
print(hand_yields.round(3).to_string())
print("kept:", hand_kept["completion"].str.slice(0, 40).tolist())

# %% [markdown]
# Candidate by candidate: four of the sixteen are wrong or have no tagged answer
# (`20`, no `<answer>` at all, `9`, empty), so `correct` keeps 12; the untagged
# `5 - 1 = 4 <answer> 4 </answer>` fails `formatted`; the Chinese 然后 ("then") fails
# `single_language`; "Cheheck" fails `known_words`; `6 + 3 = 8` and `6 3 = 9` (an
# `=` with no operation before it) fail `steps_check_out`; the trace that says
# `5 - 1 = 4` four times fails `non_repetitive`; `7 * 2 = 14`, stopped by the token
# limit and not by a stop token, fails `not_truncated`; and `5 - 1 =  4` with a double
# space and a newline is a copy of the first `5 - 1` answer. Four samples survive;
# the third prompt has none left, which the `prompts` column shows. Each candidate is
# counted against the *first* filter that rejects it (the wrong, untagged
# `7 * 2 = 14` is not blamed again by `formatted`): exercise 12.3 computes these
# counts, and its solution says why the order matters.

# %% [markdown]
# (ch12-live)=
# ## Rejection sampling from the RL model, live
#
# The stored data set of this chapter was made by one command (`data/README.md`
# has it): the first training prompts, $k$ samples each at temperature 1 from chapter
# 11's final checkpoint, 128 new tokens at most. The cell below repeats the start of
# that pass, sized by the profile. With the same seed and batch size the sampler
# draws the same random numbers, so on the same kind of CPU these candidates are the
# first ones of the stored file.

# %%
N_LIVE = P.pick(smoke=4, cpu=64, gpu=256)
K_LIVE = P.pick(smoke=4, cpu=K_SAMPLES, gpu=K_SAMPLES)
rl_model, tok = load_model_and_tokenizer(RL_DIR, device=P.device)
live_rows = [dict(r) for r in train_set.select(range(N_LIVE))]
t0 = time.perf_counter()
live = sample_candidates(rl_model, tok, live_rows, K_LIVE, temperature=1.0,
                         max_new_tokens=128, batch_size=256, seed=0)
live_seconds = time.perf_counter() - t0
live_kept, live_yields = apply_filters(live)
print(f"{N_LIVE} prompts x k={K_LIVE} = {len(live)} candidates in "
      f"{live_seconds:.1f} s on {P.device}")
display(live_yields.round(3))

# %%
# NBVAL_IGNORE_OUTPUT
candidates = pd.read_csv(REJECTION / "candidates.csv.gz", keep_default_na=False,
                         dtype={"question": str, "answer": str, "completion": str})
if K_LIVE == K_SAMPLES:  # the same layout as the stored pass
    committed_start = candidates["completion"].head(len(live))
    agree = np.mean(committed_start.to_numpy() == live["completion"].to_numpy())
    say(f"Of the {len(live)} live candidates, a share {agree:.3f} are identical, "
        f"character for character, to the first {len(live)} of the stored file "
        f"(`data/rejection/candidates.csv.gz`).")

# %% [markdown]
# ## The full pass
#
# The stored pass is the same command on more prompts. Its yield table, and the
# same table recomputed here from the stored candidates (`apply_filters` on the
# scores in `candidates.csv.gz`), which must agree:

# %%
full_kept, full_yields = apply_filters(candidates)
display(committed_yields.round(3))
assert full_yields["kept"].tolist() == committed_yields["kept"].tolist()
n_prompts = int(committed_yields.loc["sampled", "prompts"])

# %%
fig, ax = plt.subplots(figsize=(7.3, 3.2), constrained_layout=True)
stages = committed_yields.index.tolist()
ax.barh(stages[::-1], committed_yields["kept"][::-1], color="tab:blue", alpha=0.8)
for y, (stage, row) in enumerate(committed_yields.iloc[::-1].iterrows()):
    ax.text(row["kept"], y, f" {int(row['kept']):,} ({row['kept / sampled']:.0%})",
            va="center", fontsize=9)
ax.set_xlabel("candidates left after the stage")
ax.set_xlim(0, committed_yields["kept"].max() * 1.3)
ax.set_title(f"{n_prompts:,} prompts x k = {K_SAMPLES}", fontsize=10)
ax.tick_params(labelsize=9)
plt.show()

# %%
y = committed_yields
readability = ["formatted", "single_language", "known_words", "steps_check_out",
               "non_repetitive", "not_truncated"]
say(f"Of the {y.loc['sampled', 'kept']:,} samples, {y.loc['correct', 'dropped']:,} "
    f"({y.loc['correct', 'dropped'] / y.loc['sampled', 'kept']:.1%}) are wrong; the "
    f"readability filters remove {int(y.loc[readability, 'dropped'].sum()):,} of the "
    f"correct ones, most of them for a misspelt word "
    f"({y.loc['known_words', 'dropped']:,}) or a false step "
    f"({y.loc['steps_check_out', 'dropped']:,}), and deduplication "
    f"removes {y.loc['deduplicate', 'dropped']:,}. The kept set is "
    f"{y.loc['deduplicate', 'kept']:,} samples, a yield of "
    f"{y.loc['deduplicate', 'kept / sampled']:.1%}, covering "
    f"{y.loc['deduplicate', 'prompts']:,} of the {n_prompts:,} prompts.")

# %% [markdown]
# What each filter caught: the first candidate it rejected (each candidate is blamed
# on the first filter that rejects it, as in the table).

# %%
remaining = candidates
dropped_by = pd.Series("kept", index=candidates.index)
for name in DEFAULT_FILTERS:
    ok = FILTERS[name](remaining).to_numpy(dtype=bool)
    dropped_by[remaining.index[~ok]] = name
    remaining = remaining[ok]
for name in DEFAULT_FILTERS:
    hit = candidates[dropped_by == name]
    if len(hit) == 0:
        print(f"{name}: nothing dropped")
        continue
    row = hit.iloc[0]
    print(f"{name} ({len(hit):,} dropped), {row['question']} = {row['answer']}:")
    print(textwrap.fill(repr(row["completion"][:200]), 86, initial_indent="  ",
                        subsequent_indent="  "))

# %% [markdown]
# ### Per prompt, and how many samples per prompt
#
# The yield is not spread evenly over the prompts. A prompt the RL model always solves
# contributes up to $k$ samples before deduplication; a prompt it rarely solves
# contributes one or none. And after deduplication, what is left of a prompt's $k$
# samples? The stored candidates answer both: the left panel counts the kept
# samples per prompt; the right one reruns `apply_filters` on the first $k'$ samples of
# every prompt, $k' = 1, \dots, k$, as if fewer had been drawn.

# %%
N_ANALYSED = P.pick(smoke=200, cpu=n_prompts, gpu=n_prompts)  # prompts analysed
analysed = candidates[candidates["prompt_index"] < N_ANALYSED]
per_prompt = analysed.groupby("prompt_index").agg(p=("correct", "mean"))
per_prompt["kept"] = full_kept.groupby("prompt_index").size()
per_prompt["kept"] = per_prompt["kept"].fillna(0).astype(int)
by_k = []
for k in range(1, K_SAMPLES + 1):
    kept_k, _ = apply_filters(analysed[analysed["sample_index"] < k])
    by_k.append({"k": k, "kept": len(kept_k),
                 "prompts": kept_k["prompt_index"].nunique()})
by_k = pd.DataFrame(by_k).set_index("k")
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
axes[0].hist(per_prompt["kept"], bins=np.arange(K_SAMPLES + 2) - 0.5,
             color="tab:blue", alpha=0.8)
axes[0].set_xlabel("kept samples of a prompt")
axes[0].set_ylabel("prompts")
axes[1].plot(by_k.index, by_k["kept"], marker="o", label="kept samples")
axes[1].plot(by_k.index, by_k["prompts"], marker="s", label="prompts with one")
axes[1].axhline(N_ANALYSED, color="gray", ls=":", lw=1, label="prompts analysed")
axes[1].set_xlabel("samples drawn per prompt, $k'$")
axes[1].set_ylabel("count")
axes[1].set_ylim(0, None)
axes[1].legend(fontsize=9)
for ax in axes:
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
plt.show()
display(by_k.T)

# %%
none_kept = int((per_prompt["kept"] == 0).sum())
say(f"The mean sampled accuracy over prompts is {per_prompt['p'].mean():.3f}, and "
    f"{(per_prompt['p'] == 1).mean():.1%} of the prompts were answered correctly in "
    f"all {K_SAMPLES} samples; yet after the filters a prompt keeps "
    f"{per_prompt['kept'].mean():.2f} samples on average, and "
    f"{(per_prompt['kept'] == 1).mean():.1%} of the prompts keep exactly one. From "
    f"$k' = 1$ to $k' = {K_SAMPLES}$ the kept set grows from "
    f"{by_k.loc[1, 'kept']:,} to {by_k.loc[K_SAMPLES, 'kept']:,} samples and the "
    f"prompts covered from {by_k.loc[1, 'prompts']:,} to "
    f"{by_k.loc[K_SAMPLES, 'prompts']:,} of {N_ANALYSED:,}; {none_kept} prompts "
    f"end with no kept sample at all.")

# %% [markdown]
# What are the samples that deduplication does not merge? Run the filters without
# the two readability rules and look at what survives:

# %%
loose_filters = [f for f in DEFAULT_FILTERS
                 if f not in ("known_words", "steps_check_out")]
loose, _ = apply_filters(analysed, loose_filters)
readable = (loose["completion"].map(rejection.uses_known_words)
            & loose["completion"].map(rejection.steps_check_out))
extra = loose["prompt_index"].duplicated().to_numpy()  # a prompt's 2nd, 3rd, ... answer
right = analysed[analysed["correct"]]["completion"]
right_readable = (right.map(rejection.uses_known_words)
                  & right.map(rejection.steps_check_out))
say(f"Of all the correct samples, {1 - right_readable.mean():.0%} misspell a word or "
    f"state a false step. Without the readability rules deduplication keeps "
    f"{len(loose):,} samples, and {1 - readable.mean():.0%} of them do. Among the "
    f"{int(extra.sum()):,} that are a prompt's second, third, ... distinct answer, "
    f"the share is {1 - readable[extra].mean():.0%}.")

# %% [markdown]
# This policy is nearly deterministic where it matters: its correct, readable answers
# to a prompt are almost always the *same* answer, and most of the samples that differ
# from it are noisy ones, a letter dropped or a check garbled at temperature 1.
# Deduplication makes this worse, not better: it keeps one copy of the common clean
# answer and one copy of every rare noisy variant, so without the readability rules
# the kept set would be far noisier than the samples themselves. More samples per
# prompt buy little beyond the first few: they rescue the hard prompts (the chance
# that one of $k$ samples is correct is $1-(1-p)^k$, exercise 12.1) and add a few
# distinct correct variants. More *prompts* buy data almost one for one, which is why
# the stored pass spends its sampling budget on many prompts and a moderate $k$.

# %% [markdown]
# (ch12-control)=
# ## The control
#
# The filters are one difference between the kept set and "more data from the RL
# model". To separate the two, the same command also writes a **random control**:
# as many samples as were kept, drawn uniformly from *all* candidates, with no
# filter:

# %%
show_source(random_control, docstring=False)

# %% [markdown]
# What the two sets contain, measured with the same columns (the share of samples
# with each property; `readable` = known words and true steps; `duplicate` marks a
# sample whose prompt already has the same normalised text in the set):

# %%
control = random_control(candidates, len(full_kept), seed=0)
committed_control = read_jsonl(REJECTION / "control.jsonl")
assert committed_control == to_sft_rows(control, source="random_control")


def composition(frame):
    """Shares of a candidate set with each property the filters look at."""
    dup = ~rejection.FILTERS["deduplicate"](frame).to_numpy(dtype=bool)
    readable = (frame["completion"].map(rejection.uses_known_words)
                & frame["completion"].map(rejection.steps_check_out))
    return pd.Series({
        "samples": len(frame), "correct": frame["correct"].mean(),
        "formatted": frame["formatted"].mean(), "readable": readable.mean(),
        "lang_mixed": frame["lang_mixed"].mean(),
        "repetitive": frame["repetitive"].mean(),
        "truncated": frame["truncated"].mean(), "duplicate": dup.mean(),
        "mean_length": frame["length"].mean(),
        "prompts": frame["prompt_index"].nunique()})


data_table = pd.DataFrame({"all candidates": composition(candidates),
                           "kept (filtered)": composition(full_kept),
                           "control (random)": composition(control)}).T
display(data_table.round(3))
ctl = data_table.loc["control (random)"]
say(f"The control is the RL model's sampling distribution in miniature: "
    f"{1 - ctl['correct']:.1%} of its samples are wrong, {1 - ctl['readable']:.1%} "
    f"are unreadable and {ctl['duplicate']:.1%} are repeats within a prompt, where "
    f"the kept set has none of any; it covers "
    f"{int(ctl['prompts']):,} prompts to the kept set's "
    f"{int(data_table.loc['kept (filtered)', 'prompts']):,}.")

# %% [markdown]
# ## The non-reasoning data
#
# R1's ~200k non-reasoning samples teach a model that already knows how to write,
# translate and answer questions to do so in its new format. The tiny model knows
# none of it, so its four skills are small and exact, each scored by a rule
# (`grpo_lib.tasks.skills`): write a number from 0 to 99 in English words, name the
# larger of two numbers, translate a number word between English and Chinese, and
# answer a question about itself with a fixed identity sentence.
#
# The held-out test asks each skill in **wordings the model never saw**. A tiny model
# fine-tuned on a handful of fixed wordings memorises them: asked in a new one, it
# answers as if the question were arithmetic. So the training questions come in
# several hundred wordings per skill, a core question with an optional lead-in and
# closing. The held-out set (`data/skills/test.jsonl`) asks in four other wordings
# per kind of question, new sentences made of words the training questions use. A
# second test (`data/skills/test_new_words.jsonl`) asks in one wording per kind with
# a word that no training question contains, such as "spell" or "greater":

# %%
# NBVAL_CHECK_OUTPUT
wording_rng = np.random.default_rng(0)
for key, templates in TEMPLATES.items():
    train_wordings = sorted(set(templates))
    example = str(wording_rng.choice(train_wordings))
    print(f"{key}: {len(train_wordings)} training wordings, e.g. {example!r}")
    print(f"    held out: {HELD_OUT[key][0]!r}, ... ({len(HELD_OUT[key])})")
    print(f"    new word: {NEW_WORDS[key]!r}")
print("words no training question uses:", NEW_WORDS_KEYS)

# %% [markdown]
# ## SFT stage 2
#
# The stage-2 configuration is the cold start's recipe
# (`configs/cold_start_annotator.yaml`: learning rate $5 \cdot 10^{-4}$ with a cosine
# schedule, batches of 16, loss
# on the assistant's tokens only), run for six epochs instead of three, on a **data
# mixture**: `train_file` lists two files, whose rows the trainer concatenates and
# shuffles together. The control's configuration differs only in the first training
# file (and its output folder).

# %%
print((REPO / "configs" / "stage2_sft.yaml").read_text().split("\n\n", 1)[1])
control_config = yaml.safe_load((REPO / "configs" / "stage2_control.yaml").read_text())
print("control:", {k: v for k, v in control_config.items()
                   if stage2_config.get(k) != v})
mixture = pd.Series({"reasoning (kept.jsonl)": len(kept_rows),
                     "non-reasoning (skills)": len(skill_rows)})
say(f"The mixture holds {mixture.iloc[0]:,} reasoning and {mixture.iloc[1]:,} "
    f"non-reasoning conversations, a ratio of {mixture.iloc[0] / mixture.iloc[1]:.2f} "
    f"to one where R1's was about three to one. R1 fine-tuned a model that already "
    f"knew how to write, translate and talk about itself; the tiny model learns the "
    f"hundred number words of two languages from these rows, and needs many of "
    f"them, and many passes over them (the 3-epoch runs, below).")

# %% [markdown]
# One run of each model (seed 0) was made on the book's 2-core CPU, with the command
# in its `README.md`; here are their logs.

# %%
SFT_RUNS = {("stage 2", 0): "stage2_sft_cpu", ("stage 2", 1): "stage2_sft_seed1_cpu",
            ("control", 0): "stage2_control_cpu", ("control", 1):
            "stage2_control_seed1_cpu"}
SFT_RUNS = {key: name for key, name in SFT_RUNS.items()
            if (RUNS / name / "harness.csv").exists()}
SEEDS = sorted({seed for _, seed in SFT_RUNS})
logs = {key: read_metrics(RUNS / name) for key, name in SFT_RUNS.items()}
eval_logs = {key: pd.read_csv(RUNS / name / "eval.csv")
             for key, name in SFT_RUNS.items()}
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True)
colors = {"stage 2": "tab:blue", "control": "tab:red"}
for (kind, seed), m in logs.items():
    style = dict(color=colors[kind], ls="-" if seed == 0 else "--")
    axes[0].plot(m["step"], m["loss"].rolling(25, min_periods=1).mean(),
                 label=f"{kind}, seed {seed}", **style)
    e = eval_logs[(kind, seed)]
    axes[1].plot(e["step"], e["eval_loss"], **style)
axes[0].set_ylabel("training loss (mean of 25 steps)")
axes[1].set_ylabel("held-out loss (annotator traces)")
axes[0].set_yscale("log")
axes[1].set_yscale("log")
axes[0].legend(fontsize=9)
for ax in axes:
    ax.set_xlabel("step")
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
run_rows = []
for (kind, seed), name in SFT_RUNS.items():
    m = logs[(kind, seed)]
    run_rows.append({"run": name, "model": kind, "seed": seed,
                     "steps": int(m["step"].max()),
                     "step time (s)": m["time_step"].sum(),
                     "final loss (25-step mean)": m["loss"].tail(25).mean(),
                     "held-out loss": eval_logs[(kind, seed)]["eval_loss"].iloc[-1]})
runs_table = pd.DataFrame(run_rows).set_index("run")
display(runs_table.round(4))

# %%
final = runs_table.set_index(["model", "seed"])
higher = all(final.loc[("control", s), "final loss (25-step mean)"]
             > final.loc[("stage 2", s), "final loss (25-step mean)"] for s in SEEDS)
say(("The control ends with the higher training loss"
     if higher else "The control does not end with the higher training loss in every "
     "seed") + " (" + "; ".join(
    f"seed {s}: stage 2 {final.loc[('stage 2', s), 'final loss (25-step mean)']:.4f},"
    f" control {final.loc[('control', s), 'final loss (25-step mean)']:.4f}"
    for s in SEEDS) + ").")

# %% [markdown]
# The control's data holds wrong answers and garbled traces, which a next-token loss
# cannot fit as tightly as one clean, consistent answer per prompt. The held-out loss
# is measured on the cold-start annotator's traces of test problems, a style both
# runs learned only second-hand through the RL model; it tracks how close the
# models' traces stay to that style, not their accuracy. Accuracy needs the harness.

# %% [markdown]
# (ch12-results)=
# ## Stage 2 against the RL model, the base and the control
#
# Every stored model, evaluated here: the held-out arithmetic problems with the
# harness (greedy, 128 new tokens), each non-reasoning skill in its held-out wordings
# and in the new-word wordings (greedy, `evaluate_skills`), and, to tell a skill that
# was not learned from a wording that was not understood, the same skills asked in
# training wordings (`make_skill_rows`, a fresh draw).

# %%
# NBVAL_IGNORE_OUTPUT
EVAL_N = P.pick(smoke=20, cpu=500, gpu=500)
SKILL_DIR = REPO / "data" / "skills"
skill_test = read_jsonl(SKILL_DIR / "test.jsonl")
skill_new_words = read_jsonl(SKILL_DIR / "test_new_words.jsonl")
skill_trained = make_skill_rows(P.pick(smoke=2, cpu=25, gpu=100), seed=2)
if P.is_smoke:
    skill_test, skill_new_words = ([r for s in SKILLS for r in
                                    [r for r in rows if r["skill"] == s][:2]]
                                   for rows in (skill_test, skill_new_words))
RL_LABEL = "reasoning RL (ch. 11)"
LIVE_MODELS = {"base": BASE_DIR, RL_LABEL: RL_DIR,
               "stage 2": STAGE2_DIR, "control": CONTROL_DIR}
results, samples, skill_samples, new_word_samples = {}, {}, {}, {}
new_words_table, t0 = {}, time.perf_counter()
for label, path in LIVE_MODELS.items():
    model, tok = load_model_and_tokenizer(path, device=P.device)
    harness, samples[label] = evaluate(model, tok, test_set, n=EVAL_N,
                                       max_new_tokens=128, return_samples=True)
    skills, skill_samples[label] = evaluate_skills(model, tok, skill_test)
    new_words, new_word_samples[label] = evaluate_skills(model, tok, skill_new_words)
    new_words_table[label] = new_words["accuracy"]
    trained, _ = evaluate_skills(model, tok, skill_trained)
    results[label] = pd.concat([harness.loc["greedy"], skills["accuracy"],
                                pd.Series({"trained_wordings":
                                           trained["accuracy"].mean()})])
n_skill = len(skill_test) + len(skill_new_words) + len(skill_trained)
print(f"{len(LIVE_MODELS)} models x ({EVAL_N} problems + {n_skill} skill questions) "
      f"in {time.perf_counter() - t0:.0f} s on {P.device}")

# %%
COLUMNS = ["strict_acc", "format_rate", "lang_mix_rate", "mean_length", *SKILLS]
comparison = pd.DataFrame(results).T[COLUMNS + ["trained_wordings"]].astype(float)
for (kind, seed), name in SFT_RUNS.items():
    if seed == 0:
        continue  # evaluated live above
    harness = pd.read_csv(RUNS / name / "harness.csv", index_col=0).loc["greedy"]
    skills = pd.read_csv(RUNS / name / "skills.csv", index_col="skill")["accuracy"]
    comparison.loc[f"{kind}, seed {seed} (logged)", COLUMNS] = \
        pd.concat([harness, skills])[COLUMNS].astype(float)
short_new = {}  # the 3-epoch runs' skills asked with a new word, read further down
for kind, name in (("stage 2", "stage2_sft_3ep_cpu"),
                   ("control", "stage2_control_3ep_cpu")):
    harness = pd.read_csv(RUNS / name / "harness.csv", index_col=0).loc["greedy"]
    skills = pd.read_csv(RUNS / name / "skills.csv", index_col="skill")
    short_new[kind] = skills["new_words"]
    comparison.loc[f"{kind}, 3 epochs (logged)", COLUMNS] = \
        pd.concat([harness, skills["accuracy"]])[COLUMNS].astype(float)
display(comparison.round(3))

# %% [markdown]
# The columns: strict accuracy, format rate, language-mixed rate and mean length (in
# tokens) on the held-out problems; the accuracy of each skill in its held-out
# wordings; `trained_wordings`, the mean skill accuracy when the questions use
# wordings seen in training (not logged for the runs read from their logs). The
# main runs train for six epochs; the two `3 epochs` rows are runs of the same recipe
# with three epochs (their own, shorter cosine schedule), read from their logs. Each
# stage-2 and control row is one run.

# %%
r1_zero = pd.read_csv(RUNS / "ch07_r1_zero_seed0_cpu" / "eval.csv").iloc[-1]
s2 = comparison.loc["stage 2"]
other = [s for s in SEEDS if s != 0]
s2_more = "".join(
    f" (seed {s}: {comparison.loc[f'stage 2, seed {s} (logged)', 'strict_acc']:.3f})"
    for s in other)
say(f"On {EVAL_N} held-out problems the stage-2 model's strict accuracy is "
    f"{s2['strict_acc']:.3f}{s2_more}, against "
    f"{comparison.loc[RL_LABEL, 'strict_acc']:.3f} for the RL model it learned from, "
    f"{comparison.loc['base', 'strict_acc']:.3f} for the base model it started "
    f"from, and {r1_zero['strict_acc']:.3f} for chapter 7's R1-Zero run (seed 0, "
    f"`transformers` rollout); its "
    f"language-mixed rate is {s2['lang_mix_rate']:.3f}. Supervised fine-tuning on "
    f"the RL model's "
    f"filtered answers alone gives the base model the RL model's arithmetic.")

# %%
held = ", ".join(f"{s.replace('_', ' ')} {s2[s]:.2f}" for s in SKILLS)
best_before = comparison.loc[["base", RL_LABEL], list(SKILLS)].max().max()
lowest = comparison.loc["stage 2", list(SKILLS)].astype(float)
say(("On the skills, the base and RL models answer no question right. "
     if best_before == 0 else f"On the skills, the base and RL models score at most "
     f"{best_before:.2f} on any of them. ")
    + f"In the held-out wordings the stage-2 model scores {held}: "
    + ("at least 0.90 on every skill, " if lowest.min() >= 0.9 else
       f"below 0.90 on {', '.join(lowest[lowest < 0.9].index)}, ")
    + f"against {s2['trained_wordings']:.2f} on average in training wordings. The "
    f"skills were learned, and carried over to new sentences made of known words.")
three = comparison.loc["stage 2, 3 epochs (logged)"]
say(f"Three epochs were enough for the arithmetic (strict {three['strict_acc']:.3f}) "
    f"but not quite for the skills: "
    + ", ".join(f"{s.replace('_', ' ')} {three[s]:.2f}" for s in SKILLS)
    + f". Each number-word skill is a hundred facts, each met about "
    f"{len(skill_rows) / len(SKILLS) / 100:.0f} times per epoch (half as often for "
    f"each direction of translation), while `compare` draws fresh pairs; the longer "
    f"run learns them.")

# %%
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.4), constrained_layout=True,
                         gridspec_kw={"width_ratios": [1, 2]})
order = list(LIVE_MODELS)
bar_colors = ["tab:gray", "tab:green", "tab:blue", "tab:red"]
axes[0].bar(range(len(order)), comparison.loc[order, "strict_acc"],
            color=bar_colors)
axes[0].set_xticks(range(len(order)), [o.replace("reasoning ", "") for o in order],
                   fontsize=9, rotation=30, ha="right", rotation_mode="anchor")
axes[0].set_ylim(0, 1.05)
axes[0].set_title("held-out strict accuracy", fontsize=10)
width = 0.2
for i, (label, color) in enumerate(zip(order, bar_colors)):
    x = np.arange(len(SKILLS)) + (i - 1.5) * width
    heights = comparison.loc[label, list(SKILLS)].to_numpy(dtype=float)
    axes[1].bar(x, heights, width, color=color, label=label)
    for xi in x[heights == 0]:  # a bar of height 0 is a score of 0, not a gap
        axes[1].text(xi, 0.01, "0", ha="center", va="bottom", fontsize=8)
axes[1].set_xticks(range(len(SKILLS)), [s.replace("_", "\n") for s in SKILLS],
                   fontsize=9)
axes[1].set_ylim(0, 1.4)  # the legend above the bars
axes[1].set_yticks(np.linspace(0, 1, 6))
axes[1].set_title("skill accuracy, held-out wordings", fontsize=10)
axes[1].legend(fontsize=9, loc="upper center", ncol=2)
for ax in axes:
    ax.tick_params(labelsize=9)
plt.show()

# %% [markdown]
# What the RL model and the stage-2 model answer to the first held-out question of
# each skill:

# %%
for skill in SKILLS:
    rows = {label: skill_samples[label][skill_samples[label]["skill"] == skill].iloc[0]
            for label in (RL_LABEL, "stage 2")}
    first = rows["stage 2"]
    print(f"{first['question']}  (expected {first['answer']!r})")
    for label, row in rows.items():
        print(f"  {label:>22}: {row['completion'][:60]!r}")

# %% [markdown]
# And the stage-2 model's mistakes in the held-out wordings, the first three of each
# skill:

# %%
def show_mistakes(skill_frame):
    """The first three wrong answers of each skill."""
    for skill in SKILLS:
        wrong = skill_frame[(skill_frame["skill"] == skill)
                            & (skill_frame["correct"] == 0)]
        print(f"{skill}: {len(wrong)} wrong of "
              f"{int((skill_frame['skill'] == skill).sum())}")
        for _, row in wrong.head(3).iterrows():
            print(f"  {row['question']!r} -> {row['completion'][:40]!r} "
                  f"(expected {row['answer']!r})")


show_mistakes(skill_samples["stage 2"])

# %% [markdown]
# These few mistakes are about the numbers, not the question: the model knows what
# kind of answer is wanted and gets the number wrong: it picks the smaller of the two,
# changes a digit, or writes another number's word. Asked with a word it never met, it
# is another story:

# %%
new_words_table = pd.DataFrame(new_words_table).T[list(SKILLS)]
display(new_words_table.round(2))
show_mistakes(new_word_samples["stage 2"])

# %%
nw = new_words_table.loc["stage 2"]
say(f"With one unknown word in the question the stage-2 model scores "
    + ", ".join(f"{s.replace('_', ' ')} {nw[s]:.2f}" for s in SKILLS)
    + ". The self-cognition answer survives; the number skills only in part.")

# %% [markdown]
# The mistakes are not random. Asked to "spell out" a number, a verb it never met,
# the model often echoes the digits: nothing it recognises in the question says
# *words*, and a bare number is what the comparison questions taught it to answer
# with. A large pretrained model has met "spell out" and "which is greater" countless
# times before its SFT; this model of a million parameters learned all its English
# from the book's corpus and this chapter's data.

# %% [markdown]
# (ch12-filters-buy)=
# ## What the filters buy
#
# The control saw the same number of samples from the same RL model, mixed with the
# same skills, for the same number of steps. The difference between the two models is
# what the filters chose.

# %%
pairs = pd.DataFrame({
    "stage 2 - control, seed 0": comparison.loc["stage 2", COLUMNS]
    - comparison.loc["control", COLUMNS],
    **{f"stage 2 - control, seed {s}":
       comparison.loc[f"stage 2, seed {s} (logged)", COLUMNS]
       - comparison.loc[f"control, seed {s} (logged)", COLUMNS] for s in other},
})
display(pairs.T.round(3))
gap = pairs.loc["strict_acc"]
worst = (nw - new_words_table.loc["control"]).abs().idxmax()  # the widest new-word gap
ctl_worst = new_words_table.loc["control", worst]
ahead = "the control" if ctl_worst > nw[worst] else "stage 2"
say(f"Filtering changed held-out strict accuracy by "
    + " and ".join(f"{g:+.3f} (seed {s})" for s, g in zip(SEEDS, gap))
    + f" against the random control; on the skills' held-out wordings, which both "
    f"models learned from the same rows, no difference exceeds "
    f"{pairs.loc[list(SKILLS)].abs().max().max():.2f}. With one unknown word in the "
    f"question (the table above) they part most on {worst.replace('_', ' ')}: "
    f"{nw[worst]:.2f} for stage 2 against {ctl_worst:.2f} for the control, so there "
    f"{ahead} is {'far ' if abs(ctl_worst - nw[worst]) >= 0.2 else ''}ahead.")
short_gap = (comparison.loc["stage 2, 3 epochs (logged)", "strict_acc"]
             - comparison.loc["control, 3 epochs (logged)", "strict_acc"])
say(f"The `3 epochs` pair, the same recipe and seed with half the training, is a "
    f"second comparison of the same two data sets, one run each: filtering changed "
    f"strict accuracy by {short_gap:+.3f}, and with the new word the two score "
    f"{short_new['stage 2'][worst]:.2f} (stage 2) and "
    f"{short_new['control'][worst]:.2f} (control) on {worst.replace('_', ' ')}.")

# %% [markdown]
# One result runs the other way: with the new word, the control answers the
# number-word questions far better than the stage-2 model, though both learned number
# words from the same skill rows. A hypothesis, not tested here: the control's
# reasoning rows keep the repeats, wrong answers and garbled traces that the filters
# drop (the composition table of {ref}`ch12-control`), so it fits its data less
# tightly (its higher training loss, above) and may tie its answers less to the exact
# words it saw; the noise would act as a regulariser. The `3 epochs` pair, whose two
# scores there are close, fits that reading: the gap opens with longer training. One
# run of each cannot settle it.
#
# The arithmetic gain is one run of each, measured on the same 500 problems, so the
# problems on which the two models disagree say more than the difference of two
# means. Here they are, with the first three that only the control gets wrong, next
# to the stage-2 model's answers.

# %%
ctl_s, s2_s = samples["control"], samples["stage 2"]
only_control_wrong = ctl_s[~ctl_s["correct"] & s2_s["correct"]]
only_stage2_wrong = s2_s[~s2_s["correct"] & ctl_s["correct"]]
print(f"wrong only for the control: {len(only_control_wrong)}; wrong only for stage 2: "
      f"{len(only_stage2_wrong)}; wrong for both: "
      f"{int((~ctl_s['correct'] & ~s2_s['correct']).sum())}")
n_ctl, n_s2 = len(only_control_wrong), len(only_stage2_wrong)
# McNemar's test: under "no difference" each disagreement is a fair coin flip
p_value = min(1.0, 2 * sum(math.comb(n_ctl + n_s2, j)
                           for j in range(max(n_ctl, n_s2), n_ctl + n_s2 + 1))
              / 2 ** (n_ctl + n_s2)) if n_ctl + n_s2 else 1.0
for i, row in only_control_wrong.head(3).iterrows():
    print(f"{row['answer']:>5} | control: {row['completion'][:78]!r}")
    print(f"      | stage 2: {s2_s.loc[i, 'completion'][:78]!r}")
say(f"The two models disagree on {n_ctl + n_s2} problems, and the control is the one "
    f"that is wrong on {n_ctl} of them. If filtering made no difference, each "
    f"disagreement would go either way with even odds; a split this uneven or more "
    f"happens with probability {p_value:.3f} (McNemar's exact test). The filtered "
    f"data set is the better teacher here, by a margin that one more seed of each run "
    f"would make firmer.")

# %% [markdown]
# ## Summary
#
# - Rejection sampling turns the RL checkpoint into a data generator: $k$ samples per
#   training prompt, scored by the same harness as every accuracy in the book, kept
#   only when correct, well formatted, in one language, readable (known words, true
#   steps, no loop, not cut off) and not a copy. The yield table says what each filter
#   removed.
# - For a policy as sure of itself as this one, deduplication decides the size of the
#   data set: about one distinct correct answer per prompt survives, so prompts buy
#   data and more samples per prompt mostly rescue the hard prompts.
# - The kept samples plus the non-reasoning skills fine-tune the **base** model again.
#   No RL is involved in this stage, yet the result solves the held-out problems as
#   well as the RL model it learned from, without mixing languages (the table in
#   {ref}`ch12-results`).
# - The same number of samples drawn at random, with no filter, trains a model that
#   gets more of the held-out problems wrong ({ref}`ch12-filters-buy`), in one run of
#   each and again in the shorter pair of runs: a sign, which more seeds would have to
#   confirm, that the filters, not only the amount of data, carry the gain in
#   arithmetic.
# - The skills carry over to new wordings made of words the model has seen (the
#   held-out set); a single unknown word in the question, which a pretrained model
#   would read without noticing, breaks the number skills in part, number words most;
#   there the random control does far better than the stage-2 model (one run each; a
#   hypothesis in {ref}`ch12-filters-buy`). Breadth is the one thing a tiny model
#   cannot borrow from pretraining.
#
# DeepSeek-R1 continues from here with a last RL stage "for all scenarios", which adds
# rewards for helpfulness and harmlessness to the rule rewards; in R1 the stage-2
# model is that stage's starting point. Chapter 13 runs its experiment from the base
# model instead.

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch12`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch12`.
#
# **12.1 — How many samples per prompt?** A prompt that the RL model answers correctly
# with probability $p$ gets at least one correct sample out of $k$ with probability
# $1 - (1-p)^k$. Write `my_samples_needed(p, target)`: the smallest $k$ for which this
# reaches `target`.

# %%
from grpo_lib.exercises.ch12 import (check_dedup_mask, check_samples_needed,
                                     check_sequential_yields)


def my_samples_needed(p, target):
    # your code here
    raise NotImplementedError


try:
    check_samples_needed(my_samples_needed)
except NotImplementedError:
    print("Not implemented yet: write the chance that all k samples miss, then find "
          "the first k where the complement reaches the target.")

# %% [markdown]
# **12.2 — Deduplicate.** Write `my_dedup_mask(prompt_index, completions)`: one bool
# per candidate, True for the first copy of each (prompt, normalised text), where
# normalised means whitespace runs collapsed to one space, ends stripped and case
# folded (`grpo_lib.rejection.normalise_completion`).

# %%
def my_dedup_mask(prompt_index, completions):
    # your code here
    raise NotImplementedError


try:
    check_dedup_mask(my_dedup_mask)
except NotImplementedError:
    print("Not implemented yet: remember the keys seen so far; think about what a "
          "key must contain for two samples to be copies.")

# %% [markdown]
# **12.3 — The yield table, stage by stage.** `masks` maps each filter, in order, to
# its verdict (True = keep) on every candidate. Write `my_sequential_yields(masks)`
# returning the number of candidates at the start and after each filter, as in the
# `kept` column of the yield table.

# %%
def my_sequential_yields(masks):
    # your code here
    raise NotImplementedError


try:
    check_sequential_yields(my_sequential_yields)
except NotImplementedError:
    print("Not implemented yet: a candidate is still in after a filter only if it "
          "passed that filter and every filter before it.")

# %% [markdown]
# **12.4 — Think.** (a) What would be lost, and what gained, by fine-tuning the RL
# checkpoint on the mixture instead of the base model? (b) Why must the control have
# the same size as the kept set, and not, say, all candidates? (c) Run the same
# rejection sampling on chapter 7's R1-Zero model instead of chapter 11's
# checkpoint: which filter's row of the yield table would change most, and why?
