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
# (ch13)=
# # RL for all scenarios: a learned reward model
#
# DeepSeek-R1's last stage runs RL once more, on every kind of prompt the model will
# meet. For reasoning prompts the reward stays what it was since R1-Zero: rules that
# check the answer. For general prompts no rule exists, and R1 turns to **reward
# models** trained on human preferences: one for helpfulness, which reads only the
# final summary, and one for harmlessness, which reads the whole response, reasoning
# included {cite}`deepseekai2025r1`. The same paper explains why R1-Zero had none: a
# neural reward model "may suffer from reward hacking in the large-scale reinforcement
# learning process", and retraining it costs resources and complicates the pipeline.
#
# This chapter builds a reward model the way InstructGPT's were built
# {cite}`ouyang2022instructgpt`, from pairwise preferences, and then does what R1
# chose not to do: it trains the policy on arithmetic against the learned reward in
# place of the rule. Arithmetic lets us watch both at once: the reward model says how
# good an answer looks, and the rule says whether it is right.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import json
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib import reward_model as rm_lib
from grpo_lib.display import say, show_source
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.parsing import is_well_formatted
from grpo_lib.plots import read_metrics
from grpo_lib.profiles import profile
from grpo_lib.rejection import sample_candidates
from grpo_lib.reward_model import (RewardModel, best_of_n, bradley_terry_loss,
                                   load_reward_model, pairwise_accuracy,
                                   preference_pairs, preference_probability,
                                   score_texts, train_reward_model)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 80)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
BASE_DIR = REPO / "data" / "models" / "tiny-qwen2-base"
RM_DIR = REPO / "data" / "models" / "tiny-qwen2-reward-model"
RUNS = REPO / "data" / "runs"
rm_info = json.loads((RM_DIR / "reward_model.json").read_text())

# %% [markdown]
# ## Preferences instead of scores
#
# People are poor at giving an answer a number and good at saying which of two
# answers is better. A preference data set is therefore a list of triples: a prompt
# $q$, the answer a judge preferred, $o^+$, and the other, $o^-$. The
# **Bradley–Terry** model {cite}`bradley1952rank` links such choices to a hidden
# score $r_\phi(q, o)$ per answer, here a network with parameters $\phi$:
#
# $$
# P(o^+ \succ o^- \mid q) = \sigma\big(r_\phi(q, o^+) - r_\phi(q, o^-)\big),
# \qquad \sigma(x) = \frac{1}{1 + e^{-x}} .
# $$
#
# Fitting $\phi$ means maximising the likelihood of the judge's choices, that is
# minimising
#
# $$
# \mathcal L(\phi) = -\frac1N \sum_{i=1}^N
#   \log \sigma\big(r_\phi(q_i, o_i^+) - r_\phi(q_i, o_i^-)\big).
# $$

# %%
show_source(preference_probability)
show_source(bradley_terry_loss)

# %% [markdown]
# Three pairs by hand: a pair the scores rank right by 2, a tie, and a pair ranked
# wrong by 2. Then the same scores shifted by 10.

# %%
# NBVAL_CHECK_OUTPUT
chosen = torch.tensor([2.0, 0.0, 0.0])
rejected = torch.tensor([0.0, 0.0, 2.0])
print("P(chosen preferred):", preference_probability(chosen, rejected))
print("loss per pair:      ", -torch.nn.functional.logsigmoid(chosen - rejected))
print(f"mean loss {bradley_terry_loss(chosen, rejected):.4f}; scores + 10: "
      f"{bradley_terry_loss(chosen + 10, rejected + 10):.4f}")

# %% [markdown]
# A margin of 2 in favour gives probability 0.881 and a small loss; a tie costs
# $\log 2$; the same margin against costs 2.127. Adding 10 to every score changes
# nothing: Bradley–Terry sees only differences, so a reward model's scores have no
# zero point. That suits GRPO, which only ever uses a reward relative to the group's
# mean.

