"""``bench.profile --count``: syncs, writes and wake-ups per request from /proc and perf."""

from __future__ import annotations

import os

from bench.profile import _threads, counted


def test_each_thread_and_each_counted_call_is_shown_per_request() -> None:
    before = {"python/1": (1.0, 10, 5), "python/2": (0.0, 0, 0)}
    after = {"python/1": (1.5, 30, 5), "python/2": (0.1, 400, 2), "python/3": (0.05, 4, 0)}
    perf = (
        "# started on Thu Nov 26\n\n"
        "150,,syscalls:sys_enter_fdatasync,8001234,100.00,,\n"
        "400,,syscalls:sys_enter_pwrite64,8001234,100.00,,\n"
        "<not counted>,,syscalls:sys_enter_futex,0,0.00,,\n"
    )
    shown = counted(before, after, perf, 100).splitlines()
    assert "python/1  5.000  0.20  0.00" in shown
    assert "python/2  1.000  4.00  0.02" in shown
    assert "python/3  0.500  0.04  0.00" in shown  # started during the cell
    assert "fdatasync: 1.50" in shown and "pwrite64: 4.00" in shown
    assert not any(line.startswith("futex") for line in shown)


def test_threads_reads_this_process() -> None:
    threads = _threads(os.getpid())
    assert any(name.endswith(f"/{os.getpid()}") for name in threads)
    assert all(cpu >= 0 and voluntary >= 0 for cpu, voluntary, _ in threads.values())
