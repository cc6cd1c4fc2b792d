"""The step agreement at scale: N clients of one coordination service, in one process.

Each simulated process is a thread with its own client of a real coordination service (the one
``jax.distributed.initialize`` starts), so the coordinator handles exactly the RPCs that N
processes would send it. Two exchanges are measured in the same run:

- ``jaxload``: :class:`jaxload._src.agreement.Exchange` with the loader's compact reports and
  :func:`jaxload._src.protocol.decide` (the process that arrives last reads every report and
  publishes one decision);
- ``every-reads-all``: the previous protocol: every process sets its report (the full
  signature, ~300 bytes), waits at a barrier, and reads every report.

The same exchange with the reports of a loading group that proves its rows (``rows``: one
16-digit digest per step of the round, :mod:`jaxload._src.group_proof`) is measured beside it.

Then, in real processes (1 CPU device each): coordinator bytes per loader step for 2, 4 and 8
processes, what known lengths save (rounds and agreement time per step), what the stream proof
adds to a split by elements (:mod:`jaxload._src.stream_proof`: one digest per step, in the
``stream`` field of the same reports, as the group proof's ``rows``), and what the group proof
adds where model replicas span 2 processes (``checks`` default against ``"never"``).

Run: .venv/bin/python benchmarks/agreement_scale.py [--quick]   (its section of results.md)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from sections import publish

import jaxload.testing
from jaxload._src import protocol
from jaxload._src.agreement import Exchange
from jaxload._src.cluster import free_port
from jaxload._src.transport import CoordinationTransport

OLD_REPORT = ('{"steps": 16, "signature": "batch[\'image\']:float32[32, 32, 3];batch[\'label\']:'
              'int32[];batch[\'mask\']:bool[];batch[\'weights\']:float32[10]", "nbytes": 3145728, '
              '"padding": [0, 0, 0, 0], "first": "batch[\'image\']:float32[32, 32, 3];batch[\'label\']'
              ':int32[]"}')  # ~300 bytes, as the previous exchange sent every round
SECTION = "<!-- agreement_scale.py: the section below is written by that script -->"
NEW_REPORT = protocol.Report(ready=16, digest="0123456789abcdef", nbytes=3 * 2**20).to_json()
PROVING_REPORT = protocol.Report(ready=16, digest="0123456789abcdef", nbytes=3 * 2**20,
                                 rows=["0123456789abcdef"] * 16).to_json()


def _cluster(n: int):
    from jax._src.lib import _jax

    address = f"127.0.0.1:{free_port()}"
    service = _jax.get_distributed_runtime_service(address, n)
    clients = [_jax.get_distributed_runtime_client(address, i, init_timeout=300)
               for i in range(n)]
    _in_threads([c.connect for c in clients])
    return service, clients


def _in_threads(calls) -> float:
    """Runs the calls in one thread each, all released together; the wall time."""
    start = threading.Barrier(len(calls) + 1)
    errors = []

    def run(call):
        start.wait()
        try:
            call()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - began


def _decide(reports):
    d = protocol.decide(protocol.parse(reports), step=0, window=16, pad=False)
    return d.to_json(), False


def measure_jaxload(clients, rounds: int, tag: str, report: str = NEW_REPORT
                    ) -> tuple[float, float]:
    n = len(clients)
    transports = [CoordinationTransport(c, i, n) for i, c in enumerate(clients)]

    def process(t):
        def run():
            exchange = Exchange(f"bench-{tag}", timeout_s=600, transport=t)
            for _ in range(rounds):
                exchange.round(report, _decide)
            exchange.leave()
        return run

    elapsed = _in_threads([process(t) for t in transports])
    nbytes = sum(t.sent + t.received for t in transports)
    return elapsed / rounds, nbytes / rounds


def measure_floor(clients, rounds: int, tag: str) -> float:
    """Three plain RPCs per client and round, nothing waited for: what any exchange through
    the coordinator costs at least (each process must send a report and read a decision) in
    this simulation, where N client threads share the machine's cores."""

    def process(i, client):
        def run():
            for _ in range(rounds):
                client.key_value_set(f"floor-{tag}/{i}", NEW_REPORT, allow_overwrite=True)
                client.key_value_increment(f"floor-{tag}/n", 1)
                client.key_value_try_get(f"floor-{tag}/{i}")
        return run

    elapsed = _in_threads([process(i, c) for i, c in enumerate(clients)])
    clients[0].key_value_delete(f"floor-{tag}")
    return elapsed / rounds


