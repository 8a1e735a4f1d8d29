#!/usr/bin/env python3
"""A foreign client of triton-stress built on NVIDIA's official `tritonclient` (gRPC or HTTP).

It speaks interface 1 of docs/clients.md: it reads its assignment from the JSON file named by
TRITON_STRESS_ASSIGNMENT, writes a `hello` and then one record per test on stdout, and logs on
stderr. `concurrency` streams each run tests until the duration is over or SIGTERM (back to
back, or with a `rate` at fixed intended times, latency from the intended time), picking a
scenario by weight (`--scenarios Load:8,SequenceValid:1,Timeout:1`; default `Load`) and a
server in turn. `--api sync` (default): a thread per stream on tritonclient's blocking client;
`--api asyncio`: a task per stream on one event loop, on tritonclient's asyncio client
(`tritonclient.grpc.aio`, `tritonclient.http.aio`). Every answer is checked:

  * Load: one inference of one of the assignment's models (round robin): add_sub-like models
    (INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference) and identity-like ones (INPUT0 ->
    OUTPUT0) by value, any other by its outputs' presence;
  * SequenceValid: a sequence of 3 to 6 steps on a running-sum model (`--sequence-model`,
    default sequence_nobatch: OUTPUT = the sum of INPUT since START), with a correlation id
    from the member's block, START on the first step and END on the last, each sum checked;
  * Timeout (gRPC): a request to a model that answers late (`--timeout-model`, default
    identity_delay, 200 ms) with a 50 ms client deadline: passes when the client times out.

Exit 0; 3 on an interface it does not speak; 2 on a bad assignment or arguments.
"""

import argparse
import asyncio
import importlib.metadata
import json
import os
import random
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


def infer_inputs(tc, model, inputs):
    request = []
    for name, datatype, _ in model.inputs:
        i = tc.InferInput(name, list(inputs[name].shape), datatype)
        i.set_data_from_numpy(inputs[name])
        request.append(i)
    return request


