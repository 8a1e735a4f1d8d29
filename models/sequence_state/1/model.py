"""Running sum per sequence (Triton python backend); the contract is in config.pbtxt.

The faulty twins in models-faulty/ link to this file; the config parameter "fault" picks
what goes wrong:
  none        as documented
  no_reset    START does not reset the running sum (and END does not drop it), so a
              sequence's TOTAL drifts by everything the instance summed before
  step_shape  from step 2 on STEP has shape [2] instead of [1]

Direct strategy with max_batch_size 0: an instance holds one sequence at a time, so the
state is the instance's.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _flag(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        raise ValueError(f"missing control input {name}")
    return bool(tensor.as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self._name = args["model_name"]
        config = json.loads(args["model_config"])
        self._fault = config["parameters"]["fault"]["string_value"]
        self._total = np.zeros(2, dtype=np.float32)
        self._step = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._handle(request))
            except Exception as exc:  # report per request, keep serving others
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[],
                        error=pb_utils.TritonError(f"{self._name}: {exc}"),
                    )
                )
        return responses

    def _handle(self, request):
        # Triton feeds the declared implicit state; its absence means no sequence batcher.
        if pb_utils.get_input_tensor_by_name(request, "ACC_IN") is None:
            raise ValueError("missing implicit state input ACC_IN")
        if not _flag(request, "READY"):
            raise ValueError("READY is false for a request")
        delta = pb_utils.get_input_tensor_by_name(request, "DELTA").as_numpy()
        if _flag(request, "START"):
            if self._fault != "no_reset":
                self._total = np.zeros(2, dtype=np.float32)
            self._step = 0
        self._total = (self._total + delta.reshape(2)).astype(np.float32)
        self._step += 1
        step = np.array([self._step], dtype=np.int32)
        if self._fault == "step_shape" and self._step >= 2:
            step = np.array([self._step, self._step], dtype=np.int32)
        outputs = [
            pb_utils.Tensor("TOTAL", self._total.copy()),
            pb_utils.Tensor("STEP", step),
        ]
        if _flag(request, "END") and self._fault != "no_reset":
            self._total = np.zeros(2, dtype=np.float32)
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def finalize(self):
        pass
