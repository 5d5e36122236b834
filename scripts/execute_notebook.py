"""Executes a notebook in place, saving its outputs (what examples/walkthrough.ipynb shows):

    python scripts/execute_notebook.py examples/walkthrough.ipynb [--timeout S]

The kernel is this Python (the project's environment) and runs in the notebook's directory,
so that its relative paths (runs/...) are where a user running it in Jupyter would find
them. Settings the notebook reads from the environment (WALKTHROUGH_*) pass through.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = 'pyterrier-selfsup-this-python'


def execute(path: Path, *, timeout: int = 3600, cwd: Path = None) -> nbformat.NotebookNode:
    """``path``'s notebook executed (in ``cwd``, default its directory) by a kernel running
    this Python (not whatever a user's ``python3`` kernelspec names); raises on a failing cell."""
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as specs:
        spec = Path(specs) / 'kernels' / KERNEL
        spec.mkdir(parents=True)
        (spec / 'kernel.json').write_text(json.dumps({
            'argv': [sys.executable, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
            'display_name': 'Python (pyterrier-selfsup)', 'language': 'python'}))
        previous = os.environ.get('JUPYTER_PATH')
        os.environ['JUPYTER_PATH'] = os.pathsep.join([specs] + ([previous] if previous else []))
        try:
            NotebookClient(notebook, timeout=timeout, kernel_name=KERNEL,
                           resources={'metadata': {'path': str(cwd or path.parent)}}).execute()
        finally:
            if previous is None:
                del os.environ['JUPYTER_PATH']
            else:
                os.environ['JUPYTER_PATH'] = previous
    notebook.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                       'language': 'python'}
    return notebook


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('notebook', type=Path)
    parser.add_argument('--timeout', type=int, default=3600, help='seconds a cell may take')
    args = parser.parse_args()
    started = time.time()
    nbformat.write(execute(args.notebook, timeout=args.timeout), args.notebook)
    print(f'{args.notebook}: executed and saved in {time.time() - started:.0f} s')
