import sys

from infinistream.cli import main

sys.exit(main())
