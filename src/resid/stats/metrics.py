"""What an intervention is measured by: functions of last-position logits, per prompt.

A metric maps logits ``[..., batch, vocab]`` to ``[..., batch]`` (or ``[..., batch, k]`` for k
metrics at once), so that a sweep that stacks many patched runs on leading axes scores them all
in one call. Every tool that scores a patch, an ablation or a circuit takes one of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Metric = Callable[[Tensor], Tensor]


@dataclass
class LogitDiff:
    """logit(answer) - logit(foil), per prompt."""

    answers: Tensor
    foils: Tensor

    def __call__(self, logits: Tensor) -> Tensor:
        pair = torch.stack([self.answers, self.foils], -1).expand(*logits.shape[:-1], 2)
        values = logits.float().gather(-1, pair)
        return values[..., 0] - values[..., 1]


@dataclass
class AnswerProbability:
    """The next-token probability of the answer, per prompt."""

    answers: Tensor

    def __call__(self, logits: Tensor) -> Tensor:
        index = self.answers.expand(*logits.shape[:-1]).unsqueeze(-1)
        return logits.float().softmax(-1).gather(-1, index).squeeze(-1)


@dataclass
class KLFromReference:
    """KL(reference || patched) of the next-token distributions, per prompt."""

    reference_logits: Tensor

    def __call__(self, logits: Tensor) -> Tensor:
        reference = self.reference_logits.float().log_softmax(-1)
        return (reference.exp() * (reference - logits.float().log_softmax(-1))).sum(-1)
