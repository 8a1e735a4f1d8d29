"""FAULTY identity: answers OUTPUT0 = INPUT0 for 40 requests, then hangs in execute for good.

A server whose inference path hangs (a backend stuck on a lock, a deadlocked custom op, a
process stuck in its own crash handler): the process runs, /v2/health/live and ready answer,
every later request waits in the model's queue and none ends. A stress client sees its calls
go unanswered, not an error.
"""

import threading

import triton_python_backend_utils as pb_utils

HANG_AFTER = 40


class TritonPythonModel:
    def initialize(self, args):
        self.requests = 0
        self.never = threading.Event()

    def execute(self, requests):
        self.requests += len(requests)
        if self.requests > HANG_AFTER:
            self.never.wait()  # FAULT: never returns
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())
                ]
            )
            for r in requests
        ]
