"""add_sub (Triton python backend): the classic Triton example model.

INPUT0, INPUT1 int32 [16] -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
(int32, wrapping on overflow like the C++ example).

The faulty twins in models-faulty/ link to this file; the config parameter "fault" picks what
goes wrong: none (no parameter: this model), sum (OUTPUT1 = INPUT0 + INPUT1: add_sub_wrong),
sum_after_restart (right in its first server process, the sum in any later one started by the
same parent: add_sub_wrong_after_restart, a server that comes back from a kill or restart
serving wrong answers).

For sum_after_restart the first server to load the model, per model directory and per the
process that started the server (the driver), writes its pid to a marker file in the temporary
directory; a server with another pid is a later one. A new driver run, or a new container,
starts from a first life again.
"""

import hashlib
import json
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


def _first_life(model_name, model_dir):
    server = str(os.getppid())
    key = hashlib.sha256(model_dir.encode()).hexdigest()[:16]
    marker = os.path.join(
        tempfile.gettempdir(),
        f"{model_name}-{key}-{_parent_of(server)}",
    )
    # The marker appears with its content (a hard link of a file already written): the
    # server's instances load at once, and one that found an empty marker, created but not
    # yet written by another, took itself for a later life.
    written = f"{marker}.{os.getpid()}"
    try:
        with open(written, "w") as f:
            f.write(server)
        os.link(written, marker)
        return True
    except FileExistsError:
        with open(marker) as f:
            return f.read().strip() == server
    except OSError:
        return True
    finally:
        try:
            os.unlink(written)
        except OSError:
            pass


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        fault = params.get("fault", {}).get("string_value", "none")
        if fault == "none":
            self.sum_for_difference = False
        elif fault == "sum":
            self.sum_for_difference = True
        elif fault == "sum_after_restart":
            self.sum_for_difference = not _first_life(
                args["model_name"], args["model_repository"]
            )
        else:
            raise pb_utils.TritonModelException(f"unknown fault {fault!r}")

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            # numpy int32 array arithmetic wraps silently on overflow.
            out0 = (a + b).astype(np.int32)
            # A faulty twin adds instead of subtracting.
            out1 = (a + b if self.sum_for_difference else a - b).astype(np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", out0),
                        pb_utils.Tensor("OUTPUT1", out1),
                    ]
                )
            )
        return responses
