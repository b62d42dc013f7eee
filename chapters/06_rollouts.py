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
# (ch06)=
# # Rollouts: sampling a group
#
# GRPO learns only from text the policy wrote itself. For every question $q$ it
# samples a group of $G$ outputs
# $o_1, \dots, o_G \sim \pi_{\theta_{\mathrm{old}}}(\cdot \mid q)$, scores them, and
# compares them with each other {cite}`shao2024deepseekmath`. If all $G$ outputs get
# the same reward, every advantage is zero and the group teaches nothing; if they are
# diverse, some are better than the group and some worse, and that difference is the
# learning signal. So the sampler decides what GRPO can learn, and it also decides how
# long each step takes: text is written one token at a time.
#
# An output is a sequence of tokens and its probability factorises over them:
#
# $$
# \pi_\theta(o \mid q) = \prod_{t=1}^{|o|} \pi_\theta(o_t \mid q, o_{<t}),
# \qquad o_t \sim \operatorname{softmax}\!\big(z_t / \tau\big)
# \text{ restricted to the top-}p\text{ nucleus,}
# $$
#
# where $z_t$ are the model's logits at step $t$, $\tau$ is the temperature and $p$ the
# top-$p$ threshold. This chapter opens `grpo_lib.sampling`, the decode loop every
# later chapter uses: batching with left padding, temperature and top-p, stopping, the
# KV cache, and a speed check against `transformers`' own `model.generate`.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers
from IPython.display import display

from grpo_lib.advantages import group_advantages
from grpo_lib.display import say, show_source
from grpo_lib.evaluation import answer_entropy, group_diversity
from grpo_lib.models import load_model_and_tokenizer, stop_token_ids
from grpo_lib.parsing import extract_answer
from grpo_lib.profiles import profile
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.sampling import (decode_batch, generate, next_token,
                               tokenize_prompts, top_p_filter)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR, chat_prompt, solve_steps

P = profile()
pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 90)
torch.set_printoptions(precision=3, sci_mode=False)

transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar
MODEL_DIR = DATA_DIR.parent / "models" / "tiny-qwen2-base"
model, tok = load_model_and_tokenizer(MODEL_DIR, device=P.device)
print(f"{MODEL_DIR.name}: {sum(p.numel() for p in model.parameters()):,} parameters "
      f"on {P.device}; stop tokens {tok.convert_ids_to_tokens(stop_token_ids(tok))}")

# %% [markdown]
# The model is the base model of {doc}`05_tiny_base_model`, pretrained on a corpus
# with designed flaws: it often computes left to right ($2 + 3 \cdot 4 \to 20$),
# sometimes drops its tags, mixes in Chinese words or repeats a step. The reward used
# throughout this chapter is R1-Zero's pair of rule-based rewards, accuracy and format
# {cite}`deepseekai2025r1`, weighted 1 and 0.1 as in {doc}`03_rule_rewards`.

# %%
reward_fn = combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])

# %% [markdown]
# (ch06-decode-loop)=
# ## The decode loop
#
# Generating for many prompts at once means running them as one batch, a rectangle of
# tokens. Prompts have different lengths, so they are padded. The sampler pads on the
# **left**: then every row's last prompt token sits in the last column, and one forward
# pass gives the next-token logits of every row at `logits[:, -1]`. Padding shifts
# where a prompt starts, so the positions the model sees are counted from each row's
# first real token, $\text{pos} = \operatorname{cumsum}(\text{mask}) - 1$.

# %%
show_source(tokenize_prompts)

# %%
# NBVAL_CHECK_OUTPUT
texts, ids, mask = tokenize_prompts(tok, ["7 - 2 =", "2 + 3 * 4 ="], tok.pad_token_id)
positions = (mask.cumsum(-1) - 1).clamp(min=0)
for name, t in [("ids", ids), ("mask", mask), ("positions", positions)]:
    print(f"{name:>9}: {t.tolist()}")
print("tokens of row 0:", tok.convert_ids_to_tokens(ids[0]))

