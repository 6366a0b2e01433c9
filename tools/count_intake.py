"""Instructions per pack of the daemon's intake, counted by valgrind (deterministic).

    python tools/count_intake.py [--small 128] [--large 448] [--read]

The fleet of ``tools/bench_memory.py`` (64 devices' signed packs of 8 records) offered
to the daemon's store a round at a time (``Store.take_packs``: verify, store, group
commit), under ``valgrind --tool=cachegrind``: once for the first ``--small`` packs,
once for the first ``--large``; the difference over the packs between is the cost of
one pack, without the interpreter's start, the imports and the warm-up. The same
two counts of the packs' Ed25519 verifications alone give that share (the floor the
rest is measured against). ``--read`` also reads every stored pack back as the memory
follow does (``packs_since``). Wall and CPU times of a loaded machine vary by tens of
per cent from run to run; these counts do not (the children run with one hash seed:
string hashing otherwise moves them by a few per cent between runs).

Needs ``valgrind``. The packs are signed once, in this process, and handed to the
counted children in a temporary file.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEVICES, PER_PACK = 64, 8


def child(packs_file: Path, count: int, what: str) -> None:
    """The counted run: ``count`` packs through the intake (``what`` = intake or read),
    or only their signatures verified (``what`` = ed25519)."""
    import cbor2

    from hirmem.daemon.store import Store
    from hirmem.protocol.keys import PublicKey
    from hirmem.protocol.packs import sig_structure

    offered: list[tuple[bytes, bytes, bytes]] = pickle.loads(packs_file.read_bytes())
    chosen = offered[:count]
    if what == "ed25519":  # the envelope read by cbor2 (a few µs), then the signature
        for _, public, data in chosen:
            protected, _, payload, signature = cbor2.loads(data).value
            if not PublicKey(public).verify(signature, sig_structure(protected, payload)):
                raise SystemExit("a bench pack does not verify")
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "intake.db")
        for device, public, _ in offered[:DEVICES]:
            store.register_device(device, public)
        for start in range(0, len(chosen), DEVICES):
            round_ = [(device, data) for device, _, data in chosen[start:start + DEVICES]]
            for took in store.take_packs(round_):
                if took.status != "accepted":
                    raise SystemExit(f"bench pack not accepted: {took}")
        if what == "read":
            cursor, seen = 0, 0
            while rows := store.packs_since(cursor, 1000):
                cursor, seen = rows[-1][0], seen + len(rows)
            if seen != len(chosen):
                raise SystemExit(f"read back {seen} of {len(chosen)} packs")
        store.close()


def instructions(packs_file: Path, count: int, what: str) -> int:
    """Instructions of one counted child run (cachegrind's I refs)."""
    run = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, __file__, "--child", str(packs_file), str(count), what],
        capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False,
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"the counted run failed:\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        child(Path(args[1]), int(args[2]), args[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=128, help="packs in the first count")
    ap.add_argument("--large", type=int, default=448, help="packs in the second count")
    ap.add_argument("--read", action="store_true", help="also read the packs back")
    opts = ap.parse_args(args)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if not 0 < opts.small < opts.large:
        raise SystemExit("--small must be below --large, both above 0")
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_memory import fleet_packs

    rounds = -(-opts.large // DEVICES)
    signed = [(device, public, pack.encoded)
              for device, public, pack in fleet_packs(DEVICES, PER_PACK, rounds)]  # fmt: skip
    between = opts.large - opts.small
    with tempfile.TemporaryDirectory() as tmp:
        packs_file = Path(tmp) / "packs.pickle"
        packs_file.write_bytes(pickle.dumps(signed))
        what = "read" if opts.read else "intake"
        per_pack = (instructions(packs_file, opts.large, what)
                    - instructions(packs_file, opts.small, what)) / between  # fmt: skip
        ed = (instructions(packs_file, opts.large, "ed25519")
              - instructions(packs_file, opts.small, "ed25519")) / between  # fmt: skip
    label = "verify + store + read back" if opts.read else "verify + store"
    print(f"daemon {label}, {DEVICES} devices' packs of {PER_PACK} records "
          f"({opts.large} - {opts.small} packs, cachegrind): {per_pack:,.0f} instructions "
          f"per pack ({per_pack / PER_PACK:,.0f} per record); its Ed25519 verification "
          f"alone (envelope read by cbor2): {ed:,.0f}; the rest: {per_pack - ed:,.0f} per "
          f"pack ({(per_pack - ed) / PER_PACK:,.0f} per record)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
