"""all_types (Triton python backend): every <T>_OUT is <T>_IN, for every Triton datatype.

The tensors are passed through as they came (pb_utils.Tensor keeps datatype, shape and
bytes), so no datatype needs a numpy equivalent (BF16 has none).
"""

import triton_python_backend_utils as pb_utils

NAMES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "BF16", "FP32", "FP64", "BYTES",
]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in NAMES:
                tensor = pb_utils.get_input_tensor_by_name(request, name + "_IN")
                outputs.append(pb_utils.Tensor.from_dlpack(name + "_OUT", tensor.to_dlpack())
                               if name == "BF16" else
                               pb_utils.Tensor(name + "_OUT", tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
