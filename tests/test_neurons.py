import torch

from resid import neurons
from resid.model import Config, Transformer
from resid.patching import LogitDiff


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = Config(**{"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 64, "n_ctx": 16, **overrides})
    return Transformer(cfg).eval()


TOKENS = torch.randint(0, 256, (6, 12), generator=torch.Generator().manual_seed(1))


def test_a_neuron_writing_a_class_direction_promotes_that_class():
    model = tiny()
    cities = torch.tensor([10, 20, 30, 40])
    with torch.no_grad():
        model.blocks[0].mlp.W_out.weight[:, 5] = model.unembed.weight[cities].mean(0) * 20
    scores = neurons.class_promotion(model, 0, cities)
    assert scores.argmax().item() == 5
    logits = neurons.value_logits(model, 0, torch.tensor([5]))[0]
    assert logits[cities].min() > logits.quantile(0.9)


def test_top_activations_are_the_largest_activations_in_the_cache():
    model = tiny(mlp="swiglu", norm="rmsnorm")
    _, cache = model.run_with_cache(TOKENS, ["blocks.1.mlp.hook_post"])
    acts = cache["blocks.1.mlp.hook_post"]
    table = neurons.top_activations(model, TOKENS, 1, [3, 7], k=3, batch_size=4)  # two batches
    for neuron in (3, 7):
        rows = table[table.neuron == neuron]
        expected = acts[..., neuron].flatten().topk(3).values
        torch.testing.assert_close(torch.tensor(rows.activation.tolist()), expected)
        first = rows.iloc[0]
        assert acts[int(first.sequence), int(first.position), neuron].item() == first.activation


def test_last_layer_neuron_direct_effect_is_its_total_effect_when_the_final_scale_is_frozen():
    model = tiny()
    clean, counter = TOKENS[:3], TOKENS[3:]
    answers, foils = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    direction = model.unembed.weight[answers] - model.unembed.weight[foils]
    _, cache = model.run_with_cache(clean, ["ln_final.hook_scale"])
    frozen = cache["ln_final.hook_scale"]
    # freezing the final norm's scale makes the logits linear in the last residual, and a last-layer
    # MLP reaches the last position's logits only directly
    with model.hooks([("ln_final.hook_scale", lambda scale, hook: frozen)]):
        direct, total = neurons.neuron_effects(
            model, clean, counter, 1, [0, 9, 33], LogitDiff(answers, foils), direction
        )
    assert direct.shape == (3, 3)
    torch.testing.assert_close(direct, total, atol=1e-5, rtol=1e-4)
    assert total.abs().max() > 1e-4  # the patch did something
    # a neuron of an earlier layer also acts through the later layer: the two differ
    direct, total = neurons.neuron_effects(
        model, clean, counter, 0, [0, 9], LogitDiff(answers, foils), direction
    )
    assert (direct - total).abs().max() > 1e-6
