import pytest
import torch

from resid import stats


def test_gaussian_kurtosis_is_three():
    acts = torch.randn(4000, 512, generator=torch.Generator().manual_seed(0))
    assert abs(stats.kurtosis_metric(acts) - 3.0) < 0.05


def test_one_heavy_coordinate_gives_large_kurtosis():
    acts = torch.randn(1000, 256, generator=torch.Generator().manual_seed(0))
    acts[:, 7] = 50.0
    assert stats.kurtosis_metric(acts) > 100


def test_kurtosis_matches_scipy_definition():
    from scipy.stats import kurtosis as scipy_kurtosis

    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)) ** 3
    expected = scipy_kurtosis(x.numpy(), axis=-1, fisher=False, bias=True)
    torch.testing.assert_close(stats.kurtosis(x), torch.tensor(expected, dtype=x.dtype), rtol=1e-5, atol=1e-5)


def test_rotation_removes_basis_aligned_kurtosis():
    acts = torch.randn(2000, 256, generator=torch.Generator().manual_seed(0))
    acts[:, 3] *= 40.0
    assert stats.kurtosis_metric(acts) > 50
    mean, sd = stats.rotated_kurtosis(acts, n_rotations=4)
    # One direction carries almost all the variance, so each rotation's score is the kurtosis of
    # that direction's 256 coordinates: about 3, with an sd near sqrt(24 / 256) = 0.3.
    assert abs(mean - 3.0) < 0.3 and sd < 0.5


def test_haar_rotation_is_orthogonal_and_seeded():
    r = stats.haar_rotation(64, seed=3, dtype=torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(64, dtype=torch.float64))
    assert torch.equal(r, stats.haar_rotation(64, seed=3, dtype=torch.float64))
    assert not torch.equal(r, stats.haar_rotation(64, seed=4, dtype=torch.float64))


def test_haar_rotation_is_uniform_not_biased():
    # Without the sign correction, QR's Q has a positive-biased diagonal.
    diagonal = torch.stack([torch.diagonal(stats.haar_rotation(8, seed=s)) for s in range(400)])
    assert diagonal.mean().abs() < 0.05


def test_outlier_dims_absolute_and_relative():
    acts = torch.randn(500, 128, generator=torch.Generator().manual_seed(0)) * 0.5
    acts[10, 5] = 9.0
    assert stats.outlier_dims(acts, 6.0).tolist() == [5]
    scaled = acts * 100  # every coordinate now exceeds 6, but the tail is the same
    assert len(stats.outlier_dims(scaled, 6.0)) == 128
    assert stats.outlier_dims(scaled, 6.0, relative=True).tolist() == [5]


def test_massive_activations_finds_planted_value():
    acts = torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(0))
    acts[2, 5, 17] = -1000.0
    top = stats.massive_activations(acts.reshape(-1, 32), k=2)
    assert top[0] == {"value": -1000.0, "token": 2 * 16 + 5, "dim": 17}
    assert abs(top[1]["value"]) < 10


def test_the_rotation_control_is_not_a_models_own_rotation():
    # a residual stream that is heavy-tailed in a basis rotated by the model's built-in rotation
    from resid.train import experiments

    heavy = torch.randn(2048, 64, generator=torch.Generator().manual_seed(0))
    heavy[:, :2] *= 10
    residual = heavy @ stats.haar_rotation(64, seed=0).T
    assert stats.rotated_kurtosis(residual, 1, seed=0)[0] > 10  # the same seed undoes it
    assert abs(stats.rotated_kurtosis(residual, 4, seed=experiments.CONTROL_SEED)[0] - 3) < 0.3


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_more_prompts():
    generator = torch.Generator().manual_seed(0)
    few, many = torch.randn(20, 3, generator=generator) + 1, torch.randn(2000, 3, generator=generator) + 1
    mean, low, high = stats.bootstrap(few)
    assert mean.shape == (3,) and torch.all(low < mean) and torch.all(mean < high)
    _, low_many, high_many = stats.bootstrap(many)
    assert torch.all(high_many - low_many < (high - low) / 4)  # width falls like 1/sqrt(n)
    assert torch.all((low_many < 1) & (1 < high_many))
    # constant values have no spread
    _, low_c, high_c = stats.bootstrap(torch.full((10, 2), 3.0))
    torch.testing.assert_close(low_c, high_c)


def test_t_interval_matches_the_textbook_formula():
    mean, low, high = stats.t_interval([1.0, 2.0, 3.0])
    # t(0.975, 2 df) = 4.303; sd = 1; half-width 4.303 / sqrt(3)
    assert mean == 2.0 and abs((high - low) / 2 - 4.3027 / 3**0.5) < 1e-3
    with pytest.raises(ValueError):
        stats.t_interval([1.0])


