"""`python -m nansense_cli`: the same as the nansense-cli console script."""

import sys

from nansense_cli import main

sys.exit(main())
