#!/usr/bin/env bash
# ctest-timeout: 120
# The container definition without Apptainer (not installable here):
# singularity/check-def accepts singularity/hpctrain.def and rejects broken
# variants, each with a FILE:LINE message naming the fault; the file does
# what the project needs (installer, build, runscript, %test, labels); and
# singularity/build.sh, run against a stand-in `apptainer`, stages the
# sources as %files expects, uses --fakeroot only when not root, and names
# the image after the version.
source "$(dirname "$0")/lib.bash"
def="$ROOT/singularity/hpctrain.def"
check=("$PYTHON" "$ROOT/singularity/check-def")

"${check[@]}" "$def" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "check-def rejects the real definition file"; }
pass "check-def accepts it: $(cat "$TMP/out")"

# reject NAME REGEX: the variant $TMP/NAME.def must fail with a message matching REGEX.
reject() {
  local name=$1 pattern=$2 rc=0
  ! cmp -s "$def" "$TMP/$name.def" || fail "$name: the variant is the real file (its sed did not apply)"
  "${check[@]}" "$TMP/$name.def" >"$TMP/out" 2>&1 || rc=$?
  [ $rc -eq 1 ] || { cat "$TMP/out"; fail "$name: check-def exited $rc, expected 1"; }
  grep -Eq -- "$pattern" "$TMP/out" || { cat "$TMP/out"; fail "$name: no message matching '$pattern'"; }
  pass "rejects $name: $(head -1 "$TMP/out" | sed "s|$TMP/||")"
}
line_of() { grep -n -m1 -- "$1" "$def" | cut -d: -f1; }

sed 's/^%runscript$/%runscirpt/' "$def" > "$TMP/unknown-section.def"
reject unknown-section "unknown-section.def:$(line_of '^%runscript'): unknown section %runscirpt"
grep -v '^Bootstrap:' "$def" > "$TMP/no-bootstrap.def"
reject no-bootstrap "no Bootstrap: header|must start with Bootstrap"
awk '/^Bootstrap:/ { b = $0; next } /^From:/ { print; print b; next } { print }' "$def" > "$TMP/bootstrap-second.def"
reject bootstrap-second "must start with Bootstrap \(found 'from' first\)"
sed 's/^Bootstrap: docker$/Bootstrap: dockr/' "$def" > "$TMP/bad-agent.def"
reject bad-agent "unknown bootstrap agent 'dockr'"
sed 's/^From:/Form:/' "$def" > "$TMP/bad-key.def"
reject bad-key "unknown header keyword 'form'"
# A syntax error in %post: the message points at the broken line of the file.
post_cd=$(line_of '^    cd "\$src"$')
sed 's/^    cd "\$src"$/    cd "$src" \&\& if then/' "$def" > "$TMP/post-syntax.def"
reject post-syntax "post-syntax.def:$post_cd: %post \(bash -n\): .*syntax error"
# %environment runs under /bin/sh: a bash array is a syntax error there.
sed 's/^    export PMIX_MCA_gds=.*/    gds=(hash)/' "$def" > "$TMP/env-bashism.def"
if command -v dash >/dev/null; then reject env-bashism "%environment \(dash -n\)"; fi
sed 's/^    org.hpctrain.base-image .*/    org.hpctrain.base-image/' "$def" > "$TMP/label-no-value.def"
reject label-no-value "label 'org.hpctrain.base-image' has no value"
sed "s|^    hpctrain-src /opt/hpctrain-src$|    hpctrain-src /opt/hpctrain-src extra|" "$def" > "$TMP/files-3.def"
reject files-3 "%files line has 3 fields"
if command -v shellcheck >/dev/null; then
  sed 's/^    exec hpctrain "\$@"$/    exec hpctrain $@/' "$def" > "$TMP/unquoted.def"
  reject unquoted "%runscript \(shellcheck\): .*SC2068"
  "${check[@]}" --no-shellcheck "$TMP/unquoted.def" >/dev/null || fail "--no-shellcheck still ran shellcheck"
fi