# %% [markdown]
# Each step turns the last position's logits into one token. Greedy decoding takes the
# arg-max; sampling divides the logits by the temperature, keeps the top-p nucleus
# ({ref}`ch06-temperature`) and draws from the softmax:

# %%
show_source(next_token)

# %% [markdown]
# The loop itself: one **prefill** pass over the prompts, then one token per step. A
# row stops at its first stop token (`<|im_end|>` or `<|endoftext|>`); after that it
# writes padding that its mask marks 0, and the loop ends when every row has stopped or
# the budget `max_new_tokens` is spent. The `use_cache` switch is the subject of
# {ref}`ch06-kv-cache`. (The docstring, which says the same, is left out.)

# %%
show_source(decode_batch, docstring=False)

# %% [markdown]
# `generate` wraps this loop: it renders chat prompts with the chat template, repeats
# each prompt $G$ times **contiguously** (rows $[q_0]\times G + [q_1]\times G + \dots$,
# the layout every `grpo_lib` function assumes), decodes in chunks of `batch_size` rows,
# and returns a `Rollout` with the prompt and completion tokens, their masks, the
# `finished` flags and the decoded texts.
#
# (ch06-group)=
# ## A group for one prompt
#
# The question of {doc}`01_two_plus_three_times_four`, asked to the base model $G$
# times at temperature 1:

# %%
G = P.pick(smoke=4, cpu=8, gpu=16)
MAX_NEW = P.pick(smoke=64, cpu=96, gpu=96)
rollout = generate(model, tok, [chat_prompt("2 + 3 * 4")], num_generations=G,
                   max_new_tokens=MAX_NEW, temperature=1.0, seed=0)
print(f"rollout: prompt_ids {tuple(rollout.prompt_ids.shape)}, completion_ids "
      f"{tuple(rollout.completion_ids.shape)}, {int(rollout.finished.sum())} of {G} "
      f"finished")
print(repr(rollout.prompts[0]))

# %%
# NBVAL_IGNORE_OUTPUT
rewards = reward_fn(rollout.texts, answer=["14"] * G)
group = pd.DataFrame({
    "completion": rollout.texts,
    "tokens": rollout.completion_lengths.tolist(),
    "finished": rollout.finished.tolist(),
    "reward": rewards,
    "advantage": group_advantages(rewards, group_size=G).tolist(),
})
group

# %%
# NBVAL_IGNORE_OUTPUT
d = group_diversity(rollout.texts, G, rewards).iloc[0]
print(f"{d.distinct} distinct completions out of {G}, answer entropy "
      f"{d.answer_entropy:.2f} bits, reward mean {d.reward_mean:.3f}, "
      f"std {d.reward_std:.3f}")

# %%
ltr_answer = str(solve_steps("2 + 3 * 4", precedence=False)[-1][3])  # adds first
kind = ["right" if a == "14" else "left to right" if a == ltr_answer else "other"
        for a in (extract_answer(t, strict=True) for t in rollout.texts)]
others = [i for i, k in enumerate(kind) if k == "other"]
say(f"Of the {G} completions, {kind.count('right')} are right (14), "
    f"{kind.count('left to right')} give the designed left-to-right answer "
    f"({ltr_answer}), and {len(others)} "
    f"give{'s' if len(others) == 1 else ''} another answer or none"
    + (f" (row{'s' if len(others) > 1 else ''} "
       f"{', '.join(map(str, others))} of the table)." if others else "."))

# %% [markdown]
# This is one GRPO group: the completions that beat the group mean get positive
# advantages and will be made more likely, the rest negative ones. The spread of the
# answers is what we measure next. `group_diversity` reports, per group, the number of
# distinct texts, the entropy of the answers
# $H = -\sum_a \hat q_a \log_2 \hat q_a$, with $\hat q_a$ the share of the $G$ answers
# equal to $a$ (0 when all $G$ answers agree, $\log_2 G$ when all differ), and the
# reward statistics:

# %%
show_source(answer_entropy)

