"""A model server spanning two nodes, as one ``srun -N2 -n2`` step (tests/slurm/test_multinode.py).

Usage (a server ``command`` of a gymslurm benchmark whose jobs have ``--nodes=2``)::

    srun -N2 -n2 --overlap PYTHON two_node_model.py PORT

Task 1 (the step's second node) runs the demo model server on that node's own name and PORT + 1;
task 0 (the first node, where the link and its collector run) serves ``127.0.0.1:PORT`` and
forwards every request to task 1 across the nodes, as the head of a multi-node model server
forwards to its workers. Task 0 prints ``forwarded N to NODE`` lines, so the server log shows that
the second node answered.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def step_nodes() -> list[str]:
    """The step's nodes, in order (``scontrol show hostnames $SLURM_STEP_NODELIST``)."""
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ["SLURM_JOB_NODELIST"]
    argv = ["scontrol", "show", "hostnames", nodelist]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return out.stdout.split()


def worker(port: int) -> None:
    """Task 1: the demo model server on this node's name."""
    os.execv(
        sys.executable,
        [
            sys.executable,
            "-m",
            "gymslurm",
            "demo-model-server",
            "--host",
            socket.gethostname(),
            "--port",
            str(port + 1),
        ],
    )


def head(port: int, worker_node: str) -> None:
    """Task 0: 127.0.0.1:PORT forwarding to the worker on the other node."""
    target = f"http://{worker_node}:{port + 1}"
    count = [0]

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            request = urllib.request.Request(target + self.path, data=body, method=self.command)
            if self.headers.get("Content-Type"):
                request.add_header("Content-Type", self.headers["Content-Type"])
            try:
                with urllib.request.urlopen(request, timeout=60) as reply:
                    status, data = reply.status, reply.read()
            except urllib.error.HTTPError as error:
                status, data = error.code, error.read()
            except OSError:
                status, data = 502, b"worker unreachable"
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            if status == 200 and self.command == "POST":
                count[0] += 1
                print(f"forwarded {count[0]} to {worker_node} from {socket.gethostname()}", flush=True)

        do_GET = do_POST = _forward  # noqa: N815 (http.server's names)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Forward).serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    nodes = step_nodes()
    if len(nodes) != 2 or nodes[0] == nodes[1]:
        raise SystemExit(f"two_node_model: expected a step on two nodes, got {nodes}")
    if os.environ.get("SLURM_PROCID") == "1":
        worker(port)
    else:
        time.sleep(0.5)
        head(port, nodes[1])


if __name__ == "__main__":
    main()
