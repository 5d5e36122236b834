"""The query writers' batches and checkpoint: after each batch, the queries written so far and
the state of their random stream, so that a stopped write resumes to what one uninterrupted
write returns (:func:`written_batches`).
"""
import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import torch

from pyterrier_selfsup._cache import written_whole
from pyterrier_selfsup.progress import progress

logger = logging.getLogger(__name__)


def checkpoint_key(ids: list[list[int]], n: int, config: dict, model: str,
                    generator: torch.Generator | None, **settings) -> str:
    """What a checkpoint of :meth:`QueryWriter.write` is valid for: the prompts, the number
    of queries, the writer's settings, the model's fingerprint, and the random stream's state
    when the call began."""
    digest = hashlib.sha1()
    if generator is not None:
        digest.update(generator.get_state().numpy().tobytes())
    digest.update(json.dumps([ids, n, config, model, settings], sort_keys=True,
                             default=str).encode())
    return digest.hexdigest()


def resume(path: Path, key: str, out: list[list[str] | None],
            generator: torch.Generator | None) -> int:
    """The passages (in writing order) that the checkpoint at ``path`` holds queries for, put into
    ``out``, with ``generator`` put back in its state; 0 where there is no checkpoint, or one of
    another write (reported)."""
    if not path.exists():
        return 0
    try:
        held = torch.load(path, weights_only=True)
        valid = held['key'] == key and len(held['out']) == len(out)
    except Exception as error:  # (a file cut short by a full disk, say: written again)
        said = (str(error) or type(error).__name__).splitlines()[0][:200]
        logger.warning('%s does not load (%s); writing the queries from the start', path, said)
        return 0
    if not valid:
        logger.warning('%s holds queries of another write; writing from the start', path)
        return 0
    out[:] = held['out']
    if generator is not None:
        generator.set_state(held['rng'])
    logger.info('%s: resuming after %d of %d passages', path, held['done'], len(out))
    return held['done']


def save_checkpoint(path: Path, key: str, done: int, out: list[list[str] | None],
                     generator: torch.Generator | None) -> None:
    """The write's state after ``done`` passages (in writing order), replaced at once (a
    stop while it is saved leaves the one before; the next save replaces its partial file)."""
    with written_whole(path, "the query writer's checkpoint") as partial:
        torch.save({'key': key, 'done': done, 'out': out,
                    'rng': generator.get_state() if generator is not None else None}, partial)


def resume_write(checkpoint: Path | None, out: list[list[str] | None], ids: list[list[int]],
                 n: int, config: dict, model: str, generator: torch.Generator | None, *,
                 do_sample: bool, **settings) -> tuple[int, str | None]:
    """Where a write with ``checkpoint`` begins: the passages (in writing order) the file holds
    queries for, put into ``out``, and the checkpoint's key (:func:`checkpoint_key`); 0 and None
    without a checkpoint. A sampled write checkpoints only with a random stream of its own."""
    if checkpoint is None:
        return 0, None
    if do_sample and generator is None:
        raise ValueError('a checkpointed write samples from a generator of its own '
                         '(generator=torch.Generator().manual_seed(...))')
    key = checkpoint_key(ids, n, config, model, generator, do_sample=do_sample, **settings)
    return resume(Path(checkpoint), key, out, generator), key


def written_batches(writer, ids: list[list[int]], out: list[list[str] | None], n: int,
                    checkpoint: Path | None, generator: torch.Generator | None, **settings):
    """The batches of passages (indices into ``ids``, the longest first: little padding a
    batch) that a write of ``writer`` has still to write, resumed from ``checkpoint``
    (:func:`resume_write`, with ``settings``), which is saved after the caller has filled ``out``
    for each batch."""
    order = np.argsort([-len(x) for x in ids], kind='stable')
    begin, key = resume_write(checkpoint, out, ids, n, writer.config(),
                              writer.generator.fingerprint(), generator, **settings)
    size = writer.batch_size

    def batches():  # (resumed above, at the call: a bad checkpoint is refused before any work)
        for start in progress(range(begin, len(order), size), total=len(order),
                              desc='writing queries', unit='passage', initial=begin,
                              count=lambda start: len(order[start:start + size]),
                              enabled=writer.generator.verbose and len(order) > size):
            idx = order[start:start + size]
            yield idx
            if checkpoint is not None:
                save_checkpoint(Path(checkpoint), key, start + len(idx), out, generator)
    return batches()
