"""The OpenAPI document of the application, as committed in ``docs/openapi.json``.

It depends on the routes only, never on the stores: built here over sources that hold
nothing, so ``tools/openapi.py`` writes it without a daemon and the tests compare it
with what a running service answers at ``/openapi.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hirmem.api.dashboard import application
from hirmem.api.sources import LocalSources
from hirmem.api.tokens import TokenStore


def document() -> dict[str, Any]:
    tokens = TokenStore(":memory:")
    try:
        app = application(LocalSources(Path("/nonexistent/hirmem.db")), tokens)
        return app.openapi()
    finally:
        tokens.close()


def text(doc: dict[str, Any]) -> str:
    """The committed form: sorted keys, one-space indent, a final newline."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
