"""This process's place among several under torch.distributed (torchrun), in one place.

Every layer that behaves differently on several processes asks :func:`distributed`: the
cache (a collective build), the dense index (a sharded refresh), the training loop (its
share of each batch). :func:`join_process_group` is what a launched process calls first.
"""
import os
from typing import Optional, Tuple


def distributed() -> Tuple[int, int]:
    """(rank, world size) of this process under torch.distributed, (0, 1) outside it."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def join_process_group() -> Optional[int]:
    """Under torchrun (``WORLD_SIZE`` > 1): this process joins the group, nccl with a GPU a
    process where there are GPUs (``LOCAL_RANK``'s), gloo otherwise with the cores split
    between the node's processes; returns its rank. None in a process of its own."""
    if int(os.environ.get('WORLD_SIZE', '1')) <= 1:
        return None
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', '0')))
        else:
            local = int(os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE']))
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local))
        dist.init_process_group('nccl' if cuda else 'gloo')
    return dist.get_rank()
