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
# (ch04)=
# # The causal-LM shift
#
# Every quantity of {doc}`02_objective` — the ratio, the KL penalty, the loss — is
# built from one number per completion token:
# $\log\pi_\theta(o_{i,t} \mid q, o_{i,<t})$. Getting that number out of a causal
# language model takes one line of indexing, and it is the line most often written
# wrong: an off-by-one error does not crash, it trains the model on the wrong targets.
# This chapter does the shift once, carefully, in `grpo_lib.logprobs.sequence_logprobs`,
# and checks it four ways: against a table of which logit predicts which token, against
# the model's own cross-entropy loss, across padding sides, and for the assistant-only
# mask of supervised fine-tuning. It ends with the memory cost of the log-softmax at
# Qwen's vocabulary size, the function that avoids most of it, and what bfloat16 does
# to the precision of a log-prob.

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.display import print_environment

print_environment()

# %%
import copy
import math
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch

from grpo_lib.display import say, show_source
from grpo_lib.logprobs import assistant_mask, selective_log_softmax, sequence_logprobs
from grpo_lib.models import build_tokenizer, count_parameters, random_model
from grpo_lib.profiles import profile

P = profile()
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## A model to look at
#
# The shift is a property of the architecture, not of the weights, so a *randomly
# initialised* `Qwen2ForCausalLM` will do: the book's tokenizer (built in
# {doc}`05_tiny_base_model`) and the `tiny` configuration with random weights. Its
# predictions are noise — each token costs about $\log V$ nats — but every identity
# below holds for a trained model too. Until {ref}`ch04-memory`, the model runs on the
# CPU in float32 whatever the profile, so the checked numbers do not depend on the
# reader's accelerator.

# %%
# NBVAL_CHECK_OUTPUT
tokenizer = build_tokenizer()
model = random_model(tokenizer, size="tiny", seed=0).float().eval()
V = len(tokenizer)
print(f"Qwen2ForCausalLM, random weights: {count_parameters(model):,} parameters, "
      f"vocabulary V = {V}, log V = {math.log(V):.3f} nats")

# %% [markdown]
# ## Which logit predicts which token
#
# A causal LM reads $L$ tokens $x_0 \dots x_{L-1}$ and returns logits of shape
# `[B, L, V]`. The logits at position $t$ have seen $x_0 \dots x_t$ and are the
# model's distribution for the **next** token $x_{t+1}$. So:
#
# * `logits[:, t]` scores `input_ids[:, t + 1]`;
# * the first token is never predicted (nothing comes before it);
# * `logits[:, -1]` predicts a token that is not in the input — the one generation
#   would sample next.
#
# For RL we concatenate the prompt ($P$ tokens) and the completion ($C$ tokens), so
# $L = P + C$ (in a batch, $C$ is the width of the padded completions, the $T$ of
# `[B, T, V]`). The completion token $c_j$, counted from $j = 0$ (the $o_{i,j+1}$ of
# {ref}`notation`), sits at position $P + j$, so it is scored by the logits at position
# $P - 1 + j$: the last prompt token predicts the first completion token. Here is the
# alignment for the book's running example, in ChatML:

# %%
# NBVAL_CHECK_OUTPUT
messages = [{"role": "user", "content": "What is 2 + 3 * 4?"}]
prompt_text = tokenizer.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=True)
completion_text = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
completion = tokenizer.encode(completion_text, add_special_tokens=False)
completion += [tokenizer.eos_token_id]  # <|im_end|> ends the turn: it is a target too
P_len, C_len = len(prompt), len(completion)
ids = prompt + completion
tok = tokenizer.convert_ids_to_tokens(ids)
rows = []
for t in list(range(P_len - 4, P_len + 4)) + [None, len(ids) - 2, len(ids) - 1]:
    if t is None:  # skip the middle of the completion
        rows.append({k: "..." for k in rows[-1]})
        continue
    rows.append({"t": t, "input token x_t": tok[t],
                 "part": "prompt" if t < P_len else "completion",
                 "logits[t] predicts": tok[t + 1] if t + 1 < len(ids) else "(beyond)",
                 "scored as": (f"c_{t + 1 - P_len}" if t + 1 >= P_len and
                               t + 1 < len(ids) else "-")})
print(f"P = {P_len} prompt tokens, C = {C_len} completion tokens")
print(pd.DataFrame(rows).to_string(index=False))

# %% [markdown]
# So the completion's log-probs come from `logits[:, P-1 : P+C-1]`, i.e.
# `logits[:, P-1:-1]`, gathered at `input_ids[:, P:]`. By hand, with a full forward
# pass:

