"""Tests for grpo_lib.qwen2, the from-scratch Qwen2: logits against
``transformers.Qwen2ForCausalLM`` (the book's tiny and small checkpoints and a random
Qwen2.5-0.5B-shaped model), the static KV cache against a full forward pass, greedy and
seeded sampled tokens against ``generate``, and the loading errors.

Parity is measured as the largest absolute logit difference, in float32, over the real
(non-padding) tokens of a left-padded batch with explicit position ids. The 0.5B-shaped
model keeps every width of Qwen2.5-0.5B (hidden 896, 14 query heads, 2 key/value heads,
intermediate 4864, vocabulary 151,936, rope theta 1e6, tied embeddings) but only 2 of
its 24 layers, to keep this file fast; the chapter runs all 24.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (AutoModelForCausalLM, DynamicCache, Qwen2Config,
                          Qwen2ForCausalLM)

from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.qwen2 import (Qwen2, Qwen2Settings, StaticKVCache, attention_allowed,
                            generate_static, grouped_query_attention, load_qwen2,
                            rms_norm, sdpa_attention)
from grpo_lib.sampling import (cache_kwarg, generate, resolve_stop_token_ids,
                               tokenize_prompts)
from grpo_lib.tasks import load_task_split

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = {"tiny": ROOT / "data/models/tiny-qwen2-base",
               "small": ROOT / "data/models/small-qwen2-base"}
TOLERANCE = 1e-5  # max |logit difference| in float32
NUM_PROMPTS = 8


@pytest.fixture(scope="module")
def prompts():
    return load_task_split("arithmetic", "test")["prompt"][:NUM_PROMPTS]


@pytest.fixture(scope="module", params=["tiny", "small"])
def checkpoint(request):
    """(name, path, transformers model, tokenizer) of one of the book's checkpoints,
    loaded in float32 (the small one is stored in bfloat16)."""
    path = CHECKPOINTS[request.param]
    hf, tok = load_model_and_tokenizer(path, dtype=torch.float32)
    return request.param, path, hf, tok


def padded_batch(tok, prompts, extra: int = 0, seed: int = 0):
    """Left-padded chat prompts (+ ``extra`` random tokens each): ids, mask,
    positions."""
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)  # [N, P]
    if extra:
        gen = torch.Generator().manual_seed(seed)
        tail = torch.randint(3, len(tok), (ids.shape[0], extra), generator=gen)
        ids = torch.cat([ids, tail], dim=1)
        mask = torch.cat([mask, torch.ones_like(tail)], dim=1)
    assert (mask == 0).any(), "the batch should contain left padding"
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def max_gap(a, b, mask) -> float:
    """Largest |a - b| over the real tokens (``mask == 1``) of ``[B, T, V]`` logits."""
    return (a - b)[mask.bool()].abs().max().item()


# ------------------------------------------------------------------------ the blocks


def test_rms_norm_formula_by_hand():
    x = torch.tensor([[3.0, 4.0]])  # rms = sqrt((9 + 16) / 2)
    out = rms_norm(x, torch.tensor([1.0, 2.0]), eps=0.0)
    rms = (12.5) ** 0.5
    torch.testing.assert_close(out, torch.tensor([[3 / rms, 8 / rms]]))


def test_two_attention_implementations_agree_and_respect_the_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    key_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    allowed = attention_allowed(key_mask, 5)  # [2, 1, 5, 5]
    eager = grouped_query_attention(q, k, v, allowed)  # [2, 6, 5, 8]
    fused = sdpa_attention(q, k, v, allowed)
    torch.testing.assert_close(eager[1], fused[1])  # every query of the unpadded row
    torch.testing.assert_close(eager[0, :, 2:], fused[0, :, 2:])  # real queries only
    # row 0's real queries ignore its two padding keys: changing them changes nothing
    k2, v2 = k.clone(), v.clone()
    k2[0, :, :2], v2[0, :, :2] = 100.0, -100.0
    torch.testing.assert_close(grouped_query_attention(q, k2, v2, allowed)[0, :, 2:],
                               eager[0, :, 2:])
    assert torch.isfinite(eager).all() and torch.isfinite(fused).all()


# --------------------------------------------------------------- logits vs transformers


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_logits_match_transformers_on_the_books_checkpoints(checkpoint, prompts, impl):
    """Each attention implementation against transformers' of the same name (sdpa is
    both libraries' default). The two implementations differ from each other by
    float32 round-off (a few 1e-6 on logits of size ~20), in transformers as here."""
    name, path, hf, tok = checkpoint
    if impl != hf.config._attn_implementation:
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                  attn_implementation=impl).eval()
    ours = load_qwen2(path, attn_implementation=impl)
    ids, mask, pos = padded_batch(tok, prompts, extra=6)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        got = ours(ids, mask, pos)
    gap = max_gap(got, expected, mask)
    print(f"{name} ({impl}): max |logit gap| {gap:.2e}")
    assert gap <= TOLERANCE, f"{name}/{impl}: logits differ by {gap:.2e}"


def test_state_dict_names_are_the_checkpoints():
    from safetensors import safe_open

    ours = load_qwen2(CHECKPOINTS["tiny"])
    with safe_open(str(CHECKPOINTS["tiny"] / "model.safetensors"), "pt") as f:
        assert set(ours.state_dict()) == set(f.keys())
    assert ours.lm_head is None  # tied embeddings: the output layer is E


def qwen25_half_b_shaped(layers: int = 2, seed: int = 0) -> Qwen2ForCausalLM:
    """A random model with Qwen2.5-0.5B's widths (config.json of the released model)
    and ``layers`` of its 24 layers."""
    cfg = Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=layers, num_attention_heads=14, num_key_value_heads=2,
        rope_theta=1e6, tie_word_embeddings=True, max_position_embeddings=32768,
        rms_norm_eps=1e-6, use_sliding_window=False)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg).eval()


def test_logits_match_transformers_on_a_qwen25_half_b_shape():
    hf = qwen25_half_b_shaped()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 151936, (3, 16), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :4], mask[2, :11] = 0, 0  # left padding
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        for impl in ("sdpa", "eager"):
            hf.set_attn_implementation(impl)
            expected = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
            ours = Qwen2.from_transformers(hf, share_weights=True)  # hf's attention
            gap = max_gap(ours(ids, mask, pos), expected, mask)
            print(f"Qwen2.5-0.5B shape, 2 layers ({impl}): max |logit gap| {gap:.2e}")
            assert gap <= TOLERANCE, f"{impl}: logits differ by {gap:.2e}"
    # shared weights: the same memory, so an in-place update of one is seen by both
    assert ours.model.embed_tokens.weight.data_ptr() == (
        hf.model.embed_tokens.weight.data_ptr())
    with torch.no_grad():
        hf.model.norm.weight.mul_(2.0)
    assert torch.equal(ours.model.norm.weight, hf.model.norm.weight)


def test_untied_output_layer():
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = Qwen2ForCausalLM(cfg).eval()
    ours = Qwen2.from_transformers(hf)  # a copy
    assert ours.lm_head is not None
    assert ours.lm_head.weight.data_ptr() != hf.lm_head.weight.data_ptr()
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        gap = (ours(ids) - hf(input_ids=ids).logits).abs().max().item()
    assert gap <= TOLERANCE


# -------------------------------------------------------------------- the static cache


def test_static_cache_decode_matches_full_forward(checkpoint, prompts):
    """Prefill the prompts, then feed 8 more tokens one at a time through the cache:
    the logits equal transformers' own cached decode (DynamicCache) and a full forward
    pass over the whole sequence (to round-off: a one-token step sums in another
    order)."""
    name, path, hf, tok = checkpoint
    ours = load_qwen2(path)
    ids, mask, pos = padded_batch(tok, prompts[:4], extra=8)
    P, S = ids.shape[1] - 8, ids.shape[1]
    cache = StaticKVCache(ours.settings, batch_size=4, max_len=S)
    buffers = [t.data_ptr() for t in cache.keys + cache.values]
    hf_cache = DynamicCache(config=hf.config)
    with torch.no_grad():
        full = ours(ids, mask, pos)  # [4, S, V]
        steps = [ours(ids[:, :P], mask[:, :P], pos[:, :P], cache=cache)]
        hf_steps = [hf(input_ids=ids[:, :P], attention_mask=mask[:, :P],
                       position_ids=pos[:, :P], **cache_kwarg(hf, hf_cache),
                       use_cache=True).logits]
        for c in range(P, S):
            steps.append(ours(ids[:, c:c + 1], mask[:, :c + 1], pos[:, c:c + 1],
                              cache=cache, start=c))
            hf_steps.append(hf(input_ids=ids[:, c:c + 1],
                               attention_mask=mask[:, :c + 1],
                               position_ids=pos[:, c:c + 1],
                               **cache_kwarg(hf, hf_cache), use_cache=True).logits)
    incremental = torch.cat(steps, dim=1)  # [4, S, V]
    # one query per decode step: attention kernels sum in another order than for a
    # whole sequence (2.9e-5 on the 16-core AVX-512 host of an H100, small model)
    assert max_gap(incremental, torch.cat(hf_steps, dim=1), mask) <= 5e-5
    assert max_gap(incremental, full, mask) <= 5e-5  # kernel summation order only
    assert [t.data_ptr() for t in cache.keys + cache.values] == buffers  # in place
    assert cache.nbytes == 2 * ours.settings.num_hidden_layers * 4 * S * (
        ours.settings.num_key_value_heads * ours.settings.head_dim) * 4


def test_cache_overflow_and_start_without_cache_are_refused():
    ours = load_qwen2(CHECKPOINTS["tiny"])
    cache = StaticKVCache(ours.settings, batch_size=1, max_len=4)
    ids = torch.tensor([[5, 6, 7]])
    ours(ids, cache=cache)
    with pytest.raises(ValueError, match="overflows"):
        ours(ids[:, :2], torch.ones(1, 5, dtype=torch.long), cache=cache, start=3)
    with pytest.raises(ValueError, match="needs a cache"):
        ours(ids, torch.ones(1, 5, dtype=torch.long), start=2)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        ours(ids, torch.ones(1, 2, dtype=torch.long))


# ---------------------------------------------------------------------------- decoding


def test_greedy_tokens_identical_to_generate(checkpoint, prompts):
    name, path, hf, tok = checkpoint
    ours = load_qwen2(path)
    stop = resolve_stop_token_ids(tok, hf)
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                               max_new_tokens=96, eos_token_id=stop,
                               pad_token_id=tok.pad_token_id)[:, ids.shape[1]:]
    rollout = generate_static(ours, tok, prompts, max_new_tokens=96, do_sample=False)
    assert rollout.finished.any(), "no row reached a stop token: a weak test"
    assert rollout.completion_ids.shape == expected.shape
    assert torch.equal(rollout.completion_ids, expected), f"{name}: tokens differ"


def test_seeded_sampling_matches_the_reference_sampler(prompts):
    """Temperature + top-p with a seed: the same tokens as grpo_lib.sampling.generate
    on the transformers model with the same seed (the logits agree to the bit), and a
    different seed gives different samples."""
    hf, tok = load_model_and_tokenizer(CHECKPOINTS["tiny"], dtype=torch.float32)
    ours = load_qwen2(CHECKPOINTS["tiny"])
    kwargs = dict(num_generations=4, max_new_tokens=48, temperature=1.0, top_p=0.9)
    ref = generate(hf, tok, prompts[:3], seed=7, **kwargs)
    got = generate_static(ours, tok, prompts[:3], seed=7, **kwargs)
    assert torch.equal(got.completion_ids, ref.completion_ids)
    assert torch.equal(got.completion_mask, ref.completion_mask)
    assert got.texts == ref.texts
    again = generate_static(ours, tok, prompts[:3], seed=7, **kwargs)
    other = generate_static(ours, tok, prompts[:3], seed=8, **kwargs)
    assert torch.equal(again.completion_ids, got.completion_ids)
    assert not torch.equal(other.completion_ids, got.completion_ids)


# ----------------------------------------------------------------------------- loading


def one_line_error(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, f"the error should be one line: {message!r}"
    return message


def test_missing_folder_or_file(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_qwen2(tmp_path / "nowhere")
    assert "config.json is missing" in one_line_error(err)
    shutil.copy(CHECKPOINTS["tiny"] / "config.json", tmp_path / "config.json")
    with pytest.raises(FileNotFoundError) as err:
        load_qwen2(tmp_path)
    assert "model.safetensors" in one_line_error(err)


def test_non_qwen2_config_is_refused(tmp_path):
    cfg = json.loads((CHECKPOINTS["tiny"] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(ValueError) as err:
        load_qwen2(tmp_path)
    assert "'llama'" in one_line_error(err)
    for change, words in [({"use_sliding_window": True}, "sliding-window"),
                          ({"rope_parameters": {"rope_type": "yarn"}},
                           "rope_type 'yarn'"),
                          ({"num_key_value_heads": 3}, "multiple of")]:
        with pytest.raises(ValueError) as err:
            Qwen2Settings.from_dict({**cfg, **change})
        assert words in one_line_error(err)


def test_weights_that_do_not_fit_the_config(tmp_path):
    from safetensors.torch import load_file, save_file

    state = load_file(str(CHECKPOINTS["tiny"] / "model.safetensors"))
    cfg = json.loads((CHECKPOINTS["tiny"] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    del state["model.norm.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as err:
        load_qwen2(tmp_path)
    assert "missing ['model.norm.weight']" in one_line_error(err)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "hidden_size": 64}))
    state["model.norm.weight"] = torch.ones(128)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as err:
        load_qwen2(tmp_path)
    assert "has shape" in one_line_error(err)


def test_bfloat16_loading_keeps_the_file_dtype():
    ours = load_qwen2(CHECKPOINTS["small"], dtype=torch.bfloat16)
    assert ours.model.embed_tokens.weight.dtype == torch.bfloat16
    logits = ours(torch.tensor([[5, 6, 7, 8]]))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()


# ------------------------------------------------------------------ memory arithmetic


def test_parameter_count_and_activation_count():
    from grpo_lib.logprobs import selective_log_softmax
    from grpo_lib.qwen2 import (activation_bytes, parameter_count,
                                saved_activation_bytes, training_memory)

    tiny = load_qwen2(CHECKPOINTS["tiny"], attn_implementation="eager").train()
    small = load_qwen2(CHECKPOINTS["small"])
    for model in (tiny, small):
        assert parameter_count(model.settings) == sum(p.numel()
                                                      for p in model.parameters())
    untied = dataclasses.replace(tiny.settings, tie_word_embeddings=False)
    assert parameter_count(untied) == parameter_count(tiny.settings) + 512 * 128
    ids = torch.randint(0, 512, (3, 20))
    measured = saved_activation_bytes(  # real tensors
        tiny, lambda: selective_log_softmax(tiny(ids)[:, :-1], ids[:, 1:]))
    assert activation_bytes(tiny.settings, 3, 20) == measured  # meta tensors
    memory = training_memory(tiny.settings, 3, 20)
    assert memory["adam_states"] == 2 * memory["weights"] == 8 * 1050752
    assert memory["total"] == sum(v for k, v in memory.items() if k != "total")
