"""FAULTY add_sub: right in its first server process, OUTPUT1 = INPUT0 + INPUT1 in any later
one (a server that comes back from a kill or restart serving wrong answers).

The first server to load it writes its pid to `first_server_pid` in the model's directory; a
server with another pid is a later one. A read-only model directory leaves it always right.
"""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


def _first_life(model_dir):
    marker = os.path.join(model_dir, "first_server_pid")
    server = str(os.getppid())
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(server)
        return True
    except FileExistsError:
        with open(marker) as f:
            return f.read().strip() == server
    except OSError:
        return True


class TritonPythonModel:
    def initialize(self, args):
        self.wrong = not _first_life(args["model_repository"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = (a + b).astype(np.int32)
            # FAULT after a restart: adds instead of subtracting.
            out1 = (a + b if self.wrong else a - b).astype(np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", out0),
                        pb_utils.Tensor("OUTPUT1", out1),
                    ]
                )
            )
        return responses
