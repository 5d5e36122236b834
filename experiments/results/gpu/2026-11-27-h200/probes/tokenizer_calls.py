import time, os
from transformers import AutoTokenizer
from pyterrier_selfsup import MINILM, Collection
texts=[d['text'] for d in Collection('beir/scifact/test').corpus_iter()]
tk=AutoTokenizer.from_pretrained(MINILM); b=tk.backend_tokenizer; b.enable_truncation(256)
import tokenizers; print(tokenizers.__version__, os.cpu_count())
for name in ['encode_batch','encode_batch_fast']:
    f=getattr(b,name,None)
    if f is None: print('no',name); continue
    f(texts[:100]); t=time.perf_counter(); r=f(texts); m=time.perf_counter()-t; t=time.perf_counter(); ids=[x.ids for x in r]; print(name, round(m,3), 'ids', round(time.perf_counter()-t,3))
t=time.perf_counter(); tk(texts,truncation=True,max_length=256); print('hf call', round(time.perf_counter()-t,3))
