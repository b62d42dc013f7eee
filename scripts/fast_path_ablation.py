"""Train chapter 7's config with one piece of the fast path swapped, to find which piece
the fast path's lower held-out accuracy comes from (chapter 19, "Which piece?").

The fast path (``rollout_engine="fast"``, ``share_group_prompt=True``) changes three
things against the standard one: the decode step's numerics (fused weights, the
from-scratch model), the sampler (one uniform number per row, inverse CDF, instead of
``torch.multinomial``), and the update (the prompt computed once per group). Each arm
here keeps all but one of them:

* ``sampler``: the standard path (transformers model, ``decode_batch``, no shared
  prompt) with the inverse-CDF sampler in place of ``torch.multinomial``;
* ``numerics``: the fast decode step with ``torch.multinomial`` in place of the
  inverse-CDF sampler, and no shared prompt: the trainer's own
  ``rollout_sampler="multinomial"``, nothing patched;
* ``exponential_u``: the whole fast path (fast decode step, inverse CDF, prompt once)
  with the inverse CDF's uniform numbers made from ``torch.Tensor.exponential_``
  (``u = 1 - exp(-E)`` with ``E`` exponential of rate 1: uniform on ``[0, 1)``),
  the random source ``torch.multinomial``'s draw uses, instead of ``torch.rand``;
* ``float64``: the whole fast path with the inverse CDF computed in float64 (the
  softmax, its cumulative sum and the uniform numbers), so that no token with a
  probability above about 1e-16 has an empty interval.
* ``stream``: the whole fast path with the trainer's default draw,
  ``torch.multinomial``'s tokens (``fast_decode.sample_multinomial``), but every
  rollout's generator seeded from another stream (``SeedSequence([seed, step, round,
  1])`` instead of ``[seed, step, round]``): the standard path's draw on other random
  numbers, with the same prompts in the same order. Where the race and the inverse
  CDF trained lower, this arm says whether other random numbers alone do.

Usage::

    OMP_NUM_THREADS=1 python scripts/fast_path_ablation.py ARM --set seed=S \\
        --set output_dir=data/runs/NAME [--set key=value ...]

``--set`` takes the same overrides as ``python -m grpo_lib train`` on
``configs/r1_zero_arithmetic.yaml``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

import grpo_lib.fast_decode as fast_decode
import grpo_lib.sampling as sampling
import grpo_lib.trainer as trainer
from grpo_lib.trainer import train_from_yaml

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "r1_zero_arithmetic.yaml"


def inverse_cdf_next_token(logits, temperature=1.0, top_p=1.0, do_sample=True,
                           generator=None):
    """``sampling.next_token`` with the fast path's sampler."""
    if not do_sample or temperature == 0:
        return logits.float().argmax(dim=-1)
    return fast_decode.sample_inverse_cdf(logits, temperature, top_p, generator)


_inverse_cdf = fast_decode.sample_inverse_cdf  # the library's, before an arm patches it


def exponential_u_sampler(logits, temperature=1.0, top_p=1.0, generator=None, u=None):
    """``fast_decode.sample_inverse_cdf`` with its uniform numbers from
    ``exponential_``."""
    if u is None:
        e = torch.empty(logits.shape[0], device=logits.device)
        u = -torch.expm1(-e.exponential_(1.0, generator=generator))  # [B] in [0, 1)
    return _inverse_cdf(logits, temperature, top_p, generator, u=u)


def float64_sampler(logits, temperature=1.0, top_p=1.0, generator=None, u=None):
    """``fast_decode.sample_inverse_cdf`` in float64."""
    logits = sampling.top_p_filter(logits.double() / temperature, top_p)  # [B, V]
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)  # [B, V] float64
    if u is None:
        u = torch.rand(cdf.shape[0], dtype=torch.float64, generator=generator,
                       device=cdf.device)  # [B]
    return fast_decode.inverse_cdf_token(cdf, u)


def other_stream_seed(seed: int, step: int, round_: int) -> int:
    """``trainer._rollout_seed`` from another stream: a fourth entropy word."""
    return int(np.random.SeedSequence([seed, step, round_, 1]).generate_state(1)[0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arm", choices=("sampler", "numerics", "exponential_u",
                                        "float64", "stream"))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args(argv)
    if args.arm == "sampler":
        sampling.next_token = inverse_cdf_next_token  # decode_batch looks it up here
        overrides = ["rollout_engine=transformers", "share_group_prompt=false"]
    elif args.arm in ("exponential_u", "float64"):
        arms = {"exponential_u": exponential_u_sampler, "float64": float64_sampler}
        fast_decode.sample_inverse_cdf = arms[args.arm]  # decode_fast looks it up
        overrides = ["rollout_engine=fast", "rollout_sampler=inverse_cdf",
                     "share_group_prompt=true"]
    elif args.arm == "stream":
        trainer._rollout_seed = other_stream_seed  # _sample_batch looks it up
        overrides = ["rollout_engine=fast", "rollout_sampler=multinomial",
                     "share_group_prompt=true"]
    else:
        overrides = ["rollout_engine=fast", "rollout_sampler=multinomial",
                     "share_group_prompt=false"]
    torch.manual_seed(0)
    train_from_yaml(CONFIG, overrides + args.overrides)


if __name__ == "__main__":
    main()
