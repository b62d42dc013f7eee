"""Tests for grpo_lib.sampling: the decode loop against transformers' generate, top-p,
temperature, stopping, masks, seeding and argument checks.

The models are tiny random Qwen2s, so their text is gibberish, but the loop's bookkeeping
(padding, positions, the cache, stopping) is the same as for the book's base model.
"""
from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.generation.logits_process import TopPLogitsWarper

from grpo_lib.sampling import Rollout, generate, next_token, top_p_filter

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROMPTS = ["What is 2 + 3 * 4?", "hi", "a much longer prompt with many characters", "7"]


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer with Qwen's special tokens and a ChatML template."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:],
    )
    tok.chat_template = CHATML
    tok.padding_side = "left"
    return tok


def micro_model(tok, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return micro_model(tok)


def hf_greedy(model, tok, prompts, max_new_tokens, stop):
    enc = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=stop, pad_token_id=tok.pad_token_id)
    return out[:, enc["input_ids"].shape[1]:]  # [B, C']


def frequent_tokens(model, tok, k=2):
    """The k tokens the random model emits most in greedy decoding: used as fake stop
    tokens so that rows stop at different steps (a random model rarely emits EOS)."""
    r = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False, ignore_eos=True)
    counts = torch.bincount(r.completion_ids.flatten(), minlength=len(tok))
    counts[tok.pad_token_id] = 0
    return counts.topk(k).indices.tolist()


# ---------------------------------------------------------------------- top-p / next token


def test_top_p_filter_hand_example():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    keep = lambda p: torch.isfinite(top_p_filter(logits, p))[0].tolist()  # noqa: E731
    assert keep(0.45) == [True, False, False]   # 0.5 alone reaches 0.45
    assert keep(0.55) == [True, True, False]    # 0.5 < 0.55 -> add 0.3
    assert keep(0.81) == [True, True, True]     # 0.8 < 0.81 -> add 0.2
    assert keep(1.0) == [True, True, True]
    # order in the vocabulary does not matter
    shuffled = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    assert torch.isfinite(top_p_filter(shuffled, 0.55))[0].tolist() == [False, True, True]


def test_top_p_filter_matches_transformers():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 50, generator=g) * 3
    for p in (0.1, 0.5, 0.9, 0.99):
        ours = top_p_filter(logits, p)
        theirs = TopPLogitsWarper(top_p=p)(None, logits.clone())
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs)), p


def test_next_token_frequencies_follow_softmax_and_top_p():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).expand(20000, 3)
    g = torch.Generator().manual_seed(1)
    freq = torch.bincount(next_token(logits, 1.0, 1.0, True, g), minlength=3) / 20000
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.015)
    # temperature 0.5 squares the odds: p ~ [0.49, 0.04, 0.01] / 0.54
    freq = torch.bincount(next_token(logits, 0.5, 1.0, True, g), minlength=3) / 20000
    assert torch.allclose(freq, torch.tensor([49, 4, 1]) / 54, atol=0.015)
    # top_p=0.8 keeps {0.7, 0.2}, renormalised to [7/9, 2/9, 0]
    freq = torch.bincount(next_token(logits, 1.0, 0.8, True, g), minlength=3) / 20000
    assert freq[2] == 0
    assert math.isclose(freq[0].item(), 7 / 9, abs_tol=0.015)
    # greedy
    assert next_token(logits[:2], 1.0, 1.0, False).tolist() == [0, 0]
    assert next_token(logits[:2], 0.0, 1.0, True).tolist() == [0, 0]


# --------------------------------------------------------------- greedy == model.generate


def test_greedy_matches_transformers_generate_without_stops(model, tok):
    r = generate(model, tok, PROMPTS, max_new_tokens=16, do_sample=False)
    hf = hf_greedy(model, tok, PROMPTS, 16, [tok.eos_token_id, tok.pad_token_id])
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    assert torch.equal(r.prompt_ids, enc["input_ids"])
    assert torch.equal(r.prompt_mask, enc["attention_mask"])
    assert torch.equal(r.completion_ids, hf)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_matches_transformers_generate_with_stops(tok, seed):
    model = micro_model(tok, seed=seed)
    stop = frequent_tokens(model, tok)
    r = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False,
                 stop_token_ids=stop)
    hf = hf_greedy(model, tok, PROMPTS, 12, stop)
    assert r.completion_ids.shape == hf.shape
    assert torch.equal(r.completion_ids, hf)
    # masks: 1 up to and including the first stop token, 0 after (where HF pads)
    for row, mask, done in zip(r.completion_ids, r.completion_mask, r.finished):
        hits = [i for i, t in enumerate(row.tolist()) if t in stop]
        if hits:
            first = hits[0]
            assert done
            assert mask[: first + 1].tolist() == [1] * (first + 1)
            assert mask[first + 1:].sum() == 0
            assert (row[first + 1:] == tok.pad_token_id).all()
        else:
            assert not done and mask.sum() == row.numel()
    assert r.finished.any(), "the test needs at least one row that stops"


def test_chat_prompts_group_major_and_chunking(model, tok):
    chats = [[{"role": "user", "content": p}] for p in PROMPTS[:3]]
    r = generate(model, tok, chats, num_generations=3, max_new_tokens=8, do_sample=False)
    assert isinstance(r, Rollout) and len(r) == 9 and r.num_generations == 3
    rendered = tok.apply_chat_template(chats[1], add_generation_prompt=True, tokenize=False)
    assert r.prompts[3:6] == [rendered] * 3
    assert rendered.endswith("<|im_start|>assistant\n")
    # rows of a group share the prompt; greedy rows of a group are identical
    assert torch.equal(r.prompt_ids[3], r.prompt_ids[5])
    assert torch.equal(r.completion_ids[0], r.completion_ids[2])
    # decoding in chunks of 2 rows (groups split across chunks) gives the same result
    c = generate(model, tok, chats, num_generations=3, max_new_tokens=8, do_sample=False,
                 batch_size=2)
    assert torch.equal(c.completion_ids, r.completion_ids)
    assert torch.equal(c.completion_mask, r.completion_mask)
    assert c.texts == r.texts


