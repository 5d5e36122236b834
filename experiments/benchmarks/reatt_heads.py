"""Zero-shot ReAtt head analysis (issue 5, item 1; ReAtt §2.3): how well each (layer, head)
of all-MiniLM-L6-v2's attention retrieves, as r_h re-ranking BM25's top 100.

Choices are made on beir/scifact/train only (its qrels; no training happens here):
whether special tokens ([CLS], [SEP]) take part in the scoring, and which (layer, head)
is *the* retrieval head. That head is then reported on every collection beside the best
head of each collection (an oracle, shown to say how far the transferred choice is from
it, never used for a choice), BM25 and the per-layer best.

    python experiments/benchmarks/reatt_heads.py              # measures
    python experiments/benchmarks/reatt_heads.py --plot-only  # the PNG again from the CSV
writes experiments/results/reatt_heads.{md,csv,png}.
"""
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from pyterrier_selfsup import MINILM
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.reatt import ReAtt

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / 'results'
CHOICE = 'beir/scifact/train'
COLLECTIONS = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
DEPTH = 100
MEASURE = 'nDCG@10'



def head_analysis(collection, model_name: str, *, depth: int = 100, layers: Sequence[int] | None = None,
                  measures=None, cache_dir=None, verbose: bool = False, **kwargs) -> pd.DataFrame:
    """How well each (layer, head) of ``model_name`` retrieves zero-shot (ReAtt §2.3): BM25's
    top ``depth`` for every topic of ``collection`` re-ranked by r_h at each layer (its
    ``retrieval_layer``, from 0), one row per (layer, head) with the ``measures`` (default
    nDCG@10 and R@10) averaged over the judged topics, plus a row for BM25 itself
    (``layer`` -1, ``head`` -1). Queries and
    documents are encoded once per layer, through that layer only."""
    import ir_measures
    from ir_measures import R, nDCG

    from pyterrier_selfsup import BM25, Collection
    from pyterrier_selfsup.models.reatt import n_layers

    collection = Collection(collection) if isinstance(collection, str) else collection
    measures = measures or [nDCG @ 10, R @ 10]
    qrels = collection.qrels().rename(columns={'qid': 'query_id', 'docno': 'doc_id', 'label': 'relevance'})
    qrels['relevance'] = qrels['relevance'].astype(int)
    run = (BM25.from_collection(collection, num_results=depth, cache_dir=cache_dir)
           >> collection.text_loader())(collection.topics())
    run = run[run['qid'].isin(set(qrels['query_id']))].reset_index(drop=True)

    def evaluate(scores: np.ndarray) -> dict:
        frame = pd.DataFrame({'query_id': run['qid'], 'doc_id': run['docno'], 'score': scores.astype(float)})
        return {str(m): v for m, v in ir_measures.calc_aggregate(measures, qrels, frame).items()}

    rows = [{'layer': -1, 'head': -1, **evaluate(run['score'].to_numpy())}]
    total = n_layers(ReAtt.from_pretrained(model_name, retrieval_layer=0, **kwargs).model.encoder)
    for layer in layers or range(total):
        reatt = ReAtt.from_pretrained(model_name, retrieval_layer=layer, verbose=verbose, **kwargs)
        per_head = reatt.score_texts(run['query'].tolist(), run['text'].tolist(), per_head=True)
        rows += [{'layer': layer, 'head': h, **evaluate(per_head[:, h])} for h in range(per_head.shape[1])]
    return pd.DataFrame(rows)

