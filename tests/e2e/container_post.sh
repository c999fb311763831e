#!/usr/bin/env bash
# ctest-timeout: 900
# The container's build and test steps, run here exactly as an image build
# runs them (Apptainer cannot be installed on this machine):
#   1. singularity/build.sh stages the sources (a stand-in `apptainer` keeps
#      the staged tree instead of building an image);
#   2. %post, taken from hpctrain.def by check-def, runs on that tree with
#      the shared installer and the build, installing into a scratch prefix;
#   3. %environment is sourced and %test runs against the installed binary;
#      then a 2-rank doctor runs under the container's MPI settings.
# To keep it cheap the staged tree gets this build directory's objects
# (timestamps kept, so make rebuilds only what changed) and one touched file,
# src/config/version.cpp, so that the commit %post passes to make must show
# up in `hpctrain --version`: a real compile and link with %post's flags.
source "$(dirname "$0")/lib.bash"
[ -x "$BUILD/hpctrain" ] && [ -f "$BUILD/libhpctrain.a" ] || skip "build hpctrain first (make)"
def="$ROOT/singularity/hpctrain.def"
version=$(cat "$ROOT/VERSION")

# 1. the staged sources, as %files would copy them
mkdir -p "$TMP/bin"
cat > "$TMP/bin/apptainer" <<'EOF'
#!/usr/bin/env bash
[ "$1" = build ] && cp -a hpctrain-src "$KEEP_STAGE" && touch "${@: -2:1}"
EOF
chmod +x "$TMP/bin/apptainer"
(cd "$TMP" && KEEP_STAGE="$TMP/src" PATH="$TMP/bin:$PATH" "$ROOT/singularity/build.sh" -o "$TMP/img.sif" >"$TMP/stage.out" 2>&1) \
  || { cat "$TMP/stage.out"; fail "staging with build.sh"; }
src="$TMP/src"
stamp="e2e-$$"
echo "$stamp" > "$src/COMMIT"
mkdir -p "$src/build/obj"
for dir in "$BUILD"/obj/*; do  # src, kernels (CUDA), data_tools; not the tests and benchmarks
  case "$(basename "$dir")" in tests|bench) ;; *) cp -a "$dir" "$src/build/obj/" ;; esac
done
cp -a "$BUILD/libhpctrain.a" "$BUILD/hpctrain" "$BUILD/hpcdata" "$src/build/"
touch "$src/src/config/version.cpp"

# 2. %post
"$PYTHON" "$ROOT/singularity/check-def" --extract post "$def" > "$TMP/post.sh"
prefix="$TMP/prefix"
rc=0
HPCTRAIN_SRC="$src" HPCTRAIN_PREFIX="$prefix" HPCTRAIN_JOBS=2 APPTAINER_LABELS="$TMP/labels" \
  timeout -k 10 800 bash "$TMP/post.sh" >"$TMP/post.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || { tail -40 "$TMP/post.out"; fail "%post exited $rc"; }
grep -q "march=x86-64-v2.*src/config/version.cpp" "$TMP/post.out" || { tail -20 "$TMP/post.out"; fail "%post did not recompile with its own ARCH_FLAGS"; }
for exe in hpctrain hpcdata fetch-mnist-sample; do [ -x "$prefix/bin/$exe" ] || fail "%post did not install $exe"; done
"$prefix/bin/hpctrain" --version | grep -q "^hpctrain $version (commit $stamp)" || fail "installed hpctrain does not carry the staged commit"
pass "%post: installer, build with the staged commit ($(grep -c -- " -c .*\.cpp -o " "$TMP/post.out") files compiled), install"

label() { sed -n "s/^org.hpctrain.$1 //p" "$TMP/labels"; }
[ "$(label version)" = "$version" ] || fail "label version: '$(label version)'"
[ "$(label commit)" = "$stamp" ] || fail "label commit: '$(label commit)'"
[ "$(label openmpi)" = "$(mpirun --version | sed -n '1s/.*) //p')" ] || fail "label openmpi: '$(label openmpi)'"
[ "$(label hdf5)" = "$(pkg-config --modversion hdf5)" ] || fail "label hdf5: '$(label hdf5)'"
if command -v nvcc >/dev/null; then
  [[ "$(label cuda)" =~ ^[0-9]+\.[0-9]+$ ]] || fail "label cuda: '$(label cuda)'"
  [[ "$(label cudnn)" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "label cudnn: '$(label cudnn)'"
  [[ "$(label nccl)" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "label nccl: '$(label nccl)'"
fi
pass "%post labels: $(tr '\n' ' ' < "$TMP/labels")"

# 3. %environment + %test, as the image runs them (/bin/sh), with the scratch prefix first on PATH
"$PYTHON" "$ROOT/singularity/check-def" --extract environment "$def" > "$TMP/env.sh"
"$PYTHON" "$ROOT/singularity/check-def" --extract test "$def" > "$TMP/test.sh"
rc=0
TMPDIR="$TMP" sh -c '. "$1"; PATH="$2:$PATH"; export PATH; exec sh "$3"' sh "$TMP/env.sh" "$prefix/bin" "$TMP/test.sh" \
  >"$TMP/test.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$TMP/test.out"; fail "%test exited $rc"; }
grep -q "^hpctrain $version (commit $stamp)" "$TMP/test.out" || fail "%test: --version"
grep -q "^doctor: ready" "$TMP/test.out" || { cat "$TMP/test.out"; fail "%test: doctor --local"; }
pass "%environment + %test"

# The container's Open MPI / PMIx settings must not break a multi-rank run.
rc=0
(
  # shellcheck source=/dev/null
  . "$TMP/env.sh"
  PATH="$prefix/bin:$PATH"
  HPC_TEST_TIMEOUT=120 run_mpi 2 hpctrain doctor --dist.bucket_mb 1 --run.dir "$TMP/run"
) >"$TMP/mpi.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$TMP/mpi.out"; fail "2-rank doctor under the container environment exited $rc"; }
grep -q "environment (rank 0):.* PMIX_MCA_gds=hash" "$TMP/mpi.out" || { cat "$TMP/mpi.out"; fail "the ranks did not see %environment"; }
pass "2-rank doctor with %environment's MPI settings"