# %% [markdown]
# (ch06-temperature)=
# ## Temperature and top-p
#
# Temperature rescales the logits before the softmax,
# $\pi_\tau(v) = e^{z_v / \tau} / \sum_u e^{z_u / \tau}$: $\tau < 1$ sharpens the
# distribution towards the arg-max ($\tau \to 0$ is greedy), $\tau > 1$ flattens it
# towards uniform. Top-p (nucleus) sampling {cite}`holtzman2020nucleus` sorts the
# tokens by probability, $\pi_\tau(v_{(1)}) \ge \pi_\tau(v_{(2)}) \ge \dots$, and
# keeps the smallest set whose mass reaches $p$; the long tail of unlikely tokens,
# where a single bad draw can derail a whole completion, is cut off:
#
# $$
# \text{keep } v_{(i)} \iff \sum_{j<i} \pi_\tau(v_{(j)}) < p .
# $$

# %%
show_source(top_p_filter)

# %% [markdown]
# By hand, on four logits $z = (2, 1, 0, -1)$:

# %%
# NBVAL_CHECK_OUTPUT
z = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
rows = {f"τ = {t}": (z / t).softmax(-1)[0].tolist() for t in (0.5, 1.0, 2.0)}
for p in (0.5, 0.9):
    rows[f"τ = 1, top_p = {p}"] = top_p_filter(z, p).softmax(-1)[0].tolist()
pd.DataFrame(rows, index=[f"z = {v:g}" for v in z[0].tolist()]).T.round(4)

# %% [markdown]
# At $\tau = 1$ the first token already holds more than half of the mass, so
# `top_p = 0.5` keeps it alone (sampling becomes greedy), while `top_p = 0.9` keeps the
# first three tokens and renormalises them.
#
# Now the real model: `n_prompts` test problems, $G$ samples each, at several
# temperatures (top-p 1) and several top-p values ($\tau = 1$). For each setting we
# measure diversity (distinct completions per group, answer entropy), the reward
# (mean, and the standard deviation *within* a group, which is what GRPO divides by),
# and the share of **zero-variance groups**: groups where all $G$ rewards are equal and
# every advantage is 0.

# %%
n_prompts = P.pick(smoke=4, cpu=16, gpu=64)
G_SWEEP = P.pick(smoke=4, cpu=8, gpu=16)
test = load_task_split("arithmetic", "test").select(range(n_prompts))


def sweep_point(temperature: float, top_p: float) -> dict:
    """Sample G completions per test prompt and summarise diversity and rewards."""
    r = generate(model, tok, list(test["prompt"]), num_generations=G_SWEEP,
                 max_new_tokens=MAX_NEW, temperature=temperature, top_p=top_p,
                 batch_size=256, seed=0)
    answers = [a for a in test["answer"] for _ in range(G_SWEEP)]
    rw = reward_fn(r.texts, answer=answers)
    d = group_diversity(r.texts, G_SWEEP, rw)
    return {"temperature": temperature, "top_p": top_p,
            "distinct": d.distinct.mean(), "answer_entropy": d.answer_entropy.mean(),
            "reward": d.reward_mean.mean(), "within_group_std": d.reward_std.mean(),
            "zero_std_groups": d.zero_std.mean(), "truncated": 1 - r.finished.float()
            .mean().item()}


# 9 settings; the next cell prints how long they took
start = time.perf_counter()
temps = [0.0, 0.3, 0.6, 1.0, 1.3]
top_ps = [0.3, 0.6, 0.9, 1.0]
settings = [(t, 1.0) for t in temps] + [(1.0, p) for p in top_ps]
points = [sweep_point(t, p) for t, p in settings]
sweep_t = pd.DataFrame(points[:len(temps)])
sweep_p = pd.DataFrame(points[len(temps):])
sweep_seconds = time.perf_counter() - start

# %%
# NBVAL_IGNORE_OUTPUT
print(f"{len(temps) + len(top_ps)} settings x {n_prompts} prompts x G={G_SWEEP} in "
      f"{sweep_seconds:.1f} s on {P.device}")
