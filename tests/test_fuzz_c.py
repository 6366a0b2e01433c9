"""libFuzzer on the C core (firmware/fuzz, driven by tools/fuzz_c.py).

- Every target builds, runs from the seeds of protocol/vectors with ASan + UBSan,
  executes a fixed number of inputs (a count, not a time: a loaded machine runs the
  same inputs, only slower) and finds no crash, no sanitizer report and no broken
  invariant (seconds per target, two at a time, in a fresh corpus so the run does
  not depend on earlier ones).
- The driver reads libFuzzer's output right: figures of a clean run, and a crash's
  report, core location and kept input (checked on recorded output, without clang).
- The seeds exist for every target, and the host-signed packs fuzz_pack.c treats as
  the only acceptable ones are still those of packs.json.

Skipped, with the reason, only where clang is missing (Debian: clang and
libclang-rt-14-dev, the libFuzzer runtime).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HOST_ID, HOST_KEY, load_vectors
from hirmem.protocol.errors import PackError
from hirmem.protocol.packs import PackKind, TrustedKey, verify_pack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import fuzz_c  # noqa: E402
import fuzz_corpus  # noqa: E402

RUNS = 2000  # inputs per target; the slowest (Ed25519 under ASan) does ~350 a second
CEILING = 300  # seconds per target, only for a machine far too loaded to finish


def clang() -> str | None:
    return shutil.which(os.environ.get("FUZZ_CC") or "clang")


@pytest.mark.skipif(
    clang() is None,
    reason="clang is not installed (Debian: clang libclang-rt-14-dev); the C fuzz targets "
    "cannot be built",
)
def test_every_target_runs_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "fuzz_c.py"),
            "--runs",
            str(RUNS),
            "--seconds",
            str(CEILING),
            "--jobs",
            "2",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=6 * CEILING,
    )
    with capsys.disabled():
        print("\n" + proc.stdout, end="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["target"]: r for r in json.loads(report.read_text())["results"]}
    assert set(results) == set(fuzz_c.all_targets())
    assert {"fuzz_agent", "fuzz_cbor", "fuzz_frame", "fuzz_msg", "fuzz_pack"} <= set(results)
    for name, r in results.items():
        assert not r["failed"] and not r["crashes"] and not r["reports"], (name, r)
        assert r["executions"] >= RUNS, (name, r)
        assert r["cov"] > 0 and r["ft"] > 0 and r["corpus"] > 0, (name, r)


CLEAN_RUN = """\
INFO: Seed: 1
INFO:       28 files found in build/fuzz/corpus/fuzz_frame
#29	INITED cov: 136 ft: 500 corp: 27/8813b exec/s: 0 rss: 31Mb
#8192	pulse  cov: 140 ft: 700 corp: 120/40Kb lim: 1670 exec/s: 4096 rss: 300Mb
#189332	DONE   cov: 144 ft: 790 corp: 170/96Kb lim: 2020 exec/s: 3103 rss: 403Mb
Done 189332 runs in 61 second(s)
stat::number_of_executed_units: 189332
stat::average_exec_per_sec:     3103
stat::new_units_added:          887
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              403
"""

# Recorded from fuzz_frame against a core with an injected off-by-one in hm_frame.c.
CRASH_RUN = """\
#29	INITED cov: 136 ft: 500 corp: 27/8813b exec/s: 0 rss: 31Mb
#2133	NEW    cov: 140 ft: 520 corp: 30/9Kb lim: 1670 exec/s: 0 rss: 40Mb L: 516/1670 MS: 1 Copy-
/work/main/firmware/core/hm_frame.c:102:36: runtime error: index 512 out of bounds for type \
'uint8_t[512]' (aka 'unsigned char[512]')
    #0 0x55f2a5301234 in rx_put /work/main/firmware/core/hm_frame.c:102:36
    #1 0x55f2a5301456 in hm_frame_rx_push /work/main/firmware/core/hm_frame.c:158:9
    #2 0x55f2a5301678 in run_fixed /work/main/firmware/fuzz/fuzz_frame.c:107:25
SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior \
/work/main/firmware/core/hm_frame.c:102:36 in
MS: 1 Copy-; base unit: 0000000000000000000000000000000000000000
artifact_prefix='build/fuzz/crashes/fuzz_frame/'; Test unit written to \
build/fuzz/crashes/fuzz_frame/crash-105674a3a8ec7bdeb5099f30e0a9295c97ea0371
"""


def test_parse_a_clean_run() -> None:
    r = fuzz_c.parse_output("fuzz_frame", CLEAN_RUN)
    assert (r.executions, r.exec_per_sec, r.cov, r.ft, r.corpus) == (189332, 3103, 144, 790, 170)
    assert r.new_units == 887 and r.peak_rss_mb == 403
    assert not r.reports and not r.crashes and not r.failed


def test_parse_a_crash() -> None:
    r = fuzz_c.parse_output("fuzz_frame", CRASH_RUN)
    assert r.failed
    assert r.reports[0].endswith(
        "runtime error: index 512 out of bounds for type 'uint8_t[512]' (aka 'unsigned char[512]')"
    )
    assert any(line.startswith("SUMMARY: UndefinedBehaviorSanitizer") for line in r.reports)
    assert r.core_location == "/work/main/firmware/core/hm_frame.c:102:36"
    assert r.frames[0] == "rx_put /work/main/firmware/core/hm_frame.c:102:36"
    assert r.crashes == [
        "build/fuzz/crashes/fuzz_frame/crash-105674a3a8ec7bdeb5099f30e0a9295c97ea0371"
    ]
    broken = fuzz_c.parse_output(
        "fuzz_msg",
        "/work/main/firmware/fuzz/fuzz_msg.c:153: invariant broken: m.seq == x.seq\n"
        "==998== ERROR: libFuzzer: deadly signal\n",
    )
    assert broken.failed and "invariant broken: m.seq == x.seq" in broken.reports[0]


def test_seeds_for_every_target() -> None:
    seeds = fuzz_corpus.seeds()
    for target in fuzz_c.all_targets():
        assert seeds.get(target), f"no seeds for {target}"
    bodies = {bytes.fromhex(case["body"]) for case in load_vectors("messages")["valid"]}
    assert bodies <= set(seeds["fuzz_msg"])
    streams = {bytes.fromhex(s["stream"]) for s in load_vectors("frames")["streams"]}
    assert streams <= set(seeds["fuzz_frame"])
    # every input the fuzzer once found failing is replayed by every run
    kept = list(fuzz_corpus.REGRESSIONS.glob("*/*"))
    assert kept and all(p.read_bytes() in seeds[p.parent.name] for p in kept)


def test_fuzz_pack_knows_the_host_signed_packs() -> None:
    """fuzz_pack.c's list of acceptable packs: exactly what the host key signed."""
    keys = {HOST_KEY.public.kid: TrustedKey(HOST_KEY.public, HOST_ID, PackKind.KNOWLEDGE)}
    signed: set[tuple[int, str]] = set()
    for case in load_vectors("packs")["cases"]:
        try:
            v = verify_pack(
                bytes.fromhex(case["pack"]), keys, None, PackKind.KNOWLEDGE, require_chain=False
            )
        except PackError:
            continue
        signed.add((v.pack.seq, v.pack.hash.hex()))
    source = (ROOT / "firmware" / "fuzz" / "fuzz_pack.c").read_text(encoding="utf-8")
    table = source[source.index("signed_seeds[") : source.index("#define HEAD_SEED")]
    in_c = {
        (int(seq), "".join(b[2:] for b in re.findall(r"0x[0-9a-f]{2}", body)))
        for seq, body in re.findall(r"\{(\d+), \{([^}]*)\}\}", table)
    }
    assert in_c == signed
    public = source[source.index("host_public[32]") : source.index("host_kid[8]")]
    assert (
        "".join(b[2:] for b in re.findall(r"0x[0-9a-f]{2}", public))
        == (load_vectors("packs")["trusted"]["host"]["public"])
    )
