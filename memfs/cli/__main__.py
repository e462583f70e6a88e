"""`python -m memfs.cli`: the `memfs` command."""

import sys

from memfs.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
