"""The console entry point collects garbage less often and leaves the heap frozen for the
interpreter's exit (no last full collection); a CLI call made in-process (argv given) does
neither."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_the_entry_point_freezes_the_heap_before_the_process_exits() -> None:
    code = ("import gc, sys; from tacos.cli import main; sys.argv = ['tacosc', '--version']; "
            "rc = main(); print(rc, gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "True"]


def test_an_in_process_call_does_not_freeze_the_heap() -> None:
    from tacos.cli import main

    before = gc.get_freeze_count()
    assert main(["--version"]) == 0
    assert gc.get_freeze_count() == before


def test_the_entry_point_collects_less_often_and_an_in_process_call_does_not() -> None:
    from tacos.cli import main
    from tacos.nogc import BATCH_THRESHOLDS

    code = ("import gc, sys; from tacos.cli import main; sys.argv = ['tacosc', '--version']; "
            "main(); print(*gc.get_threshold())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert tuple(map(int, done.stdout.split()[-3:])) == BATCH_THRESHOLDS
    before = gc.get_threshold()
    assert before != BATCH_THRESHOLDS
    assert main(["--version"]) == 0
    assert gc.get_threshold() == before
