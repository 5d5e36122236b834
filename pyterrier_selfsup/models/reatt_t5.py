"""Single-model ReAtt on T5, as the paper builds it (Jiang et al., 2022, §2.2, §3.2, Fig. 1).

One T5 both retrieves and reads:

- its encoder's first B layers encode query and document independently, and layer B+1's
  attention from query to document tokens is the retrieval score
  (:class:`~pyterrier_selfsup.models.reatt.ReAtt` over the same weights);
- from layer B+1 on, the encoder reads query and document jointly: the cross-encoder;
- the decoder reads the K (query, document) encodings together (fusion-in-decoder), and its
  last layer's cross-attention from the first position, summed per document, is P_target.

The configuration is the released checkpoints' (``neulab/reatt-large-nq``): the T5 config
carries ``retrieval_layer`` (B, from 0) and ``retrieval_head``.
"""
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoTokenizer, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.reading import first_position_shares
from pyterrier_selfsup.models.reatt import HEAD_WEIGHTS_FILE, REATT_CONFIG_FILE, ReAtt, ReAttModel
from pyterrier_selfsup.models.trainable import TrainableModel


class ReAttT5(TrainableModel):
    """A T5 that retrieves with its encoder's layer-B+1 attention and reads with the rest.

    ``self.retriever`` is the :class:`ReAtt` over the same encoder weights (for scoring,
    token indexes and cross-document adjustment)."""

    def __init__(self, model: T5ForConditionalGeneration, tokenizer, *,
                 retrieval_layer: int | None = None, head: int | None = None,
                 head_temperature: float = 0.1, max_length: int = 256, query_max_length: int = 64,
                 target_max_length: int = 32, device: str | None = None,
                 precision: str = 'auto'):
        if retrieval_layer is None:
            retrieval_layer = getattr(model.config, 'retrieval_layer', None)
        if retrieval_layer is None:
            retrieval_layer = model.config.num_layers // 2
        if head is None:
            head = getattr(model.config, 'retrieval_head', None)
        model.set_attn_implementation('eager')  # the target attention is read from the weights
        self.model = model
        self.tokenizer = tokenizer
        self.target_max_length = target_max_length
        reatt_model = ReAttModel(model.encoder, retrieval_layer, head_temperature=head_temperature)
        if head is not None:
            reatt_model.select_head(head)
        self.retriever = ReAtt(reatt_model, tokenizer,
                               name=getattr(model.config, 'name_or_path', 't5') or 't5',
                               max_length=max_length, query_max_length=query_max_length,
                               device=device, precision=precision)
        self.device = self.retriever.device
        self.model.to(self.device)

    @property
    def retrieval_layer(self) -> int:
        return self.retriever.model.retrieval_layer

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> 'ReAttT5':
        model = T5ForConditionalGeneration.from_pretrained(name_or_path)
        saved = read_saved_config(name_or_path, REATT_CONFIG_FILE) or {}
        for key in ('head_temperature', 'max_length', 'query_max_length'):
            if key in saved:
                kwargs.setdefault(key, saved[key])
        out = cls(model, AutoTokenizer.from_pretrained(name_or_path), **kwargs)
        if (Path(name_or_path) / HEAD_WEIGHTS_FILE).is_file() and 'head' not in kwargs:
            out.retriever.model.head_logits.data.copy_(
                torch.load(Path(name_or_path) / HEAD_WEIGHTS_FILE))
        return out

    def save_pretrained(self, path: str | Path) -> Path:
        """A T5 checkpoint whose config names ``retrieval_layer`` and ``retrieval_head``, with the
        head weights and settings beside it."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.config.retrieval_layer = self.retrieval_layer
        self.model.config.retrieval_head = self.retriever.model.retrieval_head
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.retriever.model.head_logits.detach().cpu(), path / HEAD_WEIGHTS_FILE)
        (path / REATT_CONFIG_FILE).write_text(json.dumps(self.retriever.config(), indent=2))
        return path

    # -- what a trainer needs ------------------------------------------------------

    @property
    def precision(self) -> str:
        return self.retriever.precision

    def torch_modules(self) -> list[torch.nn.Module]:
        return [self.model, self.retriever.model]  # sharing the encoder (parameters counted once)

    def load_weights(self, path: str | Path):
        saved = ReAttT5.from_pretrained(str(path), device='cpu')
        self.model.load_state_dict(saved.model.state_dict())
        self.retriever.model.head_logits.data.copy_(saved.retriever.model.head_logits.data)

    # -- reading ----------------------------------------------------------------------

    def encode_pairs(self, queries: Sequence[str],
                     docs: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The encoder over each [query; document] pair, its first B layers on each side alone:
        (output (n, L, d), mask (n, L), the bi-encoder's output (n, L, d), the query first)."""
        q = self.retriever.tokenize(queries, 'query')
        d = self.retriever.tokenize(docs, 'passage')
        h_q = self.retriever.model.states(q['input_ids'], q['attention_mask'])
        h_d = self.retriever.model.states(d['input_ids'], d['attention_mask'])
        n = len(queries)
        q_len, d_len = q['attention_mask'].sum(1), d['attention_mask'].sum(1)
        width = int((q_len + d_len).max())
        hidden = h_q.new_zeros((n, width, h_q.shape[-1]))
        mask = torch.zeros((n, width), dtype=torch.long, device=self.device)
        for i in range(n):  # each pair's real tokens one after the other, padding at the end
            a, b = int(q_len[i]), int(d_len[i])
            hidden[i, :a] = h_q[i][q['attention_mask'][i].bool()]
            hidden[i, a:a + b] = h_d[i][d['attention_mask'][i].bool()]
            mask[i, :a + b] = 1
        joint, stack = hidden, self.model.encoder
        blocks = stack.block
        # T5 computes its relative position bias in the first layer and shares it
        first = blocks[0].layer[0].SelfAttention
        bias = first.compute_bias(width, width, device=self.device).to(joint.dtype)
        bias = bias + (1 - mask[:, None, None, :].to(joint.dtype)) * torch.finfo(joint.dtype).min
        for block in blocks[self.retrieval_layer:]:
            joint = block(joint, attention_mask=None, position_bias=bias)[0]
        joint = stack.dropout(stack.final_layer_norm(joint))
        return joint, mask, hidden

    def read(self, queries: Sequence[str], docs: Sequence[Sequence[str]], targets: Sequence[str],
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fusion-in-decoder over each query's k documents: (Σ log p(target) per query, with
        gradients; P_target (b, k), without gradients)."""
        b, k = len(queries), len(docs[0])
        encoded, mask, _ = self.encode_pairs([q for q in queries for _ in range(k)],
                                             [d for row in docs for d in row])
        width = encoded.shape[1]
        fused = encoded.reshape(b, k * width, -1)
        fused_mask = mask.reshape(b, k * width)
        owner = torch.arange(k, device=self.device).repeat_interleave(width)[None].expand(b, -1)
        owner = owner.masked_fill(fused_mask == 0, -1)  # padding belongs to no pair
        labels = self.tokenizer(text_target=list(targets), padding=True, truncation=True,
                                max_length=self.target_max_length,
                                return_tensors='pt')['input_ids'].to(self.device)
        labels = labels.masked_fill(labels == self.tokenizer.pad_token_id, -100)
        out = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=fused),
                         attention_mask=fused_mask, labels=labels, output_attentions=True,
                         use_cache=False)
        logp = -torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), labels,
                                                  ignore_index=-100, reduction='none').sum(1)
        with torch.no_grad():
            target = first_position_shares(out.cross_attentions[-1], owner, k)
        return logp, target