# %% [markdown]
# ## A judge we can check
#
# Human preference data for arithmetic answers does not exist, and the point of this
# chapter needs a judge whose taste we know. So the judge is a program with a hidden
# utility, chapter 7's rule reward
#
# $$
# u(q, o) = \mathbb 1[\text{answer correct}]
#   + 0.1 \cdot \mathbb 1[\text{well formatted}],
# $$
#
# and, like a human rater, it is not perfectly consistent: on a share
# $p_{\mathrm{flip}} = 0.1$ of the pairs it picks the worse answer. It is never asked
# about two answers of equal utility.

# %%
show_source(preference_pairs, docstring=False, start="utility = rule_utility",
            end="rows.append")

# %% [markdown]
# The answers come from the base model itself, the policy that RL will start from:
# four samples at temperature 1 for each of the first 2,000 training problems, and
# for the first 500 held-out problems, the held-out pairs. The command that made the
# book's reward model (`data/models/tiny-qwen2-reward-model`) wrote its pairs beside it:

# %%
pairs = {split: pd.read_json(RM_DIR / f"pairs_{split}.jsonl.gz", lines=True)
         for split in ("train", "test")}


def pair_kind(table):
    """'right vs wrong' when the two answers differ in correctness (utility 1 or
    more is a right answer), else 'format only'."""
    return np.where((table["chosen_utility"] >= 1) != (table["rejected_utility"] >= 1),
                    "right vs wrong", "format only")


summary = pd.DataFrame([
    {"prompts": table["prompt_index"].nunique(), "pairs": len(table),
     "right vs wrong": int((pair_kind(table) == "right vs wrong").sum()),
     "format only": int((pair_kind(table) == "format only").sum()),
     "labels flipped": round(1 - table["agrees"].mean(), 3)}
    for table in pairs.values()], index=list(pairs))
display(summary)
print(rm_info["command"])
example = pairs["train"].iloc[0]
print(f"\nquestion {example['question']!r}\n  chosen:   {example['chosen']!r}\n"
      f"  rejected: {example['rejected']!r}")

# %%
train_pairs, test_pairs = pairs["train"], pairs["test"]
say(f"The judge compared {summary.loc['train', 'pairs']:,} pairs on "
    f"{summary.loc['train', 'prompts']:,} training problems (the others had four "
    f"answers of one utility) and flipped a share "
    f"{summary.loc['train', 'labels flipped']:.3f} of them. Most pairs set a right "
    f"answer against a wrong one ({summary.loc['train', 'right vs wrong']:,}); the "
    f"rest differ in format only.")

# %% [markdown]
# ## The reward model
#
# A reward model reads the prompt and the answer like the policy does and returns one
# number, $r_\phi(q, o)$. The usual construction takes the policy's own transformer,
# drops the language-model head and puts a linear head on the hidden state of the last
# token. Ours starts from the base model's weights, so it begins with everything the
# base model knows about arithmetic text:

# %%
show_source(RewardModel.forward)

# %% [markdown]
# Training is plain supervised learning on the pairs: each step scores 32 chosen and
# 32 rejected answers in one batch and takes an AdamW step on the Bradley–Terry loss
# (`train_reward_model`). The cell below repeats the command's training on the
# stored pairs, sized by the profile, and prints its time (the 300 steps and their
# held-out evaluations take a few minutes on a 2-core CPU).

# %%
# NBVAL_IGNORE_OUTPUT
STEPS = P.pick(smoke=4, cpu=300, gpu=300)
fit_pairs = train_pairs if not P.is_smoke else train_pairs.iloc[:64]
eval_pairs = test_pairs if not P.is_smoke else test_pairs.iloc[:32]
policy, tokenizer = load_model_and_tokenizer(BASE_DIR)
torch.manual_seed(0)
live_rm = RewardModel.from_causal_lm(policy)
start = time.time()
live_log = train_reward_model(live_rm, tokenizer, fit_pairs, steps=STEPS,
                              batch_size=32, lr=1e-4, seed=0,
                              eval_pairs=eval_pairs, eval_every=max(1, STEPS // 3))
print(f"{STEPS} steps in {time.time() - start:.0f} s on {P.device}")

# %%
stored_log = pd.read_csv(RM_DIR / "train_log.csv")
FLIP = 1 - train_pairs["agrees"].mean()
fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.0), constrained_layout=True)
axes[0].plot(stored_log["step"], stored_log["loss"].rolling(20, 1).mean(),
             color="0.6", lw=3, label="the stored model's run")
axes[0].plot(live_log["step"], live_log["loss"].rolling(20, 1).mean(), color="C0",
             lw=1, label="this run")
axes[0].axhline(-(1 - FLIP) * np.log(1 - FLIP) - FLIP * np.log(FLIP), color="k",
                lw=0.8, ls=":", label="the labels' entropy")
axes[0].set(xlabel="step", ylabel="Bradley–Terry loss (mean of 20)",
            title="training loss")
held = live_log.dropna(subset=["eval_label"])
axes[1].plot(held["step"], held["eval_utility"], "o-", label="as the hidden utility")
axes[1].plot(held["step"], held["eval_label"], "s-", label="as the judge labelled")
axes[1].axhline(test_pairs["agrees"].mean(), color="k", lw=0.8, ls=":",
                label="1 − held-out flip rate")
axes[1].set(xlabel="step", ylabel="share of pairs ranked", title="held-out pairs",
            ylim=(0.5, 1.0))
axes[0].legend(fontsize=8)
axes[1].legend(fontsize=8, loc="lower right")
plt.show()
same = min(len(live_log), len(stored_log))
gap = (live_log["loss"].head(same) - stored_log["loss"].head(same)).abs().max()
print(f"largest difference between this run's losses and the stored run's: "
      f"{gap:.2g}")

# %% [markdown]
# The loss cannot fall to zero: with a judge who errs on a tenth of the pairs, the
# best a model can do is the entropy of the labels (the dotted line), and the best
# share of the judge's own labels it can match is about $1 - p_{\mathrm{flip}}$.
# Against the hidden utility the model can do better than against the labels, because
# the flips are noise it should not learn. Exercise 13.2 asks what score gap a
# perfect fit puts between a better and a worse answer.

# %%
rm, rm_tokenizer = load_reward_model(RM_DIR)
by_kind = {}
for kind in ("right vs wrong", "format only"):
    subset = test_pairs[pair_kind(test_pairs) == kind]
    if len(subset):
        by_kind[kind] = pairwise_accuracy(rm, rm_tokenizer, subset)
by_kind["all"] = pairwise_accuracy(rm, rm_tokenizer, test_pairs)
ranking = pd.DataFrame(by_kind).T.rename(columns={
    "label": "ranked as labelled", "utility": "ranked as the utility",
    "margin": "mean gap, chosen - rejected"})
ranking.insert(0, "pairs", [int((pair_kind(test_pairs) == k).sum()) if k != "all"
                            else len(test_pairs) for k in ranking.index])
display(ranking)
say(f"On the {len(test_pairs):,} held-out pairs the stored reward model ranks a "
    f"share {by_kind['all']['utility']:.3f} as the hidden utility does "
    f"({by_kind['right vs wrong']['utility']:.3f} of the right-versus-wrong pairs). "
    f"By the usual measure of a reward model, agreement with held-out "
    f"preferences, this is a good one.")

# %% [markdown]
# Ranking two answers to the same question is the task it was trained for, and it
# is all GRPO uses: the advantages compare the answers of one group, so a score's
# offset on a question cancels. What RL needs more is that the ranking holds on the
# answers the policy writes as it changes, not only on the base model's, and that
# depends on what the score pays for. Its scores of the distinct answers in the
# held-out pairs, right and wrong (the problems whose four answers all had one
# utility gave no pair, so the easiest and the hardest problems are missing):

