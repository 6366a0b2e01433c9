"""``python -m hirmem.cli``: the same as the ``hirmem`` command."""

import sys

from hirmem.cli.entry import main

sys.exit(main())
