"""DAS on a synthetic model whose variable lives in one rotated direction: DAS finds it, the best
single coordinate and a random direction do not; and the interchange itself."""

import pytest
import torch
from test_circuits import random_model
from test_lrp import FAMILIES

from resid import stats
from resid.tools import das

D = 16


def planted(n: int = 256, seed: int = 0):
    """h = Q z with z[0] = +-1 the variable and z[1:] Gaussian noise; the model's two logits are
    +-(Q^T h)[0]. Base pairs hold one value, sources the other."""
    g = torch.Generator().manual_seed(seed)
    q = stats.haar_rotation(D, seed=7)

    def hidden(sign: float) -> torch.Tensor:
        z = torch.randn(n, D, generator=g)
        z[:, 0] = sign
        return z @ q.T

    value = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0)
    base = torch.where(value[:, None] > 0, hidden(1.0), hidden(-1.0))
    source = torch.where(value[:, None] > 0, hidden(-1.0), hidden(1.0))
    label = (value > 0).long()  # the source's class: 1 where the source's variable is -1
    other = 1 - label

    def run_from(h: torch.Tensor, rows) -> torch.Tensor:
        read = h @ q[:, 0]
        return torch.stack([read, -read], dim=-1)

    return base, source, label, other, run_from, q


def test_interchange_takes_the_subspace_from_the_source_and_keeps_the_rest():
    base, source = torch.randn(4, D), torch.randn(4, D)
    torch.testing.assert_close(das.interchange(base, source, torch.eye(D)), source)
    some = das.interchange(base, source, das.coordinate_basis(D, [2, 5]))
    torch.testing.assert_close(some[:, [2, 5]], source[:, [2, 5]])
    keep = [i for i in range(D) if i not in (2, 5)]
    torch.testing.assert_close(some[:, keep], base[:, keep])
    basis = das.random_basis(D, 3)
    torch.testing.assert_close(basis.T @ basis, torch.eye(3), atol=1e-5, rtol=0)


def test_das_recovers_a_planted_rotated_variable_where_coordinates_do_not():
    base, source, label, other, run_from, q = planted()
    held = planted(seed=1)
    basis, losses = das.train_subspace(run_from, base, source, label, k=1, steps=150, lr=0.05, seed=0)
    assert losses[-1] < losses[0]
    assert abs(float(basis[:, 0] @ q[:, 0])) > 0.99  # the planted direction, up to sign
    iia = das.interchange_accuracy(held[4], *held[:2], basis, *held[2:4]).float().mean()
    assert iia > 0.95
    effects = das.coordinate_effects(run_from, base, source, label, other)
    best = das.coordinate_basis(D, effects.topk(1).indices)
    coordinate_iia = das.interchange_accuracy(held[4], *held[:2], best, *held[2:4]).float().mean()
    random_iia = (
        das.interchange_accuracy(held[4], *held[:2], das.random_basis(D, 1), *held[2:4]).float().mean()
    )
    assert coordinate_iia < 0.75 and random_iia < 0.75, (coordinate_iia, random_iia)
    full = das.interchange_accuracy(held[4], *held[:2], torch.eye(D), *held[2:4]).float().mean()
    assert full == 1.0  # the whole activation swapped: the source's answer


@pytest.mark.parametrize("position", [-1, 3])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_residual_site_runs_the_model_on_from_its_boundary(family, position):
    """Only the site and the positions after it rerun, the earlier ones' keys and values read
    from the clean run: the same logits as the whole model with the residual patched there."""
    model = random_model(FAMILIES[family])
    base_tokens = torch.randint(0, 256, (3, 8), generator=torch.Generator().manual_seed(0))
    source_tokens = torch.randint(0, 256, (3, 8), generator=torch.Generator().manual_seed(1))
    for boundary in (0, 1, 2):
        base, run_from = das.resid_site(model, base_tokens, boundary, position)
        source, _ = das.resid_site(model, source_tokens, boundary, position)
        with torch.no_grad():
            torch.testing.assert_close(run_from(base, None), model(base_tokens)[:, -1])
            torch.testing.assert_close(
                run_from(base[[2, 0]], torch.tensor([2, 0])), model(base_tokens)[[2, 0], -1]
            )
        name = model.resid_names()[boundary]

        def patch(x, hook, source=source):
            x = x.clone()
            x[:, position] = source
            return x

        with torch.no_grad():
            patched = model.run_with_hooks(base_tokens, [(name, patch)])[:, -1]
            swapped = run_from(
                das.interchange(base, source, torch.eye(base.shape[-1], dtype=base.dtype)), None
            )
        torch.testing.assert_close(swapped, patched)
