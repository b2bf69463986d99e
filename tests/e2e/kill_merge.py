"""The kill harness's aggregation command: ``python kill_merge.py GLOB OUTPUT``.

Merges every complete answer line of the shard outputs matching GLOB into OUTPUT (sorted by row,
replaced atomically), so the harness can check each row was answered exactly once.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path


def main() -> int:
    pattern, output = sys.argv[1], Path(sys.argv[2])
    answers = []
    for path in sorted(glob.glob(pattern)):
        data = Path(path).read_bytes()
        answers += [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]
    answers.sort(key=lambda row: row["q"])
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in answers))
    os.replace(tmp, output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
