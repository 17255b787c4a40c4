"""The statistics layer: estimators of activation statistics and their intervals
(``estimators``), the interval type (``interval``), metrics on a model's outputs (``metrics``) and
the claim ledger that turns estimates into verdicts (``claims``).
"""

from .estimators import (
    auroc,
    auroc_interval,
    bootstrap,
    bootstrap_statistic,
    cross_window_cosine,
    haar_rotation,
    kurtosis,
    kurtosis_metric,
    massive_activations,
    one_vs_rest_auroc,
    outlier_dims,
    pearson,
    principal_kurtosis,
    ratio_bootstrap,
    resample_interval,
    resampled_mean,
    rms,
    rotated_kurtosis,
    spearman,
    stratified_bootstrap,
    t_interval,
    top_energy_share,
    welch_interval,
    wilson_interval,
    window_statistics,
)
from .interval import Interval