def test_bootstrap_of_a_correlation_brackets_it():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, generator=generator)
    y = x + 0.5 * torch.randn(200, generator=generator)
    r, low, high = stats.bootstrap_statistic(stats.pearson, x, y)
    assert low < r < high and 0.8 < r < 0.95
    assert abs(r - torch.corrcoef(torch.stack([x, y]))[0, 1].item()) < 1e-6


def test_welch_interval_matches_scipy():
    from scipy import stats as scipy_stats

    a, b = [5.2, 5.4, 6.6], [0.2, 0.1, 0.3, 0.15]
    difference, low, high = stats.welch_interval(a, b)
    reference = scipy_stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert difference == pytest.approx(sum(a) / 3 - sum(b) / 4)
    assert (low, high) == pytest.approx((reference.low, reference.high))
    with pytest.raises(ValueError, match="two seeds"):
        stats.welch_interval([1.0], b)


def test_heaviest_reads_each_run_at_one_tensor_against_that_tensors_own_control():
    from resid.model import Config, Transformer
    from resid.train import experiments

    torch.manual_seed(0)
    model = Transformer(Config(d_model=32, n_layers=3, n_heads=2, d_mlp=64, n_ctx=16, norm="basisfree"))
    tokens = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(1))
    table = experiments.analyse(model, tokens, n_rotations=2)
    table["variant"], table["seed"] = "basisfree", 0
    # make block 1's MLP input and boundary 2 the heaviest, with controls unlike the others
    table.loc[1, ["mlp-in kurtosis", "mlp-in rotated mean"]] = [50.0, 3.5]
    table.loc[2, ["kurtosis", "rotated mean"]] = [40.0, 2.5]
    table.loc[0, "kurtosis"] = 99.0  # the embedding is never chosen
    mlp_in = experiments.heaviest(table, "mlp-in").iloc[0]
    residual = experiments.heaviest(table, "residual").iloc[0]
    assert (mlp_in.layer, mlp_in.excess) == (1, 46.5) and (residual.layer, residual.excess) == (2, 37.5)
    # an untouched MLP input's control is the rotation control of that same tensor: ≈ 3
    assert table["mlp-in rotated mean"].iloc[[0, 2]].sub(3).abs().max() < 0.5
    assert table["mlp-in rotated mean"].isna().tolist() == [False] * 3 + [True]


def test_rotation_claims_pair_by_seed_and_leave_a_ratio_with_a_non_positive_denominator_unmeasured():
    import numpy as np
    import pandas as pd

    from resid.train import experiments

    seeds = (7, 8)

    def analysis(rows: dict) -> pd.DataFrame:
        """(variant, seed) -> (residual excess at boundary 1, MLP-input excess in block 0), controls 3."""
        table = []
        for (name, s), (residual, mlp_in) in rows.items():
            table += [{"variant": name, "seed": s, "layer": 0, "kurtosis": 99.0, "rotated mean": 3.0,
                       "mlp-in kurtosis": 3 + mlp_in, "mlp-in rotated mean": 3.0},
                      {"variant": name, "seed": s, "layer": 1, "kurtosis": 3 + residual, "rotated mean": 3.0,
                       "mlp-in kurtosis": np.nan, "mlp-in rotated mean": np.nan}]  # fmt: skip
        return pd.DataFrame(table)

    names = ("basisfree", "shared rotation", "independent rotations")
    excess = {("basisfree", 7): (8.0, 4.0), ("basisfree", 8): (6.0, -1.0), ("shared rotation", 7): (0.5, 2.0),
              ("shared rotation", 8): (0.1, 3.0), ("independent rotations", 7): (0.2, 1.0),
              ("independent rotations", 8): (0.3, 0.6)}  # fmt: skip
    finals = pd.DataFrame([{"variant": n, "seed": s, "val loss": 1.0 + 0.1 * i + 0.01 * s}
                           for i, n in enumerate(names) for s in seeds])  # fmt: skip
    finals16 = finals[finals.variant != "independent rotations"].copy()
    finals16["val loss"] += 1
    excess16 = {("basisfree", 7): (16.0, 0.0), ("basisfree", 8): (3.0, 0.0),
                ("shared rotation", 7): (0.4, 0.0), ("shared rotation", 8): (0.2, 0.0)}  # fmt: skip
    invariance = pd.DataFrame([{"seed": s, "precision": p, "rotation": r, "Δloss": s * (r + 1) * scale}
                               for s in seeds for p, scale in (("bfloat16", 1e-3), ("float16", 1e-4))
                               for r in range(2)])  # fmt: skip
    tables = (finals, analysis(excess), finals16, analysis(excess16), invariance)
    got = experiments.rotation_claims(seeds, *tables)
    expected = {
        "trains_as_well_shared": [0.1, 0.1], "trains_as_well_independent": [0.2, 0.2],
        "residual_shared": [0.5, 0.1], "residual_independent": [0.2, 0.3],
        "computation_basis_shared": [np.log2(2 / 4), np.nan],  # the baseline's excess -1: not measured
        "independent_weaker": [1 / 2, 0.6 / 3], "bf16_rotation": [7 * 1.5e-3, 8 * 1.5e-3],
        "fp16_rotation": [7 * 1.5e-4, 8 * 1.5e-4], "bf16_training_rotation": [0.1, 0.1],
        "bf16_training_residual": [0.4, 0.2], "bf16_training_tails": [np.log2(16 / 8), np.log2(3 / 6)],
    }  # fmt: skip
    assert set(got) == set(expected)
    for key, values in expected.items():
        np.testing.assert_allclose(got[key][0], values, rtol=1e-9, err_msg=key)


