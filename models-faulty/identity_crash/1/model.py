"""FAULTY identity: answers OUTPUT0 = INPUT0 for 49 requests, then its process exits.

A model whose backend dies mid-run (a segfault in a custom op, an OOM kill of the stub): the
python backend's stub process is gone, and tritonserver 2.51 answers every later request to the
instance "Stub process 'identity_crash_0_0' is not healthy." while the server itself stays up
(and logs nothing of it at the default verbosity).
"""

import os

import triton_python_backend_utils as pb_utils

CRASH_AT = 50


class TritonPythonModel:
    def initialize(self, args):
        self.requests = 0

    def execute(self, requests):
        self.requests += len(requests)
        if self.requests >= CRASH_AT:
            os._exit(1)  # FAULT: the stub process dies
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())
                ]
            )
            for r in requests
        ]
