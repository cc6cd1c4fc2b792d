"""A tf.data pipeline whose iterator checkpoint holds buffers (a shuffle that is not replayed)
saves nothing as a pass runs: a state takes the checkpoint when it is asked for, with the
batches read ahead of the loop, and jaxload.checkpoint writes those bytes beside the state's
JSON (jaxload/_src/pipelines/tf/on_demand.py). In real processes, through Orbax, where the
parent reads every step's shards."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_tf_replay import rows

import jaxload
import jaxload.testing
from placement import record

tf = pytest.importorskip("tensorflow")
pytest.importorskip("orbax.checkpoint")
N, BUFFER = 1200, 500


def filtered():
    """A shuffle with a filter over it: not replayed, so its checkpoint holds the buffer
    (500 elements of 2 KB). Split by elements, so the stream proof's fingerprints go along."""
    ds = tf.data.Dataset.from_tensor_slices(
        {"id": np.arange(N), "x": np.arange(N * 512, dtype=np.float32).reshape(N, 512)})
    return ds.shuffle(BUFFER, seed=4).filter(lambda e: e["id"] % 7 != 3)


def run_and_resume(directory: str, api: str, stop: int) -> dict:
    """Worker: a pass, then the next with an Orbax checkpoint at step ``stop``, then a fresh
    loader over a fresh pipeline restored from it."""
    import jax
    from test_schedule import orbax_checkpoint

    def loader():
        return jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)

    kept = loader()
    for _ in kept:
        pass
    steps = []
    for step, batch in enumerate(kept):
        steps.append(record(batch))
        if step + 1 == stop:
            orbax_checkpoint(api, directory, kept, save=True)
    resumed = loader()
    orbax_checkpoint(api, directory, resumed, save=False)
    files = {p.name: p.stat().st_size for p in Path(directory).rglob("process_*")}
    return dict(process_index=jax.process_index(), steps=steps, files=files,
                after=[record(batch) for batch in resumed], explain=kept.explain())


@pytest.mark.cluster
@pytest.mark.parametrize("api", ["v0", "v1"])
def test_a_state_with_buffers_is_taken_when_asked_and_written_beside_in_real_processes(
        tmp_path, api):
    stop = 20  # of 64 steps: the shuffle's input not read to its end, its buffer full
    # processes of its own: Orbax 0.11's barriers are device collectives, which a thread left
    # by another test's checkpointing in a shared process could interleave with
    results = jaxload.testing.run(run_and_resume, num_processes=2, local_devices=2,
                                  args=(str(tmp_path / "ckpt"), api, stop), timeout_s=240)
    steps = len(results[0]["steps"])
    kept = N - len(range(3, N, 7))
    assert steps == kept // 16 and all(len(r["after"]) == steps - stop for r in results)
    assert [rows(results, "after", s) for s in range(steps - stop)] == [
        rows(results, "steps", s) for s in range(stop, steps)]
    delivered = sum((rows(results, "steps", s) for s in range(steps)), [])
    assert len(delivered) == len(set(delivered)) == 16 * steps
    assert "saved when a state is asked for" in results[0]["explain"]
    files = results[0]["files"]
    for i in range(2):  # the JSON holds counts; the buffer (500 x 2 KB) is beside it
        assert files[f"process_{i}-of-2.json"] < 20_000 < BUFFER * 2048 < files[f"process_{i}-of-2.bin"]


