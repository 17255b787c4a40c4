"""A transformer with a named hook point on every residual read and write.

One module runs every model in the book. The models we train use it directly (with a choice
of normalisation and optional fixed rotations of the residual basis); the pretrained ones
(SmolLM2/Llama, GPT-2, BERT/MiniLM) are copied into it by ``loaders.py``, so that hooks,
patching and layer surgery are written once.

Hook names follow TransformerLens: ``blocks.{i}.hook_resid_pre``, ``blocks.{i}.attn.hook_pattern``,
``blocks.{i}.hook_mlp_out``, ... A hook function takes ``(activation, hook_point)`` and may
return a replacement activation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .basis import haar_rotation, read, write
from .cache import ActivationCache, act_name

NORMS = ("layernorm", "rmsnorm", "basisfree")
MLPS = ("gelu", "gelu_tanh", "swiglu", "geglu")
ROTATIONS = ("none", "shared", "independent")

HookFn = Callable[[Tensor, "HookPoint"], Tensor | None]


@dataclass(frozen=True)
class Config:
    vocab_size: int = 256
    n_ctx: int = 128
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0  # 0: one key/value head per query head; fewer: grouped-query attention
    d_head: int = 0  # 0: d_model // n_heads
    d_mlp: int = 512
    norm: str = "layernorm"  # layernorm | rmsnorm (per-channel gain) | basisfree (one scalar gain)
    norm_eps: float = 1e-5
    mlp: str = "gelu"  # gelu | gelu_tanh (GPT-2) | swiglu (Llama) | geglu (Gemma: tanh-GELU gate)
    positional: str = "learned"  # learned | rotary
    rope_theta: float = 10000.0
    causal: bool = True
    post_norm: bool = False  # BERT: normalise after each residual add instead of before each read
    embed_norm: bool = False  # BERT: normalise the embedding
    bias: bool = False
    tie_embeddings: bool = True
    lm_head: bool = True  # False for encoders: the output is the final residual
    rotation: str = "none"  # none | shared | independent: fixed rotations on residual reads/writes
    rotation_seed: int = 0
    attn_only: bool = False  # no MLPs: the two-layer induction model of the circuits chapters
    qkv_bias: bool = False  # Qwen2: biases on the query, key and value maps only
    qk_norm: bool = False  # Qwen3: each head's query and key normalised before the rotary map
    qk_norm_joint: bool = False  # OLMo 2: one query norm and one key norm across every head at once
    rotary_dim: int = 0  # 0: the whole head; fewer: GPT-NeoX/Pythia's partial rotary
    parallel: bool = False  # GPT-NeoX/Pythia: attention and MLP read the same residual
    sliding_window: int = 0  # Mistral: a query sees only the last `sliding_window` keys (0: all)
    layer_windows: tuple[int, ...] = ()  # Gemma: each layer's window (0: global); () = sliding_window
    local_rope_theta: float = 0.0  # Gemma 3: the rotary base of windowed layers (0: rope_theta)
    rope_scaling: tuple = ()  # ("linear", factor) or ("llama3", factor, low, high, original context)
    sandwich_norms: bool = False  # Gemma 2/3: a norm on each sublayer's output too, before the add
    pre_norms: bool = True  # False (OLMo 2): sublayers read the residual as it is (with sandwich_norms)
    embed_scale: float = 1.0  # Gemma: embeddings multiplied by sqrt(d_model)
    attn_scale: float = 0.0  # the attention scores' scale (0: 1 / sqrt(d_head))
    attn_softcap: float = 0.0  # Gemma 2: scores squashed to (-c, c) by c * tanh(score / c) (0: off)
    final_softcap: float = 0.0  # Gemma 2: the logits squashed likewise (0: off)
    unembed_bias: bool = False  # Phi: a bias on the unembedding

    def __post_init__(self) -> None:
        for field, allowed in (("norm", NORMS), ("mlp", MLPS), ("rotation", ROTATIONS)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"Config.{field}={getattr(self, field)!r}; choose one of {allowed}")
        if self.positional not in ("learned", "rotary"):
            raise ValueError(f"Config.positional={self.positional!r}; choose 'learned' or 'rotary'")
        if self.d_head == 0 and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.kv_heads}")
        if self.rotation != "none" and self.post_norm:
            raise ValueError("rotations need a pre-norm model (post_norm=False)")
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            raise ValueError(f"rotary_dim={self.rotary_dim} must be even and at most d_head={self.head_dim}")
        if self.parallel and (self.post_norm or self.attn_only):
            raise ValueError("parallel blocks need a pre-norm model with MLPs")
        if not self.pre_norms and not self.sandwich_norms:
            raise ValueError("pre_norms=False leaves a block without norms; it needs sandwich_norms=True")
        if self.qk_norm_joint and not self.qk_norm:
            raise ValueError("qk_norm_joint=True needs qk_norm=True")
        object.__setattr__(self, "layer_windows", tuple(self.layer_windows))  # JSON gives a list
        object.__setattr__(self, "rope_scaling", tuple(self.rope_scaling))
        if self.rope_scaling and self.rope_scaling[0] not in ("linear", "llama3"):
            raise ValueError(f"rope_scaling {self.rope_scaling[0]!r}; choose linear or llama3")
        if self.layer_windows and len(self.layer_windows) != self.n_layers:
            raise ValueError(
                f"layer_windows has {len(self.layer_windows)} entries for {self.n_layers} layers"
            )

    def window(self, layer: int) -> int:
        """How many keys a query of ``layer`` sees (0: all of them)."""
        return self.layer_windows[layer] if self.layer_windows else self.sliding_window

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads


class HookPoint(nn.Module):
    """An identity that names an activation, so it can be cached or replaced by a forward hook."""

    name: str = ""

    def forward(self, x: Tensor) -> Tensor:
        return x

    def has_hooks(self) -> bool:
        return bool(self._forward_hooks)


class Norm(nn.Module):
    def __init__(self, cfg: Config, width: int | None = None, kind: str | None = None):
        super().__init__()
        width = width or cfg.d_model  # the residual's, or a head's for QK-norm
        self.kind, self.eps = kind or cfg.norm, cfg.norm_eps
        # The basis-free norm has one scalar gain: a per-channel gain would pick out the basis.
        self.weight = nn.Parameter(torch.ones(1 if self.kind == "basisfree" else width))
        has_bias = self.kind == "layernorm" and cfg.bias
        self.bias = nn.Parameter(torch.zeros(width)) if has_bias else None
        self.hook_scale = HookPoint()  # [..., 1]: the divisor, sqrt(variance or mean square + eps)
        self.hook_normalized = HookPoint()  # before the gain and bias, as in TransformerLens

    def forward(self, x: Tensor) -> Tensor:
        if self.hook_scale.has_hooks() or self.hook_normalized.has_hooks():
            # spelled out, so that a hook can read or replace the scale or the normalised vector
            normalized = self.hook_normalized((self._centred(x) / self.hook_scale(self.scale(x))).to(x.dtype))
            out = normalized * self.weight
            return out if self.bias is None else out + self.bias
        if self.kind == "layernorm":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        wide = _wide(x)  # fp16/bf16 inputs normalise in fp32
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight

    def scale(self, x: Tensor) -> Tensor:
        """What the norm divides by at each position: ``[..., d_model] -> [..., 1]``, in fp32."""
        return torch.sqrt(self._centred(x).pow(2).mean(-1, keepdim=True) + self.eps)

    def linear(self, x: Tensor, scale: Tensor | float) -> Tensor:
        """The norm with its scale given rather than measured, which makes it linear in ``x``
        (the bias is left out). With ``scale`` frozen at a residual's own, the images of its
        components sum to the normalised residual minus the bias: the direct logit attribution's
        decomposition. ``scale=1`` leaves the gain (and LayerNorm's centring) alone."""
        return (self._centred(x) / scale).to(x.dtype) * self.weight

    def _centred(self, x: Tensor) -> Tensor:
        wide = _wide(x)
        return wide - wide.mean(-1, keepdim=True) if self.kind == "layernorm" else wide


def _wide(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rotary_tables(cfg: Config, n_positions: int) -> tuple[Tensor, Tensor]:
    """cos and sin of every position's rotary angles, ``[pos, rotary dim]`` each."""
    return _rotary_tables(
        cfg.rotary_dim or cfg.head_dim, cfg.rope_theta, tuple(cfg.rope_scaling), n_positions
    )


@functools.lru_cache(maxsize=4)
def _rotary_tables(dim: int, theta: float, scaling: tuple, n_positions: int) -> tuple[Tensor, Tensor]:
    # one table for every layer and model that asks for it (Gemma-3-270M's fifteen local layers
    # share one of 32k positions: 34 MB each); nothing writes into a table in place
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    if scaling:
        inv_freq = scaled_frequencies(inv_freq, *scaling)
    angles = torch.outer(torch.arange(n_positions).float(), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def scaled_frequencies(inv_freq: Tensor, kind: str, factor: float, *llama3: float) -> Tensor:
    """Rotary frequencies stretched for a longer context: all divided by ``factor`` ("linear"),
    or, as Llama 3.1 does, only the slow ones, the fast ones kept and those between blended."""
    if kind == "linear":
        return inv_freq / factor
    low, high, original = llama3  # wavelengths above original / low are slow, below original / high fast
    wavelength = 2 * math.pi / inv_freq
    blend = ((original / wavelength - low) / (high - low)).clamp(0, 1)  # 0: slow, 1: fast
    return (1 - blend) * inv_freq / factor + blend * inv_freq


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate query/key pairs ``[batch, pos, head, d_head]`` by their position's angle.

    Pairs are (i, i + d_head/2), the convention of Hugging Face's Llama weights.
    """
    dim = cos.shape[-1]
    if dim < x.shape[-1]:  # partial rotary: the first `dim` coordinates turn, the rest pass
        return torch.cat([apply_rotary(x[..., :dim], cos, sin), x[..., dim:]], dim=-1)
    half = dim // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated_half * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer: int = 0):
        super().__init__()
        self.cfg, self.window = cfg, cfg.window(layer)
        self.scale = cfg.attn_scale or 1 / math.sqrt(cfg.head_dim)
        if self.window and cfg.local_rope_theta and cfg.positional == "rotary":  # Gemma 3's local layers
            cos, sin = rotary_tables(
                replace(cfg, rope_theta=cfg.local_rope_theta, rope_scaling=()), cfg.n_ctx
            )
            self.register_buffer("local_rope_cos", cos, persistent=False)
            self.register_buffer("local_rope_sin", sin, persistent=False)
        d_q, d_kv = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.W_Q = nn.Linear(cfg.d_model, d_q, bias=cfg.bias or cfg.qkv_bias)
        self.W_K = nn.Linear(cfg.d_model, d_kv, bias=cfg.bias or cfg.qkv_bias)
        self.W_V = nn.Linear(cfg.d_model, d_kv, bias=cfg.bias or cfg.qkv_bias)
        self.W_O = nn.Linear(d_q, cfg.d_model, bias=cfg.bias)
        if cfg.qk_norm:  # RMSNorm inside each head (or across all heads), whatever normalises the residual
            joint = cfg.qk_norm_joint
            self.q_norm = Norm(cfg, cfg.head_dim * (cfg.n_heads if joint else 1), "rmsnorm")
            self.k_norm = Norm(cfg, cfg.head_dim * (cfg.kv_heads if joint else 1), "rmsnorm")
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_rot_q, self.hook_rot_k = HookPoint(), HookPoint()  # after QK-norm and the rotary map
        self.hook_pattern = HookPoint()  # [batch, head, query, key]
        self.hook_z = HookPoint()  # each head's output before W_O: [batch, pos, head, d_head]

    def forward(self, *args, **kwargs) -> Tensor:
        """``attend`` (same arguments), then ``W_O``: ``[batch, pos, d_model]``."""
        return self.W_O(self.attend(*args, **kwargs).flatten(2))  # [batch, pos, head * d_head] -> d_model

    def attend(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        mask: Tensor | None,
        key_input: Tensor | None = None,
        value_input: Tensor | None = None,
        prefix: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """Every head's output before ``W_O``: ``[batch, pos, head, d_head]``.

        Queries are read from ``x``, keys and values from ``key_input`` and ``value_input``
        (default: ``x``). Each is ``[batch, pos, d_model]``, read by every head, or ``[batch,
        pos, head, d_model]``, each head reading its own: what path patching and the edge
        methods need, so that they run this one implementation of attention.

        ``prefix`` holds the keys (as ``hook_rot_k`` holds them) and values of the positions
        before ``x``, ``[batch, start, kv_head, d_head]`` each: ``x`` is then the sequence from
        position ``start`` on (and ``rope`` its rows of the rotary tables), so that a patch at
        ``start`` reruns only the positions it can change.
        """
        cfg = self.cfg
        start = 0 if prefix is None else prefix[0].shape[1]
        if prefix is not None and x.dim() == 4:
            raise ValueError("a key/value prefix needs one input for every head")
        key_input = x if key_input is None else key_input
        value_input = x if value_input is None else value_input
        q = self.hook_q(self._project(self.W_Q, x, cfg.n_heads))
        k = self.hook_k(self._project(self.W_K, key_input, cfg.kv_heads))
        v = self.hook_v(self._project(self.W_V, value_input, cfg.kv_heads))
        if cfg.qk_norm_joint:  # the norm spans the heads: [batch, pos, head * d_head]
            q, k = self.q_norm(q.flatten(-2)).view_as(q), self.k_norm(k.flatten(-2)).view_as(k)
        elif cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None and hasattr(self, "local_rope_cos"):
            positions = slice(start, start + q.shape[1])
            rope = (self.local_rope_cos[positions].to(q.dtype), self.local_rope_sin[positions].to(q.dtype))
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        q, k = self.hook_rot_q(q), self.hook_rot_k(k)
        if prefix is not None:
            k, v = torch.cat([prefix[0], k], dim=1), torch.cat([prefix[1], v], dim=1)
            mask = causal_mask(q.shape[1], start, self.window, q.dtype, q.device)
        q, k, v = (a.transpose(1, 2) for a in (q, k, v))  # [batch, head, pos, d_head]
        if k.shape[1] < cfg.n_heads:  # grouped-query attention: each key/value head serves a group
            group = cfg.n_heads // k.shape[1]
            k = k.repeat_interleave(group, dim=1)
        if v.shape[1] < cfg.n_heads:
            v = v.repeat_interleave(cfg.n_heads // v.shape[1], dim=1)
        n_pos = q.shape[2]
        if prefix is None and self.window and n_pos > self.window:
            window = causal_mask(n_pos, 0, self.window, q.dtype, q.device)
            mask = window if mask is None else torch.minimum(mask, window)
        if self.hook_pattern.has_hooks() or cfg.attn_softcap:
            if mask is None:
                mask = additive_mask(n_pos, cfg.causal, None, q.dtype, q.device)
            scores = q @ k.transpose(-1, -2) * self.scale
            if cfg.attn_softcap:
                scores = cfg.attn_softcap * torch.tanh(scores / cfg.attn_softcap)
            z = self.hook_pattern((scores + mask).softmax(-1)) @ v
        else:  # the fused kernel is faster, but never materialises the pattern
            causal = mask is None and cfg.causal
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, scale=cfg.attn_scale or None
            )
        return self.hook_z(z.transpose(1, 2))

    def _project(self, linear: nn.Linear, x: Tensor, n: int) -> Tensor:
        """``x`` through the ``n`` heads of ``linear``: ``[batch, pos, n, d_head]``, or, for
        per-head inputs ``[batch, pos, head, d_model]``, each head through its own rows."""
        d_head = self.cfg.head_dim
        if x.dim() == 3:
            return linear(x).view(*x.shape[:2], n, d_head)
        per_head = linear.weight.view(n, d_head, -1).repeat_interleave(self.cfg.n_heads // n, 0)
        out = torch.einsum("bthd,hed->bthe", x, per_head)
        if linear.bias is not None:
            out = out + linear.bias.view(n, d_head).repeat_interleave(self.cfg.n_heads // n, 0)
        return out

    def ov_write(self, x: Tensor) -> Tensor:
        """What each head would write, before ``W_O``'s bias, if it attended only to ``x``
        (``[batch, pos, d_model]`` in the computation basis): its OV circuit applied to
        ``x``, ``[batch, pos, head, d_model]``."""
        v = self._project(self.W_V, x, self.cfg.kv_heads)  # [batch, pos, kv_head, d_head]
        return self.head_results(v.repeat_interleave(self.cfg.n_heads // v.shape[2], dim=2))

    def head_results(self, z: Tensor) -> Tensor:
        """What each head writes, before the output bias: ``z`` ``[..., head, d_head]`` ->
        ``[..., head, d_model]``; summed over heads (plus the bias) it is the layer's output."""
        per_head = self.W_O.weight.view(-1, self.cfg.n_heads, self.cfg.head_dim)  # [d_model, head, d_head]
        return torch.einsum("...he,dhe->...hd", z, per_head)


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.kind = cfg.mlp
        self.W_in = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)
        gated = cfg.mlp in ("swiglu", "geglu")
        self.W_gate = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias) if gated else None
        self.W_out = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)
        # TransformerLens's names: the pre-activation (a gated MLP's gate), the gated MLP's
        # linear branch, and the neurons' activations
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint() if gated else None
        self.hook_post = HookPoint()

    def activation(self, pre: Tensor) -> Tensor:
        """The elementwise nonlinearity, applied to the pre-activation (a gated MLP's gate)."""
        if self.kind == "swiglu":
            return F.silu(pre)
        return F.gelu(pre, approximate="tanh" if self.kind in ("gelu_tanh", "geglu") else "none")

    def forward(self, x: Tensor) -> Tensor:
        if self.W_gate is None:
            h = self.activation(self.hook_pre(self.W_in(x)))
        else:
            h = self.activation(self.hook_pre(self.W_gate(x))) * self.hook_pre_linear(self.W_in(x))
        return self.W_out(self.hook_post(h))


