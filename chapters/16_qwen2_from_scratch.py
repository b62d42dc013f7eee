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
# (ch16)=
# # Qwen2 from scratch
#
# Every chapter so far has called the model as `transformers.Qwen2ForCausalLM`: a
# function from token ids to logits that we trusted without reading. That was enough to
# learn GRPO, but not to make it fast. On a GPU most of a GRPO step on a small model is
# the rollout, and on a CPU about half with chapter 6's loop ({doc}`07_full_loop`
# measures both): one forward pass per generated token, and the forward pass and its
# key/value cache are exactly the part we did not own.
#
# This chapter writes the Qwen2 decoder {cite}`yang2024qwen2` in plain PyTorch, one
# short function per block, each next to its formula:
#
# 1. **RMSNorm**, the normalisation before each sub-layer;
# 2. **rotary position embeddings**, how a token's position enters attention;
# 3. **grouped-query attention**, with the padding mask of a left-padded batch;
# 4. **SwiGLU**, the feed-forward block;
# 5. the layer, the stack, and **tied embeddings**.
#
# Then it checks, live, that the result computes the same logits as `transformers` on
# the book's checkpoints and on a model of Qwen2.5-0.5B's shape, decodes with a
# **static KV cache** that produces the same tokens as `generate`, measures its speed,
# and ends with the **memory arithmetic of training**: what the weights, gradients,
# Adam states and activations of a GRPO update cost for each model size.
#
# The library module is `grpo_lib/qwen2.py`; everything shown below is read from it,
# except `CPUOffloadAdamW.step`, which comes from `grpo_lib/optim.py`.

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
from transformers import (AutoModelForCausalLM, DynamicCache, Qwen2Config,
                          Qwen2ForCausalLM)

from grpo_lib.display import say, show_source
from grpo_lib.logprobs import selective_log_softmax
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.optim import CPUOffloadAdamW, offload_saving
from grpo_lib.profiles import profile
from grpo_lib.qwen2 import (DecoderLayer, Qwen2, Qwen2Settings, StaticKVCache,
                            apply_rope, attention_allowed,
                            decode_static, generate_static, grouped_query_attention,
                            load_qwen2, parameter_count, rms_norm, rope_cos_sin,
                            saved_activation_bytes, sdpa_attention, swiglu,
                            training_memory)
from grpo_lib.sampling import (cache_kwarg, generate, resolve_stop_token_ids,
                               tokenize_prompts)
from grpo_lib.speed import sync
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import DATA_DIR

P = profile()
pd.set_option("display.width", 120)
torch.set_printoptions(precision=4, sci_mode=False)
transformers.utils.logging.disable_progress_bar()

REPO = DATA_DIR.parents[1]
MODELS = {"tiny": REPO / "data/models/tiny-qwen2-base",
          "small": REPO / "data/models/small-qwen2-base"}
test_prompts = list(load_task_split("arithmetic", "test")["prompt"])

# %% [markdown]
# (ch16-shapes)=
# ## The numbers that define a Qwen2
#
# A Qwen2 checkpoint is a folder: `config.json` with a dozen numbers, and the weights in
# safetensors files. `Qwen2Settings.from_dict` reads the numbers this implementation
# needs and refuses what it would compute differently (another architecture,
# sliding-window attention, scaled rotary embeddings). Here are the book's two
# checkpoints and the released Qwen2.5-0.5B, whose numbers are quoted from its
# `config.json` {cite}`qwen25_05b_config`:

# %%
# NBVAL_CHECK_OUTPUT
QWEN25_05B = dict(  # Qwen/Qwen2.5-0.5B, config.json
    model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
    num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
    max_position_embeddings=32768, use_sliding_window=False)
settings = {name: load_qwen2(path).settings for name, path in MODELS.items()}
settings["Qwen2.5-0.5B"] = Qwen2Settings.from_dict(QWEN25_05B)
shape_table = pd.DataFrame({
    name: {"layers L": s.num_hidden_layers, "width D": s.hidden_size,
           "query heads H": s.num_attention_heads,
           "kv heads H_kv": s.num_key_value_heads, "head dim d": s.head_dim,
           "SwiGLU width F": s.intermediate_size, "vocabulary V": s.vocab_size,
           "rope theta": f"{s.rope_theta:g}", "tied": s.tie_word_embeddings,
           "parameters": f"{parameter_count(s):,}"}
    for name, s in settings.items()})
shape_table

# %% [markdown]
# One forward pass, for token ids $x_{1..T}$:
#
# $$
# h^{(0)} = E[x], \qquad
# h' = h^{(\ell)} + \mathrm{Attn}\big(\mathrm{RMSNorm}(h^{(\ell)})\big), \qquad
# h^{(\ell+1)} = h' + \mathrm{SwiGLU}\big(\mathrm{RMSNorm}(h')\big),
# $$
#
# for $\ell = 0 .. L-1$, then $z = \mathrm{RMSNorm}(h^{(L)})\, E^\top$: the logits,
# one score per vocabulary entry and position, with the embedding matrix $E$ used a
# second time as the output layer (*tied* embeddings). The sections below build the
# three blocks.
#
# (ch16-rmsnorm)=
# ## RMSNorm
#
# Each sub-layer sees its input rescaled to a root mean square of 1, then multiplied
# by a learned scale $w$ {cite}`zhang2019rmsnorm`:
#
# $$
# \mathrm{RMSNorm}(x) = w \odot \frac{x}{\sqrt{\frac1D \sum_{i=1}^D x_i^2
#   + \epsilon_{\mathrm{norm}}}}
# $$
#
# Unlike LayerNorm it subtracts no mean and adds no bias; $\epsilon_{\mathrm{norm}}$
# is the config's `rms_norm_eps`. Qwen2 computes the statistic
# in float32 even when the model runs in bfloat16, and casts back before the scale:

