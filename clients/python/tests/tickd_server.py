"""A real tickd for the tests: started from $TICKD_BIN on a free port, stopped with SIGTERM,
restarted on the same port and data directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

#: How long tickd may take to start or to stop, on a loaded machine.
START_STOP_PATIENCE = 60.0


class TickdServer:
    """One tickd process at a time over a data directory; ``address`` is ``127.0.0.1:PORT``.

    Its pid goes to ``pid_dir`` while it runs, so that the check's exit trap can end it even
    if the test process is killed. (No preexec_fn such as a parent-death signal: that makes
    Python fork() instead of vfork(), and grpc's fork handlers then break the child.)"""

    def __init__(self, binary: str, work_dir: Path, extra_args: list[str], pid_dir: Path | None) -> None:
        self.binary = binary
        self.work_dir = work_dir
        self.data_dir = work_dir / "data"
        self.extra_args = extra_args
        self.pid_dir = pid_dir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts tickd (on the port it had, after a restart) and waits until it serves."""
        assert self.process is None, "tickd is already running"
        self._starts += 1
        log_path = self.work_dir / f"tickd-{self._starts}.log"
        command = [
            self.binary,
            "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", "127.0.0.1:0",
            "--data-dir", str(self.data_dir),
            "--log-format", "json",
            *self.extra_args,
        ]
        environment = {**os.environ, "TICKD_LOG": "info", "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment
        )
        self._write_pid_file(self.process.pid)
        serving = threading.Event()
        listen: list[str] = []
        threading.Thread(
            target=self._read_log, args=(self.process, log_path, serving, listen), daemon=True
        ).start()
        if not serving.wait(START_STOP_PATIENCE) or not listen:
            self.kill()
            raise RuntimeError(f"tickd did not start serving; its log: {log_path}\n{log_path.read_text()}")
        self.port = int(listen[0].rsplit(":", 1)[1])

    @staticmethod
    def _read_log(process: subprocess.Popen[bytes], log_path: Path, serving: threading.Event, listen: list[str]) -> None:
        """Copies tickd's log to a file, and finds the `tickd serving` line and its address.
        Reads to the end, so tickd never blocks on a full pipe; an exit also ends the wait."""
        assert process.stdout is not None
        with log_path.open("wb") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                if not serving.is_set():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    fields = record.get("fields", record)
                    if fields.get("message") == "tickd serving":
                        listen.append(fields["listen"])
                        serving.set()
        serving.set()

    def stop(self) -> int:
        """SIGTERM, and waits for tickd to exit; returns its exit status."""
        assert self.process is not None, "tickd is not running"
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(START_STOP_PATIENCE)
        finally:
            self.kill()
        return status

    def restart(self) -> None:
        """Stops tickd (asserting a clean exit) and starts it again on the same port and data."""
        status = self.stop()
        assert status == 0, f"tickd exited with {status} on SIGTERM"
        self.start()

    def restart_after_sigkill(self) -> None:
        """Kills tickd (SIGKILL: no drain, nothing flushed by tickd itself) and starts it
        again on the same port and data directory."""
        assert self.process is not None, "tickd is not running"
        self.kill()
        self.start()

    def kill(self) -> None:
        """Ends the process if it still runs (teardown, or a failed start)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._remove_pid_file(self.process.pid)
        self.process = None

    def _write_pid_file(self, pid: int) -> None:
        if self.pid_dir is not None:
            (self.pid_dir / f"tickd-{pid}.pid").write_text(str(pid))

    def _remove_pid_file(self, pid: int) -> None:
        if self.pid_dir is not None:
            (self.pid_dir / f"tickd-{pid}.pid").unlink(missing_ok=True)
