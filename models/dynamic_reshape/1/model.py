"""dynamic_reshape (Triton python backend): DYN_OUT = DYN (+ BIAS when given), RESHAPED_OUT =
RESHAPED as the model sees it (the config reshapes [2,3] to [6])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            dyn = pb_utils.get_input_tensor_by_name(request, "DYN").as_numpy()
            bias = pb_utils.get_input_tensor_by_name(request, "BIAS")
            if bias is not None:
                dyn = (dyn + bias.as_numpy()[0]).astype(np.float32)
            reshaped = pb_utils.get_input_tensor_by_name(request, "RESHAPED").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("DYN_OUT", dyn),
                        pb_utils.Tensor("RESHAPED_OUT", reshaped),
                    ]
                )
            )
        return responses
