"""`python -m eppo_train.benchmarks` (what `make bench` runs): see run.py."""

from eppo_train.benchmarks.run import main

raise SystemExit(main())
