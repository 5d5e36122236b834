"""The GPU code paths: bf16 autocast on CUDA, pinned-memory copies, exact search on the GPU,
and a training run on it. Marked ``cuda``: skipped where torch sees no GPU (CI); run where
one is lent (scripts/gpu/README.md). Each compares the GPU's result with the CPU's."""
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from pyterrier_selfsup import MINILM, Collection, DualEncoder
from pyterrier_selfsup.models.batching import to_device
from tests.helpers import stopped_at_step

pytestmark = pytest.mark.cuda


def test_a_pinned_copy_reaches_the_gpu_whole():
    x = torch.arange(1000, dtype=torch.long).view(10, 100)
    on_gpu = to_device(x, 'cuda')
    torch.cuda.synchronize()
    assert on_gpu.device.type == 'cuda' and torch.equal(on_gpu.cpu(), x)


def test_minilm_in_bf16_on_the_gpu_encodes_as_fp32_on_the_cpu():
    texts = Collection('classic/adi').texts([str(i) for i in range(1, 41)])
    gpu = DualEncoder.from_pretrained(MINILM, device='cuda')  # precision auto: bf16 on CUDA
    assert gpu.compute_dtype() == torch.bfloat16
    cpu = DualEncoder.from_pretrained(MINILM, device='cpu', precision='fp32')
    a, b = gpu.encode_docs(texts), cpu.encode_docs(texts)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99
    # and with gradients (the training path): the same vectors
    with torch.autocast('cuda', dtype=torch.bfloat16):
        trained = gpu.encode(texts[:8], 'passage').detach().float().cpu().numpy()
    np.testing.assert_allclose(trained, a[:8], atol=0.02)


def test_exact_search_on_the_gpu_ranks_as_numpy(cache_dir):
    from pyterrier_selfsup.retrieval.ann import search_stage
    from pyterrier_selfsup.retrieval.dense import flex_index
    coll = Collection('classic/adi')
    encoder = DualEncoder.from_pretrained(MINILM, device='cpu', precision='fp32')
    index = flex_index(coll, encoder, cache_dir=cache_dir)
    topics = coll.topics()
    queries = topics.assign(query_vec=list(encoder.encode_queries(topics['query'].tolist())))
    # (torch sees a GPU: FlexIndex's torch retriever)
    on_gpu = search_stage(index, 'exact', 10)(queries)
    on_cpu = index.np_retriever(num_results=10, drop_query_vec=True)(queries)
    assert 'torch' in type(search_stage(index, 'exact', 10)).__name__.lower()
    merged = on_gpu.merge(on_cpu, on=['qid', 'docno'], suffixes=('_gpu', '_cpu'))
    assert len(merged) >= 0.98 * len(on_cpu)  # the same top 10 but for ties at the cut
    np.testing.assert_allclose(merged['score_gpu'], merged['score_cpu'], atol=1e-4)


def test_smollm2_scores_on_the_gpu_as_on_the_cpu(cache_dir):
    from pyterrier_selfsup.models.generator import load_generator
    coll = Collection('classic/adi')
    topics = coll.topics().head(8)
    passages = coll.texts([str(i) for i in range(1, 6)])
    queries = [q for q in topics['query'] for _ in passages]
    texts = passages * len(topics)
    gpu = load_generator('smollm2', device='cuda',
                         cache_dir=cache_dir).log_likelihoods(queries, texts)
    cpu = load_generator('smollm2', device='cpu', precision='fp32',
                         cache_dir=cache_dir).log_likelihoods(queries, texts)
    # each query's ranking of the passages: bf16 may swap a near tie (on an H100, 2026-11-25,
    # two passages .03 nats apart in fp32), so the pairs that fp32 separates by half a nat keep
    # their order
    separated = agreeing = 0
    for q in range(len(topics)):
        rows = slice(q * len(passages), (q + 1) * len(passages))
        g, c = gpu[rows], cpu[rows]
        for i in range(len(passages)):
            for j in range(i + 1, len(passages)):
                if abs(c[i] - c[j]) > 0.5:
                    separated += 1
                    agreeing += (g[i] - g[j]) * (c[i] - c[j]) > 0
    assert separated >= 40 and agreeing == separated
    assert spearmanr(gpu, cpu).statistic >= 0.95
    assert np.abs(gpu - cpu).mean() < 0.05 * np.abs(cpu).mean()


def test_the_query_writer_samples_on_the_gpu_from_a_seeded_cpu_generator(cache_dir):
    # sampled_queries seeds a CPU torch.Generator: its draws are made on the CPU, so a seed writes
    # the same queries again, wherever the model runs
    from pyterrier_selfsup.models.generator import load_generator
    passages = Collection('classic/adi').texts([str(i) for i in range(1, 5)])
    writer = load_generator('smollm2', device='cuda', cache_dir=cache_dir).writer(style='plain')

    def written(seed):
        return writer.write(passages, 3, max_new_tokens=24, do_sample=True, temperature=1.0,
                            top_p=0.95, generator=torch.Generator().manual_seed(seed))

    first = written(0)
    assert [len(q) for q in first] == [3] * len(passages)
    assert written(0) == first
    assert written(1) != first
    assert len({q for qs in first for q in qs}) >= 0.75 * 3 * len(passages)


