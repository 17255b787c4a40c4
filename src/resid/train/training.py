"""Train the book's small models on CPU, cached by a hash of the full configuration.

A run writes a checkpoint every ``checkpoint_every`` steps (to a temp file, then renamed, so an
interrupted run never leaves a corrupt file) and resumes from it when called again. A finished
run is loaded, not retrained.

The same entry point runs on a GPU when there is one, and data-parallel under torchrun:

    python -m resid.train --preset tiny-basisfree
    torchrun --nproc_per_node=8 -m resid.train --preset paper-200m
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from resid.model import Config, Transformer, next_token_loss
from resid.model.cache import act_name
from resid.model.data import (
    ByteTokenizer,
    corpus,
    random_batch,
    repeated_random_batch,
    token_ids,
    train_val_split,
)
from resid.model.readouts import in_context_losses, sequence_head_scores
from resid.runtime.paths import cache_dir
from resid.runtime.progress import bar as progress_bar
from resid.runtime.progress import steps as progress_steps
from resid.runtime.provenance import machine, record_build, record_measurement
from resid.stats import haar_rotation, kurtosis_metric, principal_kurtosis, top_energy_share

from . import records
from .optim import RotatedAdamW, ScalarAdamW

OPTIMIZERS = ("adamw", "sgd", "rotated_adamw", "shared_basis_adamw", "scalar_adamw", "muon", "soap")
PRECISIONS = ("float32", "bfloat16")
LATER_FIELDS = {"precision": "float32"}
LATER_MODEL_FIELDS = {
    "attn_only": False, "qkv_bias": False, "qk_norm": False, "rotary_dim": 0, "parallel": False,
    "sliding_window": 0, "layer_windows": (), "local_rope_theta": 0.0, "sandwich_norms": False,
    "embed_scale": 1.0, "attn_scale": 0.0, "attn_softcap": 0.0, "final_softcap": 0.0, "rope_scaling": (),
    "unembed_bias": False, "qk_norm_joint": False, "pre_norms": True,
}  # fmt: skip


@dataclass(frozen=True)
class TrainConfig:
    model: Config = field(default_factory=Config)
    corpus: str = "pydoc"  # pydoc | stdlib | hf:<dataset> | repeated-random (induction data)
    optimizer: str = "adamw"  # one of OPTIMIZERS; muon uses AdamW off the blocks
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    momentum: float = 0.9  # SGD only
    weight_decay: float = 0.1  # on matrices only; decoupled (AdamW) or coupled (SGD)
    steps: int = 600
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # the cosine schedule ends at lr * min_lr_ratio
    batch_size: int = 32
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int = 100
    eval_batches: int = 8  # 0: every window of the held-out split, in order (no sampling error)
    checkpoint_every: int = 100
    # bfloat16: each training step's forward and loss under bf16 autocast (matmuls in bf16, the
    # weights, optimiser state and residual sums in float32); evaluation stays in float32
    precision: str = "float32"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainConfig.optimizer={self.optimizer!r}; choose one of {OPTIMIZERS}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"TrainConfig.precision={self.precision!r}; choose one of {PRECISIONS}")
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("steps and batch_size must be positive, and lr > 0")

    def key(self) -> str:
        """A short hash of every field: the name of this run's cache entry."""
        fields = asdict(self)
        # Fields added after runs were cached are left out at their defaults, so the cache stays valid.
        for name, default in LATER_MODEL_FIELDS.items():
            if fields["model"][name] == default:
                del fields["model"][name]
        for name, default in LATER_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# Named runs that load("trained:<name>") knows; chapters add their own configurations freely.
