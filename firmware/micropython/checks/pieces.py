"""Frame pieces on MicroPython (hirmem_mp.frag), for the differential test.

Usage: micropython checks/pieces.py <cases.json>
The file holds {"split": [[body hex, max_frame], ...], "join": [[limit, [piece hex, ...]],
...], "seq": [bytes hex, ...]}. Prints one JSON document of what frag computes: the
pieces of each body, per join case the answer per frame ("pass", "more", the joined
hex, "too-large" or "reassembly") with the counts by kind and the bodies joined, and
the body_seq of each byte string. tests/test_pieces.py compares them with the host and C.
"""

import json
import sys
from binascii import hexlify, unhexlify

from hirmem_mp import frag


def h(b) -> str:
    return hexlify(bytes(b)).decode()


def main() -> None:
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    out = {"split": [], "join": [], "seq": []}
    for body, mf in cases["split"]:
        out["split"].append([h(p) for p in frag.split(unhexlify(body), mf)])
    for limit, bodies in cases["join"]:
        j = frag.Joiner(limit)
        answers = []
        for b in bodies:
            b = unhexlify(b)
            if not frag.is_piece(b):
                answers.append("pass")
                continue
            n = j.take(b)
            if n > 0:
                answers.append(h(j.buf[0:n]))
            elif n == 0:
                answers.append("more")
            else:
                answers.append("too-large" if n == -1 else "reassembly")
        out["join"].append([answers, j.refused, j.joined])
    for p in cases["seq"]:
        out["seq"].append(frag.body_seq(unhexlify(p)))
    print(json.dumps(out))


main()
