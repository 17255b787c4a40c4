"""TransformerLens as the reference: for each architecture, a tiny random `transformers` model
is wrapped by TransformerLens's bridge and copied into resid, and every activation the two
name alike must agree. Offline: the bridge is handed the loaded model and a tokenizer."""

import os
from pathlib import Path

import pytest
import torch
from test_loaders import tiny_hf, tiny_relative

from resid.model.loaders import from_hf

# Hook names whose meaning differs on purpose, with the reason; every other shared name must match.
DIFFERENT_ON_PURPOSE = {  # for models with learned positions
    "hook_embed": "resid's embedding hook holds token plus position embeddings (the residual "
    "stream before block 0); TransformerLens's holds the token embedding alone",
}
TOKENS = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from resid.model.loaders import cache_dir, load

    load("smollm2-135m")  # converts once into the test cache; its tokenizer is all the bridge needs
    return AutoTokenizer.from_pretrained(Path(cache_dir()) / "models" / "smollm2-135m")


def bridge_cache(hf, tokenizer) -> dict:
    from transformer_lens.model_bridge import TransformerBridge

    os.environ["HF_HUB_OFFLINE"] = "1"
    hf.config.architectures = [
        type(hf).__name__
    ]  # how the bridge picks its adapter; unset when built from a config
    bridge = TransformerBridge.boot_transformers("tiny", hf_model=hf, device="cpu", tokenizer=tokenizer)
    with torch.no_grad():
        _, cache = bridge.run_with_cache(TOKENS)
    return dict(cache.items())


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    [
        "gpt2",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "olmo",
        "olmo2",
        "phi",
        "phi3",
        "pythia",
        "gemma2",
        "gemma3",
    ],
)
def test_activations_match_transformer_lens(kind, tokenizer):
    hf = tiny_hf(kind) if kind in ("gpt2", "llama") else tiny_relative(kind)
    ours = from_hf(hf).eval()
    with torch.no_grad():
        logits, cache = ours.run_with_cache(TOKENS)
        torch.testing.assert_close(logits, hf(TOKENS).logits, rtol=1e-4, atol=1e-4)
    theirs = bridge_cache(hf, tokenizer)
    different = set(DIFFERENT_ON_PURPOSE) if ours.pos_embed is not None else set()
    shared = sorted(set(cache) & set(theirs) - different)
    per_block = {name.split(".", 2)[2] for name in shared if name.startswith("blocks.0.")}
    # the names interpretability code reads most must be among those compared
    required = {
        "hook_resid_pre",
        "hook_resid_post",
        "attn.hook_pattern",
        "attn.hook_z",
        "hook_mlp_out",
        "mlp.hook_post",
    } | ({"ln1.hook_scale"} if ours.cfg.pre_norms else set())  # OLMo 2 has no ln1
    assert required <= per_block, per_block  # fmt: skip
    mismatched = []
    for name in shared:
        a, b = cache[name], theirs[name]
        if ("q_norm." in name or "k_norm." in name) and a.dim() == 4:
            a = a.transpose(
                1, 2
            )  # TransformerLens hooks QK-norm as [batch, head, pos, d_head]; resid as hook_q
        if a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-4):
            mismatched.append(f"{name}: {tuple(a.shape)} vs {tuple(b.shape)}")
    assert not mismatched, mismatched