PRESETS: dict[str, TrainConfig] = {
    "tiny-layernorm": TrainConfig(steps=300),
    "tiny-basisfree": TrainConfig(model=Config(norm="basisfree"), steps=300),
    # Two attention-only layers on repeated random tokens: the induction heads of Olsson et al.
    # form after about 350 steps (a sudden drop of the loss on the repeat), about a minute on CPU.
    "induction-2l": TrainConfig(
        model=Config(n_ctx=48, d_model=128, n_layers=2, n_heads=4, attn_only=True),
        corpus="repeated-random",
        steps=1500,
        lr=1e-3,
        warmup_steps=50,
        weight_decay=0.0,
        eval_every=50,
        checkpoint_every=500,
    ),
    # The scale of Elhage et al.'s model (d_model 1280, about 200M parameters with a BPE
    # vocabulary), for a GPU machine under torchrun; with byte tokens it has 197M parameters.
    "paper-200m": TrainConfig(
        model=Config(d_model=1280, n_layers=10, n_heads=20, d_mlp=5120, n_ctx=1024, norm="basisfree"),
        steps=30_000,
        warmup_steps=1000,
        batch_size=64,
        lr=6e-4,
        corpus="stdlib",
        eval_every=1000,
        checkpoint_every=1000,
    ),
}


@dataclass
class TrainResult:
    model: Transformer
    history: list[dict]  # one row per step: step, lr, train_loss, and val_loss where evaluated
    config: TrainConfig
    path: Path


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warmup, then cosine decay to ``lr * min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class Optimizers:
    """Several optimisers stepped as one: Muon takes the blocks' matrices, AdamW the rest."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [group for o in self.optimizers for group in o.param_groups]

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=True)

    def state_dict(self) -> list[dict]:
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, states: list[dict]) -> None:
        for o, state in zip(self.optimizers, states, strict=True):
            o.load_state_dict(state)


def make_optimizer(model: Transformer, cfg: TrainConfig) -> Optimizers:
    """Weight decay on matrices only. Every group remembers its base learning rate, which the
    schedule scales."""
    named = list(model.named_parameters())
    in_blocks = [p for n, p in named if n.startswith("blocks.") and p.dim() == 2]
    matrices = [p for n, p in named if p.dim() >= 2]
    others = [p for n, p in named if p.dim() < 2]

    def groups(params_decayed: list, params_plain: list) -> list[dict]:
        return [{"params": params_decayed, "weight_decay": cfg.weight_decay},
                {"params": params_plain, "weight_decay": 0.0}]  # fmt: skip

    adam = {"lr": cfg.lr, "betas": cfg.betas, "eps": cfg.eps}
    if cfg.optimizer == "adamw":
        optimizers = [torch.optim.AdamW(groups(matrices, others), **adam, fused=True)]  # fastest on CPU too
    elif cfg.optimizer == "sgd":
        optimizers = [torch.optim.SGD(groups(matrices, others), lr=cfg.lr, momentum=cfg.momentum)]
    elif cfg.optimizer == "rotated_adamw":
        optimizers = [RotatedAdamW(groups(matrices, others), seed=cfg.seed, **adam)]
    elif cfg.optimizer == "scalar_adamw":  # every parameter, embeddings included: nothing per coordinate
        optimizers = [ScalarAdamW(groups(matrices, others), **adam)]
    elif cfg.optimizer == "shared_basis_adamw":  # one group per parameter: each names its residual dims
        per_parameter = [{"params": [p], "weight_decay": cfg.weight_decay if p.dim() >= 2 else 0.0,
                          "residual_dims": model.residual_dims(n)} for n, p in named]  # fmt: skip
        optimizers = [RotatedAdamW(per_parameter, basis=optimizer_basis(cfg), **adam)]
    elif cfg.optimizer == "soap":
        from pytorch_optimizer import SOAP

        optimizers = [SOAP(groups(matrices, others), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)]
    else:  # muon: orthogonalised momentum for hidden matrices, scaled to AdamW's update size
        block_ids = {id(p) for p in in_blocks}
        rest = [p for p in matrices if id(p) not in block_ids]
        muon = torch.optim.Muon(
            in_blocks, lr=cfg.lr, weight_decay=cfg.weight_decay, momentum=0.95, adjust_lr_fn="match_rms_adamw"
        )
        optimizers = [muon, torch.optim.AdamW(groups(rest, others), **adam)]
    for o in optimizers:
        for group in o.param_groups:
            group["base_lr"] = group["lr"]
    return Optimizers(optimizers)


def optimizer_basis(cfg: TrainConfig) -> torch.Tensor | None:
    """The basis of the residual stream that ``shared_basis_adamw`` normalises in (its columns),
    by seed; None for the other optimisers. Its seeds are apart from every other rotation's."""
    if cfg.optimizer != "shared_basis_adamw":
        return None
    return haar_rotation(cfg.model.d_model, seed=2_000_000 + cfg.seed)