# %%
answers = pd.concat([
    test_pairs[["question", "chosen", "chosen_utility"]].set_axis(
        ["question", "completion", "utility"], axis=1),
    test_pairs[["question", "rejected", "rejected_utility"]].set_axis(
        ["question", "completion", "utility"], axis=1),
]).drop_duplicates(["question", "completion"])
answers["score"] = score_texts(rm, rm_tokenizer, list(answers["question"]),
                               list(answers["completion"])).numpy()
answers["correct"] = answers["utility"] >= 1
fig, ax = plt.subplots(figsize=(7.3, 2.8), constrained_layout=True)
bins = np.linspace(answers["score"].min(), answers["score"].max(), 40)
for correct, label in ((True, "right answers"), (False, "wrong answers")):
    ax.hist(answers.loc[answers["correct"] == correct, "score"], bins=bins,
            alpha=0.6, label=f"{label} ({(answers['correct'] == correct).sum()})")
ax.set(xlabel="reward model score r(q, o)", ylabel="answers",
       title="the base model's answers in the held-out pairs")
ax.legend(fontsize=8)
plt.show()
overlap = (answers.loc[~answers["correct"], "score"]
           > answers.loc[answers["correct"], "score"].median()).mean()
say(f"A share {overlap:.2f} of the wrong answers score above the median right "
    f"answer. The wrong answers fall into two groups, and the next table shows what "
    f"divides them.")

# %% [markdown]
# What does it pay for, then? The judge's utility gives correctness 1 and format 0.1.
# The reward model's mean score in the four cells of correct × formatted:

# %%
answers["formatted"] = [is_well_formatted(t, strict=True)
                        for t in answers["completion"]]
pays = answers.pivot_table(index="correct", columns="formatted", values="score",
                           aggfunc=["mean", "size"])
display(pays.round(2))
mean = pays["mean"]
fmt_gain = mean.loc[False, True] - mean.loc[False, False]
say(f"Among wrong answers, a good format adds {fmt_gain:.2f} to the score; among "
    f"unformatted ones, being right adds "
    f"{mean.loc[True, False] - mean.loc[False, False]:.2f}. In the base model's "
    f"answers the two go together (a share "
    f"{answers.loc[answers['formatted'], 'correct'].mean():.2f} of the formatted "
    f"answers are right, {answers.loc[~answers['formatted'], 'correct'].mean():.2f} "
    f"of the others), so the reward model, which sees the answers and not the "
    f"truth, takes the format as evidence of being right and pays for it far more "
    f"than the judge did.")

# %% [markdown]
# (ch13-rl)=
# ## GRPO against the reward model
#
# Now the experiment. Chapter 7's R1-Zero run, unchanged except for the reward: the
# reward model's score in place of `accuracy + 0.1 × format`
# (`configs/ch13_reward_model.yaml`). A third arm adds the usual guard of RL against a
# learned reward, a KL penalty toward the base model ($\beta = 0.04$). Every run
# starts from the base model, two seeds per arm, with the held-out harness (500
# problems, greedy) every 50 steps. The reward model is a reward function like any
# other:

# %%
show_source(rm_lib.reward_model_reward, docstring=False)

# %% [markdown]
# The six runs take too long to repeat here (their step times are in each run's
# `README.md`), so `scripts/ch13_runs.sh` made them and the chapter reads their logs:

# %%
ARMS = {"reward model": "ch13_reward_model_seed{}_cpu",
        "reward model + KL": "ch13_reward_model_kl_seed{}_cpu",
        "rule": "ch13_rule_seed{}_cpu"}
COLORS = {"reward model": "C3", "reward model + KL": "C1", "rule": "C0"}
SEEDS = (0, 1)
metrics, evals = {}, {}
for arm, pattern in ARMS.items():
    for seed in SEEDS:
        metrics[arm, seed] = read_metrics(RUNS / pattern.format(seed))
        evals[arm, seed] = pd.read_csv(RUNS / pattern.format(seed) / "eval.csv")