def test_without_cache_gives_the_same_greedy_tokens(model, tok):
    a = generate(model, tok, PROMPTS, max_new_tokens=10, do_sample=False)
    b = generate(model, tok, PROMPTS, max_new_tokens=10, do_sample=False, use_cache=False)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_small_top_p_and_zero_temperature_are_greedy(model, tok):
    greedy = generate(model, tok, PROMPTS, max_new_tokens=10, do_sample=False)
    tiny_p = generate(model, tok, PROMPTS, max_new_tokens=10, top_p=1e-6, seed=3)
    t0 = generate(model, tok, PROMPTS, max_new_tokens=10, temperature=0.0, seed=3)
    assert torch.equal(tiny_p.completion_ids, greedy.completion_ids)
    assert torch.equal(t0.completion_ids, greedy.completion_ids)


def test_seeded_sampling_is_reproducible(model, tok):
    kw = dict(num_generations=4, max_new_tokens=10, temperature=1.0)
    a = generate(model, tok, PROMPTS, seed=7, **kw)
    b = generate(model, tok, PROMPTS, seed=7, **kw)
    c = generate(model, tok, PROMPTS, seed=8, **kw)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert not torch.equal(a.completion_ids, c.completion_ids)
    # a random model at T=1 gives diverse completions inside a group
    assert len(set(a.texts[:4])) > 1


def test_truncation_text_and_masks(model, tok):
    r = generate(model, tok, PROMPTS[:2], num_generations=2, max_new_tokens=3,
                 do_sample=False, stop_token_ids=[10**6])  # an id that never appears
    assert r.completion_ids.shape == (4, 3)
    assert r.completion_mask.sum().item() == 12
    assert r.completion_lengths.tolist() == [3, 3, 3, 3]
    assert not r.finished.any()
    assert r.texts[0] == tok.decode(r.completion_ids[0], skip_special_tokens=True)


def test_ignore_eos_runs_to_max_new_tokens(model, tok):
    stop = frequent_tokens(model, tok)
    r = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False,
                 stop_token_ids=stop, ignore_eos=True)
    assert r.completion_ids.shape == (4, 12) and r.completion_mask.all()
    assert not r.finished.any()


def test_mode_restored_and_outputs_usable_with_autograd(model, tok):
    model.train()
    r = generate(model, tok, PROMPTS[:1], max_new_tokens=4, do_sample=False)
    assert model.training
    model.eval()
    generate(model, tok, PROMPTS[:1], max_new_tokens=4, do_sample=False)
    assert not model.training
    ids = torch.cat([r.prompt_ids, r.completion_ids], dim=1)
    loss = model(input_ids=ids).logits.sum()  # would fail on inference-mode tensors
    loss.backward()
    model.zero_grad()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompts=[]), "prompts is empty"),
        (dict(prompts="hi"), "single prompt"),
        (dict(num_generations=0), "num_generations"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(temperature=-1.0), "temperature"),
        (dict(batch_size=0), "batch_size"),
    ],
)
def test_bad_arguments_raise_clear_errors(model, tok, kwargs, message):
    args = dict(prompts=["hi"], num_generations=1, max_new_tokens=4)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=message):
        generate(model, tok, **args)


def test_book_tokenizer_stop_tokens():
    models_mod = pytest.importorskip("grpo_lib.models")
    tok = models_mod.build_tokenizer()
    model = models_mod.random_model(tok, size="micro", seed=0)
    stops = models_mod.stop_token_ids(tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in stops
    chats = [[{"role": "user", "content": "What is 2 + 3 * 4?"}]]
    r = generate(model, tok, chats, num_generations=2, max_new_tokens=6, do_sample=False)
    hf = hf_greedy(model, tok, [r.prompts[0]], 6, stops)
    assert torch.equal(r.completion_ids[:1, : hf.shape[1]], hf)


def test_chapter6_checkers_accept_reference_and_reject_mistakes():
    from grpo_lib.exercises.ch06 import (
        check_completion_mask,
        check_top_p_filter,
        reference_completion_mask,
    )

    assert check_top_p_filter(top_p_filter)
    assert check_completion_mask(reference_completion_mask)

    def drops_crossing_token(logits, p):  # cumsum >= p removes the token crossing p
        s, order = logits.sort(-1, descending=True)
        remove = s.softmax(-1).cumsum(-1) >= p
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))

    with pytest.raises(AssertionError, match="most likely token must always stay"):
        check_top_p_filter(drops_crossing_token)

    def excludes_stop(ids, stops):
        return (torch.isin(ids, torch.tensor(stops)).long().cumsum(-1) == 0).long()

    with pytest.raises(AssertionError, match="stop token itself must be inside"):
        check_completion_mask(excludes_stop)
    # the reference mask agrees with the sampler's on a real rollout
    tok = char_tokenizer()
    model = micro_model(tok)
    stop = frequent_tokens(model, tok)
    r = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False,
                 stop_token_ids=stop)
    ids = torch.where(r.completion_mask.bool(), r.completion_ids, -1)  # pads -> -1
    assert torch.equal(reference_completion_mask(ids, stop) * (ids >= 0),
                       r.completion_mask)
