#!/usr/bin/env bash
# The wheels a lent GPU's image lacks, for its Python, into .whl/ (git-ignored). The image has torch, torchvision,
# numpy, scipy, opencv, matplotlib, PyYAML, safetensors and huggingface_hub (the device tool's KINDS.md lists it)
# but not these, nor a timm new enough for the export's config, and its setuptools may be too old to build this
# project; nothing can be fetched there. Carry .whl with the
# call and install it first, as docs/performance.md's "A GPU session's script" shows.
# usage: bash benchmarks/gpu_wheels.sh [PYTHON_VERSION, default 3.12, the image's]
set -euo pipefail
cd "$(dirname "$0")/.."
python_version="${1:-3.12}"
packages=(
    kornia==0.9.0 kornia_rs==0.2.0
    albumentations==2.0.8 albucore==0.0.24 simsimd==6.5.16 stringzilla==5.3.2
    pydantic==2.13.4 pydantic_core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
    click==8.5.1 cloup==4.0.0 webdataset==1.0.2 braceexpand==0.1.7 timm==1.0.31
    setuptools==80.9.0  # the build of `pip install -e . --no-build-isolation`: pyproject.toml asks for >=77
)
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" --platform any -d .whl "${packages[@]}"
du -sh .whl
