"""The systemd notification protocol (sd_notify), spoken without libsystemd.

Under Type=notify, systemd passes NOTIFY_SOCKET, a unix datagram socket
(a path, or an abstract name starting with '@'), and with WatchdogSec=,
WATCHDOG_USEC. The daemon sends READY=1 once it is dispatching, STATUS=
lines when its state changes, WATCHDOG=1 at half the watchdog interval and
STOPPING=1 when it shuts down. Without NOTIFY_SOCKET every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Send sd_notify messages; silent when not run under systemd."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address: str | bytes | None = None
        if address.startswith("@"):
            self.address = b"\0" + address[1:].encode()
        elif address.startswith("/"):
            self.address = address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and mine else None
        self._sock: socket.socket | None = None
        self._last_status = ""

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> None:
        """Send one datagram of newline-separated assignments; never raises."""
        if self.address is None:
            return
        try:
            if self._sock is None:
                kind = socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                self._sock = socket.socket(socket.AF_UNIX, kind)
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError:
            # Gone, or its queue is full: notifications are advisory, and the
            # scheduler must never block on its supervisor.
            pass

    def status(self, text: str) -> None:
        """Send STATUS=text if it differs from the last one sent."""
        if text != self._last_status:
            self._last_status = text
            self.send(f"STATUS={text}")
