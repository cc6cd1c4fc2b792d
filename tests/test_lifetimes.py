"""Real 2-process runs: nothing jaxload writes to the coordination service outlives its use, and a
failure on one process, in any stage, reaches the other with its cause within one exchange."""

from __future__ import annotations

import time

import pytest

import jaxload.testing
from placement import outcome


def _left_in_store(name: str) -> list[str]:
    """Keys under jaxload/ once both processes are here and background closes are done."""
    from jax._src import distributed

    client = distributed.global_state.client
    client.wait_at_barrier(f"test/{name}", 30_000)
    deadline = time.monotonic() + 10
    while True:  # a pass dropped without close() is closed on a background thread
        keys = [k for k, _ in client.key_value_dir_get("jaxload")]
        if not keys or time.monotonic() > deadline:
            client.wait_at_barrier(f"test/{name}/read", 30_000)
            return keys
        time.sleep(0.05)


def lifetimes():
    import grain
    import jax
    import numpy as np

    import jaxload
    from jaxload._src import agreement

    p = jax.process_index()
    layout = jaxload.data_parallel()
    ds = grain.MapDataset.range(8 * 100).map(lambda i: {"x": np.float32(i)})
    out = {}

    for prefetch in (0, 2):  # whole passes of two loaders, both remainder modes
        a = jaxload.from_grain(ds, layout, global_batch_size=8, prefetch=prefetch)
        b = jaxload.from_grain(ds[:8 * 50 + 3], layout, global_batch_size=8, remainder="pad",
                               prefetch=prefetch)
        out[f"passes{prefetch}"] = (sum(1 for _ in a), sum(1 for _ in b),
                                    _left_in_store(f"passes{prefetch}"))

    batch = next(iter(jaxload.from_grain(ds, layout, global_batch_size=8, checks="never")))
    jaxload.check.batch(batch)
    jaxload.check.replication(batch)
    jaxload.check.distinct(batch)
    jaxload.check.plan(layout, 8)
    a.stats(all_processes=True)
    agreement.shared_token("test", timeout_s=30)
    out["checks"] = _left_in_store("checks")

    for prefetch in (0, 2):
        loader = jaxload.from_grain(ds, layout, global_batch_size=8, prefetch=prefetch)
        for step, _ in enumerate(loader):  # dropped without close(): a background close
            if step == 3:
                break
        with iter(loader) as batches:  # closed by `with`
            next(batches)
        batches = iter(loader)
        next(batches)
        loader.close()
        out[f"break{prefetch}"] = _left_in_store(f"break{prefetch}")

    # the pipeline fails on process 1: both raise, and nothing is left
    def element(i):
        if p == 1 and i == 41:
            raise ValueError("corrupt record 41")
        return {"x": np.float32(i)}

    loader = jaxload.from_grain(grain.MapDataset.range(80).map(element), layout,
                                global_batch_size=8, timeout_s=60, on_failure="raise")
    out["raised"] = outcome(lambda: sum(1 for _ in loader))[0], _left_in_store("raised")
    return out


@pytest.fixture(scope="module")
def stores(clusters):
    return clusters.run(lifetimes, num_processes=2, local_devices=2, timeout_s=240)


@pytest.mark.cluster
def test_passes_leave_nothing_in_the_store(stores):
    for o in stores:
        assert o["passes0"] == (100, 51, []) and o["passes2"] == (100, 51, [])


@pytest.mark.cluster
def test_checks_stats_and_tokens_leave_nothing(stores):
    assert all(o["checks"] == [] for o in stores)


@pytest.mark.cluster
def test_early_breaks_and_closes_leave_nothing(stores):
    assert all(o["break0"] == [] and o["break2"] == [] for o in stores)


@pytest.mark.cluster
def test_a_failed_pass_leaves_nothing(stores):
    own, seen = stores[1]["raised"][0], stores[0]["raised"][0]
    assert own.startswith("ValueError: corrupt record 41")
    assert seen.startswith("PeerFailedError: process 1 failed while loading step 5")
    assert all(o["raised"][1] == [] for o in stores)