# ---- what the project needs from the file -------------------------------------------
extract() { "${check[@]}" --extract "$1" "$def"; }
from=$(sed -n 's/^From: *//p' "$def")
[[ "$from" =~ ^nvidia/cuda:13\.[0-9]+\.[0-9]+-cudnn-devel-ubuntu[0-9.]+$ ]] || fail "From '$from' is not a pinned CUDA 13 cuDNN devel image"
grep -q "^    org.hpctrain.base-image $from$" "$def" || fail "base-image label differs from From"
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  local_cuda=$("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  [ "$local_cuda" = 13 ] || echo "note: this machine builds with CUDA $local_cuda, the image with ${from#nvidia/cuda:}"
fi
head -1 <(grep -n '^%post' "$def") | grep -q -- '-c /bin/bash' || fail "%post must run under bash (it uses arrays)"
extract post | grep -q '^ *scripts/install-deps.sh --no-test$' || fail "%post does not call the shared installer"
extract post | grep -q 'make .*build/hpctrain build/hpcdata' || fail "%post does not build hpctrain"
[ "$(extract runscript | sed '/^ *$/d')" = '    exec hpctrain "$@"' ] || fail "%runscript must exec hpctrain \"\$@\""
extract test | grep -q '^ *hpctrain --version$' || fail "%test lacks hpctrain --version"
extract test | grep -q '^ *hpctrain doctor --local' || fail "%test lacks hpctrain doctor --local"
for v in HDF5_USE_FILE_LOCKING OMPI_MCA_btl_vader_single_copy_mechanism PMIX_MCA_gds PATH; do
  extract environment | grep -q "export $v=" || fail "%environment does not set $v"
done
for label in version commit cuda cudnn nccl openmpi hdf5; do
  extract post | grep -q "echo \"org.hpctrain.$label " || fail "%post writes no org.hpctrain.$label label"
done
extract help | grep -q 'srun --mpi=pmix singularity exec --nv' || fail "%help lacks the srun usage"
extract help | grep -q 'mpirun -np' || fail "%help lacks the mpirun usage"
pass "the definition installs, builds, runs and tests hpctrain"

# ---- build.sh against a stand-in apptainer ------------------------------------------------
mkdir -p "$TMP/bin"
cat > "$TMP/bin/apptainer" <<'EOF'
#!/usr/bin/env bash
# Stand-in: records the call and what the build context holds.
if [ "$1" = inspect ]; then echo "org.hpctrain.version stub"; exit 0; fi
{ echo "cwd=$PWD"; echo "args=$*"; } > "$STUB_LOG"
[ -f hpctrain-src/Makefile ] && [ -f hpctrain-src/scripts/install-deps.sh ] && [ -f hpctrain-src/COMMIT ] || exit 9
[ ! -e hpctrain-src/build ] && [ ! -e hpctrain-src/.git ] || exit 8
cp hpctrain-src/COMMIT "$STUB_LOG.commit"
touch "${@: -2:1}"
EOF
chmod +x "$TMP/bin/apptainer"
export STUB_LOG="$TMP/stub.log"
version=$(cat "$ROOT/VERSION")
(cd "$TMP" && PATH="$TMP/bin:$PATH" "$ROOT/singularity/build.sh" >"$TMP/build.out" 2>&1) || { cat "$TMP/build.out"; fail "build.sh with a stand-in apptainer"; }
[ -f "$TMP/hpctrain-$version.sif" ] || fail "image is not named hpctrain-$version.sif"
grep -q "^args=build $TMP/hpctrain-$version.sif $def$" "$STUB_LOG" || { cat "$STUB_LOG"; fail "build.sh's apptainer call (as root: no --fakeroot)"; }
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  grep -q "^$(git -C "$ROOT" rev-parse --short=12 HEAD)" "$STUB_LOG.commit" || fail "COMMIT does not hold the git commit"
fi
# Not root: --fakeroot.
printf '#!/bin/sh\n[ "$1" = -u ] && echo 1000 && exit 0\nexec /usr/bin/id "$@"\n' > "$TMP/bin/id"
chmod +x "$TMP/bin/id"
(cd "$TMP" && PATH="$TMP/bin:$PATH" "$ROOT/singularity/build.sh" -o "$TMP/x.sif" >"$TMP/build.out" 2>&1) || { cat "$TMP/build.out"; fail "build.sh -o"; }
grep -q "^args=build --fakeroot $TMP/x.sif $def$" "$STUB_LOG" || { cat "$STUB_LOG"; fail "not root: --fakeroot expected"; }
pass "build.sh: staged sources, image name, --fakeroot only when not root"