# %%
input_ids = torch.tensor([ids])  # [1, P + C]
with torch.no_grad():
    logits = model(input_ids=input_ids).logits  # [1, P + C, V]
by_hand = (logits[:, P_len - 1:-1].log_softmax(-1)  # [1, C, V]: row j predicts c_j
           .gather(-1, input_ids[:, P_len:, None]).squeeze(-1))  # [1, C]
print("logits:", tuple(logits.shape), " completion log-probs:", tuple(by_hand.shape))
print("first five:", by_hand[0, :5])

# %% [markdown]
# ## The library function, and the model's own loss as a referee
#
# `sequence_logprobs` does the same thing for a batch, with three refinements: it
# asks the model for the last $C + 1$ positions only (`logits_to_keep`, which skips the
# LM head — the largest matrix multiply at a large vocabulary — on the prompt), it
# passes `position_ids` so that padding does not move tokens ({ref}`ch04-padding`),
# and it divides the logits by the sampling temperature $\tau$, so that the log-probs
# are those of the distribution the completion was drawn from (when sampling used no
# top-$p$ cut, $p = 1$; {ref}`ch06-temperature`). After checking its inputs, the
# function does this for each micro-batch of rows:

# %%
show_source(sequence_logprobs, start="for start in range", end="all_logp.append")

# %%
def ones(n):  # the mask of an unpadded row: [1, n]
    return torch.ones(1, n, dtype=torch.long)



logp = sequence_logprobs(model, torch.tensor([prompt]), ones(P_len),
                         torch.tensor([completion]), ones(C_len))  # [1, C]
print("shape:", tuple(logp.shape),
      f" max |library - by hand| = {(logp - by_hand).abs().max().item():.1e}")

# %% [markdown]
# An independent referee: Hugging Face's causal-LM loss. Given `labels`, the model
# shifts them itself (it compares `logits[:, :-1]` with `labels[:, 1:]`) and averages
# the cross-entropy over labels that are not `-100`. Mask the prompt with `-100`, and
# the loss is minus the mean of our completion log-probs; times $C$, minus their sum.

# %%
labels = input_ids.clone()
labels[:, :P_len] = -100  # the prompt is context, not a target
with torch.no_grad():
    hf_loss = model(input_ids=input_ids, labels=labels).loss  # mean over C tokens
total = logp.sum().item()
print(f"sum of completion log-probs      : {total:.6f}")
print(f"-(HF loss) x C                   : {-hf_loss.item() * C_len:.6f}")
mean_gap = abs(logp.mean().item() + hf_loss.item())
print(f"|mean log-prob + HF loss|        : {mean_gap:.1e}")
print(f"|sum - (-loss x C)| / |sum|      : "
      f"{abs(total + hf_loss.item() * C_len) / abs(total):.1e}")
assert mean_gap < 1e-5

# %% [markdown]
# They agree to float32 rounding (the two differences printed above; Hugging Face's
# `ForCausalLMLoss` casts the logits to float32 before its cross-entropy, so this is as
# close as two float32 computations get). The library and the model's own loss use the
# same shift. Had we used `logits[:, P:]` — every token "predicting itself" — the
# numbers would not match at all:

# %%
wrong = (logits[:, P_len:].log_softmax(-1)  # [1, C, V]: one position too far
         .gather(-1, input_ids[:, P_len:, None]).squeeze(-1))
print(f"off-by-one sum: {wrong.sum().item():.3f}   correct sum: {total:.3f}")

# %% [markdown]
# (ch04-padding)=
# ## Padding: left, right, and position ids
#
# A batch needs rectangles. GRPO pads **prompts on the left** (so that every row's
# last prompt token sits in the same column, the column that predicts $c_0$ and where
# generation continues) and **completions on the right**. Padding must not change any
# real token's log-prob. Two things make sure of it: the attention mask (no real token
# attends to padding) and the position ids, `cumsum(attention_mask) - 1`, which give
# each row's first real token position 0.
#
# Three prompts of different lengths, three completions of different lengths:

# %%
questions = ["What is 2 + 3 * 4?", "Hi", "Compute (7 - 2) * 3 + 10 - 4 * 2, please."]
answers = ["<answer> 14 </answer>", "Hello! <answer> 0 </answer>",
           "<think> 7 - 2 = 5 </think> <answer> 17 </answer>"]
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                         tokenize=False, add_generation_prompt=True)
           for q in questions]
enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]  # [3, P], left-padded
comps = [tokenizer.encode(a, add_special_tokens=False) + [tokenizer.eos_token_id]
         for a in answers]
C_max = max(map(len, comps))
completion_ids = torch.tensor([c + [tokenizer.pad_token_id] * (C_max - len(c))
                               for c in comps])  # [3, C], right-padded
completion_mask = torch.tensor([[1] * len(c) + [0] * (C_max - len(c)) for c in comps])
print("prompt_mask (left padding):")
print(prompt_mask)
print("completion_mask (right padding):")
print(completion_mask)

# %%
# NBVAL_CHECK_OUTPUT
batch = sequence_logprobs(model, prompt_ids, prompt_mask, completion_ids,
                          completion_mask)  # [3, C]
alone = []
for i, c in enumerate(comps):  # each row on its own: no padding at all
    p = prompt_ids[i][prompt_mask[i].bool()]
    alone.append(sequence_logprobs(model, p[None], ones(len(p)), torch.tensor([c]),
                                   ones(len(c)))[0])
diff_left = max((batch[i, :len(c)] - alone[i]).abs().max().item()
                for i, c in enumerate(comps))
print(f"left-padded batch vs rows alone: max |diff| < 1e-5: {diff_left < 1e-5}")
print("log-probs at padded completion positions:",
      batch[~completion_mask.bool()].tolist())

# %% [markdown]
# The other common layout is **right padding of whole sequences**: `[prompt,
# completion, pad, pad]`. Then the positions are right without help (every row starts
# at column 0), but the completion starts at a different column in every row, so the
# slice differs per row: `logits[i, P_i - 1 : P_i - 1 + C_i]`.

# %%
def right_padded_logprobs(m):
    """[prompt, completion, pad...] per row; returns each row's completion log-probs."""
    seqs = [p[k.bool()].tolist() + c for p, k, c in zip(prompt_ids, prompt_mask, comps)]
    T_max = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([s + [pad] * (T_max - len(s)) for s in seqs])  # [3, T]
    mask = torch.tensor([[1] * len(s) + [0] * (T_max - len(s)) for s in seqs])
    with torch.no_grad():
        lg = m(input_ids=ids, attention_mask=mask).logits  # [3, T, V]
    logp = selective_log_softmax(lg[:, :-1], ids[:, 1:])  # [3, T-1]: row t -> x_t+1
    out = []
    for i, c in enumerate(comps):
        P_i = int(prompt_mask[i].sum())  # this row's prompt length
        out.append(logp[i, P_i - 1: P_i - 1 + len(c)])
    return out


def worst_row_diff(logp_rows, logp_alone):
    return max((row[:len(a)] - a).abs().max().item()
               for row, a in zip(logp_rows, logp_alone))


diff_right = worst_row_diff(right_padded_logprobs(model), alone)
print(f"right-padded sequences vs rows alone: max |diff| = {diff_right:.1e}")

# %% [markdown]
# What goes wrong without `position_ids`? Run the left-padded batch through the model
# with the attention mask only: positions then count the padding, so the shortest
# prompt's tokens sit as many positions later than they would alone as its row has
# padding (the mask above).

# %%
def plain_forward_logprobs(m, prompt_ids, prompt_mask, completion_ids,
                           completion_mask):
    """The left-padded batch without position_ids: positions count the padding."""
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad():
        lg = m(input_ids=ids, attention_mask=mask).logits[:, prompt_ids.shape[1] - 1:-1]
    return selective_log_softmax(lg, completion_ids)


no_pos = plain_forward_logprobs(model, prompt_ids, prompt_mask, completion_ids,
                                completion_mask)
print(f"Qwen2, no position_ids: max |diff| vs rows alone = "
      f"{worst_row_diff(no_pos, alone):.1e}")

# %% [markdown]
# Almost nothing — for this model. Qwen2 encodes positions with rotary embeddings
# (RoPE), and a query–key product under RoPE depends only on the *difference* of the
# two positions. Left padding shifts every real token of a row by the same amount, so
# only floating-point rounding changes. A model with **absolute** position embeddings
# is different. GPT-2 learns one vector per position; the same experiment on a small
# random GPT-2:

# %%
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(GPT2Config(
    vocab_size=V, n_embd=64, n_layer=2, n_head=4, n_positions=256,
    bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)).eval()
gpt2_alone = []
for i, c in enumerate(comps):
    p = prompt_ids[i][prompt_mask[i].bool()]
    gpt2_alone.append(sequence_logprobs(gpt2, p[None], ones(len(p)), torch.tensor([c]),
                                        ones(len(c)))[0])
