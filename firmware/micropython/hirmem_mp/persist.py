"""The device state a reset or a power cut must not lose, in one file.

The boot counter and the knowledge head (seq and hash of the newest accepted knowledge
pack) live in `hirmem.state` as one text line with a CRC-32:

    <boot> <knowledge_seq> <knowledge hash hex or -> <crc32 hex of the text before>

Every save writes the whole line to `hirmem.state.tmp` and renames it over the state
file: a rename is atomic on the unix port (POSIX) and on littlefs, so a cut leaves the
old line or the new one, never a mix. The CRC catches a filesystem that gives no such
promise; a damaged file stops the agent (ValueError) instead of starting from zero,
which would reuse boot counters and roll the knowledge back.

start_boot(base) returns a boot counter above every earlier one (and at least the
configured base), saved before it is returned, so record ids never repeat across
resets. save_knowledge(seq, hash) is the agent's knowledge_saved hook: the head is on
the filesystem before the KNOWLEDGE_RESULT leaves.
"""

import os
from binascii import crc32


class Persist:
    def __init__(self, path: str = "hirmem.state") -> None:
        self.path = path
        self.boot = 0
        self.knowledge_seq = 0
        self.knowledge_hash = None
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return  # never saved: a new device
        fields = text.split()
        if len(fields) != 4 or "%08x" % crc32(" ".join(fields[:3]).encode()) != fields[3]:
            raise ValueError(path + ": damaged state file (not starting from zero)")
        self.boot = int(fields[0])
        self.knowledge_seq = int(fields[1])
        if self.knowledge_seq:
            self.knowledge_hash = bytes.fromhex(fields[2])

    def _save(self) -> None:
        h = bytes(self.knowledge_hash).hex() if self.knowledge_hash else "-"
        body = "%d %d %s" % (self.boot, self.knowledge_seq, h)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%s %08x\n" % (body, crc32(body.encode())))
        os.rename(tmp, self.path)

    def start_boot(self, base: int = 1) -> int:
        """A boot counter above every earlier one, saved before it is returned."""
        boot = self.boot + 1
        self.boot = boot if boot > base else base
        self._save()
        return self.boot

    def save_knowledge(self, seq: int, h) -> None:
        self.knowledge_seq = seq
        self.knowledge_hash = bytes(h)
        self._save()

    def adopt_legacy_head(self, path: str = "knowledge.head") -> bool:
        """Take the knowledge head an older main.py kept in `path` ("seq hash-hex"), if
        it is newer than ours, so an upgrade never rolls the knowledge back. True if
        taken (saved here; the old file is left as it is)."""
        try:
            with open(path) as f:
                seq, h = f.read().split()
            seq, h = int(seq), bytes.fromhex(h)
        except (OSError, ValueError):
            return False
        if seq <= self.knowledge_seq or len(h) != 32:
            return False
        self.save_knowledge(seq, h)
        return True
