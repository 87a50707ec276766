"""``python -m sopgym.sandboxes.docker build|status|gc``: the ``sopgym sandbox`` commands without the CLI."""

import sys

from .sandbox_command import main

if __name__ == "__main__":
    sys.exit(main(["sandbox", *sys.argv[1:]]))
