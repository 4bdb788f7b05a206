"""Exporting the daemon's metrics: a thread that counts the spool and writes a textfile; HTTP.

Counting a spool of a million tasks takes a while, and the loop must never
wait for it: a loop held up past a lease renewal gets its attempts taken
over and killed. So this module's own thread asks for a count every EVERY
and hands the report to Metrics; the counting itself, `taskq stats`'s code,
runs in a child process (counting.py), where its CPU cannot hold the
interpreter's lock against the loop. The same thread then writes the node_exporter textfile
(--metrics-file): rendered by prometheus_client, written to a temporary
name beside it and renamed over it, so a reader sees the old file or the
new one, never half of one. It is mode 0644: node_exporter runs as
another user; a device, FIFO or link put at its name since the daemon
started is left alone, with a warning. With --metrics-listen, an HTTP server
of prometheus_client's WSGI app
answers scrapes from its own thread, rendering the same figures; a scrape
never counts.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app

from taskq.observe.counting import Counter
from taskq.observe.metrics import Metrics
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.times.timespec import SECOND

log = logging.getLogger("taskq")

EVERY = 5 * SECOND  # between the end of one count and the start of the next
MODE = 0o644


class Exporter:
    """Counts the spool every EVERY, writes the textfile, and serves HTTP if asked."""

    def __init__(
        self,
        metrics: Metrics,
        spool: Spool,
        host: str,
        wall: Callable[[], int],
        path: str | None,
        listen: tuple[str, int] | None,
    ) -> None:
        self.metrics = metrics
        self.counter = Counter(spool.root, host)
        self.wall = wall
        self.path = path
        self.listen = listen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskq-metrics", daemon=True)
        self._server: Any = None
        self._started = False
        self._last_error = ""

    @property
    def enabled(self) -> bool:
        return self.path is not None or self.listen is not None

    def start(self) -> None:
        """Listen (if asked) and start counting; a port that cannot be had is an error."""
        if not self.enabled:
            return
        self._started = True
        if self.listen is not None:
            addr, port = self.listen
            try:
                self._server = _serve(self.metrics.registry, addr, port)
            except OSError as e:
                raise fsutil.as_taskq_error(e, f"cannot serve metrics on {addr}:{port}") from None
            host = f"[{addr}]" if ":" in addr else addr  # an IPv6 address in a URL (RFC 3986)
            log.info("serving metrics on http://%s:%d/metrics", host, self._server.server_port)
        self._thread.start()

    def stop(self) -> None:
        """Stop counting; write the file once more with the loop's last state."""
        if not self._started:
            return
        self._stop.set()
        self.metrics.stopped()
        self.write()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.count()
            except Exception as e:  # a bad count must not end the exports for good
                self._warn(f"cannot count the spool's tasks: {e}")
            self.write()
            self._stop.wait(EVERY / SECOND)
        self.counter.close()

    def count(self) -> None:
        """Have the spool counted as `taskq stats` does, and hand the report over."""
        began = time.monotonic()
        now = self.wall()
        report = self.counter.count(now)
        self.metrics.counted(report, now / SECOND, time.monotonic() - began)

    def write(self) -> None:
        """Replace the textfile atomically with the current figures; a failure is a warning."""
        path = self.path
        if path is None:
            return
        try:  # staged under a dot-name, which node_exporter (reading *.prom) passes over
            fsutil.replace_file(
                path,
                generate_latest(self.metrics.registry),
                sync=False,
                mode=MODE,
                check=lambda staged: fsutil.must_be_regular(path),  # what is there now
            )
        except OSError as e:
            self._warn(f"cannot write the metrics file {self.path}: {e.strerror or e}")
            return
        if self._last_error:
            log.info("metrics exported again")
            self._last_error = ""

    def _warn(self, message: str) -> None:
        if message != self._last_error:  # once per distinct problem, not every few seconds
            log.warning("%s", message)
        self._last_error = message


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log no request: a scrape every few seconds is not news."""


def _serve(registry: CollectorRegistry, addr: str, port: int) -> WSGIServer:
    """Serve /metrics from a thread of its own, as prometheus_client's start_http_server does.

    Made here because that function returns its server (to stop it by) only
    from prometheus_client 0.17 on, and Debian 12 ships 0.16.
    """
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # a scrape in flight never holds up the daemon's exit

    server = make_server(addr, port, make_wsgi_app(registry), Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="taskq-metrics-http", daemon=True).start()
    return server
