"""Which dtype matrix products run in: one rule for every model in the package."""
import torch

PRECISIONS = ('auto', 'fp32', 'bf16', 'fp16')


def compute_dtype(precision: str, device: torch.device) -> torch.dtype:
    """``'fp32'``, ``'bf16'``, ``'fp16'``, or ``'auto'``: bf16 where the hardware multiplies
    bf16 natively (CUDA, or a CPU with AVX512-BF16/AMX; fp16 on older GPUs), fp32 elsewhere."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, not {precision!r}')
    if precision == 'auto':
        if device.type == 'cuda':
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == 'cpu' and cpu_has_native_bf16() else torch.float32
    return {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}[precision]


def autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix products at 2-3x the fp32 rate (measured on an EPYC
    with AVX512-BF16: 421 vs 154 GFLOP/s, experiments/results/encoding_benchmark.md); without
    them bf16 is emulated and slower than fp32."""
    try:
        with open('/proc/cpuinfo') as fh:
            flags = next((line for line in fh if line.startswith('flags')), '').split()
    except OSError:
        return False
    return 'avx512_bf16' in flags or 'amx_bf16' in flags
