"""Where a script's memory peaks: runs it in this process while a thread samples the
resident set (VmRSS) every 0.2 s and keeps the main thread's stack at the highest sample.

    python experiments/benchmarks/peak_memory.py examples/reconstruction.py [its arguments]

prints, after the script's own output, "PEAK MiB <n>" and the innermost 12 frames at that
moment. A profiler of allocations would say which tensor; this says which call, cheaply,
on a script as a user runs it (how the RUMBArt example's peak was found in the
generator's teacher scoring; experiments/probes/research_log.md, "Generator scoring memory").
"""
import runpy
import sys
import threading
import time
import traceback

peak = [0, '']
main = threading.main_thread().ident


def resident_mib() -> int:
    # (not progress.resident_gib: importing the package here would put its import before the start)
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith('VmRSS'))


def watch():
    while True:
        rss = resident_mib()
        if rss > peak[0]:
            frame = sys._current_frames().get(main)
            peak[:] = [rss, ''.join(traceback.format_stack(frame)[-12:]) if frame else '']
        time.sleep(0.2)


if __name__ == '__main__':
    threading.Thread(target=watch, daemon=True).start()
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name='__main__')
    finally:
        print(f'PEAK MiB {peak[0]}')
        print(peak[1])
