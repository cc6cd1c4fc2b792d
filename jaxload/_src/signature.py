"""A batch's signature: its structure, and each feature's dtype and shape without the batch dim.

Processes compare signatures before they form a global batch (all must be equal), and a process
whose data has run out builds its padding from one (:func:`zeros`). The signature is canonical
JSON, so it travels as text and is compared by a short digest; no pickles cross processes.

Example:
  >>> text = describe({"x": np.zeros((4, 3), np.float32), "y": np.zeros(4, np.int32)})
  >>> text
  '{"d":{"x":["float32",[3]],"y":["int32",[]]}}'
  >>> readable(text)
  "batch['x']:float32[3];batch['y']:int32[]"
  >>> zeros(text, rows=2)["x"].shape
  (2, 3)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from jaxload._src.assemble import aligned_empty
from jaxload._src.trees import HostBatch


def describe(batch: HostBatch) -> str:
    """The signature of a per-process batch (dicts with str keys, tuples, lists, numpy leaves)."""
    return json.dumps(_describe(batch, "batch"), separators=(",", ":"))


def _describe(node: HostBatch, name: str) -> Any:
    if isinstance(node, dict):
        for k in node:
            if not isinstance(k, str):
                raise TypeError(f"{name} has the key {k!r}; feature names must be str")
        return {"d": {k: _describe(v, f"{name}[{k!r}]") for k, v in node.items()}}
    if isinstance(node, tuple):
        return {"t": [_describe(v, f"{name}[{i}]") for i, v in enumerate(node)]}
    if isinstance(node, list):
        return {"l": [_describe(v, f"{name}[{i}]") for i, v in enumerate(node)]}
    return [node.dtype.name, list(node.shape[1:])]


def digest(text: str) -> str:
    """16 hex digits standing for a signature in reports."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def zeros(text: str, rows: int) -> HostBatch:
    """A batch of ``rows`` zero rows with the signature ``text`` (64-byte aligned buffers)."""

    def build(node: Any) -> HostBatch:  # node: a parsed signature, see _describe
        if isinstance(node, list):
            out = aligned_empty((rows, *node[1]), np.dtype(node[0]))
            out[...] = 0
            return out
        (kind, children), = node.items()
        if kind == "d":
            return {k: build(v) for k, v in children.items()}
        return (tuple if kind == "t" else list)(build(v) for v in children)

    return build(json.loads(text))


def features(text: str) -> dict[str, str]:
    """Feature name -> ``dtype[shape]``, e.g. ``{"batch['x']": "float32[3]"}``."""
    out: dict[str, str] = {}

    def walk(node: Any, name: str) -> None:
        if isinstance(node, list):
            out[name] = f"{node[0]}{node[1]}".replace(" ", "")
            return
        (kind, children), = node.items()
        items = children.items() if kind == "d" else enumerate(children)
        for k, v in items:
            walk(v, f"{name}[{k!r}]")

    walk(json.loads(text), "batch")
    return out


def readable(text: str) -> str:
    """``batch['x']:float32[3];...``: a signature for error messages."""
    return ";".join(f"{n}:{s}" for n, s in features(text).items())


def differences(first: str, now: str, first_step: int = 0) -> str:
    """What changed between two signatures (the first one seen at ``first_step``)."""
    before, after = features(first), features(now)
    return "; ".join(f"feature {n} was {before.get(n, 'absent')} at step {first_step} but is "
                     f"{after.get(n, 'absent')}"
                     for n in sorted(set(before) | set(after)) if before.get(n) != after.get(n))
