"""``python -m sopgym``: the ``sopgym`` command."""

from sopgym.cli import main

raise SystemExit(main())
