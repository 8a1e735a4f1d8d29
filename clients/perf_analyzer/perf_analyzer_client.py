#!/usr/bin/env python3
"""perf_analyzer as a foreign client group of triton-stress (interface 1, docs/clients.md).

Until the assignment's duration is over or SIGTERM, it runs NVIDIA's perf_analyzer again and
again against the assignment's servers (in turn) and models (round robin), each run a fixed
count of requests at the assignment's concurrency (closed loop) or rate (open loop), with
`--profile-export-file`: every request perf_analyzer sent comes back with its timestamps, its
inputs and its outputs. Each becomes one record, scenario `perf_analyzer`: its latency (send to
last response), and its answer checked where the model is known (add_sub-like: OUTPUT0 = INPUT0
+ INPUT1, OUTPUT1 = INPUT0 - INPUT1, int32; identity-like: OUTPUT0 = INPUT0) or else present. A
perf_analyzer run that fails is one `fail` record with its own words (the tail of its output).

Options: --perf-analyzer PATH (default: $PERF_ANALYZER, perf_analyzer on PATH, or the one
beside this Python), --requests N per run (default 500). Exit 0; 2 on a bad assignment; 3 on
another interface; 4 when perf_analyzer itself does not run.
"""

import argparse
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

INTERFACE = 1
SCENARIO = "perf_analyzer"
_stopping = False


def emit(record):
    sys.stdout.write(json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(message):
    print(f"perf_analyzer_client: {message}", file=sys.stderr, flush=True)


def wrap32(v):
    return ((v + 2**31) % 2**32) - 2**31


def wrong_answer(request):
    """None when the request's answer is right (or cannot be judged); else (expected, got)."""
    inputs, outputs = request.get("request_inputs", {}), request.get("response_outputs") or [{}]
    out = outputs[-1]
    if set(inputs) == {"INPUT0", "INPUT1"} and {"OUTPUT0", "OUTPUT1"} <= set(out):
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        for name, want in (("OUTPUT0", [wrap32(x + y) for x, y in zip(a, b)]),
                           ("OUTPUT1", [wrap32(x - y) for x, y in zip(a, b)])):
            if out[name] != want:
                return (f"{name} = {want}", f"{name} = {out[name]}")
    elif set(inputs) == {"INPUT0"} and "OUTPUT0" in out and out["OUTPUT0"] != inputs["INPUT0"]:
        return (f"OUTPUT0 = {inputs['INPUT0']}", f"OUTPUT0 = {out['OUTPUT0']}")
    elif not out:
        return ("an answer", "no output")
    return None


def error_kind(text):
    lowered = text.lower()
    if "deadline" in lowered or "timed out" in lowered or "timeout" in lowered:
        return "timeout"
    if "unavailable" in lowered or "connection refused" in lowered or "failed to connect" in lowered:
        return "unavailable"
    if "not found" in lowered or "unknown model" in lowered or "invalid" in lowered:
        return "rejected"
    return "server_error" if "error" in lowered else "harness"


class CannotRun(Exception):
    """perf_analyzer itself does not run (missing, or its libraries): the client's own failure."""


def one_run(args, a, server, model, export):
    """One perf_analyzer run; its records."""
    # A fixed request count, not windows until stable: every request it sends is measured and
    # exported, so what the server saw and what is reported are the same requests.
    command = [args.perf_analyzer, "-m", model, "-u", server, "-i", a["protocol"],
               "--request-count", str(args.requests), "--profile-export-file", export]
    if a.get("rate"):
        command += ["--request-rate-range", str(a["rate"])]
    else:
        command += ["--concurrency-range", str(max(1, a["concurrency"]))]
    base = {"scenario": SCENARIO, "model": model, "server": server}
    run = subprocess.run(command, capture_output=True, text=True, timeout=args.run_timeout)
    if run.returncode != 0:
        if _stopping:
            return
        lines = (run.stdout + run.stderr).strip().splitlines()
        # Its own error line, where it printed one, else its last words.
        errors = [line.strip() for line in lines if line.lstrip().startswith("Error")]
        message = " | ".join(errors[:2] or lines[-5:]) or f"perf_analyzer exited {run.returncode}"
        if os.path.exists(export):
            os.remove(export)
        if run.returncode == 127 or "error while loading shared libraries" in message:
            raise CannotRun(message)
        emit({"type": "fail", **base, "error_kind": error_kind(message), "message": message})
        # A failing server is not to be hammered by runs that fail at once.
        time.sleep(0.5)
        return
    with open(export) as f:
        experiments = json.load(f)["experiments"]
    # perf_analyzer refuses an export path that exists.
    os.remove(export)
    for experiment in experiments:
        for request in experiment["requests"]:
            stamps = request.get("response_timestamps") or []
            latencies = [max(0, (stamps[-1] - request["timestamp"]) // 1000)] if stamps else []
            wrong = wrong_answer(request)
            if wrong is None and stamps:
                emit({"type": "pass", **base, "latencies_us": latencies})
            elif wrong is None:
                emit({"type": "fail", **base, "error_kind": "transport", "message": "no response"})
            else:
                emit({"type": "fail", **base, "latencies_us": latencies, "error_kind": "wrong_answer",
                      "expected": wrong[0], "message": wrong[1]})


def default_perf_analyzer():
    """$PERF_ANALYZER, else perf_analyzer on PATH, else the one beside this Python."""
    beside = os.path.join(sys.prefix, "bin", "perf_analyzer")
    return os.environ.get("PERF_ANALYZER") or shutil.which("perf_analyzer") or beside


def perf_analyzer_version(binary):
    """The version perf_analyzer states (`Perf Analyzer Version 2.51.0 (commit ...)`), else the
    tritonclient wheel's beside this Python, else "unknown"."""
    try:
        run = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        words = (run.stdout + " " + run.stderr).split()
        if "Version" in words[:-1]:
            return words[words.index("Version") + 1]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return importlib.metadata.version("tritonclient")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--perf-analyzer", default=default_perf_analyzer())
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--run-timeout", type=float, default=120.0)
    args = parser.parse_args()
    try:
        with open(os.environ["TRITON_STRESS_ASSIGNMENT"]) as f:
            a = json.load(f)
    except (KeyError, OSError, ValueError) as e:
        log(f"no assignment: {e}")
        return 2
    if a.get("interface") != INTERFACE:
        log(f"speaks interface {INTERFACE}, asked for {a.get('interface')}")
        return 3

    def stop(*_):
        global _stopping
        _stopping = True

    signal.signal(signal.SIGTERM, stop)
    version = perf_analyzer_version(args.perf_analyzer)
    emit({"type": "hello", "interface": INTERFACE, "client": "perf_analyzer", "version": version})
    deadline = None if a.get("duration_s") is None else time.monotonic() + a["duration_s"]
    models = a["models"] or ["add_sub"]
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        export = os.path.join(tmp, "profile.json")
        while not _stopping and (deadline is None or time.monotonic() < deadline):
            server = a["servers"][n % len(a["servers"])]
            model = models[(n // len(a["servers"])) % len(models)]
            n += 1
            try:
                one_run(args, a, server, model, export)
            except (CannotRun, OSError) as e:
                log(f"perf_analyzer ({args.perf_analyzer}) does not run: {e}")
                return 4
    log(f"done after {n} perf_analyzer run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
