"""The examples run and print what the README and the guides (docs/guides/) show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.cluster
def test_demo_prints_placement_of_every_layout():
    out = run_example("demo.py")
    assert "model_replicas_across_processes(2)   mesh replica=4 x model=2" in out
    assert "process 1: loading group 0 of 1, loads 16 rows = global rows 0-15" in out
    assert "process 1: loading group 1 of 2, loads 8 rows = global rows 8-15" in out


@pytest.mark.cluster
def test_uneven_example():
    out = run_example("uneven.py")
    assert "process 1: pipeline of  40 elements ->  5 steps,  40 real rows delivered" in out
    assert "process 0: pipeline of 100 elements -> 13 steps, 100 real rows delivered" in out


@pytest.mark.cluster
def test_checks_example_catches_both_mistakes_on_every_process():
    out = run_example("checks.py")
    assert "across, 4 processes x 2 devices: 4 of 4 processes raised" in out
    assert "ReplicationError: batch['id'] rows [0, 4)" in out
    assert "data_parallel, 2 processes x 4 devices: 2 of 2 processes raised" in out
    assert "DuplicationError: different rows of the batch hold identical data" in out


@pytest.mark.cluster
def test_quick_reference_under_launch():
    stdout = launch_example("quick_reference.py", 2, 4)
    for p in (0, 1):
        assert f"[{p}] 8 steps of (128, 8, 8, 3) float32; this process loaded 512 of 1024" \
            in stdout
    assert "[1] device 2048: rows 64-79, samples [1, 3, 5, 7]..." in stdout


@pytest.mark.cluster
def test_training_loop_loss_goes_down():
    stdout = launch_example("train.py", 2, 4)
    assert "[0] first step: loss" in stdout and "[0] epoch 2: loss" in stdout
    assert "[0] max |w - w_true| = 0.00" in stdout  # the script asserts the loss went down
    assert "[0] slowest: process " in stdout  # loader.stats(all_processes=True)


def launch_example(name: str, processes: int, devices: int, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "jaxload", "launch", "-n", str(processes),
                           "--local-devices", str(devices), "--", "python", str(EXAMPLES / name),
                           *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.cluster
def test_grain_dataloader_with_workers_under_launch():
    out = launch_example("grain_dataloader.py", 2, 4)
    for p in (0, 1):
        assert f"[{p}] process {p}: ShardOptions(shard_index={p}, shard_count=2" in out
        assert f"[{p}] process {p}: 14 steps, 448 rows loaded here, 448 distinct" in out
        assert f"[{p}] process {p}: ShardByJaxProcess refused: the grain.DataLoader shards by " \
            f"shard_index={p}, shard_count=2 (ShardByJaxProcess)" in out


@pytest.mark.cluster
def test_layout_examples():
    out = launch_example("tf_data_parallel.py", 2, 4)
    assert "[1] device 2048: elements [1, 3]" in out and "[0] 6 steps per epoch" in out
    out = launch_example("grain_replicas_in_process.py", 2, 4)
    assert "[0] device 1 (replica 0): rows 0-7, elements [0, 2, 4, 6, 8, 10, 12, 14]" in out
    assert "[1] process 1: replicas verified" in out
    out = launch_example("replicas_across_processes.py", 4, 2)
    assert "[2] process 2: loading group 0 (0, 2), device rows {4096: [0, 2], 4097: [4, 6]}" in out
    assert "[3] process 3: loading group 1 (1, 3), device rows {6144: [1, 3], 6145: [5, 7]}" in out


@pytest.mark.cluster
def test_sharding_guide_quick():
    done = subprocess.run([sys.executable, str(EXAMPLES / "sharding_guide.py"), "--quick"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| 2 x 4 | data=4 x model=2 | P('data',) | 64 | 256 | 0.75 |" in done.stdout
    assert "| 1 x 1 | data=1 | P('data',) | 64 | 64 | 0.75 |" in done.stdout


@pytest.mark.cluster
def test_resume_example_continues_with_the_same_batches(tmp_path):
    out = launch_example("resume.py", 2, 4, str(tmp_path))
    for p in (0, 1):
        assert f"[{p}] process {p}: saved loader state {{'next_batch': 6}} at step 6" in out
    assert (tmp_path / "step_6" / "loader_1.json").exists()


@pytest.mark.cluster
def test_tf_files_example_reads_each_groups_files_and_resumes_reading_only_after_its_state(
        tmp_path):
    out = launch_example("tf_files.py", 2, 4, str(tmp_path))
    assert "[0] input: tf.data by files: each loading group reads 8 of the 16 files" in out
    assert "saved when a state is asked for (with the batches read ahead of the loop)" in out
    for p in range(2):
        found = re.search(rf"\[{p}\] process {p}: stopped at step 10 of 32, resumed for 22 steps, "
                          r"parsing (\d+) records \(at most (\d+) x 32 rows: the (\d+) batches "
                          r"read ahead of step 10 come from the state, nothing before it is read\).*"
                          r" iterator saved at batch 10", out)
        assert found, out
        parsed, left, ahead = (int(g) for g in found.groups())
        # the iterator is saved when the state is asked for, at step 10: the batches read
        # ahead of it, and what tf.data had parsed ahead, come back from the state
        assert left == 22 - ahead and 0 < ahead and 0 < parsed <= left * 32


@pytest.mark.cluster
def test_tf_data_service_example():
    out = run_example("tf_data_service.py")
    # the step count depends on how the service splits the epoch's last batches (7 to 9)
    assert re.search(r"model_replicas_across_processes\(2\)   [789] steps; process 0 holds 200 "
                     r"elements, process 1 holds 200, both 200; every element delivered once: "
                     r"True", out), out
    line = next(x for x in out.splitlines() if x.startswith("data_parallel()"))
    assert "both   0; every element delivered once: True" in line


@pytest.mark.cluster
def test_context_parallel_example_under_launch():
    out = launch_example("context_parallel.py", 2, 4)
    assert "[1] process 1 device 2048: rows 0-1, tokens 4-7: [[4, 5, 6, 7], [104, 105, 106, 107]]" \
        in out
    assert "[0] process 0 step 3: rows 0-3, mask [1, 0, 0, 0]" in out
    assert "[1] process 1 read ids []" in out
    assert "[0] step 0: ids by loading group {0: [0, 1, 2, 3, 4, 5, 6, 7], 1: [8, 9, 10, 11]}" \
        in out


@pytest.mark.cluster
def test_ramp_up_example_under_launch():
    stdout = launch_example("ramp_up.py", 2, 4)
    assert "[0] │ 3         │ 32           │ 4                 │ 16" in stdout
    for line in ("[1] step 2: 16 rows, first id on each of this process's devices [33, 37, 41, 45]",
                 "[0] step 3: 32 rows, first id on each of this process's devices [48, 56, 64, 72]",
                 "[1] step 6: 64 rows, first id on each of this process's devices [145, 161, 177,",
                 "[0] sum of the ids delivered: 20503 (0 + 1 + ... + 202 = 20503)",
                 "[1] sum of the ids delivered: 20503"):
        assert line in stdout, line
