"""``python -m bench``: run the Ocular benchmark suite (bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())
