"""`python -m memfs.cli`: the `memfs` command."""

import sys

from memfs.cli.main import main

sys.exit(main())
