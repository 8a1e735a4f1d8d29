"""text_vector (Triton python backend): OUTPUT = 2 * INPUT (FP32 [4]), TEXT = [sum, "ok"]
(BYTES [2]) per batch row.

The faulty twins in models-faulty/ link to this file; the config parameter "fault" picks
what goes wrong: none, wrong_shape (OUTPUT has 5 columns), wrong_datatype (OUTPUT is FP64),
missing_output (no TEXT), extra_output (an undeclared DEBUG), nondeterministic (OUTPUT gets
random noise, so a repeated input gives other bytes).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.fault = config["parameters"]["fault"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = (x * 2).astype(np.float32)
            text = np.array(
                [[("%.2f" % row.sum()).encode(), b"ok"] for row in x], dtype=np.object_
            )
            if self.fault == "wrong_shape":
                out = np.concatenate([out, np.zeros((out.shape[0], 1), np.float32)], axis=1)
            elif self.fault == "wrong_datatype":
                out = out.astype(np.float64)
            elif self.fault == "nondeterministic":
                out = out + np.random.random(out.shape).astype(np.float32)
            tensors = [pb_utils.Tensor("OUTPUT", out)]
            if self.fault != "missing_output":
                tensors.append(pb_utils.Tensor("TEXT", text))
            if self.fault == "extra_output":
                tensors.append(pb_utils.Tensor("DEBUG", np.zeros(1, np.int32)))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