gpt2_lib = sequence_logprobs(gpt2, prompt_ids, prompt_mask, completion_ids,
                             completion_mask)
gpt2_plain = plain_forward_logprobs(gpt2, prompt_ids, prompt_mask, completion_ids,
                                    completion_mask)
padding = pd.DataFrame({
    "layout": ["left-padded prompts, position_ids (library)", "right-padded sequences",
               "left-padded prompts, no position_ids"],
    "Qwen2 (RoPE)": [diff_left, diff_right, worst_row_diff(no_pos, alone)],
    "GPT-2 (absolute)": [worst_row_diff(gpt2_lib, gpt2_alone),
                         worst_row_diff(right_padded_logprobs(gpt2), gpt2_alone),
                         worst_row_diff(gpt2_plain, gpt2_alone)]})
print("max |log-prob difference| against each row run alone:")
print(padding.to_string(index=False, float_format=lambda v: f"{v:.1e}"))

# %% [markdown]
# With position ids, padding is invisible to both models. Without them, the RoPE model
# survives by a symmetry of its position encoding and the absolute-position model gets
# different numbers. The library passes position ids always, so its log-probs do not
# depend on the architecture or on how much padding a row carries. The sampler of
# {doc}`06_rollouts` uses the same position ids, so the sampler and the trainer see
# every token at the same position.
#
# One layout is refused outright: right-padded *prompts* followed by the completion.
# The column before the completion would then be padding, and it would "predict" the
# first completion token:

# %%
right_prompts = tokenizer(prompts, padding=True, return_tensors="pt",
                          add_special_tokens=False, padding_side="right")
try:
    sequence_logprobs(model, right_prompts["input_ids"],
                      right_prompts["attention_mask"], completion_ids, completion_mask)
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# ## The assistant mask
#
# Supervised fine-tuning ({doc}`chapter 10 <10_cold_start>`) trains on
# conversations, but only the assistant's tokens are targets: the model should learn to
# answer, not to write the user's questions. `assistant_mask` finds those tokens by
# **incremental tokenization**: render the conversation up to each assistant turn with
# the generation prompt, render it once more including the turn, and the new tokens are
# that turn. The mask keeps the content and the closing `<|im_end|>` (the model must
# learn to stop) and drops the role header and the newline after `<|im_end|>`. The
# function after its input checks:

# %%
show_source(assistant_mask, start="full = _render_ids", end="return torch.tensor")

# %%
# NBVAL_CHECK_OUTPUT
chat = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is 2 + 3 * 4?"},
        {"role": "assistant", "content": "<answer> 14 </answer>"},
        {"role": "user", "content": "And 2 * 3?"},
        {"role": "assistant", "content": "<answer> 6 </answer>"}]
chat_ids, chat_mask = assistant_mask(tokenizer, chat)  # [L], [L]
shown = []
for token, m in zip(tokenizer.convert_ids_to_tokens(chat_ids), chat_mask.tolist()):
    token = token.replace("Ġ", "·").replace("Ċ", "\\n")
    shown.append(f"[{token}]" if m else token)
print("[bracketed] = mask 1 (a target); '·' is a space, '\\n' a newline\n")
print(" ".join(shown))
print(f"\n{int(chat_mask.sum())} of {len(chat_ids)} tokens are targets")

# %% [markdown]
# The mask is aligned with the *tokens*: `mask[t] = 1` means "token $t$ is a target".
# Hugging Face's loss does the shift itself, so the labels are simply the ids with
# `-100` wherever the mask is 0 — shifting them by hand as well would shift twice
# (exercise 4.3). Check: the model's loss on those labels equals minus the mean
# log-prob of the masked tokens, computed with the explicit shift (the token at $t$
# scored by the logits at $t-1$, so the mask is read from position 1 on):

# %%
chat_labels = torch.where(chat_mask.bool(), chat_ids, -100)  # [L]
with torch.no_grad():
    out = model(input_ids=chat_ids[None], labels=chat_labels[None])
token_logp = selective_log_softmax(out.logits[0, :-1], chat_ids[1:])  # [L-1]
targets = chat_mask[1:].bool()  # the shift: position t-1 predicts token t
manual = -token_logp[targets].mean()
print(f"HF loss with labels = ids where mask: {out.loss.item():.6f}")
print(f"-mean log-prob of the masked tokens : {manual.item():.6f}")

