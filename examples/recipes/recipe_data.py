"""Stand-in data for the recipes when they run on one machine: small files in a temp folder,
written once by process 0 (the other processes wait for them). On a real cluster the recipes
read your own files and never import this module."""

from __future__ import annotations

import tempfile
from pathlib import Path

ROOT = Path(tempfile.gettempdir()) / "jaxload-recipes"
FILES, PER_FILE = 16, 512


def _written(name: str, write) -> Path:
    import jax
    from jax.experimental import multihost_utils

    folder = ROOT / name
    if jax.process_index() == 0 and not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        write(folder)
        (folder / "done").touch()
    multihost_utils.sync_global_devices(f"recipe data {name}")
    return folder


def tfrecords() -> str:
    """16 TFRecord files of 512 tf.train.Examples {"image": 8x8x3 uint8 bytes, "label": int}:
    a glob of them."""
    import numpy as np
    import tensorflow as tf

    def write(folder: Path) -> None:
        for f in range(FILES):
            with tf.io.TFRecordWriter(str(folder / f"train-{f:02d}.tfrecord")) as writer:
                for i in range(PER_FILE * f, PER_FILE * (f + 1)):
                    image = np.full((8, 8, 3), i % 256, np.uint8).tobytes()
                    example = tf.train.Example(features=tf.train.Features(feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))}))
                    writer.write(example.SerializeToString())

    return str(_written("tfrecords", write) / "train-*.tfrecord")


def array_records() -> list[str]:
    """4 ArrayRecord files of 1024 records (a pickled {"id", "pixels"} each): their paths."""
    import pickle

    import numpy as np
    from array_record.python.array_record_module import ArrayRecordWriter

    def write(folder: Path) -> None:
        for f in range(4):
            # group_size:1, one record per chunk: reads by index touch one record each
            writer = ArrayRecordWriter(str(folder / f"train-{f}.array_record"), "group_size:1")
            for i in range(1024 * f, 1024 * (f + 1)):
                writer.write(pickle.dumps({"id": i, "pixels": np.full(16, i % 256, np.uint8)}))
            writer.close()

    folder = _written("array_records", write)
    return [str(folder / f"train-{f}.array_record") for f in range(4)]
