import time, os, torch
from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.models.dual_encoder import DualEncoder
texts=[d['text'] for d in Collection('beir/scifact/test').corpus_iter()]
e=DualEncoder.from_pretrained(MINILM)
e.encode_docs(texts[:300]); torch.cuda.synchronize()
t=time.perf_counter(); ids=e.tokenize(texts,'passage',padding=False); print('tokenize one call', time.perf_counter()-t)
t=time.perf_counter(); b=list(e._batches(texts,'passage',256*256)); print('batches', time.perf_counter()-t, len(b))
t=time.perf_counter(); e.encode_docs(texts); torch.cuda.synchronize(); print('encode', time.perf_counter()-t)
with e.inference():
    t=time.perf_counter()
    for _, x, m in b: e.model(x.cuda(), m.cuda(), 'passage')
    torch.cuda.synchronize(); print('model only, autocast', time.perf_counter()-t)
