"""Text a tier holds by reference: a row of passages, tier-1 memories or claim quotes
keeps a (start, end) span of its document's text instead of a copy, and reads it back
through the substrate's document store (``texts``: a document's text by its id, None
once it is gone). A span that can no longer be read is an error, never a wrong quote:
the rows of an erased or replaced document are withdrawn with it."""

from __future__ import annotations

from collections.abc import Callable

from hirmem.semantic.errors import SemanticError

TextOf = Callable[[str], str | None]


def span_text(texts: TextOf | None, seen: dict[str, str | None], source: str, start: int,
              end: int, what: str) -> str:  # fmt: skip
    """``source``'s text over [``start``, ``end``), each source read once per ``seen``;
    ``what`` names the row in the refusal ("a passage is", "a claim quotes")."""
    if source not in seen:
        seen[source] = texts(source) if texts is not None else None
    whole = seen[source]
    if whole is None or end > len(whole):
        raise SemanticError(f"{what} [{start}, {end}) of {source}, whose text can no longer "
                            "be read: it should have been withdrawn with it")  # fmt: skip
    return whole[start:end]
