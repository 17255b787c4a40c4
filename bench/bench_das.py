"""DAS's cost on SmolLM2's IOI prompts, in one run: one gradient step of a k-dimensional
subspace against one forward and backward pass of the blocks it runs through (the reference),
and the best-coordinate selection (d_model single-coordinate interchanges) against one forward
pass of those blocks. Prints the ratios."""

import torch
from timing import best_time

import resid
from resid.tools import behaviours, das


def main() -> None:
    torch.manual_seed(0)
    model = resid.load("smollm2-135m")
    prompts = behaviours.ioi_prompts(model.tokenizer, 32, seed=0)
    boundary = model.cfg.n_layers // 2
    base, run_from = das.resid_site(model, prompts.tokens, boundary)
    source, _ = das.resid_site(model, prompts.counterfactual, boundary)

    def forward_backward() -> None:
        h = base.clone().requires_grad_()
        run_from(h, None).float().logsumexp(-1).sum().backward()

    def das_step() -> None:
        das.train_subspace(run_from, base, source, prompts.foils, k=8, steps=1, batch_size=len(base))

    t_ref = best_time(forward_backward)
    t_step = best_time(das_step)
    with torch.no_grad():
        t_forward = best_time(lambda: run_from(base[:8], torch.arange(8)))
    t_select = best_time(
        lambda: das.coordinate_effects(
            run_from, base[:8], source[:8], prompts.foils[:8], prompts.answers[:8], 16
        ),
        repeats=1,
    )
    print(
        f"threads={torch.get_num_threads()} prompts={len(base)} "
        f"site=boundary {boundary} of {model.cfg.n_layers}"
    )
    print(f"forward+backward from the site: {t_ref * 1000:.0f} ms (reference)")
    print(
        f"one DAS step (k=8):              {t_step * 1000:.0f} ms  ratio {t_step / t_ref:.2f}x the reference"
    )
    print(f"coordinate selection (8 prompts): {t_select:.1f} s  {t_select / t_forward:.0f}x one forward pass")


if __name__ == "__main__":
    main()
