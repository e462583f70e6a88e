"""`python -m memfs.worker`: the `memfs-worker` command."""

import sys

from memfs.worker.engine import main

sys.exit(main())
