"""all-MiniLM-L6-v2, kept for the imports that name it here: it lives in
:mod:`hirmem.embed.minilm`, where the semantic substrate may import it too."""

from __future__ import annotations

from hirmem.embed.minilm import (
    INSTALL_HINT,
    MODEL_PACKAGE,
    MiniLMEmbedder,
    MiniLMUnavailable,
    find_model_dir,
    gelu,
)

__all__ = [
    "INSTALL_HINT",
    "MODEL_PACKAGE",
    "MiniLMEmbedder",
    "MiniLMUnavailable",
    "find_model_dir",
    "gelu",
]