fig, axes = plt.subplots(1, 2, figsize=(7.3, 3.1), constrained_layout=True)
for (arm, seed), frame in metrics.items():
    style = "-" if seed == 0 else "--"
    acc = frame["accuracy"].rolling(10, min_periods=1).mean()
    axes[0].plot(frame["step"], acc, style, color=COLORS[arm], lw=1.2,
                 label=f"{arm}, seed {seed}")
    held = evals[arm, seed]
    axes[1].plot(held["step"], held["strict_acc"], style + "o", color=COLORS[arm])
axes[0].set(xlabel="step", ylabel="share right (mean of 10 steps)",
            title="the training answers", ylim=(0, 1.05))
axes[1].set(xlabel="step", ylabel="strict accuracy", title="held out, greedy",
            ylim=(0, 1.05))
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
           ncol=3, fontsize=8)
plt.show()

# %%
final = pd.DataFrame({
    f"{arm}, seed {seed}": {
        "held-out strict, step 0": evals[arm, seed]["strict_acc"].iloc[0],
        "held-out strict, step 50": evals[arm, seed].set_index("step")
        ["strict_acc"].get(50, np.nan),
        "held-out strict, last": evals[arm, seed]["strict_acc"].iloc[-1],
        "format, last": evals[arm, seed]["format_rate"].iloc[-1],
        "reward, first 10 steps": metrics[arm, seed]["reward"].head(10).mean(),
        "reward, last 10 steps": metrics[arm, seed]["reward"].tail(10).mean(),
        "share right, first 10 steps": metrics[arm, seed]["accuracy"].head(10).mean(),
        "best 10-step share right": metrics[arm, seed]["accuracy"].rolling(10)
        .mean().max(),
    } for arm in ARMS for seed in SEEDS}).T
display(final)


def rows_of(arm):
    return final.loc[[f"{arm}, seed {s}" for s in SEEDS]]


hacked_rows = rows_of("reward model")
first_was_best = (
    "In both seeds the share of right training answers was highest in the first ten "
    "steps. " if (hacked_rows["best 10-step share right"]
                  == hacked_rows["share right, first 10 steps"]).all() else "")
say(f"Against the rule, both seeds end at held-out strict accuracy "
    f"{rows_of('rule')['held-out strict, last'].min():.3f}–"
    f"{rows_of('rule')['held-out strict, last'].max():.3f}, from "
    f"{final['held-out strict, step 0'].iloc[0]:.3f}. Against the reward model they "
    f"end at {rows_of('reward model')['held-out strict, last'].min():.3f}–"
    f"{rows_of('reward model')['held-out strict, last'].max():.3f}, while the reward "
    f"model's mean score of the training answers went from "
    f"{rows_of('reward model')['reward, first 10 steps'].mean():.2f} in the first "
    f"ten steps to {rows_of('reward model')['reward, last 10 steps'].mean():.2f} in "
    f"the last ten. {first_was_best}"
    f"The KL penalty slowed the fall: at step 50 its seeds stood at "
    f"{rows_of('reward model + KL')['held-out strict, step 50'].min():.3f}–"
    f"{rows_of('reward model + KL')['held-out strict, step 50'].max():.3f} against "
    f"{rows_of('reward model')['held-out strict, step 50'].min():.3f}–"
    f"{rows_of('reward model')['held-out strict, step 50'].max():.3f} without it, "
    f"and they ended at "
    f"{rows_of('reward model + KL')['held-out strict, last'].min():.3f}–"
    f"{rows_of('reward model + KL')['held-out strict, last'].max():.3f}.")

# %% [markdown]
# This is the reward hacking that the R1 paper warns of, at the smallest scale. The
# policy did what it was asked: it raised the reward model's score. The share of
# right answers among its training samples did not rise with it. The policy drifted
# toward whatever the reward model scores highly, and the next section shows what
# that is. Gao et al. measured this divergence for reward models of many sizes
# {cite}`gao2023overoptimization`: optimised against a learned reward, the true
# quality may rise for a while, then falls while the learned reward keeps climbing.
# A reward model as small and as narrowly trained as ours leaves no "while".