def failures(stage: str):
    """Process 1 fails in ``stage`` at step 2 of a pass; what each process raises, how soon.
    The functions it replaces to inject the failure are restored after (a warm cluster's
    processes run on)."""
    from jaxload._src import check, passes, transport

    replaced = [(passes, "build_global"), (passes, "pad_rows"), (check, "shard_records"),
                (transport.CoordinationTransport, "set"),
                (transport.CoordinationTransport, "increment")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in replaced]
    try:
        return _fail_in(stage)
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _fail_in(stage: str):
    import grain
    import jax
    import numpy as np

    import jaxload
    from jaxload._src import check, passes, transport

    p = jax.process_index()
    calls = {"n": 0}

    def failing_on_process_1(fn, at=2):
        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if p == 1 and calls["n"] == at + 1:
                raise RuntimeError(f"injected {stage} failure")
            return fn(*args, **kwargs)
        return wrapped

    ds = grain.MapDataset.range(8 * 40).map(lambda i: {"x": np.float32(i)})
    layout = jaxload.data_parallel()
    options = dict(global_batch_size=8, timeout_s=60, checks="never", on_failure="raise")
    if stage == "assembling":
        passes.build_global = failing_on_process_1(passes.build_global)
    elif stage == "padding":
        # process 1 has fewer elements: it pads from step 2 on
        ds = ds[: 8 * 2 + 1] if p == 1 else ds
        passes.pad_rows = failing_on_process_1(passes.pad_rows)
        options.update(remainder="pad", shard=False)
    elif stage == "resharding":
        layout = jaxload.model_replicas_across_processes(2)
        options.update(load_once=True)
    elif stage == "checking":
        check.shard_records = failing_on_process_1(check.shard_records, at=0)
        options.update(checks=1)
    elif stage == "unreported":
        # assembly fails and then the report cannot be sent: the process's own error is raised
        def unreachable(self, key, value):
            raise RuntimeError("UNAVAILABLE: the coordinator cannot be reached")

        def cut_off_then_fail(fn):
            def wrapped(*args, **kwargs):
                calls["n"] += 1
                if p == 1 and calls["n"] == 3:
                    transport.CoordinationTransport.set = unreachable
                    transport.CoordinationTransport.increment = unreachable
                    raise RuntimeError(f"injected {stage} failure")
                return fn(*args, **kwargs)
            return wrapped

        passes.build_global = cut_off_then_fail(passes.build_global)
        options.update(timeout_s=5)
    loader = jaxload.from_grain(ds, layout, **options)
    if stage == "resharding":
        reshard = loader._reshard
        loader._reshard = failing_on_process_1(reshard)

    def consume():
        for batch in loader:
            jax.block_until_ready(batch)

    return outcome(consume)


@pytest.mark.cluster
@pytest.mark.parametrize("stage", ["assembling", "padding", "resharding", "checking"])
def test_a_failure_in_any_stage_reaches_every_process_with_its_cause(clusters, stage):
    (own, _), (seen, elapsed) = clusters.run(
        failures, num_processes=2, local_devices=2, args=(stage,), timeout_s=120)[::-1]
    assert own.startswith(f"RuntimeError: injected {stage} failure")
    assert seen.startswith(f"PeerFailedError: process 1 failed while {stage}"), seen
    assert f"injected {stage} failure" in seen
    assert elapsed < 30  # well inside timeout_s=60: announced, not timed out


@pytest.mark.cluster
def test_a_failure_that_cannot_be_reported_raises_the_processes_own_error():
    # the store is cut off on process 1 and keys stay behind: processes of its own
    (own, _), (seen, _) = jaxload.testing.run(
        failures, num_processes=2, local_devices=2, args=("unreported",), timeout_s=120)[::-1]
    assert own.startswith("RuntimeError: injected unreported failure")
    assert seen.startswith("PeerTimeoutError: process 0 waited for the other processes")


def closed_before_its_first_next(how: str):
    """A pass whose iterator closes before its first ``next()`` on one process: process 1 closes
    it unasked (``"closed"``), or process 1 fails while checking the first step and process 0
    asks for a batch only once its watchdog has been told (``"told"``)."""
    import grain
    import jax
    import numpy as np

    import jaxload
    from jaxload._src import check, watchdog

    p, saved = jax.process_index(), check.shard_records
    ds = grain.MapDataset.range(8 * 10).map(lambda i: {"x": np.float32(i)})
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, timeout_s=30,
                                on_failure="raise", checks=1 if how == "told" else "never")

    def failing(*args, **kwargs):
        raise RuntimeError("injected checking failure")

    def consume():
        batches = iter(loader)
        if how == "closed" and p == 1:
            batches.close()
            return "closed"
        if how == "told" and p == 0:
            prefix, deadline = batches._context.exchange.prefix, time.monotonic() + 30
            while watchdog.this_process().interruption(prefix) is None and time.monotonic() < deadline:
                time.sleep(0.02)
        return sum(1 for _ in batches)

    if how == "told" and p == 1:
        check.shard_records = failing
    try:
        seen = outcome(consume)
    finally:
        check.shard_records = saved
    return seen, _left_in_store(how)


@pytest.mark.cluster
@pytest.mark.parametrize("how", ["closed", "told"])
def test_a_pass_closed_before_its_first_next_is_ended_for_every_process(clusters, how):
    """Its pipeline never began on that process; it still leaves the pass, so that the others
    end it (not wait for it until timeout_s) and its keys go."""
    ((seen, elapsed), left_0), ((own, _), left_1) = clusters.run(
        closed_before_its_first_next, num_processes=2, local_devices=2, args=(how,),
        timeout_s=120)
    assert left_0 == left_1 == []
    assert elapsed < 20, seen  # ended by the other process's report, not by timeout_s=30
    if how == "closed":
        assert (seen, own) == (0, "closed")  # as a stop after any step: the pass ends for all
    else:
        assert seen.startswith("PeerFailedError: process 1 failed while checking step 0"), seen
        assert own == "RuntimeError: injected checking failure"