@torch.no_grad()
def evaluate(model: Transformer, ids: torch.Tensor, cfg: TrainConfig) -> dict:
    """Held-out loss on a fixed set of batches (the same ones at every evaluation), and the
    privileged-basis statistics of the residual stream on the first of them: per layer
    boundary, the kurtosis metric, its value after one fixed random rotation, the kurtosis
    of what the MLPs read (their computation basis, which differs under built-in rotations),
    the top-4 coordinates' energy share, the kurtosis in the stream's own principal axes (basis-
    free: a few heavy directions, whether or not they are coordinates), and for
    ``shared_basis_adamw`` the kurtosis in the optimiser's own basis. The loss of each batch is
    kept, for standard errors and for comparisons paired on the same batches. With
    ``eval_batches=0`` the batches are every window of the held-out split, so the loss has no
    sampling error against the split, and ``val_loss_se`` is its standard error over windows
    (against new text like it)."""
    model.eval()
    extra = {}
    if cfg.eval_batches == 0:
        windows = held_out_windows(ids, cfg.model.n_ctx)
        batches = list(windows.split(cfg.batch_size))
        per_window = torch.cat([window_losses(model, batch) for batch in batches])
        losses = [chunk.mean().item() for chunk in per_window.split(cfg.batch_size)]
        extra = {
            "val_loss": per_window.mean().item(),
            "val_loss_se": (per_window.std() / len(per_window) ** 0.5).item(),
        }
    else:
        batches = [batch_of(ids, cfg, seed=10_000 + i).to(ids.device) for i in range(cfg.eval_batches)]
        losses = [model.loss(batch).item() for batch in batches]
    probe = batches[0][:, :-1]
    mlp_names = [] if cfg.model.attn_only else [act_name("mlp_in", i) for i in range(cfg.model.n_layers)]
    _, cache = model.run_with_cache(probe, model.resid_names() + mlp_names)
    resid = [cache[n].flatten(0, 1).float() for n in model.resid_names()]
    rotation = haar_rotation(cfg.model.d_model, seed=12345).to(ids.device)
    result = {
        "val_loss": sum(losses) / len(losses),
        "kurtosis": [kurtosis_metric(r) for r in resid],
        "kurtosis_rotated": [kurtosis_metric(r @ rotation) for r in resid],
        "kurtosis_mlp_in": [kurtosis_metric(cache[n]) for n in mlp_names],
        "max_abs_over_rms": [(r.abs().max() / r.pow(2).mean().sqrt()).item() for r in resid],
        "top4_energy_share": [top_energy_share(r, 4) for r in resid],
        "kurtosis_principal": [principal_kurtosis(r) for r in resid],
        "val_losses": losses,
    } | extra
    basis = optimizer_basis(cfg)
    if basis is not None:
        result["kurtosis_optimizer_basis"] = [kurtosis_metric(r @ basis.to(r.device)) for r in resid]
    if cfg.corpus == REPEATED_RANDOM:  # the induction bump: loss on the repeat vs the first pass
        period = cfg.model.n_ctx // 3
        fixed = repeated_random_batch(cfg.batch_size, 2 * period, cfg.model.vocab_size, 10_000, period)
        fixed = fixed.to(ids.device)
        first, second = in_context_losses(model, fixed, start=period)
        induction = sequence_head_scores(model, fixed, period)["induction"].mean(0)  # [layer, head]
        result |= {"loss_first_half": first, "loss_second_half": second,
                   "induction_score": float(induction.max())}  # fmt: skip
    model.train()
    return result


