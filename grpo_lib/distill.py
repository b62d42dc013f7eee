"""Distillation (chapter 14): a smaller student learns from a stronger teacher.

DeepSeek-R1 distils by **sequence**: the teacher writes answers, the answers are
filtered (rejection sampling, chapter 12), and the student is fine-tuned on them with
the plain SFT loss (:mod:`grpo_lib.sft`). No teacher is needed during training, only
its text.

Distillation by **token** (Hinton et al., 2015) also uses the teacher's probabilities:
at every kept position of a teacher's answer the student matches the teacher's whole
next-token distribution, not only the token that was written,

.. math:: \\mathcal{L}_{\\mathrm{KD}} = \\frac{\\tau^2}{N} \\sum_{(i,t) \\in K}
          \\mathbb D_{\\mathrm{KL}}\\big(p_T^{\\tau}(\\cdot \\mid x_{i,<t}) \\,\\Vert\\,
          p_S^{\\tau}(\\cdot \\mid x_{i,<t})\\big),
          \\qquad p^{\\tau} = \\mathrm{softmax}(z / \\tau)

(the forward KL; ``direction="reverse"`` swaps the two distributions, a per-token
form of the reverse KL that MiniLLM minimises over the student's own samples).
:class:`DistillTrainer` trains on :math:`(1 - \\alpha) \\mathcal{L}_{\\mathrm{SFT}}
+ \\alpha \\mathcal{L}_{\\mathrm{KD}}`; teacher and student must share one tokenizer,
so that logit ``v`` means the same token for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import math

import torch
import torch.nn.functional as F

from .sft import IGNORE_INDEX, SFTConfig, SFTTrainer, data_and_model, sft_loss
from .training_loop import run_training

DIRECTIONS = ("forward", "reverse")
"""``forward``: KL(teacher || student), the student covers every token the teacher
gives mass to; ``reverse``: KL(student || teacher), the student may keep to the
teacher's likeliest tokens."""


def token_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
             direction: str = "forward", temperature: float = 1.0) -> torch.Tensor:
    """KL divergence between the two next-token distributions at each position.

    .. math:: \\mathbb D_{\\mathrm{KL}}(p_T \\Vert p_S)
              = \\sum_v p_T(v) \\big(\\log p_T(v) - \\log p_S(v)\\big)

    Args:
        student_logits, teacher_logits: ``[..., V]``, the same vocabulary.
        direction: ``"forward"`` (teacher first) or ``"reverse"`` (student first).
        temperature: tau > 0; both distributions are ``softmax(logits / tau)``.

    Returns:
        ``[...]``: one KL per position, >= 0.
    """
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)  # [..., V]
    log_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)  # [..., V]
    if direction == "reverse":
        log_s, log_t = log_t, log_s  # KL(p_S || p_T)
    return (log_t.exp() * (log_t - log_s)).sum(-1)  # [...]


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      labels: torch.Tensor, num_items_in_batch: int,
                      alpha: float = 1.0, temperature: float = 1.0,
                      direction: str = "forward") -> torch.Tensor:
    """``(1 - alpha)`` x the SFT loss + ``alpha`` x tau^2 x the token-mean KL.

    Both terms are sums over the kept tokens (labels not -100) divided by ``N``, the
    kept tokens of the whole step, as in :func:`grpo_lib.sft.sft_loss`; row ``t - 1``
    of the logits predicts token ``t``. The tau^2 keeps the KL's gradient on the
    scale of the SFT loss's when tau changes (Hinton et al., 2015).

    Args:
        student_logits, teacher_logits: ``[b, T, V]``.
        labels: ``[b, T]``, -100 where a token is not a target.
        num_items_in_batch: N, kept tokens in the step's whole batch.
    """
    kept = labels[:, 1:].to(student_logits.device) != IGNORE_INDEX  # [b, T-1]
    kl = token_kl(student_logits[:, :-1], teacher_logits[:, :-1], direction,
                  temperature)  # [b, T-1]
    kd = temperature ** 2 * kl[kept].sum() / max(int(num_items_in_batch), 1)
    if alpha == 1.0:
        return kd
    sft = sft_loss(student_logits, labels, num_items_in_batch)
    return (1 - alpha) * sft + alpha * kd


@dataclass
class DistillConfig(SFTConfig):
    """An :class:`grpo_lib.sft.SFTConfig` plus the teacher and the loss's weights."""

    teacher_model_name_or_path: str | None = None
    """Folder of the teacher model; it must share the student's tokenizer."""
    distill_alpha: float = 1.0
    """Weight of the token-level KL; 0 is plain SFT on the teacher's answers."""
    distill_temperature: float = 1.0
    """tau: both distributions are softened as softmax(logits / tau)."""
    distill_direction: str = "forward"
    """``forward``: KL(teacher || student); ``reverse``: KL(student || teacher)."""

    def validate(self) -> "DistillConfig":
        """Check the distillation settings, then the SFT ones."""
        problems = []
        if not 0 <= self.distill_alpha <= 1:
            problems.append(f"distill_alpha={self.distill_alpha!r}: a weight in "
                            f"[0, 1] (0: plain SFT, 1: the KL alone).")
        tau = self.distill_temperature
        if not (isinstance(tau, (int, float)) and math.isfinite(tau)
                and 0 < tau <= 100):
            problems.append(f"distill_temperature={tau!r}: a number in (0, 100] (1: "
                            f"the distributions as they are; tau^2 scales the loss).")
        if self.distill_direction not in DIRECTIONS:
            problems.append(f"distill_direction={self.distill_direction!r}: choose "
                            f"one of {DIRECTIONS}.")
        if problems:
            raise ValueError("Invalid DistillConfig:\n  - " + "\n  - ".join(problems))
        super().validate()
        return self


