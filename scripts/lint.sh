#!/usr/bin/env bash
# make lint: clang-format (check only), clang-tidy and cppcheck over every C++/CUDA
# source in src/, kernels/, data_tools/, tests/, bench/ and plugins/ that git tracks (and new
# ones it does not ignore), and pyflakes over every Python file (src/train/model.py,
# the one export writes, included). Prints what it finds; exits 1 when anything is
# found, 2 when a tool is missing, 0 when clean. Changes no source: `clang-format -i
# FILE` fixes format; a justified clang-tidy false positive gets `// NOLINT(check): why`.
#
# clang-tidy needs the Makefile's exact flags, so the compile database
# ($LINT_BUILD/compile_commands.json) is made from `make -n` (the commands make
# would run), with CUDA=1 (the CUDA backend's host .cpp files, with the CUDA
# headers) and with CUDA=0 (the nocuda/ stubs). .cu files are not clang-tidied:
# clang 14 knows CUDA up to 11.5 and cannot parse CUDA 13's headers even with
# --cuda-host-only; nvcc compiles them with -Wall -Wextra, and
# tests/e2e/gpu_build.sh requires those warnings to be empty.
#
#   LINT_BUILD=build-lint             compile database and per-unit clang-tidy logs
#   LINT_JOBS=2                       parallel clang-tidy / cppcheck processes
#   LINT_STEPS="format tidy cppcheck python" the steps to run
#   LINT_ONLY="a.cpp b.cpp"           clang-tidy only these translation units
# The sh -c scripts below expand $f, $1, $2 in the child shell, on purpose:
# shellcheck disable=SC2016
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
build=${LINT_BUILD:-build-lint}
jobs=${LINT_JOBS:-2}
steps=" ${LINT_STEPS:-format tidy cppcheck python} "
found=0

for tool in clang-format clang-tidy cppcheck pyflakes3; do
  command -v "$tool" >/dev/null || {
    echo "lint: $tool is not installed (scripts/install-deps.sh --lint installs clang-format, clang-tidy, cppcheck, pyflakes3)"
    exit 2
  }
done

# Tracked files and new ones not ignored: a file someone just created is linted too.
mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- 'src/*.cpp' 'src/*.h' 'src/*.cu' \
  'src/*.cuh' 'kernels/*.h' 'kernels/*.cu' 'kernels/*.cuh' 'data_tools/*.cpp' 'data_tools/*.h' 'tests/*.cpp' \
  'tests/*.h' 'bench/*.cpp' 'bench/*.h' 'plugins/*.cpp' | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)

