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
# (ch11)=
# # Reasoning-oriented RL with language consistency
#
# DeepSeek-R1-Zero reasons well and reads badly: its chains of thought mix languages
# {cite}`deepseekai2025r1`. The tiny model of this book does the same. Its pretraining
# corpus writes Chinese connectives (首先, 然后, 最后) into some English reasoning
# ({doc}`05_tiny_base_model`), and chapter 7's R1-Zero run did nothing about it
# ({doc}`07_full_loop`): nothing in accuracy + format looks at the language.
#
# DeepSeek-R1's second stage is the same GRPO with one more reward, a
# **language-consistency reward**, started from the cold-start model of the first
# stage ({doc}`10_cold_start`). This chapter:
#
# 1. defines the reward as the paper does, shows the library's function and checks it
#    on completions you can score by hand;
# 2. sets it next to the evaluation harness's language-mixed rate, which counts
#    something different;
# 3. reads logged runs, two seeds each, with and without the language reward, from
#    the cold-start model (R1's order), from the cold-start model on prompts in two
#    languages, and from the base model (R1-Zero plus the reward): does the mixing go
#    away, and does the accuracy pay for it?
# 4. trains the three rewards for a few steps in this notebook;
# 5. shows the multi-reward variant that normalises each reward inside its group
#    before summing (GDPO, TRL's `multi_objective_aggregation="normalize_then_sum"`),
#    when to choose it, what it costs, and its runs;
# 6. measures what accuracy-only RL does to a habit that no reward looks at, at each
#    starting point, and tests the answer with runs from two more cold starts: a
#    lighter one, and one distilled from the base model's own answers.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import shutil
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib import evaluate
from grpo_lib.advantages import (decoupled_advantages, group_advantages,
                                 habit_advantage)
from grpo_lib.display import say, show_source
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.parsing import has_cjk, script_counts, think_text
from grpo_lib.profiles import profile
from grpo_lib.rewards import (accuracy_reward, combine_rewards, format_reward,
                              language_consistency_reward)
from grpo_lib.sft import SFTConfig, SFTTrainer, read_train_files
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import CHINESE_WORDINGS, DATA_DIR
from grpo_lib.trainer import GRPOTrainer, load_config

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 90)
torch.set_printoptions(precision=3, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
RUNS = REPO / "data" / "runs"
BASE_DIR = REPO / "data" / "models" / "tiny-qwen2-base"
CONFIG = REPO / "configs" / "r1_zero_arithmetic.yaml"
test_set = load_task_split("arithmetic", "test")
train_set = load_task_split("arithmetic", "train")

# %% [markdown]
# (ch11-reward)=
# ## The reward
#
# The R1 report describes the reward in one sentence: it is "calculated as the
# proportion of target language words in the CoT", and it is combined with the
# accuracy reward "by directly summing them" {cite}`deepseekai2025r1`. The report is
# also frank about the price: in its ablation the language reward costs "a slight
# degradation in the model's performance", and DeepSeek kept it because the output is
# more readable and closer to what people prefer.
#
# As in {doc}`03_rule_rewards`, the chain of thought is the think block, cut into
# *language units*: one per Latin word, one per CJK character (Chinese writes no
# spaces), one per word of any other alphabet; digits and symbols are no language.
# With English as the target,
#
# $$
# r_{\mathrm{lang}}(o) = \frac{u_{\mathrm{latin}}}{u_{\mathrm{latin}} + u_{\mathrm{cjk}}
#   + u_{\mathrm{other}}}, \qquad
# r(o) = 1 \cdot r_{\mathrm{acc}}(o) + 0.1 \cdot r_{\mathrm{format}}(o)
#   + 0.2 \cdot r_{\mathrm{lang}}(o).
# $$
#
# The second formula is the reward of this chapter's runs: chapter 7's R1-Zero reward
# plus the language term. The report sums the two directly (weight 1 each); this
# book weights the language term 0.2 (as in the worked example below), so that it can
# move a completion's reward by at most 0.2 and never lifts a wrong answer above a
# right one (exercise 11.4 looks at the weight 1). The function, from
# `grpo_lib.rewards`:

# %%
show_source(language_consistency_reward, docstring=False)

# %% [markdown]
# A check you can do by hand. Five completions for `8 - 1 + 12`: English
# connectives, the corpus's Chinese connectives, one Chinese word among English ones,
# arithmetic only, and an English reasoning followed by a Chinese character after the
# answer. Count the units, divide, and compare:

# %%
# NBVAL_CHECK_OUTPUT
hand = {
    "English": "<think> First 8 - 1 = 7, now 7 + 12. Finally 7 + 12 = 19. </think> "
               "<answer> 19 </answer>",
    "Chinese connectives": "<think> 首先 8 - 1 = 7, 现在 7 + 12. 最后 7 + 12 = 19. "
                           "</think> <answer> 19 </answer>",
    "one Chinese word": "<think> First 8 - 1 = 7, 现在 7 + 12. Finally 7 + 12 = 19. "
                        "</think> <answer> 19 </answer>",
    "arithmetic only": "<think> 8 - 1 = 7, 7 + 12 = 19 </think> <answer> 19 </answer>",
    "Chinese after the answer": "<think> First 8 - 1 = 7, now 7 + 12. Finally 7 + 12 "
                                "= 19. </think> <answer> 19 </answer> 完",
}
texts = list(hand.values())
r1_reward = combine_rewards(
    [accuracy_reward, format_reward, language_consistency_reward], [1.0, 0.1, 0.2])
totals = r1_reward(texts, answer=["19"] * len(texts))
hand_table = pd.DataFrame({
    "latin words": [script_counts(think_text(t))["latin"] for t in texts],
    "CJK chars": [script_counts(think_text(t))["cjk"] for t in texts],
    "r_lang": r1_reward.last_breakdown["language_consistency_reward"],
    "r_acc": r1_reward.last_breakdown["accuracy_reward"],
    "r_format": r1_reward.last_breakdown["format_reward"],
    "r = acc + 0.1 fmt + 0.2 lang": totals,
}, index=list(hand))
hand_table

# %% [markdown]
# The Chinese connectives score 0. One Chinese word among two English ones scores
# 2 / (2 + 2) = 0.5, because 现在 is two characters: a Chinese word weighs as much as
# its characters. Arithmetic alone scores 1: it mixes nothing. The character after the
# answer does not count (the reward reads the think block only); the format reward
# catches that completion instead.
#
# A common worked example of R1's reward drops the format term and uses
# $1 \cdot r_{\mathrm{acc}} + 0.2 \cdot r_{\mathrm{lang}}$. Chapter 1's o1 (wrong,
# evaluated left to right) and o2 (right) both reason in digits only:

# %%
# NBVAL_CHECK_OUTPUT
worked = {
    "o1 (wrong)": "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>",
    "o2 (right)": "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
    "o2 with Chinese words": "<think> 首先 3 * 4 = 12, 然后 2 + 12 = 14 </think> "
                             "<answer> 14 </answer>",
}
paper_reward = combine_rewards([accuracy_reward, language_consistency_reward],
                               [1.0, 0.2])
worked_totals = paper_reward(list(worked.values()), answer=["14"] * 3)
pd.DataFrame({**paper_reward.last_breakdown, "1 acc + 0.2 lang": worked_totals},
             index=list(worked))

# %% [markdown]
# The language term adds 0.2 to o1 and o2 alike ($0.2$ and $1.2$). It only matters
# *between* completions of one group: the right answer in Chinese gets 1.0, 0.2 less
# than the right answer in English, and that difference is what the group-relative
# advantage turns into a push away from Chinese.
#
# (ch11-harness)=
# ## What the harness counts instead
#
# The evaluation harness ({doc}`05_tiny_base_model`) reports `lang_mix_rate`: the
# share of completions with **any** CJK character **anywhere** in the text. It is a
# different measurement from the reward in two ways: it is all or nothing (one
# character makes a completion mixed, where the reward moves by one unit's share), and
# it reads the whole completion, not only the reasoning. On the hand-made completions:

# %%
# NBVAL_CHECK_OUTPUT
pd.DataFrame({"r_lang (reward)": hand_table["r_lang"],
              "lang_mixed (harness)": [has_cjk(t) for t in texts]}, index=list(hand))

# %% [markdown]
# The first is what training optimises, the second what this chapter reports: a
# lower `lang_mix_rate` is the stricter claim (not one character left), and a reward
# can rise a lot while it barely moves (a trace going from one Chinese word in two to
# one in ten). What does the base model's mixing look like? Its greedy answers to the
# held-out problems:

# %%
N_EVAL = P.pick(smoke=20, cpu=500, gpu=500)
base_model, tok = load_model_and_tokenizer(BASE_DIR, device=P.device)
base_table, base_samples = evaluate(base_model, tok, test_set, n=N_EVAL,
                                    return_samples=True, max_new_tokens=96)
base_samples["r_lang"] = language_consistency_reward(base_samples["completion"])
base_samples["subtraction"] = base_samples["question"].str.contains("-")
mixed_rows = base_samples[base_samples["lang_mixed"]]
print(f"base model, {N_EVAL} held-out problems (greedy): lang_mix_rate "
      f"{base_table.loc['greedy', 'lang_mix_rate']:.3f}")
for _, row in mixed_rows.head(3).iterrows():
    print(f"  {row['question']} -> {row['completion'][:70]}  "
          f"r_lang {row['r_lang']:.2f}")

# %%
by_mixing = base_samples.groupby("lang_mixed").agg(
    completions=("correct", "size"), r_lang_mean=("r_lang", "mean"),
    r_lang_min=("r_lang", "min"), with_subtraction=("subtraction", "mean"),
    strict_acc=("correct", "mean"))
display(by_mixing.round(3))
if len(mixed_rows):
    say(f"Of the {len(mixed_rows)} mixed answers, "
        f"{(mixed_rows['r_lang'] == 0).mean():.0%} have a language reward of exactly 0 "
        f"(every connective in Chinese) and "
        f"{mixed_rows['subtraction'].mean():.0%} answer a problem with a subtraction, "
        f"against {base_samples['subtraction'].mean():.0%} of all problems: the "
        f"corpus puts the Chinese words where the problem subtracts. And "
        f"{mixed_rows['correct'].mean():.0%} of the mixed answers are right, against "
        f"{base_samples.loc[~base_samples['lang_mixed'], 'correct'].mean():.0%} of the "
        f"others.")

# %% [markdown]
# On this model the two measures agree: a mixed trace is a trace whose connectives
# are all Chinese, with a language reward of 0, and the language term separates it
# from an English trace by its full weight, 0.2. The last column holds a surprise that
# matters for everything below: the Chinese traces are the base model's *good*
# answers. The corpus wrote its Chinese connectives into otherwise correct,
# well-formatted traces, while the English side carries the other flaws (broken tags,
# left-to-right evaluation). An accuracy reward therefore likes the Chinese traces,
# and the language reward has to push against answers that the accuracy reward pulls
# towards.
#
# (ch11-runs)=
# ## The runs
#
# Every run below is chapter 7's configuration (`configs/r1_zero_arithmetic.yaml`:
# 150 steps of 16 prompts × 8 completions, learning rate $5 \cdot 10^{-4}$, cosine
# schedule, $\beta = 0$) with `language_consistency_reward` as a third reward,
# evaluated on the first 500 held-out problems (greedy) during training. The
# accuracy-only runs log the language reward with a weight of 0, so that their
# columns can be compared. The starts:
#
# - **from the cold-start model** (R1's order: `data/models/tiny-qwen2-cold-start`,
#   the base model after SFT on readable English traces), at the learning rate that
#   keeps the cold start's accuracy ($10^{-4}$) and with room for its longer traces
#   (128 tokens), evaluated every 50 steps; the accuracy-only twins are the runs of
#   {ref}`ch10-grpo` made again with the language reward logged at weight 0 (checked
#   below: the same runs). The final checkpoint of seed 0's language run is the model
#   the next stage starts from, `data/models/tiny-qwen2-reasoning-rl`
#   ({doc}`12_rejection_sampling`);
# - **from the cold-start model, on prompts in two languages**: the same, with every
#   other prompt asked in Chinese ({ref}`ch11-two-languages`), evaluated every 25
#   steps;
# - **from the base model** (R1-Zero plus the language reward), evaluated every 25
#   steps;
# - **from a lighter cold start**, the cold-start recipe shortened to 128 steps (its
#   cosine schedule completed within them), at the cold-start runs' settings,
#   evaluated every 25 steps; they are read in
#   {ref}`ch11-habits`, where a measurement predicts what they should do;
# - **from a self-distilled cold start**, the base model fine-tuned for 40 steps on
#   its own right, well-formatted, English answers, at chapter 7's settings,
#   evaluated every 25 steps; read in {ref}`ch11-self`.
#
# Each run folder holds its exact command in `README.md`, one row per step in
# `metrics.csv` and the evaluations in `eval.csv`:

# %%
SEEDS = (0, 1)
RUN_NAMES = {  # (start, arm) -> run folder pattern
    ("cold start", "accuracy only"): "ch11_cold_acc_seed{}_cpu",
    ("cold start", "+ language"): "ch11_cold_lang_seed{}_cpu",
    ("two languages", "accuracy only"): "ch11_bilingual_acc_seed{}_cpu",
    ("two languages", "+ language"): "ch11_bilingual_lang_seed{}_cpu",
    ("base", "accuracy only"): "ch11_base_acc_seed{}_cpu",
    ("base", "+ language"): "ch11_base_lang_seed{}_cpu",
    ("base", "+ language, GDPO"): "ch11_base_gdpo_seed{}_cpu",
    ("lighter cold start", "accuracy only"): "ch11_light_acc_seed{}_cpu",
    ("lighter cold start", "+ language"): "ch11_light_lang_seed{}_cpu",
    ("self-distilled cold start", "accuracy only"): "ch11_self_acc_seed{}_cpu",
    ("self-distilled cold start", "+ language"): "ch11_self_lang_seed{}_cpu",
}
metrics, evals = {}, {}
for (start, arm), pattern in RUN_NAMES.items():
    for seed in SEEDS:
        folder = RUNS / pattern.format(seed)
        metrics[start, arm, seed] = pd.read_csv(folder / "metrics.csv")
        evals[start, arm, seed] = pd.read_csv(folder / "eval.csv")
listing = pd.DataFrame([
    {"start": start, "arm": arm, "seed": seed, "folder": RUN_NAMES[start, arm]
     .format(seed), "steps": int(m["step"].max()),
     "step time (s)": round(m["time_step"].sum())}
    for (start, arm, seed), m in metrics.items()])
listing

# %% [markdown]
# The step times are from a 2-core CPU running two runs at a time, one torch thread
# each. A reward logged at weight 0 changes nothing in training: each accuracy-only
# run of the cold start repeats the run of chapter 10 with the same seed, column for
# column.

# %%
for seed in SEEDS:
    ours = metrics["cold start", "accuracy only", seed]
    theirs = pd.read_csv(RUNS / f"ch10_grpo_cold_start_lr1e-4_seed{seed}_cpu"
                         / "metrics.csv")
    shared = [c for c in theirs.columns
              if c in ours.columns and not c.startswith("time_")]
    same = all(ours[c].equals(theirs[c]) for c in shared)
    print(f"seed {seed}: {len(shared)} shared columns (timings left out), "
          f"all equal: {same}")


# %%
def final(ev, column):
    """The value of `column` at a run's final evaluation (its largest step)."""
    return ev.loc[ev["step"].idxmax(), column]


def first_zero(ev, column="lang_mix_rate"):
    """The first evaluated step where `column` is 0 (None if never)."""
    steps = ev.loc[ev[column] == 0, "step"]
    return None if steps.empty else int(steps.min())


ARM_STYLE = {"accuracy only": "C0", "+ language": "C1", "+ language, GDPO": "C2"}


def plot_evals(start, arms, columns, titles):
    """Two panels: each column of eval.csv over the steps, one line per arm and
    seed."""
    fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.7), layout="constrained")
    for ax, column, title in zip(axes, columns, titles):
        later = []  # every run's values after step 0
        for arm in arms:
            for seed in SEEDS:
                ev = evals[start, arm, seed]
                ax.plot(ev["step"], ev[column], color=ARM_STYLE[arm], marker=".",
                        ls="-" if seed == 0 else "--", label=f"{arm}, seed {seed}")
                later += ev.loc[ev["step"] > 0, column].tolist()
        if later and max(later) == 0:  # the lines lie on each other at 0
            ax.text(0.97, 0.5, "0 after step 0, every run", ha="right",
                    transform=ax.transAxes, fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
               ncol=2, fontsize=9)
    return fig, axes