def dropped(tmp: str):
    """For each kind of pipeline, after a whole pass and a state taken: whether the loader's
    pipeline and the user's source are freed as soon as the loader (and the source) are dropped,
    with Python's cyclic collector off (a pipeline in a reference cycle keeps its tensors, a
    ``from_tensor_slices`` copy of the data and the ones tf.data finalizes from it, until that
    collector runs; one a module-level cache holds keeps them for good). A Grain
    ``MapDataset.batch`` holds its parents in a reference cycle of Grain's own, so a Grain source
    is checked only to be freed at last."""
    import gc
    import weakref

    import grain
    import jax
    import numpy as np
    import tensorflow as tf

    import jaxload

    layout, p = jaxload.data_parallel(), jax.process_index()
    rows = {"x": np.arange(64, dtype=np.float32)}
    files = []
    for f in range(4):
        path = f"{tmp}/part-{f}.tfrecord"
        if p == 0:
            with tf.io.TFRecordWriter(path) as writer:
                for i in range(16):
                    writer.write(tf.io.serialize_tensor(tf.constant(f * 16 + i)).numpy())
        files.append(path)
    from jaxload._src import agreement

    agreement.shared_token("test/dropped/files", timeout_s=30)  # written before they are read

    def parse(record):
        return {"x": tf.ensure_shape(tf.io.parse_tensor(record, tf.int32), ())}

    kinds = {  # the sources as users build them; each loaded with global batch 8
        "tf elements": lambda: tf.data.Dataset.from_tensor_slices(rows),
        "tf replayed shuffle": lambda: tf.data.Dataset.from_tensor_slices(rows).shuffle(64, seed=1),
        "tf generator": lambda: tf.data.Dataset.from_generator(
            lambda: ({"x": np.float32(i)} for i in range(64)),
            output_signature={"x": tf.TensorSpec((), tf.float32)}),
        "tf files": lambda: tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset).map(parse),
        "grain MapDataset": lambda: grain.MapDataset.source(np.arange(64)).shuffle(seed=1),
        "grain DataLoader": lambda: grain.DataLoader(
            data_source=np.arange(64), sampler=grain.samplers.IndexSampler(
                64, num_epochs=1, shard_options=jaxload.grain_shard_options(layout, 8)),
            operations=[grain.transforms.Batch(4, drop_remainder=True)]),
        "grain IterDataset": lambda: grain.MapDataset.range(64).to_iter_dataset(),
    }
    freed = {}
    gc.collect()
    gc.disable()
    try:
        for kind, build in kinds.items():
            source = build()
            load = jaxload.from_tf_data if kind.startswith("tf") else jaxload.from_grain
            loader = load(source, layout, global_batch_size=8)
            for step, batch in enumerate(loader):
                jax.block_until_ready(batch)
                if step == 2:
                    loader.get_state()  # (what a state checks the pipeline by is computed once)
            del batch
            held = weakref.ref(loader._pipeline), weakref.ref(source)
            del loader, source
            deadline = time.monotonic() + 10  # a pass's threads end in the background
            while any(ref() is not None for ref in held) and time.monotonic() < deadline:
                time.sleep(0.05)
            freed[kind] = [ref() is None for ref in held]  # the pipeline, the user's source
            gc.collect()  # (a Grain batch holds its parents in a cycle of its own)
            freed[kind].append(held[1]() is None)  # nothing keeps the source for good
    finally:
        gc.enable()
    return freed


@pytest.mark.cluster
def test_a_dropped_loader_frees_its_pipeline_without_the_cyclic_collector(clusters, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = clusters.run(dropped, num_processes=2, local_devices=2, args=(str(tmp_path),),
                               timeout_s=240)
    for freed in results:  # the pipeline at once; a tf.data source at once, any at last
        assert all(pipeline and (source or kind.startswith("grain")) and at_last
                   for kind, (pipeline, source, at_last) in freed.items()), str(freed)


def warm_start_dropped():
    """A loader restored with set_state starts its pass's reads early (prefetch > 0); dropped
    before its first iter(), it must not fail the run: the steps of another loader after it."""
    import gc

    import tensorflow as tf

    import jaxload

    def shuffled():  # positioned by replay: a seeded shuffle of rows in memory
        return tf.data.Dataset.range(64).shuffle(64, seed=1)

    layout = jaxload.data_parallel()
    trained = jaxload.from_tf_data(shuffled(), layout, global_batch_size=8)
    batches = iter(trained)
    next(batches)
    restored = jaxload.from_tf_data(shuffled(), layout, global_batch_size=8)
    restored.set_state(trained.get_state())  # its pass starts reading now
    del restored
    gc.collect()
    time.sleep(1)  # the early reads run on
    return [int(b.shape[0]) for b in batches]


@pytest.mark.cluster
def test_a_restored_loader_dropped_before_its_pass_fails_nothing(clusters):
    for steps in clusters.run(warm_start_dropped, num_processes=2, local_devices=2, timeout_s=120):
        assert steps == [8] * 7