# %% [markdown]
# ## What the policy found
#
# The answers of the six final policies to the 500 held-out problems (four samples
# each at temperature 1, written by `scripts/ch13_runs.sh` with `grpo_lib eval
# --samples-out`), scored here by the reward model. Two more columns describe the
# answers themselves: `top shape` is the share of answers that have the policy's most
# common *shape*, its text with every number replaced by `N`, and `mixed languages`
# the share that mixes Chinese words into the English trace (chapter 5's measure).

# %%
finals = {}
N_SCORED = P.pick(smoke=40, cpu=2000, gpu=2000)
rows = {}
base_right = answers.loc[answers["correct"], "score"]
for arm, pattern in ARMS.items():
    for seed in SEEDS:
        frame = pd.read_json(RUNS / pattern.format(seed) / "answers.jsonl.gz",
                             lines=True)
        frame = frame[frame["mode"] == "sampled"].head(N_SCORED).copy()
        frame["score"] = score_texts(rm, rm_tokenizer, list(frame["question"]),
                                     list(frame["completion"])).numpy()
        finals[arm, seed] = frame
        right, wrong = frame[frame["correct"]], frame[~frame["correct"]]
        shapes = frame["completion"].str.replace(r"\d+", "N", regex=True)
        rows[f"{arm}, seed {seed}"] = {
            "answers": len(frame), "share right": frame["correct"].mean(),
            "score, right": right["score"].mean(),
            "score, wrong": wrong["score"].mean(),
            "wrong above the base's median right": (
                wrong["score"] > base_right.median()).mean(),
            "top shape": shapes.value_counts(normalize=True).iloc[0],
            "mixed languages": frame["lang_mixed"].mean()}
found = pd.DataFrame(rows).T
display(found)

# %%
for seed in SEEDS:
    hacked = finals["reward model", seed]
    print(f"reward model, seed {seed}: the highest-scoring wrong answers")
    for _, row in hacked[~hacked["correct"]].nlargest(2, "score").iterrows():
        print(f"  {row['question']} = {row['answer']}   score {row['score']:.2f}\n"
              f"    {row['completion'][:110]}")
rm_rows = found.loc[[f"reward model, seed {s}" for s in SEEDS]]
say(f"After training against the reward model, its wrong answers score "
    f"{rm_rows['score, wrong'].mean():.2f} on average over the two seeds, against "
    f"{answers.loc[~answers['correct'], 'score'].mean():.2f} for the base model's "
    f"wrong answers and {base_right.mean():.2f} for its right ones. A share "
    f"{rm_rows['top shape'].min():.2f}–{rm_rows['top shape'].max():.2f} of its "
    f"answers have one shape, whatever the question.")

# %% [markdown]
# ### Does the reward model read the question?
#
# The policy trained against the reward model writes about half of its answers or
# more in one template: three steps, "first", "then", "finally" (in one seed mostly
# in Chinese words, 首先, 然后, 最后), whose numbers have little to do with the
# question. That suggests a test: give each of the base model's held-out answers
# another answer's question and score it again. A right answer under the wrong
# question is a wrong answer, so a reward model that checks answers against
# questions should score it much lower.

# %%
rng = np.random.default_rng(0)
other_question = answers["question"].to_numpy()[rng.permutation(len(answers))]
differs = other_question != answers["question"].to_numpy()
probe = answers[differs].copy()
probe["score, another question"] = score_texts(
    rm, rm_tokenizer, list(other_question[differs]), list(probe["completion"])).numpy()
moved = probe.groupby("correct")[["score", "score, another question"]].mean()
moved.index = moved.index.map({True: "right answers", False: "wrong answers"})
display(moved)
corr = np.corrcoef(probe["score"], probe["score, another question"])[0, 1]
gap = moved.loc["right answers", "score"] - moved.loc["wrong answers", "score"]
drop = (moved.loc["right answers", "score"]
        - moved.loc["right answers", "score, another question"])
