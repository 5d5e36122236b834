"""The generator-taught trainers (RUMBArt, ACROBArT, ReAtt's cross-document adjustment)
on two processes (gloo) train as they do in one: same weights, same logged loss. Each
run gets its own cache, so that the two-process run scores its teacher pairs itself
(split between the processes) and builds its own refreshed indexes (in shards).
(Distillation and distant supervision: tests/test_distill.py.)"""
import json

import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection, DualEncoder, Generator, ReAtt
from pyterrier_selfsup.retrieval.token_index import ReAttIndex
from pyterrier_selfsup.training.loop import Trainer
from tests.helpers import start_ranks


def _trainer(method: str, tiny_dir: str, generator_dir: str, cache_dir: str, output_dir: str):
    """``method``'s trainer on ADI with the tiny models, dropout off (its masks would differ
    with the split), 2 epochs or refreshes, so that the processes rebuild an index together."""
    torch.manual_seed(0)
    generator = Generator.from_pretrained(generator_dir, device='cpu', precision='fp32',
                                          max_passage_length=32)
    common = dict(lr=1e-2, epochs=2, output_dir=output_dir, checkpoint_every='epoch',
                  cache_dir=cache_dir, verbose=False)
    if method == 'adjustment':
        from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
        model = ReAtt.from_pretrained(tiny_dir, retrieval_layer=1, device='cpu', precision='fp32')
        trainer = CrossDocumentAdjustment(
            model, generator, 'classic/adi', k=2, batch_size=5, **common)
    else:
        from pyterrier_selfsup.training.acrobart import Acrobart
        from pyterrier_selfsup.training.rumbart import Rumbart
        model = DualEncoder.from_pretrained(tiny_dir, dim=16, pooling='mean', device='cpu',
                                            precision='fp32', max_length=48)
        trainer = (Rumbart if method == 'rumbart' else Acrobart)(
            model, generator, 'classic/adi', k=3, refresh_every=3, batch_size=7, **common)
    trainer.train_mode = lambda on: model.train_mode(False)
    return trainer


def _fit(method, tiny_dir, generator_dir, cache_dir, output_dir):
    """``method`` trained in this process alone: what the two processes must reproduce."""
    return _trainer(method, tiny_dir, generator_dir, cache_dir, output_dir).fit(
        Collection('classic/adi').topics())


METHODS = ['rumbart', 'acrobart', 'adjustment']


