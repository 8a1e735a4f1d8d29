"""decoupled_repeat (Triton python backend, decoupled): for IN INT32 [n] it sends n responses,
response k = (OUT = [IN[k]] INT32, IDX = [k] UINT32), `response_delay_ms` (config parameter)
apart, then the COMPLETE_FINAL flag on its own (an empty final response).

Each request is answered from its own thread, so execute() returns at once and one instance
serves many streams (as upstream's examples/decoupled/repeat_model.py does).

The faulty twins in models-faulty/ link to this file; the config parameter "fault" picks what
goes wrong: none, no_final (the final flag never comes: the sender is kept, so the backend
never completes the request on its own), wrong_shape (the second response's OUT has 2
elements), error (the second response is an error).
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config["parameters"]
        self.delay_s = int(params["response_delay_ms"]["string_value"]) / 1000.0
        self.fault = params["fault"]["string_value"]
        # no_final: senders that are never completed (kept so they are not garbage-collected).
        self.unfinished = []
        self.lock = threading.Lock()
        self.inflight = 0
        self.idle = threading.Condition(self.lock)

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            sender = request.get_response_sender()
            with self.lock:
                self.inflight += 1
            threading.Thread(target=self.respond, args=(sender, values.copy()), daemon=True).start()
        return None

    def respond(self, sender, values):
        try:
            for k, v in enumerate(values):
                if self.delay_s:
                    time.sleep(self.delay_s)
                if k == 1 and self.fault == "error":
                    sender.send(
                        pb_utils.InferenceResponse(
                            output_tensors=[],
                            error=pb_utils.TritonError("decoupled_repeat: injected error"),
                        )
                    )
                    continue
                out = np.array([v], dtype=np.int32)
                if k == 1 and self.fault == "wrong_shape":
                    out = np.array([v, v], dtype=np.int32)
                idx = np.array([k], dtype=np.uint32)
                sender.send(
                    pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUT", out), pb_utils.Tensor("IDX", idx)]
                    )
                )
            if self.fault == "no_final":
                with self.lock:
                    self.unfinished.append(sender)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.inflight -= 1
                self.idle.notify_all()

    def finalize(self):
        # Let every response thread finish before the model is unloaded.
        with self.lock:
            self.idle.wait_for(lambda: self.inflight == 0, timeout=10)
