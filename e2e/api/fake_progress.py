#!/usr/bin/env python3
"""A stand-in for rank 0's /progress (docs/metrics.md) for the API-tier operator test.

    fake_progress.py DIR PORTFILE

Serves GET /<ns>/<pod>/progress on 127.0.0.1 (ephemeral port, written to PORTFILE) with the
worker's JSON shape; the step is the integer in DIR/<pod>.step (404 while that file is absent).
The test advances training by rewriting the file, and hangs "the worker" with SIGSTOP on this
process (reads then time out, as they do for a stopped gantry-worker).
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) != 3 or parts[2] != "progress" or "/" in parts[1] or parts[1].startswith("."):
            self.send_error(404)
            return
        try:
            with open(os.path.join(self.server.dir, parts[1] + ".step")) as f:
                step = int(f.read().strip() or "0")
        except (OSError, ValueError):
            self.send_error(404)
            return
        total = 1000
        body = json.dumps({
            "state": "running", "step": step, "total_steps": total,
            "percent": 100.0 * step / total, "epoch": 0, "epochs": 1, "world_size": 2,
            "loss": 2.0 / (1 + step), "lr": 0.001, "samples_per_second": 64.0,
            "tokens_per_second": 6400.0, "steps_per_second": 2.0,
            "eta_seconds": (total - step) / 2.0,
            "last_checkpoint_step": (step // 10) * 10 if step >= 10 else None,
            "start_step": 0, "seconds_since_last_step": 0.1,
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the operator gave up on a read while we were stopped: a broken pipe, expected


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    srv.dir = sys.argv[1]
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, sys.argv[2])
    srv.serve_forever()


if __name__ == "__main__":
    main()
