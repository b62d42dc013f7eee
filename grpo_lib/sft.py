"""Supervised fine-tuning (SFT): teach the model to answer like the examples.

The loss is the causal-LM cross-entropy on the tokens an example trains (its *kept*
tokens), averaged over every kept token of the step's batch, micro-batches included
(TRL's ``SFTTrainer`` with ``num_items_in_batch``; a long example weighs more than a
short one):

.. math:: \\mathcal{L}(\\theta) = -\\frac{1}{N} \\sum_i \\sum_{t \\in K_i}
          \\log p_\\theta(x_{i,t} \\mid x_{i,<t}), \\qquad N = \\sum_i |K_i|

Which tokens are kept follows TRL's rules and names:

- **conversational** data (a ``messages`` column, ``[{"role", "content"}, ...]``):
  every token, or with ``assistant_only_loss`` only the assistant's (its content and
  ``<|im_end|>``, by :func:`grpo_lib.logprobs.assistant_mask`);
- **prompt-completion** data (``prompt`` and ``completion`` columns, both text or both
  messages): with ``completion_only_loss`` (the default for this format) only the
  completion, else every token; ``assistant_only_loss`` also applies to messages.

The first token of a sequence is never kept (nothing predicts it). Sequences longer
than ``max_length`` are cut (the start is kept) and an example left with no kept token
is dropped. ``packing`` puts several examples into one row of at most ``max_length``
tokens (best-fit decreasing); position ids restart at each example, so that
``transformers`` lets a token attend only to its own example.

Everything around the step (checkpoints, exact resume, ``metrics.csv``, Ctrl-C, the NaN
guard, the learning-rate schedule) is :class:`grpo_lib.training_loop.TrainingLoop`, the
same code as the GRPO trainer's and pretraining's.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from .logprobs import _render_ids, assistant_mask, entropy_from_logits
from .training_loop import (
    LR_SCHEDULERS,
    RunSettings,
    TrainingLoop,
    append_metrics_row,
    deferred_sigint,
    guarded_optimizer_step,
    lr_scheduler,
    nonfinite_loss,
    run_training,
    warmup_updates,
)
from .yaml_config import YAMLConfig

IGNORE_INDEX = -100
"""Label of a token that is not a target (PyTorch's and transformers' convention)."""

SFT_METRIC_COLUMNS = [
    "step",
    "loss",
    "mean_token_accuracy",
    "entropy",
    "grad_norm",
    "lr",
    "num_tokens",
    "num_sequences",
    "epoch",
    "skipped_updates",
    "time_step",
]
"""Columns of an SFT run's ``metrics.csv``, most with TRL's names; ``num_tokens`` is
the step's loss tokens (TRL's column of that name is a running count of inputs)."""


# ======================================================================================
# Configuration
# ======================================================================================
@dataclass
class SFTConfig(YAMLConfig):
    """Every knob of an SFT run, named as in TRL's ``SFTConfig`` where TRL has it.

    Defaults suit the book's tiny model on a CPU; ``validate()`` explains bad settings.
    """

    # ---- model and data
    model_name_or_path: str = "data/models/tiny-qwen2-base"
    """Folder (or hub name) of the model to fine-tune; used by ``trainer_from_yaml``."""
    train_file: str | list[str] | None = None
    """JSONL training data: a ``messages`` column, or ``prompt`` and ``completion``; a
    list of files is one data mixture, rows concatenated (``read_train_files``)."""
    eval_file: str | None = None
    """JSONL held-out data in the same format, for ``eval_steps`` (None: none)."""
    max_length: int | None = 1024
    """Cut longer sequences to this many tokens (keep the start); None: never cut."""
    packing: bool = False
    """Put several examples into one row of at most max_length tokens (less padding)."""
    assistant_only_loss: bool = False
    """Train only on the assistant's tokens (conversational data only)."""
    completion_only_loss: bool | None = None
    """Train only on the completion (prompt-completion data); None: True for it."""

    # ---- optimisation
    learning_rate: float = 5e-4
    """AdamW learning rate (TRL's default 2e-5 is meant for models of 0.5B and more)."""
    lr_scheduler_type: str = "linear"
    """After warm-up: ``"constant"``, ``"linear"`` decay to 0, or ``"cosine"`` to 0."""
    warmup_steps: float = 0
    """Linear warm-up: an int is updates, a float in (0, 1) a share of all updates."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0: no clipping; the norm is logged)."""
    num_train_epochs: float = 3.0
    """Passes over the training data (used when max_steps is -1)."""
    max_steps: int = -1
    """Optimizer steps; -1: as many as num_train_epochs takes."""
    per_device_train_batch_size: int = 8
    """Sequences (rows, when packing) per forward/backward pass."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (batch = this x per_device_train_batch_size)."""
    seed: int = 0
    """Seeds the data order and the global RNGs."""

    # ---- logging, evaluation, checkpoints
    output_dir: str = "runs/sft"
    """Where metrics.csv, eval.csv, config.json and checkpoint-<step>/ are written."""
    logging_steps: int = 10
    """Print a one-line summary every N steps (0: never); metrics.csv has every step."""
    progress_bar: bool = True
    """Show one tqdm bar over the steps."""
    eval_steps: int = 0
    """Compute the loss on eval_file every N steps, into eval.csv (0: never)."""
    eval_on_start: bool = False
    """Also evaluate before the first step (step 0)."""
    per_device_eval_batch_size: int = 8
    """Sequences per forward pass during evaluation."""
    save_steps: int = 0
    """Write checkpoint-<step>/ every N steps (0: never, except on Ctrl-C)."""
    save_final: bool = False
    """Write a checkpoint after the last step."""
    resume_from_checkpoint: str | None = None
    """A checkpoint-<step> folder to resume from, or ``"latest"`` (in output_dir)."""
    overwrite_output_dir: bool = False
    """Let a fresh run delete an earlier run's checkpoints (else: refuse to start)."""
    device: str | None = None
    """Device for trainer_from_yaml (``None``: the profile's, CUDA when available)."""

    @property
    def batch_size(self) -> int:
        """Sequences per optimizer step: per_device_train_batch_size x accumulation."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    def total_steps(self, num_rows: int) -> int:
        """``max_steps`` if set, else ``ceil(num_train_epochs * num_rows / batch_size)``
        (the data order runs on across epochs, so no batch is cut short)."""
        if self.max_steps > 0:
            return self.max_steps
        return max(1, math.ceil(self.num_train_epochs * num_rows / self.batch_size))

    def validate(self) -> "SFTConfig":
        """Check every setting; raise ``ValueError`` saying what to change."""
        problems = []
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps",
                     "per_device_eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                problems.append(f"{name}={value!r}: must be an integer >= 1.")
        if not isinstance(self.max_steps, int) or not (
            self.max_steps == -1 or self.max_steps >= 1
        ):
            problems.append(
                f"max_steps={self.max_steps!r}: give a number of steps >= 1, or -1 to "
                f"train for num_train_epochs."
            )
        if self.max_steps == -1 and not self.num_train_epochs > 0:
            problems.append(
                f"num_train_epochs={self.num_train_epochs!r}: must be > 0 when "
                f"max_steps is -1 (e.g. 1 or 0.5)."
            )
        if self.max_length is not None and (
            not isinstance(self.max_length, int) or self.max_length < 2
        ):
            problems.append(
                f"max_length={self.max_length!r}: an integer >= 2 (tokens), or None."
            )
        if self.packing and self.max_length is None:
            problems.append(
                "packing=true needs max_length (the length of a packed row); set "
                "max_length, e.g. 512."
            )
        if self.completion_only_loss not in (None, True, False):
            problems.append(
                f"completion_only_loss={self.completion_only_loss!r}: true, false or "
                f"null (null: true for prompt-completion data)."
            )
        if not self.learning_rate > 0:
            problems.append(f"learning_rate={self.learning_rate!r}: must be > 0.")
        if self.lr_scheduler_type not in LR_SCHEDULERS:
            problems.append(
                f"lr_scheduler_type={self.lr_scheduler_type!r}; choose one of "
                f"{LR_SCHEDULERS}."
            )
        if not (
            self.warmup_steps >= 0
            and (self.warmup_steps < 1 or float(self.warmup_steps).is_integer())
        ):
            problems.append(
                f"warmup_steps={self.warmup_steps!r}: give a whole number of updates "
                f"(e.g. 10) or a share of all updates in [0, 1) (e.g. 0.1), as in "
                f"TRL 1.16 (older TRL called the share warmup_ratio)."
            )
        if not self.max_grad_norm >= 0:
            problems.append(
                f"max_grad_norm={self.max_grad_norm!r}: must be >= 0 (0 = no clipping)."
            )
        if not self.weight_decay >= 0:
            problems.append(f"weight_decay={self.weight_decay!r}: must be >= 0.")
        for name in ("logging_steps", "eval_steps", "save_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                problems.append(
                    f"{name}={value!r}: must be an integer >= 0 (0 = never).")
        if problems:
            raise ValueError("Invalid SFTConfig:\n  - " + "\n  - ".join(problems))
        return self


# ======================================================================================
# Data: rows -> token ids and the mask of kept tokens
# ======================================================================================
def read_jsonl(path: str | Path, what: str = "train_file") -> list[dict]:
    """The rows of a JSONL file (:func:`grpo_lib.tasks.read_jsonl`: one JSON object
    per line, blank lines skipped), with ``what``, the setting that named the file, in
    every error."""
    from .tasks import read_jsonl as read_rows

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{what}: no data file at {path}. Give a JSONL file with a 'messages' "
            f"column or 'prompt' and 'completion' columns (data/README.md says how the "
            f"book's are made)."
        )
    try:
        return read_rows(path)
    except ValueError as err:  # names the line
        raise ValueError(f"{what}: {err}") from None


def dataset_format(rows: Sequence[dict], what: str) -> str:
    """``"conversational"`` (a ``messages`` column) or ``"prompt_completion"``."""
    if len(rows) == 0:
        raise ValueError(f"{what} is empty: there is nothing to train on.")
    first = rows[0]
    if not isinstance(first, dict):
        raise ValueError(f"{what} rows must be dicts of columns, got {first!r:.100}.")
    if "messages" in first:
        kind, needed = "conversational", ("messages",)
    elif {"prompt", "completion"} <= set(first):
        kind, needed = "prompt_completion", ("prompt", "completion")
    else:
        raise ValueError(
            f"{what} rows need a 'messages' column (a conversation) or 'prompt' and "
            f"'completion' columns; the first row has {sorted(first)}."
        )
    for i, row in enumerate(rows):
        missing = [c for c in needed if c not in row]
        if missing:
            raise ValueError(f"{what} row {i} has no {missing} column, unlike row 0.")
    return kind


def _check_messages(messages, where: str, need_assistant: bool) -> None:
    """A conversation is a list of {role, content} dicts (with an assistant turn)."""
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and "role" in m and "content" in m for m in messages
    ):
        raise ValueError(
            f"{where} must be a non-empty list of {{'role': ..., 'content': ...}} "
            f"messages, got {messages!r:.120}."
        )
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        raise ValueError(
            f"{where} has no assistant message (roles "
            f"{[m['role'] for m in messages]}): SFT learns the assistant's replies; "
            f"add one or drop the row."
        )


def tokenize_conversation(tokenizer, messages: list[dict],
                          assistant_only_loss: bool) -> tuple[list[int], list[int]]:
    """Token ids of a chat (chat template) and its keep-mask: the assistant's tokens
    (:func:`~grpo_lib.logprobs.assistant_mask`) or, without assistant_only_loss, all."""
    ids, mask = assistant_mask(tokenizer, messages)  # [T], [T]
    if not assistant_only_loss:
        mask = torch.ones_like(mask)
    return ids.tolist(), mask.tolist()


def tokenize_prompt_completion(
    tokenizer, prompt, completion, completion_only_loss: bool, assistant_only_loss: bool
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + completion and the keep-mask (TRL's rules).

    The completion starts where the tokens of the prompt alone and of prompt +
    completion part ways. Text data gets the EOS token after the completion (as in TRL);
    messages end with the chat template's end of turn.
    """
    if isinstance(prompt, list):  # conversational: two lists of messages
        prompt_ids = _render_ids(tokenizer, prompt, add_generation_prompt=True)
        ids_t, assistant = assistant_mask(tokenizer, prompt + completion)  # [T], [T]
        ids, assistant = ids_t.tolist(), assistant.tolist()
    else:
        eos = tokenizer.eos_token or ""
        text = completion if completion.endswith(eos) else completion + eos
        prompt_ids = tokenizer(prompt)["input_ids"]
        ids = tokenizer(prompt + text)["input_ids"]
        assistant = [1] * len(ids)
    start = 0  # length of the common prefix: where the completion starts
    while start < min(len(prompt_ids), len(ids)) and prompt_ids[start] == ids[start]:
        start += 1
    mask = [1] * len(ids)
    if completion_only_loss:
        mask = [0] * start + [1] * (len(ids) - start)
    if assistant_only_loss:
        mask = [m * a for m, a in zip(mask, assistant)]
    return ids, mask


