"""LRP's cost against one gradient × input pass on SmolLM2, in one run.

LRP here is gradient × input through the model with its rules hooked in, plus one forward pass
of the frozen network on a zero input for the bias term: about one extra forward pass. Prints
the ratio (LRP time over gradient × input time) on IOI prompts.
"""

import torch
from timing import best_time

import resid
from resid.tools import behaviours, lrp


def main() -> None:
    torch.manual_seed(0)
    model = resid.load("smollm2-135m")
    prompts = behaviours.ioi_prompts(model.tokenizer, 4, seed=0)
    cases = [(prompts.tokens[i], int(prompts.answers[i]), int(prompts.foils[i])) for i in range(4)]
    t_grad = best_time(lambda: [lrp.gradient_x_input(model, *case) for case in cases])
    t_lrp = best_time(lambda: [lrp.relevance(model, *case) for case in cases])
    print(f"threads={torch.get_num_threads()} prompts={len(cases)} of {prompts.tokens.shape[1]} tokens")
    print(f"gradient x input: {t_grad / len(cases) * 1000:.0f} ms per prompt (reference)")
    per_prompt = t_lrp / len(cases) * 1000
    print(f"LRP:              {per_prompt:.0f} ms per prompt  ratio {t_lrp / t_grad:.2f}x the reference")


if __name__ == "__main__":
    main()
