"""The GPU path: training on CUDA matches CPU training, and the circuit tools run on CUDA
tensors. Skipped where there is no GPU (the book's own machines); run on a GPU machine with
``pytest tests/test_cuda.py``."""

import pytest
import torch

from resid.model import Config, Transformer
from resid.tools import attribution, heads, patching
from resid.train import PRESETS, TrainConfig, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def test_training_on_cuda_matches_cpu(tmp_path, monkeypatch):
    cfg = TrainConfig(model=Config(n_ctx=32, d_model=32, n_layers=2, n_heads=2, d_mlp=64, norm="basisfree"),
                      steps=30, warmup_steps=5, eval_every=30, checkpoint_every=30, batch_size=8)  # fmt: skip
    losses = {}
    for device in ("cpu", "cuda"):
        monkeypatch.setenv("RESID_CACHE", str(tmp_path / device))
        result = train(cfg, progress=False, device=torch.device(device))
        losses[device] = [h["train_loss"] for h in result.history]
        assert next(result.model.parameters()).device.type == device
    assert losses["cuda"][0] == pytest.approx(losses["cpu"][0], abs=1e-4)
    assert losses["cuda"][-1] == pytest.approx(losses["cpu"][-1], rel=0.02)


def test_induction_preset_trains_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    result = train(PRESETS["induction-2l"], progress=False, device=torch.device("cuda"), stop_after=600)
    assert result.history[-1]["induction_score"] > 0.5


def test_circuit_tools_run_on_cuda_tensors():
    torch.manual_seed(0)
    cfg = Config(n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_mlp=64, norm="rmsnorm",
                 mlp="swiglu", positional="rotary", tie_embeddings=False)  # fmt: skip
    model = Transformer(cfg).cuda().eval()
    clean = torch.randint(0, 256, (3, 8), device="cuda")
    corrupt = torch.randint(0, 256, (3, 8), device="cuda")
    metric = patching.LogitDiff(
        torch.tensor([1, 2, 3], device="cuda"), torch.tensor([4, 5, 6], device="cuda")
    )
    logits, _, _ = patching.graph_forward(model, clean)
    torch.testing.assert_close(logits, model(clean)[:, -1])
    torch.testing.assert_close(
        patching.patch_heads(model, clean, corrupt, metric),
        patching.patch_heads_naive(model, clean, corrupt, metric).cpu(),
        rtol=1e-4,
        atol=1e-4,
    )
    scores = patching.edge_attribution_patching(model, clean, corrupt, metric)
    assert torch.isfinite(scores).all()
    kept, _ = patching.acdc(model, clean, corrupt, threshold=0.01)
    assert kept.shape == patching.Graph.of(model).allowed.shape
    _, check = attribution.direct_logit_attribution(model, clean, metric.answers, metric.foils)
    assert check["sum of contributions"] == pytest.approx(check["model logit"], rel=1e-4, abs=1e-5)
    _, completeness = attribution.input_attributions(model, clean[0], 7, 9, ig_steps=64)
    assert completeness["relative error"] < 0.02
    assert len(heads.head_scores(model, heads.repeated_tokens(2, 5, 256).cuda(), 5)) == 8
    assert len(heads.copy_scores(model, torch.arange(20, device="cuda"))) == 8