REPEATED_RANDOM = "repeated-random"


def held_out_windows(ids: torch.Tensor, n_ctx: int) -> torch.Tensor:
    """Every window of ``n_ctx + 1`` tokens of ``ids`` that starts where the last one's inputs
    ended (``[n, n_ctx + 1]``): each token after the first is a target exactly once."""
    n = (len(ids) - 1) // n_ctx
    return ids[: n * n_ctx + 1].unfold(0, n_ctx + 1, n_ctx)


def window_losses(model: Transformer, tokens: torch.Tensor, last: int | None = None) -> torch.Tensor:
    """Mean next-token loss of each sequence, in nats (``[batch]``), over its last ``last``
    predictions only when given (say, the continuation of a prompt)."""
    logits = model(tokens[:, :-1])  # [batch, pos, vocab]
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    return per_token[:, -(last or per_token.shape[1]) :].mean(-1)


def batch_of(ids: torch.Tensor, cfg: TrainConfig, seed: int) -> torch.Tensor:
    """``cfg.batch_size`` sequences of ``n_ctx + 1`` tokens (inputs and their targets), by ``seed``."""
    if cfg.corpus == REPEATED_RANDOM:
        return repeated_random_batch(cfg.batch_size, cfg.model.n_ctx + 1, cfg.model.vocab_size, seed)
    return random_batch(ids, cfg.batch_size, cfg.model.n_ctx + 1, seed=seed)


