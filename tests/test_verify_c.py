"""The C verification of issue 20 (tools/verify_c.py), its fast subset.

- Frama-C EVA over every decoder entry point (verify/framac/eva_decoders.c: any bytes,
  any length up to HM_MAX_FRAME; the knowledge-pack verifier up to HM_MAX_MESSAGE)
  leaves only the alarms reviewed as imprecision in
  verify/framac/eva_reviewed.txt; every entry point is analysed.
- WP proves the ACSL contracts of hm_cbor.c's reader and of hm_cobs_decode (every goal)
  and with them the EVA alarms in their bodies: the frame entry is left with none, and
  the message entry keeps none inside the reader.
- EVA with one state per message type proves every field store of hm_msg_decode inside
  the message struct; SHA-256's framing, unrolled, leaves only its last block reviewed.
- WP proves hm_frag.c's contracts (the joiner keeps have <= limit + 4) and the
  harness's loop invariant over a run of pieces: the frame-piece entry is left with no
  alarm.
- WP proves the contracts of the knowledge-pack verifier (hm_knowledge_accept and its
  helpers in hm_pack.c, eva_crypto.c's Ed25519 stand-in): the getters' outputs along
  the COSE parse, verify_in_place's body under its precondition pack_room; what it
  cannot prove is excluded from its goals and listed with the reason.
- EVA catches the planted off-by-one of the frame receiver (HM_PLANT_OOB) as a new
  alarm at the buffer write; WP catches the planted off-by-one of hm_cobs_decode's
  block check (HM_PLANT_COBS): the reads it guards are no longer proved; and the
  joiner's too-large check one byte loose (HM_PLANT_JOIN): its copy is no longer
  proved inside its buffer; and verify_in_place's signature copied one byte late
  (HM_PLANT_PACK): the copy is no longer proved inside the pack.
- Every sequence of up to 5 ring operations from an empty 3-slot ring keeps the
  invariants of hm_ring.h (the tool runs depth 8); the planted recency bug
  (HM_PLANT_RING_LRU) is caught with the sequence that shows it.
- WP proves the ACSL contracts of the capture path's helpers in hm_ring.c (find_run,
  slot_take, evict_lru, lru_push_front) with -wp-rte, except the goals listed with
  their reason in verify/ring/wp_unproved.txt (find_run's bit-level bounds): slot_take,
  evict_lru and lru_push_front prove every goal, ring_ok after each store into the ring
  included; the planted off-by-one in
  the eviction's run search (HM_PLANT_RING) leaves make_room's call of find_run
  unproved (its run_length precondition, the only property that run asks about).
- The reviewed-alarm list parses, and an alarm outside it is reported as new.
About 5 minutes on two loaded cores (WP is most of it: each ring WP test about a minute
alone, several under load).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import verify_c  # noqa: E402


def test_decoders_leave_only_reviewed_alarms() -> None:
    rep = verify_c.check_decoders()
    text = "\n".join(rep.lines)
    assert rep.ok, text
    assert "NEW ALARM" not in text
    for entry in verify_c.EVA_ENTRIES:  # every entry point ran and reported coverage
        assert re.search(rf"^{entry} \(.*\): \d+ functions, \d+/\d+ statements reached", text,
                         re.M), text
    # the byte-stream frame receiver is proved: no alarm anywhere on its path
    m = re.search(r"^eva_frame .*\n  no alarm in the body of: (.*)$", text, re.M)
    assert m, text
    assert {"hm_frame_rx_push", "rx_finish", "rx_put", "hm_crc32"} <= set(m.group(1).split(", "))
    # WP closes every goal it is given, and with them the frame entry's last alarm
    goals = re.findall(r"^  WP (\d+)/(\d+) goals in (.*) \(\d+ contract properties\)$", text, re.M)
    assert goals and all(done == total for done, total, _ in goals), text
    assert any("hm_cobs_decode" in fns for _, _, fns in goals), text
    assert any("head" in fns.split(", ") for _, _, fns in goals), text
    assert re.search(r"^eva_frame .*; proved free of runtime errors \(1 alarms after EVA "
                     r"\(\d+ properties proved by EVA\), 1 proved by WP, 0 still reviewed\)",
                     text, re.M), text
    m = re.search(r"^eva_cbor .*; (\d+) alarms after EVA .*, (\d+) proved by WP", text, re.M)
    assert m and int(m.group(2)) >= 5, text
    # the reader's WP proofs carry over to the message decoder that calls it
    # and so do the getters' postconditions to the strings hm_msg_decode checks (str_ok's
    # preconditions at its call, proved by WP over hm_msg_decode; EVA, reducing by them,
    # then leaves no alarm in hm_utf8_valid there): nothing of hm_msg.c stays reviewed
    m = re.search(r"^eva_msg .*; (\d+) alarms after EVA .*, (\d+) proved by WP, "
                  r"(\d+) still reviewed", text, re.M)
    assert m and int(m.group(2)) >= 2 and int(m.group(3)) <= 23, text
    assert re.search(r"^  WP .*\bstr_ok\b.*\bhm_msg_decode \(its calls' str_set, "
                     r"str_readable\)", text, re.M), text
    m = re.search(r"^eva_msg .*\n  no alarm in the body of: (.*)$", text, re.M)
    assert m and "str_ok" in m.group(1).split(", "), text
    # the frame-piece joiner is proved: WP closes every alarm EVA leaves over a run of pieces
    m = re.search(r"^eva_join .*; proved free of runtime errors \((\d+) alarms after EVA "
                  r"\(\d+ properties proved by EVA\), (\d+) proved by WP, 0 still reviewed\)",
                  text, re.M)
    assert m and m.group(1) == m.group(2) and int(m.group(2)) >= 6, text
    assert re.search(r"^  WP \d+/\d+ goals in .*\bhm_join_take\b.*\beva_join\b", text, re.M), text
    # one EVA state per message type: every field store is inside the struct (no
    # field-table alarm left), and SHA-256's block loop is unrolled
    tags = dict(re.findall(r"(\S+) (\d+)", text.split("reviewed alarms by reason: ")[1]))
    assert not {"field-table", "join-bound", "sub-buffer"} & set(tags), text
    assert int(tags.get("md-block", "0")) <= 5, text
    # the knowledge-pack verifier under WP: its helpers' contracts are among the goals
    # (all proved, above); the COSE layout is one precondition (pack_room, at the call
    # and as the callee's) where EVA alone left thirteen alarms, and EVA, with the
    # getters' proved postconditions, leaves at most 56 alarms (80 without them)
    assert any("hm_knowledge_accept" in fns.split(", ") for _, _, fns in goals), text
    m = re.search(r"^eva_pack .*; (\d+) alarms after EVA", text, re.M)
    assert m and int(m.group(1)) <= 56, text
    assert int(tags.get("cose-layout", "0")) <= 2, text
    # what rests on pack_room (open at the call) is said, not counted proved in silence
    m = re.search(r"^eva_pack .*\n(?:  .*\n)*?  (\d+) properties proved only under "
                  r"hypotheses that are open themselves \((\d+) of the", text, re.M)
    assert m and int(m.group(1)) >= int(m.group(2)) >= 1, text
    assert "no longer raised" not in text, text  # the reviewed list holds no stale row


def test_planted_out_of_bounds_write_is_caught() -> None:
    rep = verify_c.check_decoders("oob")
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    assert re.search(r"NEW ALARM hm_frame\.c:\d+ in rx_put: index_bound", text), text


def test_planted_cobs_off_by_one_is_caught_by_wp() -> None:
    rep = verify_c.check_decoders("cobs", entries=("eva_frame",))
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    assert re.search(r"NEW ALARM hm_frame\.c:\d+ in hm_cobs_decode: mem_access "
                     r"\\valid_read\(in \+", text), text


def test_planted_join_bound_is_caught_by_wp() -> None:
    rep = verify_c.check_decoders("join", entries=("eva_join",))
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    assert re.search(r"NEW ALARM hm_frag\.c:\d+ in hm_join_take: precondition of hm_wp_memcpy "
                     r"valid_dest", text), text


def test_planted_pack_signature_copy_is_caught_by_wp() -> None:
    # verify_in_place copies the signature one byte late: past the room its contract
    # gives it (pack_room), which WP proves every other access of the body inside
    rep = verify_c.check_decoders("pack", entries=("eva_pack",))
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    assert re.search(r"NEW ALARM hm_pack\.c:\d+ in verify_in_place: precondition of "
                     r"hm_wp_memcpy valid_src", text), text


def test_unreviewed_alarm_is_new() -> None:
    reviewed = verify_c.reviewed_alarms()
    known = verify_c.Alarm("hm_cbor.c", 1, "hm_cbor_skip", "initialization", r"\initialized(&mt)")
    other = verify_c.Alarm("hm_cbor.c", 1, "take", "initialization", r"\initialized(&mt)")
    assert known.key in reviewed
    assert other.key not in reviewed
    # Frama-C numbers its temporaries per run: a key (and a reviewed row) names them tmp
    numbered = verify_c.Alarm("hm_cbor.c", 9, "head", "mem_access", r"\valid_read(r->p + tmp_6)")
    assert numbered.key == ("hm_cbor.c", "head", "mem_access", r"\valid_read(r->p + tmp)")


def test_ring_sequences_keep_the_invariants() -> None:
    rep = verify_c.check_ring(5)
    assert rep.ok, rep.lines
    m = re.match(r"depth 5 ops (\d+) sequences (\d+) states (\d+) steps (\d+)", rep.lines[0])
    assert m, rep.lines
    ops, sequences, states = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert sequences == sum(ops**i for i in range(1, 6))
    assert states > 1000


def test_planted_ring_bug_is_caught() -> None:
    rep = verify_c.check_ring(4, "lru")
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    assert "not in order of last access (I2)" in text
    assert "shortest trail (3 operations)" in text
    assert "sequence: capture(0) capture(0) get(0)" in text


def test_ring_wp_proves_the_capture_path() -> None:
    rep = verify_c.check_ring_wp(functions=verify_c.RING_WP_FAST)
    text = "\n".join(rep.lines)
    assert rep.ok, text
    m = re.match(r"WP proved (\d+)/(\d+) goals \(.*\) in [\d.]+ s; (\d+) not proved and listed, "
                 r"0 new", rep.lines[0])
    assert m, text
    proved, total, listed = (int(g) for g in m.groups())
    assert total == proved + listed and proved >= 50, text
    # every function of the fast subset had goals, and each unproved one has its reason
    for function in verify_c.RING_WP_FAST:
        assert re.search(rf"\b{function} \d+/\d+", rep.lines[1]), text
    assert all(": " in line for line in rep.lines if line.startswith("  listed "))
    # ring_ok kept by the stores into the ring ([frame] before): every goal of these
    for function in ("slot_take", "evict_lru", "lru_push_front"):
        counts = re.search(rf"\b{function} (\d+)/(\d+)", rep.lines[1])
        assert counts and counts.group(1) == counts.group(2), text


def test_ring_wp_catches_the_planted_eviction_bug() -> None:
    rep = verify_c.check_ring_wp("eviction", functions=("make_room",),
                                 properties=("run_length",))
    text = "\n".join(rep.lines)
    assert not rep.ok, text
    # the run search asks for one block too few: for a one-block record it asks for
    # none, below find_run's precondition (k >= 1), which WP proves without the bug
    assert re.search(r"NOT PROVED make_room_call_find_run_requires", text), text


def test_ring_wp_unproved_list_parses() -> None:
    listed = verify_c.unproved_listed()
    assert listed and all(reason for reason in listed.values())


def test_reconcile_diff_adds_open_and_removes_proved_or_gone_rows() -> None:
    listed = {"put_be32_ensures_part1": "[bits] a", "put_be32_ensures_part2": "[bits] b",
              "put_be32_gone_part9": "[bits] c", "hm_ring_unpin_pack_loop_x": "[frame] d",
              "hm_ring_unpin_ensures_9": "[mod] e"}
    goals = {"put_be32_ensures_part1": "Failed", "put_be32_ensures_part2": "Valid",
             "put_be32_ensures_part5": "Timeout", "hm_ring_unpin_ensures_9": "Valid"}
    add, remove = verify_c.unproved_diff(goals, listed, ("put_be32", "hm_ring_unpin"))
    assert add == ["put_be32_ensures_part5"]
    # proved, or no longer a goal; hm_ring_unpin_pack's row is not hm_ring_unpin's
    assert remove == ["hm_ring_unpin_ensures_9", "put_be32_ensures_part2",
                      "put_be32_gone_part9"]


def test_wp_groups_share_every_function_once_and_balance_the_work() -> None:
    functions = verify_c.RING_WP_REVIEWED
    for jobs in (1, 2, 3, 8):
        groups = verify_c.wp_groups(functions, jobs)
        assert len(groups) == min(jobs, len(functions))
        flat = [f for g in groups for f in g]
        assert sorted(flat) == sorted(functions)  # each exactly once
    # on two cores the capture, the one large contract, runs beside all the rest
    assert ("hm_ring_capture",) in verify_c.wp_groups(functions, 2)
    assert verify_c.wp_groups(("ctz32", "live"), 4) == [("ctz32",), ("live",)]


def test_wp_runs_split_the_capture_and_share_the_rest() -> None:
    functions = verify_c.RING_WP_REVIEWED
    for jobs in (1, 2, 8):
        plan = verify_c.wp_runs(functions, jobs)
        # the capture twice, once per selection; every other function once, unselected
        assert [props for fns, props in plan if fns == ("hm_ring_capture",)] == [
            ("@ensures",), ("-@ensures",)]
        rest = [f for fns, props in plan if "hm_ring_capture" not in fns for f in fns]
        assert sorted(rest) == sorted(f for f in functions if f != "hm_ring_capture")
        assert all(props == () for fns, props in plan if "hm_ring_capture" not in fns)
        if jobs > 1:  # the heaviest first, so that it never starts last
            assert plan[0] == (("hm_ring_capture",), ("@ensures",))
    # a caller's own selection is kept, not split
    assert verify_c.wp_runs(("hm_ring_capture", "live"), 2, ("run_length",)) == [
        (("hm_ring_capture",), ("run_length",)), (("live",), ("run_length",))]


def test_wp_prop_categories_partition_a_functions_goals() -> None:
    # the capture's split rests on -wp-prop @ensures and -@ensures selecting each goal
    # exactly once: checked on a function of the fast subset (its goals are cached)
    whole = verify_c.run_ring_wp(functions=("find_run",), jobs=1).goals
    ensures = verify_c.run_ring_wp(functions=("find_run",), properties=("@ensures",)).goals
    rest = verify_c.run_ring_wp(functions=("find_run",), properties=("-@ensures",)).goals
    assert ensures and rest and not ensures.keys() & rest.keys()
    assert ensures.keys() | rest.keys() == whole.keys()
    assert all("_ensures" in g for g in ensures) and not any("_ensures" in g for g in rest)


def test_ring_wp_tries_a_cached_failure_again(tmp_path: Path) -> None:
    # a prover that always fails (as Z3 timing out on a loaded machine does) leaves its
    # failures in the cache; the check must not take them as the last word
    broken = tmp_path / "why3-broken.conf"
    broken.write_text(verify_c.ring_why3_config().read_text().replace(
        shutil.which("z3") or "z3", "/bin/false"))
    cache = verify_c.WpCache(directory=tmp_path / "cache")
    poisoned = verify_c.run_ring_wp(functions=("find_run",), cache=cache, why3_config=broken)
    assert "Valid" in poisoned.goals.values()  # Qed's goals need no prover
    failed = {g for g, s in poisoned.goals.items() if s != "Valid"}
    listed = verify_c.unproved_listed()
    assert failed - listed.keys(), "the broken prover should leave goals open"
    rep = verify_c.check_ring_wp(functions=("find_run",), cache=cache)
    assert rep.ok, "\n".join(rep.lines)
    retried = [ln for ln in rep.lines if "proved on a second try" in ln]
    assert len(retried) == len(failed - listed.keys()), "\n".join(rep.lines)


def test_every_ring_function_is_under_wp() -> None:
    # each function hm_ring.c defines is in the tool's WP run or named as pending review
    # (a function added without a contract run fails here); none is both
    source = (ROOT / "firmware" / "core" / "hm_ring.c").read_text()
    defined = set(re.findall(r"^(?:static )?(?:const )?\w+ \*?(\w+)\(", source, re.M))
    assert "hm_ring_capture" in defined and "walk" in defined, defined
    reviewed, pending = set(verify_c.RING_WP_REVIEWED), set(verify_c.RING_WP_PENDING)
    assert not reviewed & pending
    unlisted, gone = defined - reviewed - pending, (reviewed | pending) - defined
    assert not unlisted and not gone, (unlisted, gone)
