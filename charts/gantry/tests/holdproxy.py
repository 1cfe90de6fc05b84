#!/usr/bin/env python3
"""A plain-HTTP front for kube-apiserver that can hold back TrainingJob watch events.

    holdproxy.py --upstream https://127.0.0.1:6443 --ca FILE --hold-dir DIR --log FILE --port-file F

Listens on 127.0.0.1 (a free port, written to --port-file) and forwards every request to the
upstream over TLS, headers (the client's bearer token) and body as they are; responses stream
back (watches chunk by chunk). While the file DIR/NS exists, the bytes of TrainingJob watches in
namespace NS are not passed on: the client's cache goes stale as it would behind a slow watch,
while its other requests (pods, GET, PUT) still flow. Used by rbac_api_test.sh to make the
operator write status from a stale read (409 Conflict) at a moment the test chooses.

--log gets one line per request: "NS METHOD PATH STATUS" (PATH without the query; NS "-" for
cluster-scoped paths), and "NS HELD WATCH BYTES" when a held watch passes held bytes on.
"""
import argparse
import http.client
import http.server
import os
import re
import ssl
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "expect", "host", "content-length"}
NS_RE = re.compile(r"/namespaces/([^/?]+)")


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--hold-dir", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    a = ap.parse_args()
    up = urllib.parse.urlsplit(a.upstream)
    ctx = ssl.create_default_context(cafile=a.ca)
    log_lock = threading.Lock()
    logf = open(a.log, "a", buffering=1)

    def log(line):
        with log_lock:
            logf.write(line + "\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        conn = None  # this client connection's upstream connection (keep-alive)

        def log_message(self, *args):
            pass

        def upstream(self):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(up.hostname, up.port, context=ctx,
                                                        timeout=900)
            return self.conn

        def read_body(self):
            n = self.headers.get("Content-Length")
            if n is not None:
                return self.rfile.read(int(n))
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            return None

        def forward(self):
            body = self.read_body()
            path = urllib.parse.urlsplit(self.path)
            m = NS_RE.search(path.path)
            ns = m.group(1) if m else "-"
            query = urllib.parse.parse_qs(path.query)
            holdable = (self.command == "GET" and path.path.endswith("/trainingjobs")
                        and query.get("watch", [""])[0] in ("1", "true") and ns != "-")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            try:
                c = self.upstream()
                c.request(self.command, self.path, body=body, headers=headers)
                r = c.getresponse()
            except (OSError, http.client.HTTPException) as e:
                self.conn = None
                msg = ("proxy: upstream: %s\n" % e).encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                log("%s %s %s 502" % (ns, self.command, path.path))
                return
            self.send_response_only(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            log("%s %s %s %d" % (ns, self.command, path.path, r.status))
            if r.length is not None or r.status in (204, 304) or self.command == "HEAD":
                data = r.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            held = 0
            while True:
                data = r.read1(65536)
                if not data:
                    break
                hold = os.path.join(a.hold_dir, ns)
                if holdable and os.path.exists(hold):
                    held += len(data)
                    while os.path.exists(hold):
                        time.sleep(0.05)
                    log("%s HELD WATCH %d" % (ns, held))
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            # The upstream closed the watch (timeoutSeconds): close this client connection too.
            self.close_connection = True

        def do_GET(self):
            self.forward()

        do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    srv = Proxy(("127.0.0.1", 0), Handler)
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(a.port_file + ".tmp", a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
