"""`python -m ksearch.cli ...` (as recorded commands say) is the `ksearch` command."""

import sys

from ksearch.cli.main import main

sys.exit(main())