# %% [markdown]
# (ch11-cold)=
# ### From the cold-start model: R1's order

# %%
fig, axes = plot_evals("cold start", ["accuracy only", "+ language"],
                       ["lang_mix_rate", "strict_acc"],
                       ["held-out language-mixed rate", "held-out strict accuracy"])
axes[0].set_ylim(-0.01, 0.3)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
cold_mix = pd.concat([evals["cold start", arm, seed]["lang_mix_rate"]
                      for arm in ("accuracy only", "+ language") for seed in SEEDS])
cold_lang_reward = pd.concat([metrics["cold start", "+ language", seed]
                              ["reward/language_consistency_reward"] for seed in SEEDS])
n_sampled = sum(len(metrics["cold start", "+ language", seed]) for seed in SEEDS) * 128
lost = sum(((1 - metrics["cold start", "+ language", seed]
             ["reward/language_consistency_reward"]) * 128).sum() for seed in SEEDS)
say(f"From the cold-start model the held-out language-mixed rate is at most "
    f"{cold_mix.max():.3f} at every evaluation of all four runs, with the language "
    f"reward and without it. During training, the mean language reward of the two "
    f"language runs' sampled completions (temperature 1) is between "
    f"{cold_lang_reward.min():.4f} and {cold_lang_reward.max():.4f} per step; added "
    f"up over all {n_sampled:,} sampled completions, the language reward they missed "
    f"is worth {lost:.0f} completions written entirely in Chinese.")

# %% [markdown]
# **Nothing to remove.** The cold start already did the language reward's job: SFT
# on English traces left no Chinese in the greedy answers, and almost none in the
# sampled ones. Where every completion of a group scores 1.0 on language, the language
# term adds the same 0.2 to each of them, the group mean takes it away again, and it
# changes no advantage ({doc}`01_two_plus_three_times_four`); it acts only on the rare
# group with a mixed sample. On this start the reward is a guard against a drift that
# did not happen. DeepSeek added it because their RL stage still mixed languages
# after the cold start, "particularly when RL prompts involve multiple languages"
# {cite}`deepseekai2025r1`; the prompts here are all English. Could this book's
# model take prompts in two languages? Ask the cold-start model the first held-out
# problems in Chinese, three ways, and sample 4 answers each:

# %%
# NBVAL_IGNORE_OUTPUT
cold_model, cold_tok = load_model_and_tokenizer(
    REPO / "data" / "models" / "tiny-qwen2-cold-start", device=P.device)
wordings = {"English (as trained)": "What is {q}?",
            **{f"Chinese {k + 1}": w for k, w in enumerate(CHINESE_WORDINGS)}}
