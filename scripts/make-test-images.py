#!/usr/bin/env python3
"""Generate, check and encode the test images for models/image_classifier.

Only numpy + zlib (no Pillow). Images are 160x120 RGB 8-bit PNGs, deliberately
not 224x224 so that the client's resize step is exercised.

  make-test-images.py                 write worker/assets/images/{tomato,sky}.png
  make-test-images.py --check         decode the committed PNGs, preprocess them like
                                      the client (bilinear resize to 224x224, RGB,
                                      minus mean, CHW), score them with the model's
                                      own numpy code and require a clear win
  make-test-images.py --request IMG   print an HTTP/JSON v2 inference request for
                                      image_classifier with classification on OUTPUT

Expected labels: tomato.png -> red, sky.png -> blue.
"""

import argparse
import importlib.util
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
IMAGE_DIR = REPO / "worker" / "assets" / "images"
WIDTH, HEIGHT = 160, 120
EXPECTED = {"tomato.png": "red", "sky.png": "blue"}
# Winner's score must beat the runner-up by this factor, under every resize
# method tried, for --check to pass.
MIN_RATIO = 3.0


# ----------------------------------------------------------------- PNG I/O
def write_png(path, rgb):
    """rgb: uint8 [H, W, 3] -> 8-bit truecolour PNG (deterministic bytes)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter 0 per row

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9))
    png += chunk(b"IEND", b"")
    Path(path).write_bytes(png)


def read_png(path):
    """8-bit RGB/RGBA non-interlaced PNG -> uint8 [H, W, 3] (all five filters)."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"{path}: only 8-bit RGB/RGBA non-interlaced PNGs supported")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        cur = np.zeros(stride, dtype=np.int32)
        for x in range(stride):
            a = cur[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) // 2
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            else:
                raise ValueError(f"{path}: bad filter {f}")
            cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)[:, :, :3]


# ----------------------------------------------------------------- pictures
def _grid():
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    return x + 0.5, y + 0.5


def _ellipse(x, y, cx, cy, rx, ry):
    return ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2


def make_tomato():
    """A shaded red tomato with a green calyx on a dark red cloth."""
    x, y = _grid()
    img = np.zeros((HEIGHT, WIDTH, 3), dtype=np.float32)
    # cloth: dark red with a faint weave
    weave = 8.0 * np.sin(x * 0.9) * np.sin(y * 0.9)
    img[..., 0] = 150 + weave
    img[..., 1] = 22 + weave * 0.3
    img[..., 2] = 26 + weave * 0.3
    # fruit: slightly wide ellipse, lit from the upper left
    r2 = _ellipse(x, y, 80, 64, 66, 54)
    fruit = r2 <= 1.0
    light = np.clip(1.0 - 0.55 * _ellipse(x, y, 62, 48, 70, 60), 0.0, 1.0)
    img[fruit, 0] = 160 + 90 * light[fruit]
    img[fruit, 1] = 18 + 40 * light[fruit]
    img[fruit, 2] = 14 + 30 * light[fruit]
    # soft shadow ring at the rim
    rim = fruit & (r2 > 0.85)
    img[rim] *= 0.85
    # specular highlight
    spot = _ellipse(x, y, 58, 42, 9, 6) <= 1.0
    img[spot] = 0.5 * img[spot] + 0.5 * np.array([255, 235, 230])
    # calyx: five small green leaves around the stem at the top
    for angle in np.linspace(0, 2 * np.pi, 5, endpoint=False):
        lx, ly = 80 + 9 * np.cos(angle), 14 + 4 * np.sin(angle)
        rot = (x - lx) * np.cos(angle) + (y - ly) * np.sin(angle)
        ort = -(x - lx) * np.sin(angle) + (y - ly) * np.cos(angle)
        leaf = (rot / 9.0) ** 2 + (ort / 3.0) ** 2 <= 1.0
        img[leaf] = (40, 130, 45)
    stem = (np.abs(x - 80) <= 2) & (y >= 6) & (y <= 15)
    img[stem] = (70, 110, 40)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


def make_sky():
    """A blue sky, darker at the top, with one small white cloud."""
    x, y = _grid()
    t = (y / HEIGHT)[..., None]  # 0 at the top, 1 at the horizon
    top = np.array([20, 70, 190], dtype=np.float32)
    bottom = np.array([80, 140, 235], dtype=np.float32)
    img = top + (bottom - top) * t
    img = np.broadcast_to(img, (HEIGHT, WIDTH, 3)).copy()
    # cloud: a few overlapping puffs, soft-edged
    cloud = np.zeros((HEIGHT, WIDTH), dtype=np.float32)
    for cx, cy, rx, ry in [(100, 40, 16, 9), (114, 36, 13, 10), (126, 42, 14, 8), (110, 46, 20, 6)]:
        d = _ellipse(x, y, cx, cy, rx, ry)
        cloud = np.maximum(cloud, np.clip((1.15 - d) / 0.3, 0.0, 1.0))
    white = np.array([248, 248, 252], dtype=np.float32)
    img = img * (1 - cloud[..., None]) + white * cloud[..., None]
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


