"""Every prompt the generators read, in one place, and what is done to a passage before it is
shown and to a generation after it is written.

The scorer reads a query after :data:`PASSAGE_QUESTION` (decoder-only models) or decodes it
from the passage alone (seq2seq). The query writer completes the same prompt
(``style='plain'``), or reads :data:`SYSTEM_PROMPT` and :data:`INSTRUCTION` through the
tokenizer's chat template (``style='chat'``).

    writer_prompt(tokenizer, 'Scurvy is caused by a lack of vitamin C.', style='plain')
"""
from collections.abc import Sequence

from pyterrier_selfsup.models.batching import clean_texts

# a decoder-only model reads the query right after it; the plain writer completes it
PASSAGE_QUESTION = 'Passage: {passage}\nA question this passage answers:'
SEQ2SEQ_PROMPT = '{passage}'
STYLES = ('chat', 'plain')
SYSTEM_PROMPT = 'You write search queries that a user of a search engine would type.'
INSTRUCTION = ('Write one search query that the passage below answers. '
               'Reply with the query only, on one line.')
EXAMPLES_INTRO = ('Queries that users of a search engine wrote '
                  '(write in their style, about the passage):')
# characters of an example pair's passage shown (cut at a word's end: about 120 tokens)
PAIR_PASSAGE_CHARS = 600


def cut_to_tokens(tokenizer, passages: Sequence, max_tokens: int) -> list[str]:
    """Each passage cut after its first ``max_tokens`` tokens, in the text (so that a prompt
    around it is tokenized whole); missing passages become empty ones."""
    passages = clean_texts(list(passages))
    if not passages:
        return []
    enc = tokenizer(passages, add_special_tokens=False, return_offsets_mapping=True)
    return [text[:offsets[max_tokens - 1][1]] if len(offsets) > max_tokens else text
            for text, offsets in zip(passages, enc['offset_mapping'])]


def first_line(text: str) -> str:
    """The first line of a generation with text on it, stripped: the query it wrote."""
    return text.strip().split('\n')[0].strip()


def writer_prompt(tokenizer, passage: str, *, style: str, examples: Sequence[str] = (),
                  pairs: Sequence[tuple[str, str]] = ()) -> str:
    """The text a writer continues for ``passage`` (already cut): with ``style='plain'``,
    :data:`PASSAGE_QUESTION` after each example pair completed by its query (InPars); with
    ``style='chat'``, the chat template over :data:`SYSTEM_PROMPT`, each example pair as a turn,
    and the instruction with ``passage``. ``examples``: query texts shown first."""
    shown = ''
    if examples:
        shown = EXAMPLES_INTRO + '\n' + ''.join(f'- {e}\n' for e in examples) + '\n'
    if style == 'plain':
        shots = ''.join(PASSAGE_QUESTION.replace('{passage}', p) + f' {q}\n\n' for p, q in pairs)
        return shown + shots + PASSAGE_QUESTION.replace('{passage}', passage)
    turns = [turn for p, q in pairs
             for turn in ({'role': 'user', 'content': f'{INSTRUCTION}\n\nPassage: {p}'},
                          {'role': 'assistant', 'content': q})]
    messages = [{'role': 'system', 'content': SYSTEM_PROMPT}, *turns,
                {'role': 'user', 'content': f'{shown}{INSTRUCTION}\n\nPassage: {passage}'}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
