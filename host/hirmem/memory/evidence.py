"""Tamper evidence beyond the chain's own links: signed checkpoints, row hashes, triggers.

The audit chain catches an edited or deleted record in its middle. It cannot, alone,
catch a chain re-hashed from the first record on, a tail cut off (with the memories'
``audit_seq`` lowered to match), a payload rewritten together with its hash, or the
SQLite triggers dropped so that any of that is possible. Three checks close those
gaps; :meth:`hirmem.memory.engine.MemoryEngine.verify_audit` runs all of them and
names every problem it finds:

* **Checkpoints.** The host signs ``(n, audit seq, head hash, time)`` with its Ed25519
  key (:mod:`hirmem.protocol.keys`) at every sweep that finds the chain moved and when
  the engine closes (the daemon's stop). Verify checks every checkpoint's signature
  and that the chain still holds, at that seq, the head hash that was signed: a
  truncated tail ("the chain ends at …") and a re-hashed chain ("record N hashes to …,
  checkpoint #c signed …") are both named.
* **Rows against their records.** Every memory's hash must match its content and the
  hash its capture record carries (a repair is a new memory with its own capture
  record); a memory admitted with R = 0 must still be in permanent quarantine. The
  rows are streamed, so the check runs in bounded memory at any size.
* **Triggers.** The triggers that make the tables append-only are checked when the
  store opens. Missing ones are **re-created**, and the restoration is appended to the
  chain (action ``integrity``) so that verify names them from then on: refusing to
  open would also stop the steward from inspecting the store, and re-creating them
  silently would hide the tampering.

What stays out of reach: someone who can write the file *and* holds the signing key
can forge checkpoints; someone who removes the newest checkpoints together with the
records after the one before cannot be caught from inside the file. Keep the host key
away from the memory store's owner, and keep the latest checkpoint somewhere else
(``hirmem memory checkpoint`` prints it as one line, :meth:`Checkpoint.text`); verify
given that line as an anchor (:func:`check_anchor`, ``verify --anchor``) catches that
case too.
"""

from __future__ import annotations

from dataclasses import dataclass

from hirmem.memory import packaudit
from hirmem.memory.audit import record_hash as audit_record_hash
from hirmem.protocol import cbor
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.records import record_hash
from hirmem.sql import Connection