def check_rows(rows: Sequence[dict], config: SFTConfig, what: str) -> str:
    """Check every row against the data format and the loss settings (TRL's rules);
    return the format. Names the first bad row, before any model work."""
    kind = dataset_format(rows, what)
    if kind == "conversational" and config.completion_only_loss:
        raise ValueError(
            f"completion_only_loss=true needs prompt-completion data, but {what} "
            f"has a 'messages' column; use assistant_only_loss=true instead."
        )
    for i, row in enumerate(rows):
        where = f"{what} row {i}"
        if kind == "conversational":
            _check_messages(row["messages"], f"{where} 'messages'", need_assistant=True)
            continue
        prompt, completion = row["prompt"], row["completion"]
        conversational = isinstance(prompt, list)
        if conversational != isinstance(completion, list):
            raise ValueError(
                f"{where}: prompt and completion must both be text or both be lists "
                f"of messages, got {type(prompt).__name__} and "
                f"{type(completion).__name__}."
            )
        if conversational:
            _check_messages(prompt, f"{where} 'prompt'", need_assistant=False)
            _check_messages(completion, f"{where} 'completion'", need_assistant=True)
        elif config.assistant_only_loss:
            raise ValueError(
                f"assistant_only_loss=true needs conversations, but {where} has text "
                f"prompt and completion; use completion_only_loss instead."
            )
    return kind


