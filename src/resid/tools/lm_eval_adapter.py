"""Run the paper's own benchmarks through EleutherAI's lm-evaluation-harness, under a plan.

Optional: needs ``pip install lm-eval`` and the benchmarks' datasets (a hub). The book's
offline suite (``tasks.py``) stays the default; this is for a user with a hub and a GPU:

    from resid.lm_eval_adapter import evaluate_plan
    evaluate_plan(resid.load("meta-llama/Llama-2-7b-hf", device="cuda"), plans.reverse(32, 8, 23),
                  ["arc_easy", "hellaswag", "gsm8k"])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from resid.model import Transformer

from .plans import Plan, identity, run_plan

try:
    from lm_eval.api.model import LM as _Base
except ImportError:  # the adapter's methods work (and are tested) without lm-eval
    _Base = object


class PlanLM(_Base):
    """An lm-eval model: a resid decoder whose blocks execute as ``plan`` says."""

    def __init__(self, model: Transformer, plan: Plan | None = None, max_length: int | None = None):
        if _Base is not object:
            super().__init__()
        self.model = model
        self.plan = plan or identity(model.cfg.n_layers)
        self.max_length = max_length or model.cfg.n_ctx

    def _logprobs(self, ids: list[int]) -> torch.Tensor:
        """Log-probabilities of the next token at every position: ``[len(ids), vocab]``."""
        ids = ids[-self.max_length :]
        tokens = torch.tensor([ids], device=self.model.embed.weight.device)
        return F.log_softmax(run_plan(self.model, tokens, self.plan)[0].float(), -1)

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        """For each (context, continuation): log P(continuation | context), and whether greedy
        decoding would have produced exactly the continuation."""
        results = []
        for request in requests:
            context, continuation = request.args
            context_ids = self.model.tokenizer.encode(context) if context else []
            whole = self.model.tokenizer.encode(context + continuation)
            n_cont = max(1, len(whole) - len(context_ids))
            logprobs = self._logprobs(whole)
            targets = torch.tensor(whole[-n_cont:], device=logprobs.device)
            predicted = logprobs[-n_cont - 1 : -1]
            total = predicted.gather(-1, targets[:, None]).sum().item()
            results.append((total, bool((predicted.argmax(-1) == targets).all())))
        return results

    def loglikelihood_rolling(self, requests) -> list[float]:
        """Log-likelihood of each whole text (the first token is not scored)."""
        results = []
        for request in requests:
            ids = self.model.tokenizer.encode(request.args[0])
            logprobs = self._logprobs(ids)
            targets = torch.tensor(ids[1:], device=logprobs.device)
            results.append(logprobs[:-1].gather(-1, targets[:, None]).sum().item())
        return results

    def generate_until(self, requests) -> list[str]:
        """Greedy generation until a stop string or ``max_gen_toks`` tokens."""
        outputs = []
        for request in requests:
            context, options = request.args
            stops = options.get("until", [])
            stops = [stops] if isinstance(stops, str) else stops
            ids = self.model.tokenizer.encode(context)
            generated: list[int] = []
            text = ""
            for _ in range(options.get("max_gen_toks", 256)):
                generated.append(int(self._logprobs(ids + generated)[-1].argmax()))
                text = self.model.tokenizer.decode(generated)
                if any(stop in text for stop in stops):
                    text = min((text.split(stop)[0] for stop in stops if stop in text), key=len)
                    break
            outputs.append(text)
        return outputs


def evaluate_plan(model: Transformer, plan: Plan, task_names: list[str], limit: int | None = None) -> dict:
    """lm-eval's results for ``task_names`` with the model's blocks run as ``plan``."""
    try:
        import lm_eval
    except ImportError:
        raise ImportError("evaluate_plan needs lm-eval: pip install lm-eval (and a dataset hub)") from None
    return lm_eval.simple_evaluate(model=PlanLM(model, plan), tasks=task_names, limit=limit)["results"]
