"""``python -m specproof.properties.cli``: the ``specproof`` command."""

import sys

from specproof.properties.cli import main

sys.exit(main())
