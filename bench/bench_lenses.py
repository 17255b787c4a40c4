"""The tuned lens's cost on SmolLM2, against one forward pass over the same tokens, in one run.

Training reads every boundary's residual once (one forward pass of the training text), fits
the least-squares start, then takes Adam steps whose cost is the unembedding of every boundary's
translated residual: over the training vocabulary (the tokens the final distribution ranks in
its top 16 somewhere in the text) rather than the whole vocabulary, which is what makes the
chapter's 80 steps affordable on two cores. Prints one KL step over each vocabulary, the
least-squares start and one evaluation of the KL, as ratios against the forward pass.
"""

import torch
from timing import best_time

import resid
from resid.model import data
from resid.tools import lenses


def main() -> None:
    torch.manual_seed(0)
    model = resid.load("smollm2-135m")
    model.requires_grad_(False)
    ids = data.token_ids(data.corpus("pydoc"), model.tokenizer)
    windows = data.windows(ids, 128, 8, seed=0)  # 1024 tokens
    with torch.no_grad():
        stream = model.residual_stream(windows)  # [n_layers + 1, n_tokens, d_model]
        vocabulary = model.to_logits(stream[-1]).topk(16, -1).indices.unique()
    lens = lenses.least_squares_start(stream)
    lens.requires_grad_(True)
    positions = torch.randint(0, stream.shape[1], (256,))

    def kl_step(vocab: torch.Tensor | None) -> None:
        with torch.no_grad():
            target = model.to_logits(stream[-1, positions], vocab)
        loss = sum(
            lenses.kl_terms(target, model.to_logits(lens.translate(stream[b, positions], b), vocab)).mean()
            for b in range(lens.n_layers)
        )
        loss.backward()

    t_forward = best_time(lambda: model.residual_stream(windows), repeats=2)
    t_restricted = best_time(lambda: kl_step(vocabulary), repeats=2)
    t_full = best_time(lambda: kl_step(None), repeats=1)
    t_start = best_time(lambda: lenses.least_squares_start(stream), repeats=1)
    t_eval = best_time(lambda: lenses.kl_to_final(model, windows[:2], lens, stride=8), repeats=1)
    print(f"threads={torch.get_num_threads()} tokens={stream.shape[1]} boundaries={lens.n_layers} "
          f"training vocabulary={len(vocabulary):,} of {model.cfg.vocab_size:,}")  # fmt: skip
    print(f"one forward pass over the {stream.shape[1]} tokens: {t_forward:.2f} s (reference)")
    for name, seconds in (
        ("one KL step, training vocabulary (256 positions)", t_restricted),
        ("one KL step, whole vocabulary (256 positions)", t_full),
        (f"least-squares start ({stream.shape[1]} tokens)", t_start),
        ("KL evaluation, 2 windows at stride 8", t_eval),
    ):
        print(f"{name:52s}{seconds:7.2f} s  ratio {seconds / t_forward:.2f}x")
    print(f"the training vocabulary makes a step {t_full / t_restricted:.1f}x cheaper")


if __name__ == "__main__":
    main()
