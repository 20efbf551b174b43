#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (choose the Ubuntu
# 22.04 base image; Gradescope has run apt-get update already). The zip's contents, the course,
# are in /autograder/source. It installs Python 3.11, the CPU-only torch build (PyPI's Linux
# wheel pulls CUDA libraries of several GB) and the course at requirements.lock's exact pins.
set -euo pipefail
cd /autograder/source
if ! command -v python3.11 >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv
fi
python3.11 -m venv .venv
torch="$(grep -E '^torch==' requirements.lock)"
.venv/bin/pip install --quiet --extra-index-url https://download.pytorch.org/whl/cpu \
  -c requirements.lock "${torch}+cpu"
.venv/bin/pip install --quiet -c requirements.lock ".[course]"
# once now rather than in every submission's run: matplotlib's font cache, torch's first import
.venv/bin/python -c "import matplotlib.pyplot, torch, posenc_lesson.grader.cli"
chmod +x run_autograder
# where no namespace can be made, each kernel runs as a uid of its own (posenc_lesson/grader/contain.py):
# it must pass through to the venv, and posenc-grade itself takes everyone's access to solutions/ away
chmod o+x /autograder /autograder/source
