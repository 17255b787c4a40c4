import pytest
import torch

from resid import data


def test_pydoc_corpus_is_offline_and_large():
    text = data.corpus("pydoc")
    assert len(text) > 400_000
    assert 'The "for" statement' in text and text.startswith('The "assert" statement')  # sorted topics


def test_unknown_corpus_lists_the_choices():
    with pytest.raises(ValueError, match="pydoc"):
        data.corpus("nope")


def test_byte_tokenizer_roundtrip():
    tok = data.ByteTokenizer()
    text = "naïve café → ok"
    assert tok.decode(tok.encode(text)) == text


def test_chunked_tokenization_equals_whole():
    text = "\n\n".join(f"paragraph {i} " * 20 for i in range(200))
    ids = data.token_ids(text, data.ByteTokenizer(), chunk_chars=1000)
    assert ids.tolist() == list(text.encode())


def test_windows_are_disjoint_and_seeded():
    ids = torch.arange(1000)
    w = data.windows(ids, 50, 10, seed=1)
    assert w.shape == (10, 50)
    assert len(set(w[:, 0].tolist())) == 10 and all((row[0] % 50 == 0) for row in w)
    assert torch.equal(w, data.windows(ids, 50, 10, seed=1))
    with pytest.raises(ValueError, match="holds 20"):
        data.windows(ids, 50, 21)
