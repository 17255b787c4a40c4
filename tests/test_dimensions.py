import pytest
import torch

from resid.model import Config, Transformer
from resid.tools import dimensions
from resid.tools.heads import next_token_losses


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(Config(d_model=32, n_layers=3, n_heads=4, d_mlp=64, n_ctx=16)).eval()


TOKENS = torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(0))


class PlantedStream:
    """A stand-in model whose residual stream is Gaussian but for planted spikes."""

    def __init__(self, stream: torch.Tensor):
        self.stream = stream

    def residual_stream(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.stream


def test_an_outlier_is_a_dimension_spiking_at_a_quarter_of_the_boundaries_or_more():
    # [boundary, token, d]: 64 dimensions, so that one spike can exceed 6 x its token's RMS
    stream = torch.randn(8, 100, 64, generator=torch.Generator().manual_seed(1))
    stream[[0, 5], 7, 5] = 100.0  # dimension 5 spikes at 2 of 8 boundaries: a quarter
    stream[3, 9, 9] = 100.0  # dimension 9 at 1 of 8: fewer
    outliers, magnitude = dimensions.outlier_dimensions(PlantedStream(stream), TOKENS)
    assert outliers == [5]
    assert magnitude.shape == (64,) and torch.allclose(magnitude, stream.abs().mean((0, 1)))
    assert dimensions.outlier_dimensions(PlantedStream(stream), TOKENS, share=0.1)[0] == [5, 9]


def test_ablating_no_dimension_or_setting_them_to_their_own_values_changes_no_loss():
    model = tiny()
    intact = next_token_losses(model, TOKENS).mean(1)
    assert torch.equal(dimensions.ablated_losses(model, TOKENS, []), intact)
    # each window's own activations as the "means": the hooks sit where residual_stream reads
    for i in range(len(TOKENS)):
        own = model.residual_stream(TOKENS[i : i + 1])  # [boundary, pos, d_model]
        ablated = dimensions.ablated_losses(model, TOKENS[i : i + 1], [1, 4, 30], own)
        assert torch.allclose(ablated, intact[i : i + 1], atol=1e-6)
    zeroed = dimensions.ablated_losses(model, TOKENS, list(range(32)))
    assert not torch.allclose(zeroed, intact)
    outlier, matched = dimensions.outlier_increases(model, [1, 4], [[2, 3], [5, 6]], TOKENS)
    assert torch.allclose(outlier, dimensions.ablated_losses(model, TOKENS, [1, 4]) - intact)
    expected = sum(dimensions.ablated_losses(model, TOKENS, dims) for dims in ([2, 3], [5, 6])) / 2
    assert torch.allclose(matched, expected - intact, atol=1e-6)


def test_a_matched_draw_picks_distinct_non_outliers_among_each_outliers_nearest():
    magnitude = torch.arange(40, dtype=torch.float)
    outliers = [10, 30]
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        drawn = dimensions.matched_draw(generator, outliers, magnitude, nearest=4)
        assert len(set(drawn)) == 2 and not set(drawn) & set(outliers)
        assert all(abs(d - o) <= 2 for d, o in zip(drawn, outliers, strict=True))  # 8,9,11,12 around 10
    with pytest.raises(ValueError, match="too few"):
        dimensions.matched_draw(generator, outliers, magnitude[:6], nearest=4)