__all__ = [
    "CHECKPOINT_TAG",
    "MAX_PROBLEMS",
    "Checkpoint",
    "check_anchor",
    "check_checkpoints",
    "check_rows",
    "check_signer",
    "checkpoint_message",
    "latest_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_TAG = "hirmem-audit-checkpoint-v1"
MAX_PROBLEMS = 100  # problems named per check; the count beyond is reported


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    audit_seq: int
    head: bytes
    ts: int  # ms
    kid: bytes
    signature: bytes

    def text(self) -> str:
        """One line to keep outside the store: ``checkpoint N SEQ HEAD TS KID SIG``."""
        return (
            f"checkpoint {self.seq} {self.audit_seq} {self.head.hex()} {self.ts} "
            f"{self.kid.hex()} {self.signature.hex()}"
        )

    @classmethod
    def parse(cls, line: str) -> Checkpoint:
        parts = line.split()
        try:
            if len(parts) != 7 or parts[0] != "checkpoint":
                raise ValueError("seven fields")
            return cls(int(parts[1]), int(parts[2]), bytes.fromhex(parts[3]), int(parts[4]),
                       bytes.fromhex(parts[5]), bytes.fromhex(parts[6]))  # fmt: skip
        except ValueError:
            raise HirmemError(
                "an anchor is the line `hirmem memory checkpoint` printed: "
                "checkpoint N SEQ HEAD TS KID SIGNATURE"
            ) from None


def checkpoint_message(seq: int, audit_seq: int, head: bytes, ts: int) -> bytes:
    """What a checkpoint's signature covers (deterministic CBOR, domain-separated)."""
    return cbor.encode([CHECKPOINT_TAG, seq, audit_seq, head, ts])


def latest_checkpoint(db: Connection) -> Checkpoint | None:
    row = db.execute(
        "SELECT seq, audit_seq, head, ts, kid, signature FROM checkpoints "
        "ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    return None if row is None else Checkpoint(*row)


def check_signer(last: Checkpoint | None, key: SigningKey) -> None:
    """Refuse to sign a store whose checkpoints another key signs (one signer per store)."""
    if last is not None and last.kid != key.kid:
        raise HirmemError(
            f"this store's checkpoints are signed by key {last.kid.hex()}, and this engine "
            f"holds key {key.kid.hex()}: open it with the key that signs it (hirmem memory "
            "--key FILE; the daemon's [host] key for a store the daemon keeps)"
        )


def write_checkpoint(
    db: Connection, key: SigningKey, audit_seq: int, head: bytes, ts: float
) -> Checkpoint | None:
    """Sign and store a checkpoint of the chain at ``audit_seq``/``head``; None when the
    latest checkpoint already covers that head (nothing new to attest)."""
    last = latest_checkpoint(db)
    check_signer(last, key)
    if last is not None and (last.audit_seq, last.head) == (audit_seq, head):
        return None
    seq = 1 if last is None else last.seq + 1
    ms = int(ts * 1000)
    sig = key.sign(checkpoint_message(seq, audit_seq, head, ms))
    db.execute(
        "INSERT INTO checkpoints(seq, audit_seq, head, ts, kid, signature) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (seq, audit_seq, head, ms, key.kid, sig),
    )
    return Checkpoint(seq, audit_seq, head, ms, key.kid, sig)


def _bounded(problems: list[str], extra: int) -> list[str]:
    return problems + ([f"… and {extra} more"] if extra else [])


def check_checkpoints(db: Connection, key: SigningKey) -> list[str]:
    """Every checkpoint signed by ``key`` and matched by the chain as it is now."""
    problems: list[str] = []
    extra = 0
    chain_end = int(db.execute("SELECT coalesce(max(seq), 0) FROM audit").fetchone()[0])
    expect = 1
    for row in db.execute(
        "SELECT seq, audit_seq, head, ts, kid, signature FROM checkpoints ORDER BY seq"
    ):
        cp = Checkpoint(*row)
        found = ""
        if cp.seq != expect:
            found = f"checkpoint #{expect} is missing (next is #{cp.seq})"
        elif cp.kid != key.kid:
            found = (
                f"checkpoint #{cp.seq} was signed by key {cp.kid.hex()}, not by the key this "
                f"check holds ({key.kid.hex()}): verify with the key that signs the store "
                "(hirmem memory --key FILE)"
            )
        elif not key.public.verify(
            cp.signature, checkpoint_message(cp.seq, cp.audit_seq, cp.head, cp.ts)
        ):
            found = f"checkpoint #{cp.seq}: the signature does not verify"
        elif cp.audit_seq > chain_end:
            found = (
                f"checkpoint #{cp.seq} signed the chain at seq {cp.audit_seq}, but the chain "
                f"ends at seq {chain_end}: its tail was truncated"
            )
        else:
            rec = db.execute(
                "SELECT seq, ts, action, memory_id, actor, detail, prev, hash FROM audit "
                "WHERE seq = ?",
                (cp.audit_seq,),
            ).fetchone()
            if rec is None:
                found = f"checkpoint #{cp.seq}: audit record {cp.audit_seq} is missing"
            else:
                digest = audit_record_hash(*rec[:7])
                if bytes(rec[7]) != cp.head or digest != cp.head:
                    found = (
                        f"checkpoint #{cp.seq} signed head {cp.head.hex()[:16]}… at seq "
                        f"{cp.audit_seq}, but that record now hashes to {digest.hex()[:16]}…: "
                        "the chain was rewritten and re-hashed"
                    )
        expect = cp.seq + 1
        if found:
            if len(problems) < MAX_PROBLEMS:
                problems.append(found)
            else:
                extra += 1
    return _bounded(problems, extra)


def check_anchor(db: Connection, key: SigningKey, anchor: Checkpoint) -> list[str]:
    """A checkpoint kept outside the store: signed by ``key``, still in the store, and
    still matched by the chain."""
    if anchor.kid != key.kid or not key.public.verify(
        anchor.signature,
        checkpoint_message(anchor.seq, anchor.audit_seq, anchor.head, anchor.ts),
    ):
        return [f"anchor checkpoint #{anchor.seq} is not signed by this host's key"]
    row = db.execute(
        "SELECT seq, audit_seq, head, ts, kid, signature FROM checkpoints WHERE seq = ?",
        (anchor.seq,),
    ).fetchone()
    if row is None or Checkpoint(*row) != anchor:
        return [
            f"anchor checkpoint #{anchor.seq} (chain seq {anchor.audit_seq}) is no longer in "
            "the store: newer checkpoints were removed"
        ]
    rec = db.execute(
        "SELECT seq, ts, action, memory_id, actor, detail, prev FROM audit WHERE seq = ?",
        (anchor.audit_seq,),
    ).fetchone()
    if rec is None or audit_record_hash(*rec) != anchor.head:
        return [
            f"the chain no longer holds the head anchor checkpoint #{anchor.seq} signed at "
            f"seq {anchor.audit_seq}"
        ]
    return []


_ROWS = """
SELECT m.id, m.payload, m.source, m.timestamp, m.context, m.prev_hash, m.hash,
       m.permanent, m.state,
       (SELECT a.detail FROM audit a WHERE a.memory_id = m.id AND a.action = 'capture'
        ORDER BY a.seq LIMIT 1),
       (SELECT a.detail FROM audit a WHERE a.memory_id = m.id AND a.action = 'admit'
        ORDER BY a.seq LIMIT 1),
       p.seq, p.pos
FROM memories m LEFT JOIN admissions p ON p.memory = m.rowid ORDER BY m.rowid
"""


def _arrived_corrupted(reason: object) -> bool:
    """A device record whose hash did not match its content on arrival: admitted into
    quarantine with that reason in its (chained) admission record, so not tampering."""
    return isinstance(reason, str) and "hash does not match the record content" in reason


class _PackEntries:
    """The ``admit-pack`` entries rows point to, read as the rows come (rows of one pack
    are neighbours, so one entry is kept: bounded memory)."""

    def __init__(self, db: Connection) -> None:
        self.db = db
        self.seq = -1
        self.body: packaudit.PackBody | None = None

    def admission(
        self, mid: str, seq: int, pos: int
    ) -> tuple[packaudit.PackBody, packaudit.Admission] | None:
        if seq != self.seq:
            self.seq, self.body = seq, None
            row = self.db.execute(
                "SELECT action, detail FROM audit WHERE seq = ?", (seq,)
            ).fetchone()
            if row is not None and row[0] == packaudit.ACTION:
                try:
                    self.body = packaudit.decode(bytes(row[1]))
                except HirmemError:
                    self.body = None
        if self.body is None or not 0 <= pos < len(self.body.admissions):
            return None
        a = self.body.admissions[pos]
        return (self.body, a) if a.memory_id.hex() == mid else None


def _check_packed(
    mid: str, content: bytes, digest: bytes, permanent: int, state: int,
    found: tuple[packaudit.PackBody, packaudit.Admission] | None,
) -> str:  # fmt: skip
    """A memory admitted with its device pack, against its place in the pack's entry."""
    if found is None:
        return f"memory {mid} has no capture record in the chain"
    body, a = found
    if content != digest and not _arrived_corrupted(body.reason_of(a)):
        return f"memory {mid}: its content does not match its hash (corrupted)"
    if a.hash != digest:
        return (
            f"memory {mid}: its hash is not the one its capture record carries "
            "(payload rewritten together with its hash)"
        )
    if body.gates[a.gate][3] == 0 and not (permanent and state == 3):
        return (
            f"memory {mid} was admitted with R = 0 but is no longer in permanent "
            "quarantine (MEM-INV-2)"
        )
    return ""


def check_rows(db: Connection) -> list[str]:
    """Every memory row against its own content and the records of its capture and
    admission (one by one, or its place in its pack's ``admit-pack`` entry); streamed:
    bounded memory however many rows there are."""
    problems: list[str] = []
    extra = 0
    packs = _PackEntries(db)
    for (mid, payload, source, ts, context, prev, digest, permanent, state, cap, adm,
         pseq, pos) in db.execute(_ROWS):  # fmt: skip
        found = ""
        content = record_hash(bytes.fromhex(mid), payload, source, ts, context, prev)
        admitted = cbor.decode(adm) if adm is not None else {}
        if cap is None and pseq is not None:
            found = _check_packed(mid, content, bytes(digest), permanent, state,
                                  packs.admission(mid, int(pseq), int(pos)))  # fmt: skip
        elif cap is None:
            found = f"memory {mid} has no capture record in the chain"
        elif content != bytes(digest) and not _arrived_corrupted(admitted.get("reason")):
            found = f"memory {mid}: its content does not match its hash (corrupted)"
        elif cbor.decode(cap).get("hash") != bytes(digest):
            found = (
                f"memory {mid}: its hash is not the one its capture record carries "
                "(payload rewritten together with its hash)"
            )
        elif adm is not None and float(admitted.get("r", "1")) == 0.0 and not (
            permanent and state == 3
        ):
            found = (
                f"memory {mid} was admitted with R = 0 but is no longer in permanent "
                "quarantine (MEM-INV-2)"
            )
        if found:
            if len(problems) < MAX_PROBLEMS:
                problems.append(found)
            else:
                extra += 1
    return _bounded(problems, extra)
