"""A shuffled tf.data pipeline is positioned by replay (jaxload/_src/pipelines/tf/replay.py):
nothing is saved while a pass runs, the state is a few counts, a resume continues with the same
rows in the same order, and each pass has the order of the user's own pipeline's n-th
iteration. In one process over simulated topologies, then in real processes, where the parent
reads every step's shards."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import jaxload
from jaxload._src.pipelines.tf import read as tf_read
from jaxload._src.pipelines.tf import replay as tf_replay
from jaxload._src.pipelines.tf import shuffle as tf_shuffle
from jaxload._src.pipelines.tf.dataset import TfDataset
from placement import record

tf = pytest.importorskip("tensorflow")
N = 200


def tutorial(n: int = N, seed: int | None = 1, buffer: int = 64):
    """The tutorials' shape: arrays in memory, shuffled, then augmented."""
    images = np.arange(n * 12, dtype=np.float32).reshape(n, 2, 2, 3)

    def augment(e):
        return {"id": e["id"], "image": tf.image.flip_left_right(e["image"]) * 2.0}

    ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(n), "image": images})
    return ds.shuffle(buffer, seed=seed).map(augment, num_parallel_calls=2)


def plan(processes: int, index: int, global_batch_size: int = 16):
    devices = jaxload.simulated_devices(processes, 8 // processes)
    return jaxload.data_parallel(devices=devices).plan(global_batch_size=global_batch_size,
                                                       process_index=index)


def share(ds, p, global_batch_size=16, **kwargs):
    options = dict(shard="auto", batched=False, remainder="drop") | kwargs
    return TfDataset(ds, p, global_batch_size=global_batch_size, **options)


def ids(batches):
    return [b["id"].tolist() for b, _ in batches]


def iterations(ds, passes: int) -> list[list[int]]:
    """The element ids of the user's own pipeline's first ``passes`` iterations."""
    return [[int(e["id"]) for e in ds] for _ in range(passes)]


@pytest.mark.parametrize("processes", [1, 4])
def test_a_pass_saves_nothing_and_a_resume_continues_exactly(processes):
    ds = tutorial()
    own = iterations(tutorial(), 3)
    p = plan(processes, processes - 1)
    group = share(ds, p)
    assert group._replay is not None
    passes = [list(group.batches(None)) for _ in range(3)]  # a loader kept over 3 passes
    for number, batches in enumerate(passes):
        # the group's elements of each step (k, k + K, ...) of the user's n-th iteration
        rows = [own[number][s * 16:(s + 1) * 16][p.shard_index::p.shard_count]
                for s in range(N // 16)]
        assert ids(batches) == rows
        seeds = [87654321, 1]
        assert [position for _, position in batches] == [
            {"pass": number, "batches": n, "seeds": seeds} for n in range(1, N // 16 + 1)]
    for number, stop in [(0, 1), (2, 6), (2, N // 16 - 1), (1, N // 16)]:
        position = json.loads(json.dumps(passes[number][stop - 1][1]))
        again = share(tutorial(), p)  # another process's pipeline: a fresh dataset
        assert ids(again.batches(position)) == ids(passes[number])[stop:], (number, stop)
        assert again.batches(position).length == N // 16 - stop


def test_a_loader_built_per_epoch_reshuffles_as_a_kept_one():
    ds = tutorial()
    own = iterations(tutorial(), 3)
    for number in range(3):
        group = share(ds, plan(1, 0))
        assert sum(ids(group.batches(None)), []) == own[number][:N // 16 * 16]


def test_an_unseeded_shuffle_records_its_seeds_and_resumes_exactly():
    group = share(tutorial(seed=None), plan(1, 0))
    batches = list(group.batches(None))
    seeds = batches[0][1]["seeds"]
    assert seeds != [0, 0] and all(p["seeds"] == seeds for _, p in batches)
    fresh = share(tutorial(seed=None), plan(1, 0))  # draws other seeds of its own
    assert ids(fresh.batches(batches[4][1])) == ids(batches)[5:]


@pytest.mark.parametrize("variant", ["padded", "batched", "unsplit", "skip-repeat"])
def test_other_shapes_of_the_split_continue_exactly(variant):
    ds, p = tutorial(), plan(4, 2)
    if variant == "padded":  # 18 rows a step over 8 batch shards: each group's block
        group = share(ds, plan(4, 2, 24), global_batch_size=18, remainder="pad")
    elif variant == "batched":  # the user's batches over the shuffle: skipped 4 elements each
        group = share(tutorial().batch(4, drop_remainder=True).prefetch(1), p, batched=True)
        assert group._replay is not None and group._replay.grouped == 4
    elif variant == "unsplit":
        group = share(ds, p, shard=False)
    else:  # ops under the shuffle that keep their order
        group = share(tf.data.Dataset.range(40).repeat(5).skip(3).shuffle(32, seed=4).map(
            lambda x: {"id": x}), p)
    assert group._replay is not None
    whole = list(group.batches(None))
    for stop in (1, len(whole) // 2, len(whole) - 1):
        assert ids(group.batches(whole[stop - 1][1])) == ids(whole)[stop:], stop


@pytest.mark.parametrize("processes", [1, 4])
def test_the_users_own_batches_over_the_shuffle_are_replayed_not_saved(processes):
    """``batched=True`` over ``shuffle(seed).batch(b)``: the state holds counts, not the
    buffer, and each pass and each resume hands out the user's own batches of that pass."""
    size = 8 // processes  # a process's batch: the global batch of 8 over its devices

    def batches():
        return tutorial().batch(size, drop_remainder=True).map(
            lambda e: {"id": e["id"], "image": e["image"] + 1.0})

    p = plan(processes, processes - 1, global_batch_size=8)
    group = share(batches(), p, global_batch_size=8, batched=True)
    assert group._replay is not None and group._replay.grouped == size
    user = batches()
    own = [[e["id"].tolist() for e in user.as_numpy_iterator()] for _ in range(2)]  # reshuffled
    passes = [list(group.batches(None)) for _ in range(2)]
    for number, got in enumerate(passes):
        assert ids(got) == own[number][p.shard_index::p.shard_count]
        assert len(json.dumps(got[-1][1])) < 100
    for number, stop in [(0, 3), (1, len(passes[1]) - 1)]:
        again = share(batches(), p, global_batch_size=8, batched=True)
        assert ids(again.batches(passes[number][stop - 1][1])) == ids(passes[number])[stop:]


NOT_REPLAYED = {
    "filter-over": lambda: tutorial().filter(lambda e: e["id"] >= 0),
    "two-shuffles": lambda: tf.data.Dataset.range(N).shuffle(8, seed=1).map(
        lambda x: {"id": x}).shuffle(8, seed=2),
    "unordered-map": lambda: tf.data.Dataset.range(N).shuffle(8, seed=1).map(
        lambda x: {"id": x}, num_parallel_calls=2, deterministic=False),
    "random-filter-under": lambda: tf.data.Dataset.range(N).filter(
        lambda x: tf.random.uniform([], seed=3) < 0.9).shuffle(8, seed=1).map(
            lambda x: {"id": x}),
    "random-values-under": None,  # replayed: a random value in a map changes values only
}


@pytest.mark.parametrize("name", sorted(NOT_REPLAYED))
def test_pipelines_whose_order_can_change_between_passes_are_not_replayed(name):
    if NOT_REPLAYED[name] is None:
        ds = tf.data.Dataset.range(N).map(lambda x: {"id": x, "noise": tf.random.uniform(
            [], seed=3)}).shuffle(8, seed=1)
        assert share(ds, plan(1, 0))._replay is not None
        return
    group = share(NOT_REPLAYED[name](), plan(1, 0))
    assert group._replay is None
    _, position = next(iter(group.batches(None)))
    # a count where none is saved (naming its pass where the pipeline reshuffles)
    assert isinstance(position, int) or "saved" in position or set(position) == {"batches", "pass"}


BAD = [
    ({"pass": -3, "batches": 2, "seeds": [87654321, 1]},
     r"position\['pass'\] must be an int >= 0, got -3"),
    ({"pass": 0, "batches": "2", "seeds": [87654321, 1]},
     r"position\['batches'\] must be an int >= 0, got '2'"),
    ({"pass": 0, "batches": 2, "seeds": [1]}, r"position\['seeds'\] must be a list of two ints"),
    ({"pass": 0, "batches": 2}, "not one of a shuffled tf.data pipeline positioned by replay"),
    ({"batches": 2, "saved": {"batches": 1, "state": ""}}, "jaxload 0.2 and earlier"),
    (7, "not one of a shuffled tf.data pipeline"),
    ({"pass": 0, "batches": 2, "seeds": [87654321, 2]}, r"shuffle seeds \[87654321, 2\], this "
                                                        r"pipeline's shuffle has \[87654321, 1\]"),
]


@pytest.mark.parametrize("position,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_malformed_position_is_refused_naming_the_field(position, message):
    group = share(tutorial(), plan(1, 0))
    with pytest.raises(ValueError, match=message):
        list(group.batches(position))


def test_the_replay_rebuilds_the_users_ops_without_reading_its_graph_again():
    ds = tutorial().prefetch(2)
    replay = tf_replay.Replay.of(ds)
    assert replay is not None and len(replay.above) == 2
    number, shuffled = replay.passes.start(None, None)
    first = [int(e["id"]) for e in replay.dataset(shuffled, 0)]
    _, shuffled = replay.passes.start(None, None)
    second = [int(e["id"]) for e in replay.dataset(shuffled, 0)]
    assert [first, second] == iterations(tutorial(), 2)


# --- in real processes ---------------------------------------------------------------------

def decoded(n: int = N):
    """A decode under the shuffle (stateless: moved over it), an augmentation over it."""
    images = np.arange(n * 12, dtype=np.uint8).reshape(n, 2, 2, 3)
    ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(n), "image": images}).map(
        lambda e: {"id": e["id"], "image": tf.image.convert_image_dtype(e["image"], tf.float32)},
        num_parallel_calls=2)
    return ds.shuffle(64, seed=1).map(
        lambda e: {"id": e["id"], "image": tf.image.random_flip_left_right(e["image"])})


PIPELINES = {"tutorial": tutorial, "decoded": decoded}


def run_and_resume(stop_fraction: float, epochs_before: int, name: str = "tutorial",
                   batched: bool = False) -> dict:
    """Worker: ``epochs_before`` whole passes, then the next one whole with a state taken at
    ``stop_fraction`` of it, then a fresh loader over a fresh dataset resumed from it;
    ``batched``: the pipeline batched to the process's batch, as the user's own batches."""
    import jax

    layout = jaxload.data_parallel()
    size = 16 // jax.process_count()

    def loader(ds):
        ds = ds.batch(size, drop_remainder=True) if batched else ds
        return jaxload.from_tf_data(ds, layout, global_batch_size=16, batched=batched)

    kept = loader(PIPELINES[name](N))
    for _ in range(epochs_before):
        for _ in kept:
            pass
    steps, stop, state = [], int(stop_fraction * (N // 16)), None
    for step, batch in enumerate(kept):
        steps.append(record(batch))
        if step + 1 == stop:
            state = kept.get_state()
    resumed = loader(PIPELINES[name](N))
    resumed.set_state(json.loads(json.dumps(state)))
    after = [record(batch) for batch in resumed]
    return dict(process_index=jax.process_index(), state=state, steps=steps, after=after,
                bytes=len(json.dumps(state)))


def rows(results: list[dict], key: str, step: int) -> list[int]:
    found = {}
    for r in results:
        for _, _, start, stop, data in r[key][step]["['id']"]["shards"]:
            found.update(zip(range(start, stop), data.tolist(), strict=True))
    return [found[row] for row in sorted(found)]


@pytest.mark.cluster
@pytest.mark.parametrize("shape,name,batched", [
    ((2, 4), "tutorial", False), ((4, 2), "tutorial", False), ((2, 4), "decoded", False),
    ((2, 4), "tutorial", True)])
def test_a_resume_at_ninety_percent_gives_the_same_rows_in_real_processes(clusters, shape, name,
                                                                          batched):
    processes, devices = shape
    results = clusters.run(run_and_resume, num_processes=processes, local_devices=devices,
                           args=(0.9, 1, name, batched), timeout_s=240)
    steps, local = N // 16, 16 // processes
    own = iterations(PIPELINES[name](), 2)[1]  # the second pass of the user's own pipeline
    # step s holds elements [16 s, 16 (s + 1)) of it: group k's j-th row is element k + K j,
    # or, of the user's own batches, element k * local + j (the step's k-th batch)
    assert [rows(results, "steps", s) for s in range(steps)] == [
        [own[s * 16 + (row if batched else (row % local) * processes + row // local)]
         for row in range(16)] for s in range(steps)]
    stop = int(0.9 * steps)
    assert [rows(results, "after", s) for s in range(steps - stop)] == [
        rows(results, "steps", s) for s in range(stop, steps)]
    for r in results:
        assert r["state"]["position"] == {"pass": 1, "batches": stop, "seeds": [87654321, 1]}
        assert r["bytes"] < 1000


def run_after_the_loop(repeat: int | None) -> dict:
    """Worker: a kept loader's pass, the state taken after its loop, then two more passes; a
    fresh loader over a fresh dataset resumed from that state, two passes."""
    def loader():
        ds = tutorial(N)
        return jaxload.from_tf_data(ds.repeat(repeat) if repeat else ds, jaxload.data_parallel(),
                                    global_batch_size=16)

    kept = loader()
    for _ in kept:
        pass
    state = json.loads(json.dumps(kept.get_state()))
    later = [[record(batch) for batch in kept] for _ in range(2)]
    resumed = loader()
    resumed.set_state(state)
    return dict(state=state, later=later, resumed=[[record(b) for b in resumed] for _ in range(2)])


@pytest.mark.cluster
@pytest.mark.parametrize("repeat", [None, 2])
def test_a_state_taken_after_a_pass_resumes_at_the_next_pass_in_real_processes(clusters, repeat):
    # the pass after it reshuffles: a state that forgot the pass would replay pass 0's order
    results = clusters.run(run_after_the_loop, num_processes=2, local_devices=4, args=(repeat,),
                           timeout_s=240)
    for r in results:
        assert r["state"]["position"] == {"pass": repeat or 1, "batches": 0,
                                          "seeds": [87654321, 1]}
        assert r["state"]["step"] == r["state"]["rows"] == 0
    steps = len(results[0]["later"][0])
    assert steps == (repeat or 1) * N // 16

    def passes(key: str) -> list[list[list[int]]]:  # each pass's steps' global rows
        return [[rows([{"s": r[key][p]} for r in results], "s", s) for s in range(steps)]
                for p in range(2)]

    later = passes("later")
    assert passes("resumed") == later
    assert later[0] != later[1]  # the passes reshuffle, so the comparison above can fail


def files_run_and_resume(pattern: str) -> dict:
    """Worker: the tutorials' file pipeline (``list_files``, unseeded, an interleave, a parse, a
    shuffle of the records) split by files: a pass, then the next with a state taken at 90%,
    then a fresh loader over a fresh pipeline resumed from it (at step 6 of 7)."""
    import jax

    def loader():
        ds = tf.data.Dataset.list_files(pattern).interleave(
            tf.data.TFRecordDataset, cycle_length=2).map(parse_id).shuffle(64, seed=3)
        return jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=16)

    kept = loader()
    for _ in kept:
        pass
    steps, state = [], None
    for step, batch in enumerate(kept):
        steps.append(record(batch))
        if step + 1 == 6:
            state = kept.get_state()
    resumed = loader()
    resumed.set_state(json.loads(json.dumps(state)))
    return dict(process_index=jax.process_index(), state=state, steps=steps,
                after=[record(batch) for batch in resumed], bytes=len(json.dumps(state)))


@pytest.mark.cluster
def test_a_shuffle_of_file_names_resumes_exactly_in_real_processes(clusters, tmp_path):
    from test_tf_files import write_files

    # groups of files 0, 2, 4 (72 records) and 1, 3, 5 (58): 7 steps of 8 rows a group
    pattern = write_files(tmp_path, [20, 25, 30, 15, 22, 18])
    results = clusters.run(files_run_and_resume, num_processes=2, local_devices=4,
                           args=(pattern,), timeout_s=240)
    steps, stop = len(results[0]["steps"]), 6
    assert steps == 7 and all(len(r["after"]) == 1 for r in results)
    assert [rows(results, "after", s) for s in range(steps - stop)] == [
        rows(results, "steps", s) for s in range(stop, steps)]
    delivered = sum((rows(results, "steps", s) for s in range(steps)), [])
    assert len(delivered) == len(set(delivered)) == 16 * steps
    for r in results:
        assert set(r["state"]["position"]) == {"pass", "batches", "seeds"} and r["bytes"] < 1000


MALFORMED = {  # what is changed in a state, and the words of the refusal
    "step -3": (lambda s: s.update(step=-3), "the state's step must be an int >= 0, got -3"),
    "step str": (lambda s: s.update(step="2"), "the state's step must be an int >= 0, got '2'"),
    "position past the end": (lambda s: s["position"].update(batches=100),
                              "position has 100 batches handed out, but its step is 2"),
    "step past the end": (lambda s: s.update(step=100, rows=800, position={
        **s["position"], "batches": 100}), r"rows \(800\) lie past the end of the pipeline"),
    "no position": (lambda s: s.pop("position"), "the state has no position"),
    "plan not a mapping": (lambda s: s.update(plan="data"),
                           "the state's plan must be a mapping"),
    "plan without shard_count": (lambda s: s["plan"].pop("shard_count"),
                                 "the state's plan has no 'shard_count'"),
    "shard_index too large": (lambda s: s["plan"].update(shard_index=1),
                              r"plan\['shard_index'\] must be below its shard_count"),
    "rows -1": (lambda s: s.update(rows=-1), "the state's rows must be an int >= 0, got -1"),
    "rows that disagree": (lambda s: s.update(rows=999), r"the state's rows \(999\) must be "
                                                         "origin \\+ step x rows_per_step"),
    "origin str": (lambda s: s.update(origin="a"), "the state's origin must be an int >= 0"),
    "length str": (lambda s: s.update(length="a"), "the state's length must be an int >= 0"),
    "pass -1": (lambda s: s["position"].update({"pass": -1}),
                r"position\['pass'\] must be an int >= 0"),
    "seeds of another shuffle": (lambda s: s["position"].update(seeds=[1, 2]),
                                 r"the state's position has the shuffle seeds \[1, 2\]"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_state_is_refused_by_set_state_naming_the_field(name):
    change, message = MALFORMED[name]
    ds = tf.data.Dataset.range(64).shuffle(64, seed=1).map(lambda x: {"id": x})
    layout = jaxload.data_parallel(devices=jax_devices())
    loader = jaxload.from_tf_data(ds, layout, global_batch_size=8)
    batches = iter(loader)
    next(batches), next(batches)
    state = json.loads(json.dumps(loader.get_state()))
    loader.close()
    change(state)
    fresh = jaxload.from_tf_data(ds, layout, global_batch_size=8)
    with pytest.raises(ValueError, match=message):
        fresh.set_state(state)
    fresh.close()


def jax_devices():
    import jax

    return jax.devices()


def light_cases():
    rows = {"id": np.arange(N), "image": np.ones((N, 8, 8, 3), np.float32)}  # 150 KB
    source = tf.data.Dataset.from_tensor_slices(rows)
    options = tf.data.Options()
    options.deterministic = False
    return {
        "tutorial": tutorial(),
        "no shuffle": source.map(lambda e: e, num_parallel_calls=2),
        "unseeded": source.shuffle(16),
        "map under the shuffle": source.map(lambda e: {**e, "noise": tf.random.uniform([])})
        .shuffle(8, seed=2).prefetch(2),
        "options under a map": source.with_options(options).map(
            lambda e: e, num_parallel_calls=2),
        "repeat (read whole)": source.repeat(2).shuffle(8, seed=1),
    }


@pytest.mark.parametrize("name", sorted(light_cases()))
def test_the_graph_is_read_without_the_rows_and_says_what_the_whole_one_says(name):
    from jaxload._src.pipelines.tf import order as tf_order
    from jaxload._src.pipelines.tf.graph import DatasetGraph

    ds = light_cases()[name]
    light, whole = tf_read.read_graph(ds), DatasetGraph.of(ds)
    for read in (lambda g: sorted(g.ops()), tf_order.structure, tf_order.order_varying,
                 tf_order.value_varying, tf_order.unseen_order,
                 lambda g: (g.symbolic(), g.stateful, g.external_state, g.deterministic,
                            g.ignores_external_state, g.symbolic_option)):
        assert read(light) == read(whole), name
    rows = light.graph.ByteSize() < 20_000
    assert rows is (name != "repeat (read whole)"), light.graph.ByteSize()


def test_a_build_over_large_arrays_serializes_no_row():
    from jaxload._src import compat

    images = np.zeros((2048, 64, 64, 3), np.float32)  # 100 MB
    ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(2048), "image": images}).shuffle(
        256, seed=1).map(lambda e: e)
    sizes = []
    original, checked = compat.tf_graph, compat.tf_graph_checked

    def counted(*args, **kwargs):
        graph = original(*args, **kwargs)
        sizes.append(graph.ByteSize())
        return graph

    def counted_checked(ds):
        graph, refused = checked(ds)
        sizes.append(graph.ByteSize())
        return graph, refused

    compat.tf_graph, compat.tf_graph_checked = counted, counted_checked
    try:
        group = share(ds, plan(2, 0))
        for _ in range(2):
            assert sum(1 for _ in group.batches(None)) == 2048 // 16
    finally:
        compat.tf_graph, compat.tf_graph_checked = original, checked
    assert len(sizes) == 1 and sizes[0] < 20_000, sizes  # once per build, none per pass


def test_a_state_taken_in_a_later_pass_continues_that_pass_under_another_plan():
    # the global row of the state is a row of that pass's order, not of the first pass's
    own = iterations(tutorial(), 2)[1]
    layout = jaxload.data_parallel(devices=jax_devices())
    first = jaxload.from_tf_data(tutorial(), layout, global_batch_size=16)
    for _ in first:  # pass 0
        pass
    batches = iter(first)  # pass 1
    for _ in range(4):
        next(batches)
    state = json.loads(json.dumps(first.get_state()))
    first.close()
    assert state["rows"] == 64 and state["position"]["pass"] == 1
    bigger = jaxload.from_tf_data(tutorial(), layout, global_batch_size=32)  # another plan
    bigger.set_state(state)
    rest = [int(i) for batch in bigger for i in np.asarray(batch["id"])]
    assert rest == own[64:64 + len(rest)] and len(rest) == (N - 64) // 32 * 32


def parse_id(serialized):
    return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})


@pytest.mark.parametrize("parsed", ["over", "under"])
def test_split_by_files_each_group_replays_a_shuffle_of_its_own_files(tmp_path, parsed):
    from test_tf_files import write_files

    from jaxload._src.pipelines.tf.split import files_of_group

    sizes = [37, 50, 13, 60, 20, 31, 44, 5]
    pattern = write_files(tmp_path, sizes)

    def records():  # the file records shuffled, parsed over the shuffle or under it
        ds = tf.data.Dataset.list_files(pattern, shuffle=False).interleave(
            tf.data.TFRecordDataset, cycle_length=2)
        if parsed == "over":
            return ds.shuffle(32, seed=3).map(parse_id)
        return ds.map(parse_id, num_parallel_calls=2).shuffle(32, seed=3)  # a resume: over

    def share_of(k):
        return share(records(), plan(4, k))

    delivered = []
    for k in range(4):
        group = share_of(k)
        assert group.sharding.mode == "files" and group._replay is not None
        assert len(group._replay.passes.below) == (parsed == "under")
        passes = [list(group.batches(None)) for _ in range(2)]
        own = [e["id"] for e in files_of_group(records(), 4, k).as_numpy_iterator()]
        assert sum(ids(passes[0]), []) == own[:len(sum(ids(passes[0]), []))]  # TF's own split
        assert ids(passes[0]) != ids(passes[1])  # another order each pass
        assert {i // 1000 for i in sum(ids(passes[1]), [])} <= {k, k + 4}  # its files only
        for number, stop in [(0, 2), (1, len(passes[1]) - 1)]:
            again = share_of(k)
            assert ids(again.batches(passes[number][stop - 1][1])) == ids(passes[number])[stop:]
        delivered += sum(ids(passes[0]), [])
    assert len(delivered) == len(set(delivered))


@pytest.mark.parametrize("seed,form", [(7, "interleave"), (None, "reader"), (7, "flat_map")])
def test_a_shuffle_of_file_names_under_the_shuffle_is_replayed_not_saved(tmp_path, seed, form):
    """The tutorials' file pipeline: ``list_files`` (which shuffles the names, unseeded by
    default), an ``interleave`` of the files, a parse and a shuffle of the records. Both
    shuffles are rebuilt for each pass: nothing is saved as a pass runs (the records' shuffle
    buffer was saved in every iterator checkpoint), each group reads its own files, and a
    resume continues exactly, in a fresh pipeline (another process's)."""
    from test_tf_files import all_ids, write_files

    from jaxload._src.pipelines.tf.split import files_of_group

    sizes = [37, 50, 13, 60, 20, 31, 44, 5]
    pattern = write_files(tmp_path, sizes)

    def records():
        names = tf.data.Dataset.list_files(pattern, seed=seed)
        read = {"interleave": lambda: names.interleave(
                    tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2),
                "reader": lambda: tf.data.TFRecordDataset(names),  # a flat map inside
                "flat_map": lambda: names.flat_map(tf.data.TFRecordDataset)}[form]()
        return read.map(parse_id).shuffle(32, seed=3)

    own = iterations(records(), 3)
    delivered: list[list[int]] = [[], []]
    for processes, k in [(1, 0), (4, 0), (4, 1), (4, 2), (4, 3)]:
        group = share(records(), plan(processes, k))
        assert group._replay is not None
        passes = [list(group.batches(None)) for _ in range(3)]
        assert all(set(position) == {"pass", "batches", "seeds"} and len(json.dumps(position))
                   < 100 for batches in passes for _, position in batches)
        got = [sum(ids(batches), []) for batches in passes]
        if processes == 1 and seed is not None:  # the user's own iterations, pass by pass
            assert got == [order[:len(got[0])] for order in own]
        assert got[0] != got[1] != got[2]  # another order of the names and records each pass
        if processes == 4:
            assert group.sharding.mode == "files"
            files = {i // 1000 for i in files_of_group(records(), 4, k).map(
                lambda e: e["id"]).as_numpy_iterator()}  # TensorFlow's own split of the files
            assert all({i // 1000 for i in rows} == files for rows in got)
            delivered[0] += got[0]
            delivered[1] += got[1]
        for number, stop in [(0, 2), (2, len(passes[2]) - 1), (1, 5)]:
            again = share(records(), plan(processes, k))
            assert ids(again.batches(json.loads(json.dumps(passes[number][stop - 1][1])))) == (
                ids(passes[number])[stop:]), (processes, k, number, stop)
    for rows in delivered:  # every group its own records: none twice, and (16 a step) most
        assert len(rows) == len(set(rows)) and set(rows) <= set(all_ids(sizes))
        assert len(rows) > len(all_ids(sizes)) - 4 * 4 * 8


@pytest.mark.parametrize("processes", [1, 4])
def test_a_resume_reads_and_decodes_only_what_comes_after_its_position(tmp_path, processes):
    """A shuffle over a map that reads and decodes its element (stateless): a resume shuffles
    the names and maps after, so it opens only the files after its position. Those before it
    are deleted here: a resume that read them again would fail."""
    n, per_step = 96, 16
    paths = [str(tmp_path / f"{i:03d}.txt") for i in range(n)]
    for i, path in enumerate(paths):
        with open(path, "w") as f:
            f.write(str(i))

    def pipeline():
        return tf.data.Dataset.from_tensor_slices(paths).map(
            lambda path: {"id": tf.strings.to_number(tf.io.read_file(path), tf.int64)},
            num_parallel_calls=2).shuffle(32, seed=5).map(lambda e: {"id": e["id"] + 0})

    own = [int(e["id"]) for e in pipeline()]
    p = plan(processes, processes - 1)
    group = share(pipeline(), p)
    assert group._replay is not None and len(group._replay.passes.below) == 1
    batches = list(group.batches(None))
    rows = [own[s * per_step:(s + 1) * per_step][p.shard_index::p.shard_count]
            for s in range(n // per_step)]
    assert ids(batches) == rows
    stop = len(batches) * 3 // 4
    for i in own[:stop * per_step]:  # every row handed out before the position, all groups'
        (tmp_path / f"{i:03d}.txt").unlink()
    again = share(pipeline(), p)
    assert ids(again.batches(json.loads(json.dumps(batches[stop - 1][1])))) == rows[stop:]


def test_the_passes_from_one_point_share_one_rebuilt_pipeline(monkeypatch):
    built, rebuild = [], tf_replay.Replay.dataset

    def counted(self, shuffled, skip, split=None):
        built.append(skip)
        return rebuild(self, shuffled, skip, split)

    monkeypatch.setattr(tf_replay.Replay, "dataset", counted)
    group = share(tutorial(), plan(1, 0))
    own = iterations(tutorial(), 3)
    for number in range(3):  # one pipeline, one iterator of it per pass: another order each
        assert sum(ids(group.batches(None)), []) == own[number][:N // 16 * 16]
    assert built == [0]
    _, position = list(group.batches(None))[3]
    assert built == [0] and position["pass"] == 3
    assert len(list(group.batches(position))) == N // 16 - 4 and built == [0, 64]


def test_an_unshuffled_source_in_memory_is_replayed_and_mapped_for_the_groups_share_only():
    calls = []

    def count(x):
        calls.append(int(x))
        return x

    ds = tf.data.Dataset.range(N).map(
        lambda x: {"id": tf.ensure_shape(tf.py_function(count, [x], tf.int64), [])})
    group = share(ds, plan(4, 1))
    whole = list(group.batches(None))
    assert ids(whole) == [list(range(s * 16 + 1, (s + 1) * 16, 4)) for s in range(N // 16)]
    assert sorted(calls) == list(range(1, N, 4))  # only this group's elements
    assert whole[2][1] == {"pass": 0, "batches": 3, "seeds": [0, 0]}
    calls.clear()
    assert ids(group.batches(whole[2][1])) == ids(whole)[3:]
    assert min(calls) == 3 * 16 + 1  # the rows before the position are not mapped again


@pytest.mark.parametrize("shuffled", [True, False])
def test_the_count_of_passes_does_not_keep_a_dataset_alive(shuffled):
    import gc
    import weakref

    source = tf.data.Dataset.range(N)
    ds = source.shuffle(8, seed=1) if shuffled else source
    group = share(ds.map(lambda x: {"id": x}), plan(1, 0))
    assert len(list(group.batches(None))) == N // 16
    gone = weakref.ref(ds)
    del ds, source, group
    gc.collect()
    assert gone() is None and all(key is not gone for key in tf_shuffle.PASSES.keys())


@pytest.mark.parametrize("count", [3, None])
def test_a_repeat_over_the_shuffle_reshuffles_each_repetition_and_resumes_exactly(count):
    def repeated():  # the TF 1 tutorials' shape: shuffle, then repeat
        return tutorial(n=64, buffer=16).repeat(count).map(lambda e: e)

    group = share(repeated(), plan(1, 0))
    assert group._replay is not None and group._replay.repeat[1:] == (count or -1, 64)
    own = repeated()
    if count is None:  # one pass without end: its first 3 repetitions
        first = [b for _, b in zip(range(12), group.batches(None), strict=False)]
        passes = [list(first)]
        mine = list(itertools.islice((int(e["id"]) for e in own), 192))
        assert sum(ids(passes[0]), []) == mine
    else:
        passes = [list(group.batches(None)) for _ in range(2)]
        # the first pass is the user's first iteration (how many of the shuffle's iterators
        # tf.data makes over one iteration of a repeat varies with the ops in between: the
        # later passes are each another order, not necessarily the user's later iterations)
        assert sum(ids(passes[0]), []) == [int(e["id"]) for e in own]
        assert sum(ids(passes[0]), []) != sum(ids(passes[1]), [])
        for number, batches in enumerate(passes):  # each repetition another order
            assert len({tuple(sum(ids(batches), [])[i:i + 64]) for i in (0, 64, 128)}) == 3
            assert {p["pass"] for _, p in batches} == {3 * number}
    for number, stop in [(0, 2), (0, 5), (0, 9), (len(passes) - 1, 11)]:
        position = json.loads(json.dumps(passes[number][stop - 1][1]))
        again = share(repeated(), plan(1, 0))
        rest = ids(itertools.islice(again.batches(position), 12 - stop))
        assert rest == ids(passes[number])[stop:12], (number, stop)


def test_a_repeat_over_a_shuffle_of_records_of_unknown_count_keeps_the_checkpoints(tmp_path):
    from test_tf_files import write_files

    pattern = write_files(tmp_path, [37, 50, 13, 60, 20, 31, 44, 5])
    ds = tf.data.Dataset.list_files(pattern, shuffle=False).interleave(
        tf.data.TFRecordDataset, cycle_length=2).shuffle(32, seed=3).map(parse_id).repeat(2)
    group = share(ds, plan(4, 1))
    assert group._replay is None  # a repetition's length is unknown: not replayed
    _, position = next(iter(group.batches(None)))
    assert "saved" in position


def test_a_repeat_over_the_shuffle_split_by_elements_resumes_exactly():
    def repeated():
        return tutorial(n=64, buffer=16).repeat(3)

    group = share(repeated(), plan(4, 2))
    whole = list(group.batches(None))
    assert len(whole) == 3 * 64 // 16
    for stop in (3, 5, 10):
        again = share(repeated(), plan(4, 2))
        assert ids(again.batches(whole[stop - 1][1])) == ids(whole)[stop:], stop


def _state_of(ds, steps: int = 3) -> dict:
    loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=16)
    batches = iter(loader)
    for _ in range(steps):
        next(batches)
    state = json.loads(json.dumps(loader.get_state()))
    batches.close()
    return state


def _restored(state: dict, ds):
    loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=16)
    loader.set_state(state)
    return loader


@pytest.mark.parametrize("other", [
    lambda: tutorial(seed=2),  # replayed: another shuffle seed
    lambda: tutorial(seed=2).filter(lambda e: e["id"] >= 0),  # an iterator checkpoint
    lambda: tutorial().map(lambda e: {**e, "image": e["image"] + 1.0}),  # another map
    lambda: tf.data.Dataset.from_tensor_slices(  # other arrays of the same shapes
        {"id": np.arange(N)[::-1].copy(), "image": np.zeros((N, 2, 2, 3), np.float32)}).shuffle(
        64, seed=1),
])
def test_a_state_restored_into_another_pipeline_is_refused_by_name(other):
    mine = tutorial(seed=1) if other().cardinality() == N else tutorial(seed=1).filter(
        lambda e: e["id"] >= 0)
    state = _state_of(mine)
    with pytest.raises(ValueError, match=r"the state was taken with fingerprint='\w+', this "
                                         r"loader has fingerprint='\w+'; a state continues only "
                                         r"the same pipeline"):
        _restored(state, other())


def test_a_state_restored_into_the_same_pipeline_rebuilt_continues():
    state = _state_of(tutorial())
    loader = _restored(state, tutorial())
    rest = [b["id"].tolist() for b in (jax_numpy(batch) for batch in loader)]
    assert len(rest) == N // 16 - 3
    whole = [int(e["id"]) for e in tutorial()]
    assert sum(rest, []) == whole[3 * 16 : (N // 16) * 16]


def jax_numpy(batch):
    return {k: np.asarray(v) for k, v in batch.items()}
