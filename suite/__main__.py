import sys

from dpsuite.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