pd.concat([sweep_t, sweep_p], keys=["temperature sweep", "top-p sweep"])

# %%
# NBVAL_IGNORE_OUTPUT
fig, axes = plt.subplots(2, 2, figsize=(7.5, 5.6), sharex=True)
panels = [("answer_entropy", "answer entropy per group (bits)"),
          ("zero_std_groups", "share of zero-variance groups"),
          ("reward", "mean reward"),
          ("within_group_std", "reward std within a group")]
for data, key, style in [(sweep_t, "temperature", "o-"), (sweep_p, "top_p", "s--")]:
    label = "vary τ (top_p = 1)" if key == "temperature" else "vary top_p (τ = 1)"
    for ax, (column, _) in zip(axes.flat, panels):
        ax.plot(data[key], data[column], style, label=label)
for ax, (_, title) in zip(axes.flat, panels):
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
for ax in axes[1]:
    ax.set_xlabel("τ  or  top_p")
axes[0, 0].legend(fontsize=9)
plt.tight_layout()
plt.show()

# %%
cold = sweep_t.iloc[0]
hot = sweep_t[sweep_t.temperature == 1.0].iloc[0]
hottest = sweep_t.iloc[-1]
best = sweep_t.loc[sweep_t.reward.idxmax()]
narrow = sweep_p.iloc[0]
text = (f"At τ = 0 (greedy), {cold.zero_std_groups:.0%} of the groups have zero "
        f"reward variance (answer entropy {cold.answer_entropy:.2f} bits, mean reward "
        f"{cold.reward:.3f}); at τ = 1, {hot.zero_std_groups:.0%} (entropy "
        f"{hot.answer_entropy:.2f} bits, mean reward {hot.reward:.3f}). With "
        f"top_p = {narrow.top_p:g} at τ = 1, {narrow.zero_std_groups:.0%} of the "
        f"groups have zero variance. ")
if hottest.reward < best.reward:
    text += (f"The mean reward peaks at τ = {best.temperature:g} ({best.reward:.3f}) "
             f"and falls to {hottest.reward:.3f} at the hottest, "
             f"τ = {hottest.temperature:g}, where {hottest.truncated:.0%} of the "
             f"completions run out of budget (against {hot.truncated:.0%} at τ = 1). ")
else:
    text += (f"The mean reward does not fall at the hottest setting, "
             f"τ = {hottest.temperature:g} ({hottest.reward:.3f}). ")
best_p = sweep_p.loc[sweep_p.reward.idxmax()]
if best_p.top_p < 1.0 and best_p.reward > hot.reward:
    text += (f"Cutting the tail with top_p = {best_p.top_p:g} raises the mean reward "
             f"to {best_p.reward:.3f} (from {hot.reward:.3f} at top_p = 1) but leaves "
             f"{best_p.zero_std_groups:.0%} of the groups with zero variance (against "
             f"{hot.zero_std_groups:.0%}). ")
say(text + f"(The sweep uses {n_prompts} prompts, one group each, so a share of "
    f"groups moves in steps of one group in {n_prompts}, {1 / n_prompts:.0%}.)")

