"""FAULTY identity: OUTPUT0 = INPUT0 (right), but the server's memory grows as long as it serves.

A memory leak in a model: the answers stay right, only the server's resident memory grows, at a
steady 16 MiB a second from its first request whatever the request rate (capped at 400 MiB, so a
long test cannot exhaust the machine). What the driver's memory-growth finding must catch: growth
that goes on through the load's steady state, not a warm-up step.
"""

import time

import triton_python_backend_utils as pb_utils

LEAK_BYTES_PER_S = 16 << 20
LEAK_CAP = 400 << 20
CHUNK = 1 << 20

_leaked = []
_first_request = None


class TritonPythonModel:
    def execute(self, requests):
        global _first_request
        now = time.monotonic()
        if _first_request is None:
            _first_request = now
        due = min(LEAK_CAP, int((now - _first_request) * LEAK_BYTES_PER_S))
        while len(_leaked) * CHUNK < due:
            # FAULT: kept forever, and touched so it is resident.
            _leaked.append(bytearray(b"x" * CHUNK))
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)])
            )
        return responses
