"""Label-free distillation on several processes: torchrun starts them,
the loop sums their gradients.

    torchrun --nproc_per_node 2 examples/distill_data_parallel.py [collection] [output_dir] [N]
    python examples/distill_data_parallel.py [collection] [output_dir] [N]
        (one process: the same result; N corpus sentences to train on, default 256)

Every process walks the same global batches of corpus sentences; the teacher's rankings are
split over the processes and gathered; each computes the loss of its share of each batch's
queries (against all of the batch's candidates), and the loop
all-reduces the gradients before each step, so the model is the one a single process
trains, up to floating-point noise and dropout. Rank 0 writes the checkpoints and the log.
`selfsup.join_process_group` picks nccl with a GPU a process (``LOCAL_RANK``), gloo on CPUs.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import pyterrier_selfsup as selfsup
from pyterrier_selfsup.data.queries.cut import corpus_sentences
from pyterrier_selfsup.training.distill import Distillation

collection = selfsup.Collection(sys.argv[1] if len(sys.argv) > 1 else 'classic/adi')
output_dir = sys.argv[2] if len(sys.argv) > 2 else 'runs/distill-data-parallel'
sentences = int(sys.argv[3]) if len(sys.argv) > 3 else 256
world_size = int(os.environ.get('WORLD_SIZE', 1))
selfsup.join_process_group()  # under torchrun: nccl with a GPU a process, gloo on CPUs (None alone)

torch.manual_seed(0)
# built once: a lock makes the others wait
bm25 = selfsup.BM25.from_collection(collection, num_results=100)
trainer = Distillation(selfsup.DualEncoder.from_pretrained(selfsup.MINILM), collection,
                       teacher=lambda student: selfsup.Fusion({'bm25': bm25, 'student': student}),
                       queries='sentences', rounds=2, output_dir=output_dir,
                       checkpoint_every='epoch', verbose=False)
started = time.time()
trainer.fit(corpus_sentences(collection, sentences, seed=0))  # no labels are read
if trainer.process_rank == 0:
    steps = [r for r in trainer.log if 'loss' in r]
    print(f'{world_size} process(es): {len(steps)} steps in {time.time() - started:.0f} s; '
          f'loss {steps[0]["loss"]:.4f} -> {steps[-1]["loss"]:.4f}; model in {output_dir}/final')
if world_size > 1:
    dist.destroy_process_group()
