"""How long stages say where they are: bars on a terminal, plain lines off one.

Every long stage of the package reports through :func:`progress`. Where that goes is one
setting of the process, :func:`set_progress` (or ``SELFSUP_PROGRESS``):

- ``'auto'`` (the default): bars where stderr is a terminal, lines where it is not;
- ``'bars'``: PyTerrier's tqdm bars wherever stderr goes;
- ``'lines'``: a plain line at most every ``interval`` seconds (``SELFSUP_PROGRESS_SECONDS``)
  with done/total, the rate, the time spent and the time left, and one when the stage ends;
  a timer thread says a line where a stage has been silent for ``interval`` seconds;
- ``'off'``: nothing.

A stage's own ``verbose=False`` silences it whatever the mode. Lines go to the
``pyterrier_selfsup.progress`` logger where it shows INFO records, to stderr otherwise.

Each stage is also added up by name when it ends (:func:`stage_times`); one inside another
counts on its own and its time is taken off the outer one's
(:mod:`~pyterrier_selfsup.harness.plan` learns its estimates from them).
"""
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MODES = ('auto', 'bars', 'lines', 'off')
INTERVAL = 30.0  # seconds, the default fewest between two lines


def _from_environment() -> dict:
    """The settings ``SELFSUP_PROGRESS`` and ``SELFSUP_PROGRESS_SECONDS`` ask for; one not
    understood is warned of and left at its default."""
    mode, interval = (os.environ.get('SELFSUP_PROGRESS', 'auto'),
                      os.environ.get('SELFSUP_PROGRESS_SECONDS'))
    if mode not in MODES:
        logger.warning('SELFSUP_PROGRESS=%s is none of %s: progress is shown as for auto',
                       mode, ', '.join(MODES))
        mode = 'auto'
    try:
        seconds = INTERVAL if interval is None else float(interval)
    except ValueError:
        logger.warning('SELFSUP_PROGRESS_SECONDS=%s is not a number of seconds: %.0f it is',
                       interval, INTERVAL)
        seconds = INTERVAL
    return {'mode': mode, 'interval': seconds}


_settings = _from_environment()


def set_progress(mode: str = 'auto', interval: float | None = None):
    """Where this process's stages report: ``'auto'``, ``'bars'``, ``'lines'`` or ``'off'``;
    ``interval``: the fewest seconds between two lines."""
    if mode not in MODES:
        raise ValueError(f'progress mode must be one of {MODES}, not {mode!r}')
    _settings['mode'] = mode
    if interval is not None:
        _settings['interval'] = float(interval)


def progress_mode(stream=None) -> str:
    """The mode in effect for ``stream`` (default: stderr), ``'auto'`` resolved (bars on a
    terminal or in a notebook)."""
    mode = _settings['mode']
    if mode == 'auto':
        stream = stream or sys.stderr
        terminal = getattr(stream, 'isatty', lambda: False)()
        return 'bars' if terminal or 'ipykernel' in sys.modules else 'lines'
    return mode


PEAK_STEP = 10 / 1024  # GiB: the least rise of the peak resident memory that a stage is said to set


@dataclass
class Stage:
    """One stage that ended: what it did, how much, in how long; ``peak_gib``: the process's
    peak resident memory at its end where the stage raised it by :data:`PEAK_STEP` or more."""
    desc: str
    done: float
    total: float | None
    unit: str
    seconds: float
    peak_gib: float | None = None

    @property
    def rate(self) -> float | None:
        return self.done / self.seconds if self.seconds > 0 and self.done else None


# by name, each run of a stage added (bounded by the names, not the work)
_totals: dict[str, Stage] = {}
_open: list = []  # the stages under way, oldest first


def _add(done: Stage):
    was = _totals.get(done.desc)
    _totals[done.desc] = done if was is None else Stage(
        done.desc, was.done + done.done, None, done.unit, was.seconds + done.seconds,
        max((p for p in (was.peak_gib, done.peak_gib) if p is not None), default=None))


def stage_times(since: dict[str, Stage] | None = None) -> dict[str, Stage]:
    """What each stage of this process did and took, by name, every run of it added up;
    ``since``: an earlier return of this function, whose part is taken off."""
    out = {}
    for desc, now in _totals.items():
        was = (since or {}).get(desc)
        if was is None:
            out[desc] = now
        elif now.seconds > was.seconds or now.done > was.done:
            raised = now.peak_gib if now.peak_gib != was.peak_gib else None
            out[desc] = Stage(desc, now.done - was.done, None, now.unit,
                              now.seconds - was.seconds, raised)
    return out