n_zh = P.pick(smoke=8, cpu=200, gpu=200)
zh_rows = {}
for name, wording in wordings.items():
    rows = [dict(r, prompt=[{"role": "user",
                             "content": wording.format(q=r["question"])}])
            for r in test_set.select(range(n_zh))]
    table = evaluate(cold_model, cold_tok, rows, n=n_zh, num_samples=4,
                     max_new_tokens=128)
    zh_rows[name] = table.loc["sampled", ["strict_acc", "format_rate", "lang_mix_rate"]]
zh_table = pd.DataFrame(zh_rows).T
zh_table

# %%
zh_only = zh_table.drop(index="English (as trained)")
say(f"Asked in Chinese, the cold-start model is right in "
    f"{zh_only['strict_acc'].min():.3f}-{zh_only['strict_acc'].max():.3f} of its "
    f"sampled answers and well formatted in {zh_only['format_rate'].min():.3f}-"
    f"{zh_only['format_rate'].max():.3f}, against "
    f"{zh_table.iloc[0]['strict_acc']:.3f} and {zh_table.iloc[0]['format_rate']:.3f} "
    f"in English.")

# %% [markdown]
# The model has never seen a Chinese question (its corpus writes Chinese only into
# some answers, {doc}`05_tiny_base_model`), and its byte-level tokenizer spells the
# characters of one as bytes it has no use for. The digits and operators are still
# there, in the same characters as always, yet the model no longer finds its way to
# them. Would RL teach it to, and would the mixing come back with prompts in two
# languages, as it did for DeepSeek? The third pair of runs tries it.
#
# (ch11-two-languages)=
# ### From the cold-start model, on prompts in two languages
#
# The cold-start runs again, with one change: every other training prompt is asked in
# Chinese (`task=arithmetic_bilingual`, the three Chinese wordings above in turn), and
# the harness asks the 500 held-out problems the same way. The language reward's target
# stays English, the language of the cold-start traces, whatever the question's
# language: this model reasons in English only.

# %%
fig, axes = plot_evals("two languages", ["accuracy only", "+ language"],
                       ["lang_mix_rate", "format_rate"],
                       ["held-out language-mixed rate", "held-out format rate"])
axes[0].set_ylim(-0.01, 0.3)
plt.show()

# %% [markdown]
# The mixed set's accuracy averages two very different halves, so the final
# checkpoints were also evaluated on the 500 problems asked all in English and all in
# Chinese, greedy and with 4 samples each at temperature 1 (`sampled_eval_en.csv`,
# `sampled_eval_zh.csv` in each run folder):

# %%
def by_language(arm, seed):
    """Final checkpoint of a two-language run on the problems asked in each
    language."""
    folder = RUNS / RUN_NAMES["two languages", arm].format(seed)
    row = {}
    for lang in ("en", "zh"):
        ev = pd.read_csv(folder / f"sampled_eval_{lang}.csv", index_col="mode")
        row[f"strict, {lang}"] = ev.loc["greedy", "strict_acc"]
        row[f"format sampled, {lang}"] = ev.loc["sampled", "format_rate"]
        row[f"mixed sampled, {lang}"] = ev.loc["sampled", "lang_mix_rate"]
    return row


ARMS = ("accuracy only", "+ language")
two_lang = pd.DataFrame({f"{arm}, seed {seed}": by_language(arm, seed)
                         for arm in ARMS for seed in SEEDS}).T
two_lang

# %%
mixed_zh = {arm: two_lang.loc[[f"{arm}, seed {s}" for s in SEEDS], "mixed sampled, zh"]
            for arm in ARMS}
n_zh_sampled = 500 * 4
say(f"After 150 steps the four runs format "
    f"{two_lang['format sampled, zh'].min():.3f}-"
    f"{two_lang['format sampled, zh'].max():.3f} of their sampled answers to Chinese "
    f"questions, and their greedy accuracy on those questions is "
    f"{two_lang['strict, zh'].min():.3f}-"
    f"{two_lang['strict, zh'].max():.3f}, against {two_lang['strict, en'].min():.3f}-"
    f"{two_lang['strict, en'].max():.3f} on the same problems in English (the cold "
    f"start, sampled: format {zh_only['format_rate'].min():.3f}-"
    f"{zh_only['format_rate'].max():.3f}, right {zh_only['strict_acc'].min():.3f}-"
    f"{zh_only['strict_acc'].max():.3f}). Of the "
    f"{n_zh_sampled:,} sampled answers to Chinese questions, "
    f"{mixed_zh['accuracy only'].iloc[0] * n_zh_sampled:.0f} and "
    f"{mixed_zh['accuracy only'].iloc[1] * n_zh_sampled:.0f} mix languages without the "
    f"language reward, {mixed_zh['+ language'].iloc[0] * n_zh_sampled:.0f} and "
    f"{mixed_zh['+ language'].iloc[1] * n_zh_sampled:.0f} with it (seeds 0 and 1).")

# %% [markdown]
# RL taught the form of an answer to a Chinese question and not its content. A reward
# of 1 needs the right number, and right answers to Chinese questions are so rare in
# the groups that 150 steps give the accuracy reward little to pull on, while the
# format reward pays for every well-formed answer. The mixing did not come back: a few
# sampled answers in a thousand, and no fewer with the language reward than without.
# DeepSeek's case, a policy that drifts into a second language during RL, needs a
# model that can reason in that language; this one cannot, so there is nothing for the
# reward to remove, whichever language the question comes in. Multilingual RL prompts
# in earnest would need a base model pretrained on questions in both languages. With
# this one, to see the reward act, start where there is mixing to remove: the base
# model.
#
# (ch11-base)=
# ### From the base model: R1-Zero with the language reward

# %%
fig, axes = plot_evals("base", ["accuracy only", "+ language"],
                       ["lang_mix_rate", "strict_acc"],
                       ["held-out language-mixed rate", "held-out strict accuracy"])
plt.show()

# %% [markdown]
# And what training saw, the mean language reward of each step's sampled completions
# (a 10-step running mean; the accuracy-only runs log it with weight 0):