def test_a_state_with_buffers_keeps_json_as_get_state_returns_it(tmp_path, monkeypatch):
    from jaxload._src import told
    from jaxload._src.checkpoint_files import read_state, write_state

    monkeypatch.setattr(told, "_TOLD", set())  # told once per process
    loader = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    with iter(loader) as batches:
        first = [np.asarray(next(batches)["id"]).tolist() for _ in range(3)]
        with pytest.warns(UserWarning, match="state holds its buffers"):
            state = loader.get_state()
        rest = [np.asarray(b["id"]).tolist() for b in batches]
    assert state["position"]["saved"]["batches"] == 3 and first
    text = json.dumps(state)  # a state is JSON as it is: the buffers inline, base64
    assert len(text) > BUFFER * 2048
    write_state(Path(tmp_path, "process_0-of-1.json"), state)
    assert read_state(Path(tmp_path, "process_0-of-1.json")) == json.loads(text)
    fresh = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    fresh.set_state(json.loads(text))
    assert [np.asarray(b["id"]).tolist() for b in fresh] == rest


@pytest.mark.parametrize("change,words", [
    (lambda saved: saved.update(ahead="batches"), r"'ahead': \[str, ...\] \(optional\)"),
    (lambda saved: saved.update(ahead=[1]), r"'ahead': \[str, ...\] \(optional\)"),
    (lambda saved: saved.update(extra=1), r"'ahead': \[str, ...\] \(optional\)"),
    (lambda saved: saved.update(batches=4), r"'batches': m <= n"),
])
def test_a_malformed_state_with_buffers_is_refused_naming_the_field(change, words):
    loader = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    with iter(loader) as batches:
        next(batches), next(batches), next(batches)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the state's size, told once
            state = loader.get_state()
    change(state["position"]["saved"])
    fresh = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    with pytest.raises(ValueError, match=words):
        fresh.set_state(state)


def test_a_malformed_pass_number_is_refused_naming_the_field():
    loader = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    with iter(loader) as batches:
        next(batches)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the state's size, told once
            state = loader.get_state()
    assert state["position"]["pass"] == 0
    state["position"]["pass"] = -1
    fresh = jaxload.from_tf_data(filtered(), jaxload.data_parallel(), global_batch_size=16)
    with pytest.raises(ValueError, match=r"position\['pass'\] must be an int >= 0, got -1"):
        fresh.set_state(state)


def two_shuffles():
    """A shuffle, a filter, another shuffle: neither replayed, the checkpoint holds buffers."""
    ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(120)})
    return ds.shuffle(120, seed=4).filter(lambda e: e["id"] % 7 != 3).shuffle(8, seed=9)


def resume_at_the_end(when: str) -> dict:
    """Worker: passes 0 to 3 of a kept loader, a state taken in pass 1 at its last step or
    after its loop; a fresh loader over a fresh pipeline resumed from it, its passes."""
    import jax

    def loader():
        return jaxload.from_tf_data(two_shuffles(), jaxload.data_parallel(),
                                    global_batch_size=8)

    warnings.simplefilter("ignore")  # the state's size
    kept, passes, state = loader(), [], None
    for number in range(4):
        passes.append([])
        for batch in kept:
            passes[-1].append(record(batch))
            if number == 1 and when == "last" and len(passes[-1]) == 12:
                state = kept.get_state()
        if number == 1 and when == "after":
            state = kept.get_state()
    resumed = loader()
    resumed.set_state(json.loads(json.dumps(state)))
    later = [[record(batch) for batch in resumed] for _ in range(3 if when == "last" else 2)]
    return dict(process_index=jax.process_index(), passes=passes, later=later, state=state)


@pytest.mark.cluster
@pytest.mark.parametrize("when", ["last", "after"])
def test_the_passes_after_a_resume_from_a_pass_end_reshuffle_as_without_it_in_real_processes(
        clusters, when):
    # the checkpoint at a pass's end holds no shuffle: restored, TensorFlow's generators were
    # left elsewhere, and the next pass had another pass's order (pass 2's after any pass)
    results = clusters.run(resume_at_the_end, num_processes=2, local_devices=2, args=(when,),
                           timeout_s=240)
    steps = len(results[0]["passes"][0])
    assert steps == 12  # 103 rows kept, 8 a step

    def each(key: str, number: int) -> list[list[int]]:
        return [rows([{"s": r[key][number]} for r in results], "s", s) for s in range(steps)]

    for r in results:
        assert r["state"]["position"]["pass"] == (1 if when == "last" else 2)
    first = 1 if when == "last" else 0  # the rest of the resumed pass: none
    assert all(r["later"][0] == [] for r in results) or not first
    later = [each("later", p) for p in range(first, len(results[0]["later"]))]
    assert later == [each("passes", 2), each("passes", 3)]
    assert each("passes", 2) != each("passes", 3)  # they reshuffle: the test can fail