def corpus_ids(cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    if cfg.corpus == REPEATED_RANDOM:  # generated batch by batch; see batch_of
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    return train_val_split(token_ids(corpus(cfg.corpus), ByteTokenizer()))


def _distributed() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless running under torchrun with a process group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def train(
    cfg: TrainConfig,
    progress: bool = True,
    stop_after: int | None = None,
    device: torch.device | None = None,
    keep_weights: bool = False,
) -> TrainResult:
    """Train (or resume, or just load) the run described by ``cfg``.

    ``stop_after`` ends this call after that many steps, checkpointed; the next call resumes.
    ``keep_weights`` keeps a run too large to keep whole (see ``records.WEIGHTS_UP_TO``) with
    its record anyway, at half precision, for a chapter that needs the model itself; the model
    returned is then that rounded one, whether trained now or read back, so that a re-execution
    from the record computes exactly what the first execution did.
    Training runs on the GPU when there is one; the model comes back on CPU unless ``device``
    was given.
    Under torchrun every process takes its share of each batch and DDP averages the gradients,
    so the run matches a single-process one up to float summation order.
    """
    if cfg.model.vocab_size != ByteTokenizer.vocab_size:
        raise ValueError("the trainer uses byte tokens: set Config(vocab_size=256)")
    rank, world = _distributed()
    if cfg.batch_size % world:
        raise ValueError(f"batch_size={cfg.batch_size} does not split over {world} processes")
    device_given = device is not None
    device = device or default_device()
    path = cache_dir() / "runs" / f"{cfg.key()}.pt"
    record = _record(cfg)
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model).to(device)
    optimizer = make_optimizer(model, cfg)
    history: list[dict] = []
    step, seconds, estimated = 0, 0.0, False
    trained_on = describe(device)
    state = torch.load(path, weights_only=False, map_location=device) if records.current(path) else None
    finished = record is not None and record["step"] >= cfg.steps
    kept_whole = finished and records.weights_path(cfg.key()).exists()
    if state is not None and kept_whole:
        # a finished run kept whole in its record is the run: a checkpoint in the cache (a quick
        # run's, unfinished; another machine's training of the same configuration) never shadows
        # it, nor rewrites it
        state = None
    weights = None if state is not None or record is None else records.read_weights(cfg.key())
    if state is not None:
        model.load_state_dict(state["model"])
        history, step = state["history"], state["step"]
        if "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
        elif step < cfg.steps:
            raise ValueError(f"{path} was compacted unfinished: it cannot resume; delete it to retrain")
        seconds = state.get("seconds")  # runs cached before timing was recorded have none
        estimated = state.get("seconds_estimated", False)
        trained_on = state.get("device", "cpu")
        if _trained_elsewhere(state, device):  # its time there says little about its time here
            estimated = True
            seconds, new = _seconds_here(state, cfg, device)
            if new:
                _write(path, state)
    elif weights is not None:  # a small run whose record keeps its weights: nothing to train
        model.load_state_dict(weights)
        history, step, trained_on = record["history"], record["step"], record["device"]
        seconds, estimated = _recorded_seconds(record, cfg, device)
    built_now, seconds_now = step < cfg.steps, 0.0
    if built_now:
        started, before = time.perf_counter(), seconds

        def seconds_so_far() -> float | None:
            """Training time summed over interrupted sessions; unknown if an untimed run resumes."""
            return None if before is None else before + time.perf_counter() - started

        train_ids, val_ids = corpus_ids(cfg)
        forward = model
        if world > 1:
            forward = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device] if device.type == "cuda" else None
            )
        last = cfg.steps if stop_after is None else min(cfg.steps, step + stop_after)
        model.train()
        desc = f"training {cfg.key()[:8]} ({cfg.optimizer}, {cfg.model.norm}, seed {cfg.seed})"
        first = step
        bar = progress_bar(cfg.steps, desc, initial=first, show=progress and rank == 0)
        try:
            for step in range(first, last):
                history.append(
                    _train_step(forward, model, optimizer, train_ids, cfg, step, rank, world, device)
                )
                done = step + 1
                if done % cfg.eval_every == 0 or done == cfg.steps:
                    history[-1] |= evaluate(model, val_ids.to(device), cfg)
                bar.update()
                bar.set_postfix(loss=f"{history[-1]['train_loss']:.3f}", refresh=False)
                if done % cfg.checkpoint_every == 0 or done == last:
                    _save(path, model, optimizer, history, done, cfg, seconds_so_far(), rank, trained_on)
        except KeyboardInterrupt:
            _save(path, model, optimizer, history, len(history), cfg, seconds_so_far(), rank, trained_on)
            raise
        finally:
            bar.close()
        seconds, seconds_now = seconds_so_far(), time.perf_counter() - started
    record_build(
        f"training run {cfg.key()}", seconds, built_now, estimated, seconds_now=seconds_now, device=trained_on
    )
    small = sum(p.numel() for p in model.parameters()) <= records.WEIGHTS_UP_TO
    rounded = keep_weights and not small and len(history) >= cfg.steps
    if rounded:  # half precision, as committed (a no-op on weights read back from the record)
        with torch.no_grad():
            for parameter in model.parameters():  # the state dict's tensors (buffers are not saved)
                parameter.copy_(parameter.half())
    if len(history) >= cfg.steps and rank == 0:
        kept = None
        if small:
            kept = {k: v.clone() for k, v in model.state_dict().items()}  # clone: tied weights
        elif rounded:
            kept = {k: v.half() for k, v in model.state_dict().items()}
        if record is None or record["history"] != history:
            # a new run, or another training of the same configuration: its record is this one,
            # and the measurements of the other are dropped with it
            records.write(records.new(cfg.key(), asdict(cfg), history, seconds, trained_on, machine()), kept)
        elif rounded and weights is None:  # recorded without its weights: they join the record
            records.write(record, kept)
    model.eval()
    model.tokenizer = ByteTokenizer()
    if not device_given:  # the book analyses on CPU; a caller who chose a device keeps the model there
        model.cpu()
    return TrainResult(model, history, cfg, path)