# %%
show_source(rms_norm)

# %% [markdown]
# By hand: for $x = (3, 4)$ the root mean square is $\sqrt{(9 + 16)/2} = 3.5355$, so
# with $w = (1, 2)$ and $\epsilon_{\mathrm{norm}} = 0$ the output is $(3, 8) / 3.5355$:

# %%
# NBVAL_CHECK_OUTPUT
print(rms_norm(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0]), eps=0.0))

# %% [markdown]
# (ch16-rope)=
# ## Rotary position embeddings
#
# Attention compares a query with keys by dot products, which know nothing of order.
# Rotary embeddings {cite}`su2021roformer` put the position into the vectors
# themselves: the $d$ dimensions of a head form $d/2$ pairs, and pair $i$ of a token at
# position $n$ is turned by the angle $n\,\omega_i$, with frequencies
# $\omega_i = \theta_{\mathrm{rope}}^{-2i/d}$ from fast ($i = 0$) to slow:
#
# $$
# \begin{pmatrix} x'_i \\ x'_{i+d/2} \end{pmatrix} =
# \begin{pmatrix} \cos n\omega_i & -\sin n\omega_i \\
#                 \sin n\omega_i & \cos n\omega_i \end{pmatrix}
# \begin{pmatrix} x_i \\ x_{i+d/2} \end{pmatrix}
# $$
#
# Qwen2 pairs dimension $i$ with $i + d/2$ (the layout of the `transformers`
# implementation, not the neighbouring pairs of the RoFormer paper), which in vector
# form reads $x' = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin$. The base
# $\theta_{\mathrm{rope}}$ (`rope_theta`) is $10^4$ in the book's models and $10^6$ in
# Qwen2.5: the larger the base, the slower the slowest pairs turn, which keeps distant
# positions apart over a long context. The angles:

# %%
show_source(rope_cos_sin)

# %% [markdown]
# and the rotation, applied to every query and key head:

# %%
show_source(apply_rope)

# %% [markdown]
# Because both vectors are turned, the dot product of a query at position $n$ and a
# key at position $n'$ depends on the positions only through $n - n'$: rotations
# preserve lengths, and $R_n^\top R_{n'} = R_{n'-n}$. A check with random vectors,
# the same offset of 2 at two very different places:

# %%
# NBVAL_CHECK_OUTPUT
g = torch.Generator().manual_seed(0)
q, k = torch.randn(1, 1, 1, 64, generator=g), torch.randn(1, 1, 1, 64, generator=g)


def rotated(x, position, theta=1e6):
    cos, sin = rope_cos_sin(torch.tensor([[position]]), 64, theta, torch.float32)
    return apply_rope(x, cos, sin)


near = (rotated(q, 5) * rotated(k, 3)).sum()
far = (rotated(q, 1005) * rotated(k, 1003)).sum()
print(f"q_5 . k_3       = {near:.4f}")
print(f"q_1005 . k_1003 = {far:.4f}")
print("length kept:", torch.allclose(rotated(q, 1005).norm(), q.norm()))

# %% [markdown]
# Under left padding the position is not the column: a row with three padding tokens
# starts its prompt in column 3 at position 0. The positions are
# $\mathrm{cumsum}(\text{mask}) - 1$, as in {doc}`04_causal_lm_shift`.
#
# (ch16-attention)=
# ## Grouped-query attention and the padding mask
#
# Scaled dot-product attention {cite}`vaswani2017attention` mixes the values of the
# tokens a query may see, weighted by a softmax of the scaled scores:
#
# $$
# \mathrm{Attn}(Q, K, V) = \mathrm{softmax}\!\Big(\frac{Q K^\top}{\sqrt d} + M\Big) V,
# \qquad M_{tj} = \begin{cases} 0 & \text{query } t \text{ may see key } j \\
#                              -\infty & \text{otherwise} \end{cases}
# $$
#
# "May see" has two conditions: the key is not in the future (causal) and the key is
# not padding. For a batch of left-padded rows, one boolean mask of shape
# `[B, 1, T, S]` serves every head:

# %%
show_source(attention_allowed)

# %% [markdown]
# For a row with two padding tokens before a three-token prompt, queries down, keys
# across (1 = allowed). The two padding queries see nothing; their outputs are never
# used.

# %%
# NBVAL_CHECK_OUTPUT
print(attention_allowed(torch.tensor([[0, 0, 1, 1, 1]]), num_queries=5)[0, 0].int())

# %% [markdown]
# Qwen2 has $H$ query heads but only $H_{kv}$ key/value heads: each key/value head is
# shared by $H / H_{kv}$ consecutive query heads (grouped-query attention,
# {cite}`ainslie2023gqa`). The arithmetic of attention is the same; what shrinks is
# the KV cache, by the factor $H / H_{kv}$: 2 in the tiny model, 7 in the small one and
# in Qwen2.5-0.5B (the table above). In the code, the query heads that share a
# key/value head are stacked into one taller query matrix against their keys:

# %%
show_source(grouped_query_attention)

# %% [markdown]
# `transformers` computes the same formula by default through PyTorch's fused kernel,
# `F.scaled_dot_product_attention` ("sdpa"), which never writes the `[B, H, T, S]`
# score matrix to memory. The library has that variant too, `sdpa_attention`. On every
# query that may see at least one key, the two differ only in the order of the
# floating-point sums; a padding query that may see no key gets a uniform average in
# `grouped_query_attention` but zeros in `sdpa_attention`. No query may see a padding
# key, so that difference never reaches a real token:

# %%
g = torch.Generator().manual_seed(1)
q = torch.randn(2, 14, 40, 64, generator=g)
k, v = torch.randn(2, 2, 40, 64, generator=g), torch.randn(2, 2, 40, 64, generator=g)
mask = torch.ones(2, 40, dtype=torch.long)
mask[1, :7] = 0  # left padding in row 1
allowed = attention_allowed(mask, 40)
sees_a_key = allowed.any(dim=-1, keepdim=True)  # [B, 1, T, 1]
gap = (grouped_query_attention(q, k, v, allowed) - sdpa_attention(q, k, v, allowed)
       ).masked_select(sees_a_key).abs().max().item()
print(f"max |eager - sdpa| over queries that see a key: {gap:.1e}")

# %% [markdown]
# (ch16-swiglu)=
# ## SwiGLU
#
# The feed-forward block widens each token's vector from $D$ to $F$ dimensions and back,
# with a gate {cite}`shazeer2020glu`:
#
# $$
# \mathrm{SwiGLU}(x) = W_{\mathrm{down}}\big(\mathrm{SiLU}(W_{\mathrm{gate}}\, x)
# \odot W_{\mathrm{up}}\, x\big), \qquad \mathrm{SiLU}(z) = z\,\sigma(z)
# $$

# %%
show_source(swiglu)

# %% [markdown]
# Its three matrices hold $3DF$ parameters per layer; the attention projections hold
# $2D \cdot Hd + 2D \cdot H_{kv}d$ (and the query, key and value biases):

# %%
for name, s in settings.items():
    mlp = 3 * s.hidden_size * s.intermediate_size
    attn = (2 * s.hidden_size * s.num_attention_heads * s.head_dim
            + 2 * (s.hidden_size + 1) * s.num_key_value_heads * s.head_dim
            + s.num_attention_heads * s.head_dim)
    print(f"{name:>13}: SwiGLU {mlp / (mlp + attn):.0%} of a layer's matrices")

# %% [markdown]
# `parameter_count` adds up every term, embeddings and norms included (the last row of
# the shape table).
#
# (ch16-model)=
# ## The layer and the model
#
# A layer is two residual branches, each behind its own RMSNorm:

# %%
show_source(DecoderLayer)

# %% [markdown]
# The model embeds the tokens, computes the rotary angles and the mask once, runs the
# layers, normalises, and multiplies by the output matrix, which with tied embeddings
# is the embedding matrix $E$ itself. With `last_only` only the last position gets
# logits (all a decode step needs; at Qwen2.5's vocabulary the logits of a whole
# prompt are the largest tensor of the pass).

# %%
show_source(Qwen2.forward, start="x = self.model.embed_tokens", end="return F.linear")

# %% [markdown]
# The modules carry the parameter names of `transformers`
# (`model.layers.0.self_attn.q_proj.weight`, ...), so `load_qwen2` reads a checkpoint's
# safetensors straight into them, and the tiny checkpoint's tensors are exactly the
# model's state:

# %%
# NBVAL_CHECK_OUTPUT
from safetensors import safe_open

tiny = load_qwen2(MODELS["tiny"])
with safe_open(str(MODELS["tiny"] / "model.safetensors"), "pt") as f:
    names_in_file = set(f.keys())
print("same names:", set(tiny.state_dict()) == names_in_file,
      f"({len(names_in_file)} tensors)")
print("output layer = embedding matrix (tied):", tiny.lm_head is None)

# %% [markdown]
# (ch16-parity)=
# ## Does it compute what `transformers` computes?
#
# The test: the same left-padded batch, the same position ids, float32, and the largest
# absolute difference of the logits over the real (non-padding) tokens. Each
# implementation of attention is compared with the `transformers` implementation of
# the same name. The book's two checkpoints first (the small one is stored in bfloat16
# and loaded in float32 by both), on the book's arithmetic prompts plus a few random
# tokens each:

# %%
N_PARITY = P.pick(smoke=4, cpu=16, gpu=16)
_, tok = load_model_and_tokenizer(MODELS["tiny"])


def padded_batch(prompts, extra=6, seed=0):
    """Left-padded chat prompts + `extra` random tokens: ids, mask, position ids."""
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)  # [N, P]
    tail = torch.randint(3, len(tok), (len(prompts), extra),
                         generator=torch.Generator().manual_seed(seed))
    ids, mask = torch.cat([ids, tail], 1), torch.cat([mask, torch.ones_like(tail)], 1)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def max_gap(ours, theirs, mask):
    return (ours - theirs)[mask.bool()].abs().max().item()


ids, mask, pos = padded_batch(test_prompts[:N_PARITY])
parity_rows = []
with torch.no_grad():
    for name, path in MODELS.items():
        for impl in ("sdpa", "eager"):
            hf = AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float32, attn_implementation=impl).eval()
            ours = load_qwen2(path, attn_implementation=impl)
            theirs = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
            parity_rows.append({
                "model": name, "attention": impl,
                "max |logit gap|": max_gap(ours(ids, mask, pos), theirs, mask),
                "max |logit|": theirs[mask.bool()].abs().max().item()})
print(f"{N_PARITY} prompts, {ids.shape[1]} columns, "
      f"{int(mask.sum())} real tokens, {int((mask == 0).sum())} padding")

# %% [markdown]
# Then a model with every width of Qwen2.5-0.5B (the shape table), randomly
# initialised by `transformers` since the book has no hub to download its weights.
# `Qwen2.from_transformers(..., share_weights=True)` builds our model on the very same
# tensors, so the two use one copy of the weights' memory. In the `cpu` and `gpu`
# profiles it has all 24 layers (494 million parameters, about 2 GB in float32), in the
# `smoke` profile 2:

# %%
HALF_B_LAYERS = P.pick(smoke=2, cpu=24, gpu=24)
start = time.perf_counter()
config = Qwen2Config(**{k: v for k, v in QWEN25_05B.items() if k != "model_type"})
config.num_hidden_layers = HALF_B_LAYERS
torch.manual_seed(0)
hf_half_b = Qwen2ForCausalLM(config).eval()
ids5 = torch.randint(0, config.vocab_size, (3, 24),
                     generator=torch.Generator().manual_seed(1))
