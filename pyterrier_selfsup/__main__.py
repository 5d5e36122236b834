import sys

from pyterrier_selfsup.harness.cli import main

sys.exit(main())
