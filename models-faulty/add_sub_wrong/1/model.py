"""FAULTY add_sub: OUTPUT1 = INPUT0 + INPUT1 (should be INPUT0 - INPUT1).

Deliberately wrong twin of models/add_sub; OUTPUT0 is still correct, so a
checker must look at both outputs to notice.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = (a + b).astype(np.int32)
            out1 = (a + b).astype(np.int32)  # FAULT: adds instead of subtracting
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", out0),
                        pb_utils.Tensor("OUTPUT1", out1),
                    ]
                )
            )
        return responses
