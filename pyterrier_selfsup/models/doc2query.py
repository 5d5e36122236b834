"""Queries written by a seq2seq doc2query model: the passage in, a query out, no prompt (GPL's
``BeIR/query-gen-msmarco-t5-base-v1``, the ``doc2query/msmarco-t5-base-v1`` family). Each batch
is seeded from the writer's random stream, so that a stopped write resumes to the same queries.

    writer = load_generator('BeIR/query-gen-msmarco-t5-base-v1').writer()
    writer.write(['Scurvy is caused by a lack of vitamin C.'], n=3, do_sample=True, top_p=0.95)
"""
from collections.abc import Sequence
from pathlib import Path

import torch

from pyterrier_selfsup.models.batching import pad
from pyterrier_selfsup.models.prompts import first_line
from pyterrier_selfsup.models.writer_checkpoint import written_batches


class Doc2QueryWriter:
    """Queries for passages from a seq2seq ``generator``, read as doc2query models are trained:
    the passage alone.

    Args:
        style: ``plain`` only.
        examples, pairs: none.
        batch_size: passages a ``generate`` call (each written ``n`` times).
        seed: unused (the draws come from the ``generator`` :meth:`write` is given).
    """

    def __init__(self, generator, *, style: str = 'plain', examples: Sequence[str] = (),
                 pairs: Sequence[tuple[str, str]] = (), batch_size: int = 16, seed: int = 0):
        if not generator.is_seq2seq:
            raise ValueError('Doc2QueryWriter writes with seq2seq models; a decoder-only model '
                             'writes through QueryWriter')
        if style != 'plain' or examples or pairs:
            raise ValueError('a doc2query model reads the passage alone: no chat style, example '
                             'queries or example pairs (query_style=plain, and no query_examples '
                             'or example_pairs)')
        self.generator, self.batch_size = generator, batch_size

    def config(self) -> dict:
        """What the queries depend on besides the model (keys the written queries)."""
        return {'kind': 'doc2query', 'max_passage_length': self.generator.max_passage_length,
                'batch_size': self.batch_size}

    def write(self, passages: Sequence[str], n: int = 1, *, do_sample: bool = False,
              temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
              max_new_tokens: int = 32, generator: torch.Generator | None = None,
              checkpoint: Path | None = None) -> list[list[str]]:
        """``n`` queries for each passage (greedy: ``n`` copies of one), each the first line of its
        generation. Sampling draws, a batch at a time, from a seed drawn from ``generator``;
        ``top_k`` None: the model's. ``checkpoint``: as
        :meth:`~pyterrier_selfsup.models.writing.QueryWriter.write`'s."""
        ids = self.generator.passage_ids(passages)
        out: list[list[str] | None] = [None] * len(ids)
        sampling = dict(do_sample=True, temperature=temperature, top_p=top_p,
                        **({'top_k': top_k} if top_k is not None else {})) if do_sample else {}
        pad_id = self.generator.tokenizer.pad_token_id
        with self.generator.inference():
            for idx in written_batches(self, ids, out, n, checkpoint, generator,
                                       do_sample=do_sample, temperature=temperature, top_p=top_p,
                                       top_k=top_k, max_new_tokens=max_new_tokens):
                input_ids, mask = pad([ids[i] for i in idx], pad_id, device=self.generator.device)
                seed = int(torch.randint(2 ** 31, (1,), generator=generator))
                with torch.random.fork_rng():  # (generate draws from the global streams)
                    torch.manual_seed(seed)
                    tokens = self.generator.model.generate(
                        input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                        num_return_sequences=n if do_sample else 1, pad_token_id=pad_id,
                        **sampling)
                texts = self.generator.tokenizer.batch_decode(tokens, skip_special_tokens=True)
                each = n if do_sample else 1
                for j, i in enumerate(idx):
                    written = [first_line(t) for t in texts[j * each:(j + 1) * each]]
                    out[i] = written if do_sample else written * n
        return out