# %% [markdown]
# What to notice:
#
# - At $\tau = 0$ all $G$ samples of a prompt are the same text, so **every** group
#   has zero reward variance: greedy rollouts give GRPO nothing to learn from. Raising
#   the temperature or top-p spreads the answers (higher entropy) and leaves fewer
#   groups without a learning signal.
# - Reward and diversity are different goals. Sampling can beat greedy on average when
#   the base model's most likely path is its designed left-to-right mistake; past some
#   temperature the samples get sloppier; and a top-p cut-off can raise the mean
#   reward while leaving more groups without a learning signal (the sentence under the
#   figure reads these from the sweep). RL recipes sample at or near $\tau = 1$
#   without a nucleus cut-off (TRL's defaults are `temperature=1.0`, `top_p=1.0`
#   {cite}`vonwerra2020trl`): then the completions come from the policy itself, and
#   the log-probs in the loss are the policy's own. When you do change the temperature,
#   the loss must use the same one: `sequence_logprobs` of {doc}`04_causal_lm_shift`
#   takes a `temperature` for that.
# - A zero-variance group is one where all $G$ rewards are equal: all wrong (too hard
#   for the policy) or all right (too easy). {ref}`ch09-zero-variance` shows what
#   happens to training when most groups are like that, and DAPO's *dynamic sampling*
#   {cite}`yu2025dapo` drops such groups.
#
# (ch06-stopping)=
# ## Stopping and truncation
#
# A completion ends when the model writes a stop token. The completion mask covers the
# tokens up to **and including** that token: the model has to learn to stop, so the
# stop token's log-probability is trained like any other. A row that never writes one
# before `max_new_tokens` is **truncated**: `finished` is False and its text is cut off
# mid-thought. The same prompt and seed as in {ref}`ch06-group`, with a budget that the
# longest completions of that group exceed, shows both kinds in one group:

# %%
lengths_g = rollout.completion_lengths
budget = (int(lengths_g.median()) + int(lengths_g.max())) // 2  # cuts the longest rows
budget = max(4, min(budget, int(lengths_g.max()) - 1))
short = generate(model, tok, [chat_prompt("2 + 3 * 4")], num_generations=G,
                 max_new_tokens=budget, temperature=1.0, seed=0)
done_rows = short.finished.nonzero().flatten().tolist()
cut_rows = (~short.finished).nonzero().flatten().tolist()
print(f"budget {budget} tokens (between the median and the longest length of the "
      f"group above): {len(done_rows)} finished, {len(cut_rows)} truncated")


def show_row(r, i, width=8):
    """Row i's last tokens (and two columns after its end) with ids and mask values."""
    end = min(r.completion_ids.shape[1], int(r.completion_lengths[i]) + 2)
    cols = range(max(0, end - width), end)
    return pd.DataFrame({
        "token": tok.convert_ids_to_tokens(r.completion_ids[i, list(cols)].tolist()),
        "id": r.completion_ids[i, list(cols)].tolist(),
        "mask": r.completion_mask[i, list(cols)].tolist()}, index=list(cols)).T


# %%
# NBVAL_IGNORE_OUTPUT
for i in (done_rows[:1] + cut_rows[:1]):
    kind = "finished" if short.finished[i] else "TRUNCATED"
    print(f"row {i} ({kind}, {int(short.completion_lengths[i])} tokens): "
          f"{short.texts[i]!r}")
    display(show_row(short, i))

# %% [markdown]
# In the finished row the mask ends with a 1 on the stop token and the padding after
# it is 0. The truncated row has 1s up to the last column and no stop token. When the
# budget runs out before `</answer>`, the row scores 0 however good its reasoning was;
# even a row cut just before its stop token counts as truncated. Two things follow for
# training. The budget is a hyper-parameter with a bias: long, careful answers are cut
# more often, so a tight budget pushes the model towards short answers. And trainers
# offer to leave truncated rows out of the loss (TRL's `mask_truncated_completions`,
# DAPO's overlong filtering {cite}`yu2025dapo`). The evaluation harness reports the
# truncated share next to the accuracy for the same reason.
#
# (ch06-kv-cache)=
# ## The KV cache
#
# In a causal transformer, the key and value vectors of a token depend only on that
# token and the ones before it. When step $t$ adds one token, the keys and values of the
# $P + t - 1$ earlier tokens are exactly what they were a step ago. The KV cache keeps
# them: after the prefill, each step feeds **one** token, computes its query, key and
# value, appends the new key and value to the cache and attends over all cached ones.
# Without a cache, every step runs the whole sequence again. Counting token positions
# pushed through the network for a prompt of $P$ tokens and $N$ new tokens:
#
# $$
# \text{with cache: } P + (N - 1), \qquad
# \text{without: } \sum_{t=0}^{N-1} (P + t) = NP + \tfrac{N(N-1)}{2} .
# $$

