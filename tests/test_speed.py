"""Tests for grpo_lib.speed: the FLOP counts on a model small enough to count by hand,
the operator counts of the three decode loops, the machine description, the bytes a
decode step reads, the benchmark shapes and the results CSV."""
from __future__ import annotations

from types import SimpleNamespace

import csv

import pytest
import torch

from grpo_lib.fast_decode import decode_fast
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.packing import packing
from grpo_lib.qwen2 import Qwen2, decode_static
from grpo_lib.speed import (QWEN25_05B_SHAPE, append_row, cpu_name, decode_read_bytes,
                            decode_step_ops, fastest_seconds, forward_flops,
                            machine_description, matmul_peak, memory_bandwidth,
                            shape_model, step_flops)

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


def test_decode_read_bytes_by_hand():
    # 34 + 2 (norms) + ... : take params = 100; keys and values: 2 L H_kv d = 4 numbers
    # per token, 3 rows x 10 tokens of context = 120; bfloat16: 2 bytes each
    assert decode_read_bytes(CFG, params=100, rows=3, context=10,
                             bytes_per_number=2) == (100 + 120) * 2
    assert decode_read_bytes(CFG, 100, 3, 0, 4) == 400  # no context: the weights


def test_memory_bandwidth_is_a_positive_rate():
    rate = memory_bandwidth("cpu", nbytes=1 << 20, repeats=2)
    assert 0 < rate < float("inf")


def test_shape_models_have_their_widths():
    from transformers import Qwen2ForCausalLM

    from grpo_lib.models import model_config

    tok = build_tokenizer()
    small = shape_model(tok, "small")
    assert small.config.hidden_size == 448 and small.config.num_hidden_layers == 8
    with torch.device("meta"):  # the shape without its 2 GB of weights
        half_b = Qwen2ForCausalLM(model_config(tok, "tiny", **QWEN25_05B_SHAPE))
    params = sum(p.numel() for p in half_b.parameters())  # the tied matrix once
    assert params == 494_032_768  # Qwen2.5-0.5B's count
    with pytest.raises(ValueError, match="unknown shape 'huge'; choose from"):
        shape_model(tok, "huge")


def test_append_row_adds_new_columns_and_keeps_old_rows(tmp_path):
    path = tmp_path / "results" / "bench.csv"
    append_row(path, {"a": 1, "b": 2})
    append_row(path, {"a": 3, "c": 4})
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["a", "b", "c"]
    assert rows == [{"a": "1", "b": "2", "c": ""}, {"a": "3", "b": "", "c": "4"}]


def test_matmul_peak_and_machine_description():
    assert matmul_peak(torch.float32, size=64, repeats=3) > 0
    machine = machine_description()
    assert {"device", "machine", "cores", "threads", "bf16_hardware",
            "cpu_capability"} <= set(machine)
    assert machine["threads"] == torch.get_num_threads()
    assert machine["machine"] == cpu_name() or machine["device"] == "cuda"
    assert cpu_name()


def test_fastest_seconds_takes_the_fastest_round_per_call(monkeypatch):
    """Warm-ups are not timed; each round times ``calls`` calls; the best round,
    divided by ``calls``, is returned."""
    import grpo_lib.speed as speed

    clock = iter([0.0, 0.6, 1.0, 1.2, 2.0, 2.9])  # rounds of 0.6, 0.2 and 0.9 s
    monkeypatch.setattr(speed.time, "perf_counter", lambda: next(clock))
    calls = []
    seconds = fastest_seconds(lambda: calls.append(1), rounds=3, calls=2, warmups=4)
    assert len(calls) == 4 + 3 * 2
    assert seconds == pytest.approx(0.1)


@pytest.mark.parametrize("mode", ["never", "always"])
def test_the_fast_decode_step_makes_fewer_operator_calls(mode):
    # packing is fixed: under "auto" it is decided by timing each shape (rows
    # included), so a loaded machine could pack for 2 rows and not for 6
    tok = build_tokenizer()
    hf = random_model(tok, size="micro", seed=0)
    scratch = Qwen2.from_transformers(hf, share_weights=True)
    prompts = [[{"role": "user", "content": f"What is {i} + 2?"}] for i in range(2)]
    more_rows = [[{"role": "user", "content": f"What is {i} + 3?"}] for i in range(6)]
    with packing(mode):
        calls = {name: sum(decode_step_ops(model, tok, prompts, fn).values())
                 for name, model, fn in [("transformers", hf, None),
                                         ("scratch", scratch, decode_static),
                                         ("fast", scratch, decode_fast)]}
        more = sum(decode_step_ops(scratch, tok, more_rows, decode_fast).values())
    assert calls["fast"] < 0.8 * min(calls["scratch"], calls["transformers"]), calls
    assert calls["fast"] == pytest.approx(more)  # a count per step, whatever the rows


def test_operator_counts_leave_out_one_time_work(tmp_path, monkeypatch):
    # under "auto" packing with no stored decision, the first rollout times each shape
    # packed and plain (packing_pays); those products must not enter the count:
    # every operator's count per step is >= 0, and the fast step makes its products,
    # 6 per layer (q/k/v, o, gate/up, down, two attention bmm) and the output layer
    from grpo_lib import packing as packing_module

    monkeypatch.setenv("GRPO_LIB_CACHE", str(tmp_path))  # no earlier decisions
    packing_module._packed_is_faster.cache_clear()
    tok = build_tokenizer()
    hf = random_model(tok, size="micro", seed=0)
    scratch = Qwen2.from_transformers(hf, share_weights=True)
    prompts = [[{"role": "user", "content": f"What is {i} + 2?"}] for i in range(2)]
    try:
        with packing("auto"):
            calls = decode_step_ops(scratch, tok, prompts, decode_fast)
    finally:
        packing_module._packed_is_faster.cache_clear()
    assert min(calls.values()) >= 0, {k: v for k, v in calls.items() if v < 0}
    products = sum(v for k, v in calls.items() if k in (
        "aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise"))
    assert products == 6 * hf.config.num_hidden_layers + 1, calls