# %% [markdown]
# (ch04-memory)=
# ## The memory of the log-softmax at Qwen's vocabulary
#
# The naive recipe `logits.log_softmax(-1).gather(-1, ids)` builds a second tensor as
# large as the logits, `[B, T, V]`, to read $B \times T$ numbers from it. At the
# vocabulary of Qwen2.5, $V$ = 151,936 (the `vocab_size` of its configuration
# {cite}`qwen25_05b_config`), the logits and this copy of them are the largest
# tensors of the training step.
# `selective_log_softmax` avoids it:
#
# $$
# \log\operatorname{softmax}(z_{b,t})_i = z_{b,t,i} - \log\sum_{v} e^{z_{b,t,v}}
# $$
#
# gather $z_{b,t,i}$ (`[B, T]`), then compute the logsumexp **one row $b$ at a time**,
# so the only temporary of vocabulary size is one row's `[T, V]`. For bfloat16 logits
# each row gets its own `log_softmax` instead, still one row at a time
# ({ref}`ch04-bf16` measures why). TRL's `selective_log_softmax` follows the same two
# strategies {cite}`vonwerra2020trl`, and the book's tests check that the two agree.
# After its shape checks, the function reads:

# %%
show_source(selective_log_softmax, start="index = index.long()",
            end="return torch.stack(rows)")

# %% [markdown]
# The arithmetic: bytes of the extra tensors, beyond the logits themselves.

# %%
MB = 2 ** 20
B_mem, T_mem = P.pick(smoke=(2, 32), cpu=(4, 256), gpu=(8, 1024))
dtypes = P.pick(smoke=[torch.float32], cpu=[torch.float32, torch.bfloat16],
                gpu=[torch.float32, torch.bfloat16])
mem_device = P.device


def predicted_extra_bytes(method, B, T, V, dtype):
    """Full: a [B, T, V] log-softmax. Selective: one row's [T, V] temporary."""
    return (B if method == "full" else 1) * T * V * dtype.itemsize


QWEN_VOCAB = 151_936  # Qwen2.5's vocabulary size (its config's vocab_size)


print(f"B = {B_mem}, T = {T_mem}, V = {QWEN_VOCAB:,} on {mem_device}; "
      f"MB = 2**20 bytes")
arithmetic = pd.DataFrame([
    {"dtype": str(dt).replace("torch.", ""),
     "logits MB (B*T*V*size)": B_mem * T_mem * QWEN_VOCAB * dt.itemsize / MB,
     "full: extra MB (B*T*V*size)": predicted_extra_bytes(
         "full", B_mem, T_mem, QWEN_VOCAB, dt) / MB,
     "selective: extra MB (T*V*size)": predicted_extra_bytes(
         "selective", B_mem, T_mem, QWEN_VOCAB, dt) / MB}
    for dt in dtypes])
print(arithmetic.to_string(index=False, float_format=lambda v: f"{v:.1f}"))

# %% [markdown]
# Now measured. On a GPU, CUDA's caching allocator reports the peak directly
# (`torch.cuda.max_memory_allocated`). On a CPU the next cells take the CPU branch:
# the PyTorch profiler with `profile_memory=True` records every allocation and free
# made by each operator, and replaying them in time order gives the peak of the memory
# allocated during the call. A run of this chapter on an H100 (the CUDA branch) is
# stored in `data/runs/ch04_gpu_h100/`.

# %%
import contextlib
import os

from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile


@contextlib.contextmanager
def quiet_stderr():
    """Silence the profiler's C++ start/stop lines (they go to file descriptor 2)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def measure_peak_extra(fn, device):
    """Run fn() once; return (peak bytes allocated during it, seconds)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del out
        return torch.cuda.max_memory_allocated() - base, seconds
    with quiet_stderr(), torch_profile(activities=[ProfilerActivity.CPU],
                                       profile_memory=True) as prof:
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
    del out
    changes = []  # (time, bytes): allocations when an op starts, frees when it ends
    for event in prof.events():
        delta = event.self_cpu_memory_usage
        if delta > 0:
            changes.append((event.time_range.start, delta))
        elif delta < 0:
            changes.append((event.time_range.end, delta))
    running = peak = 0
    for _, delta in sorted(changes):
        running += delta
        peak = max(peak, running)
    return peak, seconds


def full_log_softmax(logits, index):
    return logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


METHODS = {"full": full_log_softmax, "selective": selective_log_softmax}
if mem_device == "cpu":  # on a GPU TRL may switch to a fused Triton kernel instead
    try:
        import trl
        from trl.trainer.utils import selective_log_softmax as trl_selective
        METHODS["selective (TRL)"] = trl_selective
    except ImportError:  # TRL is only a test dependency of the book
        pass