def _train_step(
    forward, model, optimizer, ids, cfg: TrainConfig, step: int, rank: int, world: int, device
) -> dict:
    factor = lr_at(cfg, step) / cfg.lr
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor
    # The batch depends only on (seed, step), so a resumed run sees exactly the batches it would
    # have; each process takes every world-th row of it.
    batch = batch_of(ids, cfg, seed=cfg.seed * 1_000_003 + step)
    batch = batch[rank::world].to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bfloat16"):
        logits = forward(batch[:, :-1])
        loss = next_token_loss(logits, batch)
    optimizer.zero_grad()
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    if world > 1:  # report the global batch's loss, as one process would
        loss = loss.detach().clone()
        torch.distributed.all_reduce(loss)
        loss /= world
    return {"step": step + 1, "lr": factor * cfg.lr, "train_loss": loss.item()}


def _save(
    path: Path,
    model,
    optimizer,
    history: list[dict],
    step: int,
    cfg: TrainConfig,
    seconds: float | None,
    rank: int = 0,
    device: str = "cpu",
) -> None:
    if rank == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "history": history,
            "step": step,
            "config": asdict(cfg),
            "seconds": seconds,
            "device": device,
        }
        _write(path, state)
    if _distributed()[1] > 1:
        torch.distributed.barrier()


def _write(path: Path, state: dict) -> None:
    """Save to a temp file, then rename, so an interrupted save never leaves a corrupt file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path)


def describe(device: torch.device) -> str:
    """``cpu``, or ``cuda: NVIDIA H200``: where a run trained, as its checkpoint records it."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


def compact(path: Path) -> int:
    """Drop a finished run's optimizer state (about two thirds of an AdamW checkpoint): it is
    needed only to resume. Returns the bytes saved; a run that has not finished is left alone."""
    state = torch.load(path, weights_only=False, map_location="cpu")
    if "optimizer" not in state or state["step"] < state["config"]["steps"]:
        return 0
    before = path.stat().st_size
    del state["optimizer"]
    _write(path, state)
    return before - path.stat().st_size


def _record(cfg: TrainConfig) -> dict | None:
    """The committed record of this run, checked against its key; None if there is none."""
    record = records.read(cfg.key())
    if record is None:
        return None
    path = records.json_path(cfg.key())
    try:
        key = config_from_dict(record["config"]).key()
    except (TypeError, KeyError, ValueError) as error:
        raise records.RecordError(f"{path}: its configuration does not parse ({error})") from None
    if key != cfg.key():
        raise records.RecordError(f"{path}: its configuration hashes to {key}, not to its file name")
    return record


def _recorded_seconds(record: dict, cfg: TrainConfig, device: torch.device) -> tuple[float | None, bool]:
    """What a recorded run took (or would take here, estimated, if it trained on another kind of
    device), for the chapter's cold time."""
    if not _trained_elsewhere(record, device):
        return record.get("seconds"), False
    seconds, new = _seconds_here(record, cfg, device)
    if new:
        records.write(record)
    return seconds, True


def _read_from(record: dict, cfg: TrainConfig) -> None:
    """A run read from its record counts for the chapter's cold time as a cached one does."""
    seconds, estimated = _recorded_seconds(record, cfg, default_device())
    record_build(f"training run {cfg.key()}", seconds, False, estimated, device=record["device"])


def _seconds_here(state: dict, cfg: TrainConfig, device: torch.device) -> tuple[float, bool]:
    """What training this run would take on ``device``: a few timed steps and one evaluation,
    scaled to the run's length; remembered in ``state`` (the second value says it is new, to
    be saved), so it is timed once per device."""
    here = describe(device)
    estimates = state.setdefault("seconds_here", {})
    if here in estimates:
        return estimates[here], False
    with torch.random.fork_rng(devices=[]):  # timing must not move the caller's random stream
        estimates[here] = _time_steps(cfg, device)
    return estimates[here], True


def _trained_elsewhere(state: dict, device: torch.device) -> bool:
    # runs cached before devices were recorded ran on CPU
    return (
        state["step"] >= state["config"]["steps"] and state.get("device", "cpu").split(":")[0] != device.type
    )


