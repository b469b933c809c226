"""Serves a SavedModel as TF Serving would, in a process with tensorflow and
tensorflow_text alone: jax and bertjax cannot be imported here.

    python tests/support/serve_savedmodel.py SAVEDMODEL REQUESTS.json RESPONSES.npz

REQUESTS.json: [{"signature": NAME, "inputs": {name: list}}, ...]; RESPONSES.npz holds
each request's outputs as "{index}/{output name}" (strings as numpy unicode).
"""

import json
import sys

for blocked in ("jax", "jaxlib", "flax", "bertjax"):
    sys.modules[blocked] = None  # an import of any of them fails

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402, F401  (registers the tokenizer's ops)


def main(model_dir: str, requests_file: str, out_file: str) -> None:
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
