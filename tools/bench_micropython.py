"""Benchmark the MicroPython agent on the unix port against the C core, in one run.

Usage: python tools/bench_micropython.py
Runs firmware/micropython/checks/bench.py in `micropython` and a small C program
built here from firmware/core/*.c (gcc -O2, no sanitizers, into build/mpbench/),
then prints one table: gate evaluations per second, 256-byte frames per second
encoded and decoded, Ed25519 sign and verify time, and the heap a pack build takes
on MicroPython (gc.mem_alloc with the collector off: every byte allocated,
mostly big-integer temporaries of Ed25519; an upper bound of the peak).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MP_DIR = ROOT / "firmware" / "micropython"
CORE = ROOT / "firmware" / "core"
OUT = ROOT / "build" / "mpbench"

C_BENCH = r"""
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "hm_gate.h"
#include "hm_frame.h"
#include "hm_ed25519.h"

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static volatile uint32_t sink;

int main(void) {
    hm_gate_result r; int n = 2000000; double t = now();
    for (int k = 0; k < n; k++) { hm_gate_evaluate(k & 0x0fff, 0xe666, 0xb333, &r); sink += r.w; }
    double gate = n / (now() - t);
    uint8_t body[256], wire[600]; size_t len = 0;
    for (int i = 0; i < 256; i++) body[i] = (uint8_t)(i * 7 + 1);
    n = 200000; t = now();
    for (int k = 0; k < n; k++) {
        len = hm_frame_encode(body, 256, 512, wire, sizeof wire); sink += len;
    }
    double enc = n / (now() - t);
    hm_frame_rx rx; hm_frame_rx_init(&rx, 512); int good = 0; t = now();
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < len; i++) if (hm_frame_rx_push(&rx, wire[i]) == HM_FRAME_OK) good++;
    double dec = n / (now() - t);
    uint8_t seed[32], pub[32], sig[64], msg[256] = {0};
    for (int i = 0; i < 32; i++) seed[i] = (uint8_t)i;
    int reps = 200; t = now();
    for (int k = 0; k < reps; k++) hm_ed25519_sign(sig, seed, msg, sizeof msg);
    double sign = (now() - t) / reps * 1e3;
    hm_ed25519_public_key(pub, seed); t = now(); int ok = 0;
    for (int k = 0; k < reps; k++) ok += hm_ed25519_verify(sig, pub, msg, sizeof msg) == 0;
    double verify = (now() - t) / reps * 1e3;
    printf("{\"gate_per_s\": %.0f, \"encode_per_s\": %.0f, \"decode_per_s\": %.0f, "
           "\"sign_ms\": %.4f, \"verify_ms\": %.4f, \"ok\": %d}\n",
           gate, enc, dec, sign, verify, good == n && ok == reps);
    return 0;
}
"""


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: pip install -e '.[test]'")
    return found


def run_c() -> dict[str, float]:
    OUT.mkdir(parents=True, exist_ok=True)
    src = OUT / "bench.c"
    src.write_text(C_BENCH)
    exe = OUT / "bench"
    sources = [str(p) for p in sorted(CORE.glob("*.c"))]
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, "-O2", "-std=c99", "-D_POSIX_C_SOURCE=199309L", "-I", str(CORE),
                    "-o", str(exe), str(src), *sources], check=True)
    result: dict[str, float] = json.loads(
        subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    )
    return result


def run_mp() -> dict[str, float]:
    env = dict(os.environ, MICROPYPATH=str(MP_DIR))
    proc = subprocess.run(
        [tool("micropython"), "-X", "heapsize=4M", str(MP_DIR / "checks" / "bench.py")],
        check=True, capture_output=True, text=True, env=env,
    )
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> int:
    mp = run_mp()
    c = run_c()
    rows = [
        ("gate evaluations / s", "gate_per_s", "{:,.0f}"),
        ("frames encoded / s (256-byte body)", "encode_per_s", "{:,.0f}"),
        ("frames decoded / s (256-byte body)", "decode_per_s", "{:,.0f}"),
        ("Ed25519 sign, 256-byte message (ms)", "sign_ms", "{:.3f}"),
        ("Ed25519 verify, 256-byte message (ms)", "verify_ms", "{:.3f}"),
    ]
    print(f"{'figure':<40} {'MicroPython unix':>18} {'C core -O2':>14} {'ratio':>8}")
    for label, key, fmt in rows:
        m, k = mp[key], c[key]
        ratio = k / m if key.endswith("per_s") else m / k
        print(f"{label:<40} {fmt.format(m):>18} {fmt.format(k):>14} {ratio:>7.0f}x")
    print(f"Ed25519 base table, built once (ms)      {mp['ed25519_table_ms']:>18.1f}")
    print(f"heap allocated by a pack build, gc off   {mp['pack_heap_peak_bytes']:>18,}"
          f"   ({mp['pack_bytes']}-byte pack of 6 records)")
    print(f"heap free before it (bytes)              {mp['heap_free_before']:>18,}")
    return 0 if c.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