class Block(nn.Module):
    def __init__(self, cfg: Config, rotations: dict[str, Tensor | None], layer: int = 0):
        super().__init__()
        self.post_norm, self.parallel = cfg.post_norm, cfg.parallel

        def input_norm() -> nn.Module:  # OLMo 2 normalises sublayer outputs only
            return Norm(cfg) if cfg.pre_norms else nn.Identity()

        self.ln1, self.attn = input_norm(), Attention(cfg, layer)
        self.ln2, self.mlp = (None, None) if cfg.attn_only else (input_norm(), MLP(cfg))
        if cfg.sandwich_norms:  # Gemma: each sublayer's output is normalised before it is added
            self.ln1_post = Norm(cfg)
            self.ln2_post = None if cfg.attn_only else Norm(cfg)
        for name, matrix in rotations.items():
            self.register_buffer(name, matrix, persistent=False)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_in = HookPoint()  # what attention reads, in its computation basis
        self.hook_attn_out = HookPoint()  # what attention writes, in the residual basis
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_in = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def attention_by_head(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        mask: Tensor | None = None,
        key_input: Tensor | None = None,
        value_input: Tensor | None = None,
    ) -> Tensor:
        """The attention half of a pre-norm block, split by head: what each head writes into
        the residual, ``[batch, pos, head, d_model]`` (the output bias left out).

        ``x`` (and ``key_input``, ``value_input``, default ``x``) are residual streams,
        ``[batch, pos, d_model]`` or one per head ``[batch, pos, head, d_model]``; each goes
        through the block's own norm and rotation before the head reads it.
        """
        if self.post_norm or hasattr(self, "ln1_post"):
            raise ValueError(
                "the residual is not a sum of head writes here: a post-norm or sandwich-norm block "
                "normalises the attention's output as a whole"
            )
        streams = [x, key_input, value_input]
        q_in, k_in, v_in = (None if s is None else read(self.ln1(s), self.R_attn_in) for s in streams)
        z = self.attn.attend(q_in, rope, mask, k_in, v_in)
        return write(self.attn.head_results(z), self.R_attn_out)

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        mask: Tensor | None,
        prefix: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        x = self.hook_resid_pre(x)
        if self.post_norm:
            attn_out = self.hook_attn_out(self.attn(self.hook_attn_in(x), rope, mask))
            x = self.hook_resid_mid(self.ln1(x + attn_out))
            if self.mlp is None:
                return self.hook_resid_post(x)
            mlp_out = self.hook_mlp_out(self.mlp(self.hook_mlp_in(x)))
            return self.hook_resid_post(self.ln2(x + mlp_out))
        attn_in = self.hook_attn_in(read(self.ln1(x), self.R_attn_in))
        attn_out = write(self.attn(attn_in, rope, mask, prefix=prefix), self.R_attn_out)
        attn_out = self.hook_attn_out(self.ln1_post(attn_out) if hasattr(self, "ln1_post") else attn_out)
        if self.parallel:  # the MLP reads the residual the attention read, not its sum with it
            mlp_in = self.hook_mlp_in(read(self.ln2(x), self.R_mlp_in))
            mlp_out = self.hook_mlp_out(write(self.mlp(mlp_in), self.R_mlp_out))
            return self.hook_resid_post(x + attn_out + mlp_out)
        x = self.hook_resid_mid(x + attn_out)
        if self.mlp is None:
            return self.hook_resid_post(x)
        mlp_in = self.hook_mlp_in(read(self.ln2(x), self.R_mlp_in))
        mlp_out = write(self.mlp(mlp_in), self.R_mlp_out)
        mlp_out = self.hook_mlp_out(self.ln2_post(mlp_out) if hasattr(self, "ln2_post") else mlp_out)
        return self.hook_resid_post(x + mlp_out)