# %%
def plot_r_lang(start):
    """The mean language reward of each step's samples (10-step running mean), one
    line per arm and seed."""
    fig, ax = plt.subplots(figsize=(7.3, 3.0), constrained_layout=True)
    for arm in ("accuracy only", "+ language"):
        for seed in SEEDS:
            m = metrics[start, arm, seed]
            ax.plot(m["step"], m["reward/language_consistency_reward"]
                    .rolling(10, min_periods=1).mean(), color=ARM_STYLE[arm],
                    ls="-" if seed == 0 else "--", label=f"{arm}, seed {seed}")
    ax.set_xlabel("step")
    ax.set_ylabel("mean r_lang of samples")
    low, high = ax.get_ylim()
    ax.set_ylim(low - 0.35 * (high - low), high)  # room below the curves
    ax.legend(fontsize=9, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    return fig, ax


plot_r_lang("base")
plt.show()

# %% [markdown]
# Per seed: the held-out language-mixed rate at the final evaluation (`end`, step
# 150) and averaged over the evaluations during training (`during`, the steps after
# 0), and the mean language reward of the completions sampled in the last 25 training
# steps (`r_lang`, 1.0 when no sampled reasoning had a Chinese character). A greedy
# answer shows the model's most likely habit only; so the final checkpoints were also
# evaluated on the same 500 problems with 4 samples each at temperature 1, the
# sampling of training (`sampled`: the share of sampled answers with a Chinese
# character; `sampled_eval.csv` in each run folder). `ctrl` is the accuracy-only run,
# `arm` the run with the language reward:

# %%
# NBVAL_IGNORE_OUTPUT
def during(ev, column="lang_mix_rate"):
    """Mean of `column` over the evaluations after step 0."""
    return ev.loc[ev["step"] > 0, column].mean()


def sampled_lang(m, last=25):
    """Mean language reward of the completions sampled in the last `last` steps."""
    column = "reward/language_consistency_reward"
    return m[column].tail(last).mean() if column in m else float("nan")


def sampled_rate(start, arm, seed, column="lang_mix_rate"):
    """A rate of the final checkpoint's sampled held-out answers (`column` of
    sampled_eval.csv; by default the language-mixed share)."""
    path = RUNS / RUN_NAMES[start, arm].format(seed) / "sampled_eval.csv"
    if not path.exists():  # the GDPO runs kept no checkpoint
        return float("nan")
    return pd.read_csv(path, index_col="mode").loc["sampled", column]


def mixing_table(start, arm, control="accuracy only"):
    """Language mixing of `arm` and its control, one row per seed."""
    rows = {}
    for seed in SEEDS:
        c, t = evals[start, control, seed], evals[start, arm, seed]
        end_c, end_t = final(c, "lang_mix_rate"), final(t, "lang_mix_rate")
        sampled_c = sampled_rate(start, control, seed)
        sampled_t = sampled_rate(start, arm, seed)
        rows[f"{start}, seed {seed}"] = {
            "end, ctrl": end_c, "end, arm": end_t,
            "during, ctrl": during(c), "during, arm": during(t),
            "r_lang, ctrl": sampled_lang(metrics[start, control, seed]),
            "r_lang, arm": sampled_lang(metrics[start, arm, seed]),
            "sampled, ctrl": sampled_c, "sampled, arm": sampled_t,
            "lower at end": bool(end_t < end_c),
            "lower during": bool(during(t) < during(c)),
            "lower sampled": (None if np.isnan(sampled_t)
                              else bool(sampled_t < sampled_c))}
    return pd.DataFrame(rows).T.dropna(axis=1, how="all")


mixing = {start: mixing_table(start, "+ language")
          for start in ("cold start", "two languages", "base")}
for start, table in mixing.items():
    print(f"{start}: ctrl = accuracy only, arm = + language")
    display(table)
    print(f"language run lower in both seeds at the final evaluation: "
          f"{bool(table['lower at end'].all())}; on average during training: "
          f"{bool(table['lower during'].all())}; in the sampled answers of the "
          f"final checkpoint: {bool(table['lower sampled'].all())}")

# %%
# NBVAL_IGNORE_OUTPUT
base_mix = mixing["base"]
zero_step = [first_zero(evals["base", "+ language", s]) for s in SEEDS]
at_25 = [evals["base", "+ language", s].set_index("step").loc[25, "lang_mix_rate"]
         for s in SEEDS]
start_mix = evals["base", "accuracy only", 0].set_index("step").loc[0, "lang_mix_rate"]
say(f"With the language reward the held-out mixing falls from {start_mix:.3f} to "
    f"{at_25[0]:.3f} and {at_25[1]:.3f} at the first evaluation (step 25) and is 0 "
    f"from step {zero_step[0]} (seed 0) and {zero_step[1]} (seed 1) on; in the last "
    f"25 steps the sampled completions score {base_mix['r_lang, arm'].iloc[0]:.3f} "
    f"and {base_mix['r_lang, arm'].iloc[1]:.3f} on language. Without it, seed 0 ends "
    f"at {base_mix['end, ctrl'].iloc[0]:.3f} and seed 1 at "
    f"{base_mix['end, ctrl'].iloc[1]:.3f}, while the sampled completions of both "
    f"still score only {base_mix['r_lang, ctrl'].iloc[0]:.3f} and "
    f"{base_mix['r_lang, ctrl'].iloc[1]:.3f}. Sampled at temperature 1, the final "
    f"accuracy-only models mix languages in {base_mix['sampled, ctrl'].iloc[0]:.3f} "
    f"and {base_mix['sampled, ctrl'].iloc[1]:.3f} of their answers, the language "
    f"runs in {base_mix['sampled, arm'].iloc[0]:.4f} and "
    f"{base_mix['sampled, arm'].iloc[1]:.4f}.")
cold = mixing["cold start"]
say(f"From the cold start, the sampled answers of the final checkpoints mix in "
    f"{cold['sampled, ctrl'].iloc[0]:.4f} and {cold['sampled, ctrl'].iloc[1]:.4f} "
    f"of the cases without the language reward and in "
    f"{cold['sampled, arm'].iloc[0]:.4f} and {cold['sampled, arm'].iloc[1]:.4f} with "
    f"it (seeds 0 and 1; the training samples' language reward: "
    f"{cold['r_lang, ctrl'].iloc[0]:.4f} and {cold['r_lang, ctrl'].iloc[1]:.4f} "
    f"against {cold['r_lang, arm'].iloc[0]:.4f} and {cold['r_lang, arm'].iloc[1]:.4f}"
    f" in the last 25 steps)"
    + (": the same rate in all four, the reward had nothing left to do."
       if len(set(cold[["sampled, ctrl", "sampled, arm"]].to_numpy().ravel())) == 1
       else "."))


def mixed_greedy(ev):
    """Greedy held-out answers with a Chinese character, summed over the evaluations
    after step 0."""
    later = ev[ev["step"] > 0]
    mixed = (later["lang_mix_rate"] * later["n"]).sum()
    return int(round(mixed)), int(later["n"].sum())


counts = {(arm, seed): mixed_greedy(evals["two languages", arm, seed])
          for arm in ("accuracy only", "+ language") for seed in SEEDS}
say("On prompts in two languages the comparison during training rests on a handful "
    "of answers: " + "; ".join(
        f"{arm}, seed {seed}: {k} of {n:,} greedy answers mixed"
        for (arm, seed), (k, n) in counts.items()) + ".")

# %% [markdown]
# The language reward does its job in both seeds, quickly. Without it, the mixing is
# left to chance: accuracy-only RL reinforces whatever habit comes with right
# answers, and which habit that is differs between seeds. Seed 0 keeps its Chinese
# connectives; seed 1 drifts to English greedy answers by the last evaluation. So the
# answer to "is the language run lower in both seeds?" depends on how you look: in
# the greedy answers of the final evaluation it is lower in seed 0 and tied at zero in
# seed 1; averaged over training it is lower in both. A greedy zero is not a sampled
# zero, though: the accuracy-only seed 1 model still writes Chinese connectives in a
# large share of its sampled answers, where the language run's samples are almost all
# English, and in the sampled answers the language run is lower in both seeds. The
# reward changed the distribution, not only its mode.
#
# And the accuracy. Is a difference a cost or noise? Two yardsticks: a strict
# accuracy on 500 problems has a binomial standard error of about
# $\sqrt{p(1-p)/500}$, and two seeds of the same configuration differ too. Besides the
# final evaluation (`end`), the table averages the evaluations of the last third of
# each run (`late`, step $\ge$ 100), which is less noisy than one evaluation alone:

# %%
# NBVAL_IGNORE_OUTPUT
def late_mean(ev, column="strict_acc"):
    """Mean of `column` over the evaluations at step 100 and later."""
    return ev.loc[ev["step"] >= 100, column].mean()


def accuracy_table(start, arm, control="accuracy only"):
    """Held-out strict accuracy of `arm` and its control, one row per seed."""
    rows = {}
    for seed in SEEDS:
        c, t = evals[start, control, seed], evals[start, arm, seed]
        rows[f"{start}, seed {seed}"] = {
            "end, ctrl": final(c, "strict_acc"), "end, arm": final(t, "strict_acc"),
            "end, change": final(t, "strict_acc") - final(c, "strict_acc"),
            "late, ctrl": late_mean(c), "late, arm": late_mean(t),
            "late, change": late_mean(t) - late_mean(c)}
    return pd.DataFrame(rows).T


accuracy = {start: accuracy_table(start, "+ language")
            for start in ("cold start", "two languages", "base")}
for start, table in accuracy.items():
    print(f"{start}: ctrl = accuracy only, arm = + language")
    display(table)
acc_final = [final(evals["base", "accuracy only", s], "strict_acc") for s in SEEDS]
p = np.mean(acc_final)
stderr = np.sqrt(p * (1 - p) / 500)
base_cost = accuracy["base"]
cold_cost = accuracy["cold start"]
say(f"From the base model the language runs end "
    f"{base_cost['end, change'].iloc[0]:+.3f} and "
    f"{base_cost['end, change'].iloc[1]:+.3f} against the accuracy-only runs (seeds "
    f"0 and 1), and {base_cost['late, change'].iloc[0]:+.3f} and "
    f"{base_cost['late, change'].iloc[1]:+.3f} on the mean of the late evaluations. "
    f"The binomial standard error of one accuracy near {p:.2f} on 500 problems is "
    f"{stderr:.3f} (the final changes are "
    f"{abs(base_cost['end, change'].iloc[0]) / stderr:.1f} and "
    f"{abs(base_cost['end, change'].iloc[1]) / stderr:.1f} of it), and the two "
    f"accuracy-only seeds end "
    f"{abs(acc_final[0] - acc_final[1]):.3f} apart. From the cold-start model the "
    f"changes at the end are {cold_cost['end, change'].iloc[0]:+.3f} and "
    f"{cold_cost['end, change'].iloc[1]:+.3f}.")

# %% [markdown]
# From the base model the language reward costs accuracy, in both seeds, by several
# standard errors and by far more than the two accuracy-only seeds differ: the
# report's "slight degradation", and not so slight here. From the cold-start model,
# where the reward is dormant, the changes are within the noise. Why would a reward
# that only orders answers of equal correctness cost accuracy? Not because English
# traces are harder for this model: the accuracy-only seed 1 ends with English greedy
# answers at the same accuracy as seed 0. The answer is in how the rewards are
# combined.
#
# (ch11-gdpo)=
# ## Normalise, then sum: GDPO
#
# With several rewards GRPO sums first and normalises the sum in its group:
#
# $$
# r_i = \sum_k w_k\, r_{i,k}, \qquad
# \hat A_i = \frac{r_i - \bar r}{\sigma_r + \epsilon_{\mathrm{std}}}.
# $$
#
# The weights $w_k$ look like the say each reward has, but after the division what
# counts is each reward's *spread inside the group*, times its weight, next to the
# spread of the sum. A 0/1 accuracy reward that varies in a group spreads by a large
# share of its range; a language share that differs by one word in ten in one answer,
# times 0.2, spreads by far less, and disappears in the sum. In a group where every
# answer is right the opposite happens: the accuracy term is constant, the tiny language
# difference is all the spread there is, and the division blows it up to advantages of
# order 1, whatever its weight. Group reward-Decoupled normalization Policy Optimization
# (GDPO) {cite}`liu2026gdpo` normalises each reward inside its group first, sums with
# the weights, and standardises the sums over the whole batch:
#
# $$
# s_i = \sum_k w_k\,
#   \frac{r_{i,k} - \bar r_{g,k}}{\sigma_{g,k} + \epsilon_{\mathrm{std}}},
# \qquad
# \hat A_i = \frac{s_i - \bar s}{\sigma_s + \epsilon_{\mathrm{std}}},
# $$
#
# where $\bar r_{g,k}$, $\sigma_{g,k}$ are the mean and standard deviation of reward
# $k$ in the group of completion $i$, and $\bar s$, $\sigma_s$ those of all $s_i$ of
# the batch. TRL calls it `multi_objective_aggregation="normalize_then_sum"`
# {cite}`vonwerra2020trl`; `GRPOConfig` has the same field, and the trainer's
# `advantages` picks the branch:

# %%
show_source(GRPOTrainer.advantages, docstring=False)

# %%
show_source(decoupled_advantages, docstring=False)

# %% [markdown]
# A worked batch of two groups of four, rewards accuracy and language share with
# weights 1 and 0.2. In both groups the second answer is right but has one Chinese word
# in ten (share 0.9). In group A two answers are wrong; in group B all four are right:

# %%
# NBVAL_CHECK_OUTPUT
acc = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
lang = torch.tensor([1.0, 0.9, 1.0, 1.0, 1.0, 0.9, 1.0, 1.0])
weights = [1.0, 0.2]
summed = group_advantages(acc * weights[0] + lang * weights[1], 4)  # [8]
decoupled = decoupled_advantages(torch.stack([acc, lang], dim=1), weights, 4)  # [8]
worked_batch = pd.DataFrame({"group": ["A"] * 4 + ["B"] * 4, "r_acc": acc,
                             "r_lang": lang, "adv, sum first": summed,
                             "adv, normalise first": decoupled})
display(worked_batch.round(3))
for name, adv in (("sum first", summed), ("normalise first", decoupled)):
    slip_a, slip_b = adv[0] - adv[1], adv[4] - adv[5]  # English minus mixed, right
    right_wrong = adv[0] - adv[2]  # right minus wrong, both English, group A
    print(f"{name:>15}: one Chinese word costs {slip_a:.3f} in group A and "
          f"{slip_b:.3f} in group B; right vs wrong in group A: {right_wrong:.3f}")
gap = {name: ((a[0] - a[1]) / (a[0] - a[2])).item()
       for name, a in (("sum", summed), ("gdpo", decoupled))}
say(f"In group A the slip costs {gap['sum']:.2f} of a right-versus-wrong difference "
    f"when the rewards are summed first, and {gap['gdpo']:.2f} when they are "
    f"normalised first.")

# %% [markdown]
# Summing first, the same slip costs almost nothing in group A, where the accuracy
# difference sets the scale, and about two units in group B, where nothing else
# varies: more than a right-versus-wrong difference in group A. The weight 0.2 means
# nothing in either group. Normalising first, the slip costs the same in both groups,
# and in group A its share of a right-versus-wrong difference is close to the weight:
# in standardised units the language difference is 2 and the accuracy difference
# $\sqrt 3 \approx 1.73$, so the ratio is $0.2 \cdot 2 / 1.73 \approx 0.23$.
#
# The GDPO paper's own example is the other half of the argument: summing first
# collapses different reward combinations onto the same advantages. Two groups of two,
# rewards (accuracy, language): in X the wrong answer is also in Chinese, $(0, 0)$
# against $(1, 1)$; in Y both answers are in English, $(0, 1)$ against $(1, 1)$:

# %%
# NBVAL_CHECK_OUTPUT
pairs = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])  # X, then Y
print("sum then normalise:",
      group_advantages(pairs @ torch.tensor(weights), 2).numpy().round(3))