def tokenize_rows(rows: Sequence[dict], tokenizer, config: SFTConfig,
                  what: str) -> list[dict]:
    """Every row as ``{"input_ids", "keep"}``: token ids and keep-mask, ``[T]`` each."""
    kind = check_rows(rows, config, what)
    completion_only = config.completion_only_loss
    if completion_only is None:
        completion_only = kind == "prompt_completion"  # TRL's default
    examples = []
    for row in rows:
        if kind == "conversational":
            ids, keep = tokenize_conversation(tokenizer, row["messages"],
                                              config.assistant_only_loss)
        else:
            ids, keep = tokenize_prompt_completion(
                tokenizer, row["prompt"], row["completion"], completion_only,
                config.assistant_only_loss)
        keep = [0] * min(1, len(keep)) + keep[1:]  # nothing predicts the first token
        examples.append({"input_ids": ids, "keep": keep})
    return examples


def truncate_examples(examples: list[dict], max_length: int | None) -> list[dict]:
    """Cut every example to ``max_length`` tokens (keep the start); drop the examples
    left with no kept token (they would add nothing to the loss)."""
    if max_length is None:
        return [e for e in examples if any(e["keep"])]
    cut = [{"input_ids": e["input_ids"][:max_length], "keep": e["keep"][:max_length]}
           for e in examples]
    return [e for e in cut if any(e["keep"])]


