"""Running-sum sequence model (Triton python backend).

Used by `sequence_nobatch` (max_batch_size 0, direct strategy, 2 instances),
`sequence_batch` (max_batch_size 4, oldest strategy, 1 instance) and the faulty
`models-faulty/sequence_faulty`, whose config sets `output_offset` to 1; the other
folders link to this file.

Contract (see models/README.md):
  INPUT  int32 [1]   (batched model: [1, 1] per request)
  OUTPUT int32 [1]   running sum of INPUT over this correlation id since its
                     START request, inclusive (START resets the sum to 0).
  Control inputs filled in by Triton's sequence batcher:
  START / END / READY int32 0|1, CORRID uint64 (the request's sequence_id).

State lives here, in a dict keyed by CORRID, and is dropped on END. Triton keeps
a sequence on one model instance for its whole life, so per-instance state is
correct for both strategies. Requests in one execute() may belong to different
sequences (oldest strategy); they are handled one by one, in order.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

# Added to every OUTPUT: the config parameter `output_offset`, 0 unless set. Only the
# faulty twin (models-faulty/sequence_faulty) sets it, to "add one too many".
DEFAULT_OUTPUT_OFFSET = 0

# The config parameter `forget_start_every` (0: never): every Nth sequence started on an
# instance has its second step rejected as if it had no START, in tritonserver's own words
# after answering its START. Only models-faulty/sequence_forgets_start sets it: the server
# contradicting an answer it gave (what 2.51's sequence-batcher reaper race does).
DEFAULT_FORGET_START_EVERY = 0


def _wrap_int32(value):
    """Python int -> the int32 value two's-complement arithmetic would give."""
    return ((value + 2**31) % 2**32) - 2**31


class TritonPythonModel:
    def initialize(self, args):
        self._name = args["model_name"]
        config = json.loads(args["model_config"])
        self._output_offset = int(
            config.get("parameters", {})
            .get("output_offset", {})
            .get("string_value", DEFAULT_OUTPUT_OFFSET)
        )
        self._forget_start_every = int(
            config.get("parameters", {})
            .get("forget_start_every", {})
            .get("string_value", DEFAULT_FORGET_START_EVERY)
        )
        self._started = 0
        self._forgotten = set()
        idle_us = int(
            config.get("sequence_batching", {}).get(
                "max_sequence_idle_microseconds", 3000000
            )
        )
        # When a sequence idles out, Triton forgets it without telling the model
        # (no END reaches us). Drop such state ourselves so a soak test with
        # abandoned sequences does not grow this dict forever. Anything unused
        # for twice the idle timeout is certainly gone from Triton's side.
        self._stale_after_s = 2.0 * idle_us / 1e6 + 1.0
        self._state = {}  # corrid (int) -> [running_sum (int), last_used (monotonic s)]
        self._last_sweep = time.monotonic()

    def execute(self, requests):
        now = time.monotonic()
        responses = []
        for request in requests:
            try:
                responses.append(self._handle(request, now))
            except Exception as exc:  # report per request, keep serving others
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[],
                        error=pb_utils.TritonError(f"{self._name}: {exc}"),
                    )
                )
        if now - self._last_sweep > 1.0:
            self._sweep(now)
        return responses

    def _handle(self, request, now):
        value_tensor = pb_utils.get_input_tensor_by_name(request, "INPUT")
        if value_tensor is None:
            raise ValueError("missing input INPUT")
        values = value_tensor.as_numpy()
        flat = values.reshape(-1)
        start = self._control(request, "START")
        end = self._control(request, "END")
        ready = self._control(request, "READY")
        corrid = self._control(request, "CORRID")

        out = np.zeros(flat.shape, dtype=np.int32)
        # One row per sequence; in practice every request carries exactly one.
        for i in range(flat.shape[0]):
            if not ready[i]:
                continue  # empty batch slot: nothing to compute
            cid = int(corrid[i])
            if start[i]:
                total = 0
                self._started += 1
                if self._forget_start_every and self._started % self._forget_start_every == 0:
                    self._forgotten.add(cid)
            elif cid in self._forgotten:
                # FAULT (only with forget_start_every): the START just answered is forgotten.
                self._forgotten.discard(cid)
                self._state.pop(cid, None)
                raise ValueError(
                    f"inference request for sequence {cid} to model '{self._name}' must "
                    "specify the START flag on the first request of the sequence"
                )
            else:
                entry = self._state.get(cid)
                if entry is None:
                    raise ValueError(
                        f"no running sum for correlation id {cid} "
                        "(sequence never started on this instance, or expired)"
                    )
                total = entry[0]
            total = _wrap_int32(total + int(flat[i]))
            if end[i]:
                self._state.pop(cid, None)
            else:
                self._state[cid] = [total, now]
            out[i] = _wrap_int32(total + self._output_offset)

        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("OUTPUT", out.reshape(values.shape))]
        )

    @staticmethod
    def _control(request, name):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            raise ValueError(f"missing control input {name}")
        return tensor.as_numpy().reshape(-1)

    def _sweep(self, now):
        self._last_sweep = now
        stale = [c for c, (_, used) in self._state.items() if now - used > self._stale_after_s]
        for cid in stale:
            del self._state[cid]

    def finalize(self):
        self._state.clear()