# %%
# NBVAL_IGNORE_OUTPUT
records = []
g = torch.Generator(device=mem_device).manual_seed(0)
for dtype in dtypes:
    mem_logits = torch.randn(B_mem, T_mem, QWEN_VOCAB, generator=g, device=mem_device,
                             dtype=torch.float32).to(dtype)  # [B, T, V]
    index = torch.randint(0, QWEN_VOCAB, (B_mem, T_mem), generator=g,
                          device=mem_device)  # [B, T]
    results = {}
    with torch.no_grad():
        for method, fn in METHODS.items():
            fn(mem_logits, index)  # warm-up
            peak, seconds = measure_peak_extra(lambda: fn(mem_logits, index),
                                               mem_device)
            results[method] = fn(mem_logits, index)
            records.append(dict(dtype=str(dtype).replace("torch.", ""), method=method,
                                predicted_MB=predicted_extra_bytes(
                                    method, B_mem, T_mem, QWEN_VOCAB, dtype) / MB,
                                measured_peak_MB=peak / MB, ms=1000 * seconds))
    for method in results:
        gap = (results["full"].float() - results[method].float()).abs().max().item()
        if method != "full":
            print(f"{dtype}: max |full - {method}| = {gap:.1e}")
    del mem_logits
mem_table = pd.DataFrame(records)
mem_table["measured/predicted"] = mem_table.measured_peak_MB / mem_table.predicted_MB
full_peak = mem_table[mem_table.method == "full"].set_index("dtype").measured_peak_MB
mem_table["vs full"] = mem_table.measured_peak_MB / mem_table.dtype.map(full_peak)
print(mem_table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))

# %%
fig, ax = plt.subplots(figsize=(7.5, 3.6))
labels = [r.dtype + "\n" + r.method.replace(" (", "\n(")
          for r in mem_table.itertuples()]
x = range(len(mem_table))
ax.bar([i - 0.2 for i in x], mem_table.predicted_MB, width=0.4, label="predicted")
ax.bar([i + 0.2 for i in x], mem_table.measured_peak_MB, width=0.4,
       label="measured peak")
ax.set_xticks(list(x), labels, fontsize=9)
ax.set_ylabel("extra memory (MB)")
ax.set_title(f"log-softmax at V = {QWEN_VOCAB:,}, B = {B_mem}, T = {T_mem} "
             f"({mem_device})", fontsize=10)
ax.legend(fontsize=9)
plt.tight_layout()
plt.show()

# %%
by_method = mem_table.set_index(["dtype", "method"])
found = []
for dt in mem_table.dtype.unique():
    full, sel = by_method.loc[(dt, "full")], by_method.loc[(dt, "selective")]
    found.append(f"in {dt}, the full log-softmax needed {full.measured_peak_MB:.0f} MB "
                 f"beyond the logits and `selective_log_softmax` "
                 f"{sel.measured_peak_MB:.0f} MB, {sel['vs full']:.2f} of it "
                 f"(1/B = {1 / B_mem:.2f})")
text = "Measured: " + "; ".join(found) + "."
trl_rows = mem_table[mem_table.method == "selective (TRL)"]
over = trl_rows[trl_rows["measured/predicted"] > 1.5]
if len(over):
    text += (f" TRL's function (version {trl.__version__}) peaks at "
             f"{over['measured/predicted'].max():.1f} rows in "
             f"{', '.join(over.dtype)}: its loop assigns the next row's `log_softmax` "
             f"to `row_logps` while that name still holds the previous row, so two "
             f"rows are alive at once. `grpo_lib`'s loop frees each row first (the "
             f"`del` in the source above).")
elif len(trl_rows):
    text += " TRL's function peaks where predicted in every dtype."
ratio = {dt: by_method.loc[(dt, "selective"), "ms"] / by_method.loc[(dt, "full"), "ms"]
         for dt in mem_table.dtype.unique()}  # row by row / whole batch
faster = [dt for dt, r in ratio.items() if r < 0.9]  # clearly, not timing noise
slower = [dt for dt, r in ratio.items() if r > 1.1]
text += (f" The times (`ms`) range from {mem_table.ms.min():.0f} to "
         f"{mem_table.ms.max():.0f} ms; the saving aimed at is memory")
if faster:
    text += (f". In {', '.join(faster)} the row-by-row loop was also faster than "
             f"one `log_softmax` over the whole batch here")
if slower:
    text += (f"{'; in' if faster else '. In'} {', '.join(slower)} the row-by-row "
             f"loop was slower")
