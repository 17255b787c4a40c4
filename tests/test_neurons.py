import pytest
import torch

from resid.model import Config, Transformer
from resid.tools import neurons
from resid.tools.patching import LogitDiff


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


def test_class_scores_are_class_promotion_for_every_layer():
    model = tiny(n_layers=3)
    classes = {"a": torch.tensor([3, 5, 7]), "b": torch.tensor([11, 2])}
    scores = neurons.class_scores(model, classes)
    for name, ids in classes.items():
        assert scores[name].shape == (3, 64)
        for layer in range(3):
            torch.testing.assert_close(scores[name][layer], neurons.class_promotion(model, layer, ids))


def test_mean_activations_average_the_positions_from_first_on():
    model = tiny()
    _, cache = model.run_with_cache(TOKENS, ["blocks.1.mlp.hook_post"])
    means = neurons.mean_activations(model, TOKENS, [1], first=2)
    torch.testing.assert_close(means[1], cache["blocks.1.mlp.hook_post"][:, 2:].mean((0, 1)))


def test_activations_at_one_position_are_the_cached_ones_there_batched_or_not():
    model = tiny()
    names = [f"blocks.{layer}.mlp.hook_post" for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(TOKENS, names)
    for position in (-1, 3):
        expected = torch.stack([cache[name][:, position] for name in names], dim=1)  # [batch, layer, d_mlp]
        for batch_size in (1, 32):
            got = neurons.activations_at(model, TOKENS, position, batch_size=batch_size)
            torch.testing.assert_close(got, expected.float())


@pytest.mark.parametrize("sandwich", [False, True])
def test_ablating_last_layer_neurons_has_only_a_direct_effect_when_the_scales_are_frozen(sandwich):
    model = tiny(norm="rmsnorm", sandwich_norms=sandwich)
    prompts = [TOKENS[0, :7], TOKENS[1, :12], TOKENS[2, :4]]  # lengths differ
    answers = torch.tensor([5, 17, 200])
    means = neurons.mean_activations(model, TOKENS, [0, 1])
    scales = ["ln_final.hook_scale"] + (["blocks.1.ln2_post.hook_scale"] if sandwich else [])
    direct, total = [], []
    for ids, answer in zip(prompts, answers, strict=True):
        _, cache = model.run_with_cache(ids[None], scales)
        frozen = [(name, lambda scale, hook, kept=cache[name]: kept) for name in scales]
        with model.hooks(frozen):  # the norms become linear, so the direct path is all there is
            d, t = neurons.ablation_effects(model, [ids], answer[None], [(1, 3), (1, 40)], means)
        direct.append(d)
        total.append(t)
    torch.testing.assert_close(torch.cat(direct), torch.cat(total), atol=1e-5, rtol=1e-4)
    assert torch.cat(total).abs().max() > 1e-3  # the ablation did something
    # unfrozen, and from an earlier layer, the network in between makes them differ
    direct, total = neurons.ablation_effects(model, prompts, answers, [(0, 3), (0, 40)], means)
    assert (direct - total).abs().max() > 1e-4


def test_ablating_a_neuron_that_writes_the_answer_lowers_it():
    model = tiny(norm="rmsnorm")
    answer = 42
    with torch.no_grad():  # neuron 5 of the last layer writes the answer's unembedding
        model.blocks[1].mlp.W_out.weight[:, 5] = model.unembed.weight[answer] * 5
    _, cache = model.run_with_cache(TOKENS[:1], ["blocks.1.mlp.hook_post"])
    means = {1: torch.zeros(64)}
    means[1] = cache["blocks.1.mlp.hook_post"][0, -1] - 2  # the ablation takes 2 units from each
    direct, total = neurons.ablation_effects(model, [TOKENS[0]], torch.tensor([answer]), [(1, 5)], means)
    assert total.item() < -0.5 and direct.item() < -0.5
    # another neuron, lowered as much, moves the answer far less
    _, other = neurons.ablation_effects(model, [TOKENS[0]], torch.tensor([answer]), [(1, 6)], means)
    assert abs(other.item()) < abs(total.item()) / 3