def pack_examples(examples: list[dict], max_length: int) -> list[dict]:
    """Best-fit decreasing packing: the longest example first, each into the fullest
    row it still fits (a new row if none). A row's ``position_ids`` restart at 0 at
    each example (``[T]``), which is what marks the example boundaries."""
    rows: list[list[int]] = []  # example indices per row
    free: list[tuple[int, int]] = []  # sorted (free space, row index)
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i]["input_ids"]))
    for i in order:
        n = len(examples[i]["input_ids"])
        k = bisect.bisect_left(free, (n, -1))  # the row with the least room >= n
        if k == len(free):
            rows.append([i])
            bisect.insort(free, (max_length - n, len(rows) - 1))
            continue
        space, r = free.pop(k)
        rows[r].append(i)
        bisect.insort(free, (space - n, r))
    packed = []
    for members in rows:
        parts = [examples[i] for i in members]
        packed.append({
            "input_ids": [t for e in parts for t in e["input_ids"]],
            "keep": [m for e in parts for m in e["keep"]],
            "position_ids": [p for e in parts for p in range(len(e["input_ids"]))],
        })
    return packed


def prepare_dataset(dataset, tokenizer, config: SFTConfig, what: str) -> list[dict]:
    """Rows (a list of dicts, a ``datasets.Dataset`` or a DataFrame) -> training rows:
    tokenized, cut to max_length, packed when ``packing`` is on."""
    if dataset is None:
        raise ValueError(f"{what} is None: pass rows with a 'messages' column or "
                         f"'prompt' and 'completion' columns.")
    if hasattr(dataset, "to_dict") and hasattr(dataset, "iloc"):  # pandas DataFrame
        dataset = dataset.to_dict("records")
    rows = [dataset[i] for i in range(len(dataset))]
    examples = truncate_examples(tokenize_rows(rows, tokenizer, config, what),
                                 config.max_length)
    if not examples:
        raise ValueError(
            f"{what}: no example keeps a token to train on after cutting to "
            f"max_length={config.max_length}; raise max_length or check the masks "
            f"(assistant_only_loss / completion_only_loss)."
        )
    if config.packing:
        examples = pack_examples(examples, config.max_length)
    return examples