lint_format() {
  local t0=$SECONDS bad
  mapfile -t bad < <(printf '%s\0' "${sources[@]}" | xargs -0 -n 16 -P "$jobs" \
    sh -c 'for f; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done' sh | sort)
  if [ ${#bad[@]} -gt 0 ]; then
    echo "clang-format: ${#bad[@]} file(s) not formatted (clang-format -i FILE):"
    printf '  %s\n' "${bad[@]}"
    found=1
  else
    echo "clang-format: clean (${#sources[@]} files, $((SECONDS - t0)) s)"
  fi
}

# One JSON entry per `mpicxx … -c FILE.cpp -o OBJ` line of `make -n`, cut after the
# object (the CUDA backend's rule appends a redirection); CUDA=1 first, so a file both
# builds compile keeps its CUDA=1 flags. MPICXX=mpicxx: no ccache in front.
make_compile_db() {
  local db="$build/compile_commands.json"
  mkdir -p "$build"
  # Generated sources the units include (model_py.cpp: model.py as a raw string).
  make --no-print-directory MPICXX=mpicxx BUILD="$build" "$build/gen/train/model_py.inc" >/dev/null
  {
    make -nB --no-print-directory MPICXX=mpicxx CUDA=1 BUILD="$build" all 2>/dev/null
    make -nB --no-print-directory MPICXX=mpicxx CUDA=0 BUILD="$build" all 2>/dev/null
  } | grep -E '^mpicxx .* -c [^ ]+\.cpp -o ' | awk -v dir="$root" '
    {
      file = ""; cmd = $1
      for (i = 2; i <= NF; i++) {
        cmd = cmd " " $i
        if ($i == "-c") file = $(i + 1)
        if ($i == "-o") { cmd = cmd " " $(i + 1); break }
      }
      if (seen[file]++) next
      gsub(/\\/, "\\\\", cmd); gsub(/"/, "\\\"", cmd)
      printf "%s{\"directory\": \"%s\", \"file\": \"%s\", \"command\": \"%s\"}", (n++ ? ",\n" : "[\n"), dir, file, cmd
    }
    END { print (n ? "\n]" : "[]") }' >"$db.tmp" && mv "$db.tmp" "$db"
}

# add_unbuilt_units UNIT…: database entries for units the Makefile does not build
# (tests/sanitizers, tests/cluster), with the flags of an MPI test program. clang-tidy
# 14's own guess for a file missing from the database mangles .clang-tidy's ExtraArgs.
add_unbuilt_units() {
  local db="$build/compile_commands.json" ref="tests/mpi/test_dist_collectives.cpp" cmd u
  cmd=$(grep -F "\"file\": \"$ref\"" "$db" | sed 's/.*"command": "\(.*\)"}.*/\1/')
  [ -n "$cmd" ] || return 0
  for u in "$@"; do
    grep -qF "\"file\": \"$u\"" "$db" && continue
    sed -i '$d' "$db"  # the closing ]
    printf ',\n{"directory": "%s", "file": "%s", "command": "%s"}\n]\n' "$root" "$u" \
      "${cmd//$ref/$u}" >>"$db"
  done
}

lint_tidy() {
  local t0=$SECONDS units logs="$build/clang-tidy"
  make_compile_db
  if [ -n "${LINT_ONLY:-}" ]; then
    read -r -a units <<<"$LINT_ONLY"
  else
    # The Makefile's units, and those it does not build (tests/sanitizers, tests/cluster).
    mapfile -t units < <({
      grep -o '"file": "[^"]*"' "$build/compile_commands.json" | cut -d'"' -f4
      printf '%s\n' "${sources[@]}" | grep -E '^(src|data_tools|tests|bench|plugins)/.*\.cpp$' | grep -v '^src/backend/cuda/'
    } | awk '!seen[$0]++')
    add_unbuilt_units "${units[@]}"
  fi
  # The CUDA backend's host code needs the CUDA headers; without them the rest is checked.
  if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ]; then
    mapfile -t units < <(printf '%s\n' "${units[@]}" | grep -v -E '^src/backend/cuda/|^tests/unit/test_cuda_')
    echo "clang-tidy: no CUDA headers: src/backend/cuda/*.cpp and tests/unit/test_cuda_* not checked"
  fi
  rm -rf "$logs" && mkdir -p "$logs"
  # Each unit's report goes to its own file, so parallel runs do not interleave.
  printf '%s\0' "${units[@]}" | xargs -0 -n 1 -P "$jobs" sh -c '
    out="$1/$(echo "$2" | tr / _).log"
    clang-tidy -p "$0" --quiet --warnings-as-errors="*" "$2" >"$out" 2>&1 || echo "$2" >"$out.failed"' "$build" "$logs"
  if ls "$logs"/*.failed >/dev/null 2>&1; then
    # Each finding once (a header's comes once per unit that includes it), with its
    # source line and caret; the analyzer's path notes stay in the logs.
    cat "$logs"/*.log | awk '
      /^[^ ].*: (warning|error): / { show = seen[$0]++ ? 0 : 3 }
      /: note: |^[0-9]+ warnings? generated/ { show = 0 }
      show > 0 { print; show-- }'
    echo "clang-tidy: findings in $(cat "$logs"/*.failed | wc -l) of ${#units[@]} translation unit(s) (logs: $logs)"
    found=1
  else
    echo "clang-tidy: clean (${#units[@]} translation units, $((SECONDS - t0)) s)"
  fi
}

lint_cppcheck() {
  local t0=$SECONDS units
  mapfile -t units < <(printf '%s\n' "${sources[@]}" | grep -E '\.cpp$')
  # internalAstError: cppcheck 2.10 cannot parse C++20 templated lambdas ([&]<typename T>()).
  # unknownMacro: macros from headers cppcheck is not shown (GoogleTest's TEST, MPI's).
  # missingIncludeSystem: system headers are left out on purpose (fast, and not ours);
  # --library tells cppcheck what GoogleTest's macros and the POSIX/zlib calls are instead.
  if cppcheck --quiet --error-exitcode=1 --std=c++20 --language=c++ -j "$jobs" \
    --enable=warning,performance,portability --inline-suppr --suppress=internalAstError \
    --suppress=unknownMacro --suppress=missingIncludeSystem -Isrc -I. --library=googletest,posix,gnu,zlib \
    --library=scripts/cppcheck-gtest.cfg \
    --template='{file}:{line}: {severity}: {message} [{id}]' "${units[@]}" 2>&1; then
    echo "cppcheck: clean (${#units[@]} translation units, $((SECONDS - t0)) s)"
  else
    found=1
  fi
}

# Python: every tracked *.py and the Python scripts without the suffix (data_tools/plot-metrics).
lint_python() {
  local t0=$SECONDS files
  mapfile -t files < <({
    git ls-files --cached --others --exclude-standard -- '*.py'
    git ls-files --cached --others --exclude-standard -- data_tools scripts | while read -r f; do
      [ -f "$f" ] && head -1 "$f" | grep -q '^#!.*python' && echo "$f"
    done
  } | sort -u)
  if pyflakes3 "${files[@]}"; then
    echo "pyflakes: clean (${#files[@]} files, $((SECONDS - t0)) s)"
  else
    found=1
  fi
}

[[ "$steps" == *" format "* ]] && lint_format
[[ "$steps" == *" tidy "* ]] && lint_tidy
[[ "$steps" == *" cppcheck "* ]] && lint_cppcheck
[[ "$steps" == *" python "* ]] && lint_python
exit $found
