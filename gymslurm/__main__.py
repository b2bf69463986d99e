"""``python -m gymslurm`` is the same as the ``gymslurm`` console script.

Inside a job (``chain-step``), Slurm's signals are caught before the imports: the batch shell
forwards each one once, and one that came while the step imported was lost (early_signals.py).
"""

import sys

if sys.argv[1:2] == ["chain-step"]:
    from gymslurm.job import early_signals

    early_signals.catch()

from gymslurm.cli import main  # after the catch above, on purpose

raise SystemExit(main())
