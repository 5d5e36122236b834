"""Where a script's resident memory grows: a line each time it passes a new high (in steps of
100 MiB), with the innermost frames of this package and the examples at that moment.

    SELFSUP_CACHE=$(mktemp -d) python experiments/probes/memory_timeline.py examples/distillation.py [its arguments]

prints "TL <seconds> <MiB> <frames>" lines on stderr, then "TL peak <MiB>". Where
experiments/benchmarks/peak_memory.py names the one call at the peak, this shows what came before it:
which stage took the memory and whether it creeps up from step to step (issue 32; lines kept
in experiments/results/memory_timeline.md).
"""
import runpy
import sys
import threading
import time
import traceback

MAIN = threading.main_thread().ident
STEP = 100  # MiB: a line each time the resident set passes its last high by this much
started = time.time()
high = [0]


def resident_mib() -> int:
    # (not progress.resident_gib: importing the package here would put its import before the start)
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith('VmRSS'))


def watch():
    while True:
        now = resident_mib()
        if now > high[0] + STEP:
            high[0] = now
            frame = sys._current_frames().get(MAIN)
            frames = [f for f in traceback.extract_stack(frame)
                      if 'pyterrier_selfsup' in f.filename or 'examples' in f.filename] if frame else []
            where = ' < '.join(f'{f.filename.split("/")[-1]}:{f.lineno} {f.name}' for f in frames[::-1][:4])
            print(f'TL {time.time() - started:6.1f}s {now:6d} MiB  {where}', file=sys.stderr, flush=True)
        time.sleep(0.1)


if __name__ == '__main__':
    threading.Thread(target=watch, daemon=True).start()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name='__main__')
    print(f'TL peak {high[0]}', file=sys.stderr)