say(f"Moved under another question, a right answer loses {drop:.2f} of score on "
    f"average, where the gap between right and wrong answers is {gap:.2f}; the "
    f"scores with and without the answer's own question correlate at {corr:.2f}. "
    f"The reward model learned what a right answer looks like, not whether it "
    f"answers the question in front of it.")

# %% [markdown]
# That is enough to explain the collapse. Among the base model's answers, the look of
# a right answer and being right go together, so the judge's pairs never taught the
# reward model to tell them apart. The policy found the difference: a confident,
# well-formed trace that ignores the question scores as well as a correct one and is
# much easier to write than a correct one.

# %% [markdown]
# ## The same reward model, not optimised against
#
# GRPO pushed the policy into the reward model's blind spots. A reward model can also
# be used without pushing anything: sample $k$ answers from a fixed policy and keep
# the one it scores highest, best-of-$k$ reranking. The policy never moves, so the
# answers stay the kind the reward model was trained on.

# %%
show_source(best_of_n)

# %% [markdown]
# Four fresh samples from the base model for each held-out problem (a seed of their
# own), then the reward model's pick:

# %%
# NBVAL_IGNORE_OUTPUT
K_RERANK = 4
rerank_rows = load_task_split("arithmetic", "test").select(
    range(P.pick(smoke=16, cpu=500, gpu=500)))
start = time.time()
fresh = sample_candidates(policy, tokenizer, rerank_rows, k=K_RERANK, seed=7)
fresh["score"] = score_texts(rm, rm_tokenizer, list(fresh["question"]),
                             list(fresh["completion"])).numpy()
print(f"{len(fresh)} answers sampled and scored in {time.time() - start:.0f} s")

# %%
picked = fresh.iloc[best_of_n(torch.tensor(fresh["score"].to_numpy()),
                              K_RERANK).numpy()]
right = fresh["correct"].to_numpy().reshape(-1, K_RERANK)        # [N, k]
rerank = pd.Series({"one sample (mean over the 4)": right.mean(),
                    "the reward model's pick of 4": picked["correct"].mean(),
                    "any of the 4 right": right.any(1).mean()})
display(rerank.to_frame(f"share right, {len(right)} held-out problems").round(3))
say(f"Picking with the reward model raises the share of right answers from "
    f"{rerank.iloc[0]:.3f} for one sample to {rerank.iloc[1]:.3f}, of a possible "
    f"{rerank.iloc[2]:.3f} (a right answer among the four).")

# %% [markdown]
# The same network that GRPO turned into a source of nonsense is a useful judge when
# nothing is optimised against it. Best-of-$k$ can be over-optimised as well, as $k$
# grows and the pick moves into the tails {cite}`gao2023overoptimization`, but four
# samples of the base model are four answers of the kind it was trained on.

# %% [markdown]
# ## Rules where rules exist
#
# The pattern above is why DeepSeek-R1 keeps rule rewards for every prompt that has a
# checkable answer, and uses reward models only where nothing else is available.
# Writing the final stage's reward for a mix of prompts is a routing problem: each
# prompt goes to the strongest judge its task has, and only the prompts no rule can
# check reach the learned one (exercise 13.3 builds it). Where a reward model must be
# used, the standard defences all limit how far the policy can wander from the
# answers the reward model was trained on:
#
# - a KL penalty toward the starting policy (the $\beta$ of {doc}`chapter 2
#   <02_objective>`), which InstructGPT used for exactly this reason
#   {cite}`ouyang2022instructgpt`; above, $\beta = 0.04$ bought time, not safety;
# - stopping early, at the step where a held-out check (here the rule; for people, a
#   fresh round of comparisons) stops improving;
# - new preference data on the current policy's own answers, and a retrained reward
#   model: R1's "retraining the reward model needs additional training resources".