def passes_with_a_state(stop: int) -> dict:
    """Worker: passes 0 to 2 of a kept loader over :func:`two_shuffles`, a state taken at
    step ``stop`` of pass 1."""
    import jax

    warnings.simplefilter("ignore")  # the state's size
    kept = jaxload.from_tf_data(two_shuffles(), jaxload.data_parallel(), global_batch_size=16)
    passes, state = [], None
    for number in range(3):
        passes.append([])
        for batch in kept:
            passes[-1].append(record(batch))
            if number == 1 and len(passes[-1]) == stop:
                state = kept.get_state()
    return dict(process_index=jax.process_index(), passes=passes, state=state)


def resumed_elsewhere(states: list[dict]) -> dict:
    """Worker: a fresh loader on another topology resumed from the state of process 0 (a
    state under another plan continues at its global row), its pass and the next."""
    import jax

    warnings.simplefilter("ignore")
    loader = jaxload.from_tf_data(two_shuffles(), jaxload.data_parallel(), global_batch_size=16)
    loader.set_state(states[0])
    later = [[record(batch) for batch in loader] for _ in range(2)]
    return dict(process_index=jax.process_index(), later=later)


@pytest.mark.cluster
def test_a_state_with_buffers_continues_its_pass_order_on_another_topology_in_real_processes(
        clusters):
    # on another topology the pass restarts at the state's global row: of its own pass's
    # order, not of the first pass's (which gave other rows: some twice in the epoch, some never)
    stop = 3
    taken = clusters.run(passes_with_a_state, num_processes=2, local_devices=4, args=(stop,),
                         timeout_s=240)
    states = [json.loads(json.dumps(r["state"])) for r in taken]
    assert states[0]["position"]["pass"] == 1 and states[0]["rows"] == 16 * stop
    resumed = clusters.run(resumed_elsewhere, num_processes=4, local_devices=2, args=(states,),
                           timeout_s=240)

    def steps(results: list[dict], key: str, number: int) -> list[list[int]]:  # as multisets:
        return [sorted(rows([{"s": r[key][number]} for r in results], "s", s))  # the rows
                for s in range(len(results[0][key][number]))]  # of a step sit by group

    assert steps(resumed, "later", 0) == steps(taken, "passes", 1)[stop:]
    assert steps(resumed, "later", 1) == steps(taken, "passes", 2)
    assert steps(taken, "passes", 1) != steps(taken, "passes", 2)


def test_fresh_generators_give_any_pass_of_the_seeded_shuffles_that_reshuffle():
    from jaxload._src.pipelines.tf.reseed import fresh_generators

    def pipeline(seed=1):  # one shuffle the same every pass, one that reshuffles
        ds = tf.data.Dataset.range(24).shuffle(24, seed=seed, reshuffle_each_iteration=False)
        return ds.filter(lambda x: x % 3 > 0).shuffle(6, seed=2)

    kept = pipeline()
    orders = [[int(x) for x in kept] for _ in range(4)]
    assert orders[2] != orders[3]
    fresh = fresh_generators(pipeline())
    assert [[int(x) for x in fresh.at(n)] for n in (3, 1, 2)] == [orders[3], orders[1], orders[2]]
    tf.random.set_seed(None)  # no global seed: TensorFlow's op seeds (0, 0)
    unseeded = tf.data.Dataset.range(8).shuffle(8).filter(lambda x: x > 0)
    repeated = tf.data.Dataset.range(8).shuffle(8, seed=1).repeat(2)
    fixed = tf.data.Dataset.range(8).shuffle(8, seed=1, reshuffle_each_iteration=False)
    assert [fresh_generators(ds) for ds in (unseeded, repeated, fixed)] == [None, None, None]
    below = tf.data.Dataset.range(8).repeat(2).shuffle(16, seed=1)  # a repeat under it,
    cached = tf.data.Dataset.range(8).shuffle(8, seed=1).cache()  # a cache over it (its first
    drawn = tf.data.Dataset.range(8).shuffle(8, seed=1).map(  # order each pass), a random op
        lambda x: x + tf.cast(tf.random.uniform([]) * 0, tf.int64))  # in a map's function
    for make in (below, cached, drawn):
        orders = [[int(x) for x in make] for _ in range(3)]
        assert [int(x) for x in fresh_generators(make).at(2)] == orders[2]


