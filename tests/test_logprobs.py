"""Tests for grpo_lib.logprobs: TRL parity, the causal shift vs HF's own loss, padding."""
import pytest
import torch

from grpo_lib.logprobs import (assistant_mask, entropy_from_logits, selective_log_softmax,
                               sequence_logprobs)


# ---------------------------------------------------------------- tiny model + tokenizer
def _fallback_tokenizer():
    """Byte-level ChatML tokenizer (used only if grpo_lib.models is not importable)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        padding_side="left", chat_template=template,
    )


@pytest.fixture(scope="module")
def tokenizer():
    try:
        from grpo_lib.models import build_tokenizer
    except ImportError:
        return _fallback_tokenizer()
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    try:
        from grpo_lib.models import random_model
        m = random_model(tokenizer, size="micro", seed=0)
    except ImportError:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=128, tie_word_embeddings=True)
        m = Qwen2ForCausalLM(cfg)
    return m.float().eval()


# ---------------------------------------------------------------- selective_log_softmax
def _naive(logits, index):
    return logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-10),
                                         (torch.bfloat16, 0.0)])
def test_selective_log_softmax_matches_trl_and_naive(dtype, atol):
    from trl.trainer.utils import selective_log_softmax as trl_sls

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 1000, generator=g) * 4).to(dtype)
    index = torch.randint(0, 1000, (3, 5), generator=g)
    ours = selective_log_softmax(logits, index)
    assert ours.shape == (3, 5) and ours.dtype == dtype
    torch.testing.assert_close(ours, trl_sls(logits, index), atol=atol, rtol=0)
    naive_atol = atol if dtype != torch.bfloat16 else 0.0
    torch.testing.assert_close(ours, _naive(logits, index), atol=naive_atol, rtol=0)


def test_selective_log_softmax_known_values_and_errors():
    logits = torch.log(torch.tensor([[[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]]))  # [1, 2, 3]
    out = selective_log_softmax(logits + 3.0, torch.tensor([[2, 0]]))  # shift-invariant
    torch.testing.assert_close(out, torch.log(torch.tensor([[0.7, 0.5]])))
    two_d = selective_log_softmax(logits[0], torch.tensor([2, 0]))
    torch.testing.assert_close(two_d, out[0])
    with pytest.raises(ValueError, match="causal shift"):
        selective_log_softmax(logits, torch.tensor([[2, 0, 1]]))


def test_entropy_from_logits():
    uniform = torch.zeros(2, 3, 8)
    torch.testing.assert_close(entropy_from_logits(uniform, chunk_size=4),
                               torch.full((2, 3), torch.log(torch.tensor(8.0)).item()))
    logits = torch.randn(4, 50)
    p = logits.softmax(-1)
    torch.testing.assert_close(entropy_from_logits(logits), -(p * p.log()).sum(-1))
    from trl.trainer.utils import entropy_from_logits as trl_entropy

    torch.testing.assert_close(entropy_from_logits(logits), trl_entropy(logits))


# ---------------------------------------------------------------- sequence_logprobs
def _batch(tokenizer, prompts, completions, side):
    """Prompts padded on `side`, completions right-padded, both with masks."""
    pad = tokenizer.pad_token_id
    P = max(len(p) for p in prompts)
    C = max(len(c) for c in completions)
    pid, pm, cid, cm = [], [], [], []
    for p, c in zip(prompts, completions):
        fill = [pad] * (P - len(p))
        pid.append(fill + p if side == "left" else p + fill)
        pm.append([0] * len(fill) + [1] * len(p) if side == "left" else
                  [1] * len(p) + [0] * len(fill))
        cid.append(c + [pad] * (C - len(c)))
        cm.append([1] * len(c) + [0] * (C - len(c)))
    return tuple(torch.tensor(x) for x in (pid, pm, cid, cm))


def _examples(tokenizer):
    prompts = [tokenizer.encode("What is 2 + 3 * 4?", add_special_tokens=False),
               tokenizer.encode("Hi", add_special_tokens=False)]
    completions = [tokenizer.encode("<think> 3 * 4 = 12 </think> <answer> 14 </answer>",
                                    add_special_tokens=False) + [tokenizer.eos_token_id],
                   tokenizer.encode("<answer> 5 </answer>", add_special_tokens=False)]
    return prompts, completions


def test_sum_of_logprobs_equals_hf_cross_entropy(model, tokenizer):
    import copy

    model = copy.deepcopy(model).double()  # float64 on our side: only HF's rounding left
    prompts, completions = _examples(tokenizer)
    for p, c in zip(prompts, completions):  # one unpadded sequence at a time
        ids = torch.tensor([p + c])
        logp = sequence_logprobs(model, torch.tensor([p]), torch.ones(1, len(p)),
                                 torch.tensor([c]), torch.ones(1, len(c)))
        labels = ids.clone()
        labels[:, : len(p)] = -100
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss  # mean over len(c) tokens
        assert logp.shape == (1, len(c))
        # HF's loss upcasts the logits to float32 (ForCausalLMLoss), so it carries
        # float32 rounding: the per-token mean agrees to 1e-6, the sum to 1e-6 relative.
        assert -logp.mean().item() == pytest.approx(loss.item(), abs=1e-6)
        assert logp.sum().item() == pytest.approx(-loss.item() * len(c), rel=1e-6)


def _alone(model, p, c):
    return sequence_logprobs(model, torch.tensor([p]), torch.ones(1, len(p)),
                             torch.tensor([c]), torch.ones(1, len(c)))[0]


def test_left_and_right_padding_agree(model, tokenizer):
    prompts, completions = _examples(tokenizer)
    left = sequence_logprobs(model, *_batch(tokenizer, prompts, completions, "left"))
    # Right padding of whole sequences [p c pad..]: positions start at 0 without help, and
    # logits[t] predicts ids[t + 1], so completion token j is read from logits[len(p)-1+j].
    pad = tokenizer.pad_token_id
    seqs = [p + c for p, c in zip(prompts, completions)]
    T = max(map(len, seqs))
    ids = torch.tensor([s + [pad] * (T - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # [B, T, V]
    right = selective_log_softmax(logits[:, :-1], ids[:, 1:])  # [B, T-1]
    for i, (p, c) in enumerate(zip(prompts, completions)):
        from_right = right[i, len(p) - 1: len(p) - 1 + len(c)]
        torch.testing.assert_close(left[i, : len(c)], from_right, atol=1e-5, rtol=0)
        torch.testing.assert_close(left[i, : len(c)], _alone(model, p, c), atol=1e-5,
                                   rtol=0)
        assert torch.all(left[i, len(c):] == 0)  # masked completion padding -> 0


def test_right_padded_prompts_are_refused(model, tokenizer):
    prompts, completions = _examples(tokenizer)
    with pytest.raises(ValueError, match=r"prompt rows \[1\] end in padding"):
        sequence_logprobs(model, *_batch(tokenizer, prompts, completions, "right"))


def test_position_ids_matter_for_absolute_positions(tokenizer):
    """Qwen2's RoPE only sees relative positions, so a constant shift from left padding
    changes its log-probs by rounding only; a model with learned absolute position
    embeddings (GPT-2) gets different numbers unless position_ids skip the padding."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2,
                                      n_head=4, n_positions=128)).eval()
    prompts, completions = _examples(tokenizer)
    pid, pm, cid, cm = _batch(tokenizer, prompts, completions, "left")
    ids, mask = torch.cat([pid, cid], 1), torch.cat([pm, cm], 1)
    with torch.no_grad():
        naive = gpt2(input_ids=ids, attention_mask=mask).logits[:, pid.shape[1] - 1:-1]
        ours = sequence_logprobs(gpt2, pid, pm, cid, cm)
    naive_logp = selective_log_softmax(naive, cid)
    row, (p, c) = 1, (prompts[1], completions[1])  # the shorter prompt carries padding
    torch.testing.assert_close(ours[row, : len(c)], _alone(gpt2, p, c), atol=1e-5, rtol=0)
    assert (naive_logp[row, : len(c)] - ours[row, : len(c)]).abs().max() > 1e-2


