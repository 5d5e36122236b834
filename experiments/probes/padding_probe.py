"""Would padding bound the kernel caches without changing the numbers? (issue 32)

PyTorch's CPU kernel caches keep a kernel per tensor shape (``experiments/probes/kernel_caches.py``);
padding every sequence to one of a few lengths would bound them too. This checks whether it
changes the outputs: ACROBArT's biased log-likelihood (SmolLM2, 4 ADI topics, 3 passages each,
128 tokens a passage, as the example reads them) and its gradient towards the bias, as the code
computes them and with 37 more positions of left padding (masked, their bias 0).

    python experiments/probes/padding_probe.py
writes experiments/results/padding_probe.md.
"""
import json
from pathlib import Path

import torch

import pyterrier_selfsup as selfsup
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models import generator as G
from pyterrier_selfsup.models import reading as R

RESULTS = Path(__file__).resolve().parents[2] / 'experiments' / 'results'
EXTRA = 37


def padded_left(extra):
    """``G.pad`` and ``R.concatenated_prompts`` with ``extra`` more masked positions on the left."""
    pad, prompts = G.pad, R.concatenated_prompts

    def more_pad(seqs, pad_id, left=False, device=None, **kwargs):
        ids, mask = pad(seqs, pad_id, left=left, device=device, **kwargs)
        if left:
            ids = torch.cat([ids.new_full((len(ids), extra), pad_id), ids], 1)
            mask = torch.cat([mask.new_zeros((len(mask), extra)), mask], 1)
        return ids, mask

    def more_prompts(*args, **kwargs):
        seqs, owner, after = prompts(*args, **kwargs)
        return (seqs, torch.cat([owner.new_full((len(owner), extra), -1), owner], 1),
                torch.cat([after.new_zeros((len(after), extra)), after], 1))
    return more_pad, more_prompts


def main():
    header = provenance.header()
    collection = selfsup.Collection('classic/adi')
    docs = [d['text'] for d in list(collection.corpus_iter())[:12]]
    queries = list(collection.topics()['query'])[:4]
    gen = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF, max_passage_length=128)

    def run():
        weights = torch.tensor([[0.3, 1.0, 0.2]] * 4, requires_grad=True)
        logp = R.biased_log_likelihood(gen, queries, [docs[3 * i:3 * i + 3] for i in range(4)], weights)
        logp.sum().backward()
        return logp.detach(), weights.grad
    logp, grad = run()
    G.pad, R.concatenated_prompts = padded_left(EXTRA)
    logp_padded, grad_padded = run()
    row = {'log-likelihoods equal': bool(torch.equal(logp, logp_padded)),
           'largest log-likelihood difference': round(float((logp - logp_padded).abs().max()), 4),
           'gradients equal': bool(torch.equal(grad, grad_padded)),
           'largest gradient difference': round(float((grad - grad_padded).abs().max()), 4),
           'precision': str(gen.compute_dtype())}
    md = ['# Left padding and ACROBArT\'s biased log-likelihood (ADI, SmolLM2)', '',
          *(f'- {k}: {v}' for k, v in header.items()),
          f'- 4 topics x 3 passages (128 tokens each), as computed and with {EXTRA} more masked positions on the left', '',
          *(f'- {k}: {v}' for k, v in row.items()), '']
    (RESULTS / 'padding_probe.md').write_text('\n'.join(md))
    print('\n'.join(md))
    print(json.dumps(row))


if __name__ == '__main__':
    main()