def additive_mask(
    n: int, causal: bool, attention_mask: Tensor | None, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """``[batch or 1, 1, query, key]``: 0 where attention may look, a large negative elsewhere."""
    blocked = torch.zeros(1, 1, n, n, dtype=torch.bool, device=device)
    if causal:
        blocked = blocked | torch.ones_like(blocked).triu(1)
    if attention_mask is not None:
        blocked = blocked | (attention_mask[:, None, None, :] == 0)
    # A large finite number rather than -inf, so a fully padded row gives zeros, not NaN.
    return torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)


def causal_mask(n_query: int, start: int, window: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``[1, 1, query, key]`` for queries at positions ``start ..`` and keys from 0: a query at i
    sees keys j <= i, and with a ``window`` only those with i - window < j."""
    query = torch.arange(start, start + n_query, device=device)[:, None]
    key = torch.arange(start + n_query, device=device)[None, :]
    blocked = key > query
    if window:
        blocked = blocked | (query - key >= window)
    mask = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)
    return mask[None, None]


BLOCK_ROTATIONS = ("R_attn_in", "R_attn_out", "R_mlp_in", "R_mlp_out")


class Transformer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.tokenizer = None  # set by the loaders; see tokenizers.py
        rotations = self._make_rotations()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.positional == "learned" else None
        self.embed_ln = Norm(cfg) if cfg.embed_norm else None
        self.register_buffer("R_embed", rotations.pop(), persistent=False)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(
            Block(cfg, {name: rotations.pop() for name in BLOCK_ROTATIONS}, i) for i in range(cfg.n_layers)
        )
        self.ln_final = None if cfg.post_norm else Norm(cfg)
        self.register_buffer("R_unembed", rotations.pop(), persistent=False)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias) if cfg.lm_head else None
        if cfg.lm_head and cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        if cfg.positional == "rotary":
            cos, sin = rotary_tables(cfg, cfg.n_ctx)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name

    def _make_rotations(self) -> list[Tensor | None]:
        """One matrix per residual read/write, in the order ``__init__`` pops them."""
        n = 2 + 4 * self.cfg.n_layers
        if self.cfg.rotation == "none":
            return [None] * n
        if self.cfg.rotation == "shared":
            shared = haar_rotation(self.cfg.d_model, self.cfg.rotation_seed)
            return [shared] * n
        return [haar_rotation(self.cfg.d_model, self.cfg.rotation_seed + i) for i in range(n)]

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, Block):  # scaled init of the residual writes, as in GPT-2
            for linear in (module.attn.W_O, *([] if module.mlp is None else [module.mlp.W_out])):
                nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * self.cfg.n_layers))

    # --- the forward pass, in pieces that layer surgery can reorder ---

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """The residual stream before the first block: ``[batch, pos] -> [batch, pos, d_model]``."""
        if tokens.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"{tokens.shape[1]} positions exceed the model's context of {self.cfg.n_ctx}")
        x = self.embed(tokens)
        if self.cfg.embed_scale != 1.0:
            x = x * torch.tensor(self.cfg.embed_scale, dtype=x.dtype)  # rounded as Gemma rounds it
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(tokens.shape[1], device=tokens.device))
        if self.embed_ln is not None:
            x = self.embed_ln(x)
        return self.hook_embed(write(x, self.R_embed))

    def context(self, n_positions: int, attention_mask: Tensor | None = None) -> tuple:
        """What every block needs besides the residual: rotary tables and the additive mask.

        ``attention_mask`` is ``[batch, pos]`` with 1 for real tokens and 0 for padding. Without
        padding the mask is None, and attention uses the fused causal kernel.
        """
        dtype, device = self.embed.weight.dtype, self.embed.weight.device
        mask = None
        if attention_mask is not None:
            mask = additive_mask(n_positions, self.cfg.causal, attention_mask, dtype, device)
        rope = None
        if self.cfg.positional == "rotary":
            rope = (self.rope_cos[:n_positions].to(dtype), self.rope_sin[:n_positions].to(dtype))
        return rope, mask

    def to_logits(self, x: Tensor, vocabulary: Tensor | None = None) -> Tensor:
        """Final norm and unembedding (for an encoder without an LM head: the final residual);
        with ``vocabulary`` (token ids) only those tokens' logits, ``[..., len(vocabulary)]``."""
        if self.ln_final is not None:
            x = self.ln_final(x)
        x = read(x, self.R_unembed)
        if self.unembed is None:
            return x
        if vocabulary is None:
            logits = self.unembed(x)
        else:
            bias = None if self.unembed.bias is None else self.unembed.bias[vocabulary]
            logits = F.linear(x, self.unembed.weight[vocabulary], bias)
        if self.cfg.final_softcap:
            logits = self.cfg.final_softcap * torch.tanh(logits / self.cfg.final_softcap)
        return logits

    def direction_logits(self, x: Tensor, token_ids: Tensor | None = None) -> Tensor:
        """The logits a write ``x`` into the final residual adds, through the final norm's gain
        (and LayerNorm's centring) but not its scale, which depends on the whole residual:
        the linear read-out by which a head's or a neuron's output direction promotes tokens
        (before any soft-capping of the logits, which is not linear, and without the
        unembedding's bias, which no write adds). ``token_ids``: only those tokens' logits,
        ``[..., len(token_ids)]``, the unembedding's rows chosen before the product rather than
        the whole vocabulary's logits sliced after it: the same numbers for a fraction of the
        work where the vocabulary is large."""
        unembed = self.unembed.weight if token_ids is None else self.unembed.weight[token_ids]
        return F.linear(self._direction_read(x), unembed)

    def direction_logit_spread(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean and standard deviation over the whole vocabulary of ``direction_logits(x)``,
        ``([...], [...])`` in fp32, without computing those logits: a write's logits are linear
        in it, so their mean is its read-out against the unembedding's mean row and their
        variance its quadratic form with the rows' covariance (``Tensor.std``'s unbiased one),
        both formed once per call in float64. The covariance costs what the logits of d_model
        writes cost, and each write then ``d_model^2`` instead of ``vocab d_model``: pass many
        writes at once (every neuron of every layer: 25x faster than their logits in SmolLM2)."""
        rows = self.unembed.weight.double()  # [vocab, d_model]
        mean_row = rows.mean(0)
        centred = rows - mean_row
        covariance = centred.T @ centred / (len(rows) - 1)  # [d_model, d_model]
        h = self._direction_read(x).double()  # [..., d_model]
        variance = ((h @ covariance) * h).sum(-1).clamp_min(0)
        return (h @ mean_row).float(), variance.sqrt().float()

    def _direction_read(self, x: Tensor) -> Tensor:
        # the write as the unembedding reads it: the final norm's gain, not its scale
        if self.ln_final is not None:
            x = self.ln_final.linear(x, 1.0)
        return read(x, self.R_unembed)

    # --- per-head weights in the residual basis, shaped as TransformerLens shapes them ---

    def _heads_of(self, which: str, layer: int) -> Tensor:
        """Block ``layer``'s ``which`` (W_Q, W_K, W_V: ``[head, d_model, d_head]``, key and value
        heads repeated for grouped-query attention; W_O: ``[head, d_head, d_model]``), acting on
        (or writing) the residual stream with the block's rotations folded in: ``q[h] = ln1(x)
        @ W_Q[h] (+ bias)``, and the layer's output is ``sum_h z[h] @ W_O[h] (+ bias)``."""
        cfg, block = self.cfg, self.blocks[layer]
        linear = getattr(block.attn, which)
        if which == "W_O":
            per_head = linear.weight.T.reshape(cfg.n_heads, cfg.head_dim, cfg.d_model)
            return per_head if block.R_attn_out is None else per_head @ block.R_attn_out.T
        n = linear.out_features // cfg.head_dim
        # [n, d_head, d_model] -> [n, d_model, d_head] -> one copy per query head
        per_head = linear.weight.view(n, cfg.head_dim, cfg.d_model).transpose(1, 2)
        per_head = per_head.repeat_interleave(cfg.n_heads // n, 0)
        return per_head if block.R_attn_in is None else block.R_attn_in @ per_head

    def _by_head(self, which: str) -> Tensor:
        """``_heads_of`` stacked over layers: ``[layer, head, ...]``, TransformerLens's layout."""
        return torch.stack([self._heads_of(which, layer) for layer in range(self.cfg.n_layers)])

    @property
    def W_Q(self) -> Tensor:
        return self._by_head("W_Q")

    @property
    def W_K(self) -> Tensor:
        return self._by_head("W_K")

    @property
    def W_V(self) -> Tensor:
        return self._by_head("W_V")

    @property
    def W_O(self) -> Tensor:
        return self._by_head("W_O")

    def OV(self, layer: int, head: int) -> Tensor:
        """Head ``layer, head``'s OV circuit, ``[d_model, d_model]``: a normalised residual vector
        it attends to, times this, is what it writes (biases left out)."""
        return self._heads_of("W_V", layer)[head] @ self._heads_of("W_O", layer)[head]

    def QK(self, layer: int, head: int) -> Tensor:
        """Head ``layer, head``'s QK circuit, ``[d_model, d_model]``: the attention score of a
        normalised query vector for a normalised key vector is ``q @ QK @ k`` (before scaling,
        without biases, QK-norm or the rotary map, which make it depend on positions)."""
        return self._heads_of("W_Q", layer)[head] @ self._heads_of("W_K", layer)[head].T

    def forward(
        self, tokens: Tensor, attention_mask: Tensor | None = None, logits_to_keep: int = 0
    ) -> Tensor:
        """Logits ``[batch, pos, vocab]``. ``logits_to_keep`` (transformers' name): the last
        that many positions' only (0: every position), ``[batch, logits_to_keep, vocab]``. The
        final norm and the unembedding then run on those positions alone: for a tool that reads
        the last position, with a large vocabulary, that is most of the pass (Gemma-3-270M's
        262,144-token unembedding costs more than its 18 blocks)."""
        x = self.embed_tokens(tokens)
        rope, mask = self.context(tokens.shape[1], attention_mask)
        for block in self.blocks:
            x = block(x, rope, mask)
        return self.to_logits(x[:, -logits_to_keep:] if logits_to_keep else x)

    def finish_from(
        self, x: Tensor, layer: int, start: int = 0, prefix: dict[int, tuple[Tensor, Tensor]] | None = None
    ) -> Tensor:
        """The last position's logits ``[batch, vocab]`` of a forward pass finished from the
        residual stream before block ``layer``. ``x`` holds positions ``start ..``; each block
        reads the earlier positions' keys and values from ``prefix`` (``key_value_prefix``), so
        that a change at ``start`` reruns only the positions it can change."""
        if start and prefix is None:
            raise ValueError(f"positions before {start} need their keys and values: pass a prefix")
        rope, mask = self.context(start + x.shape[1])
        if start:  # the prefix's causal mask is built per block, from its length
            rope, mask = (None if rope is None else (rope[0][start:], rope[1][start:])), None
        for i, block in enumerate(self.blocks[layer:], layer):
            x = block(x, rope, mask, prefix=prefix[i] if start else None)
        return self.to_logits(x[:, -1])

    def loss(self, tokens: Tensor) -> Tensor:
        """Mean next-token cross-entropy in nats."""
        return next_token_loss(self(tokens[:, :-1]), tokens)

    # --- hooks and caches ---

    def hook_points(self) -> dict[str, HookPoint]:
        return {m.name: m for m in self.modules() if isinstance(m, HookPoint)}

    def resid_names(self) -> list[str]:
        """The residual stream at every layer boundary: the embedding, then after each block.

        The last one is the final block's raw output, before the final norm.
        """
        return [act_name("resid_pre", 0)] + [act_name("resid_post", i) for i in range(self.cfg.n_layers)]

    def residual_dims(self, name: str) -> tuple[int, ...]:
        """The dimensions of parameter ``name`` that index the residual stream: the input side of
        the matrices that read it, the output side (and bias) of those that write it, the
        embeddings' width and a norm's per-coordinate gain and bias. An optimiser that works in
        another basis of the stream rotates exactly these (``RotatedAdamW(basis=...)``)."""
        module_name, _, kind = name.rpartition(".")
        leaf = module_name.rpartition(".")[2]
        if leaf in ("embed", "pos_embed"):
            return (1,)
        if leaf in ("W_Q", "W_K", "W_V", "W_in", "W_gate", "unembed"):
            return (1,) if kind == "weight" else ()
        if leaf in ("W_O", "W_out"):
            return (0,)
        module, width = self.get_submodule(module_name), self.get_parameter(name).numel()
        if isinstance(module, Norm) and width == self.cfg.d_model and ".attn." not in name:
            return (0,)
        return ()

    @torch.no_grad()
    def residual_stream(self, tokens: Tensor, batch_size: int = 8) -> Tensor:
        """The residual stream at every layer boundary: ``[n_layers + 1, n_tokens, d_model]``.

        ``tokens`` is ``[n_sequences, pos]``; sequences are run ``batch_size`` at a time and
        their positions flattened in order.
        """
        chunks = []
        for start in range(0, len(tokens), batch_size):
            batch = tokens[start : start + batch_size]
            x = self.embed_tokens(batch)
            rope, mask = self.context(batch.shape[1])
            boundaries = [x]
            for block in self.blocks:  # the unembedding is skipped: it is most of a small LM's cost
                x = block(x, rope, mask)
                boundaries.append(x)
            chunks.append(torch.stack(boundaries).flatten(1, 2))
        return torch.cat(chunks, dim=1)

    @contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[str, HookFn]]) -> Iterator[None]:
        """Attach ``(name, fn)`` hooks for the duration of a ``with`` block."""
        points, handles = self.hook_points(), []
        try:
            for name, fn in fwd_hooks:
                if name not in points:
                    raise KeyError(f"no hook point {name!r}; see model.hook_points()")
                handles.append(points[name].register_forward_hook(_adapt(fn)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def run_with_hooks(self, tokens: Tensor, fwd_hooks: Iterable[tuple[str, HookFn]], **kwargs) -> Tensor:
        with self.hooks(fwd_hooks):
            return self(tokens, **kwargs)

    def run_with_cache(
        self, tokens: Tensor, names: Iterable[str] | Callable[[str], bool] | None = None, **kwargs
    ) -> tuple[Tensor, ActivationCache]:
        """Run the model and return ``(output, cache)``: an ``ActivationCache``, a dict
        ``{hook name: activation}`` with TransformerLens's operations on it (``cache.py``).

        ``names`` selects what to keep (a list, or a predicate on the name); by default, everything.
        """

        if names is None:
            wanted = set(self.hook_points())
        elif callable(names):
            wanted = {n for n in self.hook_points() if names(n)}
        else:
            wanted = set(names)
        cache: dict[str, Tensor] = {}

        def store(activation: Tensor, hook: HookPoint) -> None:
            cache[hook.name] = activation.detach()

        output = self.run_with_hooks(tokens, [(name, store) for name in wanted], **kwargs)
        return output, ActivationCache(cache, self)


def key_value_prefix(
    cache: Mapping[str, Tensor], layers: Iterable[int], start: int, rows: Tensor | None = None
) -> dict[int, tuple[Tensor, Tensor]]:
    """Each block's keys and values of the positions before ``start`` (``hook_rot_k`` and
    ``hook_v`` in ``cache``), for the batch ``rows`` (default: all), as ``finish_from`` reads them."""
    pick = (lambda a: a[:, :start]) if rows is None else (lambda a: a[rows, :start])
    return {i: (pick(cache[act_name("rot_k", i)]), pick(cache[act_name("v", i)])) for i in layers}


def next_token_loss(logits: Tensor, tokens: Tensor) -> Tensor:
    """Cross-entropy of ``logits`` (for ``tokens[:, :-1]``) against ``tokens[:, 1:]``, in float32 or,
    for float64 logits, in float64 (so that a float64 model's loss shows float64 differences)."""
    flat = logits.reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat.to(torch.promote_types(flat.dtype, torch.float32)), tokens[:, 1:].reshape(-1))


def _adapt(fn: HookFn) -> Callable:
    def forward_hook(module: nn.Module, inputs: tuple, output: Tensor) -> Tensor | None:
        return fn(output, module)

    return forward_hook


# --- changes of residual basis (Elhage et al. 2023; QuaRot) ---

READ_WEIGHTS = ("attn.W_Q", "attn.W_K", "attn.W_V", "mlp.W_in", "mlp.W_gate")
WRITE_WEIGHTS = ("attn.W_O", "mlp.W_out")


def _full_state(model: Transformer) -> dict[str, Tensor]:
    """The state dict with the unembedding spelled out even when it is tied to the embedding."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if model.unembed is not None:
        state["unembed.weight"] = model.unembed.weight.detach().clone()
    return state


def _rebuild(model: Transformer, cfg: Config, state: dict[str, Tensor]) -> Transformer:
    new = Transformer(cfg).to(model.embed.weight.dtype)
    new.load_state_dict(state)
    new.tokenizer = model.tokenizer
    return new.train(model.training)


def fold_norm_gains(model: Transformer) -> Transformer:
    """A copy with every norm's per-channel gain multiplied into the matrices that read it.

    The norms become basis-free (one scalar gain of 1) and the function is unchanged, which is
    what makes the residual stream rotatable (the first step of QuaRot and SpinQuant). A
    LayerNorm's mean subtraction is removed too: every write to the residual is centred
    instead, so the stream always has zero mean and the norm reduces to an RMS norm.
    """
    cfg = model.cfg
    if cfg.norm == "basisfree" or cfg.post_norm or cfg.rotation != "none" or cfg.sandwich_norms:
        raise ValueError(
            "fold_norm_gains needs a pre-norm LayerNorm or RMSNorm model without rotations or sublayer "
            "output norms (whose gains act on the residual's own coordinates)"
        )
    if cfg.norm == "layernorm" and cfg.bias:
        raise ValueError("folding a LayerNorm with biases is not supported")
    state = _full_state(model)
    if cfg.norm == "layernorm":
        for key in ("embed.weight", "pos_embed.weight"):  # rows are residual vectors
            if key in state:
                state[key] = state[key] - state[key].mean(-1, keepdim=True)
        for i in range(cfg.n_layers):
            for writer in WRITE_WEIGHTS:  # [d_model, in]: centre each output column
                weight = state[f"blocks.{i}.{writer}.weight"]
                state[f"blocks.{i}.{writer}.weight"] = weight - weight.mean(0, keepdim=True)
    for i in range(cfg.n_layers):
        for norm, readers in (("ln1", READ_WEIGHTS[:3]), ("ln2", READ_WEIGHTS[3:])):
            gain = state.pop(f"blocks.{i}.{norm}.weight")
            state[f"blocks.{i}.{norm}.weight"] = torch.ones(1, dtype=gain.dtype)
            for reader in readers:
                if f"blocks.{i}.{reader}.weight" in state:
                    state[f"blocks.{i}.{reader}.weight"] = state[f"blocks.{i}.{reader}.weight"] * gain
    gain = state.pop("ln_final.weight")
    state["ln_final.weight"] = torch.ones(1, dtype=gain.dtype)
    if model.unembed is not None:
        state["unembed.weight"] = state["unembed.weight"] * gain
    return _rebuild(model, replace(cfg, norm="basisfree", tie_embeddings=False), state)


def rotate_residual(model: Transformer, rotation: Tensor, strict: bool = True) -> Transformer:
    """A copy that computes the same function with its residual stream in the basis ``x @ rotation``.

    Every matrix that reads the residual is multiplied by ``rotation`` and every one that writes
    it by its transpose. Only exact for basis-free norms; ``strict=False`` rotates the weights
    of any model anyway, to show what breaks.
    """
    cfg = model.cfg
    if strict and (cfg.norm != "basisfree" or cfg.post_norm or cfg.rotation != "none"):
        raise ValueError(
            f"a {cfg.norm} model is not rotation-invariant; fold its norms first (fold_norm_gains), "
            "or pass strict=False"
        )
    R = rotation.to(model.embed.weight.dtype)
    state = _full_state(model)
    for key in ("embed.weight", "pos_embed.weight", "unembed.weight"):
        if key in state:
            state[key] = state[key] @ R
    for i in range(cfg.n_layers):
        for reader in READ_WEIGHTS:
            if f"blocks.{i}.{reader}.weight" in state:
                state[f"blocks.{i}.{reader}.weight"] = state[f"blocks.{i}.{reader}.weight"] @ R
        for writer in WRITE_WEIGHTS:
            state[f"blocks.{i}.{writer}.weight"] = R.T @ state[f"blocks.{i}.{writer}.weight"]
            if f"blocks.{i}.{writer}.bias" in state:
                state[f"blocks.{i}.{writer}.bias"] = state[f"blocks.{i}.{writer}.bias"] @ R
    return _rebuild(model, replace(cfg, tie_embeddings=False), state)
