"""A call that starts jaxload.testing processes from the top level of the file whose function they
run is refused in the processes (each would load the file again and start processes of its own,
without end), for a cold run and for a warm cluster."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

SCRIPTS = {
    "run": "print(jaxload.testing.run(where, num_processes=2, local_devices=1, timeout_s=120))",
    "cluster": ("with jaxload.testing.cluster(num_processes=2, local_devices=1, timeout_s=120) "
                "as c:\n    print(c.run(where))"),
}


@pytest.mark.cluster
@pytest.mark.parametrize("how", sorted(SCRIPTS))
def test_processes_started_at_the_top_of_their_own_file_are_refused(tmp_path, how):
    script = tmp_path / "unguarded.py"
    script.write_text(f"import jaxload.testing\n\n\ndef where():\n    return 1\n\n\n{SCRIPTS[how]}\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "RuntimeError: starting jaxload.testing processes was called while this process " \
           f"loaded {script}" in out, out[-3000:]
    assert "if __name__ == '__main__'" in out


DATA_LOADER = '''
import numpy as np

import jaxload.testing


class Source:  # defined in the file the processes load: Grain's workers import it by name
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return {"x": np.full((2,), i, np.int32)}


def rows(global_batch_size):
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    layout = jaxload.data_parallel()
    sampler = grain.samplers.IndexSampler(
        num_records=32, num_epochs=1, shuffle=True, seed=0,
        shard_options=jaxload.grain_shard_options(layout, global_batch_size))
    data_loader = grain.DataLoader(
        data_source=Source(), sampler=sampler, worker_count=1,
        operations=[grain.transforms.Batch(layout.plan(global_batch_size).local_batch_size,
                                           drop_remainder=True)])
    loader = jaxload.from_grain(data_loader, layout, global_batch_size=global_batch_size)
    return sorted(int(v) for b in loader for s in b["x"].addressable_shards
                  for v in np.asarray(s.data)[:, 0])


if __name__ == "__main__":
    print("rows", jaxload.testing.run(rows, num_processes=2, local_devices=1, args=(8,),
                                      timeout_s=120))
'''


@pytest.mark.cluster
def test_a_data_loader_with_workers_over_classes_of_the_file_the_processes_load(tmp_path):
    """A grain.DataLoader's worker processes unpickle its source by reference: the file the
    processes of jaxload.testing load is found again by its own name (it was not, and every
    process failed with ModuleNotFoundError)."""
    script = tmp_path / "loader_with_workers.py"
    script.write_text(DATA_LOADER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("rows "))
    per_process = ast.literal_eval(line[len("rows "):])
    assert sorted(per_process[0] + per_process[1]) == list(range(32)), line
