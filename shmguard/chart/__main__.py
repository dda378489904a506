"""`python3 -m shmguard.chart`: write charts/shmguard from the code (shmguard.chart.build)."""

import sys

from shmguard.chart.build import main

sys.exit(main())
