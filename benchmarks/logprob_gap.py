"""The per-token log-prob gap between the sampler's numerics and the trainer's.

A rollout is sampled with the from-scratch model (static cache) in ``--rollout-dtype``;
then each completion token's log-prob is computed twice: as the sampler computed it
(``grpo_lib.qwen2.rollout_logprobs``) and as the trainer does
(``grpo_lib.logprobs.sequence_logprobs`` on the policy in ``--train-dtype``). Printed:
mean and max |gap|, and the token-level importance ratio exp(gap)'s spread (share of
tokens outside [1/2, 2], the cap TRL's truncated importance sampling uses by default),
and the same for whole sequences (exp of the summed gap). Numerics only: the numbers do
not depend on the machine's load.

    python benchmarks/logprob_gap.py                          # fp32 and bf16 rollouts
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.models import build_tokenizer, load_model_and_tokenizer, random_model
from grpo_lib.qwen2 import Qwen2, generate_static, rollout_logprobs
from grpo_lib.tasks import load_task_split

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(ROOT / "data/models/tiny-qwen2-base"))
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--G", type=int, default=4)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--cap", type=float, default=2.0)
    args = p.parse_args(argv)
    if Path(args.model).exists():
        base, tok = load_model_and_tokenizer(args.model, dtype=torch.float32)
    else:
        tok = build_tokenizer()
        base = random_model(tok, size="tiny", seed=0)
    prompts = load_task_split("arithmetic", "test")["prompt"][:args.prompts]
    print(f"model {args.model}, {args.prompts} prompts x G={args.G}, up to "
          f"{args.length} tokens, temperature 1")
    print(f"{'rollout':<9}{'trainer':<9}{'tokens':>7}{'mean|gap|':>11}{'max|gap|':>10}"
          f"{'tok ratio out':>14}{'seq ratio out':>14}")
    for roll_dtype, train_dtype in [(torch.float32, torch.float32),
                                    (torch.bfloat16, torch.bfloat16),
                                    (torch.bfloat16, torch.float32)]:
        sampler = Qwen2.from_transformers(base).to(roll_dtype)  # a copy in that dtype
        trainer_model = base.to(train_dtype)
        r = generate_static(sampler, tok, prompts, num_generations=args.G,
                            max_new_tokens=args.length, seed=0)
        roll = rollout_logprobs(sampler, r.prompt_ids, r.prompt_mask, r.completion_ids)
        with torch.no_grad():
            train = sequence_logprobs(trainer_model, r.prompt_ids, r.prompt_mask,
                                      r.completion_ids, r.completion_mask).float()
        mask = r.completion_mask.bool()
        gap = (train - roll) * mask  # [B, C]
        tok_gap = gap[mask]
        out_tok = ((tok_gap.exp() > args.cap) | (tok_gap.exp() < 1 / args.cap))
        seq = gap.sum(-1).exp()  # [B]
        out_seq = (seq > args.cap) | (seq < 1 / args.cap)
        name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
        print(f"{name[roll_dtype]:<9}{name[train_dtype]:<9}{tok_gap.numel():>7}"
              f"{tok_gap.abs().mean().item():>11.2e}{tok_gap.abs().max().item():>10.2e}"
              f"{out_tok.float().mean().item():>14.4f}"
              f"{out_seq.float().mean().item():>14.4f}")
        base = base.float()


if __name__ == "__main__":
    main()
