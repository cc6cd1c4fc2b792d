"""Loading groups whose pipelines have different lengths (shard=False): "drop" and "pad", in real
2x4 and 4x2 runs, tf.data and Grain, including model replicas across processes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from placement import global_rows, make_layout, make_loader, record

# (backend, layout, elements per loading group, global_batch_size, remainder)
SCENARIOS = {
    (2, 4): [
        ("tf", "data_parallel", (100, 40), 16, "drop"),
        ("tf", "data_parallel", (100, 40), 16, "pad"),
        ("grain", "in_process", (100, 40), 16, "pad"),
        ("grain", "data_parallel", (37, 0), 16, "pad"),  # group 1 has no data at all
        ("grain", "data_parallel", (0, 0), 16, "pad"),
        ("tf", "data_parallel", (0, 0), 16, "drop"),
    ],
    (4, 2): [
        ("tf", "across_processes", (100, 40), 16, "pad"),
        ("grain", "across_processes", (100, 40), 16, "pad"),
        ("grain", "across_processes", (100, 40), 16, "drop"),
    ],
}
CASES = [(t, i) for t, s in SCENARIOS.items() for i in range(len(s))]
CASE_IDS = [f"{t[0]}x{t[1]}-{s[0]}-{s[1]}-{s[2][0]}vs{s[2][1]}-{s[4]}"
            for t, ss in SCENARIOS.items() for s in ss]


def group_ids(group: int, lengths) -> list[int]:
    return list(range(group * 1000, group * 1000 + lengths[group]))


def run_scenarios(scenarios):
    """Per scenario: each step's record, and what this process was warned of rows that
    remainder="drop" left out."""
    import warnings

    out = []
    for backend, layout_name, lengths, gbs, mode in scenarios:
        layout = make_layout(layout_name)
        group = layout.plan(gbs).shard_index
        loader = make_loader(backend, layout, group_ids(group, lengths), global_batch_size=gbs,
                             shard=False, remainder=mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            steps = [record(batch) for batch in loader]
        out.append((steps, [str(w.message) for w in caught
                            if str(w.message).startswith("remainder='drop'")], group))
    return out


@pytest.fixture(scope="module")
def runs(clusters):
    cache = {}

    def get(topology):
        if topology not in cache:
            per_process = clusters.run(run_scenarios, num_processes=topology[0],
                                       local_devices=topology[1],
                                       args=(SCENARIOS[topology],), timeout_s=240)
            cache[topology] = [[{"steps": r[i][0], "warned": r[i][1], "group": r[i][2]}
                                for r in per_process]
                               for i in range(len(SCENARIOS[topology]))]
        return cache[topology]

    return get


def scenario(runs, topology, index):
    """The scenario's backend, lengths, global batch and mode, and each process's results."""
    backend, _, lengths, gbs, mode = SCENARIOS[topology][index]
    return backend, lengths, gbs, mode, runs(topology)[index]


@pytest.mark.parametrize("topology,index", CASES, ids=CASE_IDS)
@pytest.mark.cluster
def test_uneven_groups(runs, topology, index):
    _, lengths, gbs, mode, results = scenario(runs, topology, index)
    local = gbs // len(lengths)
    steps = {len(r["steps"]) for r in results}
    if mode == "drop":
        expected_steps = min(n // local for n in lengths)
    else:
        expected_steps = max(math.ceil(n / local) for n in lengths)
    assert steps == {expected_steps}, "every process runs the same number of steps"

    delivered = Counter()
    for step in range(expected_steps):
        ids = global_rows(step, "['id']", results)  # also asserts replicas hold the same rows
        x = global_rows(step, "['x']", results)
        assert sorted(ids) == list(range(gbs))
        if mode == "drop":
            assert "['mask']" not in results[0]["steps"][step]
            real = dict(ids)
        else:
            mask = global_rows(step, "['mask']", results)
            assert results[0]["steps"][step]["['mask']"]["shape"] == (gbs,)
            real = {row: i for row, i in ids.items() if mask[row]}
            for row in set(ids) - set(real):  # padding is zero-filled
                assert ids[row] == 0 and not np.any(x[row])
        for row, i in real.items():
            assert np.array_equal(x[row], i * 10 + np.arange(3))
        delivered.update(int(i) for i in real.values())

    assert max(delivered.values(), default=1) == 1, "an element was delivered twice"
    if mode == "drop":
        expected = {i for g in range(len(lengths)) for i in group_ids(g, lengths)[: expected_steps * local]}
    else:
        expected = {i for g in range(len(lengths)) for i in group_ids(g, lengths)}
    assert set(delivered) == expected


@pytest.mark.parametrize("topology,index", CASES, ids=CASE_IDS)
@pytest.mark.cluster
def test_rows_that_drop_leaves_out_are_named_on_every_process(runs, topology, index):
    import re

    backend, lengths, gbs, mode, results = scenario(runs, topology, index)
    local = gbs // len(lengths)
    steps = min(n // local for n in lengths)
    left = [n // local - steps for n in lengths]  # whole batches each group does not deliver
    if mode == "pad" or not any(left):  # none; or a pass without any step is said to be one
        said = [] if mode == "pad" or steps else ["remainder='drop': this pass had no step"]
        for r in results:
            assert len(r["warned"]) == len(said) and all(
                w.startswith(s) for w, s in zip(r["warned"], said, strict=True)), r["warned"]
        return
    group_of = [r["group"] for r in results]
    for r in results:  # the same warning on every process
        assert len(r["warned"]) == 1 and r["warned"][0] == results[0]["warned"][0], r["warned"]
    named = {}  # process -> (a lower bound?, batches, rows); a group's processes named together
    for who, least, n, rows in re.findall(
            r"(process \d+|loading group \d+ \(processes [\d, and]+, the same rows\)) had "
            r"(at least )?(\d+) more batch(?:es)? \((\d+) rows[^)]*\)", results[0]["warned"][0]):
        together = [int(p) for p in re.findall(r"\d+", who.split("(")[-1])]
        assert len(together) == 1 or sorted(together) == [
            p for p, g in enumerate(group_of) if g == group_of[together[0]]], who
        named.update({p: (bool(least), int(n), int(rows)) for p in together})
    assert set(named) == {p for p, g in enumerate(group_of) if left[g]}, named
    for p, (least, n, rows) in named.items():
        assert rows == n * local
        if backend == "grain":  # its length is known: the exact count
            assert (least, n) == (False, left[group_of[p]])
        else:  # a generator: what it had read ahead, a lower bound
            assert least and 1 <= n <= left[group_of[p]]


def files_split_unevenly(root: str, remainder: str):
    """3 files of 16 records split by files over 2 loading groups (group 0 reads 2 of them):
    the rows this process delivered in the first of two passes, and its warnings of rows left
    out in both."""
    import glob
    import warnings

    import numpy as np
    import tensorflow as tf

    import jaxload

    def parse(record):
        return {"x": tf.ensure_shape(tf.io.parse_tensor(record, tf.int32), ())}

    ds = tf.data.Dataset.from_tensor_slices(sorted(glob.glob(f"{root}/*.tfrecord"))).interleave(
        tf.data.TFRecordDataset).map(parse)
    loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=8,
                                  remainder=remainder)
    rows = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: a line's same message told once
        for n in range(2):  # two passes alike: each tells what it left out
            for batch in loader:
                real = batch.get("mask", batch["x"])  # "drop": every row is real
                for x, mask in zip(batch["x"].addressable_shards, real.addressable_shards,
                                   strict=True):
                    rows += [int(v) for v, m in zip(np.asarray(x.data), np.asarray(mask.data),
                                                    strict=True) if n == 0 and (
                                                        remainder == "drop" or m)]
    return loader.plan.shard_index, rows, [str(w.message) for w in caught
                                           if str(w.message).startswith("remainder='drop'")]


@pytest.mark.cluster
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_files_split_unevenly_name_what_drop_leaves_out(clusters, tmp_path, remainder):
    import tensorflow as tf

    for f in range(3):
        with tf.io.TFRecordWriter(str(tmp_path / f"part-{f}.tfrecord")) as writer:
            for i in range(16):
                writer.write(tf.io.serialize_tensor(tf.constant(f * 16 + i)).numpy())
    results = clusters.run(files_split_unevenly, num_processes=2, local_devices=2,
                           args=(str(tmp_path), remainder), timeout_s=240)
    delivered = [r for _, rows, _ in results for r in rows]
    assert len(delivered) == len(set(delivered))
    if remainder == "pad":
        assert sorted(delivered) == list(range(48)) and all(w == [] for *_, w in results)
        return
    longer = [p for p, (group, rows, _) in enumerate(results) if group == 0]
    assert len(delivered) == 32  # 16 rows of each group: the pass ends with the shorter group
    for _, _, warned in results:  # at each pass's end
        assert len(warned) == 2 and warned[0] == warned[1], warned
        assert f"process {longer[0]} had at least" in warned[0], warned


def scheduled(lengths):
    """A Grain pipeline per loading group (``shard=False``) under a batch-size schedule with
    remainder="drop": the steps, and the warnings of rows left out."""
    import warnings

    layout = make_layout("data_parallel")
    group = layout.plan(8).shard_index
    loader = make_loader("grain", layout, group_ids(group, lengths),
                         global_batch_size=[(0, 8), (2, 16)], shard=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        steps = sum(1 for _ in loader)
    return steps, [str(w.message) for w in caught if str(w.message).startswith("remainder='drop'")]


@pytest.mark.cluster
def test_what_drop_leaves_out_is_named_under_a_batch_size_schedule(clusters):
    results = clusters.run(scheduled, num_processes=2, local_devices=2, args=((100, 40),),
                           timeout_s=240)
    # 4 rows a group for 2 steps, then 8: group 1's 40 rows last 6 steps, group 0 keeps 60
    assert [steps for steps, _ in results] == [6, 6]
    for _, warned in results:
        assert len(warned) == 1 and "process 0 had 7 more batches" in warned[0], warned


def no_step():
    """Warnings of a whole pass with no step (too few rows for one global batch), and of a
    pass resumed at the end of another (no step left to it, on purpose)."""
    import warnings

    import grain

    import jaxload

    layout = jaxload.data_parallel()
    said = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        few = jaxload.from_grain(grain.MapDataset.range(24), layout, global_batch_size=64)
        said.append(sum(1 for _ in few))
        whole = jaxload.from_grain(grain.MapDataset.range(64), layout, global_batch_size=16)
        batches = iter(whole)
        for _ in range(4):
            next(batches)
        state = whole.get_state()  # after the last step, before the pass's end
        resumed = jaxload.from_grain(grain.MapDataset.range(64), layout, global_batch_size=16)
        resumed.set_state(state)
        said.append(sum(1 for _ in resumed))
        batches.close()
    return said, [str(w.message) for w in caught if "this pass had no step" in str(w.message)]


@pytest.mark.cluster
def test_a_whole_pass_without_a_step_is_told(clusters):
    for steps, warned in clusters.run(no_step, num_processes=2, local_devices=2, timeout_s=240):
        assert steps == [0, 0]
        assert len(warned) == 1 and "a loading group had fewer than 32 rows" in warned[0], warned


@pytest.mark.cluster
def test_a_warning_of_each_pass_keeps_the_users_filters(tmp_path):
    """warn_each, as a script's loop meets it: shown each pass under Python's default filter,
    once under "once", raised as itself under "error" (a script's __main__ has no
    __spec__.loader: nothing else may be warned first)."""
    import subprocess
    import sys

    script = tmp_path / "loop.py"
    script.write_text(
        "import sys, warnings\n"
        "from jaxload._src.told import warn_each\n"
        "warnings.simplefilter(sys.argv[1])\n"
        "try:\n"
        "    for _ in range(3):\n"
        "        warn_each('rows left out')\n"
        "except Warning as e:\n"
        "    print('raised', type(e).__name__, e)\n")
    for action, shown in (("default", 3), ("once", 1), ("error", 0)):
        done = subprocess.run([sys.executable, str(script), action], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("UserWarning: rows left out") == shown, (action, done.stderr)
        assert f"{script}:6" in done.stderr or not shown, done.stderr  # at the loop's line
        assert ("raised UserWarning rows left out" in done.stdout) == (action == "error"), (
            action, done.stdout)


def _user_batched_rows(kind: str) -> list[int]:
    """The ids a Grain pipeline batched by the user (203 records, batches of 4, the last of 3)
    delivers with remainder="drop", batched=True, on this process."""
    import grain

    import jaxload

    class Records:
        def __len__(self):
            return 203

        def __getitem__(self, i):
            return {"id": np.int32(i)}

    source = grain.MapDataset.source(Records())
    ds = source.to_iter_dataset().batch(4) if kind == "iter" else source.batch(4)
    layout = jaxload.data_parallel()
    loader = jaxload.from_grain(ds, layout, global_batch_size=4 * layout.plan(4).shard_count,
                                batched=True, remainder="drop", on_failure="raise")
    return sorted(int(v) for b in loader for s in b["id"].addressable_shards
                  for v in np.asarray(s.data))


@pytest.mark.cluster
@pytest.mark.parametrize("kind", ["map", "iter"])
def test_a_users_last_partial_batch_is_dropped_under_drop(clusters, kind):
    # remainder="drop" drops the user's last, partial batch: an IterDataset failed on it at the
    # end of the pass ("feature batch['id'] has shape (3,)"), and a MapDataset at one process
    # ended before the step count its length promised
    one = clusters.run(_user_batched_rows, num_processes=1, local_devices=2, args=(kind,),
                       timeout_s=120)[0]
    assert one == list(range(200))
    two = clusters.run(_user_batched_rows, num_processes=2, local_devices=2, args=(kind,),
                       timeout_s=120)
    assert sorted(two[0] + two[1]) == list(range(200))  # 25 steps of 2 batches of 4


def _short_user_batches() -> list:
    """Pipelines batched by the user, read with remainder="pad", batched=True, local batches of
    4: per case, this process's real ids (the mask's) and its warnings' texts."""
    import warnings

    import grain
    import tensorflow as tf

    import jaxload
    from jaxload._src.told import forget

    layout = jaxload.data_parallel()
    gbs = 4 * layout.plan(4).shard_count
    pipelines = {
        "tf batch(2)": lambda: tf.data.Dataset.range(40).map(lambda i: {"id": i}).batch(2),
        "grain batch(2)": lambda: grain.MapDataset.range(40).map(
            lambda i: {"id": np.int64(i)}).to_iter_dataset().batch(2),
        "tf batch(4), 42 rows": lambda: tf.data.Dataset.range(42).map(
            lambda i: {"id": i}).batch(4),
    }
    out = []
    for name, build in pipelines.items():
        ds, make = build(), jaxload.from_grain if name.startswith("grain") else jaxload.from_tf_data
        with warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always")
            loader = make(ds, layout, global_batch_size=gbs, batched=True, remainder="pad")
            ids = sorted(int(v) for b in loader for ids, mask in zip(
                b["id"].addressable_shards, b["mask"].addressable_shards, strict=True)
                for v, m in zip(np.asarray(ids.data), np.asarray(mask.data), strict=True) if m)
        out.append((ids, [str(w.message) for w in told if "local_batch_size" in str(w.message)]))
        forget()  # each case told as a new process would be
    return out


