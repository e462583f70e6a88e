"""`python -m memfs.worker`: the `memfs-worker` command."""

import sys

from memfs.worker.cli import main

if __name__ == "__main__":
    sys.exit(main())
