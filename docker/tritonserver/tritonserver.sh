#!/bin/sh
# /usr/local/bin/tritonserver: the real tritonserver (CPU, python backend) under /opt/tritonserver.
# Its libraries (and the python backend stub's, a child process) are in /opt/tritonserver/lib; the
# default backend and cache directories are /opt/tritonserver/{backends,caches}. exec keeps the PID.
export LD_LIBRARY_PATH="/opt/tritonserver/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec /opt/tritonserver/bin/tritonserver "$@"
