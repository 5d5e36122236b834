#!/usr/bin/env bash
# A virtual environment for sentence-transformers' own OpenVINO backend, which
# experiments/benchmarks/openvino_library.py measures the package's against:
#     bash scripts/openvino_library_env.sh        # makes .venv-openvino-st (git-ignored)
# optimum-intel, which that backend needs, is at 2.2.0 its newest and asks for transformers < 5.6;
# the package asks for 5.24 or newer, so the two cannot share the project's .venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
env=.venv-openvino-st
if [ ! -x "$env/bin/python" ]; then
  python3 -m venv "$env"
fi
"$env/bin/pip" install -q -c constraints.txt 'optimum-intel[openvino]==2.2.0' \
  'sentence-transformers' 'torch==2.13.0'
# optimum-intel asks for torchvision, whose wheel here is built against another torch: with it
# installed, transformers fails to import (operator torchvision::nms does not exist), and text
# encoders need none of it
"$env/bin/pip" uninstall -q -y torchvision
"$env/bin/python" -c 'import optimum.intel, sentence_transformers, transformers
print("sentence-transformers", sentence_transformers.__version__, "transformers",
      transformers.__version__)'
