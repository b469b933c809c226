"""Serves a SavedModel as TF Serving would, in a process with tensorflow and
tensorflow_text alone: jax and bertjax cannot be imported there.

    python tests/support/serve_savedmodel.py SAVEDMODEL REQUESTS.json RESPONSES.npz

REQUESTS.json: [{"signature": NAME, "inputs": {name: list}}, ...]; RESPONSES.npz holds
each request's outputs as "{index}/{output name}" (strings as numpy unicode). The tests
call `serve`, which starts that process.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np


def serve(model_dir, requests: list[dict], folder: pathlib.Path) -> list[dict]:
    """Each request's outputs, from a process that cannot import jax or bertjax."""
    (folder / "requests.json").write_text(json.dumps(requests))
    subprocess.run(
        [sys.executable, __file__, str(model_dir), str(folder / "requests.json"),
         str(folder / "responses.npz")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    saved = np.load(folder / "responses.npz")
    responses = [{} for _ in requests]
    for key in saved.files:
        index, name = key.split("/")
        responses[int(index)][name] = saved[key]
    return responses


def main(model_dir: str, requests_file: str, out_file: str) -> None:
    for blocked in ("jax", "jaxlib", "flax", "bertjax"):
        sys.modules[blocked] = None  # an import of any of them fails
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    loaded = tf.saved_model.load(model_dir)
    with open(requests_file, encoding="utf-8") as f:
        requests = json.load(f)
    responses = {}
    for index, request in enumerate(requests):
        signature = loaded.signatures[request["signature"]]
        specs = signature.structured_input_signature[1]
        inputs = {
            name: tf.constant(value, dtype=specs[name].dtype)
            for name, value in request["inputs"].items()
        }
        for name, value in signature(**inputs).items():
            value = value.numpy()
            if value.dtype == object:
                value = np.char.decode(value.astype(bytes), "utf-8")
            responses[f"{index}/{name}"] = value
    np.savez(out_file, **responses)


if __name__ == "__main__":
    main(*sys.argv[1:])