print("normalise then sum:", decoupled_advantages(pairs, weights, 2).numpy().round(3))

# %% [markdown]
# Summing first, X and Y get the same $\pm 0.707$: the advantage of the total cannot
# tell a right answer that is also the only English one from a right answer next to
# an English wrong one. Normalising first, X's right answer gets more, because it is
# better on two rewards.
#
# **The cost.** Normalising a reward inside its group removes its scale: only the
# pattern of who is above and below the group mean is left. A completion that mixes in
# one word of a hundred gets the same standardised language score as one written
# entirely in Chinese, and a reward whose differences are noise gets the same say as
# one whose differences matter (down to $\epsilon_{\mathrm{std}}$: spreads below about
# $10^{-4}$ are damped):

# %%
# NBVAL_CHECK_OUTPUT
for slip in (0.0, 0.9, 0.99):
    lang_a = torch.tensor([1.0, slip, 1.0, 1.0])
    acc_a = torch.tensor([1.0, 1.0, 0.0, 0.0])
    s = group_advantages(acc_a + 0.2 * lang_a, 4)
    d = decoupled_advantages(torch.stack([acc_a, lang_a], dim=1), weights, 4)
    print(f"second answer's share {slip:4.2f}: its advantage, sum first "
          f"{s[1]:+.3f}, normalise first {d[1]:+.3f}")

# %% [markdown]
# Summing first keeps *how much* a completion mixed (where accuracy varies); GDPO keeps
# only *that* it mixed more than its group. Choose GDPO when a reward that matters to
# you has a small natural scale (a language share that moves by a word, a length
# penalty, a format bonus next to a 0/1 accuracy) and you want its weight to mean the
# same in every group; keep the sum when a reward's size carries information, or when
# a reward is noisy, since GDPO amplifies a reward's noise to its weight times a unit
# spread in every group where it varies at all.
#
# (ch11-rollouts)=
# ### On real rollouts
#
# Which case dominates on this task? Sample eight completions per prompt from the base
# model at temperature 1, as a training step does, and score them with the three
# rewards:

# %%
# NBVAL_IGNORE_OUTPUT
N_GROUPS = P.pick(smoke=4, cpu=128, gpu=256)
t0 = time.perf_counter()
_, rollout = evaluate(base_model, tok, train_set, n=N_GROUPS, num_samples=8,
                      temperature=1.0, seed=0, return_samples=True, max_new_tokens=96)
rollout = rollout[rollout["mode"] == "sampled"].reset_index(drop=True)
completions, answers = rollout["completion"].tolist(), rollout["answer"].tolist()
per_func = torch.tensor([accuracy_reward(completions, answer=answers),
                         format_reward(completions),
                         language_consistency_reward(completions)]).T  # [B, 3]
print(f"{len(rollout)} completions ({N_GROUPS} prompts x 8) sampled and scored in "
      f"{time.perf_counter() - t0:.0f} s")

# %%
grouped = per_func.view(-1, 8, 3)  # [groups, G, K]
varies = (grouped != grouped[:, :1]).any(dim=1)  # [groups, K]
kinds = pd.crosstab(pd.Series(varies[:, 0].numpy(), name="accuracy varies"),
                    pd.Series(varies[:, 2].numpy(), name="language varies"))
display(kinds)
w3 = torch.tensor([1.0, 0.1, 0.2])
adv = {"sum then normalise": group_advantages(per_func @ w3, 8),
       "normalise then sum": decoupled_advantages(per_func, w3.tolist(), 8)}


def language_premium(advantages, in_groups):
    """Mean over groups of: mean advantage of the single-language answers minus mean
    advantage of the mixed ones (groups that have both)."""
    a = advantages.view(-1, 8)  # [groups, G]
    clean = grouped[:, :, 2] == 1.0  # [groups, G]
    both = in_groups & clean.any(1) & (~clean).any(1)  # [groups]
    gaps = [(a[g][clean[g]].mean() - a[g][~clean[g]].mean()).item()
            for g in both.nonzero().flatten().tolist()]
    return (np.mean(gaps) if gaps else float("nan")), len(gaps)


premium = {}
for label, mask in (("accuracy varies", varies[:, 0]),
                    ("accuracy constant", ~varies[:, 0])):
    for name, a in adv.items():
        value, count = language_premium(a, mask)
        premium[label, name] = {"groups": count, "language premium": value}
premium = pd.DataFrame(premium).T
display(premium.round(3))

# %%
# NBVAL_IGNORE_OUTPUT
prem = premium["language premium"]
n_groups = premium["groups"].astype(int)
say(f"Of the {N_GROUPS} groups, {n_groups['accuracy constant', 'sum then normalise']} "
    f"have answers that are all right or all wrong, some of them mixed: there, an "
    f"English answer gets {prem['accuracy constant', 'sum then normalise']:.2f} more "
    f"advantage than a mixed one when the rewards are summed first, and "
    f"{prem['accuracy constant', 'normalise then sum']:.2f} when they are normalised "
    f"first. In the {n_groups['accuracy varies', 'sum then normalise']} groups where "
    f"accuracy varies as well, the English answers get "
    f"{prem['accuracy varies', 'sum then normalise']:.2f} and "
    f"{prem['accuracy varies', 'normalise then sum']:.2f}: *less* than the mixed ones, "
    f"in both aggregations.")

# %% [markdown]
# Both halves of the argument show up at step 0. Where accuracy varies, the mixed
# answers are the better ones (they are the base model's correct traces), so the
# accuracy reward pulls towards Chinese whatever the aggregation. Where accuracy does
# not vary, the language reward is the only signal: summing first, it gets advantages
# of the size of a right-versus-wrong difference; normalising first, a fraction set by
# its weight. Which is better is a question for the runs.
#
# (ch11-gdpo-runs)=
# ### The GDPO runs
#
# The same base-model runs with `multi_objective_aggregation="normalize_then_sum"`,
# two seeds, next to the summed language runs:

# %%
fig, axes = plot_evals("base", ["+ language", "+ language, GDPO"],
                       ["lang_mix_rate", "strict_acc"],
                       ["held-out language-mixed rate", "held-out strict accuracy"])
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
gdpo_mixing = mixing_table("base", "+ language, GDPO")
print("base: ctrl = accuracy only, arm = + language, GDPO")
display(gdpo_mixing)
gdpo_accuracy = accuracy_table("base", "+ language, GDPO", control="+ language")
print("base: ctrl = + language (summed), arm = + language, GDPO")
display(gdpo_accuracy)
first_at_zero = pd.DataFrame({
    arm: [first_zero(evals["base", arm, seed]) for seed in SEEDS]
    for arm in ("accuracy only", "+ language", "+ language, GDPO")},
    index=[f"seed {seed}" for seed in SEEDS])
print("first evaluated step with a language-mixed rate of 0:")
display(first_at_zero)

# %%
# NBVAL_IGNORE_OUTPUT
end = {arm: [final(evals["base", arm, s], "strict_acc") for s in SEEDS]
       for arm in ("accuracy only", "+ language", "+ language, GDPO")}
