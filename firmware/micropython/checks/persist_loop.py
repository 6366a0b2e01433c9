"""A device life over hirmem_mp.persist, for the kill -9 test (unix port).

Usage: micropython checks/persist_loop.py <state path> <base>
Prints "boot N" once the boot counter is saved, then "held K" after each knowledge
head K is saved (K counting up from the kept head), until killed.
"""

import sys

from hirmem_mp.persist import Persist

p = Persist(sys.argv[1])
print("start %d %d" % (p.boot, p.knowledge_seq))
print("boot %d" % p.start_boot(int(sys.argv[2])))
k = p.knowledge_seq
while True:
    k += 1
    p.save_knowledge(k, bytes([k & 0xFF]) * 32)
    print("held %d" % k)
