"""Layer-wise relevance propagation (LRP): a prediction decomposed into one relevance per input
token, conserved from the logit down through every layer.

LRP for transformers is gradient × input through a network whose backward pass follows LRP's
rules instead of calculus. Each rule replaces a nonlinearity, in the backward pass only, by the
linear map it applies at this input; the forward pass is unchanged. The rules, per component:

- **norms** (LayerNorm, RMSNorm, the basis-free norm, QK-norms): the divisor is held constant,
  so a norm passes relevance on like the linear map it is at this input (the identity rule of
  Ali et al. 2022 and of AttnLRP, Achtibat et al. 2024);
- **attention**: the pattern is held constant, so relevance flows through the values and none
  through the softmax to the queries and keys (Ali et al.'s conservative propagation, CP-LRP;
  AttnLRP instead splits part of it through the softmax, which conserves only up to a bias);
- **elementwise activations** (GELU, SiLU): ``act(g)`` is ``g`` times the constant
  ``act(g) / g`` (AttnLRP's identity rule);
- **gated products** ``act(g) * u`` (SwiGLU, GeGLU): half of the product's relevance goes to
  each factor (AttnLRP's uniform rule for multiplication);
- **linear maps, the unembedding and the residual additions**: LRP-0, which is what gradient ×
  input computes through a linear map.

With every rule's constant frozen, the explained score is an affine function of the input
embeddings, ``f(x) = sum_i R_i + b``: ``b`` is what the biases contribute (and exactly zero for
a model without biases, such as Llama's). ``relevance`` measures ``b`` by running the frozen
network on a zero input, so conservation is a property that can fail: a nonlinearity that no
rule covers breaks it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from resid.model import MLP, Attention, HookFn, Norm, Transformer

from .attribution import prediction_score


def _value_of(value: Tensor, surrogate: Tensor) -> Tensor:
    """``value`` in the forward pass, the gradient of ``surrogate`` in the backward pass."""
    return value.detach() + (surrogate - surrogate.detach())


class Rules:
    """The hooks that make a backward pass follow the LRP rules above.

    ``record`` hooks run on the real input: they freeze each rule's constant (a norm's divisor,
    an attention pattern, an activation's slope ``act(g) / g``, a gated product's factors) and
    leave every activation's value as it is. ``replay`` hooks run the same network with those
    constants on another input (zero, to measure the bias term): they return the affine
    surrogate's value, not the model's.
    """

    def __init__(self, model: Transformer):
        if model.cfg.final_softcap:
            raise ValueError("LRP here has no rule for the logits' soft-capping (final_softcap)")
        self.model, self.frozen = model, {}
        self._live: dict[str, dict[str, Tensor]] = {}  # an MLP's pre-activations in this pass

    def hooks(self, mode: str) -> list[tuple[str, HookFn]]:
        if mode not in ("record", "replay"):
            raise ValueError(f"mode {mode!r}; choose record or replay")
        hooks = []
        for path, module in self.model.named_modules():
            if isinstance(module, Norm):
                hooks.append((module.hook_scale.name, self._constant(mode)))
            elif isinstance(module, MLP):
                hooks.append((module.hook_pre.name, self._keep(path, "pre")))
                if module.hook_pre_linear is not None:
                    hooks.append((module.hook_pre_linear.name, self._keep(path, "pre_linear")))
                hooks.append((module.hook_post.name, self._mlp_rule(path, module, mode)))
            elif isinstance(module, Attention):
                hooks.append((module.hook_pattern.name, self._constant(mode)))
        return hooks

    def _constant(self, mode: str) -> HookFn:
        def hook(value: Tensor, point) -> Tensor:
            if mode == "record":
                self.frozen[point.name] = value.detach()
            return self.frozen[point.name]

        return hook

    def _keep(self, path: str, what: str) -> HookFn:
        def hook(value: Tensor, point) -> Tensor:
            self._live.setdefault(path, {})[what] = value
            return value

        return hook

    def _mlp_rule(self, path: str, mlp: MLP, mode: str) -> HookFn:
        def hook(post: Tensor, point) -> Tensor:
            live = self._live.pop(path)
            gate = live["pre"]
            if mode == "record":  # act(g) = g * slope, the slope frozen (act'(0) = 0.5 for both)
                wide = gate.detach().double()
                slope = torch.where(wide.abs() > 1e-12, mlp.activation(wide) / wide, 0.5)
                self.frozen[point.name + ".slope"] = slope.to(gate.dtype)
            activated = gate * self.frozen[point.name + ".slope"]  # [batch, pos, d_mlp]
            if "pre_linear" not in live:
                return _value_of(post, activated) if mode == "record" else activated
            linear = live["pre_linear"]
            if mode == "record":
                self.frozen[point.name + ".factors"] = (activated.detach(), linear.detach())
            act_k, linear_k = self.frozen[point.name + ".factors"]
            # the uniform rule: half of act(g) * u's relevance to each factor
            product = 0.5 * (activated * linear_k + act_k * linear)
            return _value_of(post, product) if mode == "record" else product

        return hook


def _times_input(model: Transformer, tokens: Tensor, target: int, foil: int | None, hooks: list) -> tuple:
    """Gradient × input of the score at every input position, summed over ``d_model`` in
    float64, with ``hooks`` attached: ``([pos], the score, its inputs, the score function)``."""
    tokens = tokens.reshape(1, -1)
    score = prediction_score(model, tokens, target, foil)
    with torch.no_grad():
        inputs = model.embed_tokens(tokens)
    inputs.requires_grad_()
    with model.hooks(hooks):
        explained = score(inputs)
    (gradient,) = torch.autograd.grad(explained.sum(), inputs)
    return (gradient * inputs).detach().double().sum(-1)[0], explained, inputs, score


def relevance(
    model: Transformer, tokens: Tensor, target: int, foil: int | None = None
) -> tuple[Tensor, dict[str, float]]:
    """LRP relevance of every input position for the last position's logit of ``target``
    (minus ``foil``'s): ``[pos]``; and the conservation terms: the score ``f(x)``, the sum of
    the relevances, the bias term ``b`` and the relative error of ``f(x) = sum + b``.

    ``tokens`` is ``[pos]`` or ``[1, pos]``; an input position's embedding includes its
    positional embedding where the model has one."""
    rules = Rules(model)
    relevances, explained, inputs, score = _times_input(model, tokens, target, foil, rules.hooks("record"))
    with torch.no_grad(), model.hooks(rules.hooks("replay")):
        bias = score(torch.zeros_like(inputs)).double().item()
    f, total = explained.double().item(), relevances.sum().item()
    terms = {
        "f(x)": f,
        "sum of relevance": total,
        "bias": bias,
        "relative error": abs(f - total - bias) / max(abs(f), 1e-12),
    }
    return relevances.float(), terms


def gradient_x_input(model: Transformer, tokens: Tensor, target: int, foil: int | None = None) -> Tensor:
    """Plain gradient × input of the same score, for comparison: ``[pos]``."""
    return _times_input(model, tokens, target, foil, [])[0].float()


@torch.no_grad()
def deletion_curves(
    tokens: Tensor, orders: Sequence[Sequence[int]], score: Callable[[Tensor], Tensor]
) -> Tensor:
    """The score after deleting the first ``k`` positions of each order from ``tokens``
    (``[pos]``), for ``k = 0 .. K``: ``[order, K + 1]``, the curves a faithful ranking makes fall
    fastest. Every order deletes as many positions at each ``k``, so its prompts are one length
    and run as one batch: ``score`` maps ``[n_orders, pos - k]`` tokens to ``[n_orders]`` scores."""
    tokens = tokens.reshape(-1)
    if len({len(order) for order in orders}) != 1:
        raise ValueError(f"every order must delete as many positions: lengths {[len(o) for o in orders]}")
    curves = []
    for k in range(len(orders[0]) + 1):
        removed = [set(order[:k]) for order in orders]
        kept = [[i for i in range(len(tokens)) if i not in gone] for gone in removed]  # [order, pos - k]
        scores = torch.as_tensor(score(tokens[torch.tensor(kept)]), dtype=torch.float64)  # [order]
        curves.append(scores.reshape(len(orders)))
    return torch.stack(curves, 1)


def deletion_area(curve: list[float]) -> float:
    """The area under a deletion curve: the score's mean drop over ``k = 1 .. K`` deletions,
    as a share of the full prompt's score ``curve[0]``. Higher is more faithful: the ranking
    found the tokens the prediction rests on first."""
    if len(curve) < 2:
        raise ValueError("a deletion curve needs the full prompt's score and at least one deletion")
    full = curve[0]
    return sum(full - later for later in curve[1:]) / (len(curve) - 1) / max(abs(full), 1e-12)
