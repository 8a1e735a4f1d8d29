"""Identity with a configurable delay (Triton python backend).

INPUT0 int32 [-1] -> OUTPUT0, identical. Before answering, execute() sleeps:
  - the per-request parameter `delay_ms` (integer milliseconds, sent as a
    request parameter: HTTP JSON "parameters": {"delay_ms": 50}, gRPC
    ModelInferRequest.parameters int64_param/string_param), else
  - the model config parameter `execute_delay_ms` (200 in config.pbtxt).
The sleep blocks this instance (4 instances = at most 4 concurrent requests
in execute), which is what latency / queueing / timeout tests need.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_DELAY_MS = 600_000  # refuse anything longer than 10 minutes


def _parse_delay(value, where):
    """Accept an int or a decimal string; reject bools, negatives, huge values."""
    if isinstance(value, bool):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        if not value.lstrip("-").isdigit():
            raise ValueError(f"{where} must be an integer, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    if value < 0 or value > MAX_DELAY_MS:
        raise ValueError(f"{where} must be in 0..{MAX_DELAY_MS}, got {value}")
    return value


class TritonPythonModel:
    def initialize(self, args):
        self._name = args["model_name"]
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        raw = params.get("execute_delay_ms", {}).get("string_value", "0")
        self._default_delay_ms = _parse_delay(raw, "config parameter execute_delay_ms")

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                delay_ms = self._default_delay_ms
                params = json.loads(request.parameters() or "{}")
                if "delay_ms" in params:
                    delay_ms = _parse_delay(params["delay_ms"], "request parameter delay_ms")
                if delay_ms:
                    time.sleep(delay_ms / 1000.0)
                data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUTPUT0", data.astype(np.int32))]
                    )
                )
            except Exception as exc:
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[],
                        error=pb_utils.TritonError(f"{self._name}: {exc}"),
                    )
                )
        return responses
