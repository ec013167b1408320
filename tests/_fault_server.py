"""A real HTTP server on 127.0.0.1 serving a mirror directory, with faults injected per path.

Used by tests/test_fetch.py (client behaviour) and tests/test_badinput.py (whole workflow).
``faults[path]`` picks a misbehaviour for one request path; ``hits[path]`` counts requests.
"""

from __future__ import annotations

import collections
import gzip
import http.server
import threading
import time
from pathlib import Path

#: fault name -> what the server does for that path
FAULTS = {
    "404": "answer 404 although the file exists",
    "500": "answer 500 every time",
    "503": "answer 503 every time (a lasting outage: transient, retried on the next run)",
    "503-then-200": "answer 503 to the first request, then serve the file",
    "stall": "wait stall_s before answering (longer than the client timeout)",
    "html": "serve an HTML error page as application/gzip (a misnamed .cif.gz)",
    "wrong-type": "serve the real file as text/html",
    "octet-stream": "serve the real file as application/octet-stream",
    "truncated-gzip": "serve the first half of the gzip file (complete HTTP response)",
    "short-body": "promise the full Content-Length, send half, close",
    "not-mmcif": "serve gzip of text that is not a structure file",
    "other-entry": "serve 1ubq.cif.gz instead",
    "empty": "serve 0 bytes",
}


class FaultServer:
    """ThreadingHTTPServer on an ephemeral 127.0.0.1 port; ``url`` is ``http://127.0.0.1:<port>/download``."""

    def __init__(self, mirror: Path, stall_s: float = 1.5) -> None:
        self.mirror = Path(mirror)
        self.faults: dict[str, str] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.stall_s = stall_s
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                with owner._lock:
                    owner.hits[self.path] += 1
                owner.respond(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/download"

    def mirror_bytes(self, path: str) -> bytes | None:
        name = path.rsplit("/", 1)[-1].lower()
        file = self.mirror / name
        return file.read_bytes() if file.is_file() else None

    def respond(self, h: http.server.BaseHTTPRequestHandler) -> None:
        fault = self.faults.get(h.path, "")
        body = self.mirror_bytes(h.path)
        content_type = "application/gzip"
        if fault == "404":
            return h.send_error(404)
        if fault in ("500", "503") or (fault == "503-then-200" and self.hits[h.path] == 1):
            return h.send_error(int(fault[:3]))
        if fault == "stall":
            time.sleep(self.stall_s)
        if fault == "html":
            body = b"<!DOCTYPE html><html><body>Service temporarily unavailable</body></html>"
        elif fault == "wrong-type":
            content_type = "text/html"
        elif fault == "octet-stream":
            content_type = "application/octet-stream"
        elif fault == "truncated-gzip" and body:
            body = body[: len(body) // 2]
        elif fault == "not-mmcif":
            body = gzip.compress(b"this is not a structure file\n" * 20)
        elif fault == "other-entry":
            body = (self.mirror / "1ubq.cif.gz").read_bytes()
        elif fault == "empty":
            body = b""
        if body is None:
            return h.send_error(404)
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if fault == "short-body":
            h.wfile.write(body[: len(body) // 2])
            h.close_connection = True
            return
        try:
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the stalled client already gave up

    def __enter__(self) -> "FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
