"""Writing TFRecords the slow, obvious way, for the tests of the readers
(data_pipeline/tfrecords.py writes with NumPy, encode_examples)."""

from collections.abc import Iterable

import numpy as np
import tensorflow as tf

from data_pipeline import schema


def make_example(features: dict[str, np.ndarray]) -> tf.train.Example:
    """One tf.Example built with the protos; `features` has no batch axis."""

    def feature(name):
        values = np.ravel(features[name]).tolist()
        if name == "masked_lm_weights":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    feature_map = {name: feature(name) for name in schema.FEATURES}
    return tf.train.Example(features=tf.train.Features(feature=feature_map))


def write_records(path: str, records: Iterable[bytes]) -> int:
    """Writes serialized records to a TFRecord file; returns how many."""
    count = 0
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
            count += 1
    return count
