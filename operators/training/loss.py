"""The training loss: each query against every passage of its batch (its positive, the other
pairs' positives as in-batch negatives, and the mined hard negatives), a softmax over the
search mode's scores, cross-entropy to the positive; optionally plus a KL term pulling that
softmax towards a teacher's (self-distillation from the frozen base model), and one holding
the other modes' softmaxes at the base model's (``preservation_loss``)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch


def kl_to(scores: torch.Tensor, temperature: float, teacher_scores: torch.Tensor, teacher_temperature: float) -> torch.Tensor:
    """KL(teacher ‖ student) of the row softmaxes of (B, P) scores, averaged over the rows."""
    student = torch.log_softmax(scores.float() / temperature, dim=-1)
    teacher = torch.log_softmax(teacher_scores.float() / teacher_temperature, dim=-1)
    return torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")


def preservation_loss(modes: Sequence[tuple[torch.Tensor, torch.Tensor, float]]) -> torch.Tensor:
    """Mean over modes of ``kl_to`` each mode's student (B, P) scores from its teacher's, both
    at the mode's temperature: ``modes`` holds (student, teacher, temperature)."""
    return torch.stack([kl_to(s, temperature, t, temperature) for s, t, temperature in modes]).mean()


def contrastive_loss(
    scores: torch.Tensor, temperature: float, teacher_scores: Optional[torch.Tensor] = None, teacher_temperature: float = 0.05, distill: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """``scores`` (B, P) of B queries against P ≥ B passages, query i's positive at column i.
    Returns (loss, {"ce", "kl", "accuracy"}: the cross-entropy, the KL term (0 without a
    teacher) and the share of queries whose positive scores best)."""
    logits = scores.float() / temperature
    target = torch.arange(scores.shape[0], device=scores.device)
    ce = torch.nn.functional.cross_entropy(logits, target)
    kl = torch.zeros((), device=scores.device)
    if teacher_scores is not None and distill > 0:
        kl = kl_to(scores, temperature, teacher_scores, teacher_temperature)
    loss = ce + distill * kl
    accuracy = float((logits.argmax(-1) == target).float().mean())
    return loss, {"ce": float(ce.detach()), "kl": float(kl.detach()), "accuracy": accuracy}
