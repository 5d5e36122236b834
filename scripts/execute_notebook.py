"""Executes a notebook in place, saving its outputs (what examples/walkthrough.ipynb shows):

    python scripts/execute_notebook.py examples/walkthrough.ipynb [--timeout S]

The kernel is this Python (the project's environment) and runs in the notebook's directory,
so that its relative paths (runs/...) are where a user running it in Jupyter would find
them. Settings the notebook reads from the environment (WALKTHROUGH_*) pass through.
"""
import argparse
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, *, timeout: int = 3600, cwd: Path = None) -> nbformat.NotebookNode:
    """``path``'s notebook executed (in ``cwd``, default its directory); raises on a failing cell."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=timeout, kernel_name='python3',
                   resources={'metadata': {'path': str(cwd or path.parent)}}).execute()
    return notebook


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('notebook', type=Path)
    parser.add_argument('--timeout', type=int, default=3600, help='seconds a cell may take')
    args = parser.parse_args()
    started = time.time()
    nbformat.write(execute(args.notebook, timeout=args.timeout), args.notebook)
    print(f'{args.notebook}: executed and saved in {time.time() - started:.0f} s')
