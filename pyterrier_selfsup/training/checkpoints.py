"""Checkpoints of a :class:`~pyterrier_selfsup.training.loop.Trainer`, whole or not at all, and
the exact resume from the last one: the model, what the method saves beside it, the
optimiser, the scheduler, the random states and the training log.

Not accelerate's ``load_accelerator_state``, which goes on past random states that do not
load: here such a checkpoint is an error, and a checkpoint is written into place whole (its
files' sizes recorded last, and checked when it is read back).

    trainer.fit(topics, resume_from=resume_point(trainer.output_dir))
"""
import json
import logging
import os
import random
import shutil
from pathlib import Path

import pandas as pd
import torch

from pyterrier_selfsup._cache import disk_faults, file_sizes, size_damage, written_whole

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = 'trainer_state.pt'
CHECKPOINT_MANIFEST = 'checkpoint.json'  # every file's size, written last


def checkpoints(output_dir: str | Path) -> list[Path]:
    """The whole step checkpoints under ``output_dir``, oldest first."""
    found = [p for p in Path(output_dir).glob('checkpoint-*')
             if p.name.split('-', 1)[1].isdigit() and (p / TRAINER_STATE_FILE).is_file()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: str | Path) -> int:
    """The step a checkpoint was written after (``checkpoint-625``: 625)."""
    return int(Path(path).name.split('-', 1)[1])


def resume_point(output_dir: str | Path) -> Path | None:
    """The last whole, undamaged checkpoint (None: start over)."""
    return next((c for c in reversed(checkpoints(output_dir))
                 if checkpoint_damage(c) is None), None)


def checkpoint_damage(path: Path) -> str | None:
    """A checkpoint's files against the sizes recorded when it was written, or None where they
    are whole."""
    try:
        sizes = json.loads((path / CHECKPOINT_MANIFEST).read_text())['files']
    except FileNotFoundError:
        return f'{CHECKPOINT_MANIFEST} is missing (the write stopped before its end)'
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f'{CHECKPOINT_MANIFEST} cannot be read ({error})'
    return size_damage(path, sizes)


def fit_resumably(trainer, topics: pd.DataFrame):
    """``trainer.fit(topics)``, continuing from the last undamaged checkpoint in
    ``trainer.output_dir``; then :func:`keep_final_only`."""
    done = checkpoints(trainer.output_dir)
    while done and (problem := checkpoint_damage(done[-1])) is not None:
        # a damaged checkpoint is set aside, and training resumes from the one before
        aside = done[-1].with_name(done[-1].name + '.damaged')
        logger.warning('checkpoint %s is damaged (%s); %s; resuming from %s', done[-1], problem,
                       f'setting it aside as {aside}', done[-2] if len(done) > 1 else 'the start')
        if trainer.process_rank == 0:
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(done[-1], aside)
        done = done[:-1]
    if done:
        logger.info('resuming from %s', done[-1])
    trainer.fit(topics, resume_from=done[-1] if done else None)
    if trainer.process_rank == 0:  # (under torch.distributed, rank 0 alone writes)
        keep_final_only(trainer.output_dir)
    return trainer


def keep_final_only(output_dir: str | Path):
    """Removes what only a resumed run needs once training is over: the step checkpoints and
    the final model's optimiser state."""
    for checkpoint in checkpoints(output_dir):
        shutil.rmtree(checkpoint)
    (Path(output_dir) / 'final' / TRAINER_STATE_FILE).unlink(missing_ok=True)


def write_checkpoint(trainer, optimizer, scheduler, final: bool = False):
    """Writes ``trainer``'s checkpoint at its step (``final``: its ``final/`` model), whole or
    not at all, and removes the step checkpoints its run context does not keep."""
    path = trainer.output_dir / ('final' if final else f'checkpoint-{trainer.state["step"]}')

    def fate() -> str:  # (asked only when the write failed)
        earlier = [p for p in checkpoints(trainer.output_dir) if p != path]
        return ('it was removed; the next run '
                f'{f"resumes from {earlier[-1]}" if earlier else "starts over"}')

    # never half a checkpoint to resume from: a failed write removes it
    with disk_faults(f'the checkpoint at step {trainer.state["step"]}', path, fate=fate,
                     undo=lambda: shutil.rmtree(path, ignore_errors=True)):
        trainer.model.save_pretrained(path)
        trainer.save_extra(path)
        # the manifest of every file's size, written last: a checkpoint with it is whole
        torch.save({'state': trainer.state, 'optimizer': optimizer.state_dict(),
                    'scheduler': scheduler.state_dict(), 'log': trainer.log,
                    'torch_rng': torch.get_rng_state(), 'python_rng': random.getstate(),
                    # (dropout on a GPU draws from the CUDA generators)
                    **({'cuda_rng': torch.cuda.get_rng_state_all()}
                       if torch.cuda.is_initialized() else {})},
                   path / (TRAINER_STATE_FILE + '.tmp'))
        os.replace(path / (TRAINER_STATE_FILE + '.tmp'), path / TRAINER_STATE_FILE)
        with written_whole(path / CHECKPOINT_MANIFEST, 'a checkpoint') as partial:
            partial.write_text(json.dumps({'files': file_sizes(path, CHECKPOINT_MANIFEST)}))
    logger.info('checkpoint %s', path)
    if not final and trainer.run.keep_checkpoints is not None:
        written = checkpoints(trainer.output_dir)
        for old in written[:max(0, len(written) - trainer.run.keep_checkpoints)]:
            shutil.rmtree(old)


def restore_checkpoint(trainer, path: Path, optimizer, scheduler) -> dict:
    """Puts ``trainer``, ``optimizer``, ``scheduler`` and the random states back as the
    checkpoint at ``path`` holds them, and returns the loop's state."""
    saved = torch.load(path / TRAINER_STATE_FILE, map_location='cpu', weights_only=False)
    trainer.model.load_weights(path)
    trainer.load_extra(path)
    optimizer.load_state_dict(saved['optimizer'])
    scheduler.load_state_dict(saved['scheduler'])
    torch.set_rng_state(saved['torch_rng'])
    random.setstate(saved['python_rng'])
    if ('cuda_rng' in saved and torch.cuda.is_available() and
            torch.cuda.device_count() == len(saved['cuda_rng'])):
        torch.cuda.set_rng_state_all(saved['cuda_rng'])
    trainer.log = list(saved['log'])
    return dict(saved['state'])


def write_log(trainer):
    """Writes ``trainer``'s training log (JSON lines) and, where its run draws one, its curve."""
    trainer.output_dir.mkdir(parents=True, exist_ok=True)
    with written_whole(trainer.output_dir / 'training_log.jsonl', 'the training log') as partial:
        partial.write_text(''.join(json.dumps(r) + '\n' for r in trainer.log))
    if trainer.run.draw_curve is not None:
        with written_whole(trainer.output_dir / 'training_curve.png',
                           'the training curve') as partial:
            trainer.run.draw_curve(trainer.log, partial, title=trainer.title(), key=trainer.curve,
                                ylabel=trainer.curve_label, marker=trainer.marker)
