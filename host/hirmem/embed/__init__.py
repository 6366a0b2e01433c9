"""Sentence embedders shared by the memory engine and the semantic substrate.

- :mod:`~hirmem.embed.minilm` — all-MiniLM-L6-v2 in numpy (no PyTorch), loaded only when
  its optional packages and weights are installed (else :class:`MiniLMUnavailable`).

It lives apart from both users so that each may import it: the memory engine and the
semantic substrate must not import each other.

May import: :mod:`hirmem.protocol` only.
"""

from __future__ import annotations
