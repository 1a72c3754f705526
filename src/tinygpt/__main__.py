import sys

from tinygpt.cli import main

sys.exit(main())