say(f"With GDPO the held-out mixing is 0 from step "
    f"{first_at_zero['+ language, GDPO'].iloc[0]:.0f} (seed 0) and "
    f"{first_at_zero['+ language, GDPO'].iloc[1]:.0f} (seed 1) on, and the final "
    f"strict accuracy is {end['+ language, GDPO'][0]:.3f} and "
    f"{end['+ language, GDPO'][1]:.3f}, against {end['+ language'][0]:.3f} and "
    f"{end['+ language'][1]:.3f} for the summed language reward and "
    f"{end['accuracy only'][0]:.3f} and {end['accuracy only'][1]:.3f} without a "
    f"language reward. Its sampled completions score "
    f"{gdpo_mixing['r_lang, arm'].iloc[0]:.3f} and "
    f"{gdpo_mixing['r_lang, arm'].iloc[1]:.3f} on language in the last 25 steps, "
    f"the summed runs' {base_mix['r_lang, arm'].iloc[0]:.3f} and "
    f"{base_mix['r_lang, arm'].iloc[1]:.3f}.")

# %% [markdown]
# GDPO removes the mixing from the greedy answers as fast as the summed reward and
# gives back most of the accuracy the summed reward cost. Its sampled completions mix
# slightly more: the language reward now has the say of its weight and no more, so a
# few mixed samples survive where the summed reward pressed harder. The worked batch
# and the rollouts suggest why. Summing first, every group whose answers are all right
# but one reasons in Chinese gives the language reward an advantage as large as a
# right-versus-wrong difference, and on this model those groups fight the accuracy
# reward, which prefers the Chinese traces where accuracy varies. The updates they
# drive go to language rather than arithmetic. Normalising first caps them at the
# weight's share of a standardised difference. The runs are consistent with that
# account; they do not prove it, and two seeds on one task are a measurement, not a
# law. With a noisy small reward, the same normalisation would amplify the noise.
#
# (ch11-live)=
# ## A short run in this notebook
#
# The three arms once more, trained here from the base model: accuracy + format with
# the language reward logged only, the summed R1 reward, and the same with GDPO. In
# the `cpu` profile these are short runs (30 steps of 8 prompts; the cell prints how
# long each took), and the `gpu` profile runs the full configuration. Each
# model is then evaluated on the held-out problems, split by whether the problem has a
# subtraction, where the corpus put its Chinese words:

# %%
# NBVAL_IGNORE_OUTPUT
STEPS = P.pick(smoke=2, cpu=30, gpu=150)
PROMPTS = P.pick(smoke=2, cpu=8, gpu=16)
runs_dir = tempfile.mkdtemp(prefix="ch11_runs_")
COMMON = ["reward_funcs=[accuracy_reward, format_reward, language_consistency_reward]",
          f"model_name_or_path={BASE_DIR}", f"per_step_prompts={PROMPTS}",
          f"max_steps={STEPS}", f"micro_batch_size={PROMPTS * 8}", "eval_every=0",
          "eval_on_start=false", "save_every=0", "save_final=false", "sample_every=0",
          "progress_bar=false"]
LIVE = {"accuracy only": ["reward_weights=[1.0, 0.1, 0.0]"],
        "+ language": ["reward_weights=[1.0, 0.1, 0.2]"],
        "+ language, GDPO": ["reward_weights=[1.0, 0.1, 0.2]",
                             "multi_objective_aggregation=normalize_then_sum"]}
live = {"base model": (None, base_samples)}
for i, (arm, extra) in enumerate(LIVE.items()):
    config = load_config(CONFIG, COMMON + extra + [f"output_dir={runs_dir}/{i}"])
    model, _ = load_model_and_tokenizer(BASE_DIR, device=P.device)
    t0 = time.perf_counter()
    live_metrics = GRPOTrainer(model, tok, None, config, train_set).train()
    seconds = time.perf_counter() - t0
    _, samples = evaluate(model, tok, test_set, n=N_EVAL, return_samples=True,
                          max_new_tokens=96)
    samples["subtraction"] = samples["question"].str.contains("-")
    live[arm] = (live_metrics, samples)
    print(f"{arm}: {STEPS} steps x {PROMPTS} prompts in {seconds:.0f} s")
shutil.rmtree(runs_dir, ignore_errors=True)

# %%
# NBVAL_IGNORE_OUTPUT
def split_table(samples):
    """Strict accuracy and language-mixed rate, overall and by problem kind."""
    sub, other = samples[samples["subtraction"]], samples[~samples["subtraction"]]
    return {"strict": samples["correct"].mean(),
            "mixed": samples["lang_mixed"].mean(),
            "strict, with -": sub["correct"].mean(),
            "mixed, with -": sub["lang_mixed"].mean(),
            "strict, without -": other["correct"].mean(),
            "mixed, without -": other["lang_mixed"].mean()}


live_table = pd.DataFrame({arm: split_table(s) for arm, (_, s) in live.items()}).T
display(live_table.round(3))

# %%
# NBVAL_IGNORE_OUTPUT
lt = live_table
trend = "up from" if lt.loc["accuracy only", "mixed"] > lt.loc["base model", "mixed"] \
    else "against"
trained_acc = lt.loc[list(LIVE), "strict"].mean()
live_se = np.sqrt(trained_acc * (1 - trained_acc) / N_EVAL)
say(f"After {STEPS} steps the accuracy-only model mixes in "
    f"{lt.loc['accuracy only', 'mixed']:.3f} of its held-out answers ("
    f"{lt.loc['accuracy only', 'mixed, with -']:.3f} of its answers to problems with a "
    f"subtraction mix, and {lt.loc['accuracy only', 'mixed, without -']:.3f} of the "
    f"others), {trend} the base model's {lt.loc['base model', 'mixed']:.3f}; the "
    f"summed and GDPO language runs mix in {lt.loc['+ language', 'mixed']:.3f} and "
    f"{lt.loc['+ language, GDPO', 'mixed']:.3f}. The strict accuracies are "
    f"{lt.loc['accuracy only', 'strict']:.3f} (accuracy only), "
    f"{lt.loc['+ language', 'strict']:.3f} (summed) and "
    f"{lt.loc['+ language, GDPO', 'strict']:.3f} (GDPO), with a standard error of "
    f"about {live_se:.3f} each.")

# %% [markdown]
# A short run shows the first part of the story: without a language reward the
# accuracy reward spreads the Chinese traces, because they come with right answers;
# with it, they are gone within a few dozen steps, in both aggregations. One seed and
# a few dozen steps cannot settle an accuracy difference of a few points; the two
# seeds of the full runs above are where the cost of the summed reward shows.

# %% [markdown]
# (ch11-habits)=
# ## What accuracy-only RL does to a habit
#
# From the base model, accuracy-only RL raised the mixing at first in both seeds and
# then left where it ended up to chance; from the cold start it left it at zero; and
# the short run above spread it again in a few dozen steps. A reward that never looks
# at the language still moves it, through the advantages. In one group the update is
# $\sum_i \hat A_i \nabla_\theta \log \pi_\theta(o_i \mid q)$, so the completions
# $\mathcal H$ that show a habit (here: a Chinese character anywhere) get a net push
# of $|\mathcal H| \, \bar A_{\mathcal H}$, where $\bar A_{\mathcal H}$ is their mean
# advantage. If it is positive, the habit comes with answers that score above their
# group and RL spreads it; if it is negative, RL removes the habit by itself; near
# zero, the habit drifts.

# %%
show_source(habit_advantage)

# %% [markdown]
# A check you can do by hand: one group of four with rewards 1, 0, 1, 0 (mean 0.5,
# sample standard deviation $\sqrt{1/3}$, so advantages $\pm 0.5/\sqrt{1/3}$), the
# habit on the first right answer alone, on one right and one wrong answer, and on
# the wrong answers only:

# %%
hand_rewards = [1.0, 0.0, 1.0, 0.0]
for flags in ([True, False, False, False], [True, True, False, False],
              [False, True, False, True]):
    print(flags, f"{habit_advantage(hand_rewards, flags, 4):+.3f}")

# %% [markdown]
# Now the same quantity on real samples, at five starting points: the base model; a
# **lighter cold start**, the cold-start recipe shortened to 128 steps (2,048 of the
# annotated conversations, each seen once, with the cosine schedule completed within
# the 128; `configs/cold_start_light.yaml`),
# trained in the next cell; a **self-distilled cold start**, trained in the cell
# after it and described in {ref}`ch11-self`; the cold-start model (750 steps, three
# epochs); and the R1-Zero model, chapter 7's run after 150 steps of accuracy-only RL
# (`data/models/tiny-qwen2-r1-zero`). Each answers training problems 8 times at
# temperature 1, as in training, and each group is scored with the accuracy-only
# runs' reward, accuracy + 0.1 × format.

# %%
# NBVAL_IGNORE_OUTPUT
def cold_start_from(config, steps, name):
    """The base model after `steps` SFT steps of the recipe in `config`."""
    out = tempfile.mkdtemp(prefix="ch11_sft_")
    cfg = SFTConfig.from_yaml(REPO / "configs" / config, [
        f"output_dir={out}", "save_final=false", "logging_steps=0",
        "progress_bar=false", f"max_steps={steps}"])
    model, _ = load_model_and_tokenizer(BASE_DIR, device=P.device)
    t0 = time.perf_counter()
    SFTTrainer(model, tok, cfg, read_train_files(REPO / cfg.train_file, cfg)).train()
    print(f"{name}: {steps} SFT steps in {time.perf_counter() - t0:.0f} s")
    shutil.rmtree(out, ignore_errors=True)
    return model


light_model = cold_start_from("cold_start_light.yaml",
                              P.pick(smoke=2, cpu=128, gpu=128), "lighter cold start")

# %%
# NBVAL_IGNORE_OUTPUT
self_model = cold_start_from("cold_start_self.yaml", P.pick(smoke=2, cpu=40, gpu=40),
                             "self-distilled cold start")

# %%
# NBVAL_IGNORE_OUTPUT
N_HABIT = P.pick(smoke=4, cpu=200, gpu=500)
r1_zero_model, _ = load_model_and_tokenizer(REPO / "data" / "models"
                                            / "tiny-qwen2-r1-zero", device=P.device)
