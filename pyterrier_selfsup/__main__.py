import sys

from pyterrier_selfsup.cli import main

sys.exit(main())
