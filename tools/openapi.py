"""Write (or check) the API's OpenAPI document, ``docs/openapi.json``.

    .venv/bin/python tools/openapi.py          # write it
    .venv/bin/python tools/openapi.py --check  # exit 1 when the committed one is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hirmem.api import spec

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "openapi.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    new = spec.text(spec.document())
    if args.check:
        old = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if old != new:
            print(f"{TARGET} is stale: run tools/openapi.py", file=sys.stderr)
            return 1
        print(f"{TARGET} is current")
        return 0
    TARGET.write_text(new, encoding="utf-8")
    print(f"wrote {TARGET} ({len(new)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
