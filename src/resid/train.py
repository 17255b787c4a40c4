"""Train the book's small models on CPU, cached by a hash of the full configuration.

A run writes a checkpoint every ``checkpoint_every`` steps (to a temp file, then renamed, so an
interrupted run never leaves a corrupt file) and resumes from it when called again. A finished
run is loaded, not retrained.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from .data import ByteTokenizer, corpus, random_batch, token_ids, train_val_split
from .loaders import cache_dir
from .model import Config, Transformer

OPTIMIZERS = ("adamw", "sgd")


@dataclass(frozen=True)
class TrainConfig:
    model: Config = field(default_factory=Config)
    corpus: str = "pydoc"
    optimizer: str = "adamw"
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
    eval_batches: int = 8
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainConfig.optimizer={self.optimizer!r}; choose one of {OPTIMIZERS}")
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("steps and batch_size must be positive, and lr > 0")

    def key(self) -> str:
        """A short hash of every field: the name of this run's cache entry."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# Named runs that load("trained:<name>") knows; chapters add their own configurations freely.
PRESETS: dict[str, TrainConfig] = {
    "tiny-layernorm": TrainConfig(steps=300),
    "tiny-basisfree": TrainConfig(model=Config(norm="basisfree"), steps=300),
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


def make_optimizer(model: Transformer, cfg: TrainConfig) -> torch.optim.Optimizer:
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": others, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)


@torch.no_grad()
def evaluate(model: Transformer, ids: torch.Tensor, cfg: TrainConfig) -> float:
    """Held-out loss on a fixed set of batches (the same ones at every evaluation)."""
    model.eval()
    losses = [
        model.loss(random_batch(ids, cfg.batch_size, cfg.model.n_ctx + 1, seed=10_000 + i)).item()
        for i in range(cfg.eval_batches)
    ]
    model.train()
    return sum(losses) / len(losses)


def corpus_ids(cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return train_val_split(token_ids(corpus(cfg.corpus), ByteTokenizer()))


def train(cfg: TrainConfig, progress: bool = True, stop_after: int | None = None) -> TrainResult:
    """Train (or resume, or just load) the run described by ``cfg``.

    ``stop_after`` ends this call after that many steps, checkpointed; the next call resumes.
    """
    if cfg.model.vocab_size != ByteTokenizer.vocab_size:
        raise ValueError("the trainer uses byte tokens: set Config(vocab_size=256)")
    path = cache_dir() / "runs" / f"{cfg.key()}.pt"
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model)
    optimizer = make_optimizer(model, cfg)
    history: list[dict] = []
    step = 0
    if path.exists():
        state = torch.load(path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history, step = state["history"], state["step"]
    if step < cfg.steps:
        train_ids, val_ids = corpus_ids(cfg)
        last = cfg.steps if stop_after is None else min(cfg.steps, step + stop_after)
        model.train()
        bar = tqdm(range(step, last), initial=step, total=cfg.steps, disable=not progress, desc=cfg.key()[:8])
        try:
            for step in bar:
                history.append(_train_step(model, optimizer, train_ids, cfg, step))
                done = step + 1
                if done % cfg.eval_every == 0 or done == cfg.steps:
                    history[-1]["val_loss"] = evaluate(model, val_ids, cfg)
                bar.set_postfix(loss=f"{history[-1]['train_loss']:.3f}")
                if done % cfg.checkpoint_every == 0 or done == last:
                    _save(path, model, optimizer, history, done, cfg)
        except KeyboardInterrupt:
            _save(path, model, optimizer, history, len(history), cfg)
            raise
    model.eval()
    model.tokenizer = ByteTokenizer()
    return TrainResult(model, history, cfg, path)


def _train_step(model, optimizer, ids, cfg: TrainConfig, step: int) -> dict:
    lr = lr_at(cfg, step)
    for group in optimizer.param_groups:
        group["lr"] = lr
    # The batch depends only on (seed, step), so a resumed run sees exactly the batches it would have.
    batch = random_batch(ids, cfg.batch_size, cfg.model.n_ctx + 1, seed=cfg.seed * 1_000_003 + step)
    loss = model.loss(batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    return {"step": step + 1, "lr": lr, "train_loss": loss.item()}


def _save(path: Path, model, optimizer, history: list[dict], step: int, cfg: TrainConfig) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "history": history,
        "step": step,
        "config": asdict(cfg),
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path)


def config_from_dict(d: dict) -> TrainConfig:
    model = Config(**d["model"])
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "model"}
    return replace(TrainConfig(model=model), **rest)


def load_trained(name: str) -> Transformer:
    """``trained:<preset>`` (trained now if not cached) or the path of a checkpoint."""
    if name.startswith("trained:"):
        preset = name.removeprefix("trained:")
        if preset not in PRESETS:
            from .loaders import UnknownModelError

            raise UnknownModelError(f"unknown trained preset {preset!r}; choose one of {sorted(PRESETS)}")
        return train(PRESETS[preset]).model
    state = torch.load(name, weights_only=False)
    model = Transformer(config_from_dict(state["config"]).model)
    model.load_state_dict(state["model"])
    model.tokenizer = ByteTokenizer()
    return model
