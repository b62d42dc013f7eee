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
# (ch14)=
# # Distillation: a teacher's answers for a smaller student
#
# DeepSeek-R1 ends with models much smaller than itself. The authors fine-tuned Qwen2.5
# and Llama models of 1.5B to 70B parameters on the 800k samples curated with R1 (the
# data of the SFT stage that chapter 12 rebuilds, reasoning and non-reasoning), with
# SFT only and no RL {cite}`deepseekai2025r1`. They then asked whether such a model
# could get there on its own: they ran large-scale RL on Qwen-32B-Base for over 10k
# steps, R1-Zero's recipe, and set the result beside the distilled model of the same
# base (the paper's comparison of distillation and RL):
#
# | 32B model | AIME 2024 pass@1 | MATH-500 | GPQA Diamond | LiveCodeBench |
# | --- | --- | --- | --- | --- |
# | QwQ-32B-Preview | 50.0 | 90.6 | 54.5 | 41.9 |
# | DeepSeek-R1-Zero-Qwen-32B (RL on the base) | 47.0 | 91.6 | 55.0 | 40.2 |
# | DeepSeek-R1-Distill-Qwen-32B (SFT on R1's answers) | 72.6 | 94.3 | 62.1 | 57.2 |
#
# Their two conclusions: distilling a more powerful model into a smaller one gives
# excellent results, while a smaller model that relies on large-scale RL needs
# enormous compute and may not even reach distillation's performance; and advancing
# beyond the boundaries of intelligence may still need more powerful base models and
# larger-scale RL.
#
# This chapter runs the same comparison on the book's task, with a student much
# smaller than the tiny model. The teacher is chapter 11's reasoning model, and its
# answers are chapter 12's rejection-sampled data, the book's counterpart of R1's
# ~600k reasoning samples (the non-reasoning skills data is left out here).

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import re
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.distill import (DistillConfig, DistillTrainer, distillation_loss,
                              load_config, token_kl)
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import evaluate
from grpo_lib.models import (MODEL_SIZES, count_parameters, load_model_and_tokenizer,
                             model_config)
from grpo_lib.profiles import profile
from grpo_lib.sft import IGNORE_INDEX, collate, read_jsonl, tokenize_rows
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.width", 120)
pd.set_option("display.max_colwidth", 100)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
MODELS = REPO / "data" / "models"
RUNS = REPO / "data" / "runs"
STUDENT_DIR = MODELS / "mini-qwen2-base"
TEACHER_DIR = MODELS / "tiny-qwen2-reasoning-rl"
KEPT = REPO / "data" / "rejection" / "kept.jsonl"

# %% [markdown]
# ## The student
#
# The student is a new size of the book's Qwen2, `mini`: the tiny model's four layers
# and four attention heads at half the width. It is pretrained from scratch on the same
# designed corpus as the tiny base, by the same command with `--size mini`, so it has
# the same designed flaws and differs from the tiny base in size alone:

# %%
_, tokenizer = load_model_and_tokenizer(STUDENT_DIR)
sizes = pd.DataFrame({
    name: {**MODEL_SIZES[name],
           "parameters": count_parameters(transformers.Qwen2ForCausalLM(
               model_config(tokenizer, name)))}
    for name in ("mini", "tiny")}).T
display(sizes)
print((STUDENT_DIR / "README.md").read_text().split("```bash\n")[1].split("```")[0])

# %%
cards = {name: pd.read_csv(MODELS / name / "eval.csv", index_col=0)
         for name in ("mini-qwen2-base", "tiny-qwen2-base")}
bases = pd.DataFrame({name: card.loc["greedy", ["strict_acc", "format_rate",
                                                "lang_mix_rate", "mean_length"]]
                      for name, card in cards.items()}).T
display(bases)
ratio = sizes.loc["tiny", "parameters"] / sizes.loc["mini", "parameters"]
say(f"The student has {sizes.loc['mini', 'parameters']:,} parameters, "
    f"{ratio:.1f} times fewer than the tiny model. Its base answers "
    f"{bases.loc['mini-qwen2-base', 'strict_acc']:.3f} of the 500 held-out problems "
    f"right (greedy, strict), against "
    f"{bases.loc['tiny-qwen2-base', 'strict_acc']:.3f} for the tiny base.")

# %% [markdown]
# ## The teacher and its answers
#
# The teacher is `tiny-qwen2-reasoning-rl`, the model chapter 11 made with a cold
# start and RL with the language-consistency reward. Chapter 12 sampled it 8 times on
# each of the first 4,000 training problems and kept an answer only if it was right,
# well formatted, in one language, readable, with true steps, and not a copy of
# another kept answer to the same problem. Those answers are the whole of what the
# student will see of the teacher:

# %%
kept = read_jsonl(KEPT)
teacher_card = pd.read_csv(TEACHER_DIR / "eval.csv", index_col=0)
print(f"{len(kept):,} answers to {len({r['question'] for r in kept}):,} problems")
for row in kept[:2]:
    print(f"\n{row['messages'][0]['content']}\n  {row['messages'][1]['content']}")
say(f"The teacher answers {teacher_card.loc['greedy', 'strict_acc']:.3f} of the "
    f"held-out problems right (its model card; greedy, at most 128 new tokens), in "
    f"answers of {teacher_card.loc['greedy', 'mean_length']:.0f} tokens on average: "
    f"the readable pattern of the cold start, with a check of the result at the end.")

