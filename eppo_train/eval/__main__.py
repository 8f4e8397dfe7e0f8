"""`python -m eppo_train.eval`: the `eppo-eval` command."""

import sys

from eppo_train.eval.cli import main

sys.exit(main())
