"""FAULTY identity: OUTPUT0 = INPUT0 (right), but every request leaks 1 MiB.

A memory leak in a model: the answers stay right, only the server's resident memory grows
(capped at 400 MiB so a long test cannot exhaust the machine). What the driver's memory-growth
finding must catch.
"""

import triton_python_backend_utils as pb_utils

LEAK_BYTES = 1 << 20
LEAK_CAP = 400

_leaked = []


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if len(_leaked) < LEAK_CAP:
                # FAULT: kept forever, and touched so it is resident.
                _leaked.append(bytearray(b"x" * LEAK_BYTES))
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)])
            )
        return responses