# %%
# NBVAL_CHECK_OUTPUT
P_len = int(rollout.prompt_mask[0].sum())
for N in (16, 64, 256):
    with_cache, without = P_len + N - 1, N * P_len + N * (N - 1) // 2
    print(f"P = {P_len}, N = {N:>3}: {with_cache:>6,} vs {without:>7,} token positions "
          f"({without / with_cache:.1f}x)")

# %% [markdown]
# The cache costs memory instead: for every layer, a key and a value of size
# $H_{kv} \times d_{head}$ per token and row,
# $\; 2 \cdot n_{\text{layers}} \cdot H_{kv} \cdot d_{head} \cdot \text{bytes} \;$ per
# token. Qwen2 uses grouped-query attention (fewer key/value heads than query heads) to
# shrink this {cite}`yang2024qwen2`. Here is the cache after a prefill of four rows of
# our group, and its size:

# %%
# NBVAL_CHECK_OUTPUT
from transformers import DynamicCache

from grpo_lib.sampling import cache_kwarg  # `cache=`, or `past_key_values=` before 5.24

cfg = model.config
head_dim = cfg.hidden_size // cfg.num_attention_heads
cache = DynamicCache(config=cfg)
with torch.inference_mode():
    model(input_ids=rollout.prompt_ids[:4], attention_mask=rollout.prompt_mask[:4],
          **cache_kwarg(model, cache), use_cache=True)  # 4 rows of the group
print(f"layers {len(cache.layers)}, keys of layer 0 "
      f"{tuple(cache.layers[0].keys.shape)}  [rows, kv heads, tokens, head dim]")
per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
print(f"{cfg.num_hidden_layers} layers x {cfg.num_key_value_heads} kv heads x "
      f"{head_dim} dims x 2 (K and V) x 4 bytes = {per_token:,} bytes per token")
print(f"a batch of 256 rows x 512 tokens: {per_token * 256 * 512 / 2**20:.0f} MiB")

# %% [markdown]
# Now the time. Same prompts, greedy, every row forced to write exactly $N$ tokens
# (`ignore_eos=True`), with and without the cache:

# %%
lengths = P.pick(smoke=[8, 16, 32], cpu=[16, 32, 64, 128], gpu=[16, 32, 64, 128, 256])
prompts8 = list(test["prompt"])[:4]


def timed(**kw) -> tuple[float, torch.Tensor]:
    """Seconds for one greedy generate call, and its completion ids."""
    if P.device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = generate(model, tok, prompts8, num_generations=2, do_sample=False,
                 ignore_eos=True, **kw)
    if P.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, r.completion_ids


timed(max_new_tokens=4)  # warm-up
cache_rows, same_tokens = [], True
for N in lengths:
    t_with, ids_with = timed(max_new_tokens=N, use_cache=True)
    t_without, ids_without = timed(max_new_tokens=N, use_cache=False)
    same_tokens &= torch.equal(ids_with, ids_without)
    cache_rows.append({"new tokens": N, "with cache (s)": t_with,
                       "without (s)": t_without, "speed-up": t_without / t_with})
cache_table = pd.DataFrame(cache_rows)
print("identical tokens with and without the cache:", same_tokens)

# %%
# NBVAL_IGNORE_OUTPUT
fig, ax = plt.subplots(figsize=(5, 3.2))
x = cache_table["new tokens"]
ax.plot(x, cache_table["with cache (s)"], "o-", label="with cache")
ax.plot(x, cache_table["without (s)"], "s--", label="without")
ax.set_xlabel("new tokens per row")
ax.set_ylabel("seconds (8 rows)")
ax.set_title(f"KV cache on {P.device}", fontsize=10)
ax.legend()
ax.grid(alpha=0.3)
plt.show()
cache_table

