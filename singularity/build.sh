#!/usr/bin/env bash
# Builds the hpctrain container image with Apptainer (or SingularityCE).
#
#   singularity/build.sh                     → ./hpctrain-VERSION.sif
#   singularity/build.sh -o /path/img.sif    → another name
#   singularity/build.sh -- --sandbox ...    → options passed on to `apptainer build`
#
# Steps: check the definition file (singularity/check-def); stage a clean
# copy of the sources (tracked files and new ones git does not ignore: no
# build/ directory, no data) as hpctrain-src/ with the commit in
# hpctrain-src/COMMIT, which is what %files and %post expect; build from the
# staging directory, with --fakeroot when not root; print the labels.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
def="$root/singularity/hpctrain.def"
version=$(cat "$root/VERSION" 2>/dev/null || echo 0.0.0)
out="$PWD/hpctrain-$version.sif"

while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$(realpath -m "$2"); shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (options after -- go to 'apptainer build')" >&2; exit 2 ;;
  esac
done

tool=$(command -v apptainer || command -v singularity || true)
if [ -z "$tool" ]; then
  echo "build.sh: neither apptainer nor singularity is installed: see https://apptainer.org/docs/admin/main/installation.html" >&2
  exit 2
fi

if command -v python3 >/dev/null 2>&1; then
  python3 "$root/singularity/check-def" "$def"
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
src="$stage/hpctrain-src"
mkdir -p "$src"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git -C "$root" rev-parse --short=12 HEAD)
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
  # Tracked files still present, and new files git does not ignore.
  (cd "$root" && git ls-files -co --exclude-standard -z) |
    while IFS= read -r -d '' f; do
      [ -e "$root/$f" ] && printf '%s\0' "$f"
    done | (cd "$root" && xargs -0 -r cp -p --parents -t "$src")
else
  commit=unknown
  tar -C "$root" --exclude=./build --exclude=./.git -cf - . | tar -C "$src" -xf -
fi
echo "$commit" > "$src/COMMIT"

fakeroot=()
[ "$(id -u)" -eq 0 ] || fakeroot=(--fakeroot)
echo "building $out with $(basename "$tool")${fakeroot:+ ${fakeroot[*]}} (hpctrain $version, commit $commit)"
(cd "$stage" && "$tool" build "${fakeroot[@]}" "$@" "$out" "$def")
"$tool" inspect --labels "$out" 2>/dev/null | grep -i hpctrain || true
echo "built $out"
