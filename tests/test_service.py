"""tf.data service: a real dispatcher and 2 workers on 127.0.0.1 (in this test process), read by
2 processes x 4 CPU devices. The service hands out elements in no fixed order, so the parent
checks what must hold whatever the order: each device holds the rows the layout gives it,
replicas agree, every row's features match its id, and no element arrives twice."""

from __future__ import annotations

import pytest

from jaxload._src.cluster import free_port
from placement import verify_steps

# (layout, num_elements, global_batch_size, remainder, passes)
SCENARIOS = [
    ("data_parallel", 100, 16, "pad", 2),  # two loading groups; two passes = two service jobs
    ("across_processes", 96, 16, "drop", 1),  # one group of both processes: resharded on device
    ("in_process", 64, 8, "drop", 1),
]


def service_dataset(num_elements: int):
    """``placement.element(i)`` in TensorFlow ops only: the workers run it from its graph."""
    import tensorflow as tf

    def element(i):
        i = tf.cast(i, tf.int32)
        return {
            "id": i,
            "x": tf.cast(i * 10 + tf.range(3), tf.float32),
            "pair": (2 * i, i % 2 == 0),
            "img": tf.cast(tf.stack([[i, -i], [i, -i]]), tf.int16),
        }

    return tf.data.Dataset.range(num_elements).map(element)


def read_through_service(target: str, scenarios) -> list[dict]:
    """Worker side: every scenario's passes, recorded; and what set_state says."""
    import jaxload
    from placement import make_layout, record, record_loader

    out = []
    for layout_name, num_elements, global_batch_size, remainder, passes in scenarios:
        loader = jaxload.from_tf_data(service_dataset(num_elements), make_layout(layout_name),
                                      global_batch_size=global_batch_size, remainder=remainder,
                                      service=target)
        recorded = [record_loader(loader, [record(b) for b in loader]) for _ in range(passes)]
        try:
            loader.set_state(loader.get_state())
            refused = None
        except ValueError as e:
            refused = str(e)
        out.append(dict(passes=recorded, refused=refused))
    return out


@pytest.fixture(scope="module")
def service():
    tf = pytest.importorskip("tensorflow")
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=free_port()))
    address = dispatcher.target.split("://")[1]
    workers = []
    for _ in range(2):
        port = free_port()
        workers.append(svc.WorkerServer(svc.WorkerConfig(
            dispatcher_address=address, worker_address=f"127.0.0.1:{port}", port=port)))
    yield dispatcher.target
    for server in workers + [dispatcher]:
        server.stop()


@pytest.fixture(scope="module")
def results(clusters, service):
    per_process = clusters.run(read_through_service, num_processes=2, local_devices=4,
                               args=(service, SCENARIOS), timeout_s=240)
    return [[r[i] for r in per_process] for i in range(len(SCENARIOS))]


@pytest.mark.cluster
@pytest.mark.parametrize("index", range(len(SCENARIOS)),
                         ids=[f"2x4-{s[0]}-{s[3]}" for s in SCENARIOS])
def test_service_epoch(results, index):
    layout, num_elements, global_batch_size, remainder, passes = SCENARIOS[index]
    for p in range(passes):
        per_process = [r["passes"][p] for r in results[index]]
        seen, loaded = verify_steps(per_process, global_batch_size)
        assert len(seen) == len(set(seen)), f"pass {p}: an element arrived twice"
        assert set(seen) <= set(range(num_elements))
        if remainder == "pad":  # nothing is dropped: every element exactly once
            assert sorted(seen) == list(range(num_elements))
            # and the processes got about even shares, or the short one would pad many steps
            steps = len(per_process[0]["steps"])
            assert steps <= -(-num_elements // global_batch_size) + 2, steps
        else:  # whole steps only; what is dropped at the end depends on the service's order
            assert seen and len(seen) % global_batch_size == 0
            print(f"{layout}: {len(seen)} of {num_elements} delivered")
        if layout == "across_processes":  # one loading group: both processes hold every row
            assert loaded[0] == loaded[1] == set(seen)
        else:  # two loading groups: disjoint rows
            assert not loaded[0] & loaded[1]
            assert loaded[0] | loaded[1] == set(seen)


@pytest.mark.cluster
def test_service_loader_cannot_resume(results):
    for r in results[0]:
        assert "tf.data service loader cannot resume" in r["refused"]


def test_service_option_errors():
    tf = pytest.importorskip("tensorflow")
    import jaxload

    ds = tf.data.Dataset.range(8)
    layout = jaxload.data_parallel()
    with pytest.raises(TypeError, match="dispatcher address"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8, service=5)
    with pytest.raises(ValueError, match="shard=True"):
        jaxload.from_tf_data(ds, layout, global_batch_size=8, service="grpc://h:1", shard=False)
    with pytest.raises(ValueError, match="unbatched"):
        jaxload.from_tf_data(ds.batch(8), layout, global_batch_size=8, service="grpc://h:1",
                             batched=True)