mask5 = torch.ones_like(ids5)
mask5[1, :5], mask5[2, :15] = 0, 0  # left padding
pos5 = (mask5.cumsum(-1) - 1).clamp(min=0)
with torch.no_grad():
    for impl in ("sdpa", "eager"):
        hf_half_b.set_attn_implementation(impl)
        theirs = hf_half_b(input_ids=ids5, attention_mask=mask5,
                           position_ids=pos5).logits
        ours = Qwen2.from_transformers(hf_half_b, share_weights=True)
        parity_rows.append({
            "model": f"Qwen2.5-0.5B shape, {HALF_B_LAYERS} layers", "attention": impl,
            "max |logit gap|": max_gap(ours(ids5, mask5, pos5), theirs, mask5),
            "max |logit|": theirs[mask5.bool()].abs().max().item()})
shared = ours.model.embed_tokens.weight.data_ptr() == (
    hf_half_b.model.embed_tokens.weight.data_ptr())
print("weights shared, not copied:", shared)
print(f"built and compared in {time.perf_counter() - start:.0f} s")
del hf_half_b, ours

# %%
# NBVAL_IGNORE_OUTPUT
parity = pd.DataFrame(parity_rows)
parity.style.format({"max |logit gap|": "{:.1e}", "max |logit|": "{:.2f}"}).hide()

# %%
worst = parity["max |logit gap|"].max()
exact = int((parity["max |logit gap|"] == 0).sum())
say(f"The largest difference in the table is {worst:.1e}"
    + (" (within the 1e-5 the tests in `tests/test_qwen2_scratch.py` allow)"
       if worst <= 1e-5 else " (**above** the 1e-5 the tests allow)")
    + f"; {exact} of the {len(parity)} comparisons agree to the last bit, because "
    "each operation is the same PyTorch kernel called on the same numbers in the same "
    "order.")

# %% [markdown]
# The comparisons are made implementation against implementation because the two
# attention kernels themselves disagree in the last bits. Across them, on the same
# tiny-model batch as above:

# %%
ids, mask, pos = padded_batch(test_prompts[:N_PARITY])
with torch.no_grad():
    hf_sdpa = AutoModelForCausalLM.from_pretrained(MODELS["tiny"], dtype=torch.float32)
    hf_eager = AutoModelForCausalLM.from_pretrained(
        MODELS["tiny"], dtype=torch.float32, attn_implementation="eager")
    sdpa_logits = hf_sdpa(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    cross = {
        "our eager vs transformers' sdpa": load_qwen2(
            MODELS["tiny"], attn_implementation="eager")(ids, mask, pos),
        "transformers' eager vs its sdpa": hf_eager(
            input_ids=ids, attention_mask=mask, position_ids=pos).logits}
for label, logits in cross.items():
    print(f"{label}: max |logit gap| {max_gap(logits, sdpa_logits, mask):.1e}")

# %% [markdown]
# That is float32 round-off on logits of the size in the parity table. Real mistakes
# look different. Two easy ones to make, each injected into the tiny model for one
# forward pass: the rotary layout of the RoFormer paper (neighbouring pairs
# $(x_0, x_1), (x_2, x_3), \dots$ instead of $(x_i, x_{i+d/2})$), and projections
# without Qwen2's query/key/value bias.

# %%
from unittest import mock

import grpo_lib.qwen2 as qwen2_module


def rope_neighbouring_pairs(x, cos, sin):
    """The wrong layout: pair (x_2i, x_2i+1) turned by the angle of pair i."""
    half = x.shape[-1] // 2
    cos, sin = cos[:, None, :, :half], sin[:, None, :, :half]  # [B, 1, T, d/2]
    even, odd = x[..., 0::2], x[..., 1::2]
    turned = [even * cos - odd * sin, even * sin + odd * cos]
    return torch.stack(turned, dim=-1).flatten(-2)


broken = load_qwen2(MODELS["tiny"])
with torch.no_grad():
    with mock.patch.object(qwen2_module, "apply_rope", rope_neighbouring_pairs):
        wrong_rope = broken(ids, mask, pos)
    for layer in broken.model.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                     layer.self_attn.v_proj):
            proj.bias.zero_()
    no_bias = broken(ids, mask, pos)
mistakes = {"neighbouring rotary pairs": max_gap(wrong_rope, sdpa_logits, mask),
            "no q/k/v bias": max_gap(no_bias, sdpa_logits, mask)}
say("Max |logit gap| against `transformers`: "
    + "; ".join(f"{name}, {gap:.2f}" for name, gap in mistakes.items()) + ".")

# %% [markdown]
# A mistake in the architecture moves the logits by orders of magnitude more than
# round-off. A test at a loose tolerance would catch these two as well; what it lets
# through is the subtle kind, a mistake that changes a few logits a little (a wrong
# $\epsilon_{\mathrm{norm}}$, a rounding step in the wrong dtype). That is why the test
# asks for round-off.
#
# (ch16-static-cache)=
# ## Decoding with a static KV cache
#
# {ref}`ch06-kv-cache` introduced the KV cache: keep the keys and values of every token
# so that a decode step feeds one token. The cache of `transformers` used there,
# `DynamicCache`, grows by concatenation: every step allocates a new, longer tensor per
# layer and copies the old one into it. A **static** cache allocates each layer's
# buffers once, at their final size, and writes each step's key and value into the next
# column in place:

# %%
show_source(StaticKVCache)

# %% [markdown]
# Column $c$ of the buffers holds the token in column $c$ of the left-padded sequence,
# so every row writes the same column at each step, and the attention mask (also
# allocated once, at full width) has a 0 wherever a row has padding. The decode loop:
# prefill the prompts into columns $0 .. P-1$, then one token per step into column
# $P + t$:

# %%
show_source(decode_static, start="cache = StaticKVCache", end="cache=cache, start=col")

# %% [markdown]
# Fixed shapes are what later optimisations need: a decode step that always reads the
# same buffers can be captured once as a CUDA graph or compiled, while a cache that
# reallocates cannot. Before speed, correctness. Feed the same sequence once in a
# single pass, and once as a prefill followed by one token at a time through the
# cache; and the same one token at a time through `transformers` with its
# `DynamicCache`:

# %%
small = load_qwen2(MODELS["small"])
hf_small, _ = load_model_and_tokenizer(MODELS["small"], dtype=torch.float32)
ids, mask, pos = padded_batch(test_prompts[:4], extra=8)
S, P_len = ids.shape[1], ids.shape[1] - 8
cache = StaticKVCache(small.settings, batch_size=4, max_len=S)
hf_cache = DynamicCache(config=hf_small.config)
with torch.no_grad():
    full = small(ids, mask, pos)  # [4, S, V] one pass
    hf_full = hf_small(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    steps = [small(ids[:, :P_len], mask[:, :P_len], pos[:, :P_len], cache=cache)]
    hf_steps = [hf_small(input_ids=ids[:, :P_len], attention_mask=mask[:, :P_len],
                         position_ids=pos[:, :P_len], **cache_kwarg(hf_small, hf_cache),
                         use_cache=True).logits]
    for c in range(P_len, S):
        steps.append(small(ids[:, c:c + 1], mask[:, :c + 1], pos[:, c:c + 1],
                           cache=cache, start=c))
        hf_steps.append(hf_small(input_ids=ids[:, c:c + 1],
                                 attention_mask=mask[:, :c + 1],
                                 position_ids=pos[:, c:c + 1],
                                 **cache_kwarg(hf_small, hf_cache),
                                 use_cache=True).logits)
incremental = torch.cat(steps, dim=1)
print(f"small model, {S - P_len} tokens decoded one at a time after a {P_len}-column "
      "prefill")
print(f"  static cache vs transformers' cached decode:  max |gap| "
      f"{max_gap(incremental, torch.cat(hf_steps, 1), mask):.1e}")
print(f"  static cache vs one full pass:                max |gap| "
      f"{max_gap(incremental, full, mask):.1e}")
print(f"  transformers' cached decode vs its full pass: max |gap| "
      f"{max_gap(torch.cat(hf_steps, 1), hf_full, mask):.1e}")
print(f"  cache: {len(cache.keys)} layers x K and V, each "
      f"{tuple(cache.keys[0].shape)}, {cache.nbytes / 2**20:.2f} MiB in all")

# %% [markdown]
# The cached decode agrees with `transformers`' cached decode; against the single pass
# it differs by round-off, in `transformers` as here: a one-token step sums the same
# products in a different order than a pass over the whole sequence.
#
# Now whole generations. Greedy decoding must give **the same tokens** as
# `model.generate(do_sample=False)` on the same left-padded chat prompts, stopping at
# the same end-of-turn tokens:

# %%
N_GREEDY = P.pick(smoke=4, cpu=32, gpu=64)
greedy_prompts = test_prompts[:N_GREEDY]
identical = {}
for name, path in MODELS.items():
    hf, tok = load_model_and_tokenizer(path, dtype=torch.float32)
    ours = load_qwen2(path)
    _, ids, mask = tokenize_prompts(tok, greedy_prompts, tok.pad_token_id)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                               max_new_tokens=96, eos_token_id=resolve_stop_token_ids(
                                   tok, hf), pad_token_id=tok.pad_token_id)
    rollout = generate_static(ours, tok, greedy_prompts, max_new_tokens=96,
                              do_sample=False)
    identical[name] = torch.equal(rollout.completion_ids,
                                  expected[:, ids.shape[1]:])
print(f"{N_GREEDY} prompts, up to 96 new tokens; the first completion (small model):")
print(" ", rollout.texts[0])

# %%
# NBVAL_CHECK_OUTPUT
for name, same in identical.items():
    print(f"{name}: greedy tokens identical to generate: {same}")

# %% [markdown]
# Sampling uses the book's own token chooser (`next_token` of {doc}`06_rollouts`:
# temperature $\tau$, then top-p), so with the same seed the static decode draws the
# same samples as the book's sampler does with `transformers`' model:

# %%
# NBVAL_CHECK_OUTPUT
hf, tok = load_model_and_tokenizer(MODELS["tiny"], dtype=torch.float32)
kw = dict(num_generations=4, max_new_tokens=64, temperature=1.0, top_p=0.9, seed=3)
reference = generate(hf, tok, test_prompts[:4], **kw)
static = generate_static(tiny, tok, test_prompts[:4], **kw)
print("same samples as the book's sampler:",
      torch.equal(static.completion_ids, reference.completion_ids))

# %% [markdown]
# (ch16-speed)=
# ## How fast?
#
# A GRPO rollout on the tiny model, of the size chapter 19 benchmarks: 8 prompts (half
# of chapter 7's 16), $G = 8$ samples each, so 64 sequences, sampled at $\tau = 1$,
# every row forced to the same number of new tokens.
# Three loops decode the same thing: `transformers`' `generate`, the book's sampler of
# {doc}`06_rollouts` (the same `transformers` model, with `DynamicCache`), and the
# static decode. Each is timed a few times after a warm-up; the best time counts.

# %%
T_SPEED = P.pick(smoke=8, cpu=128, gpu=128)
RUNS = P.pick(smoke=1, cpu=3, gpu=3)
speed_prompts = test_prompts[:8]
hf, tok = load_model_and_tokenizer(MODELS["tiny"], device=P.device)
ours = load_qwen2(MODELS["tiny"], device=P.device)


def run_generate():
    texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
             for p in speed_prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        hf.generate(**{k: v.to(P.device) for k, v in enc.items()},
                    num_return_sequences=8, do_sample=True, top_k=0,
                    max_new_tokens=T_SPEED, min_new_tokens=T_SPEED,
                    pad_token_id=tok.pad_token_id)


contenders = {
    "transformers generate": run_generate,
    "book's sampler (ch. 6)": lambda: generate(
        hf, tok, speed_prompts, num_generations=8, max_new_tokens=T_SPEED,
        ignore_eos=True, seed=0),
    "static cache (this chapter)": lambda: generate_static(
        ours, tok, speed_prompts, num_generations=8, max_new_tokens=T_SPEED,
        ignore_eos=True, seed=0),
}


def best_seconds(fn, runs):
    times = []
    for _ in range(runs):
        sync(P.device)  # a GPU's queued work is done before the clock is read
        start = time.perf_counter()
        fn()
        sync(P.device)
        times.append(time.perf_counter() - start)
    return min(times)


for fn in contenders.values():
    fn()  # warm-up
seconds = {name: best_seconds(fn, RUNS) for name, fn in contenders.items()}
tokens = 64 * T_SPEED

# %%
# NBVAL_IGNORE_OUTPUT
speed = pd.DataFrame({
    "seconds": seconds,
    "tokens/s": {name: tokens / s for name, s in seconds.items()},
    "vs generate": {name: seconds["transformers generate"] / s
                    for name, s in seconds.items()}})
print(f"64 sequences x {T_SPEED} new tokens, tiny model, {P.device}, "
      f"{torch.get_num_threads()} threads")
speed.round(2)

# %%
ratio = speed.loc["static cache (this chapter)", "vs generate"]
say(f"On this run the static decode wrote {speed.iloc[2]['tokens/s']:,.0f} tokens/s, "
    f"{ratio:.2f} times the rate of `generate` "
    f"({speed.iloc[0]['tokens/s']:,.0f} tokens/s).")

# %% [markdown]
# Where does a decode step's time go? PyTorch's profiler, on one static decode of the
# same 64 sequences, grouped by operation:

# %%
# NBVAL_IGNORE_OUTPUT
from grpo_lib.speed import quiet_profile  # torch.profiler, CPU, without its log lines

with quiet_profile() as prof:
    generate_static(ours, tok, speed_prompts, num_generations=8,
                    max_new_tokens=min(T_SPEED, 32), ignore_eos=True, seed=0)
events = prof.key_averages()
total_us = sum(e.self_cpu_time_total for e in events)
top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
profile_table = pd.DataFrame(
    [{"operation": e.key, "calls": e.count,
      "share of time": e.self_cpu_time_total / total_us} for e in top])
profile_table.style.format({"share of time": "{:.0%}"}).hide()

# %%
matmul_share = sum(e.self_cpu_time_total for e in events
                   if e.key in ("aten::mm", "aten::addmm", "aten::bmm")) / total_us
say(f"Matrix products (`aten::mm`, `aten::addmm`, `aten::bmm`) take "
    f"{matmul_share:.0%} of the profiled time; the rest is attention, sampling and "
    "the many small element-wise operations of each layer.")

# %% [markdown]
# The static cache on its own removes the cache's reallocation and most of the
# bookkeeping around each step, which `generate` spends in logits processors and
# stopping criteria; it does not change the arithmetic. On a CPU with a model this
# small, every one of the thousand or so operator calls of a decode step (chapter 19
# counts them) has its own fixed cost, so what remains is to do fewer of them
# (fusing, compiling), to make each cheaper (bfloat16), and on a GPU to replay a
# whole step as one CUDA graph, which the fixed shapes of this cache allow.
# {doc}`19_fast_steps` does the first, on a CPU, and the last, on a GPU
# ({ref}`ch19-cuda-graphs`).
#
# (ch16-memory)=
# ## The memory of training
#
# Inference needs the weights and the KV cache. Training needs much more: for every
# parameter a gradient, and AdamW {cite}`loshchilov2019adamw` keeps two more numbers
# per parameter, the running means of the gradient and of its square. With $N$
# parameters and $b$ bytes per number,
#
# $$
# \underbrace{N b}_{\text{weights}} + \underbrace{N b}_{\text{gradients}}
# + \underbrace{2 N b}_{\text{Adam } m,\ v} + \text{activations},
# $$
#
# that is $16N$ bytes in float32 before the first activation. **Activations** are the
# intermediate tensors that autograd keeps from the forward pass because the backward
# pass needs them; they grow with the number of tokens in the micro-batch. Rather
# than a formula with many terms, `activation_bytes` counts them: it runs the forward
# pass on PyTorch's `meta` device (tensors with shapes but no memory or arithmetic)
# and adds up every tensor that autograd saves, each storage once.

# %%
show_source(training_memory)

# %% [markdown]
# Is the count right? On the tiny model, for a micro-batch of 8 sequences of 96
# tokens: measure what a real training step holds (the gradients after `backward`, the
# AdamW states after `step`, and the tensors saved for backward, counted on real
# tensors with the same hooks) next to what the functions compute:

# %%
# NBVAL_CHECK_OUTPUT
model = load_qwen2(MODELS["tiny"], attn_implementation="eager").train()
ids = torch.randint(0, model.settings.vocab_size, (8, 96),
                    generator=torch.Generator().manual_seed(0))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
saved = saved_activation_bytes(
    model, lambda: selective_log_softmax(model(ids)[:, :-1], ids[:, 1:]).mean()
    .backward())
optimizer.step()


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