# %% [markdown]
# ## Two ways to learn from a teacher
#
# **By sequence.** Fine-tune the student on the teacher's answers with the plain SFT
# loss of chapter 10, as if a person had written them {cite}`kim2016sequence`. This is
# what DeepSeek-R1 does. It needs the teacher only once, to write the data, and any
# student can read text, whatever its tokenizer.
#
# **By token.** At every position of a teacher's answer, the teacher has a whole
# distribution $p_T$ over the next token, not only the token it wrote. Hinton et al.
# {cite}`hinton2015distilling` train the student to match it, with both distributions
# softened by a temperature $\tau$:
#
# $$
# \mathcal L_{\mathrm{KD}} = \frac{\tau^2}{N} \sum_{(i,t)}
#   \mathbb D_{\mathrm{KL}}\big(p_T^{\tau}(\cdot \mid q_i, o_{i,<t}) \,\Vert\,
#   p_S^{\tau}(\cdot \mid q_i, o_{i,<t})\big),
# \qquad p^{\tau} = \mathrm{softmax}(z / \tau),
# $$
#
# over the $N$ answer tokens of the batch. The token the teacher wrote is one sample of
# $p_T$; the KL uses all of it, so a position where the teacher hesitated between two
# continuations teaches the student both. The price: the teacher must run during
# training (or its distributions be stored), and both models must share one
# vocabulary, so that logit $v$ means the same token for each.

# %%
show_source(token_kl)
show_source(distillation_loss)

# %% [markdown]
# `DistillTrainer` is chapter 10's `SFTTrainer` with one method changed: the loss of a
# micro-batch runs the frozen teacher on the same tokens and returns
# $(1 - \alpha)\,\mathcal L_{\mathrm{SFT}} + \alpha\,\mathcal L_{\mathrm{KD}}$.
# With $\alpha = 0$ it is SFT on the teacher's text, step for step (a test checks
# the weights are equal).

# %%
show_source(DistillTrainer._loss)

# %% [markdown]
# ### Which KL
#
# The KL is not symmetric. Take a teacher with two equally likely tokens and two
# students: one that puts its mass on one of them, and one that spreads it evenly over
# all six tokens.

