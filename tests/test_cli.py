"""``jaxload plan`` and ``jaxload launch`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import jaxload
from jaxload import cli

SCRIPT = Path(__file__).parent / "scripts" / "fail_on_process_one.py"


def jaxload_command(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxload", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.cluster
def test_plan_of_the_guides_cross_process_example(tmp_path):
    svg = tmp_path / "plan.svg"
    done = jaxload_command("plan", "--processes", "4", "--local-devices", "2", "--layout",
                           "replicas-across-processes", "--model-size", "2",
                           "--global-batch-size", "16", "--svg", str(svg))
    assert done.returncode == 0, done.stderr
    assert "Processes 0 and 2 load the same rows; processes 1 and 3 load the same rows." \
        in done.stdout
    assert "│ 0                   │ 0, 2      │ 0-7         │" in done.stdout
    root = ET.fromstring(svg.read_text())  # valid XML
    devices = [e for e in root.iter() if e.get("class") == "device"]
    assert sorted(int(e.get("data-device")) for e in devices) == list(range(8))
    rows = {int(e.get("data-device")): e.get("data-rows") for e in devices}
    assert rows[0] == rows[4] == "0-3" and rows[3] == rows[7] == "12-15"


def test_plan_text_is_the_python_api_text(capsys):
    assert cli.main(["plan", "--processes", "2", "--local-devices", "4", "--layout",
                     "replicas-in-process", "--model-size", "2", "--global-batch-size", "8"]) == 0
    layout = jaxload.model_replicas_in_process(2, devices=jaxload.simulated_devices(2, 4))
    assert capsys.readouterr().out == layout.plan(8).explain()


def test_plan_with_a_mesh_shape_and_bad_requests(capsys):
    assert cli.main(["plan", "--processes", "2", "--local-devices", "4", "--mesh-shape", "4,2",
                     "--mesh-axes", "data,model", "--batch-axes", "data",
                     "--global-batch-size", "8"]) == 0
    assert "Every process loads different rows" in capsys.readouterr().out
    assert cli.main(["plan", "--processes", "2", "--local-devices", "4", "--global-batch-size",
                     "12"]) == 2
    assert "global_batch_size=12 must be a positive multiple of the 8 batch shards" \
        in capsys.readouterr().err


def test_a_large_simulated_topology_is_summarised():
    layout = jaxload.model_replicas_across_processes(2, devices=jaxload.simulated_devices(512, 8))
    text = layout.plan(8192).explain(max_processes=4)
    assert "512 processes x 8 devices" in text
    assert "Processes 0 and 256 load the same rows" in text
    assert "... and 508 more processes" in text


@pytest.mark.cluster
def test_launch_runs_every_process_with_prefixed_output():
    done = jaxload_command("launch", "-n", "2", "--local-devices", "4", "--", "python",
                           str(SCRIPT))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[0] hello from 0 of 2, 4 local devices" in done.stdout
    assert "[1] hello from 1 of 2, 4 local devices" in done.stdout


@pytest.mark.cluster
def test_launch_propagates_a_failing_process():
    done = jaxload_command("launch", "-n", "2", "--local-devices", "4", "--", "python",
                           str(SCRIPT), "--fail")
    assert done.returncode == 7
    assert "[1] process 1 gives up" in done.stdout
    assert "multi-process run failed: process 1 exited with code 7" in done.stderr
    assert "--- process 1 (exit code 7), last lines ---\nhello from 1 of 2" in done.stderr


def test_plan_with_a_feature_spec_shows_and_draws_the_columns(tmp_path, capsys):
    svg = tmp_path / "cp.svg"
    assert cli.main(["plan", "--processes", "2", "--local-devices", "4", "--mesh-shape", "4,2",
                     "--mesh-axes", "data,seq", "--batch-axes", "data", "--feature-spec",
                     "tokens=data,seq", "--global-batch-size", "8", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "│ 1       │ 5      │ (2, 1)        │ 4-5         │ 2                 │ tokens dim1 1/2 │" \
        in out
    cells = [e for e in ET.fromstring(svg.read_text()).iter() if e.get("class") == "cell"]
    held = {(e.get("data-replica"), e.get("data-block")): e.get("data-devices") for e in cells}
    assert len(held) == 8 and held[("2", "1/2")] == "5" and held[("0", "0/2")] == "0"
    assert cli.main(["plan", "--processes", "2", "--local-devices", "4", "--mesh-shape", "4,2",
                     "--mesh-axes", "data,seq", "--batch-axes", "data", "--feature-spec",
                     "tokens=seq", "--global-batch-size", "8"]) == 2
    assert "feature_specs['tokens']=P('seq',) must start with the batch axes" in \
        capsys.readouterr().err


@pytest.mark.cluster
def test_under_launch_nothing_listens_beyond_loopback():
    """The coordination service (JAX binds it to every interface by default, unauthenticated)
    and gloo's sockets listen on 127.0.0.1 only under jaxload launch."""
    script = Path(__file__).parent / "scripts" / "listeners.py"
    done = jaxload_command("launch", "-n", "2", "--local-devices", "2", "--", sys.executable,
                           str(script))
    assert done.returncode == 0, done.stderr[-3000:]
    listening = [line for line in done.stdout.splitlines() if " LISTEN " in line]
    assert any(line.startswith("[0] LISTEN") for line in listening), done.stdout
    assert all(line.endswith("loopback=True") for line in listening), listening


def test_initialize_refuses_options_the_installed_jax_does_not_take():
    import pytest

    with pytest.raises(TypeError, match=r"does not take \['not_an_option'\]"):
        jaxload.initialize(not_an_option=1)
    with pytest.raises(ValueError, match="heartbeat_timeout_s=0 must be a positive int"):
        jaxload.initialize(heartbeat_timeout_s=0)


def test_initialize_under_launch_refuses_coordinates_of_its_own(monkeypatch):
    # a script edited for processes started by hand, then run under jaxload launch: JAX's own
    # error was "got multiple values for keyword argument 'coordinator_address'"
    import pytest

    from jaxload._src import cluster

    monkeypatch.setenv(cluster._ENV_PROCESSES, "2")
    with pytest.raises(ValueError, match=r"initialize\(coordinator_address=\.\.\., process_id="
                                         r"\.\.\.\) under jaxload launch .* without "
                                         r"coordinator_address, process_id"):
        jaxload.initialize(coordinator_address="127.0.0.1:1234", process_id=0)


@pytest.mark.cluster
def test_initialize_without_a_cluster_says_how_to_get_one():
    # plain `python train.py` of the README's script: JAX's own error names none of the ways
    done = subprocess.run(
        [sys.executable, "-c", "import jaxload; jaxload.initialize()"], capture_output=True,
        text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXLOAD_"))})
    assert done.returncode == 1
    assert "found no cluster to join (coordinator_address should be defined.)" in done.stderr
    assert "jaxload launch -n 2" in done.stderr and "coordinator_address=" in done.stderr


def test_plan_says_what_each_loading_group_reads_of_files(capsys):
    assert cli.main(["plan", "--processes", "64", "--local-devices", "8",
                     "--global-batch-size", "2048", "--files", "1000"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "input: tf.data by files: each loading group reads 15-16 of the 1000 files "
        "(1/64 of the records)")
    assert cli.main(["plan", "--processes", "4", "--local-devices", "2", "--layout",
                     "replicas-across-processes", "--model-size", "2",
                     "--global-batch-size", "16", "--files", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "input: tf.data by elements (1 file for 2 loading groups; write at least 2): each "
        "process reads every element and keeps 1/2 of them")
