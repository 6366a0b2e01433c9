"""Run the seeded fault-injection proxy between a board's UART socket and the daemon.

    python tools/fault_proxy.py --listen 0 --upstream 127.0.0.1:4321 --seed 7 \\
        --flip 0.001 --drop-frame 0.01 [--direction both|to_upstream|to_client]

Prints ``listening on 127.0.0.1:PORT`` (point the daemon at socket://127.0.0.1:PORT),
runs until SIGINT or SIGTERM, then prints the fault counters as JSON on stdout.
``--events FILE`` writes every applied fault as one JSON object per line.
The same seed and rates give the same faults for the same byte streams; see
hirmem.emulation.faultproxy for what timing can still change.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "host"))

from hirmem.emulation.faultproxy import (  # noqa: E402
    DEFAULT_MAX_SEGMENT,
    FaultPlan,
    FaultProxy,
    FaultProxyError,
    parse_address,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--listen", default="0", help="local port, or HOST:PORT (0: pick a free port)")
    p.add_argument("--upstream", required=True, help="the board's UART socket, HOST:PORT")
    p.add_argument("--seed", default="0", help="seed of the fault decisions (default 0)")
    p.add_argument(
        "--direction",
        choices=("both", "to_upstream", "to_client"),
        default="both",
        help="which direction gets the faults (to_client: device → daemon)",
    )
    rate = "per-byte rate"
    p.add_argument("--flip", type=float, default=0.0, help=f"{rate}: flip one bit")
    p.add_argument("--drop-byte", type=float, default=0.0, help=f"{rate}: drop the byte")
    p.add_argument("--dup-byte", type=float, default=0.0, help=f"{rate}: send the byte twice")
    p.add_argument("--swap-byte", type=float, default=0.0, help=f"{rate}: swap with the next")
    frame = "per-frame rate"
    p.add_argument("--drop-frame", type=float, default=0.0, help=f"{frame}: drop the frame")
    p.add_argument("--dup-frame", type=float, default=0.0, help=f"{frame}: send it twice")
    p.add_argument("--reorder", type=float, default=0.0, help=f"{frame}: swap with the next")
    p.add_argument("--delay", type=float, default=0.0, help=f"{frame}: pause before it")
    p.add_argument("--delay-ms", type=float, default=20.0, help="length of a pause (ms)")
    p.add_argument("--garbage", type=float, default=0.0, help=f"{frame}: junk burst before it")
    p.add_argument("--garbage-max", type=int, default=16, help="longest junk burst (bytes)")
    p.add_argument("--cut", type=float, default=0.0, help=f"{frame}: cut the connection in it")
    p.add_argument("--cut-after", type=int, default=None, help="cut after N frames per connection")
    p.add_argument(
        "--unprotected",
        action="store_true",
        help="let noise hit and create 0x00 delimiters (frames merge and split)",
    )
    p.add_argument("--max-segment", type=int, default=DEFAULT_MAX_SEGMENT, help=argparse.SUPPRESS)
    p.add_argument("--events", type=Path, help="write applied faults here (JSON lines)")
    return p


def plan_from(args: argparse.Namespace) -> FaultPlan:
    return FaultPlan(
        flip=args.flip,
        drop_byte=args.drop_byte,
        dup_byte=args.dup_byte,
        swap_byte=args.swap_byte,
        drop_frame=args.drop_frame,
        dup_frame=args.dup_frame,
        reorder=args.reorder,
        delay=args.delay,
        delay_ms=args.delay_ms,
        garbage=args.garbage,
        garbage_max=args.garbage_max,
        cut=args.cut,
        cut_after=args.cut_after,
        protect_delimiters=not args.unprotected,
        max_segment=args.max_segment,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        listen = ("127.0.0.1", int(args.listen)) if args.listen.isdigit() else None
        listen = listen or parse_address(args.listen)
        plan = plan_from(args)
        seed: int | str = int(args.seed) if args.seed.lstrip("-").isdigit() else args.seed
        proxy = FaultProxy(
            args.upstream,
            listen=listen,
            seed=seed,
            to_upstream=plan if args.direction in ("both", "to_upstream") else None,
            to_client=plan if args.direction in ("both", "to_client") else None,
            record_events=args.events is not None,
        )
        proxy.start()
    except FaultProxyError as err:
        print(f"fault_proxy: {err}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    host, port = proxy.upstream
    print(f"listening on {listen[0]}:{proxy.port} -> {host}:{port}", flush=True)
    while not stop.wait(0.2):
        if not proxy.running:
            break
    proxy.stop()
    if args.events is not None:
        with args.events.open("w", encoding="utf-8") as out:
            for event in proxy.events():
                out.write(json.dumps(event.to_dict()) + "\n")
    print(proxy.stats().to_json(), flush=True)
    if proxy.error is not None:
        print(f"fault_proxy: the proxy loop failed: {proxy.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