say(text + ".")

# %% [markdown]
# Scaled to a real run — say a Qwen2.5-0.5B policy scoring 16 completions of 1,024
# tokens — the arithmetic (no measurement needed) reads:

# %%
# NBVAL_CHECK_OUTPUT
B_real, C_real, P_real = 16, 1024, 256
GB = 1e9
real_run = pd.DataFrame([
    {"dtype": str(dt).replace("torch.", ""),
     "logits, all P+C positions": B_real * (P_real + C_real) * QWEN_VOCAB * dt.itemsize,
     "logits, logits_to_keep=C+1": B_real * (C_real + 1) * QWEN_VOCAB * dt.itemsize,
     "full log_softmax: extra": B_real * C_real * QWEN_VOCAB * dt.itemsize,
     "selective: extra": C_real * QWEN_VOCAB * dt.itemsize}
    for dt in (torch.float32, torch.bfloat16)]).set_index("dtype") / GB
print(f"GB (1e9 bytes), B = {B_real} completions, C = {C_real}, prompt P = {P_real}:")
print(real_run.round(2).T.to_string())

# %% [markdown]
# Computing logits only where they are needed and never materialising the log-softmax
# of the whole batch are two of the cheapest memory savings in RL fine-tuning;
# `sequence_logprobs` does both. TRL's GRPO trainer goes one step further: it replaces
# the model's LM head by a fused one (`add_fused_lm_head` in `trl/trainer/utils.py`,
# version 1.16) that computes the log-probs from the hidden states a chunk of the
# vocabulary at a time, so the full logits never exist {cite}`vonwerra2020trl`. That
# is read from TRL's source, not measured here.
#
# (ch04-bf16)=
# ## What bfloat16 does to a log-prob
#
# Models are trained and sampled in bfloat16: float32's exponent range with far fewer
# mantissa bits. For the log-softmax that matters in one place. The log-sum-exp of a
# row of 151,936 logits is large (measured below), and rounding it to bfloat16
# before subtracting moves every log-prob of the row by as much as that rounding; a
# `log_softmax` computed row by row accumulates in float32 and loses about one
# bfloat16 step in its result, and the log-prob of a likely token is close to 0, where
# that step is small (at most $2^{-8}$ above $-1$). Measured on rows of Qwen's
# vocabulary size whose target token runs from unlikely to nearly certain, against
# float64 on the same bfloat16 logits (so only the computation's rounding counts):

# %%
T_bf = 64
g = torch.Generator().manual_seed(0)
z = torch.randn(T_bf, QWEN_VOCAB, generator=g)  # [T, V]
target = torch.randint(0, QWEN_VOCAB, (T_bf,), generator=g)  # [T]
z[torch.arange(T_bf), target] += torch.linspace(0.0, 25.0, T_bf)  # unlikely .. certain
z16 = z.to(torch.bfloat16)  # the logits as a bfloat16 model returns them
exact = (z16.double().log_softmax(-1)  # [T, V] in float64
         .gather(-1, target[:, None]).squeeze(-1))  # [T]
ways = {
    "float32, z_i - logsumexp (library)":
        selective_log_softmax(z16.float()[None], target[None])[0],
    "bfloat16, z_i - logsumexp":
        z16.gather(-1, target[:, None]).squeeze(-1) - torch.logsumexp(z16, dim=-1),
    "bfloat16, log_softmax per row (library)":
        selective_log_softmax(z16[None], target[None])[0],
}
likely = exact > -1  # probability above 1/e: most of the tokens a policy samples
rows = []
for name, logp in ways.items():
    error = (logp.double() - exact).abs()  # [T]
    rows.append({"computation": name, "max |error|": error.max().item(),
                 "max |error|, p > 1/e": error[likely].max().item()})
precision = pd.DataFrame(rows).set_index("computation")
print(f"{T_bf} rows of V = {QWEN_VOCAB:,} logits, target log-probs from "
      f"{exact.min():.1f} to {exact.max():.0e}; {int(likely.sum())} rows with "
      f"p > 1/e; logsumexp from {torch.logsumexp(z, -1).min():.1f} to "
      f"{torch.logsumexp(z, -1).max():.1f}")
print(precision.to_string(float_format=lambda v: f"{v:.1e}"))

