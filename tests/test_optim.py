import pytest
import torch

from resid.model import Config
from resid.stats import haar_rotation
from resid.train import TrainConfig, make_optimizer
from resid.train.optim import RotatedAdamW, ScalarAdamW


def quadratic(seed: int = 0, dtype: torch.dtype = torch.float32):
    """A convex quadratic 0.5 x^T A x - b^T x over a matrix and a vector parameter."""
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(6, 6, generator=g, dtype=dtype)
    a = m @ m.T + 0.5 * torch.eye(6, dtype=dtype)
    b = torch.randn(6, 4, generator=g, dtype=dtype)
    params = [
        torch.nn.Parameter(torch.zeros(6, 4, dtype=dtype)),
        torch.nn.Parameter(torch.zeros(5, dtype=dtype)),
    ]

    def loss():
        x, v = params
        return 0.5 * (x * (a @ x)).sum() - (b * x).sum() + (v - 1).pow(2).sum()

    return params, loss


def run(optimizer, params, loss, steps: int) -> list[float]:
    values = []
    for _ in range(steps):
        optimizer.zero_grad()
        value = loss()
        value.backward()
        optimizer.step()
        values.append(value.item())
    return values


def test_rotated_adam_with_identity_rotations_is_adamw_step_for_step():
    # float64, so that the identity matmuls' rounding stays far below the tolerance
    params_a, loss_a = quadratic(dtype=torch.float64)
    params_b, loss_b = quadratic(dtype=torch.float64)
    kwargs = {"lr": 0.05, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    ours = run(RotatedAdamW(params_a, identity=True, **kwargs), params_a, loss_a, 25)
    reference = run(torch.optim.AdamW(params_b, **kwargs), params_b, loss_b, 25)
    assert ours == pytest.approx(reference, rel=1e-12, abs=1e-12)
    for a, b in zip(params_a, params_b, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_rotated_adam_differs_from_adam_but_still_descends():
    params_a, loss_a = quadratic()
    params_b, loss_b = quadratic()
    rotated = run(RotatedAdamW(params_a, lr=0.05, weight_decay=0.0), params_a, loss_a, 200)
    plain = run(torch.optim.AdamW(params_b, lr=0.05, weight_decay=0.0), params_b, loss_b, 200)
    assert rotated[-1] < rotated[0] - 1 and rotated[-1] == pytest.approx(plain[-1], abs=0.05)
    assert not torch.allclose(params_a[0], params_b[0], atol=1e-6) or rotated[5] != plain[5]


def test_rotated_adam_is_equivariant_to_its_rotation():
    # Adam in basis P is plain Adam on the problem rotated by P: the update of a matrix whose
    # gradient is P e_i e_j^T Q^T is confined to that single rotated direction.
    # float64: Adam's first step is sign descent, so float32 rounding noise in the zero
    # coordinates (about 1e-7, above eps) would be blown up to full-size steps.
    p = torch.nn.Parameter(torch.zeros(4, 3, dtype=torch.float64))
    opt = RotatedAdamW([p], lr=1.0, weight_decay=0.0)
    opt.zero_grad()
    first, second = opt._rotations(p, 1, opt.param_groups[0])
    p.grad = first[:, :1] @ second[:, :1].T * 3.0
    opt.step()
    expected = -first[:, :1] @ second[:, :1].T
    torch.testing.assert_close(p.detach(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["soap", "muon"])
def test_non_diagonal_optimizers_decrease_a_convex_quadratic(name):
    params, loss = quadratic()
    g = torch.Generator().manual_seed(0)  # rebuild A and b to know the exact minimum
    m = torch.randn(6, 6, generator=g)
    a, b = m @ m.T + 0.5 * torch.eye(6), torch.randn(6, 4, generator=g)
    minimum = (-0.5 * (b * torch.linalg.solve(a, b)).sum()).item()  # at x = A^-1 b, v = 1
    if name == "soap":
        from pytorch_optimizer import SOAP

        values = run(SOAP(params, lr=0.05, precondition_frequency=1), params, loss, 300)
    else:  # Muon orthogonalises matrix updates only; the vector part is left at its start
        matrix_loss = lambda: loss() - (params[1] - 1).pow(2).sum()  # noqa: E731
        values = run(torch.optim.Muon(params[:1], lr=0.02, weight_decay=0.0), params[:1], matrix_loss, 300)
    assert values[-1] - minimum < 0.05 * (values[0] - minimum)


def test_muon_takes_the_block_matrices_and_adamw_the_rest():
    from resid.model import Transformer

    model = Transformer(Config(d_model=32, n_layers=2, n_heads=2, d_mlp=64, n_ctx=16))
    optimizer = make_optimizer(model, TrainConfig(model=model.cfg, optimizer="muon"))
    muon, adam = optimizer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adam, torch.optim.AdamW)
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in muon_ids}
    assert names == {n for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2}
    assert all("base_lr" in g for g in optimizer.param_groups)


def test_shared_basis_adam_is_adam_on_the_model_written_in_its_basis():
    """The positive control's optimiser: AdamW whose moments live in one basis R of the residual
    stream takes exactly AdamW's steps on the model rewritten in that basis (every residual
    dimension rotated by R), rotated back."""
    from dataclasses import replace

    from resid.model import Config, Transformer
    from resid.train import TrainConfig, make_optimizer, optimizer_basis

    model_cfg = Config(d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_ctx=8, norm="basisfree")
    cfg = TrainConfig(model=model_cfg, optimizer="shared_basis_adamw", lr=1e-2)
    torch.manual_seed(0)
    model = Transformer(model_cfg).double()
    basis = optimizer_basis(cfg).double()

    def written_in_basis(m: Transformer, back: bool = False) -> dict[str, torch.Tensor]:
        r = basis.T if back else basis
        out = {}
        for name, p in m.named_parameters():
            p = p.detach()
            for dim in m.residual_dims(name):
                p = p @ r if dim == 1 else r.T @ p
            out[name] = p
        return out

    rotated, unrotated = Transformer(model_cfg).double(), Transformer(model_cfg).double()
    rotated.load_state_dict(written_in_basis(model), strict=False)
    unrotated.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 256, (4, 9))
    torch.testing.assert_close(rotated.loss(tokens), model.loss(tokens))  # the basis-free model is invariant
    for m, optimizer_cfg in ((model, cfg), (rotated, replace(cfg, optimizer="adamw")),
                             (unrotated, replace(cfg, optimizer="adamw"))):  # fmt: skip
        optimizer = make_optimizer(m, optimizer_cfg)
        for _ in range(3):
            optimizer.zero_grad()
            m.loss(tokens).backward()
            optimizer.step()
    expected = written_in_basis(rotated, back=True)
    for name, p in model.named_parameters():  # the basis is orthogonal to float32's precision only
        torch.testing.assert_close(p.detach(), expected[name], rtol=1e-5, atol=1e-6)
    plain = dict(unrotated.named_parameters())
    moved = max(
        (p.detach() - plain[name].detach()).abs().max().item() for name, p in model.named_parameters()
    )
    assert moved > 1e-3  # and plain AdamW on the same model steps elsewhere: the basis matters