def _time_steps(cfg: TrainConfig, device: torch.device) -> float:
    per_step, per_eval = _timed_step_and_eval(replace(cfg, seed=0, lr=1.0, steps=1), device)
    return per_step * cfg.steps + per_eval * math.ceil(cfg.steps / cfg.eval_every)


@functools.cache
def _timed_step_and_eval(cfg: TrainConfig, device: torch.device) -> tuple[float, float]:
    """Seconds per training step and per evaluation; runs that differ only in seed, learning
    rate or length share them, so a sweep is timed once."""
    model = Transformer(cfg.model).to(device)
    optimizer = make_optimizer(model, cfg)
    train_ids, val_ids = corpus_ids(cfg)
    timed = 4
    for step in range(timed + 1):  # the first step (allocation, lazy state) is not timed
        if step == 1:
            started = time.perf_counter()
        _train_step(model, model, optimizer, train_ids, cfg, step, 0, 1, device)
    per_step = (time.perf_counter() - started) / timed
    started = time.perf_counter()
    evaluate(model, val_ids.to(device), cfg)
    return per_step, time.perf_counter() - started


def estimated_seconds(cfg: TrainConfig, device: torch.device | None = None) -> float:
    """What training ``cfg`` would take here: a few timed steps and one evaluation, scaled to
    its length (runs that differ only in seed, rate or length are timed once)."""
    return _time_steps(cfg, device or default_device())


def train_queue(
    configs: list[TrainConfig],
    workers: int = 1,
    progress: bool = True,
    retrain: frozenset[str] = frozenset(),
    after: Callable[[TrainConfig], object] | None = None,
) -> list[str]:
    """Train every configuration that has no record yet (and those whose keys are in ``retrain``,
    recorded or not: runs whose weights a chapter needs), ``workers`` runs at a time, each in a
    process of its own with an equal share of the CPU's cores (or sharing the GPU), so that no
    two runs fight over a core. Records are written where ``$RESID_RECORDS`` points, as ``train``
    writes them; an interrupted queue resumes each run from its checkpoint. ``after(cfg)`` runs
    as each run finishes (say, the measurements a chapter files in its record, taken while the
    weights are in the cache). Returns the keys it trained."""
    todo = list({cfg.key(): cfg for cfg in configs
                 if records.read(cfg.key()) is None or cfg.key() in retrain}.values())  # fmt: skip
    if workers <= 1 or len(todo) <= 1:
        for cfg in progress_steps(todo, "training run", show=progress):
            train(cfg, progress=False)
            if after is not None:
                after(cfg)
        return [cfg.key() for cfg in todo]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited torch state
    with ProcessPoolExecutor(workers, mp_context=context, initializer=torch.set_num_threads,
                             initargs=(threads,)) as pool:  # fmt: skip
        futures = [pool.submit(_train_quietly, cfg) for cfg in todo]
        with progress_bar(len(futures), "training run", show=progress) as shown:
            for future in as_completed(futures):
                key = future.result()  # a failed run fails the queue, naming its error
                if after is not None:
                    after(next(cfg for cfg in todo if cfg.key() == key))
                shown.update()
    return [cfg.key() for cfg in todo]


def _train_quietly(cfg: TrainConfig) -> str:
    train(cfg, progress=False)
    return cfg.key()


def cached(cfg: TrainConfig) -> bool:
    """Whether this machine's cache holds the run's finished checkpoint, weights included."""
    path = cache_dir() / "runs" / f"{cfg.key()}.pt"
    if not records.current(path):
        return False
    state = torch.load(path, weights_only=False, map_location="cpu")
    return state["step"] >= cfg.steps and "model" in state


def history_path(cfg: TrainConfig) -> Path:
    return cache_dir() / "runs" / f"{cfg.key()}.history.json"


