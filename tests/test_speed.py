"""Tests for grpo_lib.speed: the FLOP counts on a model small enough to count by hand,
the operator counts of the three decode loops, and the machine description."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grpo_lib.fast_decode import decode_fast
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.qwen2 import Qwen2, decode_static
from grpo_lib.speed import (decode_step_ops, forward_flops, machine_description,
                            matmul_peak, step_flops)

# one layer, D = 2, one head of d = 2 (and one key/value head), F = 2, V = 3
CFG = SimpleNamespace(hidden_size=2, intermediate_size=2, vocab_size=3,
                      num_attention_heads=1, num_key_value_heads=1,
                      num_hidden_layers=1, head_dim=2)
# weights in matmuls: q, o (2 x 2 each), k, v (2 x 2 each), gate, up, down (2 x 2
# each), output layer 3 x 2: 4 + 4 + 4 + 4 + 12 + 6 = 34


def test_forward_flops_by_hand():
    # one new token, nothing before it: 2 * 34 for the matmuls, 4 * H * d * 1 pair
    assert forward_flops(CFG, rows=1, new=1, context=0) == 2 * 34 + 4 * 2 * 1
    # 3 new tokens after 5: pairs 3 * 5 + (1 + 2 + 3) = 21; two rows
    assert forward_flops(CFG, rows=2, new=3, context=5) == 2 * (2 * 34 * 3 + 8 * 21)


def test_step_flops_is_prefill_decode_and_three_forwards():
    rollout, update = step_flops(CFG, rows=4, prompt_len=5, length=3)
    assert rollout == (forward_flops(CFG, 4, 5, 0) + forward_flops(CFG, 4, 1, 5)
                       + forward_flops(CFG, 4, 1, 6))
    assert update == 3 * forward_flops(CFG, 4, 8, 0)


def test_matmul_peak_and_machine_description():
    assert matmul_peak(torch.float32, size=64, repeats=3) > 0
    machine = machine_description()
    assert {"device", "machine", "cores", "threads", "bf16_hardware",
            "cpu_capability"} <= set(machine)
    assert machine["threads"] == torch.get_num_threads()


def test_the_fast_decode_step_makes_fewer_operator_calls():
    tok = build_tokenizer()
    hf = random_model(tok, size="micro", seed=0)
    scratch = Qwen2.from_transformers(hf, share_weights=True)
    prompts = [[{"role": "user", "content": f"What is {i} + 2?"}] for i in range(2)]
    calls = {name: sum(decode_step_ops(model, tok, prompts, fn).values())
             for name, model, fn in [("transformers", hf, None),
                                     ("scratch", scratch, decode_static),
                                     ("fast", scratch, decode_fast)]}
    assert calls["fast"] < 0.8 * min(calls["scratch"], calls["transformers"]), calls
    assert calls["fast"] == pytest.approx(
        sum(decode_step_ops(scratch, tok, prompts, decode_fast).values()))
