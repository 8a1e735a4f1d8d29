"""FAULTY sequence model without a sequence batcher (Triton python backend).

Deliberately wrong twin of models/sequence_nobatch: config.pbtxt has no
sequence_batching, so the sequence_id / sequence_start / sequence_end request
parameters are not checked by Triton and no control inputs reach the model.
Every request is answered on its own: OUTPUT = INPUT (int32 [1]), which is the
right running sum only for a one-request sequence.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", value.astype(np.int32))]
                )
            )
        return responses