def test_a_trainer_trains_on_the_gpu_and_its_model_loads_on_the_cpu(tiny_dir, cache_dir, tmp_path):
    from pyterrier_selfsup.training.distant import DistantSupervision
    torch.manual_seed(0)
    encoder = DualEncoder.from_pretrained(str(tiny_dir), dim=16, pooling='mean', device='cuda',
                                          max_length=48)
    start = [p.detach().cpu().clone() for p in encoder.model.parameters()]
    trainer = DistantSupervision(encoder, 'classic/adi', batch_size=8, lr=1e-2,
                                 output_dir=tmp_path / 'out', cache_dir=cache_dir, verbose=False)
    trainer.fit(Collection('classic/adi').topics())
    losses = [r['loss'] for r in trainer.log if 'loss' in r]
    assert len(losses) >= 4 and np.isfinite(losses).all()
    assert any(not torch.equal(a.detach().cpu(), b)
               for a, b in zip(encoder.model.parameters(), start))
    reloaded = DualEncoder.from_pretrained(str(tmp_path / 'out' / 'final'), device='cpu',
                                           precision='fp32')
    texts = ['a test of the reloaded model']
    np.testing.assert_allclose(reloaded.encode_docs(texts), encoder.encode_docs(texts), atol=0.05)


def test_a_run_resumed_on_the_gpu_ends_as_one_never_stopped(tiny_dir, cache_dir, tmp_path,
                                                            monkeypatch):
    """A checkpoint keeps the CUDA generators' state: the tiny BERT's dropout draws its masks
    there, so a run resumed without it (the seed set again at its start) draws the first steps'
    masks again. (Close, not equal: CUDA's embedding backward adds in no fixed order.)"""
    from pyterrier_selfsup.training import checkpoints as loop
    from pyterrier_selfsup.training.distant import DistantSupervision

    def run(out):
        torch.manual_seed(0)
        encoder = DualEncoder.from_pretrained(str(tiny_dir), dim=16, pooling='mean', device='cuda',
                                              max_length=48, precision='fp32')
        trainer = DistantSupervision(encoder, 'classic/adi', batch_size=8, lr=1e-2, output_dir=out,
                                     checkpoint_every=2, keep_checkpoints=1, cache_dir=cache_dir,
                                     verbose=False)
        loop.fit_resumably(trainer, Collection('classic/adi').topics())
        return [p.detach().cpu() for p in encoder.model.parameters()]

    never_stopped = run(tmp_path / 'whole')
    # (killed in step 5, after the step-4 checkpoint)
    with stopped_at_step(monkeypatch, DistantSupervision, 5):
        run(tmp_path / 'stopped')
    assert 'cuda_rng' in torch.load(tmp_path / 'stopped' / 'checkpoint-4' / loop.TRAINER_STATE_FILE,
                                    weights_only=False)
    resumed = run(tmp_path / 'stopped')
    assert max((a - b).abs().max().item() for a, b in zip(never_stopped, resumed)) < 1e-4


def test_acrobart_a_few_queries_at_a_time_on_the_gpu_trains_as_the_whole_batch(
        tiny_encoder, tiny_generator_dir, tmp_path):
    """``Acrobart(generator_batch=)`` on CUDA in bf16 (the generator's autocast, the gradient
    handed over by ``_Computed`` on the GPU): groups of 3 of a batch of 7 train as the whole
    batch does. On the CPU the two are equal bit for bit (test_reconstruction); CUDA may pick
    other kernels for 3 rows than for 7, so here they need only agree closely."""
    from pyterrier_selfsup import Generator
    from pyterrier_selfsup.training.acrobart import Acrobart
    coll = Collection('classic/adi')
    runs = {}
    for generator_batch in (None, 3):
        enc = tiny_encoder(device='cuda')
        generator = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cuda',
                                              precision='bf16', max_passage_length=32)
        rows = []
        generator.model.register_forward_hook(lambda m, args, kwargs, out: rows.append(
            next(v for v in [*args, *kwargs.values()] if torch.is_tensor(v)).shape[0]),
            with_kwargs=True)
        trainer = Acrobart(enc, generator, coll, k=3, refresh_every=None, batch_size=7, epochs=1,
                           lr=1e-2, generator_batch=generator_batch,
                           cache_dir=tmp_path / str(generator_batch), verbose=False)
        trainer.fit(coll.topics().head(14))
        runs[generator_batch] = ({n: v.detach().cpu().float()
                                  for n, v in enc.model.state_dict().items()},
                                 trainer.beta.item(),
                                 [r['loss'] for r in trainer.log if 'loss' in r], rows)
    (whole, beta_whole, loss_whole, rows_whole), (parts, beta_parts, loss_parts, rows_parts) = \
        runs[None], runs[3]
    assert max(rows_whole) == 7 and max(rows_parts) == 3
    start = tiny_encoder().model.state_dict()
    assert any(not torch.equal(start[n], whole[n]) for n in whole)  # it trained
    assert len(loss_parts) == len(loss_whole) == 2
    np.testing.assert_allclose(loss_parts, loss_whole, rtol=1e-3)
    assert beta_whole != 1.0 and abs(beta_parts - beta_whole) < 1e-3
    # Adam moves a weight by about lr a step whatever its gradient's size, so a gradient near 0
    # whose sign the kernels flip moves it the other way: a few elements may differ by up to
    # 2 lr a step (an H100 run: 53 elements of the word embeddings by up to .027), all the others
    # agree closely. Counted among the weights a gradient moved in either run (by 1e-4 or more:
    # weight decay alone moves one by about 1e-6; most of the word embeddings are of tokens these
    # texts never use, equal in both runs whatever the code). (Adam hides a gradient scaled as a
    # whole; the CPU test's bit-equality covers that arithmetic.)
    moved = apart = 0
    for n in whole:
        before = start[n].float().cpu()
        changed = ((whole[n] - before).abs() >= 1e-4) | ((parts[n] - before).abs() >= 1e-4)
        moved += changed.sum().item()
        apart += ((parts[n] - whole[n]).abs() > 1e-3 + 1e-3 * whole[n].abs()).sum().item()
    assert moved > 10_000 and apart / moved < 1e-2
