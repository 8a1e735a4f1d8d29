"""FAULTY add_sub: right in its first server process, OUTPUT1 = INPUT0 + INPUT1 in any later
one started by the same parent (a server that comes back from a kill or restart serving wrong
answers).

The first server to load it, per model directory and per the process that started the server
(the driver), writes its pid to a marker file in the temporary directory; a server with another
pid is a later one. A new driver run, or a new container, starts from a first life again.
"""

import hashlib
import os
import tempfile

import numpy as np
import triton_python_backend_utils as pb_utils


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            return f.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return "unknown"


def _first_life(model_dir):
    server = str(os.getppid())
    key = hashlib.sha256(model_dir.encode()).hexdigest()[:16]
    marker = os.path.join(
        tempfile.gettempdir(),
        f"add_sub_wrong_after_restart-{key}-{_parent_of(server)}",
    )
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
