"""Identity that warms up: OUTPUT0 = INPUT0, and 200 MiB allocated on its first request.

A model that fills a cache once (a lookup table, a compiled graph) and keeps it: the server's
resident memory steps up on the first request and then stays flat. Not a leak; the healthy twin
of models-faulty/identity_leaky for the driver's memory-growth finding.
"""

import triton_python_backend_utils as pb_utils

WARMUP_BYTES = 200 << 20

_cache = []


class TritonPythonModel:
    def execute(self, requests):
        if not _cache:
            # Touched, so it is resident.
            _cache.append(bytearray(b"w" * WARMUP_BYTES))
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)])
            )
        return responses
