"""Toy image classifier by mean colour (Triton python backend).

INPUT  fp32 [B, 3, 224, 224]  NCHW, RGB, pixel value (0..255) minus the channel
                              mean MEAN_RGB (the usual VGG/ResNet preprocessing).
OUTPUT fp32 [B, K]            softmax(-distance / SCALE) over K reference colours.

The model adds the mean back, averages each image to one RGB colour, and scores
the reference colours by Euclidean distance. config.pbtxt names labels.txt as the
output's label file, so Triton's classification extension (request parameter
"classification": N on the output) answers "score:index:label" strings.
labels.txt must list REFERENCE_COLOURS' names in this order (the faulty copy in
models-faulty/image_classifier_wrong deliberately does not).

The pure-numpy part (score_images) is importable without Triton, for
scripts/make-test-images.py --check.
"""

import numpy as np

try:  # present inside Triton's python backend stub only
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by a plain script for score_images()
    pb_utils = None

MEAN_RGB = np.array([123.68, 116.78, 103.94], dtype=np.float32)

# (label, RGB) in output index order; must match labels.txt line by line.
REFERENCE_COLOURS = [
    ("red", (220, 30, 30)),
    ("orange", (245, 140, 20)),
    ("yellow", (245, 225, 40)),
    ("green", (40, 170, 60)),
    ("cyan", (40, 210, 220)),
    ("blue", (40, 90, 220)),
    ("purple", (130, 50, 170)),
    ("white", (245, 245, 245)),
    ("black", (15, 15, 15)),
    ("gray", (128, 128, 128)),
]
LABELS = [name for name, _ in REFERENCE_COLOURS]
COLOURS = np.array([rgb for _, rgb in REFERENCE_COLOURS], dtype=np.float32)  # [K, 3]
# Distance (in 0..255 RGB units) per factor e of score ratio: 20 means a colour
# 20 units closer is e times more likely.
SCALE = 20.0


def score_images(x):
    """x: float32 [B, 3, H, W] mean-subtracted RGB -> float32 [B, K] scores."""
    x = np.asarray(x, dtype=np.float32)
    mean_colour = x.mean(axis=(2, 3)) + MEAN_RGB  # [B, 3], back in 0..255
    dist = np.linalg.norm(mean_colour[:, None, :] - COLOURS[None, :, :], axis=2)  # [B, K]
    logits = -dist / SCALE
    logits -= logits.max(axis=1, keepdims=True)  # numerically stable softmax
    e = np.exp(logits)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            # With dynamic batching each request still arrives on its own,
            # holding its own [b, 3, 224, 224] batch.
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", score_images(x))]
                )
            )
        return responses
