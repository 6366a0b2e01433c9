"""Answer Ed25519 requests on MicroPython, in the notation of tests/native/t_crypto.c.

Usage: micropython checks/ed25519_requests.py <request file>
One request per line: "pub xSEED", "sign xSEED xMSG" or "verify xPUB xMSG xSIG"
(x + hex bytes). One answer line each: x + hex of the public key or signature, or
1 / 0 for a verification. The caller (tools/ed25519_diff.py) compares the answers with
OpenSSL's; one process answers thousands of requests.
"""

import sys

from hirmem_mp import ed25519


def arg(field: str) -> bytes:
    if not field.startswith("x"):
        raise ValueError("not a hex argument: " + field)
    return bytes.fromhex(field[1:])


def answer(line: str) -> str:
    fields = line.split(" ")
    cmd = fields[0]
    args = [arg(f) for f in fields[1:]]
    if cmd == "pub" and len(args) == 1 and len(args[0]) == 32:
        return "x" + ed25519.public_key(args[0]).hex()
    if cmd == "sign" and len(args) == 2 and len(args[0]) == 32:
        return "x" + ed25519.sign(args[0], args[1]).hex()
    if cmd == "verify" and len(args) == 3:
        return "1" if ed25519.verify(args[2], args[0], args[1]) else "0"
    return "bad-request"


def main() -> None:
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line:
                print(answer(line))


main()