def drop_weights(path: Path) -> Path:
    """Keep a finished run's history (what ``evaluate`` logged) and delete its checkpoint: a
    learning-rate sweep needs only its curves, at a hundredth of the disk."""
    state = torch.load(path, weights_only=False, map_location="cpu")
    if state["step"] < state["config"]["steps"]:
        raise ValueError(f"{path} has not finished: its weights are needed to resume")
    record = path.with_suffix(".history.json")
    fields = ("config", "history", "step", "seconds", "device", "seconds_here")
    kept = {k: state[k] for k in fields if k in state}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(kept, f)
    os.replace(tmp, record)
    path.unlink()
    return record


def run_history(cfg: TrainConfig, progress: bool = True) -> list[dict]:
    """A run's history without its weights: from its committed record, its checkpoint, or the
    history ``drop_weights`` kept in the cache; trained when none exists."""
    committed = _record(cfg)
    if committed is not None:
        _read_from(committed, cfg)
        return committed["history"]
    record = history_path(cfg)
    if records.current(cache_dir() / "runs" / f"{cfg.key()}.pt") or not record.exists():
        return train(cfg, progress=progress).history
    state, device = json.loads(record.read_text()), default_device()
    seconds, estimated = state.get("seconds"), False
    if _trained_elsewhere(state, device):
        (seconds, new), estimated = _seconds_here(state, cfg, device), True
        if new:
            record.write_text(json.dumps(state))
    record_build(f"training run {cfg.key()}", seconds, False, estimated, device=state.get("device", "cpu"))
    kept = records.new(cfg.key(), state["config"], state["history"], state.get("seconds"),
                       state.get("device", "cpu"), machine="unrecorded")  # fmt: skip
    records.write(kept | {"seconds_here": state.get("seconds_here", {})})
    return state["history"]


def measure(cfg: TrainConfig, fn, /, progress: bool = False, **inputs):
    """``fn(model, **inputs)`` for the model run ``cfg`` trains: read from the run's record when
    it holds this measurement (same function, same code, same inputs), else computed from the
    trained model (loaded, or trained now) and added to the record. The value comes back as the
    record stores it (tables, tensors, tuples restored), computed or read alike."""
    name = records.measurement_id(fn, inputs)
    record_measurement(cfg.key(), name)
    trained: list[TrainResult] = []

    def compute():
        trained.append(train(cfg, progress=progress))
        return fn(trained[0].model, **inputs)

    return records.measured(
        name,
        lambda: _record(cfg),
        compute,
        owns=lambda record: record["history"] == trained[0].history,  # as train() left it: this run's own
        on_read=lambda record: _read_from(record, cfg),
    )


def config_from_dict(d: dict) -> TrainConfig:
    model = Config(**d["model"])
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "model"}
    return replace(TrainConfig(model=model), **rest)


def parse_overrides(pairs: list[str]) -> dict:
    """``["lr=1e-2", "norm=rmsnorm"]`` -> ``{"lr": 0.01, "norm": "rmsnorm"}``: each value read as a
    Python literal, else kept as a bare string. Raises ``ValueError`` for a pair without ``=``."""
    parameters = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"parameter {pair!r} is not of the form name=value")
        try:
            parameters[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parameters[key] = value  # a bare string such as model=gpt2
    return parameters


def main(argv: list[str] | None = None) -> None:
    """``python -m resid.train --preset NAME [field=value ...]``, or the same under torchrun."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m resid.train", description=main.__doc__)
    parser.add_argument("--preset", default="tiny-layernorm", choices=sorted(PRESETS))
    parser.add_argument("overrides", nargs="*", metavar="FIELD=VALUE", help="e.g. lr=1e-2 steps=2000")
    args = parser.parse_args(argv)
    cfg = replace(PRESETS[args.preset], **parse_overrides(args.overrides))
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    result = train(cfg)
    if _distributed()[0] == 0:
        val = result.history[-1].get("val_loss", float("nan"))
        print(f"{cfg.key()}: final val loss {val:.4f} -> {result.path}")
    if _distributed()[1] > 1:
        torch.distributed.destroy_process_group()
