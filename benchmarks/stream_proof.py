"""What the stream proof costs: a tf.data pipeline split by elements over several loading groups
hashes every element it reads below its last maps (``tf.fingerprint`` per element, a global
batch at a time) and compares one digest per step in the step agreement
(jaxload/_src/pipelines/tf/stream.py, jaxload/_src/stream_proof.py). The same loader with the
proof on (``checks="first"``, the default) and off (``checks="never"``: the plain
``shard(K, k)`` split, which also drops the first step's check), in the same run.

The pipelines, each split by elements (none of them can be replayed or split by files):
- *generator*: ``from_generator`` of 4,096 rows (a 32x32x3 float32 image, an int64 label)
  then a random flip and brightness (``tf.image.stateless_random_*``);
- *filter*: ``from_tensor_slices`` of the same rows, ``filter`` (3 rows in 4 kept), the same
  augmentation;
- *jpeg, shard="elements"*: 16 TFRecord files of 4,096 64x64 JPEGs, parsed and decoded in a
  ``map`` (the decode runs on each group's share only, with the proof on or off);
- *grain IterDataset*: ``MapDataset.range`` of the same rows, a random flip by index,
  ``to_iter_dataset()`` (jaxload/_src/pipelines/grain/iter_dataset.py: XXH3 per element): its
  elements are views of the arrays, whose bytes only the proof reads;
- *grain IterDataset, uint8 decoded*: the same over uint8 images, each made float32 in ``[0, 1]``
  in the map (an element made by the pipeline, as a decode makes it), then flipped.
Global batch 128 and 16 (8 and 1-4 rows a process), at 2 processes x 4 CPU devices and 4 x 2.
Timed: 3 passes of one loader, from building it to the last batch ready, slowest process,
median of interleaved rounds (min-max); and the CPU seconds of the busiest process over the same
span (all its threads), which the machine's load disturbs less.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/stream_proof.py [--quick] [--topologies 2x4,4x2]
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path

from sections import arguments, ended, ms_cell, publish, slowest

import jaxload
import jaxload.testing

SECTION = "<!-- stream_proof.py -->"
N, SIDE, PASSES, FILES = 4096, 32, 3, 16
GLOBAL_BATCHES = (128, 16)
PIPELINES = ("generator", "filter", "jpeg", "grain IterDataset", "grain IterDataset, uint8 decoded")


def _arrays():
    import numpy as np

    rng = np.random.default_rng(0)
    return {"image": rng.random((N, SIDE, SIDE, 3), dtype=np.float32),
            "label": np.arange(N, dtype=np.int64),
            "uint8": rng.integers(0, 256, (N, SIDE, SIDE, 3), dtype=np.uint8)}


def write_jpegs(root: str) -> list[str]:
    """16 TFRecord files of 64x64 JPEGs with a label (the parent writes them once)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(1)
    names = []
    for f in range(FILES):
        name = str(Path(root, f"jpeg-{f:02d}.tfrecord"))
        with tf.io.TFRecordWriter(name) as writer:
            for i in range(N // FILES):
                pixels = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
                example = tf.train.Example(features=tf.train.Features(feature={
                    "jpeg": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[tf.io.encode_jpeg(pixels).numpy()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[f * N // FILES + i]))}))
                writer.write(example.SerializeToString())
        names.append(name)
    return names


def _augment(e):
    import tensorflow as tf

    seed = tf.stack([e["label"], tf.constant(7, tf.int64)])
    image = tf.image.stateless_random_flip_left_right(e["image"], seed)
    return {"image": tf.image.stateless_random_brightness(image, 0.2, seed), "label": e["label"]}


def _grain_dataset(data, decoded: bool = False):
    import grain
    import numpy as np

    def row(i):
        image = data["uint8"][i].astype(np.float32) / 255 if decoded else data["image"][i]
        return {"image": image[:, ::-1] if i % 2 else image, "label": data["label"][i]}

    return grain.MapDataset.range(N).map(row).to_iter_dataset()


def _dataset(name: str, data, files: list[str]):
    import tensorflow as tf

    if name == "generator":
        def rows():
            for i in range(N):
                yield {"image": data["image"][i], "label": data["label"][i]}

        spec = {"image": tf.TensorSpec((SIDE, SIDE, 3), tf.float32),
                "label": tf.TensorSpec((), tf.int64)}
        return tf.data.Dataset.from_generator(rows, output_signature=spec).map(_augment)
    if name == "filter":
        return tf.data.Dataset.from_tensor_slices(data).filter(
            lambda e: e["label"] % 4 != 3).map(_augment)

    def decode(record):
        e = tf.io.parse_single_example(record, {"jpeg": tf.io.FixedLenFeature([], tf.string),
                                                "label": tf.io.FixedLenFeature([], tf.int64)})
        image = tf.ensure_shape(tf.io.decode_jpeg(e["jpeg"], channels=3), (64, 64, 3))
        return {"image": tf.cast(image, tf.float32) / 255.0, "label": e["label"]}

    return tf.data.TFRecordDataset(files).map(decode, num_parallel_calls=tf.data.AUTOTUNE)


def _fingerprints_timed() -> list[float]:
    """Times each Grain element's fingerprint (the CPU seconds of the thread that takes it,
    added up in the list returned; the timer adds about 0.3 us an element)."""
    from jaxload._src.pipelines.grain import iter_dataset

    spent, fingerprint = [0.0], iter_dataset.element_print
    fingerprint = getattr(fingerprint, "timed", fingerprint)

    def timed(*args):
        start = time.thread_time()
        try:
            return fingerprint(*args)
        finally:
            spent[0] += time.thread_time() - start

    timed.timed = fingerprint  # type: ignore[attr-defined]
    iter_dataset.element_print = timed
    return spent


def _passes(name: str, data, files: list[str], checks: str, batch: int
            ) -> tuple[float, float, float]:
    """Seconds of 3 passes of one loader, its build included: wall-clock, the process's CPU
    seconds (all its threads; Grain's worker processes are not used here), and of those the
    Grain elements' fingerprints' (0 for tf.data, whose proof runs inside TensorFlow)."""
    import jax
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"stream_proof {name} {checks} {batch}")
    spent = _fingerprints_timed()
    started, cpu = time.perf_counter(), time.process_time()
    if name.startswith("grain"):
        loader = jaxload.from_grain(_grain_dataset(data, "decoded" in name), jaxload.data_parallel(),
                                    global_batch_size=batch, checks=checks)
    else:
        loader = jaxload.from_tf_data(_dataset(name, data, files), jaxload.data_parallel(),
                                      global_batch_size=batch, checks=checks,
                                      shard="elements" if name == "jpeg" else "auto")
    for _ in range(PASSES):
        for batch in loader:
            jax.block_until_ready(batch)
    return time.perf_counter() - started, time.process_time() - cpu, spent[0]


def measure(rounds: int, files: list[str]) -> dict:
    """Worker side: per (pipeline, batch, checks), each round's seconds."""
    warnings.simplefilter("ignore")
    data, out = _arrays(), {}
    for name in PIPELINES:
        for batch in GLOBAL_BATCHES:
            for r in range(rounds):
                for checks in ("first", "never") if r % 2 == 0 else ("never", "first"):
                    wall, cpu, prints = _passes(name, data, files, checks, batch)
                    out.setdefault(f"{name}|{batch}|{checks}", []).append(wall)
                    out.setdefault(f"{name}|{batch}|{checks}|cpu", []).append(cpu)
                    out.setdefault(f"{name}|{batch}|{checks}|prints", []).append(prints / cpu)
    return out


def _share(results: list[dict], key: str) -> str:
    """The Grain fingerprints' share of the busiest process's CPU with the proof on, median of
    the rounds (the process with the largest share in each); "-" where TensorFlow runs it."""
    shares = slowest(results, f"{key}|first|prints")
    return f"{statistics.median(shares):.1%}" if any(shares) else "-"


def rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for name in PIPELINES:
        for batch in GLOBAL_BATCHES:
            key = f"{name}|{batch}"
            times = {c: slowest(results, f"{key}|{c}") for c in ("first", "never")}
            ratio = statistics.median(times["first"]) / statistics.median(times["never"])
            cpu = {c: statistics.median(slowest(results, f"{key}|{c}|cpu")) for c in ("first", "never")}
            lines.append(f"| {topology} | {name} | {batch} | {ms_cell(times['never'], PASSES)} | "
                         f"{ms_cell(times['first'], PASSES)} | {ratio:.2f} | "
                         f"{cpu['never'] / PASSES * 1e3:.0f} / {cpu['first'] / PASSES * 1e3:.0f} | "
                         f"{cpu['first'] / cpu['never']:.2f} | {_share(results, key)} |")
    return lines


def main() -> None:
    args = arguments()
    rounds = 2 if args.quick else 5
    started = time.perf_counter()
    table = ["| topology | pipeline | global batch | proof off, ms a pass | proof on, ms a pass | "
             "on / off | CPU ms a pass, off / on | CPU on / off | fingerprints, of the CPU on |",
             "|---|---|---|---|---|---|---|---|---|"]
    topologies = "2x4,4x2" if args.topologies == "1x8,2x4,4x2" else args.topologies
    with tempfile.TemporaryDirectory() as root:
        files = write_jpegs(root)
        for topology in topologies.split(","):
            processes, devices = map(int, topology.split("x"))
            table += rows(topology, jaxload.testing.run(
                measure, num_processes=processes, local_devices=devices, args=(rounds, files),
                timeout_s=1800))
    publish(Path(args.out), SECTION, [
        SECTION, "", "## The stream proof: a split by elements compares what every process read",
        "", f"{N} rows split by elements over every process (`data_parallel()`): a generator "
        f"and a filter over {SIDE}x{SIDE}x3 float32 images in memory, {FILES} TFRecord files "
        "of 64x64 JPEGs with `shard=\"elements\"`, and a Grain `IterDataset` of the same "
        "images (`to_iter_dataset()`, hashed per element with XXH3: views of the arrays, whose "
        "bytes only the proof reads), and of uint8 images made float32 in its map (elements "
        "the pipeline makes, as a decode does); milliseconds a pass over "
        f"{PASSES} passes of one loader (its build included), slowest process, median of "
        f"{rounds} interleaved rounds (min-max). *Off*: `checks=\"never\"` (`shard(K, k)`, no "
        "first-step check); *on*: the default, which reads each global batch whole below the "
        "last maps, fingerprints its elements and compares one digest per step in the step "
        "agreement (a pass then reads each round's window ahead). *CPU*: the CPU seconds of the "
        "busiest process (all its threads) a pass, median, which this shared machine's load "
        "disturbs less than wall-clock time. *Fingerprints*: the CPU time of the Grain "
        "elements' fingerprints, timed around each (the timer adds about 0.3 us an element), "
        "as a share of the process's CPU with the proof on: the proof's own cost, which the "
        "difference of two noisy totals only bounds.", "",
        *table, "", ended(started)])


if __name__ == "__main__":
    main()
