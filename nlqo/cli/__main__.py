import sys

from nlqo.cli import main

sys.exit(main())
