"""A call that starts jaxload.testing processes from the top level of the file whose function they
run is refused in the processes (each would load the file again and start processes of its own,
without end), for a cold run and for a warm cluster."""

from __future__ import annotations

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
