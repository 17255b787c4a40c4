import torch

from resid.stats import metrics


def test_metrics_score_stacked_runs_per_prompt():
    logits = torch.randn(5, 3, 11, generator=torch.Generator().manual_seed(0))  # [patch, prompt, vocab]
    answers, foils = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    diff = metrics.LogitDiff(answers, foils)(logits)
    assert diff.shape == (5, 3)
    torch.testing.assert_close(diff[2, 1], logits[2, 1, 2] - logits[2, 1, 5])
    probability = metrics.AnswerProbability(answers)(logits)
    torch.testing.assert_close(probability[4, 2], logits[4, 2].softmax(-1)[3])
    kl = metrics.KLFromReference(logits[0])(logits)
    assert torch.allclose(kl[0], torch.zeros(3), atol=1e-6) and (kl[1:] > 0).all()
