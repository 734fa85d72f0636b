"""The worker's HTTP server (``--metrics-port``): ``/healthz``, ``/readyz``, and ``/metrics`` with Prometheus.

A plain ``http.server`` on a daemon thread of its own, so it answers while the
worker's main loop is stuck (that is what ``/healthz`` reports). ``/metrics``
needs ``prometheus-client`` (the ``[prometheus]`` extra); without it, it
answers 404 saying so, and the health endpoints work the same.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from django_procedures.runtime.health import Health

logger = logging.getLogger("django_procedures.worker")

NO_METRICS = (b"/metrics needs prometheus-client: pip install 'django-procedures[prometheus]' "
              b"(/healthz and /readyz work without it)\n")


class Exposition(Protocol):
    def exposition(self, accept: str) -> tuple[bytes, str]: ...


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    health: Health
    metrics: Exposition | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(self.server.health.liveness())
        elif path == "/readyz":
            self._json(self.server.health.readiness())
        elif path == "/metrics" and self.server.metrics is not None:
            body, content_type = self.server.metrics.exposition(self.headers.get("Accept", ""))
            self._send(200, body, content_type)
        elif path == "/metrics":
            self._send(404, NO_METRICS, "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: this server answers /healthz, /readyz and /metrics\n",
                       "text/plain; charset=utf-8")

    def _json(self, verdict: Any) -> None:
        self._send(verdict.status, json.dumps(verdict.as_dict(), indent=1).encode() + b"\n", "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http %s: " + format, self.address_string(), *args)


class ProbeServer:
    """Serves ``health`` (and ``metrics``, if given) on ``host:port``; ``OSError`` with a sentence if taken."""

    def __init__(self, health: Health, host: str, port: int, metrics: Exposition | None = None) -> None:
        try:
            self.server = _Server((host, port), _Handler)
        except OSError as error:
            hint = ("is another process using that port? choose another with --metrics-port"
                    if error.errno == errno.EADDRINUSE else "check --metrics-host and --metrics-port")
            raise OSError(error.errno, f"cannot serve metrics on {host}:{port}: {error.strerror or error} "
                          f"({hint})") from error
        self.server.health, self.server.metrics = health, metrics
        self.host, self.port = str(self.server.server_address[0]), int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="procedures-http", daemon=True)
        self.thread.start()
        base = f"http://{self.host}:{self.port}"
        if metrics is not None:
            logger.info("serving Prometheus metrics at %s/metrics", base)
        logger.info("serving health probes at %s/healthz and %s/readyz", base, base)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
