"""`python -m ksearch ...` is the `ksearch` command."""

import sys

from ksearch.cli import main

sys.exit(main())
