"""The benchmark's accounting: the CPU time of a command's tree, and the stamp files its runs count."""

from __future__ import annotations

import os
import sys

from benchmarks import stamp
from benchmarks.infra import Runner, tree_rss_mib

BURN = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n"


def test_a_command_is_accounted_with_the_children_it_reaped(tmp_path):
    # the parent forks a child that burns 0.2 s of CPU, and reaps it: the tree has it, the parent not
    script = (
        f"import os\npid = os.fork()\nif pid == 0:\n    exec({BURN!r})\n    os._exit(0)\nos.waitpid(pid, 0)\n"
    )
    runner = Runner(dict(os.environ), tmp_path)
    usage = runner.accounted([sys.executable, "-c", script, "burn"], timeout=30)
    assert usage.tree >= 0.19
    assert usage.own < 0.15
    assert usage.wall >= 0.19


def test_the_resident_memory_of_a_tree_counts_its_processes():
    count, mib = tree_rss_mib([os.getpid()])
    assert count >= 1
    assert mib > 1


def test_a_stamp_file_gives_its_jobs_and_first_start_to_last_end(tmp_path):
    path = tmp_path / "stamps.log"
    path.write_text("0 10.0 10.5\n1 10.2 11.0\n1 10.3 11.25\n")
    found = stamp.read(path)
    assert (found.lines, found.distinct, found.span) == (3, 2, 1.25)  # a job that ran twice is seen
    assert stamp.count(path) == 3
    assert stamp.count(tmp_path / "none.log") == 0


def test_the_jobs_stamp_the_file(tmp_path):
    path = str(tmp_path / "stamps.log")
    stamp.noop(7, path)
    stamp.noop(8, path)
    found = stamp.read(tmp_path / "stamps.log")
    assert (found.lines, found.distinct) == (2, 2)