@pytest.mark.cluster
def test_a_users_short_batches_are_padded_with_a_warning(clusters):
    # a pipeline batched by the user to fewer rows than local_batch_size was padded at every
    # step with no word (half of each step padding); a short last batch is padded silently
    results = clusters.run(_short_user_batches, num_processes=2, local_devices=2,
                           timeout_s=180)
    for case, rows in ((0, 40), (1, 40), (2, 42)):
        assert sorted(results[0][case][0] + results[1][case][0]) == list(range(rows)), case
    for case in (0, 1):
        for process in (0, 1):
            told = results[process][case][1]
            assert len(told) == 1 and "batch at step 0 has 2 rows where local_batch_size is 4" \
                ", and is not its last" in told[0], (case, process, told)
    assert results[0][2][1] == results[1][2][1] == [], results  # its last batch alone short


def _filtered_user_batches() -> list[int]:
    """This process's real ids of ``MapDataset.batch(4).filter(...)`` over 203 records with
    batched=True and remainder="pad" (the filter leaves holes among the batches' indices)."""
    import grain

    import jaxload

    ds = grain.MapDataset.range(203).map(lambda i: {"id": np.int64(i)}).batch(4).filter(
        lambda b: b["id"][0] % 3 != 0)
    loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=8, batched=True,
                                remainder="pad")
    return [int(v) for b in loader for ids, mask in zip(
        b["id"].addressable_shards, b["mask"].addressable_shards, strict=True)
        for v, m in zip(np.asarray(ids.data), np.asarray(mask.data), strict=True) if m]


@pytest.mark.cluster
def test_a_users_filtered_batches_are_read_past_the_filters_holes(clusters):
    # read by index, the filter's holes (None) ended each group's pass: 4 of 135 rows delivered
    results = clusters.run(_filtered_user_batches, num_processes=2, local_devices=2,
                           timeout_s=120)
    assert sorted(results[0] + results[1]) == [i for i in range(203) if i // 4 * 4 % 3 != 0]
