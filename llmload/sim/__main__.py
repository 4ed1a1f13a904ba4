"""`python -m llmload.sim`: the simulated vLLM server as a process of its own.

The entry point monkey-patches first (before anything opens sockets), then serves. The
`llmload sim` command of the CLI calls the same `llmload.sim.server.serve`.
"""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402

from llmload.sim.server import main_cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(main_cli())
