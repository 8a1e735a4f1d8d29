#!/usr/bin/env python3
"""Tiny HTTP server for the cluster smoke test: GET / answers this pod's hostname.
Every request is logged to stdout (checked through `kubectl logs`)."""
import http.server
import socket
import sys

HOSTNAME = socket.gethostname()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (HOSTNAME + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        print("%s %s" % (self.address_string(), fmt % args), flush=True)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    print("serving %s on :%d" % (HOSTNAME, port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