def test_a_ratio_bootstrap_over_a_map_gives_each_cell_its_own_ratio_interval():
    generator = torch.Generator().manual_seed(0)
    numerator = torch.randn(30, 2, 3, generator=generator) + 2
    denominator = torch.rand(30, generator=generator) + 1
    estimate, low, high = stats.ratio_bootstrap(numerator, denominator)
    assert estimate.shape == low.shape == high.shape == (2, 3)
    for i, j in ((0, 0), (1, 2)):
        one = stats.ratio_bootstrap(numerator[:, i, j], denominator)  # the same resamples, one cell
        assert one == pytest.approx((estimate[i, j].item(), low[i, j].item(), high[i, j].item()))
    assert torch.all(low < estimate) and torch.all(estimate < high)


def test_resample_interval_reads_row_zero_as_the_estimate():
    resamples = torch.linspace(0, 1, 1001)
    estimate, low, high = stats.resample_interval(torch.cat([torch.tensor([0.3]), resamples]))
    assert estimate == pytest.approx(0.3) and low == pytest.approx(0.025) and high == pytest.approx(0.975)
    with pytest.raises(ValueError, match="resamples"):
        stats.resample_interval(torch.tensor([0.3, 0.4]))


def test_principal_kurtosis_is_the_same_in_every_basis_and_sees_heavy_directions_off_the_axes():
    g = torch.Generator().manual_seed(0)
    acts = torch.randn(4096, 32, generator=g, dtype=torch.float64)
    acts[:, 0] *= 8  # two heavy coordinates of unequal scale (equal ones would make their axes
    acts[:, 1] *= 5  # any pair in their plane)
    rotation = stats.haar_rotation(32, seed=5, dtype=torch.float64)
    rotated = acts @ rotation  # the same heavy directions, off the axes
    assert stats.kurtosis_metric(acts) > 8 and abs(stats.kurtosis_metric(rotated) - 3) < 0.5
    # the same up to the choice of axes inside the nearly isotropic bulk
    assert stats.principal_kurtosis(rotated) == pytest.approx(stats.principal_kurtosis(acts), rel=1e-3)
    assert stats.principal_kurtosis(rotated) == pytest.approx(stats.kurtosis_metric(acts), rel=0.05)
    isotropic = torch.randn(4096, 32, generator=g, dtype=torch.float64)
    assert abs(stats.principal_kurtosis(isotropic) - 3) < 0.2


def test_wilson_interval_matches_the_textbook_values_and_stays_in_the_unit_interval():
    p, low, high = stats.wilson_interval(5, 50)
    assert p == 0.1 and low == pytest.approx(0.04347, abs=1e-4) and high == pytest.approx(0.21360, abs=1e-4)
    assert (
        stats.wilson_interval(0, 1000)[1] == pytest.approx(0.0, abs=1e-12)
        and 0 < stats.wilson_interval(0, 1000)[2] < 0.004
    )
    with pytest.raises(ValueError):
        stats.wilson_interval(0, 0)


def test_spearman_matches_scipy_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    x = torch.tensor([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.0])
    y = torch.tensor([0.3, 0.1, 0.4, 0.4, 0.9, 0.2, 1.0, -1.0])
    assert stats.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x.numpy(), y.numpy()).statistic)
    assert stats.spearman(x, x.exp()) == pytest.approx(1.0)  # a monotone map: ranks agree exactly


