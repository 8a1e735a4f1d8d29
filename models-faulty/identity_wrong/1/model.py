"""FAULTY identity: OUTPUT0 = INPUT0 + 1, and no delay at all.

Deliberately wrong twin of models/identity_delay: same tensors, but it ignores
execute_delay_ms / the delay_ms request parameter and answers at once with
every element off by one (int32, wrapping).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            wrong = (data.astype(np.int32) + np.int32(1)).astype(np.int32)  # FAULT: + 1
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", wrong)])
            )
        return responses