# %%
# NBVAL_CHECK_OUTPUT
teacher_z = torch.tensor([8.0, 8.0, 0.0, 0.0, 0.0, 0.0])
students = {"one of the two": torch.tensor([8.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
            "spread over all": torch.zeros(6)}
rows = []
for name, z in students.items():
    rows.append({"student": name,
                 "p_S": [round(p, 2) for p in z.softmax(-1).tolist()],
                 "KL(p_T || p_S)": token_kl(z, teacher_z).item(),
                 "KL(p_S || p_T)": token_kl(z, teacher_z, "reverse").item()})
print("p_T:", [round(p, 2) for p in teacher_z.softmax(-1).tolist()])
display(pd.DataFrame(rows).set_index("student").round(3))

# %% [markdown]
# The forward KL, the one above, prefers the spread student: missing a token the
# teacher gives half its mass costs more than wasting mass on tokens it never uses. The
# reverse KL prefers the student that keeps to one of the teacher's answers. MiniLLM
# {cite}`gu2024minillm` argues for the reverse KL for language models, whose students
# cannot cover everything a large teacher can write; it minimises it over whole
# answers sampled from the student, by policy gradient. `token_kl` computes either
# direction at each position of the teacher's text (`distill_direction`), and the
# runs below train with each.

# %% [markdown]
# ### How much more the distribution says than the text
#
# The token-level loss can only add what the teacher's distribution holds beyond the
# token it wrote. On its own kept answers (teacher forcing), the teacher's probability
# of the token that stands in the text, and what the student base makes of the same
# positions:

# %%
teacher, _ = load_model_and_tokenizer(TEACHER_DIR)
student_base, _ = load_model_and_tokenizer(STUDENT_DIR)
N_ANSWERS = P.pick(smoke=8, cpu=400, gpu=400)
config = DistillConfig(assistant_only_loss=True, max_length=256)
examples = tokenize_rows(kept[:N_ANSWERS], tokenizer, config, "kept answers")
p_written, p_student, entropy, kl_base = [], [], [], []
with torch.no_grad():
    for k in range(0, len(examples), 50):
        batch = collate(examples[k:k + 50], tokenizer.pad_token_id)
        inputs = dict(input_ids=batch["input_ids"],
                      attention_mask=batch["attention_mask"], use_cache=False)
        z_t = teacher(**inputs).logits[:, :-1]  # [b, T-1, V]: row t predicts t+1
        z_s = student_base(**inputs).logits[:, :-1]  # [b, T-1, V]
        target = batch["labels"][:, 1:]  # [b, T-1]
        kept_pos = target != IGNORE_INDEX  # [b, T-1]
        log_p = z_t.log_softmax(-1)  # [b, T-1, V]
        written = target.clamp(min=0)[..., None]  # [b, T-1, 1]
        p_written.append(log_p.gather(-1, written).squeeze(-1)[kept_pos].exp())
        p_student.append(z_s.softmax(-1).gather(-1, written).squeeze(-1)[kept_pos])
        entropy.append(-(log_p.exp() * log_p).sum(-1)[kept_pos])
        kl_base.append(token_kl(z_s, z_t)[kept_pos])
p_written, p_student, entropy, kl_base = (
    torch.cat(x) for x in (p_written, p_student, entropy, kl_base))
confidence = pd.Series({
    "answer tokens": len(p_written),
    "mean p_T(written token)": p_written.mean().item(),
    "share with p_T(written) > 0.99": (p_written > 0.99).float().mean().item(),
    "share with p_T(written) < 0.5": (p_written < 0.5).float().mean().item(),
    "mean entropy of p_T (nats)": entropy.mean().item(),
    "mean KL(p_T || p_S), student base": kl_base.mean().item(),
    "share with p_S(written) < 0.01, student base": (p_student < 0.01).float()
    .mean().item(),
})
display(confidence.to_frame("value").round(3))

# %%
say(f"The teacher writes its own answers with near certainty: on "
    f"{confidence['answer tokens']:,.0f} answer tokens it gives the written token "
    f"{confidence['mean p_T(written token)']:.3f} on average, more than 0.99 at a "
    f"share {confidence['share with p_T(written) > 0.99']:.2f} of the positions and "
    f"less than one half at {confidence['share with p_T(written) < 0.5']:.3f}. Where "
    f"the teacher is that sure, its distribution is nearly the one-hot target of SFT, "
    f"and the KL teaches what the text teaches. The student base is far from it "
    f"(a mean KL of {confidence['mean KL(p_T || p_S), student base']:.2f} nats): "
    f"there is much to learn, and nearly all of it is in the text.")

# %% [markdown]
# ## Distilling, live
#
# `python -m grpo_lib distill --config configs/ch14_distill.yaml` fine-tunes the
# student base on the kept answers for six epochs, chapter 12's stage-2 settings
# (batch 16, learning rate 5e-4, cosine schedule, loss on the assistant's tokens only).
# The cell below runs the first steps of it with a schedule shortened to those steps,
# sized by the profile, and evaluates the result on held-out problems:

# %%
# NBVAL_IGNORE_OUTPUT
STEPS = P.pick(smoke=3, cpu=150, gpu=150)
live_dir = tempfile.mkdtemp(prefix="ch14_distill_")
N_EVAL = P.pick(smoke=16, cpu=200, gpu=200)
live_config = load_config(REPO / "configs" / "ch14_distill.yaml", [
    f"max_steps={STEPS}", "eval_steps=0", "eval_on_start=false", "save_final=false",
    "progress_bar=false", "logging_steps=0", f"output_dir={live_dir}"])
student, _ = load_model_and_tokenizer(STUDENT_DIR)
start = time.time()
live = DistillTrainer(student, tokenizer, live_config, kept)
live.train()
seconds = time.time() - start
test = load_task_split("arithmetic", "test")
live_eval = evaluate(student, tokenizer, test, n=N_EVAL, max_new_tokens=128)
print(f"{STEPS} steps in {seconds:.0f} s on {P.device}; held-out strict accuracy on "
      f"{N_EVAL} problems: {live_eval.loc['greedy', 'strict_acc']:.3f} (the base: "
      f"{bases.loc['mini-qwen2-base', 'strict_acc']:.3f} on 500)")

# %%
stored = pd.read_csv(RUNS / "ch14_sft_seed0_cpu" / "metrics.csv")
live_log = pd.read_csv(f"{live_dir}/metrics.csv")
fig, ax = plt.subplots(figsize=(7.3, 2.8), constrained_layout=True)
ax.plot(stored["step"], stored["loss"], color="0.6", lw=1,
        label=f"the stored run, {len(stored):,} steps "
              f"({stored['epoch'].iloc[-1]:.0f} epochs)")
ax.plot(live_log["step"], live_log["loss"], color="C0", lw=1.5,
        label=f"this run, {len(live_log)} steps")
ax.set(xscale="log", yscale="log", xlabel="step", ylabel="SFT loss (nats per token)",
       title="distilling the teacher's answers into the student")
ax.legend(fontsize=8)
plt.show()

# %%
epoch_1 = stored.loc[stored["epoch"] <= 1.0, "loss"]
say(f"Both runs start from the same base, see the teacher's answers in the same order "
    f"and share the warm-up, so their first steps coincide; the short run's schedule "
    f"then decays faster. In the stored run the loss falls from "
    f"{stored['loss'].iloc[0]:.2f} to {epoch_1.tail(20).mean():.3f} nats per token "
    f"(mean of the last 20 steps) within the first epoch, and to "
    f"{stored['loss'].tail(20).mean():.4f} after the sixth: the teacher's answers "
    f"are nearly word for word predictable once the pattern is learned.")

# %% [markdown]
# The whole run's student, seed 0's, is stored as `data/models/mini-qwen2-distilled`.
# Here it answers the same held-out problems as the short run did, beside what its run
# recorded for them:

# %%
distilled, _ = load_model_and_tokenizer(MODELS / "mini-qwen2-distilled")
here, answers_here = evaluate(distilled, tokenizer, test, n=N_EVAL,
                              max_new_tokens=128, return_samples=True)
recorded = pd.read_json(RUNS / "ch14_sft_seed0_cpu" / "answers.jsonl.gz", lines=True)
recorded = recorded[recorded["prompt_index"] < N_EVAL]
same = (answers_here["completion"].values == recorded["completion"].values).mean()
print(f"held-out strict accuracy on {N_EVAL} problems: "
      f"{here.loc['greedy', 'strict_acc']:.3f} here, {recorded['correct'].mean():.3f} "
      f"in the run's answers; a share {same:.3f} of the answers are the same text")
for k in (0, 1):  # its first two answers, right or wrong
    row = answers_here.iloc[k]
    verdict = "right" if row["correct"] else f"wrong, the answer is {row['answer']}"
    print(f"\n{row['question']} ({verdict})\n  {row['completion']}")

# %% [markdown]
# The first answer shows a habit copied without its purpose: the student writes the
# bracket's value wrongly when it rewrites the expression, and its check, like the
# teacher's, inverts only the last step, so the check passes on a wrong answer.

# %% [markdown]
# (ch14-compare)=
# ## Distillation against RL on the student
#
# The stored runs (`bash scripts/ch14_runs.sh`, two seeds each, one torch thread
# per run on the 2-core CPU) train the same student base five ways:
#
# - **RL**: chapter 7's R1-Zero run, unchanged (`configs/r1_zero_arithmetic.yaml`,
#   150 steps of 16 problems × 8 answers, accuracy + 0.1 format), from the student's
#   base. This is DeepSeek-R1-Zero-Qwen-32B's route.
# - **distil (SFT)**: the command above, six epochs on the teacher's answers: the
#   route of DeepSeek-R1-Distill-Qwen-32B.
# - **distil (KL)**: the same answers with the token-level loss alone,
#   `distill_alpha=1`, forward KL, $\tau = 1$; **distil (reverse KL)** the same with
#   the reverse KL.
# - **distil, then RL**: GRPO from each distilled student, with chapter 7's rewards
#   (accuracy and format) and the length and learning rate of the teacher's own RL
#   in chapter 11 (answers of up to 128 tokens, learning rate 1e-4), without its
#   language reward. The R1 paper leaves this step to others.
#
# Each final model then answers the 500 held-out problems (greedy, at most 128 new
# tokens, the teacher's setting).

# %%
ARMS = {"rl": "RL", "sft": "distil (SFT)", "kd": "distil (KL)",
        "kd_reverse": "distil (reverse KL)", "sft_rl": "distil, then RL"}
COLORS = {"rl": "C0", "sft": "C1", "kd": "C4", "kd_reverse": "C5", "sft_rl": "C2"}
COLUMNS = ["strict_acc", "format_rate", "lang_mix_rate", "mean_length"]


def checks_share(answers):
    """Share of answers whose reasoning ends with the teacher's check of the result."""
    return answers["completion"].str.contains("Check:", regex=False).mean()


rows, answers_of = [], {}  # answers_of[arm, seed]: a run's held-out answers
for arm, label in ARMS.items():
    for seed in (0, 1):
        run = RUNS / f"ch14_{arm}_seed{seed}_cpu"
        held = pd.read_csv(run / "heldout.csv", index_col=0).loc["greedy", COLUMNS]
        answers_of[arm, seed] = pd.read_json(run / "answers.jsonl.gz", lines=True)
        seconds = pd.read_csv(run / "metrics.csv")["time_step"].sum()
        rows.append({"route": label, "seed": seed, **held,
                     "checks": checks_share(answers_of[arm, seed]),
                     "seconds": seconds})
results = pd.DataFrame(rows)
references = []
for label, folder in (("tiny base", MODELS / "tiny-qwen2-base"),
                      ("student base", STUDENT_DIR), ("teacher", TEACHER_DIR)):
    card = pd.read_csv(folder / "eval.csv", index_col=0).loc["greedy", COLUMNS]
    references.append({"route": label, "seed": "", **card})
for seed in (0, 1):  # chapter 13's rule arm: chapter 7's run on the tiny base
    eval_csv = pd.read_csv(RUNS / f"ch13_rule_seed{seed}_cpu" / "eval.csv")
    references.append({"route": "tiny, RL", "seed": seed,
                       **eval_csv.iloc[-1][COLUMNS]})
display(pd.DataFrame(references).set_index(["route", "seed"]).round(3))
display(results.set_index(["route", "seed"]).round(3))

# %%
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(7.3, 3.2), constrained_layout=True,
                              gridspec_kw={"width_ratios": [1.4, 1]})
teacher_acc = teacher_card.loc["greedy", "strict_acc"]
for arm in ("rl", "sft_rl"):
    for seed in (0, 1):
        curve = pd.read_csv(RUNS / f"ch14_{arm}_seed{seed}_cpu" / "eval.csv")
        ax.plot(curve["step"], curve["strict_acc"], "o-", color=COLORS[arm], lw=1.2,
                label=ARMS[arm] if seed == 0 else None)
ax.axhline(teacher_acc, color="k", lw=0.8, label="the teacher")
ax.set(xlabel="GRPO step", ylabel="held-out strict accuracy", ylim=(0.5, 1),
       title="during GRPO")
ax.legend(fontsize=8, loc="lower right")
near = {arm: label for arm, label in ARMS.items() if arm != "kd_reverse"}
for k, (arm, label) in enumerate(near.items()):
    finals = results.loc[results["route"] == label, "strict_acc"]
    ax2.plot([k - 0.08, k + 0.08], finals, "o", color=COLORS[arm], ms=7)
ax2.axhline(teacher_acc, color="k", lw=0.8)
ticks = [label.replace(" (", "\n(").replace(", then", ",\nthen")
         for label in near.values()]
ax2.set_xticks(range(len(near)), ticks, fontsize=8)
ax2.set(ylabel="held-out strict accuracy", title="each route's final model, 2 seeds",
        xlabel="(the reverse KL ends far below: see the text)", ylim=(0.9, 0.97),
        xlim=(-0.5, len(near) - 0.5))
plt.show()

# %%
by_route = results.groupby("route", sort=False)[["strict_acc", "lang_mix_rate",
                                                  "checks", "mean_length"]]
lo, hi = by_route.min(), by_route.max()


def span(route, column="strict_acc"):
    """'a / b', the two seeds' values of a route, lower first."""
    return f"{lo.loc[route, column]:.3f} / {hi.loc[route, column]:.3f}"


tiny_rl = [r["strict_acc"] for r in references if r["route"] == "tiny, RL"]
acc = teacher_card.loc["greedy", "strict_acc"]
std_error = (acc * (1 - acc) / 500) ** 0.5  # of one accuracy on 500 problems
say(f"Every route but one takes the student from "
    f"{bases.loc['mini-qwen2-base', 'strict_acc']:.3f} to about the teacher's "
    f"{acc:.3f}: RL on its own reaches {span('RL')} (the two seeds), SFT on the "
    f"teacher's answers {span('distil (SFT)')}, the forward KL {span('distil (KL)')}"
    f", and RL after distillation {span('distil, then RL')}. The reverse KL fails: "
    f"{span('distil (reverse KL)')}. "
    f"At this level one accuracy on 500 problems has a standard error of about "
    f"{std_error:.3f}, and the other routes differ by no more than two seeds of one "
    f"route do (RL's own: {span('RL')}). The same RL run on the tiny base ended at "
    f"{min(tiny_rl):.3f} / {max(tiny_rl):.3f}. A student with {ratio:.1f} times "
    f"fewer parameters gives up nothing here, but that was settled before any "
    f"training: its base already answered as well as the tiny base "
    f"({bases.loc['mini-qwen2-base', 'strict_acc']:.3f} against "
    f"{bases.loc['tiny-qwen2-base', 'strict_acc']:.3f}). On this task RL does not "
    f"need the teacher.")

# %% [markdown]
# ### The reverse KL on the teacher's text
#
# The reverse KL's students write broken answers. Two of them, and how often the
# students trained with each loss pick the teacher's next token on the teacher's own
# answers (teacher forcing, the last 50 training steps):

# %%
for answer in answers_of["kd_reverse", 0]["completion"].head(2):
    print(answer)
token_acc = pd.Series({
    label: np.mean([pd.read_csv(RUNS / f"ch14_{arm}_seed{seed}_cpu" / "metrics.csv")
                    ["mean_token_accuracy"].tail(50).mean() for seed in (0, 1)])
    for arm, label in ARMS.items() if arm in ("sft", "kd", "kd_reverse")})
length = teacher_card.loc["greedy", "mean_length"]
display(pd.DataFrame({"token accuracy": token_acc,
                      f"all {length:.0f} tokens right": token_acc ** length}).round(3))

# %%
say(f"Teacher-forced, the reverse-KL student picks the teacher's token "
    f"{token_acc['distil (reverse KL)']:.3f} of the time, against "
    f"{token_acc['distil (KL)']:.3f} for the forward KL. Per token the two look "
    f"close; over an answer of {length:.0f} tokens they are not: "
    f"{token_acc['distil (reverse KL)']:.3f}^{length:.0f} is "
    f"{token_acc['distil (reverse KL)'] ** length:.3f}, so nearly every answer it "
    f"writes has a wrong token somewhere, and the next tokens follow the wrong one. "
    f"The student base gives the written token less than 0.01 at a share "
    f"{confidence['share with p_S(written) < 0.01, student base']:.2f} of the "
    f"positions.")

# %% [markdown]
# The gradient says why those positions matter. At the teacher's token $v$, the
# reverse KL's gradient in the student's logit is
# $p_S(v)\,\big(\log p_S(v) - \log p_T(v) - \mathbb D_{\mathrm{KL}}(p_S \Vert p_T)\big)$
# (exercise 14.2 derives the forward one): it scales with the student's own
# probability of the token. Where the student starts far from the teacher's token,
# the reverse KL barely pushes toward it, while the forward KL's gradient,
# $p_S - p_T$, pulls hardest exactly there. MiniLLM minimises the reverse KL on
# answers the student samples itself, where it meets its own tokens; on the
# teacher's text the forward KL is the one to use.

# %% [markdown]
# ### Why RL needed no teacher here
#
# RL matching distillation is not the paper's result, and the reason is in the
# student's base. RL can only reinforce answers the policy already samples: a group
# with no right answer gives no advantage to being right (chapter 1). Yue et al.
# {cite}`yue2025limit` find that RL on large models, too, mostly makes likelier what
# the base model could already sample, while distillation can teach answers outside
# it. A hard benchmark for a 32B base is a task where right answers are rare in its
# samples. For our student base, its model card records how often a few samples
# hold one:

# %%
student_card = pd.read_csv(STUDENT_DIR / "eval.csv", index_col=0)
say(f"The student base answers a share "
    f"{student_card.loc['sampled', 'pass_at_k']:.3f} of the held-out problems right "
    f"at least once in {student_card.loc['sampled', 'k']:.0f} samples "
    f"(pass@{student_card.loc['sampled', 'k']:.0f}); a group of 8 has twice the "
    f"samples, so most groups hold a right answer to reinforce. Right answers are "
    f"already in its reach; RL only has to make them the likeliest.")

# %% [markdown]
# ### A student that rarely finds the answer
#
# To see the other regime, the same student can start from a base that rarely samples
# a right answer: the `mini` base's recipe run for 300 steps instead of 3,000, with
# its own, shorter schedule (`data/models/mini-qwen2-base-300`). It is weak because
# it was pretrained a tenth as long, not because it is small, but for RL the effect
# is the one the paper points to. The same RL run and the same SFT on the teacher's
# answers, two seeds each (`scripts/ch14_runs.sh` with `STUDENT` and `TAG=_early`):

# %%
EARLY_DIR = MODELS / "mini-qwen2-base-300"
early_card = pd.read_csv(EARLY_DIR / "eval.csv", index_col=0)
early_held = {(arm, seed): pd.read_csv(RUNS / f"ch14_early_{arm}_seed{seed}_cpu"
                                       / "heldout.csv", index_col=0).loc["greedy"]
              for arm in ("rl", "sft") for seed in (0, 1)}
early = pd.DataFrame({
    label: [early_held[arm, seed]["strict_acc"] for seed in (0, 1)]
    for arm, label in (("rl", "RL"), ("sft", "distil (SFT)"))}, index=[0, 1])
early.index.name = "seed"
display(early)
rl_early = [pd.read_csv(RUNS / f"ch14_early_rl_seed{seed}_cpu" / "metrics.csv")
            for seed in (0, 1)]
early_format = [early_held["rl", seed]["format_rate"] for seed in (0, 1)]
say(f"This base answers {early_card.loc['greedy', 'strict_acc']:.3f} of the held-out "
    f"problems greedily and {early_card.loc['sampled', 'pass_at_k']:.3f} with any of "
    f"{early_card.loc['sampled', 'k']:.0f} samples. RL from it ends at "
    f"{early['RL'].min():.3f} / {early['RL'].max():.3f}"
    + (", below where it started" if early["RL"].max()
       < early_card.loc["greedy", "strict_acc"] else "")
    + f": the training accuracy of "
    f"its first ten steps was "
    f"{np.mean([m['accuracy'].head(10).mean() for m in rl_early]):.3f}, so almost "
    f"every group was all wrong, and the reward it could collect came from the "
    f"format (a share {min(early_format):.3f} of its final answers are well formed), "
    f"which moved the policy with nothing to say about being right. "
    f"SFT on the teacher's answers, which needs no right answer from the student, "
    f"takes the same base to {early['distil (SFT)'].min():.3f} / "
    f"{early['distil (SFT)'].max():.3f}: far below the teacher, since a base trained "
    f"a tenth as long cannot yet compute what the teacher writes, but "
    f"{early['distil (SFT)'].mean() / early['RL'].mean():.1f} times what RL reached. "
    f"Where the student cannot find the answers, distillation still gives it "
    f"something to learn, and RL has almost nothing to reinforce.")

# %% [markdown]
# ## What only the teacher could give
#
# Accuracy is not all the teacher has. Its answers are in one language and end with a
# check of the result (chapter 10's readable pattern), habits the cold start put into
# it. The designed corpus the student was pretrained on has no such check; a sample of
# its documents:

# %%
from grpo_lib.corpus import sample_documents  # noqa: E402
from grpo_lib.tasks.arithmetic import make_problems  # noqa: E402

docs = sample_documents(make_problems(500, seed=0), 2000, seed=0)
print(f"{sum('Check:' in d['response'] for d in docs)} of {len(docs):,} corpus "
      f"documents contain 'Check:'")
habits = results.groupby("route", sort=False)[["lang_mix_rate", "checks",
                                               "mean_length"]].mean()
habits.loc["student base (no answers kept)"] = [
    bases.loc["mini-qwen2-base", "lang_mix_rate"], float("nan"),
    bases.loc["mini-qwen2-base", "mean_length"]]
kept_answers = pd.DataFrame({"completion": [r["messages"][1]["content"]
                                            for r in kept]})
habits.loc["teacher (checks: its kept answers)"] = [
    teacher_card.loc["greedy", "lang_mix_rate"], checks_share(kept_answers),
    teacher_card.loc["greedy", "mean_length"]]
display(habits.round(3))
say(f"RL on the student keeps the base's language mixing, even raises it (a share "
    f"{habits.loc['RL', 'lang_mix_rate']:.3f} of its held-out answers mix languages, "
    f"against {bases.loc['mini-qwen2-base', 'lang_mix_rate']:.3f} for the base), "
    f"and never writes a check ({habits.loc['RL', 'checks']:.3f}): nothing in its "
    f"reward asks for either, and it cannot reinforce a habit it never samples. The "
    f"distilled students write as the teacher does: mixed answers "
    f"{habits.loc['distil (SFT)', 'lang_mix_rate']:.3f}, a check in "
    f"{habits.loc['distil (SFT)', 'checks']:.3f} of their answers, "
    f"{habits.loc['distil (SFT)', 'mean_length']:.0f} tokens on average. That is the "
    f"part of the R1 result this task can show: the student inherits, in one SFT "
    f"stage, what cost the teacher its cold start.")

# %% [markdown]
# ### Its blind spots too
#
# The teacher is not equally good at every kind of problem. The held-out problems by
# kind (how many numbers, brackets or not, whether precedence changes the result):
# the teacher answering here, the students from their stored answers, the mean of
# two seeds.

# %%
N_TEACHER = P.pick(smoke=16, cpu=500, gpu=500)
_, teacher_answers = evaluate(teacher, tokenizer, test, n=N_TEACHER,
                              max_new_tokens=128, return_samples=True)
problems = pd.read_json(DATA_DIR / "test.jsonl", lines=True).head(500)
problems["kind"] = [f"{n} numbers" + (", brackets" if b else "")
                    + (", precedence" if p else "")
                    for n, b, p in zip(problems["num_operands"], problems["has_parens"],
                                       problems["precedence_matters"])]


def by_kind(answers):
    """Share right per kind of problem, from answers with a prompt_index."""
    kinds = problems["kind"].iloc[answers["prompt_index"]].values
    return answers["correct"].groupby(kinds).mean()


kind_table = pd.DataFrame({"problems": problems["kind"].value_counts(),
                           "teacher": by_kind(teacher_answers)})
kind_seeds = {arm: [by_kind(answers_of[arm, seed]) for seed in (0, 1)]
              for arm in ("rl", "sft", "kd")}  # share right per kind, per seed
for arm, seeds in kind_seeds.items():
    kind_table[ARMS[arm]] = pd.concat(seeds, axis=1).mean(axis=1)
display(kind_table.sort_values("distil (SFT)").round(2))

# %%
worst = kind_table[kind_table["problems"] >= 20]["distil (SFT)"].idxmin()
row = kind_table.loc[worst]
per_seed = {arm: [kinds[worst] for kinds in seeds]
            for arm, seeds in kind_seeds.items()}
apart = min(per_seed["rl"]) > max(per_seed["sft"] + per_seed["kd"])
p_mid = row["distil (SFT)"]
say(f"The distilled students are weakest on problems of {worst} "
    f"({row['problems']:.0f} of the 500): {row['distil (SFT)']:.2f} right after "
    f"SFT, {row['distil (KL)']:.2f} after the KL, and the teacher itself "
    f"{row['teacher']:.2f}. They copy the teacher's blind spot along with its "
    f"habits. RL on the student, which never saw the teacher, answers "
    f"{row['RL']:.2f} of them. With so few problems one share has a standard error "
    f"near {(p_mid * (1 - p_mid) / row['problems']) ** 0.5:.2f}; "
    + ("yet each RL seed is above every distilled seed there. " if apart else
       "and the seeds overlap, so this is a hint, not a finding. ")
    + "A student can learn from its teacher only what the teacher writes; RL finds "
      "its own answers, within what the student samples.")

# %% [markdown]
# ## What each route cost
#
# Seconds of training steps on a 2-core x86 CPU (one torch thread per run, two runs
# side by side), the mean of the two seeds; "distil, then RL" adds its SFT to its RL.
# Distillation's bill has a second part that the student never sees: making the
# teacher and its answers. Those steps ran on a comparable 2-core CPU (an AMD EPYC),
# and their model cards and data README record the times. Pretraining the two bases
# is left out of both sides.

# %%
def recorded_seconds(path, pattern):
    """A time in seconds that a model card or data README states."""
    return float(re.search(pattern, path.read_text()).group(1))


cost = results.groupby("route", sort=False)["seconds"].mean().to_frame(
    "student's steps (s)")
cost.loc["distil, then RL"] += cost.loc["distil (SFT)"]
teacher_bill = pd.Series({
    "cold-start SFT (chapter 10)": recorded_seconds(
        MODELS / "tiny-qwen2-cold-start" / "README.md", r"training time \| (\d+) s"),
    "reasoning RL (chapter 11)": recorded_seconds(
        TEACHER_DIR / "README.md", r"training time \| (\d+) s"),
    "rejection sampling (chapter 12)": recorded_seconds(
        KEPT.parent / "README.md", r"the whole\s+command (\d+) s"),
})
display(cost.round(0))
display(teacher_bill.to_frame("teacher's side (s)"))

# %%
steps_s = cost["student's steps (s)"]
say(f"On the student's side RL and SFT cost about the same, "
    f"{steps_s['RL']:.0f} s of steps for 150 GRPO steps against "
    f"{steps_s['distil (SFT)']:.0f} s for six epochs of SFT; the token-level KL costs "
    f"{steps_s['distil (KL)'] / steps_s['distil (SFT)']:.1f} times the SFT, because "
    f"the teacher, {ratio:.1f} times the student's size, runs on every batch. The "
    f"teacher's side, "
    f"{teacher_bill.sum():,.0f} s on the other CPU, is paid once: the same answers "
    f"could teach any number of students. With the paper's numbers the balance tips "
    f"far more: R1-Zero-Qwen-32B's RL ran over 10k steps, while the distilled models "
    f"reuse answers that R1's own training had made.")

# %% [markdown]
# ## RL after distillation
#
# The paper stops at SFT and notes that RL on the distilled models would add more. The
# last route tries it: 150 GRPO steps from each distilled student, each seed from its
# own.

# %%
change = []
for seed in (0, 1):
    curve = pd.read_csv(RUNS / f"ch14_sft_rl_seed{seed}_cpu" / "eval.csv")
    change.append({"seed": seed, "distilled (step 0)": curve["strict_acc"].iloc[0],
                   "after 150 GRPO steps": curve["strict_acc"].iloc[-1]})
change = pd.DataFrame(change).set_index("seed")
change["change"] = change["after 150 GRPO steps"] - change["distilled (step 0)"]
display(change.round(3))
cold_start = pd.read_csv(MODELS / "tiny-qwen2-cold-start" / "eval.csv", index_col=0)
say(f"RL moves the distilled students by {change['change'].iloc[0]:+.3f} and "
    f"{change['change'].iloc[1]:+.3f}, within the standard error of "
    f"{std_error:.3f}. They start at the teacher's level, and the teacher's own RL, "
    f"on this reward plus a language reward, "
    + ("did not raise its accuracy either"
       if teacher_card.loc["greedy", "strict_acc"]
       - cold_start.loc["greedy", "strict_acc"] <= std_error else "raised it")
    + f" (its cold start answered {cold_start.loc['greedy', 'strict_acc']:.3f}, the "
    f"teacher {teacher_card.loc['greedy', 'strict_acc']:.3f}), so little is left for "
    f"the reward to pay for. RL "
    f"after distillation would have more to do where the teacher's answers leave "
    f"problems unsolved.")

# %% [markdown]
# ## Summary
#
# - **Distillation by sequence** is SFT on a teacher's filtered answers: the recipe of
#   DeepSeek-R1's distilled models, and chapter 12's data reused for a smaller
#   student. **By token**, the student also matches the teacher's distribution at each
#   position (`token_kl`, `distillation_loss`, `DistillTrainer`); it needs the teacher
#   at training time and one shared vocabulary.
# - The forward KL makes the student cover every answer the teacher gives mass to; the
#   reverse KL lets it keep to the likeliest ones.
# - Our teacher writes its answers with near certainty, so the text already carries
#   almost all its distribution, and SFT and the forward KL end in the same place.
#   The reverse KL on the teacher's text fails: its gradient at the teacher's token
#   scales with the student's own probability of it, which starts near zero at many
#   positions.
# - A student with far fewer parameters than the tiny model reaches the teacher's
#   accuracy by every route but the reverse KL, RL included, because its base already
#   samples right answers to most problems. The paper's side shows with a student
#   base that rarely samples a right answer (here one pretrained a tenth as long): RL
#   finds almost nothing to reinforce, and distillation does better.
# - What RL cannot give the student is what it never samples and is not paid for: the
#   teacher's single language and its check of the result arrive with distillation
#   alone. So do the teacher's blind spots: where the teacher answers worst, its
#   students do too, while RL on the student, bound only by what the student
#   samples, does not share them.

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch14`
# that says what is wrong. As written, the stubs raise `NotImplementedError` and the
# cell prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch14`.
#
# **14.1 — The token KL.** Write `my_token_kl(student_logits, teacher_logits)`: the
# forward KL $\mathbb D_{\mathrm{KL}}(p_T \Vert p_S)$ between the softmax of the two
# `[..., V]` logit tensors, one value per position (shape `[...]`). It must stay
# finite when the student gives a token almost no probability.

# %%
from grpo_lib.exercises.ch14 import (check_kd_gradient, check_token_kl,  # noqa: E402
                                     check_topk_kl)


def my_token_kl(student_logits, teacher_logits):
    # your code here
    raise NotImplementedError


try:
    check_token_kl(my_token_kl)
except NotImplementedError:
    print("Not implemented yet: both log-probabilities from log_softmax, weighted by "
          "the teacher's probabilities, summed over the last dimension.")

# %% [markdown]
# **14.2 — The gradient of the softened KL.** Write
# `my_kd_gradient(student_logits, teacher_logits, tau)`: the gradient of
# $\tau^2\, \mathbb D_{\mathrm{KL}}(p_T^\tau \Vert p_S^\tau)$ with respect to the
# student's logits, from a formula you derive (not with autograd; the checker
# compares with autograd). What does it tend to as $\tau$ grows?

# %%
def my_kd_gradient(student_logits, teacher_logits, tau):
    # your code here
    raise NotImplementedError


try:
    check_kd_gradient(my_kd_gradient)
except NotImplementedError:
    print("Not implemented yet: start from the gradient of a cross-entropy in its "
          "logits, softmax minus target, then apply the chain rule through z / tau.")

# %% [markdown]
# **14.3 — A teacher kept to its top $k$ tokens.** Storing a teacher's full
# distributions costs one number per vocabulary entry per token, so pipelines keep
# only the $k$ likeliest. Write `my_topk_kl(student_logits, teacher_logits, k)`: the
# KL from the teacher's top-$k$ probabilities, renormalised to sum to 1, to the
# student's log-probabilities of the same tokens from its full softmax. With
# $k = V$ it is the full KL; for smaller $k$ it is not a KL in the strict sense (the
# student's probabilities of the $k$ tokens need not sum to 1), but it is still
# $\ge 0$.

# %%
def my_topk_kl(student_logits, teacher_logits, k):
    # your code here
    raise NotImplementedError


try:
    check_topk_kl(my_topk_kl)
except NotImplementedError:
    print("Not implemented yet: topk of the teacher's logits gives the tokens; "
          "log_softmax over the k kept logits renormalises them.")

# %% [markdown]
# **14.4 — Think.** (a) What can a student never learn from its teacher's filtered
# answers, however many there are, and what can RL on the student learn that
# distillation cannot? (b) Why did DeepSeek-R1 distil by sequence and not by token?
# Compare the teacher's tokenizer with the students', and count the bytes of the
# distributions of one 1,000-token answer over a vocabulary of about 152,000 tokens
# (Qwen2.5's). (c) The distilled student was trained only on the teacher's states,
# never on its own mistakes. What would you change to train it where it actually
# goes {cite}`agarwal2024gkd`?