def collate(examples: list[dict], pad_id: int) -> dict:
    """A right-padded batch: ``input_ids``, ``attention_mask``, ``position_ids`` and
    ``labels`` (the token where it is kept, else -100), each ``[B, T]``.

    Packed rows (with ``position_ids``) get ``attention_mask=None``: ``transformers``
    then reads the example boundaries from the position ids (a token attends to its own
    example only); the padding is one more "example" of its own.
    """
    B, T = len(examples), max(len(e["input_ids"]) for e in examples)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)  # [B, T]
    labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)  # [B, T]
    attention_mask = torch.zeros(B, T, dtype=torch.long)  # [B, T]
    position_ids = torch.zeros(B, T, dtype=torch.long)  # [B, T]
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids = torch.tensor(e["input_ids"], dtype=torch.long)  # [n]
        keep = torch.tensor(e["keep"], dtype=torch.bool)  # [n]
        input_ids[i, :n] = ids
        labels[i, :n] = ids.masked_fill(~keep, IGNORE_INDEX)
        attention_mask[i, :n] = 1
        position_ids[i, :n] = torch.tensor(e.get("position_ids", range(n)))
        position_ids[i, n:] = torch.arange(T - n)
    packed = any("position_ids" in e for e in examples)
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
            "attention_mask": None if packed else attention_mask}


