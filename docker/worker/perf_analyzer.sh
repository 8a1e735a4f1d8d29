#!/bin/sh
# /usr/local/bin/perf_analyzer: perf_analyzer 2.51 of the tritonclient wheel. Its libcudart.so.12 is
# nvidia-pytriton's vendored copy, whose SONAME (libcudart-<hash>.so.12...) ldconfig would not index
# as libcudart.so.12, hence the library path. exec keeps the PID (the worker signals it).
export LD_LIBRARY_PATH="/usr/local/lib/perf_analyzer${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec /usr/local/lib/perf_analyzer/perf_analyzer "$@"
