"""An upgrade from a main.py that kept only knowledge.head (unix port).

Usage: micropython checks/persist_legacy.py <dir> <legacy seq>
Writes <dir>/knowledge.head with that seq, opens <dir>/hirmem.state, adopts the old
head and prints JSON: taken, the seq held after it, and whether a second adoption
(of the same file) is refused.
"""

import json
import sys

from hirmem_mp.persist import Persist

d, seq = sys.argv[1], int(sys.argv[2])
with open(d + "/knowledge.head", "w") as f:
    f.write("%d %s\n" % (seq, "ab" * 32))
p = Persist(d + "/hirmem.state")
taken = p.adopt_legacy_head(d + "/knowledge.head")
again = Persist(d + "/hirmem.state")
print(json.dumps({"taken": taken, "held": again.knowledge_seq,
                  "again": again.adopt_legacy_head(d + "/knowledge.head")}))
