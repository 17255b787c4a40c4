"""Reading the residual stream as a prediction: the logit lens and the tuned lens.

The *logit lens* (nostalgebraist 2020) reads boundary ``l``'s residual ``h`` through the model's
own final norm and unembedding, as if the remaining blocks did nothing. At the last boundary it
*is* the model; early on it is often far off, because later blocks change the basis the
unembedding reads (and a model with tied embeddings reads its own input token back).

The *tuned lens* (Belrose et al. 2023) gives each boundary before the last an affine translator,
``h + A_l h + b_l``, trained so that the translated readout matches the model's final
distribution (the KL divergence from the final distribution to the lens's, on text). Both lenses
read through the same final norm and unembedding; only the tuned one has learned anything.

Training here follows the paper with two economies a laptop needs, both stated where they act:
the translators start from the least-squares map from ``h_l`` to the final residual (the linear
shortcut of Din et al. 2023), and the training KL is taken over the tokens the final
distribution puts in its top ``top_k`` somewhere in the training text, not the whole vocabulary.
Evaluation (``kl_to_final``) always uses the whole vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from resid.model import Transformer
from resid.runtime import progress
from resid.runtime.paths import cache_dir
from resid.runtime.provenance import machine, record_build
from resid.train import records


class TunedLens(nn.Module):
    """One affine translator per layer boundary before the last: ``weight[l]`` is ``A_l``
    (``[d_model, d_model]``, applied as ``h @ A_l``) and ``bias[l]`` is ``b_l``. All zeros is
    the logit lens."""

    def __init__(self, d_model: int, n_layers: int):
        super().__init__()
        self.n_layers = n_layers
        self.weight = nn.Parameter(torch.zeros(n_layers, d_model, d_model))
        self.bias = nn.Parameter(torch.zeros(n_layers, d_model))

    def translate(self, h: Tensor, boundary: int) -> Tensor:
        """``h`` (``[..., d_model]``) at ``boundary``, translated toward the final residual. The
        last boundary has no translator: it is the model's output already."""
        if boundary == self.n_layers:
            return h
        return h + h @ self.weight[boundary] + self.bias[boundary]


def readout(model: Transformer, h: Tensor, boundary: int, lens: TunedLens | None = None) -> Tensor:
    """Logits read from boundary ``boundary``'s residual ``h``: by the logit lens if ``lens`` is
    None, else through the tuned lens's translator first."""
    return model.to_logits(h if lens is None else lens.translate(h, boundary))


@dataclass(frozen=True)
class LensFit:
    """How a tuned lens is trained: ``n_windows`` windows of ``length`` tokens of ``corpus``
    (drawn by ``data.windows`` with ``seed``; evaluation text is drawn after them with
    ``skip=n_windows``), a least-squares start, then ``steps`` Adam steps on the KL over
    ``batch_size`` random positions."""

    model: str
    corpus: str = "pydoc"
    n_windows: int = 128
    length: int = 128
    seed: int = 0
    steps: int = 100
    batch_size: int = 256
    lr: float = 3e-4
    top_k: int = 16

    def key(self) -> str:
        return "lens-" + hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def least_squares_start(stream: Tensor) -> TunedLens:
    """Translators fitted by least squares: ``h_l + A_l h_l + b_l`` regressed on the final
    residual ``h_L`` over every position of ``stream`` (``[n_layers + 1, n_tokens, d_model]``).
    Solved in float64: the residual's outlier dimensions make the problem badly conditioned."""
    n_layers, d_model = stream.shape[0] - 1, stream.shape[-1]
    lens = TunedLens(d_model, n_layers)
    final = stream[-1].double()
    ones = torch.ones(stream.shape[1], 1, dtype=torch.float64)
    with torch.no_grad():
        for boundary in range(n_layers):
            h = stream[boundary].double()
            inputs = torch.cat([h, ones], 1)  # [n_tokens, d_model + 1]: the last column fits b_l
            solution = torch.linalg.lstsq(inputs, final - h).solution  # [d_model + 1, d_model]
            lens.weight[boundary] = solution[:-1].float()
            lens.bias[boundary] = solution[-1].float()
    return lens


def kl_terms(final_logits: Tensor, lens_logits: Tensor) -> Tensor:
    """KL(final || lens) per position, in nats: what the tuned lens minimises."""
    final_logp, lens_logp = final_logits.float().log_softmax(-1), lens_logits.float().log_softmax(-1)
    return (final_logp.exp() * (final_logp - lens_logp)).sum(-1)


def train_tuned_lens(
    model: Transformer, tokens: Tensor, fit: LensFit, show_progress: bool = False
) -> tuple[TunedLens, list[dict]]:
    """A tuned lens trained on ``tokens`` (``[n_windows, length]``): the least-squares start,
    then Adam on the summed per-boundary KL to the final distribution, over the tokens the final
    distribution ranks in its top ``fit.top_k`` at some training position (the training
    vocabulary; the rest of the vocabulary holds little of the final distribution's mass and
    would cost most of the time). Returns the lens and its history, one row per step."""
    model.requires_grad_(False)
    with torch.no_grad():
        stream = model.residual_stream(tokens)  # [n_layers + 1, n_tokens, d_model]
        vocabulary = torch.cat(
            [  # in chunks: all positions' logits at once would not fit (Gemma: 17 GB)
                model.to_logits(chunk).topk(fit.top_k, -1).indices.unique()
                for chunk in stream[-1].split(1024)
            ]
        ).unique()  # [n_kept]
    lens = least_squares_start(stream)

    def restricted_logits(h: Tensor) -> Tensor:  # [positions, n_kept]
        return model.to_logits(h, vocabulary)

    optimizer = torch.optim.Adam(lens.parameters(), lr=fit.lr)
    generator = torch.Generator().manual_seed(fit.seed)
    history = []
    with progress.bar(fit.steps, "tuned lens", show=show_progress) as shown:
        for step in range(fit.steps):
            positions = torch.randint(0, stream.shape[1], (fit.batch_size,), generator=generator)
            with torch.no_grad():
                target = restricted_logits(stream[-1, positions])
            per_boundary = torch.stack([
                kl_terms(target, restricted_logits(lens.translate(stream[b, positions], b))).mean()
                for b in range(lens.n_layers)
            ])  # fmt: skip
            optimizer.zero_grad()
            per_boundary.sum().backward()
            optimizer.step()
            history.append({"step": step, "kl": per_boundary.mean().item(), "vocabulary": len(vocabulary)})
            shown.update()
    lens.requires_grad_(False)
    return lens, history