def measure_every_reads_all(clients, rounds: int, tag: str) -> tuple[float, float]:
    n = len(clients)
    moved = [0] * n

    def process(i, client):
        def run():
            for r in range(rounds):
                key = f"old-{tag}/{r}"
                client.key_value_set(f"{key}/{i}", OLD_REPORT)
                client.wait_at_barrier(key, 600_000)
                entries = client.key_value_dir_get(key)
                moved[i] += len(key) + 2 + len(OLD_REPORT) + sum(len(k) + len(v)
                                                                  for k, v in entries)
        return run

    elapsed = _in_threads([process(i, c) for i, c in enumerate(clients)])
    clients[0].key_value_delete(f"old-{tag}")
    return elapsed / rounds, sum(moved) / rounds


def simulated(sizes, rounds_of) -> list[dict]:
    rows = []
    for n in sizes:
        service, clients = _cluster(n)
        rounds = rounds_of(n)
        measure_jaxload(clients, 2, f"warm{n}")
        measure_every_reads_all(clients, 2, f"warm{n}")
        new_ms, old_ms, floor_ms, proving_ms = [], [], [], []
        for i in range(3):  # interleaved, so that noise hits all
            t, new_bytes = measure_jaxload(clients, rounds, f"{n}-{i}")
            new_ms.append(t * 1000)
            t, proving_bytes = measure_jaxload(clients, rounds, f"{n}-{i}-proving", PROVING_REPORT)
            proving_ms.append(t * 1000)
            t, old_bytes = measure_every_reads_all(clients, rounds, f"{n}-{i}")
            old_ms.append(t * 1000)
            floor_ms.append(measure_floor(clients, rounds, f"{n}-{i}") * 1000)
        rows.append(dict(n=n, new_ms=sorted(new_ms)[1], old_ms=sorted(old_ms)[1],
                         floor_ms=sorted(floor_ms)[1], new_bytes=new_bytes, old_bytes=old_bytes,
                         proving_ms=sorted(proving_ms)[1], proving_bytes=proving_bytes))
        print(rows[-1], flush=True)
        _in_threads([c.shutdown for c in clients])  # a shutdown barrier of all clients
        service.shutdown()
    return rows


def loader_traffic(known: bool, steps: int, replicas: bool = False, checks: str = "never"):
    """In each real process: coordinator bytes, rounds and agreement time of one pass."""
    import jax
    import tensorflow as tf

    import jaxload
    from jaxload._src import agreement

    ds = tf.data.Dataset.range(steps * 4 * jax.process_count()).map(
        lambda i: {"x": tf.cast(i, tf.float32), "y": tf.fill([16], i)})
    if not known:  # the same elements, with a length tf.data cannot know
        ds = ds.filter(lambda e: True)
    layout = (jaxload.model_replicas_across_processes(2) if replicas
              else jaxload.data_parallel())
    loader = jaxload.from_tf_data(ds, layout, global_batch_size=4 * jax.process_count(),
                                  checks=checks)
    transport = agreement.this_process_transport()
    before = transport.sent + transport.received
    n = sum(1 for _ in loader)
    stats = loader.stats()
    return dict(steps=n, bytes=transport.sent + transport.received - before,
                rounds=stats.rounds, agree_ms=stats.ms_per_step("agree"))


