r"""A learned reward model from pairwise preferences (chapter 13).

DeepSeek-R1's last stage trains on every kind of prompt. Where a rule can check the
answer (math, code, logic) the reward stays a rule; for general prompts, reward models
trained on human preferences score helpfulness and harmlessness (DeepSeek-R1 paper,
section 2.3.4). This module builds such a model the way InstructGPT's reward models
are built, on the book's tiny Qwen2:

* **Preferences.** A judge compares two answers to the same question and says which
  is better. :func:`preference_pairs` plays the judge from a hidden utility (by default
  the chapter 7 rule reward, ``correct + 0.1 * formatted``) that disagrees with itself
  at a rate ``flip``, as human raters do.
* **Bradley–Terry.** The chance that answer :math:`a` is preferred to :math:`b` is
  :math:`\sigma(r(q, a) - r(q, b))` for a scalar score :math:`r`
  (:func:`preference_probability`); fitting :math:`r` maximises the likelihood of the
  judge's choices (:func:`bradley_terry_loss`).
* **The model.** :class:`RewardModel` is the policy's transformer body with a linear
  head on the last token: :math:`r(q, o) = w^\top h_T(q, o)`.
* **As a reward.** :func:`reward_model_reward` scores completions for
  :class:`grpo_lib.trainer.GRPOTrainer` (config name ``reward_model_reward`` with a
  ``path``).

``python -m grpo_lib train-reward-model`` samples the answers, asks the judge, trains
the model and saves it with its pairs and log (``data/models/tiny-qwen2-reward-model``).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["bradley_terry_loss", "preference_probability", "rule_utility",
           "preference_pairs", "RewardModel", "encode_pairs_side", "score_texts",
           "pairwise_accuracy", "best_of_n", "train_reward_model",
           "reward_model_reward", "load_reward_model", "add_reward_model_parser",
           "train_reward_model_from_args"]

HEAD_FILE = "reward_head.safetensors"
INFO_FILE = "reward_model.json"


# ======================================================================================
# Bradley–Terry
# ======================================================================================
def preference_probability(r_a: Tensor, r_b: Tensor) -> Tensor:
    r"""Bradley–Terry: :math:`P(a \succ b) = \sigma(r_a - r_b)`. Shapes ``[N]``."""
    return torch.sigmoid(r_a - r_b)


def bradley_terry_loss(chosen: Tensor, rejected: Tensor) -> Tensor:
    r"""The negative log-likelihood of the judge's choices, averaged over pairs:
    :math:`-\frac1N \sum_i \log \sigma(r(q_i, o_i^+) - r(q_i, o_i^-))`.

    ``chosen``, ``rejected``: ``[N]`` scores of the preferred and the other answer.
    """
    if chosen.shape != rejected.shape or chosen.dim() != 1 or chosen.numel() == 0:
        raise ValueError(
            f"bradley_terry_loss takes two [N] score tensors of one shape with N >= 1, "
            f"got {tuple(chosen.shape)} and {tuple(rejected.shape)}.")
    return -F.logsigmoid(chosen - rejected).mean()


# ======================================================================================
# The judge
# ======================================================================================
def rule_utility(candidates: pd.DataFrame) -> pd.Series:
    """The judge's hidden utility: chapter 7's rule reward, ``correct + 0.1 *
    formatted``, from a candidates table
    (:func:`grpo_lib.rejection.sample_candidates`)."""
    correct = candidates["correct"].astype(float)
    return correct + 0.1 * candidates["formatted"].astype(float)


def preference_pairs(candidates: pd.DataFrame, utility: pd.Series | None = None,
                     flip: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """Every pair of answers to the same prompt whose utilities differ, as a judge
    labels it: the better one is ``chosen``, except with probability ``flip``.

    ``candidates``: one row per completion with ``prompt_index``, ``question``,
    ``completion`` (and ``correct``, ``formatted`` for the default utility).
    Pairs of equal utility are left out (the judge has no preference). Returns one row
    per pair: ``prompt_index, question, chosen, rejected, chosen_utility,
    rejected_utility, agrees`` (``agrees``: the label matches the utility, False for
    a flipped label).
    """
    if not 0.0 <= flip < 0.5:
        raise ValueError(f"flip is the judge's error rate, 0 <= flip < 0.5, got "
                         f"{flip!r}.")
    missing = {"prompt_index", "question", "completion"} - set(candidates.columns)
    if missing:
        raise ValueError(f"candidates lack the column(s) {sorted(missing)}; make them "
                         f"with grpo_lib.rejection.sample_candidates.")
    utility = rule_utility(candidates) if utility is None else pd.Series(utility)
    rng = random.Random(seed)
    rows = []
    table = candidates.assign(_u=utility.to_numpy())
    for index, group in table.groupby("prompt_index", sort=True):
        answers = list(zip(group["completion"], group["_u"]))
        for i in range(len(answers)):
            for j in range(i + 1, len(answers)):
                better, worse = sorted([answers[i], answers[j]], key=lambda a: -a[1])
                if better[1] == worse[1]:
                    continue                       # no preference, no pair
                agrees = rng.random() >= flip      # the judge errs with prob. flip
                chosen, rejected = (better, worse) if agrees else (worse, better)
                rows.append({"prompt_index": int(index),
                             "question": group["question"].iloc[0],
                             "chosen": chosen[0], "rejected": rejected[0],
                             "chosen_utility": chosen[1],
                             "rejected_utility": rejected[1], "agrees": agrees})
    return pd.DataFrame(rows, columns=["prompt_index", "question", "chosen", "rejected",
                                       "chosen_utility", "rejected_utility", "agrees"])


# ======================================================================================
# The model
# ======================================================================================
class RewardModel(nn.Module):
    r"""A causal LM's transformer body and a linear head on the last token:
    :math:`r(q, o) = w^\top h_T(q, o)` (no bias: Bradley–Terry sees only differences).
    """

    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body                               # e.g. Qwen2Model
        self.head = nn.Linear(hidden_size, 1, bias=False)
        nn.init.normal_(self.head.weight, std=1.0 / math.sqrt(hidden_size))

    @classmethod
    def from_causal_lm(cls, model) -> "RewardModel":
        """The body of ``model`` (a ``*ForCausalLM``, weights copied) and a new head
        on the body's device, in its dtype."""
        import copy

        body = copy.deepcopy(model.model)
        reward_model = cls(body, model.config.hidden_size)
        weight = next(body.parameters())
        reward_model.head.to(device=weight.device, dtype=weight.dtype)
        return reward_model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """``[B, T]`` right-padded ids and mask -> ``[B]`` scores."""
        hidden = self.body(input_ids=input_ids,
                           attention_mask=attention_mask).last_hidden_state  # [B, T, H]
        last = attention_mask.sum(-1) - 1                                    # [B]
        h_last = hidden[torch.arange(len(last), device=hidden.device), last]  # [B, H]
        return self.head(h_last).squeeze(-1)                                 # [B]

    def save(self, out_dir: str | Path, tokenizer=None,
             info: dict | None = None) -> Path:
        """The body as a Hugging Face model folder, the head beside it, and ``info``."""
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.body.save_pretrained(out)
        save_file({"weight": self.head.weight.detach().contiguous()}, out / HEAD_FILE)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        if info is not None:
            (out / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
        return out


def load_reward_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """``(RewardModel, tokenizer)`` from a folder that :meth:`RewardModel.save`
    wrote."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    path = Path(path)
    if not (path / HEAD_FILE).exists() or not (path / "config.json").exists():
        raise FileNotFoundError(
            f"No reward model at {path}: expected config.json and {HEAD_FILE}. Make "
            f"one with `python -m grpo_lib train-reward-model --out {path}`.")
    body = AutoModel.from_pretrained(str(path), dtype=dtype)
    model = RewardModel(body, body.config.hidden_size)
    model.head.weight.data.copy_(load_file(path / HEAD_FILE)["weight"].to(dtype))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model.eval(), tokenizer


# ======================================================================================
# Scoring
# ======================================================================================
def _prompt_text(tokenizer, question_or_prompt) -> str:
    """The rendered chat prompt (as the policy saw it) for a question or messages."""
    from .sampling import _render_prompt
    from .tasks.arithmetic import chat_prompt

    prompt = question_or_prompt
    if isinstance(prompt, str) and not prompt.startswith("<|"):
        prompt = chat_prompt(prompt)
    return _render_prompt(tokenizer, prompt)


def encode_pairs_side(tokenizer, prompts: Sequence, completions: Sequence[str],
                      max_length: int = 256) -> tuple[Tensor, Tensor]:
    """Right-padded ``[B, T]`` ids and mask of prompt + completion, at most
    ``max_length`` tokens (the end of a longer text is cut, so its score reads the
    last kept token). ``prompts``: chat messages, or strings: a question (rendered
    with :func:`grpo_lib.tasks.arithmetic.chat_prompt`) unless it starts with
    ``<|``, a prompt the chat template already rendered."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions; "
                         f"give one prompt per completion.")
    chars = 32 * max_length  # more than max_length tokens hold; 1 MB is not tokenized
    texts = [(_prompt_text(tokenizer, p) + ("" if c is None else str(c)))[:chars]
             for p, c in zip(prompts, completions)]
    ids = [tokenizer(t, add_special_tokens=False, truncation=True,
                     max_length=max_length)["input_ids"] or [0]
           for t in texts]
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id or 0
    input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1
    return input_ids, mask