# ======================================================================================
# The loss
# ======================================================================================
def sft_loss(logits: torch.Tensor, labels: torch.Tensor,
             num_items_in_batch: int | torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of the kept tokens over ``num_items_in_batch``.

    .. math:: \\mathcal{L} = -\\frac{1}{N} \\sum_{(i,t):\\, y_{i,t} \\ne -100}
              \\log \\mathrm{softmax}(z_{i,t-1})[y_{i,t}]

    Position ``t - 1`` predicts token ``t`` (the shift). With ``N`` the kept tokens of
    the whole step's batch, the micro-batches' losses add up to the token mean of the
    step, whatever the split.

    Args:
        logits: ``[b, T, V]`` the model's output.
        labels: ``[b, T]`` token ids, -100 where a token is not a target.
        num_items_in_batch: N, kept tokens in the step's whole batch.
    """
    shift_logits = logits[:, :-1, :].float()  # [b, T-1, V]: row t predicts token t+1
    shift_labels = labels[:, 1:].to(logits.device)  # [b, T-1]
    total = F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]),
                            shift_labels.reshape(-1), ignore_index=IGNORE_INDEX,
                            reduction="sum")
    return total / max(int(num_items_in_batch), 1)


@torch.no_grad()
def token_statistics(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    """Over the kept tokens: how many, how many the argmax predicts, summed entropy."""
    shift_logits = logits[:, :-1, :].float()  # [b, T-1, V]
    shift_labels = labels[:, 1:].to(logits.device)  # [b, T-1]
    kept = shift_labels != IGNORE_INDEX  # [b, T-1]
    right = (shift_logits.argmax(-1) == shift_labels) & kept  # [b, T-1]
    entropy = entropy_from_logits(shift_logits)[kept]  # [n]
    return {"tokens": int(kept.sum()), "correct": int(right.sum()),
            "entropy": float(entropy.sum())}


def _num_targets(batch: dict) -> int:
    """Kept tokens of a collated batch (labels after the shift)."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


# ======================================================================================
# The trainer
# ======================================================================================
class SFTTrainer(TrainingLoop):
    """Supervised fine-tuning of a causal LM on conversations or prompt-completion data.

    Args:
        model: the model (``Qwen2ForCausalLM`` or any causal LM), on its device.
        tokenizer: its tokenizer (a chat template for conversational data).
        config: an :class:`SFTConfig`.
        train_dataset: rows with a ``messages`` column or ``prompt`` and ``completion``
            columns (a list of dicts, a ``datasets.Dataset`` or a DataFrame).
        eval_dataset: held-out rows in the same format, for ``eval_steps``.
        callbacks: functions ``cb(trainer, metrics)`` called after every step.

    One step is one optimizer update on ``per_device_train_batch_size *
    gradient_accumulation_steps`` rows, as TRL counts steps.
    """

    bar_label = "SFT"
    log_files = ("metrics.csv", "eval.csv")

    def __init__(self, model, tokenizer, config: SFTConfig, train_dataset,
                 eval_dataset=None, callbacks: Sequence[Callable] | None = None):
        self.config = config = config.validate()
        self.model, self.tokenizer = model, tokenizer
        self.train_rows = prepare_dataset(train_dataset, tokenizer, config,
                                          "train_dataset")
        self.eval_rows = None
        if eval_dataset is not None:
            self.eval_rows = prepare_dataset(eval_dataset, tokenizer, config,
                                             "eval_dataset")
        if (config.eval_steps or config.eval_on_start) and self.eval_rows is None:
            raise ValueError(
                "eval_steps/eval_on_start is set but there is no eval data: pass "
                "eval_dataset (or eval_file in the YAML config), or set eval_steps=0 "
                "and eval_on_start=false."
            )
        max_steps = config.total_steps(len(self.train_rows))
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.weight_decay,
        )
        self.scheduler = lr_scheduler(
            self.optimizer, max_steps, warmup_updates(config.warmup_steps, max_steps),
            config.lr_scheduler_type)
        self._pad_id = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                        else tokenizer.eos_token_id)
        self._start_loop(RunSettings(
            output_dir=config.output_dir, max_steps=max_steps, seed=config.seed,
            save_every=config.save_steps, save_final=config.save_final,
            print_every=config.logging_steps, progress_bar=config.progress_bar,
            resume_from_checkpoint=config.resume_from_checkpoint,
            overwrite_output_dir=config.overwrite_output_dir,
        ), callbacks)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict:
        """One SFT step: the next batch, the token-mean loss, one guarded update."""
        cfg = self.config
        t_start = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        rows = self._next_rows(cfg.batch_size)
        size = cfg.per_device_train_batch_size
        batches = [collate(rows[k:k + size], self._pad_id)
                   for k in range(0, len(rows), size)]
        with deferred_sigint(self._flag):
            metrics = self._update(batches)
            self.step += 1
        metrics.update(
            step=self.step, lr=lr, num_sequences=len(rows),
            epoch=self.epoch + self.position / len(self.train_rows),
            time_step=time.perf_counter() - t_start,
        )
        return metrics

    def _forward(self, batch: dict) -> torch.Tensor:
        """The model's logits ``[b, T, V]`` for a collated batch."""
        mask = batch["attention_mask"]
        # use_cache=False: without a cache, transformers reads packed rows' example
        # boundaries from the position ids (with one, a packed row attends across them)
        return self.model(
            input_ids=batch["input_ids"].to(self.device),
            attention_mask=None if mask is None else mask.to(self.device),
            position_ids=batch["position_ids"].to(self.device),
            use_cache=False,
        ).logits

    def _loss(self, logits: torch.Tensor, batch: dict, num_items: int) -> torch.Tensor:
        """The training loss of one micro-batch (a distillation trainer adds a
        teacher's term, :class:`grpo_lib.distill.DistillTrainer`)."""
        return sft_loss(logits, batch["labels"], num_items)

    def _update(self, batches: list[dict]) -> dict:
        """One optimizer update: accumulate the gradient over the micro-batches, then
        clip and step behind the NaN guard."""
        num_items = sum(_num_targets(b) for b in batches)  # N of the loss
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, problem = 0.0, None
        stats = {"tokens": 0, "correct": 0, "entropy": 0.0}
        for k, batch in enumerate(batches):
            logits = self._forward(batch)  # [b, T, V]
            loss = self._loss(logits, batch, num_items)
            problem = nonfinite_loss(loss, f"micro-batch {k + 1}")
            if problem is not None:
                break
            loss.backward()
            loss_sum += loss.item()
            for key, value in token_statistics(logits, batch["labels"]).items():
                stats[key] += value
        grad_norm, problem = guarded_optimizer_step(
            self.model, self.optimizer, self.scheduler, self.config.max_grad_norm,
            problem)
        self.model.eval()
        if problem is not None:
            self._skip_update(problem, "Look for extreme values in the data or lower "
                                       "learning_rate.")
        n = max(stats["tokens"], 1)
        return {
            "loss": math.nan if problem else loss_sum,
            "grad_norm": math.nan if problem else grad_norm,
            "mean_token_accuracy": stats["correct"] / n if not problem else math.nan,
            "entropy": stats["entropy"] / n if not problem else math.nan,
            "num_tokens": num_items,
            "skipped_updates": int(problem is not None),
        }

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict:
        """The token-mean loss (and accuracy) on the eval rows; appends to eval.csv."""
        t0 = time.perf_counter()
        size = self.config.per_device_eval_batch_size
        loss_sum, stats = 0.0, {"tokens": 0, "correct": 0, "entropy": 0.0}
        for k in range(0, len(self.eval_rows), size):
            batch = collate(self.eval_rows[k:k + size], self._pad_id)
            logits = self._forward(batch)  # [b, T, V]
            loss_sum += sft_loss(logits, batch["labels"], 1).item()  # summed
            for key, value in token_statistics(logits, batch["labels"]).items():
                stats[key] += value
        n = max(stats["tokens"], 1)
        row = {"step": self.step, "eval_loss": loss_sum / n,
               "eval_mean_token_accuracy": stats["correct"] / n,
               "eval_num_tokens": stats["tokens"],
               "time_eval": time.perf_counter() - t0}
        append_metrics_row(self.output_dir / "eval.csv", row, list(row))
        self._print(f"eval @ step {self.step}: loss={row['eval_loss']:.4f} "
                    f"token_acc={row['eval_mean_token_accuracy']:.3f}")
        return row

    # ------------------------------------------------------------------ loop hooks
    def _on_train_start(self) -> None:
        if self.config.eval_on_start and self.step == 0:
            self.evaluate()

    def _after_step(self, metrics: dict) -> None:
        if self.config.eval_steps and self.step % self.config.eval_steps == 0:
            self.evaluate()

    def _progress_postfix(self, metrics: dict) -> dict:
        return {"loss": f"{metrics['loss']:.4f}"}

    def _metric_columns(self) -> list[str]:
        return list(SFT_METRIC_COLUMNS)

    @staticmethod
    def _summary_line(m: dict) -> str:
        return (
            f"step {int(m['step']):>4} | loss {m['loss']:.4f} | "
            f"token_acc {m['mean_token_accuracy']:.3f} | "
            f"grad_norm {m['grad_norm']:.3f} | lr {m['lr']:.2e} | "
            f"epoch {m['epoch']:.2f} | {m['time_step']:.2f}s"
        )


