import pytest
import torch

from resid.model import data


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


def test_skipped_windows_are_held_out_from_the_first_draw_and_bos_leads_when_asked():
    ids = torch.arange(1000)
    first, later = data.windows(ids, 50, 8, seed=3), data.windows(ids, 50, 8, seed=3, skip=8)
    assert not set(first[:, 0].tolist()) & set(later[:, 0].tolist())
    # the same draw continued: the two together are the first 16 windows of that draw
    both = data.windows(ids, 50, 16, seed=3)
    assert set(both[:, 0].tolist()) == set(first[:, 0].tolist()) | set(later[:, 0].tolist())
    with pytest.raises(ValueError, match="after 15"):
        data.windows(ids, 50, 6, skip=15)
    led = data.windows(ids, 50, 4, seed=3, bos=-1)
    assert led.shape == (4, 50) and (led[:, 0] == -1).all()
    assert torch.equal(led[:, 1:], data.windows(ids, 49, 4, seed=3))


class _FakeHF:
    def __init__(self, bos_token_id, adds_bos):
        self.bos_token_id, self.adds_bos = bos_token_id, adds_bos

    def __call__(self, text, add_special_tokens=True):
        body = [5, 6]
        return {"input_ids": ([self.bos_token_id] if self.adds_bos and add_special_tokens else []) + body}


def test_leading_bos_is_the_bos_only_where_the_tokenizer_puts_it_first():
    class Tok:
        def __init__(self, hf):
            self.hf = hf

    assert data.leading_bos(Tok(_FakeHF(2, adds_bos=True))) == 2
    assert data.leading_bos(Tok(_FakeHF(2, adds_bos=False))) is None  # declared but never added
    assert data.leading_bos(Tok(_FakeHF(None, adds_bos=False))) is None
    assert data.leading_bos(data.ByteTokenizer()) is None