# %%
P_cache = tokenize_prompts(tok, prompts8, tok.pad_token_id)[1].shape[1]
first, last = cache_table.iloc[0], cache_table.iloc[-1]
N_first, N_last = int(first["new tokens"]), int(last["new tokens"])
positions_ratio = ((N_last * P_cache + N_last * (N_last - 1) // 2)
                   / (P_cache + N_last - 1))
say(f"Per new token, the cached loop takes "
    f"{1000 * first['with cache (s)'] / N_first:.1f} ms at N = {N_first} and "
    f"{1000 * last['with cache (s)'] / N_last:.1f} ms at N = {N_last}; the loop "
    f"without a cache {1000 * first['without (s)'] / N_first:.1f} ms and "
    f"{1000 * last['without (s)'] / N_last:.1f} ms. At N = {N_last} the cache saves "
    f"a factor {last['speed-up']:.1f} in time but a factor {positions_ratio:.0f} in "
    f"token positions (prompts of {P_cache} columns): on a model this small, the "
    f"fixed cost of each forward call, not the number of positions, takes most of the "
    f"time.")

# %% [markdown]
# Both versions produce the same tokens; only the work differs. The larger the model
# and the longer the completions, the more of the time goes into the positions
# themselves, and the closer the saving gets to the count of positions: with a real
# model and long reasoning traces, decoding without a cache is not an option.
#
# (ch06-vs-generate)=
# ## The sampler against `model.generate`
#
# `transformers` ships its own decoding loop, `model.generate`. The book's sampler
# exists to be read, but it has to be right and not slow. Right: greedy decoding must
# produce the same tokens as `model.generate(do_sample=False)` on the same left-padded
# prompts.

# %%
# NBVAL_CHECK_OUTPUT
check = generate(model, tok, list(test["prompt"])[:8], max_new_tokens=MAX_NEW,
                 do_sample=False)
enc = tok(check.prompts, return_tensors="pt", padding=True, add_special_tokens=False)
enc = {k: v.to(P.device) for k, v in enc.items()}
with torch.inference_mode():
    ref = model.generate(**enc, do_sample=False, max_new_tokens=MAX_NEW,
                         eos_token_id=stop_token_ids(tok),
                         pad_token_id=tok.pad_token_id)
ref = ref[:, enc["input_ids"].shape[1]:]
print("same prompt tokens:", torch.equal(enc["input_ids"], check.prompt_ids))
print("same completion tokens:", torch.equal(ref, check.completion_ids))

# %% [markdown]
# And the speed: both decode the same prompts, 8 samples each, forced to the same
# number of new tokens (`ignore_eos=True` here, `min_new_tokens` there), sampling at
# $\tau = 1$ with no top-k. The median of a few runs after a warm-up
# (`benchmarks/sampler_vs_generate.py --engine transformers` does the same with more
# runs and options; the script's default engine is chapter 19's faster loop):

# %%
n_bench, T_bench = P.pick(smoke=(4, 16), cpu=(16, 64), gpu=(64, 128))
bench_prompts = list(load_task_split("arithmetic", "test")["prompt"])[:n_bench]


def run_ours():
    generate(model, tok, bench_prompts, num_generations=8, max_new_tokens=T_bench,
             ignore_eos=True, seed=0)


def run_hf():
    texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
             for p in bench_prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        model.generate(**{k: v.to(P.device) for k, v in enc.items()},
                       num_return_sequences=8, do_sample=True, top_k=0,
                       max_new_tokens=T_bench, min_new_tokens=T_bench,
                       pad_token_id=tok.pad_token_id)


def median_seconds(fn, runs=3):
    times = []
    for _ in range(runs):
        if P.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if P.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


run_ours(), run_hf()  # warm-up
tokens = n_bench * 8 * T_bench
t_ours, t_hf = median_seconds(run_ours), median_seconds(run_hf)

# %%
# NBVAL_IGNORE_OUTPUT
print(f"{n_bench} prompts x 8 samples x {T_bench} tokens on {P.device}")
print(f"grpo_lib sampler:      {tokens / t_ours:>9,.0f} tokens/s")
print(f"transformers generate: {tokens / t_hf:>9,.0f} tokens/s")
print(f"ratio (sampler / generate): {t_hf / t_ours:.2f}")

# %%
speed = t_hf / t_ours
say(f"Here the book's sampler wrote {tokens / t_ours:,.0f} tokens/s and `generate` "
    f"{tokens / t_hf:,.0f}, a ratio of {speed:.2f}: "
    + ("the sampler is not the slower of the two." if speed >= 1 else
       f"the sampler took {1 / speed:.2f} times as long on this run."))

# %% [markdown]
# Both loops call the same model code for the forward passes; what differs is the work
# around them at each step (`generate` runs logits processors, stopping criteria and
# cache bookkeeping that a fixed-purpose loop does not need). With a model this small
# that per-step overhead is a large share of the time, so the ratio depends on the
# device, its number of threads and whatever else runs on it; `benchmarks/README.md`
# records measured runs with the command for each. Neither loop is fast in absolute
# terms: every step launches one small forward pass per token, and on a GPU most of
# that time is Python and kernel-launch overhead, not arithmetic. Removing it (a static
# cache, CUDA graphs) is the subject of {doc}`19_fast_steps`.
#
# ## Summary
#
# - A rollout is a batch of $G$ completions per prompt, decoded token by token from
#   left-padded prompts with positions counted from the first real token.
# - Temperature and top-p trade diversity against quality; GRPO needs the diversity:
#   a group whose rewards are all equal has zero advantages.
# - The completion mask covers every generated token up to and including the stop
#   token; truncated rows have `finished == False` and are a bias to watch.
# - The KV cache makes each decoding step cost one token's forward pass instead of the
#   whole sequence's, for a memory cost that grows with rows, length and layers.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch06` that
# says what is wrong. As written, the stubs raise `NotImplementedError` and the cell
# prints a hint; solutions are in the appendix ({doc}`../book/solutions/ch06`).
#
# **6.1 — Top-p filtering.** Write `my_top_p_filter(logits, top_p)` for `logits` of
# shape `[B, V]`: return the logits with every token outside the nucleus set to
# `-inf`, without calling `grpo_lib`.

# %%
from grpo_lib.exercises.ch06 import check_completion_mask, check_top_p_filter


def my_top_p_filter(logits, top_p):
    # your code here
    raise NotImplementedError


try:
    check_top_p_filter(my_top_p_filter)
except NotImplementedError:
    print("Not implemented yet: which tokens does the nucleus keep? Work in "
          "probability order, then return to vocabulary order.")

# %% [markdown]
# **6.2 — The completion mask.** Write `my_completion_mask(completion_ids, stop_ids)`:
# for `completion_ids` of shape `[B, C]` return a `[B, C]` tensor of 0/1 that is 1 up to
# and including each row's first stop token and 0 after it (1 everywhere for a row
# without a stop token). No Python loop over columns.

# %%
def my_completion_mask(completion_ids, stop_ids):
    # your code here
    raise NotImplementedError


try:
    check_completion_mask(my_completion_mask)
except NotImplementedError:
    print("Not implemented yet: a column is kept while no stop token has come "
          "before it. What counts the stops seen so far?")

# %% [markdown]
# **6.3 — Think.** (a) In the sweep of {ref}`ch06-temperature`, why is the share of
# zero-variance groups exactly 1 at $\tau = 0$, whatever the model? What would it be
# for $G = 1$ at any temperature, and what does that say about GRPO with $G = 1$?
# (b) A trainer samples at $\tau = 0.7$ but computes the log-probabilities of the loss
# at $\tau = 1$. Which distributions are the importance ratios then comparing, and why
# is that a problem? (c) With the formula of {ref}`ch06-kv-cache`, how many bytes does
# the KV cache of Qwen2.5-0.5B (24 layers; 14 query and 2 key/value heads of
# dimension 896 / 14 = 64 {cite}`qwen25_05b_config`; bf16) take for $G = 16$
# completions of 1,024 tokens each, plus a 200-token prompt?
