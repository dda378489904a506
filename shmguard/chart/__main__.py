import sys

from shmguard.chart.build import main

sys.exit(main())