@torch.no_grad()
def score_texts(model: RewardModel, tokenizer, prompts: Sequence,
                completions: Sequence[str], batch_size: int = 64,
                max_length: int = 256) -> Tensor:
    """``[N]`` float32 scores :math:`r(q, o)` of N (prompt, completion) pairs."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(completions), batch_size):
        ids, mask = encode_pairs_side(tokenizer, prompts[start:start + batch_size],
                                      completions[start:start + batch_size], max_length)
        out.append(model(ids.to(device), mask.to(device)).float().cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0)


def pairwise_accuracy(model: RewardModel, tokenizer, pairs: pd.DataFrame,
                      batch_size: int = 64) -> dict[str, float]:
    """How often the model ranks ``chosen`` above ``rejected``: against the judge's
    labels (``label``) and against the hidden utility (``utility``, which counts a
    flipped pair right when the model ranks it the other way); ``margin`` is the mean
    of ``r(chosen) - r(rejected)`` in the label's direction (a flipped pair's gap
    counts against it)."""
    if len(pairs) == 0:
        raise ValueError("pairs is empty: there is nothing to rank.")
    questions = list(pairs["question"])
    chosen = score_texts(model, tokenizer, questions, list(pairs["chosen"]), batch_size)
    rejected = score_texts(model, tokenizer, questions, list(pairs["rejected"]),
                           batch_size)
    right = (chosen > rejected).numpy()
    agrees = pairs["agrees"].to_numpy().astype(bool)
    return {"label": float(right.mean()),
            "utility": float((right == agrees).mean()),
            "margin": float((chosen - rejected).mean())}


def best_of_n(scores: Tensor, k: int) -> Tensor:
    r"""Best-of-:math:`k` selection: for each prompt, the index (into the flat,
    group-major list of all :math:`N k` answers) of its answer with the highest score,
    :math:`\arg\max_j r_\phi(q, o_j)`. ``scores``: ``[N * k]`` -> ``[N]``."""
    if k < 1 or scores.dim() != 1 or scores.numel() == 0 or scores.numel() % k:
        raise ValueError(f"best_of_n takes [N * k] scores with k >= 1 and N >= 1, got "
                         f"{scores.numel()} scores for k={k}.")
    groups = scores.view(-1, k)                                  # [N, k]
    starts = k * torch.arange(len(groups), device=scores.device)  # [N]
    return groups.argmax(-1) + starts                             # [N]


# ======================================================================================
# Training
# ======================================================================================
def shuffled_batches(n: int, batch_size: int, steps: int, seed: int = 0):
    """``steps`` lists of ``batch_size`` row indices out of ``n``, drawn without
    replacement, with a new shuffle whenever the rest of one is too short."""
    generator = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(n, generator=generator), 0
    for _ in range(steps):
        if cursor + batch_size > n:
            order, cursor = torch.randperm(n, generator=generator), 0
        yield order[cursor:cursor + batch_size].tolist()
        cursor += batch_size


def train_reward_model(model: RewardModel, tokenizer, pairs: pd.DataFrame,
                       steps: int = 300, batch_size: int = 32, lr: float = 1e-4,
                       seed: int = 0, eval_pairs: pd.DataFrame | None = None,
                       eval_every: int = 100, max_length: int = 256,
                       log=print) -> pd.DataFrame:
    """Fit ``model`` to the judge's choices by minimising :func:`bradley_terry_loss`
    with AdamW, ``batch_size`` pairs a step drawn without replacement (a new shuffle
    each epoch). Returns the log: ``step, loss, accuracy`` (the batch's share of pairs
    ranked as labelled) and, every ``eval_every`` steps, ``eval_label`` and
    ``eval_utility`` on ``eval_pairs`` (:func:`pairwise_accuracy`)."""
    if len(pairs) == 0:
        raise ValueError("pairs is empty: the judge preferred nothing. Sample more "
                         "answers per prompt, or prompts whose answers differ.")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, "
                         f"{batch_size}.")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    rows, start = [], time.time()
    model.train()
    batches = shuffled_batches(len(pairs), batch_size, steps, seed)
    for step, index in enumerate(batches, start=1):
        batch = pairs.iloc[index]
        questions = list(batch["question"]) * 2
        ids, mask = encode_pairs_side(tokenizer, questions,
                                      list(batch["chosen"]) + list(batch["rejected"]),
                                      max_length)
        scores = model(ids.to(device), mask.to(device))           # [2N]
        chosen, rejected = scores.chunk(2)                        # [N], [N]
        loss = bradley_terry_loss(chosen, rejected)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        row = {"step": step, "loss": loss.item(),
               "accuracy": (chosen > rejected).float().mean().item()}
        if eval_pairs is not None and (step % eval_every == 0 or step == steps):
            acc = pairwise_accuracy(model, tokenizer, eval_pairs)
            row.update(eval_label=acc["label"], eval_utility=acc["utility"])
            if log:
                log(f"step {step}: loss {row['loss']:.3f}, held-out pairs ranked as "
                    f"labelled {acc['label']:.3f}, as the utility {acc['utility']:.3f} "
                    f"({time.time() - start:.0f} s)")
        rows.append(row)
    model.eval()
    return pd.DataFrame(rows)


# ======================================================================================
# As a GRPO reward
# ======================================================================================
_LOADED: dict[str, tuple] = {}


def reward_model_reward(completions: list[str], question: Sequence | None = None,
                        prompt: Sequence | None = None, path: str | None = None,
                        batch_size: int = 64, **columns) -> list[float]:
    """The reward model's score of each completion, as a GRPO reward.

    ``path``: a folder written by ``python -m grpo_lib train-reward-model`` (loaded
    once per process). The prompt comes from the ``prompt`` column (chat messages) or
    else ``question``. In a config: ``reward_funcs: [{name: reward_model_reward,
    path: data/models/tiny-qwen2-reward-model}]``.
    """
    if path is None:
        raise TypeError("reward_model_reward needs path=<a reward model folder>, e.g. "
                        "{name: reward_model_reward, path: "
                        "data/models/tiny-qwen2-reward-model} in a config.")
    prompts = prompt if prompt is not None else question
    if prompts is None or len(prompts) != len(completions):
        raise TypeError("reward_model_reward needs a 'prompt' or 'question' column "
                        "with one entry per completion.")
    key = str(Path(path).resolve())
    if key not in _LOADED:
        _LOADED[key] = load_reward_model(path)
    model, tokenizer = _LOADED[key]
    from .parsing import completion_text

    texts = [completion_text(c) or "" for c in completions]
    return score_texts(model, tokenizer, list(prompts), texts, batch_size).tolist()


# ======================================================================================
# The command
# ======================================================================================
def add_reward_model_parser(subparsers) -> argparse.ArgumentParser:
    from .cli import at_least

    p = subparsers.add_parser(
        "train-reward-model",
        help="sample answers, let a judge compare them, fit a Bradley-Terry reward "
             "model (chapter 13)")
    p.add_argument("--model", default="data/models/tiny-qwen2-base",
                   help="the model that answers and whose body the reward model gets")
    p.add_argument("--out", default="data/models/tiny-qwen2-reward-model")
    p.add_argument("--n-train", type=at_least(1), default=2000,
                   help="training prompts (the first N of data/arithmetic/train)")
    p.add_argument("--n-test", type=at_least(1), default=500,
                   help="held-out prompts for the pairs' test (data/arithmetic/test)")
    p.add_argument("--k", type=at_least(2), default=4, help="answers per prompt")
    p.add_argument("--flip", type=at_least(0.0, float), default=0.1,
                   help="the judge's error rate")
    p.add_argument("--steps", type=at_least(1), default=300)
    p.add_argument("--batch-size", type=at_least(1), default=32, help="pairs per step")
    p.add_argument("--lr", type=at_least(0.0, float, strict=True), default=1e-4)
    p.add_argument("--max-new-tokens", type=at_least(1), default=96)
    p.add_argument("--seed", type=at_least(0), default=0)
    return p


def train_reward_model_from_args(args: argparse.Namespace) -> dict:
    from .models import load_model_and_tokenizer
    from .rejection import sample_candidates
    from .tasks import load_task_split

    if args.flip >= 0.5:
        raise ValueError(f"--flip is the judge's error rate, below 0.5, got "
                         f"{args.flip}.")
    torch.manual_seed(args.seed)
    policy, tokenizer = load_model_and_tokenizer(args.model)
    tables = {}
    for split, n, seed in (("train", args.n_train, args.seed),
                           ("test", args.n_test, args.seed + 1)):
        rows = load_task_split("arithmetic", split).select(range(n))
        start = time.time()
        candidates = sample_candidates(policy, tokenizer, rows, k=args.k,
                                       max_new_tokens=args.max_new_tokens, seed=seed)
        tables[split] = preference_pairs(candidates, flip=args.flip, seed=seed)
        if tables[split].empty:
            raise ValueError(f"the {n} {split} prompts gave no pair of answers that "
                             f"differ; use more prompts or a larger --k.")
        print(f"{split}: {n} prompts x {args.k} answers -> {len(tables[split])} pairs "
              f"({time.time() - start:.0f} s)")
    model = RewardModel.from_causal_lm(policy)
    log = train_reward_model(model, tokenizer, tables["train"], steps=args.steps,
                             batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                             eval_pairs=tables["test"])
    held_out = pairwise_accuracy(model, tokenizer, tables["test"])
    info = {"command": "python -m grpo_lib train-reward-model " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                if k not in ("func", "command")),
            "base": str(args.model), "pairs_train": len(tables["train"]),
            "pairs_test": len(tables["test"]), "held_out": held_out}
    out = model.save(args.out, tokenizer, info)
    for split, table in tables.items():
        table.to_json(out / f"pairs_{split}.jsonl.gz", orient="records", lines=True,
                      force_ascii=False)
    log.to_csv(out / "train_log.csv", index=False)
    print(f"held-out pairs ranked as labelled {held_out['label']:.3f}, as the utility "
          f"{held_out['utility']:.3f}; wrote {out}")
    return info
