#!/usr/bin/env python3
"""A foreign client of triton-stress built on NVIDIA's official `tritonclient` (gRPC or HTTP).

It speaks interface 1 of docs/clients.md: it reads its assignment from the JSON file named by
TRITON_STRESS_ASSIGNMENT, writes a `hello` and then one record per test on stdout, and logs on
stderr. Scenario `Load`: closed loop, `concurrency` threads, each sending one inference at a
time to the assignment's servers in turn, round-robin over its models, every answer checked:

  * add_sub-like models (INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference),
  * identity-like models (INPUT0 -> OUTPUT0 equal),
  * any other model: every output the metadata lists is present with its datatype.

Runs until the assignment's duration is over or SIGTERM. Exit 0; 3 on an interface it does not
speak; 2 on a bad assignment.
"""

import importlib.metadata
import json
import os
import signal
import sys
import threading
import time

import numpy as np

INTERFACE = 1
_out_lock = threading.Lock()
_stop = threading.Event()


def emit(record):
    """One record, one line, whole (threads share stdout)."""
    line = json.dumps(record, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def log(message):
    print(f"tritonclient_stress: {message}", file=sys.stderr, flush=True)


def error_kind(protocol, e):
    """The interface's error kind of a tritonclient exception."""
    from tritonclient.utils import InferenceServerException

    if not isinstance(e, InferenceServerException):
        return "transport"
    status = str(e.status() or "")
    if protocol == "grpc":
        name = status.rsplit(".", 1)[-1]
        if name in ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "UNIMPLEMENTED"):
            return "rejected"
        if name in ("UNAVAILABLE", "RESOURCE_EXHAUSTED"):
            return "unavailable"
        if name == "DEADLINE_EXCEEDED":
            return "timeout"
        if name in ("INTERNAL", "UNKNOWN"):
            return "server_error"
        return "transport" if not name else "server_error"
    if status in ("429", "503"):
        return "unavailable"
    if status.startswith("4"):
        return "rejected"
    if status.startswith("5"):
        return "server_error"
    return "transport"


NP_OF = {
    "INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "FP64": np.float64,
    "INT16": np.int16, "INT8": np.int8, "UINT8": np.uint8, "FP16": np.float16, "BOOL": np.bool_,
}


class Model:
    """What one model takes and gives, from its metadata."""

    def __init__(self, client, name):
        meta = client.get_model_metadata(name)
        if not isinstance(meta, dict):  # gRPC: a protobuf message
            from google.protobuf.json_format import MessageToDict

            meta = MessageToDict(meta, preserving_proto_field_name=True)
        self.name = name
        self.inputs = [(i["name"], i["datatype"], [int(d) for d in i["shape"]]) for i in meta["inputs"]]
        self.outputs = [(o["name"], o["datatype"]) for o in meta["outputs"]]
        names = {n for n, _, _ in self.inputs}
        outs = {n for n, _ in self.outputs}
        self.add_sub = names == {"INPUT0", "INPUT1"} and {"OUTPUT0", "OUTPUT1"} <= outs
        self.identity = names == {"INPUT0"} and "OUTPUT0" in outs

    def data(self, rng):
        arrays = {}
        for name, datatype, shape in self.inputs:
            shape = [d if d > 0 else 1 for d in shape]
            dtype = NP_OF.get(datatype)
            if dtype is None:
                raise ValueError(f"model {self.name}: input {name} of datatype {datatype} is not supported")
            if np.issubdtype(dtype, np.integer):
                arrays[name] = rng.integers(-1000, 1000, size=shape).astype(dtype)
            else:
                arrays[name] = rng.standard_normal(size=shape).astype(dtype)
        return arrays

    def check(self, inputs, result):
        """None when the answer is right; else (expected, what came)."""
        got = {name: result.as_numpy(name) for name, _ in self.outputs}
        for name, _ in self.outputs:
            if got[name] is None:
                return (f"output {name}", "no such output")
        if self.add_sub:
            for out, want in (("OUTPUT0", inputs["INPUT0"] + inputs["INPUT1"]),
                              ("OUTPUT1", inputs["INPUT0"] - inputs["INPUT1"])):
                if got[out].shape != want.shape or not np.array_equal(got[out], want):
                    return (f"{out} = {want.tolist()}", f"{out} = {got[out].tolist()}")
        elif self.identity:
            want = inputs["INPUT0"]
            if got["OUTPUT0"].shape != want.shape or not np.array_equal(got["OUTPUT0"], want):
                return (f"OUTPUT0 = {want.tolist()}", f"OUTPUT0 = {got['OUTPUT0'].tolist()}")
        return None


def load_stream(a, tc, models_of, index, deadline):
    """One closed-loop stream until the stop or the deadline."""
    rng = np.random.default_rng(a["seed"] + index)
    servers = a["servers"]
    clients = {s: tc.InferenceServerClient(url=s) for s in servers}
    n = index
    while not _stop.is_set() and (deadline is None or time.monotonic() < deadline):
        server = servers[n % len(servers)]
        models = models_of[server]
        model = models[(n // len(servers)) % len(models)]
        n += 1
        inputs = model.data(rng)
        request = []
        for name, datatype, _ in model.inputs:
            i = tc.InferInput(name, list(inputs[name].shape), datatype)
            i.set_data_from_numpy(inputs[name])
            request.append(i)
        base = {"scenario": "Load", "model": model.name, "server": server}
        started = time.monotonic()
        try:
            result = clients[server].infer(model.name, request)
        except Exception as e:  # every failure is a record, in the client's words
            emit({"type": "fail", **base, "error_kind": error_kind(a["protocol"], e), "message": str(e)})
            continue
        latency_us = int((time.monotonic() - started) * 1e6)
        wrong = model.check(inputs, result)
        if wrong is None:
            emit({"type": "pass", **base, "latencies_us": [latency_us]})
        else:
            emit({"type": "fail", **base, "latencies_us": [latency_us], "error_kind": "wrong_answer",
                  "expected": wrong[0], "message": wrong[1]})


def main():
    try:
        with open(os.environ["TRITON_STRESS_ASSIGNMENT"]) as f:
            a = json.load(f)
    except (KeyError, OSError, ValueError) as e:
        log(f"no assignment: {e}")
        return 2
    if a.get("interface") != INTERFACE:
        log(f"speaks interface {INTERFACE}, asked for {a.get('interface')}")
        return 3
    if a["protocol"] == "grpc":
        import tritonclient.grpc as tc
    else:
        import tritonclient.http as tc
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    emit({"type": "hello", "interface": INTERFACE, "client": f"tritonclient-python-{a['protocol']}",
          "version": importlib.metadata.version("tritonclient")})
    models_of = {}
    for server in a["servers"]:
        client = tc.InferenceServerClient(url=server)
        names = a["models"] or ["add_sub"]
        models_of[server] = [Model(client, name) for name in names]
    deadline = None if a.get("duration_s") is None else time.monotonic() + a["duration_s"]
    streams = [threading.Thread(target=load_stream, args=(a, tc, models_of, i, deadline), daemon=True)
               for i in range(max(1, a["concurrency"]))]
    for s in streams:
        s.start()
    for s in streams:
        s.join()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