measured = {
    "weights": nbytes(model.parameters()),
    "gradients": nbytes(p.grad for p in model.parameters()),
    "adam_states": nbytes(t for state in optimizer.state.values()
                          for t in state.values() if t.dim() > 0),
    "activations": saved}
computed = training_memory(model.settings, batch_size=8, seq_len=96)
computed.pop("total")
check = pd.DataFrame({"computed (bytes)": computed, "measured (bytes)": measured})
print(check.to_string(formatters=["{:,}".format] * 2))

# %% [markdown]
# The same accounting for the three shapes, for one micro-batch of the book's GRPO
# update: 64 sequences of the arithmetic prompts' padded width plus
# `max_completion_length` = 96 tokens (chapter 7's configuration), in float32, and the
# Qwen2.5-0.5B shape once more with the model in bfloat16 (weights, gradients, Adam
# states and activations; the usual mixed precision keeps float32 copies of the
# weights and Adam states and needs more):

# %%
prompt_width = tokenize_prompts(tok, test_prompts[:64], tok.pad_token_id)[1].shape[1]
SEQ = prompt_width + 96
rows = {name: training_memory(s, 64, SEQ) for name, s in settings.items()}
rows["Qwen2.5-0.5B, bfloat16"] = training_memory(settings["Qwen2.5-0.5B"], 64, SEQ,
                                                 dtype=torch.bfloat16)
memory = pd.DataFrame(rows).T / 2**30  # GiB
print(f"micro-batch: 64 sequences x {SEQ} tokens")
display(memory.round(3))
half = memory.loc["Qwen2.5-0.5B, bfloat16"] / memory.loc["Qwen2.5-0.5B"]
say(f"In bfloat16 the weights, gradients and Adam states take {half['weights']:.0%} "
    f"of their float32 bytes; the activations take {half['activations']:.0%}"
    + (", so they shrink by less: some saved tensors stay in float32 by design. "
       "RMSNorm computes its statistic in float32, so autograd keeps a float32 copy "
       "of every norm's input, and eager attention keeps its float32 softmax as "
       "well as the bfloat16 copy that multiplies $V$."
       if half["activations"] > half["weights"] + 0.005 else ", the same share."))

# %%
fig, ax = plt.subplots(figsize=(7.2, 2.8), constrained_layout=True)
shares = memory.drop(columns="total").div(memory["total"], axis=0)
left = pd.Series(0.0, index=shares.index)
for part, color in zip(shares.columns, ["C0", "C1", "C2", "C3"]):
    ax.barh(shares.index, shares[part], left=left, color=color,
            label=part.replace("_", " "))
    left += shares[part]
ax.invert_yaxis()
ax.set_xlabel("share of the training memory", fontsize=10)
ax.tick_params(labelsize=9)
ax.legend(ncols=4, fontsize=9, loc="lower center", bbox_to_anchor=(0.5, 1.0))
plt.show()

# %% [markdown]
# What are those activations? Three kinds of tensors make up most of them. Per layer
# and token, the SwiGLU block keeps four vectors of width $F$ (the input of the SiLU,
# its output, the up projection and their product, each needed by the backward pass
# of the next operation), $L \times B \times T \times 4F$ numbers. At Qwen2.5's
# vocabulary the logits, $B \times T \times V$ numbers kept by the log-softmax of the
# loss, are the largest single tensor ({ref}`ch04-memory` showed how
# `selective_log_softmax` avoids a second tensor of that size, but the logits
# themselves remain). And eager attention keeps its probabilities,
# $L \times B \times H \times T^2$ numbers:

# %%
s5 = settings["Qwen2.5-0.5B"]
acts = rows["Qwen2.5-0.5B"]["activations"]
parts = {
    "SwiGLU": s5.num_hidden_layers * 64 * SEQ * 4 * s5.intermediate_size * 4,
    "logits": 64 * (SEQ - 1) * s5.vocab_size * 4,
    "attention probabilities": (s5.num_hidden_layers * 64 * s5.num_attention_heads
                                * SEQ**2 * 4)}
fixed = rows["Qwen2.5-0.5B"]["total"] - acts
say("For the Qwen2.5-0.5B shape in float32: "
    + ", ".join(f"{name} {b / 2**30:.1f} GiB ({b / acts:.0%})"
                for name, b in parts.items())
    + f" of the {acts / 2**30:.1f} GiB of activations; the rest are the inputs of the "
    f"norms and projections. Weights, gradients and Adam states together are "
    f"{fixed / 2**30:.1f} GiB, the same for any batch; the activations grow with it.")

# %% [markdown]
# Three consequences for training a real model on GRPO:
#
# - **Micro-batches** trade time for memory: the activations scale with the tokens of
#   one micro-batch, and gradients accumulate across micro-batches
#   (`micro_batch_size` of `GRPOConfig`). Recomputing activations in the backward pass
#   instead of keeping them (gradient checkpointing) trades more time for more memory.
# - **The vocabulary is expensive**: at $V$ = 151,936 the logits of a micro-batch are
#   gigabytes, unless the loss is computed in chunks of tokens, each freed before the
#   next.
# - **The optimizer outweighs the model**: gradients and the two Adam moments are three
#   times the weights (the table), whatever the batch, which is why large trainers
#   shard them across devices or keep the Adam states in CPU memory.
#
# (ch16-offload)=
# ### Adam states in CPU memory
#
# The last remedy is one class in the library, `grpo_lib.optim.CPUOffloadAdamW`
# (`GRPOConfig(optimizer_offload=True)`). It keeps a float32 master copy of every
# weight in CPU memory and runs `torch.optim.AdamW` on the masters there. Each step
# copies the gradients to the CPU and the updated masters back into the device
# weights:

# %%
show_source(CPUOffloadAdamW.step)

# %% [markdown]
# It must make the same updates as AdamW. Train two copies of the tiny model for three
# steps on the same batch, one with each optimizer:

# %%
def three_steps(adamw_class):
    m = load_qwen2(MODELS["tiny"]).train()
    opt = adamw_class(m.parameters(), lr=1e-3)
    for _ in range(3):
        selective_log_softmax(m(ids)[:, :-1], ids[:, 1:]).mean().backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in m.parameters()])


plain, offloaded = three_steps(torch.optim.AdamW), three_steps(CPUOffloadAdamW)
print(f"largest |weight difference| after 3 steps: "
      f"{(plain - offloaded).abs().max().item():.1e}")

# %% [markdown]
# What it frees on the device is the two moments, $2Nb$ bytes (AdamW keeps them in the
# weights' dtype). Against the training memory of the table above:

# %%
freed = {name: offload_saving(parameter_count(s)) for name, s in settings.items()}
freed["Qwen2.5-0.5B, bfloat16"] = offload_saving(
    parameter_count(settings["Qwen2.5-0.5B"]), torch.bfloat16)
offload_table = pd.DataFrame({"freed (GiB)": pd.Series(freed) / 2**30,
                              "share of the total": pd.Series(freed) / 2**30
                              / memory["total"]})
if torch.cuda.is_available():  # measured: device memory held after one update each
    def held(adamw_class):
        torch.cuda.empty_cache()
        m = load_qwen2(MODELS["small"], device="cuda").train()
        opt = adamw_class(m.parameters(), lr=1e-3)
        m(ids.cuda()).float().mean().backward()
        opt.step()
        return torch.cuda.memory_allocated()
    print(f"small model on {torch.cuda.get_device_name()}: AdamW holds "
          f"{held(torch.optim.AdamW) - held(CPUOffloadAdamW):,} more bytes "
          f"(computed: {freed['small']:,})")
else:
    print("no GPU here: the table is computed, not measured")
offload_table.round(3)

# %%
share_freed = offload_table["share of the total"]
say("Offloading frees " + ", ".join(f"{share_freed[name]:.1%} ({name})"
                                   for name in share_freed.index)
    + " of the training memory of one micro-batch: "
    f"{offload_table.loc['Qwen2.5-0.5B', 'freed (GiB)']:.1f} GiB for the "
    "Qwen2.5-0.5B shape in float32.")

# %% [markdown]
# The price does not grow with the batch: two copies of $N$ numbers per update, and an
# update computed by the CPU.
#
# ## Summary
#
# - A Qwen2 is embeddings, $L$ pre-norm layers of grouped-query attention with rotary
#   embeddings and a SwiGLU block, a final RMSNorm and (tied) output layer; each block
#   is a few lines of PyTorch.
# - Matching `transformers` is a precise test: with the same attention kernel the
#   logits agree to the last bit, and any real mistake shows up orders of magnitude
#   above round-off.
# - A static KV cache preallocates a key and a value buffer per layer and writes in
#   place; its greedy tokens equal `generate`'s, and its fixed shapes are what later
#   optimisations need.
# - Training memory is $16N$ bytes of weights, gradients and Adam states (float32)
#   plus activations that grow with the micro-batch: mostly the SwiGLU blocks' wide
#   intermediate tensors and, at Qwen's vocabulary, the logits.
#
# ## Exercises
#
# Each exercise has a stub to fill in and a checker from `grpo_lib.exercises.ch16` that
# says what is wrong. As written, the stubs raise `NotImplementedError` and the cell
# prints a hint; solutions are in the appendix, {doc}`../book/solutions/ch16`.
#
# **16.1 — RMSNorm.** Write `my_rms_norm(x, weight, eps)` for `x` of shape `[..., D]`
# as Qwen2 computes it (statistic in float32, result cast back to `x`'s dtype, then the
# scale `weight`).

# %%
from grpo_lib.exercises.ch16 import check_kv_cache_bytes, check_rms_norm, check_rope


def my_rms_norm(x, weight, eps):
    # your code here
    raise NotImplementedError


try:
    check_rms_norm(my_rms_norm)
except NotImplementedError:
    print("Not implemented yet: one statistic per vector, over the last dimension; "
          "where does eps go?")

# %% [markdown]
# **16.2 — Rotary embeddings.** Write `my_rope(x, positions, theta)`: `x` is
# `[B, heads, T, d]`, `positions` is `[B, T]`; rotate pair $i$, that is
# $(x_i, x_{i+d/2})$, by the angle $n\,\theta_{\mathrm{rope}}^{-2i/d}$ at position $n$.

# %%
def my_rope(x, positions, theta):
    # your code here
    raise NotImplementedError


try:
    check_rope(my_rope)
except NotImplementedError:
    print("Not implemented yet: first the d/2 frequencies, then one angle per "
          "position and frequency; which two dimensions form pair i?")

# %% [markdown]
# **16.3 — The bytes of a static cache.** Write
# `my_kv_cache_bytes(settings, batch_size, max_len, bytes_per_number)`, the memory of
# a `StaticKVCache` for a `Qwen2Settings`.

# %%
def my_kv_cache_bytes(settings, batch_size, max_len, bytes_per_number):
    # your code here
    raise NotImplementedError


try:
    check_kv_cache_bytes(my_kv_cache_bytes)
except NotImplementedError:
    print("Not implemented yet: count the buffers of one layer, their shape, then "
          "the layers.")

# %% [markdown]
# **16.4 — Think.** (a) Why compute RMSNorm's statistic in float32 when the model runs
# in bfloat16, and what does it cost? (b) How many parameters do tied embeddings save
# in Qwen2.5-0.5B, and what share of the model is that? (c) With the table of
# {ref}`ch16-memory`, about how many sequences of that length could one micro-batch
# hold for the Qwen2.5-0.5B shape in float32 on an 80 GiB GPU, and which three changes
# would raise the number?