def test_temperature_entropy_and_micro_batches(model, tokenizer):
    prompts, completions = _examples(tokenizer)
    batch = _batch(tokenizer, prompts, completions, "left")
    full, ent = sequence_logprobs(model, *batch, temperature=0.7, return_entropy=True)
    micro, ent_micro = sequence_logprobs(model, *batch, temperature=0.7,
                                         return_entropy=True, micro_batch_size=1)
    torch.testing.assert_close(full, micro, atol=1e-6, rtol=0)
    torch.testing.assert_close(ent, ent_micro, atol=1e-6, rtol=0)
    # manual: logits / T, then log-softmax
    p, c = prompts[0], completions[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1] / 0.7
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
    torch.testing.assert_close(full[0, : len(c)], expected, atol=1e-5, rtol=0)
    probs = logits.softmax(-1)
    torch.testing.assert_close(ent[0, : len(c)], -(probs * probs.log()).sum(-1),
                               atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        sequence_logprobs(model, *batch, temperature=0.0)


def test_gradients_flow_to_the_model(model, tokenizer):
    prompts, completions = _examples(tokenizer)
    batch = _batch(tokenizer, prompts, completions, "left")
    model.zero_grad()
    sequence_logprobs(model, *batch).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    model.zero_grad()


# ---------------------------------------------------------------- assistant_mask
def test_assistant_mask_covers_content_and_im_end(tokenizer):
    messages = [{"role": "user", "content": "What is 2 + 3 * 4?"},
                {"role": "assistant", "content": "<answer> 14 </answer>"},
                {"role": "user", "content": "And 2 * 3?"},
                {"role": "assistant", "content": "6"}]
    ids, mask = assistant_mask(tokenizer, messages)
    assert ids.shape == mask.shape and ids.dtype == torch.long
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert ids.tolist() == tokenizer.encode(text, add_special_tokens=False)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    masked = ids[mask.bool()].tolist()
    # exactly: answer 1 content + <|im_end|> + answer 2 content + <|im_end|>
    a1 = tokenizer.encode("<answer> 14 </answer>", add_special_tokens=False)
    a2 = tokenizer.encode("6", add_special_tokens=False)
    assert masked == a1 + [im_end] + a2 + [im_end]
    assert tokenizer.decode(ids[mask.bool()], skip_special_tokens=True) == \
        "<answer> 14 </answer>6"


def test_assistant_mask_errors(tokenizer):
    with pytest.raises(ValueError, match="empty"):
        assistant_mask(tokenizer, [])
    with pytest.raises(ValueError, match="role"):
        assistant_mask(tokenizer, [{"content": "x"}])
    ids, mask = assistant_mask(tokenizer, [{"role": "user", "content": "hi"}])
    assert mask.sum().item() == 0 and len(ids) > 0


def test_chapter4_checkers_accept_solutions_and_explain_mistakes():
    from grpo_lib.exercises.ch04 import (check_completion_logprobs, check_position_ids,
                                         check_sft_labels)

    def good(logits, ids, P):
        return selective_log_softmax(logits[:, P - 1:-1], ids[:, P:])

    assert check_completion_logprobs(good)
    with pytest.raises(AssertionError, match="its own position"):
        check_completion_logprobs(lambda lg, ids, P: selective_log_softmax(lg[:, P:],
                                                                           ids[:, P:]))
    assert check_position_ids(lambda m: (m.cumsum(-1) - 1).clamp(min=0))
    assert check_position_ids(lambda m: m.cumsum(-1) - 1)  # padding positions are free
    with pytest.raises(AssertionError, match="count the padding"):
        check_position_ids(lambda m: torch.arange(m.shape[1]).expand_as(m))
    assert check_sft_labels(lambda ids, m: torch.where(m.bool(), ids, -100))
    with pytest.raises(AssertionError, match="shifted the labels"):
        check_sft_labels(lambda ids, m: torch.where(
            torch.cat([m[1:], m[:1]]).bool(), ids, -100))


def _profiled_peak_bytes(fn):
    """Peak of allocations during fn() on the CPU, replayed from the profiler's events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    changes = []
    for event in prof.events():
        delta = event.self_cpu_memory_usage
        if delta:
            changes.append((event.time_range.start if delta > 0 else event.time_range.end,
                            delta))
    running = peak = 0
    for _, delta in sorted(changes):
        running += delta
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selective_log_softmax_peak_memory_is_one_row(dtype):
    B, T, V = 4, 16, 8192
    logits = torch.randn(B, T, V).to(dtype)
    index = torch.randint(0, V, (B, T))
    row = T * V * dtype.itemsize
    with torch.no_grad():
        peak = _profiled_peak_bytes(lambda: selective_log_softmax(logits, index))
        full = _profiled_peak_bytes(lambda: _naive(logits, index))
    assert row <= peak < 1.2 * row, (peak, row)
    assert full >= B * row
