import sys

from evio.cli import main

sys.exit(main())
