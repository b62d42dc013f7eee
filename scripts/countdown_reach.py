"""How far a Countdown model reaches with many samples: chapter 17's held-out protocol
(the first 500 problems of data/countdown/test.jsonl, temperature 1, seed 0, 256 new
tokens, float32) with K samples per problem instead of 4, kept as counts:

    python scripts/countdown_reach.py \
        --model data/models/tiny-qwen2-countdown-chain-base --samples 64 \
        --out data/runs/ch17_chain_base_reach_cpu

Writes to --out: ``counts.csv`` (one row per problem: its index, question, number of
given numbers, samples n, right answers c, answers cut off by the token budget),
``pass_at_k.csv`` (the unbiased pass@k of every k up to n, averaged over problems,
overall and by problem size) and ``info.json`` (model, settings, device, seconds).
The answers themselves are not kept (tens of MB).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from grpo_lib.display import environment
from grpo_lib.evaluation import evaluate
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.tasks import load_task_split
from grpo_lib.test_time import pass_at_k


def reach_table(counts: pd.DataFrame) -> pd.DataFrame:
    """pass@k for k = 1 .. n, averaged over the problems of ``counts`` (columns n, c):
    overall, and for each problem size (``size``, the count of given numbers). Every
    problem must have the same number of samples n."""
    if counts["n"].nunique() != 1:
        raise ValueError(f"reach_table needs the same number of samples n for every "
                         f"problem, got n = {sorted(counts['n'].unique())}")
    n = int(counts["n"].iloc[0])
    rows = {}
    for k in range(1, n + 1):
        per = counts.apply(lambda r: pass_at_k(int(r["n"]), int(r["c"]), k), axis=1)
        row = {"all": per.mean()}
        for size, group in per.groupby(counts["size"]):
            row[f"{size} numbers"] = group.mean()
        rows[k] = row
    return pd.DataFrame(rows).T.rename_axis("k")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    model, tokenizer = load_model_and_tokenizer(args.model, device="cpu",
                                                dtype=torch.float32)
    dataset = load_task_split("countdown", "test")
    start = time.time()
    table, samples = evaluate(model, tokenizer, dataset, n=args.n,
                          batch_size=args.batch_size,
                          max_new_tokens=args.max_new_tokens, num_samples=args.samples,
                          temperature=1.0, seed=args.seed, return_samples=True)
    seconds = time.time() - start
    sampled = samples[samples["mode"] == "sampled"]
    sizes = [len(dataset[i]["numbers"]) for i in range(min(args.n, len(dataset)))]
    counts = sampled.groupby("prompt_index").agg(
        question=("question", "first"), n=("correct", "size"), c=("correct", "sum"),
        cut_off=("truncated", "sum"))
    counts.insert(1, "size", [sizes[i] for i in counts.index])
    counts.to_csv(out / "counts.csv")
    reach = reach_table(counts)
    reach.to_csv(out / "pass_at_k.csv", float_format="%.6f")
    info = {"model": args.model, "problems": len(counts), "samples": args.samples,
            "temperature": 1.0, "seed": args.seed,
            "max_new_tokens": args.max_new_tokens,
            "dtype": str(model.dtype),
            "greedy_success": float(table.loc["greedy", "strict_acc"]),
            "seconds": round(seconds, 1), "environment": environment()}
    (out / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(reach.loc[[k for k in (1, 2, 4, 8, 16, 32, 64) if k in reach.index]]
          .to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"{len(counts)} problems x {args.samples} samples in {seconds:.0f} s; "
          f"wrote {out}")


if __name__ == "__main__":
    main()
