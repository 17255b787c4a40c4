"""Optimisers for the privileged-basis experiments.

Elhage et al. (2023) suspect Adam's per-coordinate normaliser of choosing the basis. They
proposed, and did not run, two tests: train with a basis-free optimiser (SGD), and train with
Adam whose moments live in a rotated basis. ``RotatedAdamW`` is the second; Muon and SOAP, whose
updates do not single out coordinates the way Adam's do, are the modern cousins. ``ScalarAdamW``
removes the one thing the hypothesis blames, the per-coordinate normaliser, and keeps the rest
of Adam.
"""

from __future__ import annotations

import torch
from torch import Tensor

from resid.stats import haar_rotation


class RotatedAdamW(torch.optim.Optimizer):
    """AdamW whose moment estimates live in a fixed random basis.

    For a matrix W (``[out, in]``) with fixed rotations P (out x out) and Q (in x in), the
    gradient is carried into the rotated basis, ``G' = P^T G Q``; Adam's moments and its
    per-coordinate normalisation act there; the update is carried back, ``U = P U' Q^T``. A
    vector uses one rotation. With identity rotations this is exactly ``torch.optim.AdamW``.

    By default every parameter gets rotations of its own, so no basis of the residual stream is
    singled out. With ``basis`` (a ``d_model`` rotation), one basis of the residual stream is
    shared by every parameter: a group's ``residual_dims`` (see
    ``Transformer.residual_dims``) are rotated by it and its other dimensions are left as they
    are. This is AdamW run on the model written in that basis, the positive control for
    Elhage et al.'s hypothesis: if Adam picks the basis, it should pick this one.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        seed: int = 0,
        identity: bool = False,  # for testing: no rotation at all
        basis: Tensor | None = None,
    ):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "residual_dims": ()}
        super().__init__(params, defaults)
        self.seed, self.identity, self.basis = seed, identity, basis

    def _rotations(self, p: Tensor, index: int, group: dict) -> list[Tensor | None]:
        shapes = [p.shape[0]] if p.dim() == 1 else [p.shape[0], p.shape[1]]
        if self.identity:
            return [None] * len(shapes)
        if self.basis is not None:
            basis = self.basis.to(p.device, p.dtype)
            return [basis if dim in group["residual_dims"] else None for dim in range(len(shapes))]
        return [
            haar_rotation(n, self.seed * 7919 + 2 * index + k, p.dtype).to(p.device)
            for k, n in enumerate(shapes)
        ]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        index = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                if p.dim() > 2:
                    raise ValueError("RotatedAdamW handles vectors and matrices only")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["rotations"] = self._rotations(p, index, group)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                rotations = state["rotations"]
                grad = _into(p.grad, rotations)
                state["step"] += 1
                state["exp_avg"].lerp_(grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias1 = 1 - beta1 ** state["step"]
                bias2 = 1 - beta2 ** state["step"]
                denom = (state["exp_avg_sq"] / bias2).sqrt_().add_(group["eps"])
                update = _out_of(state["exp_avg"] / bias1 / denom, rotations)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])
        return loss


class ScalarAdamW(torch.optim.Optimizer):
    """AdamW with one second-moment estimate per parameter tensor instead of one per entry.

    The first moment, the bias corrections, epsilon and the decoupled weight decay are Adam's;
    the normaliser is the running mean of the squared gradient over the whole tensor. A rotation
    of a matrix's input or output space rotates its gradient and its first moment and leaves
    that mean unchanged, so this optimiser commutes with rotations, as SGD does, while keeping
    Adam's scale-free steps and warm-up dynamics: its first step is ``-lr * G / rms(G)``, of the
    same size as Adam's ``-lr * sign(G)``. (Adam-mini, Zhang et al. 2024, keeps one such scalar
    per block to save memory.) Per-coordinate normalisation is the only thing it removes.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros((), dtype=p.dtype, device=p.device)  # one scalar
                state["step"] += 1
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).add_(p.grad.pow(2).mean(), alpha=1 - beta2)
                bias1 = 1 - beta1 ** state["step"]
                bias2 = 1 - beta2 ** state["step"]
                denom = (state["exp_avg_sq"] / bias2).sqrt() + group["eps"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(state["exp_avg"] / (bias1 * denom), alpha=-group["lr"])
        return loss


def _into(x: Tensor, rotations: list[Tensor | None]) -> Tensor:
    """``P^T x Q`` (``P^T x`` for a vector), a missing rotation standing for the identity."""
    if rotations[0] is not None:
        x = rotations[0].T @ x
    if len(rotations) == 2 and rotations[1] is not None:
        x = x @ rotations[1]
    return x


def _out_of(x: Tensor, rotations: list[Tensor | None]) -> Tensor:
    """``P x Q^T``: back from the rotated basis."""
    if rotations[0] is not None:
        x = rotations[0] @ x
    if len(rotations) == 2 and rotations[1] is not None:
        x = x @ rotations[1].T
    return x
