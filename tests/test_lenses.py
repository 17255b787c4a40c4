"""The lenses: the logit lens as a tuned lens with zero translators, the last boundary as the
model itself, a least-squares start that is exact where the map is affine, and a tuned lens that
reads held-out text closer to the model's output than the logit lens does."""

import pytest
import torch

from resid.model import Config, Transformer
from resid.tools import lenses

TINY = Config(
    vocab_size=64,
    n_ctx=16,
    d_model=16,
    n_layers=3,
    n_heads=2,
    d_mlp=32,
    norm="rmsnorm",
    mlp="swiglu",
    positional="rotary",
)


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(TINY)
    model.requires_grad_(False)
    for parameter in model.parameters():  # at its initial scale the output is nearly uniform:
        parameter.mul_(4.0)  # nothing for a lens to read; larger weights make every block count
    return model


def text(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (n, TINY.n_ctx), generator=torch.Generator().manual_seed(seed))


def test_zero_translators_are_the_logit_lens_and_the_last_boundary_is_the_model():
    model, tokens = tiny_model(), text(4, 0)
    zero = lenses.TunedLens(TINY.d_model, TINY.n_layers)
    logit = lenses.kl_to_final(model, tokens)
    assert torch.allclose(lenses.kl_to_final(model, tokens, zero), logit, atol=1e-6)
    fit = lenses.LensFit("tiny", n_windows=16, length=16, steps=5)
    trained, _ = lenses.train_tuned_lens(model, text(16, 1), fit)
    for lens in (None, trained):
        kl = lenses.kl_to_final(model, tokens, lens)
        assert kl.shape == (TINY.n_layers + 1, 4)
        assert kl[-1].abs().max() < 1e-5  # the last boundary reads the model's own output
        assert (kl[:-1] > 0).all()


def test_the_least_squares_start_recovers_a_planted_affine_map():
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(3, 200, 8, generator=generator)
    a, b = torch.randn(8, 8, generator=generator), torch.randn(8, generator=generator)
    h[-1] = h[1] + h[1] @ a + b  # the final residual an exact affine function of boundary 1's
    lens = lenses.least_squares_start(h)
    assert torch.allclose(lens.weight[1], a, atol=1e-4) and torch.allclose(lens.bias[1], b, atol=1e-4)


def test_a_tuned_lens_reads_held_out_text_closer_to_the_output_than_the_logit_lens():
    model = tiny_model()
    fit = lenses.LensFit("tiny", n_windows=64, length=16, steps=30, lr=1e-2, top_k=64)
    lens, history = lenses.train_tuned_lens(model, text(64, 1), fit)
    held_out = text(16, 2)
    tuned, logit = lenses.kl_to_final(model, held_out, lens), lenses.kl_to_final(model, held_out)
    assert (tuned[:-1].mean(1) < logit[:-1].mean(1)).all()
    assert history[-1]["kl"] < history[0]["kl"]  # Adam improves on the least-squares start


def test_first_decoding_is_where_the_answer_stays_on_top():
    top1 = torch.tensor([
        [1, 0, 0, 1],
        [0, 0, 1, 1],
        [1, 1, 0, 1],
        [1, 1, 1, 0],
    ], dtype=torch.bool)  # fmt: skip  # [boundary, prompt]
    # prompt 0 drops out at boundary 1 and returns from 2; prompt 2 drops out at 2 and returns at
    # 3; prompt 3 is not the top-1 at the end: it never decodes (one past the last boundary)
    assert lenses.first_decoding(top1).tolist() == [2, 2, 3, 4]


def test_top1_by_boundary_ends_with_the_models_own_prediction():
    model, tokens = tiny_model(), text(6, 3)
    answers = model(tokens)[:, -1].argmax(-1)
    top1 = lenses.top1_by_boundary(model, tokens, answers)
    assert top1[-1].all()


def test_a_lens_measurement_is_filed_in_its_record_and_read_back_without_the_lens(tmp_path, monkeypatch):
    """A fresh clone has the lens's record but not its weights: what the chapter measured with
    the lens comes back from the record, exactly, and no lens is trained or loaded."""
    monkeypatch.setenv("RESID_RECORDS", str(tmp_path / "runs"))
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    model, train_tokens, held_out = tiny_model(), text(16, 1), text(4, 2)
    fit = lenses.LensFit("tiny", n_windows=16, length=16, steps=5)
    measured = lenses.measure(model, train_tokens, fit, lenses.kl_to_final, tokens=held_out, stride=2)
    lens, _ = lenses.tuned_lens(model, train_tokens, fit)  # trained once above, now cached
    assert torch.equal(measured, lenses.kl_to_final(model, held_out, lens, stride=2))
    record = lenses.lens_record(model, train_tokens, fit)
    assert len(record["measurements"]) == 1 and record["history"]

    def no_lens(*args, **kwargs):
        raise AssertionError("the lens was trained or loaded although its record holds the measurement")

    monkeypatch.setattr(lenses, "tuned_lens", no_lens)
    for path in (tmp_path / "cache").rglob("*.pt"):
        path.unlink()  # a fresh clone: the record, no weights
    again = lenses.measure(model, train_tokens, fit, lenses.kl_to_final, tokens=held_out, stride=2)
    assert torch.equal(again, measured)
    assert lenses.lens_record(model, train_tokens, fit)["history"] == record["history"]
    with pytest.raises(AssertionError, match="trained or loaded"):  # other inputs: measured anew
        lenses.measure(model, train_tokens, fit, lenses.kl_to_final, tokens=held_out, stride=1)
