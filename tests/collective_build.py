"""The ranks of test_faults.py's collective build, in a module of their own: a spawned rank
imports the module its function lives in, and this one imports only what a rank runs (not the
models and indexes that test_faults.py imports for its other tests)."""
import errno
from pathlib import Path

from pyterrier_selfsup._cache import build_once


def collective_rank(rank: int, store: str, cache: str, fail: bool, out: str):
    """One process of test_a_collective_build_that_fails_on_one_rank_fails_on_every_rank."""
    from datetime import timedelta

    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))

    def build(staging: Path):
        if rank == 0:
            staging.mkdir(exist_ok=True)
        # (the builds of the ranks meet: the one that fails must not leave the other here)
        dist.barrier()
        (staging / f'rank-{rank}').write_text('vectors')
        if fail and rank == 1:
            raise OSError(errno.ENOSPC, 'No space left on device', str(staging / 'rank-1'))

    try:
        build_once(Path(cache) / 'model', build, what='the test model', collective=True,
                   resumable=True)
        result = 'built ' + ' '.join(sorted(p.name for p in (Path(cache) / 'model').iterdir()))
    except Exception as error:
        result = f'{type(error).__name__}: {error}'
    Path(f'{out}-{rank}').write_text(result)
    dist.destroy_process_group()