def rate_text(done: float, seconds: float, unit: str) -> str:
    """``41.2 passages/s``, or ``2.3 s/step`` below one a second; empty with nothing done."""
    if done <= 0 or seconds <= 0:
        return ''
    per_second = done / seconds
    return (f'{per_second:,.1f} {plural(unit)}/s' if per_second >= 1
            else f'{1 / per_second:,.1f} s/{unit}')


def resident_gib() -> float | None:
    """This process's resident memory now, in GiB (``/proc/self/statm``; None elsewhere)."""
    try:
        with open('/proc/self/statm') as statm:
            return int(statm.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2 ** 30
    except (OSError, ValueError, IndexError):
        return None


def peak_resident_gib() -> float | None:
    """This process's peak resident memory so far, in GiB (``VmHWM``; None off Linux). Not
    ``ru_maxrss``, which carries the peak of the process that started this one."""
    try:
        with open('/proc/self/status') as status:
            kib = next(line.split()[1] for line in status if line.startswith('VmHWM:'))
        return int(kib) / 2 ** 20
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def plural(unit: str) -> str:
    """query: queries, batch: batches, doc: docs."""
    if unit.endswith('y') and unit[-2:-1] not in tuple('aeiou'):
        return unit[:-1] + 'ies'
    return unit + ('es' if unit.endswith(('s', 'x', 'ch', 'sh')) else 's')


def progress(iterable: Iterable | None = None, *, total: float | None = None, desc: str,
             unit: str = 'item', count: Callable[[object], float] | None = None,
             initial: float = 0, enabled: bool = True, file=None):
    """``iterable`` reported on as it is consumed (or, without one, an object with tqdm's
    ``update``, ``set_postfix`` and ``close``). ``count``: how many ``unit`` one element is
    worth, else 1; ``total`` in those units (default: ``len(iterable)``); ``file``: where the
    output goes."""
    if total is None and iterable is not None and hasattr(iterable, '__len__'):
        total = len(iterable) if count is None else None
    if iterable is None:
        return Progress(total=total, desc=desc, unit=unit, initial=initial, shown=enabled,
                        file=file)
    return _wrapped(iterable, count, dict(total=total, desc=desc, unit=unit, initial=initial,
                                          shown=enabled, file=file))


def _wrapped(iterable: Iterable, count: Callable[[object], float] | None,
             settings: dict) -> Iterator:
    """``iterable`` with a stage that starts at its first element and ends when it is
    exhausted or dropped."""
    tracker = Progress(**settings)
    try:
        yield from tracker.counting(iterable, count)
    finally:
        tracker.close()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f'{h}:{m:02d}:{s:02d}' if h else f'{m}:{s:02d}'


def _amount(n: float) -> str:
    return f'{n:,.0f}' if float(n).is_integer() else f'{n:,.1f}'


def counted(n: float, unit: str) -> str:
    """``1 step``, ``5 steps``, ``1,460 docs``."""
    return f'{_amount(n)} {unit if n == 1 else plural(unit)}'


class Progress:
    """A stage's progress: a tqdm bar, plain lines, or nothing shown; recorded when closed."""

    def __init__(self, *, total: float | None, desc: str, unit: str, initial: float = 0,
                 shown: bool = True, file=None):
        self.total, self.desc, self.unit, self.file = total, desc, unit, file
        self.done = self.initial = initial
        self.start = self.last_line = time.monotonic()
        self.peak_at_start = peak_resident_gib() if shown else None
        self.postfix = ''
        self.said = False  # whether a line has been shown
        self.shown = shown
        self.inner_seconds = 0.0  # of the stages inside this one that are recorded on their own
        self.first = None  # (when, done) at the first update: what the time left is reckoned from
        _open.append(self)
        self.closed = False
        mode = progress_mode(file) if shown else 'off'
        self.lines = mode == 'lines'
        self.bar = None
        if mode == 'bars':
            import pyterrier as pt
            self.bar = pt.tqdm(total=total, initial=initial, desc=desc, unit=unit, file=file)
        if mode != 'off':
            _heartbeat()

    def update(self, n: float = 1):
        self.done += n
        if self.first is None:
            self.first = (time.monotonic(), self.done)
        if self.bar is not None:
            self.bar.update(n)
        elif self.lines and time.monotonic() - self.last_line >= _settings['interval']:
            self._say(self._line())

    def counting(self, iterable: Iterable,
                 count: Callable[[object], float] | None = None) -> Iterator:
        """``iterable``, each element counted as it is taken, the stage left open for its caller
        to close (``with progress(...) as stage``)."""
        for item in iterable:
            yield item
            self.update(1 if count is None else count(item))

    def set_postfix(self, **values):
        self.postfix = ', '.join(f'{k} {v}' for k, v in values.items())
        if self.bar is not None:
            self.bar.set_postfix(**values)

    def close(self):
        if self.closed:
            return
        self.closed = True
        seconds = time.monotonic() - self.start
        if self.bar is not None:
            self.bar.close()
        elif self.lines and (self.said or
                             seconds >= _settings['interval']):  # (a short stage: no line)
            rate = self._rate(self.done - self.initial, seconds - self.inner_seconds)
            self._say(f'{self.desc}: {counted(self.done - self.initial, self.unit)} in '
                      f'{_duration(seconds)}' + (f' ({rate})' if rate else '')
                      + (f', resumed after {_amount(self.initial)}' if self.initial else '')
                      + (f', {self.postfix}' if self.postfix else ''))
        if self in _open:
            _open.remove(self)
        # a stage not shown is no stage of its own; one shown inside another is, and its time
        # is taken off the outer one's
        outer = next((o for o in reversed(_open) if o.shown and o.start <= self.start), None)
        if self.shown:
            peak = peak_resident_gib()
            raised = peak if peak is not None and self.peak_at_start is not None and \
                peak - self.peak_at_start >= PEAK_STEP else None
            _add(Stage(self.desc, self.done - self.initial, self.total, self.unit,
                       seconds - self.inner_seconds, raised))
            if outer is not None:
                outer.inner_seconds += seconds

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _rate(self, done: float, seconds: float) -> str:
        return rate_text(done, seconds, self.unit)

    def _line(self) -> str:
        elapsed = time.monotonic() - self.start
        own = elapsed - self.inner_seconds
        done = self.done - self.initial
        parts = [f'{_amount(self.done)}/{_amount(self.total)} {plural(self.unit)} '
                 f'({100 * self.done / self.total:.0f}%)'
                 if self.total else counted(self.done, self.unit)]
        rate = self._rate(done, own)
        if rate:
            parts.append(rate)
        parts.append(f'{_duration(elapsed)} elapsed')
        if self.total and done > 0:
            # (never below nothing: two processes that scored the same pairs count them twice)
            parts.append(
                f'{_duration(max(0.0, self.total - self.done) * self._seconds_a_unit(own / done))}'
                ' left')
        if self.postfix:
            parts.append(self.postfix)
        return f'{self.desc}: ' + ', '.join(parts)

    def _seconds_a_unit(self, own: float) -> float:
        """For the time left: the time a unit has taken since the first was done, recurring inner
        stages included; ``own`` until a second one is done."""
        at, done = self.first
        return (time.monotonic() - at) / (self.done - done) if self.done > done else own

    def beat(self, now: float):
        """From the timer thread: a line where ``interval`` seconds passed since the last one, or
        a bar redrawn."""
        if self.closed:
            return
        if self.bar is not None:
            self.bar.refresh()
        elif self.lines and now - self.last_line >= _settings['interval']:
            self._say(self._line())

    def _say(self, line: str):
        self.last_line = time.monotonic()
        self.said = True
        if self.file is None and logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(line)
        else:
            print(line, file=self.file or sys.stderr, flush=True)


_beating: dict[int, threading.Thread] = {}  # the timer thread, by the process it runs in
_beating_lock = threading.Lock()
_sleep = time.sleep  # (the real one: a test may stand a clock of its own in for the module's)


def _heartbeat():
    """Starts the timer thread (once a process) that asks the innermost shown stage to
    :meth:`Progress.beat` each second."""
    with _beating_lock:  # (a forked process inherits the dict, not the thread: keyed by pid)
        if os.getpid() in _beating:
            return
        thread = threading.Thread(target=_beat, name='selfsup-progress', daemon=True)
        _beating[os.getpid()] = thread
        thread.start()


def _beat():
    while True:
        _sleep(1.0)
        shown = [stage for stage in list(_open) if stage.shown and not stage.closed]
        if shown and _settings.get('heartbeat', True):
            try:
                shown[-1].beat(time.monotonic())
            except Exception:  # (a stream closed under it: the stage's own updates go on)
                pass