class Stream:
    """One closed-loop stream: its clients, its random draws and its correlation ids."""

    def __init__(self, a, args, tc, models_of, index):
        self.a, self.args, self.tc, self.models_of = a, args, tc, models_of
        self.rng = np.random.default_rng(a["seed"] + index)
        self.pick = random.Random(a["seed"] * 7919 + index)
        self.n = index
        ids = a.get("correlation_ids") or {"first": 1 + index * 1_000_000, "count": 1_000_000}
        width = max(1, ids["count"] // max(1, a["concurrency"]))
        self.ids = range(ids["first"] + index * width, ids["first"] + (index + 1) * width)
        self.next_id = 0
        # Open loop: when the current test was meant to start (None: closed loop).
        self.intended = None

    def correlation_id(self):
        cid = self.ids[self.next_id % len(self.ids)]
        self.next_id += 1
        return cid

    def server(self):
        servers = self.a["servers"]
        self.n += 1
        return servers[self.n % len(servers)]

    def failed(self, base, e, latencies=()):
        emit({"type": "fail", **base, "latencies_us": list(latencies),
              "error_kind": error_kind(self.a["protocol"], e), "message": str(e)})

    def load(self):
        server = self.server()
        models = self.models_of[server]
        model = models[(self.n // len(self.a["servers"])) % len(models)]
        inputs = model.data(self.rng)
        base = {"scenario": "Load", "model": model.name, "server": server}
        started = self.intended if self.intended is not None else time.monotonic()
        try:
            result = yield Call(server, model.name, infer_inputs(self.tc, model, inputs))
        except Exception as e:  # every failure is a record, in the client's words
            return self.failed(base, e)
        latency_us = int((time.monotonic() - started) * 1e6)
        wrong = model.check(inputs, result)
        if wrong is None:
            emit({"type": "pass", **base, "latencies_us": [latency_us]})
        else:
            emit({"type": "fail", **base, "latencies_us": [latency_us], "error_kind": "wrong_answer",
                  "expected": wrong[0], "message": wrong[1]})

    def sequence(self):
        server, model = self.server(), self.args.sequence_model
        cid = self.correlation_id()
        base = {"scenario": "SequenceValid", "model": model, "server": server, "correlation_id": cid}
        steps = self.pick.randint(3, 6)
        total, latencies = 0, []
        for step in range(steps):
            value = self.pick.randint(-100, 100)
            total += value
            i = self.tc.InferInput("INPUT", [1], "INT32")
            i.set_data_from_numpy(np.array([value], dtype=np.int32))
            started = time.monotonic()
            try:
                result = yield Call(server, model, [i], sequence_id=cid, sequence_start=step == 0,
                                    sequence_end=step == steps - 1)
            except Exception as e:
                return self.failed(base, e, latencies)
            latencies.append(int((time.monotonic() - started) * 1e6))
            got = result.as_numpy("OUTPUT")
            if got is None or got.reshape(-1).tolist() != [total]:
                shown = None if got is None else got.reshape(-1).tolist()
                return emit({"type": "fail", **base, "latencies_us": latencies,
                             "error_kind": "wrong_answer", "expected": f"OUTPUT = [{total}] at step {step + 1}",
                             "message": f"OUTPUT = {shown}"})
        emit({"type": "pass", **{k: v for k, v in base.items() if k != "correlation_id"},
              "latencies_us": latencies})

    def timeout(self):
        server, model = self.server(), self.args.timeout_model
        base = {"scenario": "Timeout", "model": model, "server": server}
        if self.a["protocol"] != "grpc":
            return emit({"type": "skip", "scenario": "Timeout"})
        i = self.tc.InferInput("INPUT0", [4], "INT32")
        i.set_data_from_numpy(np.arange(4, dtype=np.int32))
        try:
            yield Call(server, model, [i], client_timeout=0.05)
        except Exception as e:
            if error_kind("grpc", e) == "timeout":
                return emit({"type": "pass", **base})
            return self.failed(base, e)
        emit({"type": "fail", **base, "error_kind": "protocol", "expected": "no answer within 50 ms",
              "message": "an answer came before the client's deadline"})


class Call:
    """An inference a scenario asks of its stream's client: the scenarios are generators that
    yield these and get the result (or the client's exception) back, so that one scenario's
    code runs on the blocking client and on the asyncio one alike."""

    def __init__(self, server, model, inputs, **options):
        self.server, self.model, self.inputs, self.options = server, model, inputs, options


def run_sync(test, clients):
    """Runs one test (a scenario's generator) on blocking clients."""
    try:
        call = next(test)
        while True:
            try:
                result = clients[call.server].infer(call.model, call.inputs, **call.options)
            except Exception as e:
                call = test.throw(e)
            else:
                call = test.send(result)
    except StopIteration:
        pass


async def run_async(test, clients):
    """Runs one test (a scenario's generator) on asyncio clients."""
    try:
        call = next(test)
        while True:
            try:
                result = await clients[call.server].infer(call.model, call.inputs, **call.options)
            except Exception as e:
                call = test.throw(e)
            else:
                call = test.send(result)
    except StopIteration:
        pass


class Schedule:
    """When a stream's tests start: back to back (closed loop), or with an assignment's
    `rate`, each stream at its share of it, at fixed intended times (a Load test's latency
    counts from its intended time: a late start is the client's lag, not hidden)."""

    def __init__(self, a, deadline):
        self.gap = a["concurrency"] / a["rate"] if a.get("rate") else None
        self.deadline = deadline
        self.next_at = time.monotonic()

    def going(self):
        return not _stop.is_set() and (self.deadline is None or time.monotonic() < self.deadline)

    def wait(self, stream):
        """How long to wait before the next test; sets the stream's intended start."""
        if self.gap is None:
            return 0.0
        stream.intended = self.next_at
        self.next_at += self.gap
        return max(0.0, stream.intended - time.monotonic())


def scenario_of(stream, mix):
    scenarios = {"Load": stream.load, "SequenceValid": stream.sequence, "Timeout": stream.timeout}
    names, weights = zip(*mix)
    return scenarios[stream.pick.choices(names, weights)[0]]()


def run_stream(a, args, tc, models_of, index, deadline, mix):
    """One stream's tests on a blocking client of each server (a thread's)."""
    stream = Stream(a, args, tc, models_of, index)
    clients = {s: tc.InferenceServerClient(url=s) for s in a["servers"]}
    schedule = Schedule(a, deadline)
    while schedule.going():
        time.sleep(schedule.wait(stream))
        run_sync(scenario_of(stream, mix), clients)


async def run_streams_async(a, args, tc, aio, models_of, deadline, mix):
    """Every stream as a task of one event loop, each on an asyncio client of each server."""

    async def one(index):
        stream = Stream(a, args, tc, models_of, index)
        clients = {s: aio.InferenceServerClient(url=s) for s in a["servers"]}
        schedule = Schedule(a, deadline)
        try:
            while schedule.going():
                await asyncio.sleep(schedule.wait(stream))
                await run_async(scenario_of(stream, mix), clients)
        finally:
            for c in clients.values():
                await c.close()

    await asyncio.gather(*(one(i) for i in range(max(1, a["concurrency"]))))


def parse_mix(text):
    mix = []
    for part in text.split(","):
        name, _, weight = part.partition(":")
        if name not in ("Load", "SequenceValid", "Timeout"):
            raise ValueError(f"unknown scenario {name!r} (Load, SequenceValid, Timeout)")
        mix.append((name, int(weight or 1)))
    return mix


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="Load", help="NAME[:WEIGHT],... (default Load)")
    parser.add_argument("--sequence-model", default="sequence_nobatch")
    parser.add_argument("--timeout-model", default="identity_delay")
    parser.add_argument("--api", choices=["sync", "asyncio"], default="sync")
    args = parser.parse_args()
    try:
        mix = parse_mix(args.scenarios)
        with open(os.environ["TRITON_STRESS_ASSIGNMENT"]) as f:
            a = json.load(f)
    except (KeyError, OSError, ValueError) as e:
        log(f"bad assignment or arguments: {e}")
        return 2
    if a.get("interface") != INTERFACE:
        log(f"speaks interface {INTERFACE}, asked for {a.get('interface')}")
        return 3
    if a["protocol"] == "grpc":
        import tritonclient.grpc as tc
    else:
        import tritonclient.http as tc
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    api = "" if args.api == "sync" else f"-{args.api}"
    emit({"type": "hello", "interface": INTERFACE, "client": f"tritonclient-python-{a['protocol']}{api}",
          "version": importlib.metadata.version("tritonclient")})
    models_of = {}
    for server in a["servers"]:
        client = tc.InferenceServerClient(url=server)
        models_of[server] = [Model(client, name) for name in (a["models"] or ["add_sub"])]
    deadline = None if a.get("duration_s") is None else time.monotonic() + a["duration_s"]
    if args.api == "asyncio":
        if a["protocol"] == "grpc":
            import tritonclient.grpc.aio as aio
        else:
            import tritonclient.http.aio as aio
        asyncio.run(run_streams_async(a, args, tc, aio, models_of, deadline, mix))
        log("done")
        return 0
    streams = [threading.Thread(target=run_stream, args=(a, args, tc, models_of, i, deadline, mix),
                                daemon=True)
               for i in range(max(1, a["concurrency"]))]
    for s in streams:
        s.start()
    for s in streams:
        s.join()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