def check_same_vocabulary(student_tokenizer, teacher_tokenizer) -> None:
    """Raise ``ValueError`` unless both tokenizers map the same strings to the same
    ids: token-level distillation compares logit ``v`` of one model with logit ``v``
    of the other."""
    s, t = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if s != t:
        differ = sorted(set(s.items()) ^ set(t.items()))[:3]
        raise ValueError(
            f"the teacher's tokenizer differs from the student's ({len(t)} against "
            f"{len(s)} tokens; e.g. {differ}): token-level distillation needs one "
            f"vocabulary. Use distill_alpha=0 (SFT on the teacher's text) or a "
            f"teacher trained with the student's tokenizer.")


class DistillTrainer(SFTTrainer):
    """SFT on a teacher's answers with the teacher's token distributions added.

    Args:
        model: the student, on its device.
        tokenizer: the student's tokenizer (the teacher's too).
        config: a :class:`DistillConfig`.
        train_dataset: rows as :class:`grpo_lib.sft.SFTTrainer` takes them,
            usually the teacher's filtered answers.
        teacher: the teacher model; frozen, run without gradients on each
            micro-batch (``None`` only with ``distill_alpha=0``).
        teacher_tokenizer: the teacher's tokenizer, if at hand: checked to be the
            student's (:func:`check_same_vocabulary`).
        eval_dataset, callbacks: as for :class:`grpo_lib.sft.SFTTrainer`.

    Both models may have more output rows than the tokenizer has tokens (Qwen2.5's
    embedding tables are padded, to 151,936 or 152,064 rows); the KL is taken over
    the tokenizer's tokens only. ``eval.csv`` holds the student's SFT loss on the eval
    answers, not the KL.
    """

    bar_label = "distill"

    def __init__(self, model, tokenizer, config: DistillConfig, train_dataset,
                 teacher=None, eval_dataset=None,
                 callbacks: Sequence[Callable] | None = None,
                 teacher_tokenizer=None):
        config.validate()
        if teacher is None and config.distill_alpha > 0:
            raise ValueError(
                f"distill_alpha={config.distill_alpha} needs a teacher model: pass "
                f"teacher= (or set teacher_model_name_or_path in the YAML config).")
        self.vocab = len(tokenizer)  # logits past it belong to no token
        if teacher is not None:
            if teacher_tokenizer is not None:
                check_same_vocabulary(tokenizer, teacher_tokenizer)
            for who, net in (("teacher", teacher), ("student", model)):
                if net.config.vocab_size < self.vocab:
                    raise ValueError(
                        f"the {who} has {net.config.vocab_size} output rows for a "
                        f"tokenizer of {self.vocab} tokens: teacher and student must "
                        f"share one tokenizer.")
            teacher.eval().requires_grad_(False)
        self.teacher = teacher
        super().__init__(model, tokenizer, config, train_dataset, eval_dataset,
                         callbacks)

    def _loss(self, logits: torch.Tensor, batch: dict, num_items: int) -> torch.Tensor:
        cfg = self.config
        if cfg.distill_alpha == 0:
            return sft_loss(logits, batch["labels"], num_items)
        with torch.no_grad():
            teacher_logits = self._teacher_forward(batch)[..., :self.vocab]
        return distillation_loss(logits[..., :self.vocab], teacher_logits,
                                 batch["labels"], num_items, cfg.distill_alpha,
                                 cfg.distill_temperature, cfg.distill_direction)

    def _teacher_forward(self, batch: dict) -> torch.Tensor:
        """The teacher's logits ``[b, T, V]`` for the batch the student sees."""
        mask = batch["attention_mask"]
        device = next(self.teacher.parameters()).device
        return self.teacher(
            input_ids=batch["input_ids"].to(device),
            attention_mask=None if mask is None else mask.to(device),
            position_ids=batch["position_ids"].to(device), use_cache=False,
        ).logits.to(self.device)


def load_config(path: str | Path | None = None,
                overrides: Sequence[str] = ()) -> DistillConfig:
    """A :class:`DistillConfig` from a YAML file plus ``key=value`` overrides."""
    return DistillConfig.from_yaml(path, overrides)


def trainer_from_yaml(path: str | Path,
                      overrides: Sequence[str] = ()) -> DistillTrainer:
    """The student, the teacher, the data and the trainer a YAML config names; every
    setup mistake raises here, before the first step."""
    from .models import load_model_and_tokenizer

    config = load_config(path, overrides).validate()
    if not config.train_file:
        raise ValueError(f"{path} sets no train_file: name a JSONL file of the "
                         f"teacher's answers, e.g. data/rejection/kept.jsonl.")
    if config.distill_alpha > 0 and not config.teacher_model_name_or_path:
        raise ValueError(f"distill_alpha={config.distill_alpha} needs "
                         f"teacher_model_name_or_path (a model folder).")
    train_rows, eval_rows, model, tokenizer = data_and_model(config)
    teacher = teacher_tokenizer = None
    if config.distill_alpha > 0:
        teacher, teacher_tokenizer = load_model_and_tokenizer(
            config.teacher_model_name_or_path, device=model.device)
    return DistillTrainer(model, tokenizer, config, train_rows, teacher, eval_rows,
                          teacher_tokenizer=teacher_tokenizer)


def train_from_yaml(path: str | Path, overrides: Sequence[str] = ()):
    """What ``python -m grpo_lib distill --config PATH --set key=value ...`` runs."""
    return run_training(trainer_from_yaml(path, overrides))