# ======================================================================================
# From a YAML file (the CLI)
# ======================================================================================
def load_config(path: str | Path | None = None,
                overrides: Sequence[str] = ()) -> SFTConfig:
    """An :class:`SFTConfig` from a YAML file plus ``key=value`` overrides (YAML-typed).

    ``load_config("configs/sft_smoke.yaml", ["max_steps=5"])``.
    """
    return SFTConfig.from_yaml(path, overrides)


def trainer_from_yaml(path: str | Path, overrides: Sequence[str] = ()) -> SFTTrainer:
    """Load the config, data and model a YAML config names; return the trainer.

    Everything that can go wrong before the first step (a missing file, a bad field or
    row, a model folder that is not there) raises here, before any training starts.
    """
    config = load_config(path, overrides)
    if not config.train_file:
        raise ValueError(f"{path} sets no train_file: name a JSONL file of examples, "
                         f"e.g. --set train_file=data/sft/arithmetic_r1_chat.jsonl.")
    train_rows, eval_rows, model, tokenizer = data_and_model(config)
    return SFTTrainer(model, tokenizer, config, train_rows, eval_rows)


def data_and_model(config: SFTConfig) -> tuple:
    """``(train_rows, eval_rows, model, tokenizer)`` that a config names, each
    checked: what :func:`trainer_from_yaml` loads (and the distillation trainer's)."""
    from .models import load_model_and_tokenizer
    from .profiles import profile

    train_rows = read_train_files(config.train_file, config)
    eval_rows = read_jsonl(config.eval_file, "eval_file") if config.eval_file else None
    if eval_rows is not None:
        check_rows(eval_rows, config, f"eval_file {config.eval_file}")
    device = config.device or profile().device
    model, tokenizer = load_model_and_tokenizer(config.model_name_or_path,
                                                device=device)
    return train_rows, eval_rows, model, tokenizer


