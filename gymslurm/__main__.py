"""``python -m gymslurm`` is the same as the ``gymslurm`` console script."""

from gymslurm.cli import main

raise SystemExit(main())