def main():
    header = provenance.header()
    started = time.time()
    frames, seconds = [], {}
    for special in (True, False):
        t0 = time.time()
        frames.append(head_analysis(CHOICE, MINILM, depth=DEPTH, special_tokens=special, verbose=True)
                      .assign(collection=CHOICE, special_tokens=special))
        seconds[f'{CHOICE}, special_tokens={special}'] = time.time() - t0
    train = pd.concat(frames, ignore_index=True)
    special, layer, head = chosen_head(train)
    print(f'chosen on {CHOICE}: special_tokens={special}, layer {layer}, head {head}', flush=True)
    for name in COLLECTIONS:
        t0 = time.time()
        frames.append(head_analysis(name, MINILM, depth=DEPTH, special_tokens=special, verbose=True)
                      .assign(collection=name, special_tokens=special))
        seconds[name] = time.time() - t0
    table = pd.concat(frames, ignore_index=True).drop_duplicates(['collection', 'special_tokens', 'layer', 'head'])
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / 'reatt_heads.csv', index=False)

    rows = []
    for (name, sp), frame in table.groupby(['collection', 'special_tokens'], sort=False):
        hs = frame[frame['head'] >= 0]
        top = hs.loc[hs[MEASURE].idxmax()]
        chosen = hs[(hs['layer'] == layer) & (hs['head'] == head)].iloc[0]
        rows.append({'collection': name, 'special tokens': sp,
                     'BM25': frame.loc[frame['head'] < 0, MEASURE].iloc[0],
                     f'chosen head (layer {layer}, head {head})': chosen[MEASURE],
                     'best head (oracle)': top[MEASURE], 'its layer, head': f'{int(top["layer"])}, {int(top["head"])}',
                     **{f'best of layer {ly}': v for ly, v in hs.groupby('layer')[MEASURE].max().items()}})
    summary = pd.DataFrame(rows)

    settings = {'model': provenance.model_revision(MINILM),
                'scoring': f'r_h = mean over query tokens of the max over document tokens of layer-l head-h '
                           f'pre-softmax attention; BM25 (PISA, porter2, k1=0.9, b=0.4) top {DEPTH} re-ranked; '
                           'queries cut at 64 tokens, documents at 256',
                'layers': 'layer l is retrieval_layer B counted from 0: the attention of the (B+1)-th layer, '
                          'after B bi-encoder layers (the released ReAtt checkpoints count the same way)',
                'choices': f'special tokens and the retrieval head chosen on {CHOICE} by {MEASURE}',
                'measure': f'{MEASURE} and R@10 over the judged topics; all (layer, head) rows in reatt_heads.csv',
                'seconds': ', '.join(f'{k}: {v:.0f}' for k, v in seconds.items()),
                'wall time': f'{time.time() - started:.0f} s'}
    md = ['# Zero-shot ReAtt heads of all-MiniLM-L6-v2', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', f'{MEASURE}:', '', '| ' + ' | '.join(summary.columns) + ' |', '|---|' + '---|' * (len(summary.columns) - 1)]
    for _, row in summary.iterrows():
        md.append('| ' + ' | '.join(f'{v:.4f}' if isinstance(v, float) else str(v) for v in row.values) + ' |')
    (RESULTS / 'reatt_heads.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))

    plot(table, RESULTS / 'reatt_heads.png', header)


def chosen_head(table: pd.DataFrame):
    """(special_tokens, layer, head): the best head on CHOICE by MEASURE, as main() chose it."""
    heads = table[(table['collection'] == CHOICE) & (table['head'] >= 0)]
    best = heads.loc[heads[MEASURE].idxmax()]
    return bool(best['special_tokens']), int(best['layer']), int(best['head'])


def plot(table: pd.DataFrame, path: Path, header: dict, columns: int = 3):
    """A heatmap of MEASURE per (layer, head) for each collection (the chosen scoring of
    special tokens), three a row: the chosen head boxed in red, BM25's value and the chosen
    and best heads' in the panel's title."""
    special, layer, head = chosen_head(table)
    frames = [(n, f) for (n, sp), f in table.groupby(['collection', 'special_tokens'], sort=False) if sp == special]
    rows = -(-len(frames) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows + 0.8), squeeze=False,
                             layout='constrained')
    for ax, (name, frame) in zip(axes.flat, frames):
        hs = frame[frame['head'] >= 0].pivot(index='layer', columns='head', values=MEASURE)
        im = ax.imshow(hs.to_numpy(), aspect='auto', cmap='viridis', origin='lower',
                       extent=(-0.5, hs.shape[1] - 0.5, hs.index.min() - 0.5, hs.index.max() + 0.5))
        ax.add_patch(matplotlib.patches.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, ec='red', lw=2))
        bm25 = frame.loc[frame['head'] < 0, MEASURE].iloc[0]
        ax.set_title(f'{name}\nBM25 {bm25:.3f}; chosen head {hs.loc[layer, head]:.3f}; best head '
                     f'{np.nanmax(hs.to_numpy()):.3f}', fontsize=8)
        ax.set_xticks(range(hs.shape[1]))
        ax.set_yticks(hs.index)
        ax.tick_params(labelsize=7)
        ax.set_xlabel('head', fontsize=8)
        ax.set_ylabel('layer', fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.05).ax.tick_params(labelsize=7)
    for ax in axes.flat[len(frames):]:
        ax.set_visible(False)
    fig.suptitle(f'{MEASURE} of each all-MiniLM-L6-v2 attention head re-ranking BM25\'s top {DEPTH} '
                 f'(special tokens {"in" if special else "out"}); red box: the head chosen on {CHOICE} '
                 f'(layer {layer}, head {head})', fontsize=9)
    footer = [f'{k}: {header[k]}' for k in ('date', 'code', 'machine') if k in header]
    fig.supxlabel('\n'.join(footer), fontsize=6, family='monospace', ha='left', x=0.005)
    fig.savefig(path, dpi=120, metadata={'Description': '\n'.join(f'{k}: {v}' for k, v in header.items())})
    plt.close(fig)
    return path


def plot_only():
    """The PNG again from the CSV, provenance from the Markdown's header lines."""
    header = dict(line[2:].split(': ', 1) for line in (RESULTS / 'reatt_heads.md').read_text().splitlines()
                  if line.startswith('- ') and ': ' in line)
    return plot(pd.read_csv(RESULTS / 'reatt_heads.csv'), RESULTS / 'reatt_heads.png', header)


if __name__ == '__main__':
    import sys
    plot_only() if sys.argv[1:] == ['--plot-only'] else main()