def shuffle_map_shuffle():
    """A shuffle, a stateless map, a shuffle: replayed, the inner shuffle rebuilt for each pass
    as a shuffle of names is (the map is all that lies between the two)."""
    ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(100)})
    return ds.shuffle(50, seed=1).map(lambda e: {"id": e["id"] * 1}).shuffle(8, seed=2)


def resume_pass_one(kind: str, when: str) -> dict:
    """Worker: passes 0 to 3 of a kept loader; a state taken in pass 1 after its first step
    (``"step"``), or once its ``iter()`` began and before its first batch (``"begun"``; after
    pass 0 was left early: ``"break"``); a fresh loader over a fresh pipeline resumed from it,
    three passes."""
    import jax

    make = {"shuffle map shuffle": shuffle_map_shuffle, "two shuffles": two_shuffles}[kind]

    def loader():
        return jaxload.from_tf_data(make(), jaxload.data_parallel(), global_batch_size=8)

    warnings.simplefilter("ignore")  # the state's size
    kept = loader()
    passes = [[record(batch) for batch in kept] for _ in range(4)]
    taken = loader()
    for number, _ in enumerate(taken):  # pass 0 whole, or its first 2 steps (a break)
        if when == "break" and number == 1:
            break
    with iter(taken) as batches:
        if when == "step":
            next(batches)
        state = json.loads(json.dumps(taken.get_state()))
    resumed = loader()
    resumed.set_state(state)
    later = [[record(batch) for batch in resumed] for _ in range(3)]
    return dict(process_index=jax.process_index(), passes=passes, later=later)


@pytest.mark.cluster
@pytest.mark.parametrize("kind,when", [("shuffle map shuffle", "step"),
                                       ("shuffle map shuffle", "begun"), ("two shuffles", "begun"),
                                       ("shuffle map shuffle", "break"), ("two shuffles", "break")])
