"""A Grain pipeline keeps its meaning over loading groups, or every process refuses it before the
first batch: in real processes (2 processes x 2 devices, data_parallel: K = 2 loading groups,
remainder="pad"). Each shape either delivers every record exactly as often as the unsharded
pipeline gives it, or raises the same ValueError on every process with no batch handed out."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import jaxload

TIMEOUT_S = 30  # each loader's wait for the others: a process left behind fails, never hangs
BOUNDED = dict(timeout_s=TIMEOUT_S, on_failure="raise")  # a failure raised, the process kept
ROWS = 64


def _element(i) -> dict:
    return {"id": np.int32(i), "x": np.float32(i)}


def _noisy(element, rng) -> dict:
    return {**element, "x": np.float32(element["x"] + rng.normal())}


def _delivered(make) -> dict:
    """Every id one pass of ``make()`` delivers (real rows, all loading groups: on process 0),
    or the error it raised and how many batches came before it."""
    handed = 0
    try:
        loader = make()
        for _ in loader:
            handed += 1
        steps = loader.records(all_processes=True)
    except Exception as e:  # the test compares what each process saw
        return {"error": f"{type(e).__name__}: {e}", "handed": handed}
    return {"ids": sorted(i for step in steps for ids in step["ids"].values() for i in ids)}


def _source(ids):
    import grain

    return grain.MapDataset.source(list(ids)).map(_element)


def _map_shapes(layout, plan) -> dict:
    import grain
    import jax

    p, k, big = jax.process_index(), plan.shard_index, plan.shard_count
    load = dict(global_batch_size=16, remainder="pad", record="id", **BOUNDED)

    def files(order):  # 4 files of 16 records, read in the order of the file list
        return _source([f * 16 + r for f in order for r in range(16)])

    return {
        "whole": lambda: jaxload.from_grain(_source(range(ROWS)), layout, **load),
        "shuffled alike": lambda: jaxload.from_grain(
            _source(range(ROWS)).shuffle(seed=3), layout, **load),
        "unseeded noise in a map": lambda: jaxload.from_grain(_source(range(ROWS)).map(
            lambda e: _noisy(e, np.random.default_rng())), layout, **load),
        "seed by process": lambda: jaxload.from_grain(
            _source(range(ROWS)).shuffle(seed=p), layout, **load),
        "own split": lambda: jaxload.from_grain(_source(range(ROWS))[k::big], layout, **load),
        "own split of the source's list": lambda: jaxload.from_grain(
            _source(list(range(ROWS + 1))[k::big]), layout, **load),
        "own split, shard=False": lambda: jaxload.from_grain(
            _source(range(ROWS))[k::big], layout, shard=False, **load),
        "length by process": lambda: jaxload.from_grain(
            _source(range(ROWS + 4 * p)), layout, **load),
        "file order by process": lambda: jaxload.from_grain(
            files([0, 1, 2, 3] if p == 0 else [2, 0, 3, 1]), layout, **load),
        # an index shuffled alike, mapped to paths listed in another order on each host (an
        # unsorted glob): the order is decided in the top map
        "paths by host in the top map": lambda: jaxload.from_grain(
            grain.MapDataset.range(ROWS).shuffle(seed=3).map(
                lambda i: _element(list(range(ROWS))[::1 - 2 * p][i])), layout, **load),
        "filter": lambda: jaxload.from_grain(
            grain.MapDataset.range(2 * ROWS).filter(lambda i: i % 2 == 0).map(_element),
            layout, **load),
        # Grain's own form: an IterDataset, split by elements (every process reads it all)
        "iter dataset": lambda: jaxload.from_grain(
            _source(range(ROWS)).shuffle(seed=3).to_iter_dataset(), layout, **load),
        "iter dataset, batched": lambda: jaxload.from_grain(
            _source(range(ROWS)).to_iter_dataset().batch(8), layout, batched=True, **load),
        "iter dataset, seed by process": lambda: jaxload.from_grain(
            _source(range(ROWS)).shuffle(seed=p).to_iter_dataset(), layout, **load),
        "random_map after own split": lambda: jaxload.from_grain(
            _source(range(ROWS))[k::big].to_iter_dataset().random_map(_noisy, seed=5),
            layout, shard=False, **load),
        "random_map after own split, seeded by group": lambda: jaxload.from_grain(
            _source(range(ROWS))[k::big].to_iter_dataset().random_map(_noisy, seed=5 + k),
            layout, shard=False, **load),
    }


def _data_loader(layout, seed: int, operations=(), batch: int = 8, records: int = ROWS):
    import grain

    sampler = grain.samplers.IndexSampler(
        num_records=records, shuffle=True, num_epochs=1, seed=seed,
        shard_options=jaxload.grain_shard_options(layout, 2 * batch))
    return grain.DataLoader(data_source=[_element(i) for i in range(records)], sampler=sampler,
                            operations=[*operations, grain.transforms.Batch(batch)])


def _filtered_data_loader(layout, batch: int):
    import grain

    class KeepOdd(grain.transforms.Filter):
        def filter(self, element):
            return element["id"] % 2 == 1

    return _data_loader(layout, 0, [KeepOdd()], batch=batch)


def _looked_up(order):
    """A DataLoader Map operation that looks an id up in ``order`` (paths listed per host)."""
    import grain

    class LookUp(grain.transforms.Map):
        def map(self, element):
            return _element(order[int(element["id"])])

    return LookUp()


def _data_loader_shapes(layout) -> dict:
    import jax

    load = dict(global_batch_size=16, record="id", **BOUNDED)
    return {
        "data loader": lambda: jaxload.from_grain(_data_loader(layout, 7), layout, **load),
        "data loader seeded by process": lambda: jaxload.from_grain(
            _data_loader(layout, jax.process_index()), layout, **load),
        "data loader source length by process": lambda: jaxload.from_grain(
            _data_loader(layout, 7, records=ROWS + 4 * jax.process_index()), layout, **load),
        "data loader, a Map op alike": lambda: jaxload.from_grain(
            _data_loader(layout, 7, [_looked_up(list(range(ROWS)))]), layout, **load),
        # the same types of operations, but a lookup in a list ordered per host
        "data loader, a Map op by host": lambda: jaxload.from_grain(_data_loader(
            layout, 7, [_looked_up(list(range(ROWS))[::1 - 2 * jax.process_index()])]),
            layout, **load),
    }


def _keras_shapes(layout) -> dict:
    """Keras's image loading as Grain (``format="grain"``: an IterDataset), over ROWS images
    whose first pixel is their id, with Keras's default ``seed=None`` (each process draws its
    own seed and shuffles the file list with it) and seeded; the latter also batched by Keras."""
    import tempfile
    from pathlib import Path

    import keras
    from PIL import Image

    root = Path(tempfile.mkdtemp())  # the same files on every process
    for i in range(ROWS):
        (root / "ab"[i % 2]).mkdir(exist_ok=True)
        Image.fromarray(np.full((2, 2, 3), i, np.uint8)).save(root / "ab"[i % 2] / f"{i}.png")

    def images(seed, batch_size=None):
        ds = keras.utils.image_dataset_from_directory(
            str(root), image_size=(2, 2), batch_size=batch_size, seed=seed, format="grain")
        return ds.map(lambda e: {"id": np.asarray(e[0])[..., 0, 0, 0].astype(np.int32)})

    load = dict(global_batch_size=16, remainder="pad", record="id", **BOUNDED)
    with warnings.catch_warnings():  # the warning that every process reads it whole
        warnings.simplefilter("ignore", jaxload.ShardingWarning)
        return {
            "keras grain, seed=None": lambda: jaxload.from_grain(images(None), layout, **load),
            "keras grain, seeded": lambda: jaxload.from_grain(images(7), layout, **load),
            "keras grain, seeded, batched": lambda: jaxload.from_grain(
                images(7, batch_size=8), layout, batched=True, **load),
        }


def _resumed_with_a_filter(layout) -> str:
    """A DataLoader with a Filter op, its state resumed on a new global batch size."""
    loader = jaxload.from_grain(_filtered_data_loader(layout, 4), layout, global_batch_size=8,
                                **BOUNDED)
    next(iter(loader))
    state = json.loads(json.dumps(loader.get_state()))
    fresh = jaxload.from_grain(_filtered_data_loader(layout, 8), layout, global_batch_size=16,
                               **BOUNDED)
    try:
        fresh.set_state(state)
    except ValueError as e:
        return f"ValueError: {e}"
    return "resumed"


def _off_on_process_1(element: dict) -> dict:
    """Element 40 with another value on process 1: past the first elements compared once."""
    import jax

    if jax.process_index() == 1 and int(element["id"]) == 40:
        return {**element, "x": np.float32(-1)}
    return element


def _iter_dataset_resumed(layout) -> list[int]:
    """An IterDataset split by elements, stopped after 2 steps and resumed from its state on the
    same topology: the ids of both runs (real rows, all loading groups)."""
    def make():
        ds = _source(range(ROWS)).shuffle(seed=3).to_iter_dataset()
        return jaxload.from_grain(ds, layout, global_batch_size=16, remainder="pad",
                                  record="id", **BOUNDED)

    first = make()
    with iter(first) as batches:
        next(batches), next(batches)
    state = json.loads(json.dumps(first.get_state()))
    second = make()
    second.set_state(state)
    for _ in second:
        pass
    steps = first.records(all_processes=True) + second.records(all_processes=True)
    return sorted(i for step in steps for ids in step["ids"].values() for i in ids)


def _a_later_pass(layout) -> dict:
    """A MapDataset whose top map looks ids up in a table that differs on process 1 at one
    index, one that the first pass's draw of indices misses and the second pass's holds: the
    passes one loader completes, and the error that ended it."""
    import zlib

    import grain
    import jax

    from jaxload._src.pipelines.grain.described import drawn

    def draw(ordinal: int) -> set[int]:  # a pass's seed: its exchange's name
        return set(drawn(ROWS, 2, zlib.crc32(f"jaxload/loader/later/pass/{ordinal}".encode())))

    (index, *_) = sorted(draw(1) - draw(0))
    table = list(range(ROWS))
    if jax.process_index() == 1:
        table[index] = table[index - 1]  # as a list built per host, one entry off
    loader = jaxload.from_grain(grain.MapDataset.range(ROWS).map(lambda i: _element(table[i])),
                                layout, global_batch_size=16, remainder="pad", name="later",
                                **BOUNDED)
    handed = 0
    for done in range(3):
        handed = 0
        try:
            for _ in loader:
                handed += 1
        except ValueError as e:
            return {"passes": done, "handed": handed, "error": str(e)}
    return {"passes": 3}


def _filtered_drop(layout, keep, stop_after: int | None = None) -> dict:
    """A filtered MapDataset of 2 * ROWS indices over the loading groups with
    ``remainder="drop"``: the ids delivered (all processes), the warnings of the pass's end
    (this process's), and where ``stop_after`` is given, a pass stopped after that many steps."""
    import grain

    loader = jaxload.from_grain(grain.MapDataset.range(2 * ROWS).filter(keep).map(_element),
                                layout, global_batch_size=16, remainder="drop", record="id",
                                **BOUNDED)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with iter(loader) as batches:
            for step, _ in enumerate(batches):
                if step + 1 == stop_after:
                    break
    steps = loader.records(all_processes=True)
    return {"ids": sorted(i for step in steps for ids in step["ids"].values() for i in ids),
            "warnings": [str(w.message) for w in caught if "kept rows left" in str(w.message)]}


def _not_by_three(i) -> bool:
    return i % 3 != 0


def _even(i) -> bool:
    return i % 2 == 0


def shapes() -> dict:
    """Worker side: what each shape gives on this process."""
    layout = jaxload.data_parallel()
    plan = layout.plan(16)
    made = {**_map_shapes(layout, plan), **_data_loader_shapes(layout), **_keras_shapes(layout)}
    out = {name: _delivered(make) for name, make in made.items()}
    out["data loader with a filter, resumed on a new global batch size"] = \
        _resumed_with_a_filter(layout)
    out["iter dataset, resumed"] = _iter_dataset_resumed(layout)
    out["iter dataset, differs at element 40"] = _delivered(lambda: jaxload.from_grain(
        _source(range(ROWS)).map(_off_on_process_1).to_iter_dataset(), layout,
        global_batch_size=16, remainder="pad", record="id", **BOUNDED))
    out["differs where a later pass draws"] = _a_later_pass(layout)
    out["filter, drop"] = _filtered_drop(layout, _not_by_three)
    out["filter, drop, stopped"] = _filtered_drop(layout, _not_by_three, stop_after=2)
    out["filter by index parity, drop"] = _filtered_drop(layout, _even)
    return out


DELIVERED = ["whole", "shuffled alike", "unseeded noise in a map", "own split, shard=False",
             "random_map after own split, seeded by group", "data loader", "iter dataset",
             "data loader, a Map op alike",
             "iter dataset, batched", "keras grain, seeded", "keras grain, seeded, batched"]
REFUSED = {
    "seed by process": r"the processes shard different datasets: the hash of a few elements at "
                       r"the same indices \"\w+\" on process \[0\], \"\w+\" on process \[1\]",
    "own split": r"the hash of a few elements .* pass the whole dataset, or keep your split "
                 r"and pass shard=False",
    "own split of the source's list": r"length 33 on process \[0\], 32 on process \[1\]; .* "
                                      r"pass the whole dataset, or keep your split",
    "length by process": r"length 64 on process \[0\], 68 on process \[1\]",
    "file order by process": r"the processes shard different datasets: the hash of a few elements",
    "iter dataset, seed by process": r"the processes shard different datasets: the hash of the "
                                     r"first elements",
    "keras grain, seed=None": r"the hash of the first elements the pipeline yields .* "
                              r"seed=None: pass seed=",
    "paths by host in the top map": r"the processes shard different datasets: the hash of a few "
                                    r"elements as the pipeline yields them",
    "random_map after own split": r"loading groups \[0-1\] draw the same random sequence: .* "
                                  r"seed=seed \+ plan.shard_index",
    "data loader seeded by process": r"the sampler \(without its shard options\) \"IndexSampler"
                                     r"\(num_records=64, shuffle=True, num_epochs=1, seed=0\)\" "
                                     r"on process \[0\]",
    "data loader source length by process": r"the source's length 64 on process \[0\], 68 on process",
    "data loader, a Map op by host": r"the hash of what the operations make of a few source "
                                     r"records \"\w+\" on process \[0\], \"\w+\" on process \[1\]",
}


@pytest.fixture(scope="module")
def results(clusters):
    return clusters.run(shapes, num_processes=2, local_devices=2, timeout_s=400)


@pytest.mark.cluster
@pytest.mark.parametrize("name", DELIVERED)
def test_delivered_exactly(results, name):
    assert results[0][name] == {"ids": list(range(ROWS))}, results[0][name]


@pytest.mark.cluster
def test_an_iter_dataset_split_by_elements_resumes_exactly(results):
    assert results[0]["iter dataset, resumed"] == list(range(ROWS))


@pytest.mark.cluster
def test_an_iter_dataset_split_by_elements_proves_every_step(results):
    """The stream differs by process at element 40 (step 2 of global batches of 16): the two
    steps before it are handed out, then every process raises the same error naming the step
    and the element."""
    seen = [r["iter dataset, differs at element 40"] for r in results]
    assert seen[0] == seen[1], seen
    assert seen[0]["handed"] == 2, seen[0]
    assert seen[0]["error"].startswith("ValueError: at step 2 the processes read different "
                                       "elements of the pipeline before splitting it"), seen[0]
    assert "first at its element 8 (0-based)" in seen[0]["error"], seen[0]


@pytest.mark.cluster
def test_a_filter_over_loading_groups_delivers_every_kept_row_once(results):
    # each loading group filters its own share (every 2nd index); remainder="pad" evens them out
    assert results[0]["filter"] == {"ids": list(range(0, 2 * ROWS, 2))}, results[0]["filter"]


@pytest.mark.cluster
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_on_every_process_before_the_first_batch(results, name):
    import re

    seen = [r[name] for r in results]
    assert seen[0] == seen[1], seen  # the same error on every process
    assert seen[0]["handed"] == 0 and seen[0]["error"].startswith("ValueError: "), seen[0]
    assert re.search(REFUSED[name], seen[0]["error"]), seen[0]["error"]


@pytest.mark.cluster
def test_a_filter_split_with_remainder_drop_counts_the_rows_it_did_not_deliver(results):
    import re

    # group 0 filters the even indices (42 kept), group 1 the odd ones (43 kept): 5 steps of 8
    # rows each, so 2 and 3 kept rows are not delivered, each named by its own process
    kept = [i for i in range(2 * ROWS) if _not_by_three(i)]
    delivered = results[0]["filter, drop"]["ids"]
    assert len(delivered) == 80 and set(delivered) <= set(kept)
    left = [int(re.search(r"had (\d+) kept rows left", r["filter, drop"]["warnings"][0])[1])
            for r in results]
    assert left == [2, 3] and sum(left) == len(kept) - len(delivered)
    assert all("drifted" not in r["filter, drop"]["warnings"][0] for r in results), [
        r["filter, drop"] for r in results]
    # a pass the loop stopped (break) did not end as agreed: nothing counted, nothing said
    assert all(r["filter, drop, stopped"]["warnings"] == [] for r in results), [
        r["filter, drop, stopped"] for r in results]
    # a filter that keeps every index of group 0 and none of group 1's: the pass ends at once,
    # and process 0 names the 64 rows its group had left, and the drift
    parity = [r["filter by index parity, drop"] for r in results]
    assert parity[0]["ids"] == []
    assert "loading group 0 (this process's) had 64 kept rows left" in parity[0]["warnings"][0], \
        parity[0]["warnings"][0]
    assert "drifted far" in parity[0]["warnings"][0] and parity[1]["warnings"] == []


@pytest.mark.cluster
def test_each_pass_compares_elements_at_indices_drawn_anew(results):
    # the first pass's indices miss the one that differs; the second pass's hold it, and that
    # pass is refused on every process before its first batch
    seen = [r["differs where a later pass draws"] for r in results]
    assert seen[0] == seen[1], seen
    assert seen[0]["passes"] == 1 and seen[0]["handed"] == 0, seen[0]
    assert "the hash of a few elements as the pipeline yields them" in seen[0]["error"], seen[0]


@pytest.mark.cluster
def test_a_data_loader_with_a_filter_is_not_resumed_on_a_new_global_batch_size(results):
    for r in results:
        assert r["data loader with a filter, resumed on a new global batch size"].startswith(
            "ValueError: the state was taken under another plan"), r
        assert "the grain.DataLoader's KeepOdd operation keeps another number of records" in \
            r["data loader with a filter, resumed on a new global batch size"]


def _kept():
    import grain

    return grain.MapDataset.range(2 * ROWS).filter(lambda i: i % 2 == 0).map(_element)


def test_a_filter_under_a_padded_global_batch_is_refused():
    # 8 devices, 6 rows padded to 8: each step's rows are read by index, which a filter breaks
    with pytest.raises(ValueError, match=r"drops elements \(filter or flat_map\) to split over a "
                                         r"padded global batch"):
        jaxload.from_grain(_kept(), jaxload.data_parallel(), global_batch_size=6, remainder="pad")


def test_a_filtered_state_of_several_loading_groups_is_not_continued_on_another_plan():
    layout = jaxload.data_parallel()
    loader = jaxload.from_grain(_kept(), layout, global_batch_size=8)
    next(iter(loader))
    state = loader.get_state()
    assert state["position"]["next_index"] > 8  # 8 kept of more read: not a prefix
    # as if taken by one of 2 loading groups, which each filtered their own share, before any
    # element was dropped: its read count alone would not tell
    groups = {**state, "position": {**state["position"], "next_index": 8},
              "plan": {**state["plan"], "shard_count": 2, "local_batch_size": 4}}
    with pytest.raises(ValueError, match="the state's 2 loading groups each filtered their own "
                                         "share, so the rows consumed are not a prefix"):
        jaxload.from_grain(_kept(), layout, global_batch_size=16).set_state(groups)


def test_a_filter_split_with_remainder_drop_says_what_it_drops():
    from jaxload._src import told
    from jaxload._src.pipelines.grain import map_dataset as grain_map

    plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 2)).plan(16)
    told.forget()
    with pytest.warns(UserWarning, match=r"each group filters its own share .* With "
                                         r"remainder='drop' a pass ends when one group runs out"):
        grain_map.warn_filtered_split(plan, "drop")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grain_map.warn_filtered_split(plan, "drop")  # once
        grain_map.warn_filtered_split(plan, "pad")  # pad delivers every kept row: nothing to say
