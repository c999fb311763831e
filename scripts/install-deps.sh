#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages hpctrain needs, only those missing.
# The one list of packages: `make deps`, .ci/run and the Singularity %post all call this.
#
#   scripts/install-deps.sh            build + run + test dependencies
#   scripts/install-deps.sh --slurm    also Slurm and munge (the Slurm end-to-end tests)
#   scripts/install-deps.sh --bench    also PyTorch and matplotlib (make bench)
#   scripts/install-deps.sh --lint     also clang-format, clang-tidy and cppcheck (make lint)
#   scripts/install-deps.sh --fuzz     also clang and its runtimes with libFuzzer (make fuzz)
#   scripts/install-deps.sh --no-test  only what building and running need (the container image)
set -euo pipefail

packages=(
  build-essential pkg-config make git
  libopenmpi-dev openmpi-bin            # MPI: rank discovery, CPU AllReduce
  libhdf5-dev hdf5-tools                # datasets and checkpoints
  libboost-program-options-dev          # command line / INI / environment
  libopenblas-dev                       # CPU GEMM
  libdnnl-dev                           # CPU convolutions (oneDNN; optional: im2col + GEMM without it)
  zlib1g-dev                            # gzipped MNIST IDX files, checkpoint CRC-32
  libpcre2-dev libsentencepiece-dev     # tokenizers: pre-tokenizer regexes, SentencePiece .model files
  nlohmann-json3-dev                    # JSON: tokenizer.json, safetensors headers, config.json, the shard index
  libjpeg-dev libturbojpeg0-dev libpng-dev  # image folders: JPEG (libjpeg-turbo) and PNG decoding
)
test_packages=(
  cmake                                 # ctest runs `make test`
  libgtest-dev                          # unit tests
  python3 python3-numpy python3-h5py    # cross-checks of files written by hpcdata
  python3-sentencepiece                 # the SentencePiece reference ids (tests/e2e/tokenizer_sentencepiece.sh)
)
# Wanted but not everywhere (older Ubuntu has no libonnx-dev): installed when
# the distribution has them, a warning otherwise; what needs them is skipped.
optional=(libonnx-dev libprotobuf-dev)  # hpctrain export --format onnx
optional_tests=(python3-onnx python3-torch python3-pil python3-torchvision)  # onnx.checker, the PyTorch cross-checks (export, gpt, optimizers), PIL and torchvision (image folders, ResNet-50)
with_tests=1
for arg in "$@"; do
  case "$arg" in
    --slurm) packages+=(slurm-wlm munge) ;;
    --bench) packages+=(python3-torch python3-matplotlib python3-pil python3-torchvision) ;;
    --lint) packages+=(clang-format clang-tidy cppcheck pyflakes3) ;;
    --fuzz) packages+=(clang libclang-rt-dev) ;;  # libFuzzer and clang's sanitizer runtimes
    --no-test) with_tests=0 ;;
    *) echo "install-deps.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
[ "$with_tests" -eq 1 ] && packages+=("${test_packages[@]}") && optional+=("${optional_tests[@]}")

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
else
  echo "install-deps.sh: not a Debian/Ubuntu system; install the equivalents of: ${packages[*]}" >&2
  exit 0
fi
missing_optional=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing_optional+=("$p")
done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]} ${missing_optional[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists once when they are missing or older than a day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  $sudo apt-get update -q
fi
[ ${#missing[@]} -eq 0 ] || $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
if [ ${#missing_optional[@]} -gt 0 ]; then
  $sudo apt-get install -y -q --no-install-recommends "${missing_optional[@]}" ||
    echo "warning: could not install ${missing_optional[*]} (ONNX export and its test are left out)" >&2
fi
