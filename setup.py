from pathlib import Path

from setuptools import find_packages, setup

setup(
    name='pyterrier-selfsup',
    version='0.1.0',
    description=('Self-supervised neural retrieval for PyTerrier: adapt retrievers to a corpus '
                 'without relevance labels'),
    long_description=Path(__file__).with_name('README.md').read_text(encoding='utf8'),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    license_files=['LICENSE'],
    classifiers=[
        'Development Status :: 3 - Alpha',
        'Intended Audience :: Science/Research',
        'Operating System :: OS Independent',
        'Programming Language :: Python :: 3',
        'Programming Language :: Python :: 3.10',
        'Programming Language :: Python :: 3.11',
        'Programming Language :: Python :: 3.12',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
        'Topic :: Text Processing :: Indexing',
    ],
    packages=find_packages(include=['pyterrier_selfsup', 'pyterrier_selfsup.*']),
    package_data={'pyterrier_selfsup.harness.judging': ['templates/*.html', 'static/*']},
    python_requires='>=3.10',
    install_requires=[
        'torch>=2.6,<3',  # pad_sequence(padding_side=...)
        'transformers>=5.24',  # the attention interfaces ACROBArT plugs into; forward(cache=)
        # Router: an untied dual encoder exported as a query and a document route
        'sentence-transformers>=5.0',
        'pyterrier>=1.0',
        'python-terrier>=1.0',
        'pyterrier-pisa>=0.4.9',
        'pyterrier-dr>=0.8',
        'pyterrier-caching>=0.5',
        'ir-datasets>=0.5.9',
        'ir-measures>=0.3.7',
        'gguf>=0.10',
        # transformers needs it to load a GGUF checkpoint (the SmolLM2 generator)
        'accelerate>=1.0',
        'matplotlib>=3.7',
        'pandas>=2.0',
        'numpy>=1.24',
        'more-itertools>=8.0',
        # the judging page (selfsup judge): its application, templates and server
        'flask>=3.0',
    ],
    # FAISS comes in two builds that install the same `faiss` module, so it is
    # chosen by an extra rather than listed above: `.[cpu]` (what every command
    # in the README installs) or `.[gpu]` on CUDA machines. The CPU extra brings
    # OpenVINO as well, the DualEncoder's backend='openvino' (CPU inference), and
    # NNCF, which quantises it for backend='openvino-int8'.
    extras_require={
        'cpu': ['faiss-cpu>=1.8', 'openvino>=2024.0', 'nncf>=2.12'],
        'gpu': ['faiss-gpu-cu12>=1.8'],
        # (nbclient: the walkthrough notebook; pytest-xdist: `make test` runs two workers; ruff:
        # the linter `make test` runs first; selenium: the judging page's test drives Debian's
        # headless Chromium, which .ci/run installs)
        'test': ['pytest>=7', 'pytest-xdist>=3', 'nbclient>=0.10', 'nbformat>=5.9', 'ipykernel>=6',
                 'ruff>=0.6', 'selenium>=4.20'],
    },
    entry_points={
        'console_scripts': ['selfsup = pyterrier_selfsup.harness.cli:main'],
        # so that pt.Artifact.load(path) reopens a token index, as pyterrier-dr registers its
        # FlexIndex
        'pyterrier.artifact': [
            'token_index.reatt = pyterrier_selfsup.retrieval.token_index:ReAttIndex'],
    },
)
