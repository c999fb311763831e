#!/usr/bin/env bash
# make bench / make bench-quick: see bench/run.py. Installs PyTorch and
# matplotlib (Debian packages) first when they are missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --bench
exec /usr/bin/python3 "$root/bench/run.py" "$@"
