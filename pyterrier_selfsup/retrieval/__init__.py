"""First-stage retrievers over indexes built once per corpus:
BM25 (PISA), dense (FlexIndex), ReAtt's token index."""