def steps_of(make, w: torch.Tensor, g: torch.Tensor, n: int = 5) -> torch.Tensor:
    p = torch.nn.Parameter(w.clone())
    optimiser = make([p])
    for i in range(n):
        p.grad = g * (1 + 0.3 * i)  # a gradient that changes size, so the moments matter
        optimiser.step()
    return p.detach()


def test_scalar_adam_commutes_with_rotations_and_adam_does_not():
    g = torch.Generator().manual_seed(0)
    w, grad = (
        torch.randn(24, 16, generator=g, dtype=torch.float64),
        torch.randn(24, 16, generator=g, dtype=torch.float64),
    )
    left, right = (
        haar_rotation(24, seed=1, dtype=torch.float64),
        haar_rotation(16, seed=2, dtype=torch.float64),
    )

    def gap(make) -> float:
        plain = steps_of(make, w, grad)
        rotated = steps_of(make, left.T @ w @ right, left.T @ grad @ right)
        return ((left.T @ plain @ right - rotated).abs().max() / (plain - w).abs().max()).item()

    assert gap(lambda ps: ScalarAdamW(ps, lr=0.01, weight_decay=0.1)) < 1e-10
    assert gap(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)) > 0.1


def test_scalar_adam_first_step_is_the_gradient_over_its_rms_and_one_entry_is_adam():
    g = torch.Generator().manual_seed(3)
    w, grad = (
        torch.randn(8, 5, generator=g, dtype=torch.float64),
        torch.randn(8, 5, generator=g, dtype=torch.float64),
    )
    first = steps_of(lambda ps: ScalarAdamW(ps, lr=0.01, weight_decay=0.0, eps=0.0), w, grad, n=1)
    torch.testing.assert_close(first - w, -0.01 * grad / grad.pow(2).mean().sqrt())
    # with one entry per tensor, one scalar per tensor is one per entry: Adam itself
    params_a, params_b = [torch.nn.Parameter(torch.ones(1, dtype=torch.float64)) for _ in range(2)]
    kwargs = {"lr": 0.05, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    ours = run(ScalarAdamW([params_a], **kwargs), [params_a], lambda: (3 * params_a - 1).pow(2).sum(), 20)
    reference = run(
        torch.optim.AdamW([params_b], **kwargs), [params_b], lambda: (3 * params_b - 1).pow(2).sum(), 20
    )
    assert ours == pytest.approx(reference, rel=1e-12)


def test_scalar_adam_trains_every_parameter_of_the_model():
    cfg = TrainConfig(model=Config(d_model=16, n_layers=1, n_heads=2, d_mlp=32, n_ctx=8, norm="basisfree"),
                      optimizer="scalar_adamw")  # fmt: skip
    from resid.model import Transformer

    model = Transformer(cfg.model)
    (optimiser,) = make_optimizer(model, cfg).optimizers
    assert isinstance(optimiser, ScalarAdamW)
    covered = {id(p) for group in optimiser.param_groups for p in group["params"]}
    assert covered == {id(p) for p in model.parameters()}