starts = {"base": base_model, "lighter cold start": light_model,
          "self-distilled cold start": self_model,
          "cold start": cold_model, "R1-Zero": r1_zero_model}
habit_reward = combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])
habit_rows, habit_samples = {}, {}  # per start: the table row, the scored samples
for name, model in starts.items():
    _, s = evaluate(model, tok, train_set, n=N_HABIT, num_samples=8, temperature=1.0,
                    seed=0, return_samples=True, max_new_tokens=128)
    s = s[s["mode"] == "sampled"].reset_index(drop=True)  # [N_HABIT * 8] rows
    reward = np.array(habit_reward(s["completion"].tolist(),
                                   answer=s["answer"].tolist()))
    habit_samples[name] = s.assign(reward=reward)
    mixed = s["lang_mixed"].to_numpy()
    habit_rows[name] = {
        "mixed share": mixed.mean(),
        "mixed answers": int(mixed.sum()),
        "right | mixed": s.loc[mixed, "correct"].mean() if mixed.any() else np.nan,
        "right | English": s.loc[~mixed, "correct"].mean(),
        "mean advantage, mixed": habit_advantage(reward, mixed, 8)}
habits = pd.DataFrame(habit_rows).T
habits

# %%
# NBVAL_IGNORE_OUTPUT
def habit_line(name):
    """One start's row of the habits table, in words."""
    row = habits.loc[name]
    if row["mixed answers"] == 0:
        return f"{name}: no mixed answer among {N_HABIT * 8:,}"
    k = int(row["mixed answers"])
    return (f"{name}: {k} mixed answer{'s' if k > 1 else ''} of {N_HABIT * 8:,}, "
            f"right in {row['right | mixed']:.2f} of them against "
            f"{row['right | English']:.2f} of the English ones, mean advantage "
            f"{row['mean advantage, mixed']:+.2f}")


say("; ".join(habit_line(name) for name in starts) + ".")


def direction(advantage, tol=0.05):
    """What accuracy-only RL does to a habit with this mean advantage."""
    if np.isnan(advantage):
        return "nothing to act on"
    if abs(advantage) <= tol:
        return "little push either way"
    return "spreads it" if advantage > 0 else "removes it"


say("Read as a prediction for accuracy-only RL: " + "; ".join(
    f"{name}, {direction(habits.loc[name, 'mean advantage, mixed'])}"
    for name in starts) + ".")

# %% [markdown]
# The sign explains the runs above. The base model's corpus wrote its Chinese
# connectives into good traces, so in a group a mixed answer usually beats its English
# siblings; accuracy-only RL reinforces it, and chapter 7's R1-Zero run ends with more
# Chinese than the base model wrote. By then the push is spent (R1-Zero's mixed and
# English answers are right about equally often), and the mixing it spread stays,
# with nothing to remove it. After supervised fine-tuning on English traces the same
# characters mean something else: a trace that has half left the base model's form
# and not yet reached the new one, usually wrong. There accuracy is already against
# mixing, and a language reward has little left to add. A model that still drifts
# into mixing during RL after its cold start, as DeepSeek report for theirs
# {cite}`deepseekai2025r1`, is one whose mixed traces are not worse ones; measuring
# the habit's advantage tells which case a model is in before training with the
# reward.

# %% [markdown]
# (ch11-light)=
# ### From a lighter cold start
#
# The table makes a prediction for a start whose sampled answers still mix: from the
# lighter cold start, accuracy-only RL should lower the mixing without any language
# reward, and the language reward can only make it go faster. Two seeds each,
# stored (`ch11_light_*`): the cold-start runs' settings (learning rate
# $10^{-4}$, 128 tokens) from the lighter cold start (the checkpoint that the SFT
# command in `data/runs/cold_start_light_cpu` makes), evaluated every 25 steps, the
# final checkpoints sampled 4 times on each of the 500 held-out problems as before.
# The greedy answers of this start have no Chinese character at all, so the figure
# follows what training sees, the mean language reward of each step's samples:

# %%
plot_r_lang("lighter cold start")
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
light_start = pd.read_csv(RUNS / "cold_start_light_cpu" / "sampled_eval.csv",
                          index_col="mode")
light_mix = mixing_table("lighter cold start", "+ language")
light_acc = accuracy_table("lighter cold start", "+ language")
display(light_mix)
display(light_acc)

# %%
# NBVAL_IGNORE_OUTPUT
def se_difference(p, q, n):
    """Binomial standard error of the difference of two rates, each from n answers:
    sqrt((p (1 - p) + q (1 - q)) / n)."""
    return np.sqrt((p * (1 - p) + q * (1 - q)) / n)


light_mix_0 = light_start.loc["sampled", "lang_mix_rate"]
n_light = 500 * 4  # sampled held-out answers per checkpoint
ctrl_end = light_mix["sampled, ctrl"].to_numpy(dtype=float)
arm_end = light_mix["sampled, arm"].to_numpy(dtype=float)
se_drop = se_difference(light_mix_0, ctrl_end, n_light)
say(f"The lighter cold start mixes in {light_mix_0:.3f} of its {n_light:,} sampled "
    f"held-out answers (greedy: {light_start.loc['greedy', 'lang_mix_rate']:.3f}). "
    f"After 150 steps the accuracy-only runs mix in {ctrl_end[0]:.4f} and "
    f"{ctrl_end[1]:.4f}, the language runs in {arm_end[0]:.4f} and {arm_end[1]:.4f} "
    f"(seeds 0 and 1). The accuracy-only runs end "
    f"{(light_mix_0 - ctrl_end[0]) / se_drop[0]:.1f} and "
    f"{(light_mix_0 - ctrl_end[1]) / se_drop[1]:.1f} binomial standard errors of the "
    f"difference below the start; "
    f"the language run is lower than its twin in "
    f"{int(light_mix['lower sampled'].sum())} of 2 seeds. Over the last 25 steps the "
    f"training samples score {light_mix['r_lang, ctrl'].iloc[0]:.4f} and "
    f"{light_mix['r_lang, ctrl'].iloc[1]:.4f} on language without the reward, "
    f"{light_mix['r_lang, arm'].iloc[0]:.4f} and "
    f"{light_mix['r_lang, arm'].iloc[1]:.4f} with it. Held-out strict accuracy goes "
    f"from {light_start.loc['greedy', 'strict_acc']:.3f} to "
    f"{light_acc['end, ctrl'].iloc[0]:.3f} and {light_acc['end, ctrl'].iloc[1]:.3f} "
    f"without the language reward and {light_acc['end, arm'].iloc[0]:.3f} and "
    f"{light_acc['end, arm'].iloc[1]:.3f} with it.")

# %% [markdown]
# The prediction holds in its direction, at the edge of what two seeds can show:
# accuracy-only RL lowered the sampled mixing of the lighter cold start in both seeds,
# by one to two standard errors, with no language reward to push it. The language
# reward added nothing that the held-out samples can see. With a few mixed samples in
# a hundred, most groups contain none, and in a group that does, the mixed answer is
# usually already the worse one, so the 0.2 of the language term moves an advantage
# that accuracy had set. Its trace is in the training samples, whose language reward
# ends a little higher with it than without, a difference in the third decimal. So
# on this model R1's language reward earns its keep only where a habit that
# readers do not want comes with right answers: in the base model, and, as the next
# runs show, in a cold start made from the base model's own answers.

# %% [markdown]
# (ch11-self)=
# ### From a self-distilled cold start
#
# Both cold starts so far fine-tune the base model on traces that someone else wrote,
# the annotator's, and the habit table shows what that does to the mixed answers
# that survive it: they become the confused ones. A cold start can also be made from
# the base model's own answers. Among its cold-start sources the R1 report lists
# prompting a model directly for detailed answers {cite}`deepseekai2025r1`; here the
# model prompted is the base model itself. It answers each of the annotator's 4,000
# training questions 4 times at temperature 1, its answers pass the filters of
# chapter 10's R1-Zero source (right, well formatted, English only, not repetitive,
# not truncated, then one per question; {ref}`ch10-sources`), and the base model is
# fine-tuned on the survivors for 40 steps of 16 (`configs/cold_start_self.yaml`,
# trained in the habit cell above). It is taught nothing it did not already write;
# it is taught which of its own answers to prefer.

# %%
self_yield = pd.read_csv(REPO / "data" / "cold_start" / "base_self_yield.csv",
                         index_col="stage")
self_start = pd.read_csv(RUNS / "cold_start_self_cpu" / "sampled_eval.csv",
                         index_col="mode")
self_yield[["kept", "kept / previous", "prompts"]]

# %%
# NBVAL_IGNORE_OUTPUT
say(f"{self_yield.loc['one_per_question', 'kept']:,} of the "
    f"{self_yield.loc['sampled', 'kept']:,} sampled answers survive, one for each of "
    f"{self_yield.loc['one_per_question', 'prompts']:,} questions; the language filter "
    f"alone drops {self_yield.loc['single_language', 'dropped']:,} right, "
    f"well-formatted answers. On the 500 held-out problems (`data/runs/"
    f"cold_start_self_cpu`, 96 new tokens) the checkpoint answers greedily with strict "
    f"accuracy {self_start.loc['greedy', 'strict_acc']:.3f}, format "
    f"{self_start.loc['greedy', 'format_rate']:.3f} and language-mixed "
    f"{self_start.loc['greedy', 'lang_mix_rate']:.3f}; its sampled answers "
    f"(4 per problem, temperature 1) mix in "
    f"{self_start.loc['sampled', 'lang_mix_rate']:.4f}. In the habit table: "
    f"{habit_line('self-distilled cold start')}, which reads as \""
    f"{direction(habits.loc['self-distilled cold start', 'mean advantage, mixed'])}\".")

