"""`python -m ksearch ...` is the `ksearch` command."""

import sys

from ksearch.cli.main import main

sys.exit(main())
