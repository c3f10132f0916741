"""`python -m tfyard` is the `tfyard` command."""

import sys

from tfyard.cli import main

sys.exit(main())
