"""The console entry point collects garbage less often and leaves the heap frozen for the
interpreter's exit (no last full collection); a CLI call made in-process (argv given) does
neither."""

from __future__ import annotations

import gc
import subprocess
import sys

from tacos.nogc import BATCH_THRESHOLDS


def test_the_entry_point_collects_less_often_and_freezes_the_heap_before_exiting() -> None:
    code = ("import gc, sys; from tacos.cli import main; sys.argv = ['tacosc', '--version']; "
            "rc = main(); print(rc, gc.get_freeze_count() > 0, *gc.get_threshold())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    *_, rc, frozen, a, b, c = done.stdout.split()
    assert (rc, frozen) == ("0", "True")
    assert (int(a), int(b), int(c)) == BATCH_THRESHOLDS


def test_an_in_process_call_does_not_freeze_the_heap() -> None:
    from tacos.cli import main

    before = gc.get_freeze_count()
    assert main(["--version"]) == 0
    assert gc.get_freeze_count() == before



def test_an_in_process_call_keeps_the_collectors_thresholds() -> None:
    from tacos.cli import main

    before = gc.get_threshold()
    assert before != BATCH_THRESHOLDS
    assert main(["--version"]) == 0
    assert gc.get_threshold() == before