# %% [markdown]
# ## Summary
#
# - A reward model turns pairwise choices into a score with the Bradley–Terry model,
#   $P(o^+ \succ o^-) = \sigma(r_\phi(q, o^+) - r_\phi(q, o^-))$; its scores have no
#   zero point, which GRPO's group baseline does not need.
# - Trained on the base model's own answers with a judge who errs on one pair in ten,
#   the tiny reward model ranks most held-out pairs as the hidden utility does.
# - It pays the format about as much as correctness, because in its training pairs
#   the two go together, and it scores an answer almost the same under another
#   question: it learned what a right answer looks like.
# - Used as GRPO's reward in place of the rule, it is hacked: the training reward
#   climbs while the held-out accuracy falls to almost nothing, about half of the
#   policy's answers or more share one well-formatted template, and its wrong
#   answers outscore the base model's right ones. A KL penalty toward the base model
#   slows the fall and does not stop it.
# - The same reward model picking the best of four fixed samples raises accuracy:
#   without optimisation pressure its judgement holds.
# - Hence R1's split: rules for reasoning, reward models only where no rule exists,
#   each guarded against the policy drifting away from what it was trained on.

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch13`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch13`.
#
# **13.1 — The Bradley–Terry loss.** Write `my_bt_loss(chosen, rejected)`: the mean
# over pairs of $-\log\sigma(r_\phi(q, o^+) - r_\phi(q, o^-))$ for two `[N]` tensors
# of scores, the chosen answers' and the rejected ones'. It must stay finite when a
# pair is ranked wrong by a very large margin.

# %%
from grpo_lib.exercises.ch13 import (check_all_scenarios_reward,  # noqa: E402
                                     check_bt_loss, check_ideal_margin)


def my_bt_loss(chosen, rejected):
    # your code here
    raise NotImplementedError


try:
    check_bt_loss(my_bt_loss)
except NotImplementedError:
    print("Not implemented yet: the log of a sigmoid has its own function in "
          "torch.nn.functional.")

# %% [markdown]
# **13.2 — The margin a perfect fit learns.** A judge prefers the better of two
# answers with probability $1 - p_{\mathrm{flip}}$. Write `my_ideal_margin(flip)`: the
# score gap $r_\phi(q, \text{better}) - r_\phi(q, \text{worse})$ that minimises the
# expected Bradley–Terry loss on such pairs, for $0 \le p_{\mathrm{flip}} < 0.5$
# (at $p_{\mathrm{flip}} = 0$ no finite gap is best: return `math.inf`).

# %%
def my_ideal_margin(flip):
    # your code here
    raise NotImplementedError


try:
    check_ideal_margin(my_ideal_margin)
except NotImplementedError:
    print("Not implemented yet: write the expected loss for one pair, set its "
          "derivative in the gap to zero.")

# %% [markdown]
# **13.3 — A reward for every kind of prompt.** Write
# `my_all_scenarios_reward(completions, task, answer, reward_model)`: for rows whose
# `task` is `"arithmetic"`, the rule `grpo_lib.rewards.accuracy_reward` with that
# row's `answer`; for all other rows, the score of `reward_model`, a callable that
# takes a list of completions and returns a list of scores. Call the reward model
# once, and only on the rows it must judge.

# %%
def my_all_scenarios_reward(completions, task, answer, reward_model):
    # your code here
    raise NotImplementedError


try:
    check_all_scenarios_reward(my_all_scenarios_reward)
except NotImplementedError:
    print("Not implemented yet: split the row indices by task, score each part, "
          "and put each score back at its row.")

# %% [markdown]
# **13.4 — Think.** (a) The reward model ranked most held-out pairs right, yet the
# policy trained on it got worse. Which held-out pairs would have predicted that, and
# who would have to label them? (b) $\beta = 0.04$ slowed the fall without stopping
# it. How would you choose $\beta$, and what would you plot to do it? (c) Here the
# format played a feature that goes with quality in the judge's pairs but can be
# produced without it. When people are the judges of a general assistant, what plays
# that role?
