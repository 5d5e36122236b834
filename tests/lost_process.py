"""A process of tests/test_distill.py's lost-process test, as torchrun starts it:

    python -m torch.distributed.run --nproc_per_node 2 -m tests.lost_process
        TINY CACHE OUT KILL_AT KILLED

BM25 distilled into the tiny encoder on ADI (test_distill's ``_distil_fixed_teacher``), resumed
from the last checkpoint in OUT; with KILL_AT > 0 the process of rank 1 kills itself (SIGKILL) in
its KILL_AT-th loss, having written the time to the file KILLED.
"""
import sys

import torch.distributed as dist

from pyterrier_selfsup._distributed import join_process_group
from tests.test_distill import _distil_fixed_teacher

if __name__ == '__main__':
    tiny_dir, cache_dir, output_dir, kill_at = sys.argv[1:5]
    join_process_group()  # (gloo, a core each, and the watch over the group)
    try:
        _distil_fixed_teacher(tiny_dir, cache_dir, output_dir, 'kl', False, kill_at=int(kill_at),
                              killed=sys.argv[5] if len(sys.argv) > 5 else '')
    finally:
        dist.destroy_process_group()  # (gloo's threads ended before the interpreter's)
