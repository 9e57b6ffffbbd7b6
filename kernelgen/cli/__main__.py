"""`python -m kernelgen.cli` runs the CLI, as `python -m kernelgen` does."""
import sys

from . import main

sys.exit(main())
