"""A GGUF checkpoint de-quantised once into a Hugging Face directory (fp32 safetensors and the
tokenizer's files), in a process of its own, and kept in ``<cache>/generators/``.

    path = dequantised(SMOLLM2, SMOLLM2_GGUF)   # then Generator.from_pretrained(str(path))
"""
import re
import subprocess
import sys
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from pyterrier_selfsup._cache import CacheFull, build_once, cache_key, cache_root, check_space


def dequantised(repo: str, gguf_file: str, cache_dir=None) -> Path:
    """A GGUF checkpoint converted once to a Hugging Face directory (fp32 safetensors), in a
    process of its own: dequantising holds about twice the model's weights at once, memory a
    child gives back when it exits."""
    path = cache_root(cache_dir) / 'generators' / cache_key(f'{repo}.{gguf_file}',
                                                            {'format': 'hf-fp32'})
    what = f'the fp32 conversion of {repo}/{gguf_file}'

    def convert(staging: Path):
        child = subprocess.run([sys.executable, '-c', _CONVERT_IN_A_CHILD, repo, gguf_file,
                                str(staging), what],
                               capture_output=True, text=True, errors='replace')
        said = child.stderr.strip()
        marked = [line[len(_CHILD_SAYS):] for line in said.splitlines()
                  if line.startswith(_CHILD_SAYS)]
        if child.returncode == _CHILD_CACHE_FULL and marked:
            raise CacheFull(marked[-1])
        # (a full disk mid-write: build_once names it)
        if child.returncode == _CHILD_OS_ERROR and marked:
            code, message = marked[-1].split(' ', 1)
            raise OSError(int(code), message)
        if child.returncode:
            lines = said.splitlines() or ['(nothing said)']
            errors = [line for line in lines
                      if re.match(r'[A-Za-z_][\w.]*(Error|Exception)\b', line)]
            raise RuntimeError(f'{what} failed in its own process (exit {child.returncode}): '
                               f'{(errors or lines)[-1]}\n' + '\n'.join(lines[-20:]))

    return build_once(path, convert, what=what)


_CHILD_CACHE_FULL, _CHILD_OS_ERROR, _CHILD_SAYS = 3, 4, 'selfsup-conversion: '
_CONVERT_IN_A_CHILD = ('import sys; from pyterrier_selfsup.models.gguf_conversion import _child; '
                       '_child(*sys.argv[1:])')


def _child(repo: str, gguf_file: str, staging: str, what: str):
    """The child process of :func:`dequantised`: :func:`convert_gguf`, a full cache or a
    failed write said (marked) for the parent to raise again."""
    try:
        convert_gguf(repo, gguf_file, Path(staging), what)
    except CacheFull as error:
        print(_CHILD_SAYS + str(error), file=sys.stderr)
        sys.exit(_CHILD_CACHE_FULL)
    except OSError as error:
        if error.errno is None:
            raise
        print(f'{_CHILD_SAYS}{error.errno} {error.strerror}', file=sys.stderr)
        sys.exit(_CHILD_OS_ERROR)


def convert_gguf(repo: str, gguf_file: str, staging: Path, what: str):
    """``repo``'s ``gguf_file`` dequantised into ``staging`` as a Hugging Face directory;
    :func:`dequantised` runs it in a child process."""
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(repo, gguf_file=gguf_file)
        config = AutoConfig.from_pretrained(repo, gguf_file=gguf_file)
        model_cls = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        loaded = model_cls.from_pretrained(repo, gguf_file=gguf_file, config=config)
    # fp32 weights (4 bytes a weight) and the tokenizer's files, checked before anything is written
    check_space(staging.parent,
                4 * sum(p.numel() for p in loaded.state_dict().values()) + (16 << 20), what)
    tokenizer.save_pretrained(staging)
    # transformers refuses to save a model loaded from GGUF: a fresh model takes its weights
    config = loaded.config
    for attr in ('quantization_config', '_pre_quantization_dtype'):
        if hasattr(config, attr):
            delattr(config, attr)
    model = model_cls.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(staging)


@contextmanager
def _gguf_parsed_once():
    """Within the block, one ``gguf.GGUFReader`` a file and one tensor-name table an
    architecture: transformers would parse the file again for its tokenizer, configuration and
    weights. This patches the ``gguf`` module, only in the conversion's own process."""
    import gguf
    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = lru_cache(maxsize=None)(saved[0])
    gguf.get_tensor_name_map = lru_cache(maxsize=None)(saved[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved
