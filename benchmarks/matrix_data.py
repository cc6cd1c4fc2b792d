"""The data of benchmarks/matrix.py's Grain rows, in a module of its own: a grain.DataLoader's
worker processes import what its source and operations are made of by name."""

from __future__ import annotations

import grain
import numpy as np
import tf_memory

N = tf_memory.N
_ARRAYS: dict[str, np.ndarray] = {}


def arrays() -> dict[str, np.ndarray]:
    """tf_memory.py's arrays, made once per process."""
    if not _ARRAYS:
        _ARRAYS.update(tf_memory.arrays())
    return _ARRAYS


def augment(element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A random flip and a random brightness, in numpy."""
    image = element["image"][:, ::-1] if np.random.random() < 0.5 else element["image"]
    return {"image": image + np.float32(np.random.uniform(-0.1, 0.1)), "label": element["label"]}


class Source:
    """The arrays as a Grain data source."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        data = arrays()
        return {"image": data["image"][i], "label": data["label"][i]}


class Augment(grain.transforms.Map):  # type: ignore[misc]
    def map(self, element):
        return augment(element)