def _spawned_runs(rank, tiny_dir, generator_dir, base, store):
    """Each method's two-process run as ``rank`` of one process group, one after another (one
    group's start-up for the three), each with its own cache and output."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2)
    try:
        for method in METHODS:
            _trainer(method, tiny_dir, generator_dir, f'{base}/cache-two-{method}',
                     f'{base}/two-{method}').fit(Collection('classic/adi').topics())
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope='module')
def two_process_runs(tiny_dir, tiny_generator_dir, tmp_path_factory):
    """Where each method's run on two processes put its cache (``cache-two-<method>``) and its
    model and log (``two-<method>``)."""
    base = tmp_path_factory.mktemp('two-processes')
    start_ranks(_spawned_runs,
                (str(tiny_dir), str(tiny_generator_dir['llama']), str(base), str(base / 'store')))
    return base


@pytest.mark.slow
@pytest.mark.parametrize('method', METHODS)
def test_two_processes_train_as_one(tiny_dir, tiny_generator_dir, tmp_path, two_process_runs,
                                    method):
    args = (method, str(tiny_dir), str(tiny_generator_dir['llama']))
    one = _fit(*args, str(tmp_path / 'cache-one'), str(tmp_path / 'one'))
    ran = two_process_runs / f'two-{method}'
    if method == 'adjustment':
        two = ReAtt.from_pretrained(str(ran / 'final'), device='cpu', precision='fp32').model
    else:
        two = DualEncoder.from_pretrained(str(ran / 'final'), device='cpu', precision='fp32').model
    one_model = one.model.model
    start = _trainer(*args, str(tmp_path / 'cache-one'), str(tmp_path / 'unused')).model.model
    # trained (moved from the start by more than the noise tolerated below), and alike
    assert max((a - b).abs().max().item()
               for a, b in zip(one_model.parameters(), start.parameters())) > 5e-3
    for (name, a), b in zip(one_model.named_parameters(), two.parameters()):
        if name.endswith('attention.self.key.bias'):
            # the loss does not depend on it (a key bias adds q·b to every key's score alike):
            # its gradient is rounding noise, which Adam scales up to steps of about lr
            continue
        torch.testing.assert_close(a, b, rtol=1e-3, atol=5e-4, msg=lambda m: f'{name}: {m}')
    logged = [json.loads(line) for line in (ran / 'training_log.jsonl').read_text().splitlines()]
    np.testing.assert_allclose([r['loss'] for r in logged if 'loss' in r],
                               [r['loss'] for r in one.log if 'loss' in r], rtol=1e-4)
    if method == 'acrobart':  # a parameter of the method's own, summed like the model's
        beta = torch.load(ran / 'final' / 'acrobart.pt')['beta']
        torch.testing.assert_close(beta, one.beta.detach(), rtol=1e-3, atol=5e-4)
    if method != 'acrobart':
        # the two processes scored the teacher's pairs between them, none twice
        import sqlite3
        counts = []
        for cache in (tmp_path / 'cache-one', two_process_runs / f'cache-two-{method}'):
            db, = (cache / 'generator-scores').glob('*/db.sqlite3')
            counts.append(sqlite3.connect(db).execute('SELECT COUNT(*) FROM cache').fetchone()[0])
        assert counts[0] == counts[1] > 0
    if method == 'rumbart':
        assert [r['step'] for r in logged if 'refresh seconds' in r] == [0, 3, 6, 9]


def _token_index_rank(rank, tiny_dir, path, store):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        reatt = ReAtt.from_pretrained(tiny_dir, retrieval_layer=1, device='cpu', precision='fp32')
        ReAttIndex.build_sharded(path, reatt, Collection('classic/adi').corpus_iter(), rank=rank,
                                 world_size=2, chunk=16)
    finally:
        dist.destroy_process_group()


def test_a_token_index_encoded_in_shards_is_the_one_encoded_whole(tiny_dir, tmp_path):
    torch.manual_seed(0)
    reatt = ReAtt.from_pretrained(str(tiny_dir), retrieval_layer=1, device='cpu', precision='fp32')
    whole = ReAttIndex.build(tmp_path / 'whole', reatt, Collection('classic/adi').corpus_iter(),
                             ivf=False)
    # ADI's 82 documents in chunks of 16: rank 0 encodes chunks 0, 2, 4,
    # rank 1 chunks 1, 3, 5 (of 2)
    start_ranks(_token_index_rank,
                (str(tiny_dir), str(tmp_path / 'sharded'), str(tmp_path / 'store')))
    sharded = ReAttIndex(tmp_path / 'sharded')
    assert sharded.docnos.tolist() == whole.docnos.tolist()
    np.testing.assert_array_equal(sharded.offsets, whole.offsets)
    # (fp16 keys; 1 thread against 2)
    np.testing.assert_allclose(sharded.keys32, whole.keys32, atol=2e-3)
    assert sharded.meta['documents'] == 82 and sharded.meta['tokens'] == whole.meta['tokens']
    assert not list(tmp_path.glob('sharded.rank-*'))


def test_a_method_without_data_parallel_refuses_several_processes(monkeypatch, tiny_encoder,
                                                                  cache_dir):
    from pyterrier_selfsup.training import loop

    class OneProcessOnly(Trainer):
        def examples(self, topics):
            return list(topics['query'])

    monkeypatch.setattr(loop, 'distributed', lambda: (0, 2))
    with pytest.raises(NotImplementedError, match='does not train on several processes'):
        OneProcessOnly(tiny_encoder(), 'classic/adi', cache_dir=cache_dir, verbose=False).fit(
            Collection('classic/adi').topics())
