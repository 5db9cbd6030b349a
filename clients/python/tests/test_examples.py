"""The examples (the README's quick start) run as written against a real tickd."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tickd_server import TickdServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("example", ["quickstart.py", "quickstart_async.py"])
def test_example_runs(example: str, tickd_server: TickdServer) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example), tickd_server.address],
        capture_output=True, text=True, timeout=120,
        # The examples connect as a user would; no http(s)_proxy may carry loopback traffic.
        env={name: value for name, value in os.environ.items() if "proxy" not in name.lower()},
    )
    assert result.returncode == 0, result.stderr
    assert "fired order-42 (attempt 1): b'close order 42'" in result.stdout
    assert result.stdout.strip().endswith("quickstart ok")