def test_cross_window_cosine_equals_the_mean_over_every_pair_from_different_windows():
    unit = torch.nn.functional.normalize(torch.randn(5, 7, 16, dtype=torch.float64) + 0.5, dim=-1)
    flat = unit.flatten(0, 1)
    window = torch.arange(5).repeat_interleave(7)
    cosines = flat @ flat.T
    brute = cosines[window[:, None] != window[None, :]].mean().item()
    assert stats.cross_window_cosine(unit) == pytest.approx(brute, rel=1e-9)


def test_window_statistics_add_up_to_the_whole_sample_and_find_a_planted_outlier():
    generator = torch.Generator().manual_seed(0)
    stream = torch.randn(3, 4 * 16, 64, generator=generator)  # [boundary, window * position, d]
    # window 0, boundary 2, coordinate 7: 40 is about 7.8 x that token's RMS (at most sqrt(64) = 8)
    stream[2, 5, 7] = 40.0
    outliers, kurt = stats.window_statistics(stream, n_windows=4)
    assert outliers.shape == (4, 3, 64) and kurt.shape == (4, 3)
    assert outliers[0, 2, 7] and outliers.sum() == 1
    for boundary in range(3):
        whole = stats.outlier_dims(stream[boundary], 6.0, relative=True)
        assert torch.equal(torch.nonzero(outliers[:, boundary].any(0)).flatten(), whole)
        assert abs(kurt[:, boundary].mean().item() - stats.kurtosis_metric(stream[boundary])) < 1e-4


def test_auroc_is_the_share_of_positive_negative_pairs_ordered_right_ties_half():
    generator = torch.Generator().manual_seed(0)
    positive = torch.randint(0, 5, (7, 3), generator=generator).float()  # ties on purpose
    negative = torch.randint(0, 5, (9, 3), generator=generator).float()
    pairs = positive[:, None] - negative[None]  # [pos, neg, column]
    by_pairs = ((pairs > 0).float() + 0.5 * (pairs == 0).float()).mean((0, 1))
    torch.testing.assert_close(stats.auroc(positive, negative), by_pairs)
    separated = stats.auroc(torch.tensor([[2.0], [3.0]]), torch.tensor([[0.0], [1.0]]))
    assert separated.item() == 1.0
    assert stats.auroc(torch.tensor([[0.0], [1.0]]), torch.tensor([[2.0], [3.0]])).item() == 0.0
    assert stats.auroc(torch.ones(4, 1), torch.ones(5, 1)).item() == 0.5


def test_auroc_interval_covers_its_estimate_and_narrows_with_more_rows():
    generator = torch.Generator().manual_seed(1)
    small = stats.auroc_interval(
        torch.randn(10, generator=generator) + 1, torch.randn(10, generator=generator)
    )
    large = stats.auroc_interval(
        torch.randn(400, generator=generator) + 1, torch.randn(400, generator=generator)
    )
    for interval in (small, large):
        assert interval.low <= interval.estimate <= interval.high
    assert large.high - large.low < small.high - small.low
    assert 0.7 < large.estimate < 0.84  # Phi(1 / sqrt 2) = 0.76 for unit normals one apart


def test_one_vs_rest_auroc_finds_the_column_planted_for_each_label():
    generator = torch.Generator().manual_seed(2)
    labels = torch.arange(3).repeat_interleave(8)  # three labels, 8 rows each
    values = torch.randn(24, 5, generator=generator)
    for label, column in ((0, 1), (1, 4), (2, 0)):
        values[labels == label, column] += 10  # the column fires for that label alone
    scores = stats.one_vs_rest_auroc(values, labels)  # [label, column]
    assert scores.shape == (3, 5)
    assert scores.argmax(1).tolist() == [1, 4, 0]
    assert (scores.max(1).values == 1.0).all()
    torch.testing.assert_close(scores[1], stats.auroc(values[labels == 1], values[labels != 1]))


def test_stratified_bootstrap_keeps_each_labels_count_and_covers_its_estimate():
    labels = torch.tensor([0] * 3 + [1] * 20)
    values = torch.randn(23, generator=torch.Generator().manual_seed(3))
    counts = []

    def share_of_label_zero(rows: torch.Tensor) -> float:
        counts.append(int((labels[rows] == 0).sum()))
        return values[rows].mean().item()

    interval = stats.stratified_bootstrap(share_of_label_zero, labels, n_resamples=200)
    assert set(counts) == {3}  # every resample and the estimate: three rows of the rare label
    assert interval.low <= interval.estimate <= interval.high
    assert interval.estimate == pytest.approx(values.mean().item())
    with pytest.raises(ValueError, match="two rows"):
        stats.stratified_bootstrap(share_of_label_zero, torch.tensor([0, 1, 1]), n_resamples=10)