# ----------------------------------------------------------------- preprocessing
MEAN_RGB = np.array([123.68, 116.78, 103.94], dtype=np.float32)


def resize_bilinear(rgb, out_h=224, out_w=224):
    """Plain bilinear resize, half-pixel centres, edge clamp (no antialiasing)."""
    h, w, _ = rgb.shape
    src = rgb.astype(np.float32)
    ys = np.clip((np.arange(out_h) + 0.5) * h / out_h - 0.5, 0, h - 1)
    xs = np.clip((np.arange(out_w) + 0.5) * w / out_w - 0.5, 0, w - 1)
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    wy = (ys - y0)[:, None, None]
    wx = (xs - x0)[None, :, None]
    top = src[y0][:, x0] * (1 - wx) + src[y0][:, x1] * wx
    bot = src[y1][:, x0] * (1 - wx) + src[y1][:, x1] * wx
    return top * (1 - wy) + bot * wy


def resize_nearest(rgb, out_h=224, out_w=224):
    h, w, _ = rgb.shape
    ys = np.minimum((np.arange(out_h) * h) // out_h, h - 1)
    xs = np.minimum((np.arange(out_w) * w) // out_w, w - 1)
    return rgb[ys][:, xs].astype(np.float32)


def preprocess(rgb, resize=resize_bilinear):
    """uint8 [H, W, 3] RGB -> float32 [3, 224, 224], pixel minus channel mean."""
    resized = resize(rgb)  # float32 [224, 224, 3], 0..255
    return np.ascontiguousarray((resized - MEAN_RGB).transpose(2, 0, 1), dtype=np.float32)


def load_model_module():
    path = REPO / "models" / "image_classifier" / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("image_classifier_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------- commands
def cmd_write():
    IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    for name, make in (("tomato.png", make_tomato), ("sky.png", make_sky)):
        path = IMAGE_DIR / name
        write_png(path, make())
        print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes, {WIDTH}x{HEIGHT})")


def cmd_check():
    model = load_model_module()
    ok = True
    for name, expected in EXPECTED.items():
        rgb = read_png(IMAGE_DIR / name)
        if rgb.shape != (HEIGHT, WIDTH, 3):
            print(f"{name}: unexpected shape {rgb.shape}")
            ok = False
        for label, resize in (("bilinear", resize_bilinear), ("nearest", resize_nearest)):
            scores = model.score_images(preprocess(rgb, resize)[None])[0]
            order = np.argsort(-scores)
            best, second = order[0], order[1]
            ratio = scores[best] / max(scores[second], 1e-30)
            mean = rgb.reshape(-1, 3).mean(axis=0)
            verdict = model.LABELS[best] == expected and ratio >= MIN_RATIO
            ok &= verdict
            print(
                f"{name} [{label}]: mean RGB {np.round(mean, 1).tolist()} -> "
                f"{model.LABELS[best]} {scores[best]:.4f} (runner-up {model.LABELS[second]} "
                f"{scores[second]:.4f}, ratio {ratio:.1f}) expected {expected}: "
                f"{'OK' if verdict else 'FAIL'}"
            )
    print("check passed" if ok else "check FAILED")
    return 0 if ok else 1


def cmd_request(image, class_count):
    x = preprocess(read_png(image))[None]  # [1, 3, 224, 224]
    request = {
        "inputs": [
            {
                "name": "INPUT",
                "shape": list(x.shape),
                "datatype": "FP32",
                "data": [round(float(v), 3) for v in x.reshape(-1)],
            }
        ],
        "outputs": [{"name": "OUTPUT", "parameters": {"classification": class_count}}],
    }
    json.dump(request, sys.stdout, separators=(",", ":"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="check the committed images")
    ap.add_argument("--request", metavar="IMG", help="print a JSON inference request for IMG")
    ap.add_argument("--class-count", type=int, default=1, help="classification count for --request")
    args = ap.parse_args()
    if args.request:
        return cmd_request(args.request, args.class_count)
    if args.check:
        return cmd_check()
    cmd_write()
    return cmd_check()


if __name__ == "__main__":
    sys.exit(main())