def tuned_lens(
    model: Transformer, tokens: Tensor, fit: LensFit, show_progress: bool = False
) -> tuple[TunedLens, dict]:
    """The tuned lens for ``fit``, trained on ``tokens`` once and cached on disk by its key, with
    its record (configuration, history, time, training vocabulary size); where run records are
    writable the record is also filed there, so the book keeps where and how long it trained."""
    path = cache_dir() / "lenses" / f"{fit.key()}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=True)
        lens = TunedLens(model.cfg.d_model, model.cfg.n_layers)
        lens.load_state_dict(saved["state"])
        lens.requires_grad_(False)
        record = json.loads(saved["record"])
        record_build(f"tuned lens {fit.key()}", record["seconds"], built_now=False)
        return lens, record
    if list(tokens.shape) != [fit.n_windows, fit.length]:
        raise ValueError(
            f"tokens are {list(tokens.shape)}: the fit reads {fit.n_windows} windows of {fit.length}"
        )
    started = time.time()
    lens, history = train_tuned_lens(model, tokens, fit, show_progress)
    config = asdict(fit)  # holds "steps", which a run record requires
    record = records.new(fit.key(), config, history, time.time() - started, "cpu", machine())
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": lens.state_dict(), "record": json.dumps(record)}, path)
    records.write(record)
    record_build(f"tuned lens {fit.key()}", record["seconds"], built_now=True)
    return lens, record


def lens_record(model: Transformer, tokens: Tensor, fit: LensFit) -> dict:
    """The record of the tuned lens for ``fit``: the committed one where there is one (nothing
    trained, nothing loaded), else the one ``tuned_lens`` writes as it trains (or loads) it."""
    record = records.read(fit.key())
    if record is not None:
        record_build(f"tuned lens {fit.key()}", record["seconds"], built_now=False)
        return record
    return tuned_lens(model, tokens, fit)[1]


def measure(model: Transformer, tokens: Tensor, fit: LensFit, fn, /, **inputs):
    """``fn(model, lens=<the tuned lens>, **inputs)``, read from the lens's run record when it
    holds this measurement (same function, same code, same inputs), else computed with the lens
    (loaded from the cache, or trained on ``tokens`` now) and added to the record, as
    ``train.measure`` does for a trained model: a fresh clone reads what the chapter measured of
    its lenses without their weights (40 MB each in float32), which the repository does not keep."""
    return records.measured(
        records.measurement_id(fn, inputs),
        lambda: records.read(fit.key()),
        lambda: fn(model, lens=tuned_lens(model, tokens, fit)[0], **inputs),
    )


@torch.no_grad()
def kl_to_final(
    model: Transformer, tokens: Tensor, lens: TunedLens | None = None, stride: int = 1, batch_size: int = 8
) -> Tensor:
    """KL(final || lens readout) in nats over the whole vocabulary, at every boundary, averaged
    over the positions ``0, stride, 2 stride, ...`` of each window: ``[n_layers + 1, n_windows]``.
    ``lens`` None is the logit lens."""
    per_window = []
    for start in range(0, len(tokens), batch_size):
        batch = tokens[start : start + batch_size]
        stream = model.residual_stream(batch)  # [n_layers + 1, batch * pos, d_model]
        stream = stream.view(stream.shape[0], len(batch), -1, stream.shape[-1])[:, :, ::stride]
        final = model.to_logits(stream[-1])
        per_window.append(torch.stack([
            kl_terms(final, readout(model, stream[b], b, lens)).mean(-1) for b in range(stream.shape[0])
        ]))  # fmt: skip
    return torch.cat(per_window, dim=1)


@torch.no_grad()
def top1_by_boundary(
    model: Transformer, tokens: Tensor, answers: Tensor, lens: TunedLens | None = None
) -> Tensor:
    """Whether ``answers[p]`` is the lens's top-1 at prompt ``p``'s last position, at every
    boundary: ``[n_layers + 1, n_prompts]`` booleans."""
    _, cache = model.run_with_cache(tokens, model.resid_names())
    return torch.stack([
        readout(model, cache[name][:, -1], b, lens).argmax(-1) == answers
        for b, name in enumerate(model.resid_names())
    ])  # fmt: skip


def first_decoding(top1: Tensor) -> Tensor:
    """Per prompt, the first boundary from which the answer stays the top-1 through the last
    boundary (``top1`` as ``top1_by_boundary`` returns it); ``n_layers + 1`` for a prompt whose
    answer is not the top-1 even at the end."""
    n_boundaries = top1.shape[0]
    stays = top1.flip(0).int().cumprod(0).flip(0).bool()  # [boundary, prompt]: top-1 here and after
    never = torch.full_like(stays[0], n_boundaries, dtype=torch.long)
    return torch.where(stays.any(0), n_boundaries - stays.sum(0), never)
