import sys

from tinygpt.app.cli import main

sys.exit(main())