def read_train_files(train_file: str | Sequence[str], config: SFTConfig) -> list[dict]:
    """The rows of ``train_file``, checked (:func:`check_rows`): one JSONL file, or a
    list of files read in order and concatenated (a data mixture, e.g. reasoning
    samples plus non-reasoning ones; list a file twice to weigh it twice). The
    trainer shuffles the rows, so the order of the files does not matter."""
    files = [train_file] if isinstance(train_file, (str, Path)) else train_file
    if not isinstance(files, (list, tuple)) or not files or not all(
            isinstance(f, (str, Path)) and str(f) for f in files):
        raise ValueError(
            f"train_file={train_file!r}: give a JSONL file or a non-empty list of "
            f"them, e.g. train_file: [data/rejection/kept.jsonl, "
            f"data/skills/train.jsonl].")
    rows = []
    for name in files:
        part = read_jsonl(name, "train_file")
        check_rows(part, config, f"train_file {name}")
        rows.extend(part)
    return rows


def train_from_yaml(path: str | Path, overrides: Sequence[str] = ()):
    """What ``python -m grpo_lib sft --config PATH --set key=value ...`` runs."""
    return run_training(trainer_from_yaml(path, overrides))


# ======================================================================================
# Example data: arithmetic problems as conversations
# ======================================================================================
def arithmetic_sft_rows(n: int, split: str = "train") -> list[dict]:
    """The first ``n`` problems of an arithmetic split as conversations: the question
    and a readable R1-format reasoning (``<think> ... </think> <answer> ... </answer>``)
    by the cold-start annotator (:func:`grpo_lib.tasks.cold_start.cold_start_rows`)."""
    from .tasks.arithmetic import Problem, read_rows
    from .tasks.cold_start import cold_start_rows

    problems = [Problem.from_row(r) for r in read_rows(split)[:n]]
    return cold_start_rows(problems)
