#!/usr/bin/env python3
"""Allocate and touch memory in 8 MiB steps up to N MiB (default 1024), then sleep.
Under a smaller cgroup memory limit the kernel OOM-kills it (the smoke test expects OOMKilled)."""
import sys
import time

limit_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
chunks = []
for i in range(limit_mb // 8):
    chunks.append(b"x" * (8 << 20))  # bytes are written, so pages are really used
    print("allocated %d MiB" % ((i + 1) * 8), flush=True)
time.sleep(3600)
