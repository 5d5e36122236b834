"""What this machine's CPU can do, read once from ``/proc/cpuinfo``: the one place the package
probes the hardware it runs on.

    cpu_has_native_bf16()   # True on a CPU with AVX512-BF16 or AMX

``$SELFSUP_CPU_FLAGS`` (flags, space-separated) stands in for the CPU's own flags, so that the
package chooses as it would on another kind of CPU (with ``SELFSUP_CPU_FLAGS=avx2``: fp32
where it would choose bf16).
"""
import os
import platform
from functools import cache

FLAGS_ENV = 'SELFSUP_CPU_FLAGS'

# the instruction sets that decide CPU speed here (bf16 is emulated with AVX2 only)
SPEED_FLAGS = ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile')


@cache
def _cpuinfo() -> dict:
    """The first processor's fields in ``/proc/cpuinfo`` (empty off Linux)."""
    fields = {}
    try:
        with open('/proc/cpuinfo') as fh:
            for line in fh:
                if not line.strip():
                    break
                name, _, value = line.partition(':')
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags() -> frozenset:
    """The CPU's feature flags (empty off Linux), or those ``$SELFSUP_CPU_FLAGS`` names."""
    if os.environ.get(FLAGS_ENV) is not None:
        return frozenset(os.environ[FLAGS_ENV].split())
    return frozenset(_cpuinfo().get('flags', '').split())


def cpu_model() -> str:
    """The CPU's model name, or what the platform says where ``/proc/cpuinfo`` has none."""
    return _cpuinfo().get('model name') or platform.processor() or platform.machine()


def speed_flags() -> str:
    """Which of :data:`SPEED_FLAGS` the CPU has ('unknown' off Linux), for results headers."""
    flags = cpu_flags()
    if not flags:
        return 'unknown'
    named = ' '.join(f for f in SPEED_FLAGS if f in flags) or 'none of ' + ' '.join(SPEED_FLAGS)
    return f'{named}, as ${FLAGS_ENV} says' if os.environ.get(FLAGS_ENV) is not None else named


def cpu_has_native_bf16() -> bool:
    """Whether the CPU has AVX512-BF16 or AMX; without them bf16 is emulated."""
    return bool(cpu_flags() & {'avx512_bf16', 'amx_bf16'})


def cpu_has_native_int8() -> bool:
    """Whether the CPU multiplies int8 into 32-bit sums in one instruction (VNNI or AMX);
    without them oneDNN's int8 products can saturate."""
    return bool(cpu_flags() & {'avx512_vnni', 'avx_vnni', 'amx_int8'})