def real(process_counts, steps: int) -> list[dict]:
    rows = []
    cases = [("data_parallel", False, "never"), ("data_parallel", True, "never"),
             ("data_parallel, stream proof on", False, "first"),  # the filter: proved
             ("replicas across 2, proof off", True, "never"),
             ("replicas across 2, proof on", True, "first")]
    for n in process_counts:
        for name, known, checks in cases:
            results = jaxload.testing.run(loader_traffic, num_processes=n, local_devices=1,
                                          args=(known, steps, name.startswith("replicas"), checks),
                                          timeout_s=600)
            rows.append(dict(processes=n, layout=name, known=known, steps=results[0]["steps"],
                             bytes_per_step=sum(r["bytes"] for r in results) / results[0]["steps"],
                             rounds=results[0]["rounds"],
                             agree_ms=max(r["agree_ms"] for r in results)))
            print(rows[-1], flush=True)
    return rows


def main():
    quick = "--quick" in sys.argv
    sizes = [8, 32, 128] if quick else [8, 32, 128, 256, 512, 1024]
    rows = simulated(sizes, lambda n: 20 if n <= 128 else 5 if n <= 512 else 3)
    passes = real([2, 4] if quick else [2, 4, 8], 100 if quick else 400)
    lines = [
        "## The step agreement at scale",
        "",
        f"Machine: {os.cpu_count()} cores; `benchmarks/agreement_scale.py`"
        + (" --quick" if quick else "") + ".",
        "",
        "### N clients of one coordination service in one process (one thread each)",
        "",
        "Median of 3 interleaved runs; bytes are keys and values through the coordinator per "
        "exchange (sent and received by all clients).",
        "",
        "*Proving*: each report carries one 16-digit digest per step of the round (a loading "
        "group's rows, or a split's stream: the same list in another field).",
        "",
        "| N | jaxload (ms/exchange) | every-reads-all (ms/exchange) | ratio | 3 plain RPCs "
        "per client (ms) | jaxload (KB) | every-reads-all (KB) | jaxload proving 16 steps "
        "(ms/exchange) | jaxload proving (KB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n']} | {r['new_ms']:.1f} | {r['old_ms']:.1f} | "
                     f"{r['new_ms'] / r['old_ms']:.2f} | {r['floor_ms']:.1f} | {r['new_bytes'] / 1e3:.1f} | "
                     f"{r['old_bytes'] / 1e3:.1f} | {r['proving_ms']:.1f} | "
                     f"{r['proving_bytes'] / 1e3:.1f} |")
    big = [r for r in rows if r["n"] >= 128]
    if len(big) > 1:
        a, b = big[0], big[-1]
        lines += ["", f"From N={a['n']} to N={b['n']} ({b['n'] / a['n']:.0f}x the processes): "
                      f"jaxload's bytes {b['new_bytes'] / a['new_bytes']:.1f}x, its time "
                      f"{b['new_ms'] / a['new_ms']:.1f}x, the plain-RPC floor's time "
                      f"{b['floor_ms'] / a['floor_ms']:.1f}x; proving, its bytes "
                      f"{b['proving_bytes'] / a['proving_bytes']:.1f}x."]
    lines += ["", "### Real processes (1 CPU device each): one pass, tf.data, 4 rows per process "
                  "per step", "",
              "| processes | layout | length known | steps | rounds | coordinator bytes/step | "
              "agree ms/step (slowest) |", "|---|---|---|---|---|---|---|"]
    for r in passes:
        lines.append(f"| {r['processes']} | {r['layout']} | {'yes' if r['known'] else 'no'} | "
                     f"{r['steps']} | "
                     f"{r['rounds']} | {r['bytes_per_step']:.0f} | {r['agree_ms']:.3f} |")
    # its section only: the sections after it (other scripts') stay
    publish(Path(__file__).with_name("results.md"), SECTION, [SECTION, *lines])


if __name__ == "__main__":
    main()
