"""Batch-size schedules in real processes, checked in the parent from every device's shards.

``global_batch_size=[(0, 16), (3, 32), (6, 64)]`` over 203 elements with ``remainder="pad"``:
step ``s`` must hold rows ``[rows_before(s), rows_before(s + 1))`` of the global order, each
loading group ``k`` of ``K`` its elements ``k + K * j``; a state taken at step 4 (inside the
second size) continues on another process count and layout, and over both runs every element
arrives exactly once.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import jaxload
import jaxload.testing
from jaxload._src.schedule import parse

N = 203
SCHEDULE = [(0, 16), (3, 32), (6, 64)]


def size_at(step: int, schedule=SCHEDULE) -> int:
    return [size for first, size in schedule if first <= step][-1]


def rows_before(step: int, schedule=SCHEDULE) -> int:
    return sum(size_at(s, schedule) for s in range(step))


def run_schedule(backend: str, layout_name: str, steps: int | None, state: str | None,
                 orbax: tuple[str, str] | None = None, schedule=SCHEDULE):
    """Worker side: a padded pass under the schedule (from ``state`` if given), each step's
    shards recorded; stopped after ``steps`` steps, with the state then. ``orbax`` is
    ``(api, directory)``: the state is saved there (``steps`` given) or restored from it."""
    from placement import make_layout, make_loader, record

    loader = make_loader(backend, make_layout(layout_name), range(N),
                         global_batch_size=schedule, remainder="pad")
    if state is not None:
        loader.set_state(json.loads(state))
    if orbax is not None and steps is None:
        orbax_checkpoint(*orbax, loader, save=False)
    first = loader.get_state()["step"]
    recorded = []
    with iter(loader) as batches:
        for batch in batches:
            recorded.append(record(batch))
            if len(recorded) == steps:
                break
        if orbax is not None and steps is not None:
            orbax_checkpoint(*orbax, loader, save=True)
        return dict(groups=loader.plan.shard_count, first_step=first, steps=recorded,
                    state=json.dumps(loader.get_state()), shards=loader.plan.num_batch_shards,
                    specs=[loader.batch_spec(s)["id"].shape for s, _ in schedule])


def orbax_checkpoint(api: str, directory: str, loader, *, save: bool) -> None:
    """Saves ``loader`` into, or restores it from, an Orbax checkpoint (v0 or v1 API)."""
    import orbax.checkpoint as ocp

    if api == "v1":
        if save:
            ocp.v1.save_checkpointables(directory, {"loader": loader})
        else:
            ocp.v1.load_checkpointables(directory, {"loader": loader})
        return
    manager = ocp.CheckpointManager(directory)
    try:  # closed, so that none of its threads outlives the call in a warm process
        if save:
            manager.save(4, args=ocp.args.Composite(data=jaxload.checkpoint.CheckpointSave(loader)))
            manager.wait_until_finished()
        else:
            manager.restore(manager.latest_step(), args=ocp.args.Composite(
                data=jaxload.checkpoint.CheckpointRestore(loader)))
    finally:
        manager.close()


def placed(size: int, shards: int) -> int:
    """The rows placed on the devices for ``size`` (rounded up to the batch shards)."""
    return -(-size // shards) * shards


def delivered(results: list[dict], schedule=SCHEDULE) -> list[int]:
    """Checks every step's shards, on every process and device, against the rows the schedule
    gives the step (a padded size: ``size / K`` real rows at the start of each group's block);
    returns the real (masked-in) ids delivered, one per global row."""
    groups, first = results[0]["groups"], results[0]["first_step"]
    ids = []
    for offset in range(len(results[0]["steps"])):
        s = first + offset
        size = placed(size_at(s, schedule), results[0]["shards"])
        local, real = size // groups, size_at(s, schedule) // groups
        held: dict[int, list[tuple[int, bool]]] = {}
        for result in results:
            step = result["steps"][offset]
            assert step["['id']"]["shape"] == (size,), f"step {s}"
            masks = {(dev, start): data for dev, _, start, _, data in step["['mask']"]["shards"]}
            for dev, _, start, stop, data in step["['id']"]["shards"]:
                for r, value, mask in zip(range(start, stop), np.asarray(data).ravel(),
                                          np.asarray(masks[(dev, start)]).ravel(), strict=True):
                    held.setdefault(r, []).append((int(value), bool(mask)))
        assert sorted(held) == list(range(size)), f"step {s}: rows held {sorted(held)}"
        for r, copies in held.items():
            k, j = divmod(r, local)
            expected = k + groups * (rows_before(s, schedule) // groups + j)
            if j < real and expected < N:
                assert copies == [(expected, True)] * len(copies), (s, r, copies, expected)
                ids.append(expected)
            else:
                assert not any(mask for _, mask in copies), (s, r, copies)
    return ids


@pytest.mark.cluster
@pytest.mark.parametrize("backend, n, d, layout", [
    ("grain", 2, 4, "data_parallel"),
    ("tf", 2, 4, "in_process"),
    ("grain", 4, 2, "across_processes"),
    ("tf", 4, 2, "data_parallel"),
])
def test_each_step_holds_its_sizes_rows(clusters, backend, n, d, layout):
    results = clusters.run(run_schedule, num_processes=n, local_devices=d,
                                  args=(backend, layout, None, None), timeout_s=180)
    for r in results:
        assert len(r["steps"]) == 7  # 3 x 16 + 3 x 32 + 59 of 64 rows (padded)
        assert r["specs"] == [(16,), (32,), (64,)]
    assert sorted(delivered(results)) == list(range(N))


SMALL = [(0, 4), (2, 16), (4, 12)]  # 4 and 12 rows: padded to the 8 batch shards


@pytest.mark.cluster
@pytest.mark.parametrize("backend, n, d", [("grain", 2, 4), ("tf", 4, 2)])
def test_padded_sizes_spread_their_real_rows_over_the_groups(clusters, backend, n, d):
    results = clusters.run(run_schedule, num_processes=n, local_devices=d,
                                  args=(backend, "data_parallel", None, None, None, SMALL),
                                  timeout_s=180)
    for r in results:  # 4 + 4 + 16 + 16 + 12 x 13 + 11 of 12: 18 steps
        assert len(r["steps"]) == 18 and r["specs"] == [(8,), (16,), (16,)]
    assert sorted(delivered(results, SMALL)) == list(range(N))


@pytest.mark.cluster
@pytest.mark.parametrize("backend, saved", [("grain", "json"), ("tf", "v0"), ("grain", "v1")])
def test_a_state_at_step_4_continues_on_another_process_count(clusters, backend, saved,
                                                               tmp_path):
    orbax = None if saved == "json" else (saved, str(tmp_path / "checkpoints"))
    before = clusters.run(run_schedule, num_processes=2, local_devices=4,
                                 args=(backend, "data_parallel", 4, None, orbax), timeout_s=180)
    state = before[0]["state"]
    assert json.loads(state)["step"] == 4 and json.loads(state)["rows"] == 16 * 3 + 32
    after = clusters.run(run_schedule, num_processes=4, local_devices=2,
                                args=(backend, "across_processes", None,
                                      None if orbax else state, orbax), timeout_s=180)
    for r in after:
        assert r["first_step"] == 4 and len(r["steps"]) == 3
    ids = delivered(before) + delivered(after)
    assert sorted(ids) == list(range(N))  # every element exactly once across the two runs


@pytest.mark.parametrize("value, error, match", [
    ([(1, 16)], ValueError, "the first pair must start at step 0"),
    ([(0, 16), (0, 32)], ValueError, "first steps must increase, got step 0 after step 0"),
    ([(0, 16), (3, -2)], ValueError, "the size from step 3 must be a positive int, got -2"),
    ([(0, 16), (True, 8)], ValueError, "a first step must be an int >= 0, got True"),
    ([16, 32], TypeError, r"expected \(first_step, global_batch_size\) pairs, got 16"),
])
def test_bad_schedules_name_the_step_and_size(value, error, match):
    with pytest.raises(error, match=match):
        parse(value)


def test_a_size_the_layout_cannot_split_is_named_before_any_data():
    import grain

    with pytest.raises(ValueError, match=r"size 12 from step 5: .*multiple of the 8 batch shards"):
        jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
                           global_batch_size=[(0, 16), (5, 12)])
    padded = jaxload.from_grain(grain.MapDataset.range(64).map(lambda i: {"id": i}),
                                jaxload.data_parallel(),
                                global_batch_size=[(0, 16), (5, 12)], remainder="pad")
    assert padded.batch_spec(5)["mask"].shape == (16,)  # 12 real rows of 16
    assert "12 (placed as 16)" in padded.plan.explain()


def test_a_padded_size_must_be_a_multiple_of_the_loading_groups():
    from jaxload._src.remainder import padded_batch_size
    from jaxload._src.schedule import Schedule

    layout = jaxload.data_parallel(devices=jaxload.simulated_devices(4, 2))  # 4 groups, 8 shards
    plan_of = lambda size: layout.plan(padded_batch_size(layout, size, "pad"))  # noqa: E731
    schedule = Schedule.build(((0, 4), (2, 16), (4, 12)), plan_of)
    assert (schedule.unit, schedule.parts(0), schedule.parts(2), schedule.parts(4)) == (1, 1, 4, 3)
    assert schedule.plan_at(4).local_batch_size == 4  # 3 real rows and 1 of padding per group
    with pytest.raises(ValueError, match=r"size 6 from step 2: a size the 8 batch shards do not "
                       r"divide must be a multiple of the 4 loading groups .* e.g. 4"):
        Schedule.build(((0, 16), (2, 6)), plan_of)


def ids_of(batch) -> list[int]:
    return np.asarray(batch["id"]).tolist()


def grain_loader(**kwargs):
    import grain

    ds = grain.MapDataset.range(64).map(lambda i: {"id": np.int32(i)})
    return jaxload.from_grain(ds, jaxload.data_parallel(),
                              global_batch_size=[(0, 8), (3, 16), (5, 32)], **kwargs)


def test_the_schedule_goes_on_in_the_next_pass():
    loader = grain_loader(record="id")
    first = [ids_of(b) for b in loader]  # 8, 8, 8, 16, 16; the next 32 rows are not there
    assert [len(ids) for ids in first] == [8, 8, 8, 16, 16]
    assert sum(first, []) == list(range(56))
    state = loader.get_state()
    assert (state["step"], state["steps_before"], state["rows"]) == (0, 5, 0)
    second = [ids_of(b) for b in loader]  # steps 5, 6 of the schedule: 32 rows each
    assert second == [list(range(32)), list(range(32, 64))]
    assert [len(r["ids"][0]) for r in loader.records()] == [8, 8, 8, 16, 16, 32, 32]

    fresh = grain_loader()  # a state taken between passes goes on with the schedule
    fresh.set_state(state)
    assert [ids_of(b) for b in fresh] == second
    assert fresh.batch_spec()["id"].shape == (32,)


def test_a_pass_stopped_early_counts_its_steps():
    loader = grain_loader()
    with iter(loader) as batches:
        next(batches), next(batches), next(batches), next(batches)  # steps 0-3: 8, 8, 8, 16
    assert loader.batch_spec()["id"].shape == (16,)  # step 4, the next
    assert [len(ids_of(b)) for b in loader] == [16, 32]  # steps 4, 5 from row 0
    assert repr(loader).startswith("Loader(global_batch_size=[[0, 8], [3, 16], [5, 32]], ")


def test_a_state_within_a_later_pass_resumes_its_step():
    loader = grain_loader()
    list(loader)
    with iter(loader) as batches:
        next(batches)  # schedule step 5: rows 0-31
        state = loader.get_state()
    assert (state["step"], state["steps_before"], state["rows"]) == (1, 5, 32)
    fresh = grain_loader()
    fresh.set_state(state)
    assert [ids_of(b) for b in fresh] == [list(range(32, 64))]
    other = jaxload.from_grain(  # another schedule: it goes on at the state's global row
        __import__("grain").MapDataset.range(64).map(lambda i: {"id": np.int32(i)}),
        jaxload.data_parallel(), global_batch_size=[(0, 8), (6, 16)])
    other.set_state(state)
    assert [len(ids_of(b)) for b in other] == [16, 16]  # steps 6, 7 from row 32


def test_plan_explain_and_the_cli_show_the_schedule(capsys):
    import re

    from jaxload import cli

    layout = jaxload.model_replicas_across_processes(2, devices=jaxload.simulated_devices(4, 2))
    plan = layout.plan([(0, 16), (3, 32), (6, 64)], process_index=1)
    assert plan.schedule == ((0, 16), (3, 32), (6, 64))
    assert (plan.global_batch_size, plan.local_batch_size, plan.shard_index) == (16, 8, 1)
    rows = re.findall(r"│ (\d+) +│ (\d+) +│ (\d+) +│ (\d+) +│", plan.explain())
    assert rows[:3] == [("0", "16", "4", "8"), ("3", "32", "8", "16"), ("6", "64", "16", "32")]
    assert cli.main(["plan", "--processes", "4", "--local-devices", "2", "--layout",
                     "replicas-across-processes", "--model-size", "2",
                     "--global-batch-size", "0:16,3:32,6:64"]) == 0
    assert "Batch-size schedule" in capsys.readouterr().out
    with pytest.raises(ValueError, match="size 10 from step 3: global_batch_size=10 must be"):
        layout.plan([(0, 16), (3, 10)])
    assert grain_loader().plan.schedule == ((0, 8), (3, 16), (5, 32))
    assert layout.plan(16).schedule == ()


def test_step_counts_of_a_known_length_follow_the_segments():
    import random

    from jaxload._src.schedule import Schedule

    layout = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4))
    rng = random.Random(0)
    for _ in range(200):
        firsts = sorted(rng.sample(range(1, 30), rng.randint(0, 4)))
        pairs = tuple(zip([0, *firsts], [8 * rng.randint(1, 6) for _ in range(len(firsts) + 1)],
                          strict=True))
        schedule = Schedule.build(pairs, layout.plan)
        parts, first, pad = rng.randint(0, 400), rng.randint(0, 35), rng.random() < 0.5
        step, left = first, parts  # one step at a time, as the regrouping reads them
        while left >= schedule.parts(step):
            left, step = left - schedule.parts(step), step + 1
        expected = step - first + (1 if pad and left else 0)
        assert schedule.steps_in(parts, first, pad) == expected, (pairs, parts, first, pad)
    big = Schedule.build(((0, 8), (1000, 16), (5000, 64)), layout.plan)
    # parts (unit 4 rows per group) per step: 1, then 2, then 8
    assert big.steps_in(10**9, 0, False) == 5000 + (10**9 - 1000 - 8000) // 8  # at once
