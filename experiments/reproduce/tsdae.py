"""TSDAE pre-adaptation of all-MiniLM-L6-v2 on a corpus, before distillation (issue 50 item 2).

TSDAE (Wang et al., 2021) trains a sentence encoder to let a decoder rebuild a sentence from the
vector of a noisy copy of it (60% of its words deleted). GPL's scifact result rose from 66.4 to
68.9 nDCG@10 with TSDAE on the corpus before its MS MARCO and GPL training. Here it runs on the
shipped student, which has had its supervised training already: whether it helps or makes the
student forget is what this probe asks.

sentence-transformers' own `DenoisingAutoEncoderLoss` does the work (the decoder is MiniLM's own
layers with cross-attention added, its embeddings tied to the encoder's). The noise is its
dataset's (each word kept with probability 0.4, at least one), written here on white space:
`DenoisingAutoEncoderDataset` needs NLTK's tokenizer data, which these machines cannot download.
The loop around it is a plain AdamW loop, warm-up 10%, on corpus sentences of 5 to 40 words
(`corpus_sentences`, one a document where the corpus has enough). Only the encoder is
kept, saved in the sentence-transformers format, so that any pipeline can start from it
(`distill:model_name=DIR`, `dual_encoder:model_name=DIR`).

    python experiments/reproduce/tsdae.py [--collection beir/scifact/train] [--sentences 8000]
        [--steps 1000] [--batch-size 8] [--lr 3e-5] [--seed 0] [--out DIR]

Prints the directory it wrote (by default <cache>/tsdae/<corpus>-<sentences>-<steps>-<seed>) and
the loss every 50 steps. `label_free.py corpus_only_training` builds it and trains from it.
"""
import argparse
import time
from pathlib import Path

import numpy as np
import torch

MINILM = 'sentence-transformers/all-MiniLM-L6-v2'


def delete_words(text: str, rng: np.random.Generator, keep: float = 0.4) -> str:
    """TSDAE's noise: each word kept with probability ``keep``, at least one word."""
    words = text.split()
    kept = [w for w in words if rng.random() < keep]
    return ' '.join(kept or [words[int(rng.integers(len(words)))]])


def default_out(collection: str, sentences: int, steps: int, seed: int) -> Path:
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup._cache import cache_root
    corpus = Collection(collection).corpus_id.replace('/', '_')
    return cache_root(None) / 'tsdae' / f'{corpus}-{sentences}-{steps}-{seed}'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='beir/scifact/train')
    parser.add_argument('--sentences', type=int, default=8000)
    parser.add_argument('--steps', type=int, default=1000)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--lr', type=float, default=3e-5)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out', type=Path, default=None)
    args = parser.parse_args(argv)
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import DenoisingAutoEncoderLoss
    from transformers import get_linear_schedule_with_warmup

    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.data.queries.cut import corpus_sentences

    out = args.out or default_out(args.collection, args.sentences, args.steps, args.seed)
    if (out / 'modules.json').exists():
        print(f'already written: {out}')
        return out
    torch.manual_seed(args.seed)
    texts = corpus_sentences(Collection(args.collection), args.sentences, seed=args.seed)['query']
    texts = texts.tolist()
    model = SentenceTransformer(MINILM)  # (on a GPU where there is one)
    loss = DenoisingAutoEncoderLoss(model, decoder_name_or_path=MINILM, tie_encoder_decoder=True)
    optimiser = torch.optim.AdamW(loss.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = get_linear_schedule_with_warmup(optimiser, args.steps // 10, args.steps)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(texts))
    loss.train()
    started, recent = time.time(), []
    for step in range(args.steps):
        start = (step * args.batch_size) % len(order)
        rows = [texts[int(i)] for i in order[start:start + args.batch_size]]
        tokenize = getattr(model, 'preprocess', model.tokenize)
        noisy, whole = ({k: v.to(model.device) if torch.is_tensor(v) else v for k, v in tokenize(t).items()}
                        for t in ([delete_words(t, rng) for t in rows], rows))
        value = loss([noisy, whole], None)
        value.backward()
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        recent.append(value.item())
        if (step + 1) % 50 == 0:
            print(f'step {step + 1}/{args.steps}: loss {np.mean(recent):.4f}, '
                  f'{(time.time() - started) / (step + 1):.2f} s a step', flush=True)
            recent = []
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    print(f'wrote {out} in {time.time() - started:.0f} s')
    return out


if __name__ == '__main__':
    main()