# %%
sub = precision.loc["bfloat16, z_i - logsumexp", "max |error|, p > 1/e"]
row = precision.loc["bfloat16, log_softmax per row (library)", "max |error|, p > 1/e"]
worst_all = precision.loc[precision.index.str.startswith("bfloat16"), "max |error|"]
epsilon = 0.2  # TRL's default clip range
say(f"For the likely tokens, subtracting in bfloat16 is off by up to {sub:.3f} nats: a "
    f"policy ratio ρ computed from such a log-prob is off by a factor up to "
    f"{math.exp(sub):.3f} from rounding alone, {math.expm1(sub) / epsilon:.0%} of "
    f"the way to the clip boundary 1 + ε = {1 + epsilon} (ε = {epsilon}, TRL's "
    f"default `epsilon`). The row-wise "
    f"`log_softmax` is off by at most {row:.4f} nats there. Over all rows both "
    f"bfloat16 computations err by up to {worst_all.min():.2f}-{worst_all.max():.2f} "
    f"nats: a result far below 0 is itself rounded to a coarse bfloat16 grid, so the "
    f"row-wise `log_softmax` helps exactly where the policy puts its mass.")

# %% [markdown]
# The log-softmax is not the only rounding. The whole forward pass in bfloat16 rounds
# the weights and every activation; the left-padded batch of {ref}`ch04-padding`,
# scored by the same random model in three precisions:

# %%
def batch_logprobs(m):
    """The left-padded three-row batch of the padding section, scored by m."""
    return sequence_logprobs(m, prompt_ids, prompt_mask, completion_ids,
                             completion_mask)  # [3, C]


real_tokens = completion_mask.bool()
reference = batch_logprobs(copy.deepcopy(model).double())[real_tokens]  # float64
forward_error = {}
for dtype in (torch.float32, torch.bfloat16):
    logp = batch_logprobs(copy.deepcopy(model).to(dtype))[real_tokens]
    forward_error[dtype] = (logp.double() - reference).abs().max().item()
say(f"Against a float64 forward pass, the completion log-probs of a float32 pass are "
    f"off by at most {forward_error[torch.float32]:.1e} nats, those of a bfloat16 "
    f"pass by up to {forward_error[torch.bfloat16]:.3f} nats. In training, a sampler "
    f"and a trainer that compute the same log-prob in different precisions (or with "
    f"different kernels) therefore disagree: the ratio ρ of a policy that has "
    f"not changed is not exactly 1. TRL offers `cast_lm_head_to_fp32` to run the LM "
    f"head, where the log-probs are made, in float32.")

# %% [markdown]
# ## Exercises
#
# As in {doc}`02_objective`: fill in a stub, run the cell, the checker says what is
# wrong. Solutions: {doc}`../book/solutions/ch04`.
#
# **4.1 — The shift.** `logits` of shape `[B, P + C, V]` come from a forward pass on
# `input_ids = [prompt | completion]` (no padding; every prompt has `P` tokens). Return
# the completion tokens' log-probs, `[B, C]`.

# %%
from grpo_lib.exercises.ch04 import (check_completion_logprobs, check_position_ids,
                                     check_sft_labels)


def my_completion_logprobs(logits, input_ids, prompt_len):
    # your code here
    raise NotImplementedError


try:
    check_completion_logprobs(my_completion_logprobs)
except NotImplementedError:
    print("Not implemented yet: which logits row scores input_ids[:, prompt_len]?")

# %% [markdown]
# **4.2 — Position ids.** Given a left-padded `attention_mask` `[B, L]` (1 = real
# token), return position ids `[B, L]` such that each row's first real token is at
# position 0. (What value padding gets does not matter; the checker ignores it.)

# %%
def my_position_ids(attention_mask):
    # your code here
    raise NotImplementedError


try:
    check_position_ids(my_position_ids)
except NotImplementedError:
    print("Not implemented yet: how many real tokens come before each position?")

# %% [markdown]
# **4.3 — SFT labels.** Given one conversation's `input_ids` `[L]` and its assistant
# `mask` `[L]` (from `assistant_mask`), return the `labels` `[L]` to pass to a Hugging
# Face causal LM so that its loss covers exactly the assistant tokens.

# %%
def my_sft_labels(input_ids, mask):
    # your code here
    raise NotImplementedError


try:
    check_sft_labels(my_sft_labels)
except NotImplementedError:
    print("Not implemented yet: -100 means 'not a target'. Does the model shift?")

# %% [markdown]
# **4.4 — Think.** (a) A colleague computes completion log-probs with
# `logits_to_keep=C` instead of `C + 1` and slices `logits[:, :-1]`. What do they get
# wrong, and which check of this chapter would catch it? (b) Why must the closing
# `<|im_end|>` of an assistant turn be a target in SFT, and why must a completion's EOS
# token count in the GRPO loss?