# %% [markdown]
# By the harness this start is as clean as a cold start needs to be: no Chinese
# character in a greedy answer, every greedy answer well formatted. Its sampled
# answers still mix now and then, and those mixed answers are not the worse ones.
# This is the case the R1 report describes for its own cold-start model, which still
# drifted into mixed languages during RL. The runs (`ch11_self_*`, stored): chapter
# 7's configuration from this start, with and without the language reward, two seeds
# each, evaluated every 25 steps, the final checkpoints sampled 4 times on each of
# the 500 held-out problems. The figure follows the language reward of the training
# samples:

# %%
plot_r_lang("self-distilled cold start")
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
self_mix = mixing_table("self-distilled cold start", "+ language")
self_acc = accuracy_table("self-distilled cold start", "+ language")
display(self_mix)
display(self_acc)


# %%
# NBVAL_IGNORE_OUTPUT
ctrl = self_mix["sampled, ctrl"].to_numpy(dtype=float)
arm = self_mix["sampled, arm"].to_numpy(dtype=float)
se_arms = se_difference(ctrl, arm, n_light)  # the same 500 x 4 answers per run
self_sampled = {a: [sampled_rate("self-distilled cold start", a, s, "strict_acc")
                    for s in SEEDS] for a in ARMS}
say(f"From the self-distilled start (sampled mixing "
    f"{self_start.loc['sampled', 'lang_mix_rate']:.4f}), the accuracy-only runs end "
    f"with {ctrl[0]:.4f} and {ctrl[1]:.4f} of their sampled held-out answers mixed, "
    f"the language runs with {arm[0]:.4f} and {arm[1]:.4f} (seeds 0 and 1): lower in "
    f"{int(self_mix['lower sampled'].sum())} of 2 seeds, by "
    f"{(ctrl[0] - arm[0]) / se_arms[0]:.1f} and {(ctrl[1] - arm[1]) / se_arms[1]:.1f} "
    f"binomial standard errors of the difference. At the final greedy evaluation "
    f"the language-mixed rate is {self_mix['end, ctrl'].max():.3f} without the reward "
    f"and {self_mix['end, arm'].max():.3f} with it, in both seeds. Over the last 25 "
    f"steps the training samples score "
    f"{self_mix['r_lang, ctrl'].iloc[0]:.4f} and {self_mix['r_lang, ctrl'].iloc[1]:.4f}"
    f" on language without the reward, {self_mix['r_lang, arm'].iloc[0]:.4f} and "
    f"{self_mix['r_lang, arm'].iloc[1]:.4f} with it. Held-out strict accuracy, greedy: "
    f"{self_acc['end, ctrl'].iloc[0]:.3f} and {self_acc['end, ctrl'].iloc[1]:.3f} "
    f"without, {self_acc['end, arm'].iloc[0]:.3f} and "
    f"{self_acc['end, arm'].iloc[1]:.3f} with; sampled: "
    f"{self_sampled['accuracy only'][0]:.4f} and "
    f"{self_sampled['accuracy only'][1]:.4f} without, "
    f"{self_sampled['+ language'][0]:.4f} and {self_sampled['+ language'][1]:.4f} "
    f"with.")

# %% [markdown]
# Here is R1's stage 2 as the report tells it, on a tiny scale. After a cold start whose
# greedy answers are English, accuracy-only RL keeps the mixing alive in the sampled
# answers, the ones training learns from, because a mixed answer here is at least as
# likely to be right as an English one and nothing else acts on it. The language reward
# removes it, in both seeds, by several standard errors. The greedy answers cannot show
# the difference: they were English before RL and stay English in all four runs, which
# is why this chapter reads the sampled answers and the training samples next to the
# greedy ones. The accuracy cost that the base-model runs showed does not appear here:
# greedy, the language runs end level with their twins or above them; sampled, one seed
# is lower and the other higher, each by less than the two accuracy-only seeds differ.
# What a cold start does to a habit depends on whose traces it learns: from another
# writer's traces the model relearns the habit as a mark of confusion; its own preferred
# answers leave the habit as it was. The habit's mean advantage, measured before
# training, tells which case a model is in.

# %% [markdown]
# (ch11-summary)=
# ## What to notice
#
# - R1's language-consistency reward is the share of the reasoning's words in the
#   target language, added to the accuracy reward; with a weight of 0.2 it orders
#   answers of equal correctness and never lifts a wrong answer above a right one.
# - The harness's language-mixed rate is stricter and coarser: one CJK character
#   anywhere makes a completion mixed. Report it next to the reward, and look at the
#   sampled completions too: a greedy zero can hide a mixing policy.
# - From the cold-start model there was nothing to remove: SFT on English traces had
#   already done it, and the reward stayed dormant at no measurable cost. Prompts in
#   two languages did not bring the mixing back: RL taught the model the format of an
#   answer to a Chinese question but not the answer, and sampled mixing stayed at a
#   few answers in a thousand, with the reward and without.
# - From the base model the reward removed the mixing within a few dozen steps in
#   both seeds. Without it, mixing was left to chance: it stayed in one seed and faded
#   from the greedy answers of the other.
# - Summed with the accuracy reward, it cost several points of held-out accuracy in
#   both seeds. GDPO's normalise-then-sum removed the mixing as fast and cost much
#   less: summing first gives a small-scale reward full-size advantages wherever the
#   big reward is constant and almost none where it varies; normalising first gives
#   it its weight everywhere, noise included.
# - A reward that never looks at a habit still moves it, by the habit's mean
#   advantage: up where it comes with right answers (Chinese connectives in the base
#   model), down where it comes with wrong ones (after the cold start). From a lighter
#   cold start whose samples still mix, accuracy-only RL lowered the mixing by itself,
#   and the language reward added nothing measurable.
# - A cold start distilled from the base model's own right, English answers is clean
#   by the greedy harness and keeps mixed samples that are not the worse ones. From
#   there accuracy-only RL kept the mixing in the sampled answers and the language
#   reward removed it, in both seeds, with no accuracy cost beyond the seed spread:
#   the case the R1 report describes. The greedy answers were English in all four
#   runs; only the samples showed the difference.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch11`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch11`.
#
# **11.1 — The language share by hand.** Write `my_language_share(reasoning)`: the
# share of English units in a reasoning text, one unit per English word and one per
# Chinese character (`"\u4e00"` to `"\u9fff"`), digits and symbols not counted; a
# reasoning without any unit scores 1.0 and a blank one 0.0. Do not call
# `script_counts`.

# %%
from grpo_lib.exercises.ch11 import (check_habit_advantage, check_language_share,
                                     check_lower_in_every_seed,
                                     check_normalize_then_sum)


def my_language_share(reasoning):
    # your code here
    raise NotImplementedError


try:
    check_language_share(my_language_share)
except NotImplementedError:
    print("Not implemented yet: count two kinds of units with two regular "
          "expressions; think about what a unit is in a language without spaces.")

# %% [markdown]
# **11.2 — Normalise, then sum.** Write `my_normalize_then_sum(rewards_per_func,
# weights, group_size)`: `rewards_per_func` is a list of $B$ rows of $K$ rewards
# (groups of `group_size` contiguous rows); return the $B$ GDPO advantages of the
# formula above, with sample standard deviations and
# $\epsilon_{\mathrm{std}} = 10^{-4}$, without calling `decoupled_advantages`.

# %%
def my_normalize_then_sum(rewards_per_func, weights, group_size):
    # your code here
    raise NotImplementedError


try:
    check_normalize_then_sum(my_normalize_then_sum)
except NotImplementedError:
    print("Not implemented yet: reshape to (groups, G, K), standardise along the "
          "group axis, then combine the K columns; one more step remains after that.")

# %% [markdown]
# **11.3 — Lower in every seed?** Write `my_lower_in_every_seed(treated, control,
# column)`: `treated` and `control` map a seed to a run's `eval.csv` table; return
# whether `column` at each run's final evaluation is lower in the treated run than in
# its control, in every seed. Then apply it to the runs of this chapter.

# %%
def my_lower_in_every_seed(treated, control, column="lang_mix_rate"):
    # your code here
    raise NotImplementedError


try:
    check_lower_in_every_seed(my_lower_in_every_seed)
except NotImplementedError:
    print("Not implemented yet: find each table's final evaluation by its step, "
          "then decide seed by seed.")

# %% [markdown]
# **11.4 — Think.** (a) The R1 report sums the accuracy and language rewards without
# a weight. With a weight of 1 on the language term, which two completions of a group
# tie, and why does a weight of 0.2 avoid it? (b) Which completion scores 1.0 on
# language without a single English word, and which measurement of this chapter would
# notice a model that learned to write it? (c) A group of eight answers, all right,
# one of which has a single Chinese word among twenty English ones. What advantage does
# that answer get when the rewards are summed first, and what with GDPO?
#
# **11.5 — The push on a habit.** Write `my_habit_advantage(rewards, has_habit,
# group_size)`: the mean group-relative advantage of the completions whose flag in
# `has_habit` is true (groups of `group_size` contiguous rewards, sample standard
# deviation, $\epsilon_{\mathrm{std}} = 10^{-4}$), `nan` when no flag is true, without
# calling `habit_advantage` or `group_advantages`. Then use it on a habit of your
# choice in the samples of {ref}`ch11-habits` (`habit_samples[start]` holds each
# start's scored samples, its `reward` column the training reward; try
# `"self_correction"`, or a `length` above the median): which way would
# accuracy-only RL move it from each start?

# %%
def my_habit_advantage(rewards, has_habit, group_size):
    # your code here
    raise NotImplementedError


try:
    check_habit_advantage(my_habit_advantage)
except NotImplementedError:
    print("Not implemented yet: reshape the rewards to (groups, G) and standardise "
          "each group; then keep only the flagged completions.")