def test_a_resume_in_the_second_pass_gives_its_rows_and_the_passes_after_in_real_processes(
        clusters, kind, when):
    # shuffle-map-shuffle: resumed, the inner shuffle took its first pass's order (other rows
    # in the pass: some twice, some never); a state of a pass begun, before its first batch,
    # named no pass (the resume replayed pass 0)
    results = clusters.run(resume_pass_one, num_processes=2, local_devices=2, args=(kind, when),
                           timeout_s=240)

    def each(key: str, number: int) -> list[list[int]]:
        return [rows([{"s": r[key][number]} for r in results], "s", s)
                for s in range(len(results[0][key][number]))]

    done = 1 if when == "step" else 0
    assert each("later", 0) == each("passes", 1)[done:]
    assert [each("later", 1), each("later", 2)] == [each("passes", 2), each("passes", 3)]
    assert each("passes", 2) != each("passes", 3)  # they reshuffle: the test can fail


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("stop", ["pass 0 step 5", "pass 1 step 3", "after pass 1"])
def test_a_random_filter_resumes_with_the_rows_it_kept_without_the_resume(split, stop):
    # a seeded random op in a filter's function: its state is not in tf.data's checkpoint, so a
    # restore drew other values from the checkpoint's element on (other rows kept, and split by
    # elements each process restored at its own element: the proof stopped the run); re-read
    # from the pass's start, over the pass's own order, each iterator draws the same values
    import jax

    def loader():
        ds = tf.data.Dataset.from_tensor_slices({"id": np.arange(200)}).shuffle(200, seed=1)
        ds = ds.filter(lambda e: tf.random.uniform([], seed=7) < 0.8)
        if split:  # a split by elements, as a second loading group would read it
            ds = ds.shard(2, 0)
        return jaxload.from_tf_data(ds, jaxload.data_parallel(devices=jax.devices()),
                                    global_batch_size=8)

    number, step = (0, 5) if stop == "pass 0 step 5" else (1, 3 if "step" in stop else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # told once a process: re-reads every batch before it
        kept = loader()
    assert "re-reads every batch before its position" in kept.explain()
    passes, state = [], None
    for n in range(3):
        passes.append([])
        for batch in kept:
            passes[-1].append(np.asarray(batch["id"]).tolist())
            if n == number and len(passes[-1]) == step:
                state = json.loads(json.dumps(kept.get_state()))
        if n == number and step is None:
            state = json.loads(json.dumps(kept.get_state()))
    assert passes[1] != passes[2]  # they reshuffle: the test can fail
    resumed = loader()
    resumed.set_state(state)
    first = number + (step is None)  # after the loop, the state names the next pass
    later = [[np.asarray(b["id"]).tolist() for b in resumed] for _ in range(first, 3)]
    assert later == [passes[first][step or 0:], *passes[first + 1:]]


def test_a_padded_last_step_with_no_batch_of_this_process_resumes():
    # remainder="pad": where this process's data ended, its step pads and its position stays;
    # a state at the pass's last step was refused ("each step hands out one batch")
    from test_tf_replay import plan, share

    ds = tf.data.Dataset.from_generator(lambda: ({"id": i} for i in range(90)),
                                        output_signature={"id": tf.TensorSpec([], tf.int64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # told once: re-reads every batch before its position
        padded = share(ds, plan(2, 1), global_batch_size=8, remainder="pad")
        dropped = share(ds, plan(2, 1), global_batch_size=8)
    padded.check_position({"step": 12, "position": 11})
    with pytest.raises(ValueError, match="each step hands out one batch or padding"):
        padded.check_position({"step": 12, "position": 13})
    with pytest.raises(ValueError, match="has 11 batches handed out, but its step is 12"):
        dropped.check_position({"step": 12, "position": 11})


def test_a_count_naming_its_pass_is_checked_field_by_field():
    from jaxload._src.pipelines.tf.iterator import checked_batches

    assert checked_batches({"batches": 3, "pass": 2}) == 3
    assert checked_batches({"batches": 3, "pass": 2, "stream": "0123456789abcdef"}) == 3
    for bad in ({"batches": 3, "pass": -1}, {"batches": -3, "pass": 1},
                {"batches": 3, "pass": 1, "stream": "xyz"}, {"batches": 3, "pass": "1"}):
        with pytest.raises(ValueError, match=r"position must be \{'batches': n, 'stream'"):
            checked_batches(bad)


def test_a_random_filter_is_told_how_to_resume_without_re_reading(monkeypatch):
    from test_tf_replay import plan, share

    from jaxload._src import told

    monkeypatch.setattr(told, "_TOLD", set())  # told once per process
    ds = tf.data.Dataset.range(64).filter(lambda x: tf.random.uniform([], seed=3) < 0.5).map(
        lambda x: {"id": x})
    with pytest.warns(UserWarning, match=r"RandomUniform in the function of a FilterDataset "
                                         r"decides which elements come next\), so a resume "
                                         r"re-reads .* a stateless op seeded from the element"):
        share(ds, plan(1, 0))
