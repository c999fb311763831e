# hpctrain — one flat Makefile.
#
#   make            build build/hpctrain, build/hpcdata and the test binaries
#   make deps       install missing Debian/Ubuntu packages (scripts/install-deps.sh)
#   make demo       deps + build + MNIST sample + train with 2 MPI ranks
#   make test       deps + build + the whole suite under CTest
#   make bench      benchmarks (bench/), never part of make test
#   make lint       clang-format check, clang-tidy, cppcheck
#
# Overrides: CUDA=0|1, CUDA_HOME, CUDA_ARCH ("80 90"), ARCH_FLAGS, MPICXX, BUILD.

# `make` alone builds everything (the version rules below would otherwise be the first goal).
.DEFAULT_GOAL := all

BUILD      ?= build
FUZZ_BUILD ?= build-fuzz
MPICXX     ?= mpicxx
CUDA_HOME  ?= /usr/local/cuda
CUDA_ARCH  ?= 80 90
NVCC       ?= $(CUDA_HOME)/bin/nvcc
PYTHON     ?= /usr/bin/python3
# Portable by default: x86-64-v3 (AVX2, FMA) where the build machine has it.
# Containers meant for mixed clusters should pass ARCH_FLAGS=-march=x86-64-v2.
ARCH_FLAGS ?= $(if $(shell grep -m1 -o avx2 /proc/cpuinfo 2>/dev/null),-march=x86-64-v3,)

# ---- detection ------------------------------------------------------------
have = $(if $(1),✓,✗)
MPI_CFLAGS  := $(shell $(MPICXX) --showme:compile 2>/dev/null)
MPI_LIBS    := $(shell $(MPICXX) --showme:link 2>/dev/null)
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null)
HDF5_LIBS   := $(shell pkg-config --libs hdf5 2>/dev/null)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null)
BOOST_PO    := $(wildcard /usr/include/boost/program_options.hpp)
# Tokenizers (src/text/): PCRE2 for the pre-tokenizer regexes, libsentencepiece; nlohmann's JSON
# (tokenizer.json, safetensors headers, config.json, the shard index).
PCRE2_LIBS  := $(shell pkg-config --libs libpcre2-8 2>/dev/null)
# libsentencepiece goes only into a plugin (src/text/sentencepiece_api.h says why).
SPM_LIBS    := $(wildcard /usr/lib/*/libsentencepiece.so /usr/lib/libsentencepiece.so)
JSON_H      := $(wildcard /usr/include/nlohmann/json.hpp)
GTEST       := $(wildcard /usr/include/gtest/gtest.h)
# Image folders (hpcdata pack --from image-folder, the loader's decoding): libjpeg-turbo's
# libjpeg API and TurboJPEG, and libpng.
IMAGE_LIBS  := $(and $(wildcard /usr/include/jpeglib.h),$(wildcard /usr/include/turbojpeg.h),$(shell pkg-config --exists libpng && echo png))
HAVE_NVCC   := $(wildcard $(NVCC))
# oneDNN (Debian libdnnl-dev): the CPU convolutions; without it they run on im2col + GEMM.
DNNL_HOME   ?= /usr
HAVE_DNNL   := $(wildcard $(DNNL_HOME)/include/oneapi/dnnl/dnnl.hpp)
DNNL        ?= $(if $(HAVE_DNNL),1,0)
CUDA        ?= $(if $(HAVE_NVCC),1,0)
GIT_COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
VERSION     := $(shell cat VERSION 2>/dev/null || echo 0.0.0)

# -Wno-restrict: GCC 12 false positive on std::string concatenation (GCC bug 105329).
WARN     := -Wall -Wextra -Wno-restrict
CPPFLAGS := -Isrc -I. $(MPI_CFLAGS) $(HDF5_CFLAGS) $(BLAS_CFLAGS) \
            -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1
# The version strings go into one file (config/version.cpp: hpctrain_version(),
# hpctrain_commit()), so a new commit does not change every object's command line
# (and ccache keeps its hits).
VERSION_DEFS := -DHPCTRAIN_VERSION='"$(VERSION)"' -DHPCTRAIN_COMMIT='"$(GIT_COMMIT)"'
VERSION_OBJS := $(BUILD)/obj/src/config/version.o $(FUZZ_BUILD)/obj/src/config/version.o
$(VERSION_OBJS): CPPFLAGS += $(VERSION_DEFS)
# ...and that file is rebuilt when the commit changes: the stamp is rewritten
# only when its text differs, so an unchanged commit rebuilds nothing.
$(VERSION_OBJS): $(BUILD)/version.stamp
$(BUILD)/version.stamp: version-check
	@mkdir -p $(@D)
	@echo '$(VERSION) $(GIT_COMMIT)' | cmp -s - $@ || echo '$(VERSION) $(GIT_COMMIT)' > $@
.PHONY: version-check
version-check:
# -fno-math-errno: sqrt/exp set no errno, so loops that call them vectorise (no other
# IEEE semantics change: no -ffast-math, results stay bitwise reproducible).
CXXFLAGS ?= -O3 -g -fno-math-errno $(ARCH_FLAGS)
CXXFLAGS += -std=c++20 -pthread $(WARN) -MMD -MP
LDLIBS   := $(MPI_LIBS) $(HDF5_LIBS) $(BLAS_LIBS) -lboost_program_options -lz $(PCRE2_LIBS) -lturbojpeg -ljpeg -lpng -ldl -pthread
# ONNX export (hpctrain export --format onnx) with Debian's libonnx-dev, whose
# generated headers need libprotobuf-dev; without them the build works and
# that format is a one-line error. Only export_onnx.cpp sees the define.
ONNX_H      := $(and $(wildcard /usr/include/onnx/onnx-ml.pb.h),$(wildcard /usr/include/google/protobuf/message.h))
ifneq ($(ONNX_H),)
  LDLIBS += -lonnx_proto -lprotobuf
endif

# ---- sources --------------------------------------------------------------
# A folder's cuda/ holds its CUDA code, nocuda/ the CPU-only build's stand-ins (backend, dist).
ALL_SRC       := $(shell find src -name '*.cpp' | sort)
NOCUDA_SRC    := $(shell find src -path '*/nocuda/*' -name '*.cpp' | sort)
CUDA_HOST_SRC := $(shell find src -path '*/cuda/*' -name '*.cpp' | sort)
LIB_SRC := $(filter-out src/main.cpp $(NOCUDA_SRC),$(ALL_SRC))
ifeq ($(CUDA),1)
  CU_SRC    := $(shell find src kernels -name '*.cu' 2>/dev/null | sort)
  CPPFLAGS  += -I$(CUDA_HOME)/include -DHPCTRAIN_CUDA=1
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcudnn -lnccl
  NVCCFLAGS := -O3 -std=c++20 $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
               -Xcompiler "-Wall -Wextra" --expt-relaxed-constexpr
else
  # Host code of the CUDA backend needs the CUDA headers; the stubs in nocuda/ replace it.
  LIB_SRC   := $(filter-out $(CUDA_HOST_SRC),$(LIB_SRC)) $(NOCUDA_SRC)
endif
# backend/cpu/onednn/ (oneDNN convolutions) or backend/cpu/noonednn/ (none: the layer lowers).
ONEDNN_SRC   := $(shell find src -path '*/onednn/*' -name '*.cpp' | sort)
NOONEDNN_SRC := $(shell find src -path '*/noonednn/*' -name '*.cpp' | sort)
ifeq ($(DNNL),1)
  LIB_SRC := $(filter-out $(NOONEDNN_SRC),$(LIB_SRC))
  LDLIBS  += $(if $(filter /usr,$(DNNL_HOME)),,-L$(DNNL_HOME)/lib -Wl,-rpath,$(DNNL_HOME)/lib) -ldnnl -lgomp
  $(ONEDNN_SRC:%.cpp=$(BUILD)/obj/%.o): CPPFLAGS += $(if $(filter /usr,$(DNNL_HOME)),,-I$(DNNL_HOME)/include)
  # bench/bench_cpu.cpp compares oneDNN's matmul with OpenBLAS (only the bench objects see the macro).
  $(BUILD)/obj/bench/%.o: CPPFLAGS += -DHPCTRAIN_DNNL=1 $(if $(filter /usr,$(DNNL_HOME)),,-I$(DNNL_HOME)/include)
else
  LIB_SRC := $(filter-out $(ONEDNN_SRC),$(LIB_SRC))
endif
LIB_OBJ  := $(LIB_SRC:%.cpp=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
LIB      := $(BUILD)/libhpctrain.a
TOOL_SRC := $(shell find data_tools -name '*.cpp' | sort)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.cpp))
TEST_BIN := $(TEST_SRC:tests/unit/%.cpp=$(BUILD)/tests/%)
# MPI test programs: their own main() (MPI start-up), run under mpirun by tests/e2e/dist_*.sh.
MPI_TEST_SRC := $(sort $(wildcard tests/mpi/test_*.cpp))
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/mpi/%.cpp=$(BUILD)/tests/mpi/%)
BENCH_SRC:= $(sort $(wildcard bench/*.cpp))
BENCH_BIN:= $(BENCH_SRC:bench/%.cpp=$(BUILD)/bench/%)
BINS     := $(BUILD)/hpctrain $(BUILD)/hpcdata
# The SentencePiece plugin (plugins/sentencepiece.cpp), loaded at run time from beside the binaries.
SPM_PLUGIN := $(BUILD)/libhpctrain-sentencepiece.so

.PHONY: all deps check-deps demo test bench bench-quick lint clean summary
# Test and bench objects are intermediates of pattern rules: keep them, or every relink after a
# library change recompiles every test.
.SECONDARY: $(patsubst %.cpp,$(BUILD)/obj/%.o,$(TEST_SRC) $(MPI_TEST_SRC) $(BENCH_SRC))
# A failed link or compile must not leave a truncated file that make then calls up to date.
.DELETE_ON_ERROR:
all: check-deps summary $(BINS) $(TEST_BIN) $(MPI_TEST_BIN) $(BENCH_BIN)

summary:
	@echo "hpctrain $(VERSION) ($(GIT_COMMIT)) build summary:"
	@echo "  $(call have,$(ONNX_H)) ONNX export (libonnx-dev + libprotobuf-dev)"
	@echo "  $(call have,$(MPI_LIBS)) MPI ($(MPICXX))   $(call have,$(HDF5_LIBS)) HDF5   $(call have,$(BLAS_LIBS)) OpenBLAS   $(call have,$(BOOST_PO)) Boost.Program_options   $(call have,$(GTEST)) GoogleTest   $(call have,$(IMAGE_LIBS)) JPEG/PNG"
	@echo "  $(call have,$(PCRE2_LIBS)) PCRE2   $(call have,$(SPM_LIBS)) SentencePiece   $(call have,$(JSON_H)) nlohmann-json (tokenizers, safetensors, config.json)"
	@echo "  $(if $(filter 1,$(CUDA)),✓ CUDA ($(NVCC), arch $(CUDA_ARCH)),✗ CUDA (CPU-only build))   ARCH_FLAGS=$(ARCH_FLAGS)"
	@echo "  $(if $(filter 1,$(DNNL)),✓ oneDNN (CPU convolutions, large float32 GEMMs),✗ oneDNN (CPU convolutions on the im2col + GEMM fallback: install libdnnl-dev or run 'make deps'))"

# One line naming the missing package, instead of a page of compiler errors.
check-deps:
	@$(if $(MPI_LIBS),,echo "missing MPI: install Open MPI (Debian: libopenmpi-dev openmpi-bin) or run 'make deps'"; exit 2)
	@$(if $(HDF5_LIBS),,echo "missing HDF5: install libhdf5-dev (or run 'make deps')"; exit 2)
	@$(if $(BLAS_LIBS),,echo "missing OpenBLAS: install libopenblas-dev (or run 'make deps')"; exit 2)
	@$(if $(BOOST_PO),,echo "missing Boost.Program_options: install libboost-program-options-dev (or run 'make deps')"; exit 2)
	@$(if $(GTEST),,echo "missing GoogleTest: install libgtest-dev (or run 'make deps')"; exit 2)
	@$(if $(PCRE2_LIBS),,echo "missing PCRE2: install libpcre2-dev (or run 'make deps')"; exit 2)
	@$(if $(SPM_LIBS),,echo "missing SentencePiece: install libsentencepiece-dev (or run 'make deps')"; exit 2)
	@$(if $(JSON_H),,echo "missing nlohmann-json: install nlohmann-json3-dev (or run 'make deps')"; exit 2)
	@$(if $(IMAGE_LIBS),,echo "missing libjpeg-turbo or libpng: install libjpeg-dev libturbojpeg0-dev libpng-dev (or run 'make deps')"; exit 2)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/src/train/export_onnx.o: CPPFLAGS += $(if $(ONNX_H),-DHPCTRAIN_ONNX=1 -DONNX_ML=1 -DONNX_NAMESPACE=onnx)

# src/train/model.py (the model.py of `hpctrain export --format torch`) stays a Python file; its
# text reaches model_py.cpp as a raw string literal made here (tests/e2e/model_py.sh checks
# that the delimiter never occurs in it).
$(BUILD)/gen/train/model_py.inc: src/train/model.py
	@mkdir -p $(@D)
	@{ printf 'R"HPCTRAIN_PY('; cat $<; printf ')HPCTRAIN_PY"\n'; } > $@
$(BUILD)/obj/src/train/model_py.o: $(BUILD)/gen/train/model_py.inc
$(BUILD)/obj/src/train/model_py.o: CPPFLAGS += -I$(BUILD)/gen

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(MPICXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# CUDA objects keep their compiler diagnostics in OBJECT.warn as well as
# showing them: tests/e2e/gpu_build.sh requires every one of them to be empty
# (the CUDA build compiles cleanly with warnings on), at no extra compile cost.
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) -MMD -MP -c $< -o $@ 2> $@.warn || { cat $@.warn >&2; exit 1; }
	@cat $@.warn >&2

$(BUILD)/obj/src/backend/cuda/%.o: src/backend/cuda/%.cpp
	@mkdir -p $(@D)
	$(MPICXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@ 2> $@.warn || { cat $@.warn >&2; exit 1; }
	@cat $@.warn >&2

# Rebuilt from scratch: a member whose source was renamed or removed must not linger.
$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/hpctrain: $(BUILD)/obj/src/main.o $(LIB) | $(SPM_PLUGIN)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/hpcdata: $(TOOL_SRC:%.cpp=$(BUILD)/obj/%.o) $(LIB) | $(SPM_PLUGIN)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# test_tokenizer loads libprotobuf as hpctrain does (ONNX), so its SentencePiece tests prove the
# plugin's isolation from it; not under the sanitizers, whose runtimes refuse RTLD_DEEPBIND.
ifneq ($(ONNX_H),)
ifeq ($(findstring -fsanitize,$(CXXFLAGS)),)
$(BUILD)/tests/test_tokenizer: LDLIBS += -Wl,--no-as-needed -lprotobuf -Wl,--as-needed
endif
endif
$(BUILD)/obj/plugins/sentencepiece.o: CXXFLAGS += -fPIC -fvisibility=hidden
$(SPM_PLUGIN): $(BUILD)/obj/plugins/sentencepiece.o
	$(MPICXX) $(CXXFLAGS) -shared $^ -o $@ -lsentencepiece

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB) | $(SPM_PLUGIN)
	@mkdir -p $(@D)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ -lgtest -lgtest_main $(LDLIBS)

$(BUILD)/tests/mpi/%: $(BUILD)/obj/tests/mpi/%.o $(LIB)
	@mkdir -p $(@D)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ -lgtest $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# ---- workflows -------------------------------------------------------------
DEMO_DIR ?= $(BUILD)/demo
# The workflows build on every core unless the caller gave -j (a plain `make test`
# on a fresh machine would otherwise compile one file at a time).
NPROC := $(shell nproc 2>/dev/null || echo 1)
BUILD_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))
# The demo builds only what it runs (the tests build with `make test`).
demo: deps
	@$(MAKE) --no-print-directory $(BUILD_JOBS) $(BUILD)/hpctrain $(BUILD)/hpcdata
	@scripts/demo.sh $(DEMO_DIR)

test: deps
	@$(MAKE) --no-print-directory $(BUILD_JOBS) all
	@tests/gen_ctest.sh $(BUILD) > $(BUILD)/CTestTestfile.cmake
	@cd $(BUILD) && ctest --output-on-failure --timeout 1800 $(CTEST_ARGS)

bench: all
	@bench/run.sh

bench-quick: all
	@bench/run.sh --quick

# clang-format check, clang-tidy (.clang-tidy; compile database from `make -n` in
# $(LINT_BUILD)) and cppcheck over every C++/CUDA source; see scripts/lint.sh.
LINT_BUILD ?= build-lint
lint:
	@scripts/install-deps.sh --lint
	@LINT_BUILD=$(LINT_BUILD) scripts/lint.sh

clean:
	rm -rf $(BUILD)

# ---- sanitizers (scripts/sanitize.sh, tests/sanitizers/) ---------------------
#   make asan / asan-test   AddressSanitizer + UBSan, CPU-only, in build-asan: every unit
#                           test, then a 2-rank MNIST run with save + resume, LeakSanitizer on
#   make tsan / tsan-test   ThreadSanitizer in build-tsan: loader, dist and the MPI programs
# Each variant is this Makefile run again on its own BUILD. The flags travel in the
# environment, not on the command line, so `CXXFLAGS +=` above still adds -std=c++20.
# gcc's runtimes (libasan/libubsan/libtsan of the same gcc that mpicxx wraps): one
# compiler and libstdc++ for every build, and ccache shares the preprocessing.
# -g1 (line tables, as the fuzz build's -gline-tables-only): a report's stack names file:line,
# and the builds take about a third less time than with full debug information.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
ASAN_CXXFLAGS := -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
TSAN_CXXFLAGS := -O1 -g1 -fno-omit-frame-pointer -fsanitize=thread
# MPI programs of the sanitizer suites only (tests/sanitizers/test_*.cpp, main() from tests/mpi/harness.h).
SAN_MPI_BIN = $(patsubst tests/sanitizers/%.cpp,$(1)/tests/sanitizers/%,$(wildcard tests/sanitizers/test_*.cpp))
ASAN_TARGETS := $(ASAN_BUILD)/hpctrain $(ASAN_BUILD)/hpcdata $(TEST_SRC:tests/unit/%.cpp=$(ASAN_BUILD)/tests/%) \
                $(ASAN_BUILD)/tests/mpi/test_dist_collectives $(call SAN_MPI_BIN,$(ASAN_BUILD))
TSAN_TARGETS := $(TSAN_BUILD)/tests/test_loader $(TSAN_BUILD)/tests/test_dist \
                $(TSAN_BUILD)/tests/mpi/test_dist_collectives $(TSAN_BUILD)/tests/mpi/test_dist_equivalence \
                $(call SAN_MPI_BIN,$(TSAN_BUILD))
# TSan compiles only what those tests link (a third less than all of src/): a new dependency
# of these folders on one left out shows up as an undefined reference in `make tsan`.
TSAN_LIB_SRC := $(filter-out src/main.cpp $(CUDA_HOST_SRC) src/ckpt/% src/config/% src/doctor/% src/train/%,$(ALL_SRC))
SAN_JOBS ?= 2
.PHONY: asan asan-test tsan tsan-test
asan: check-deps
	@CXXFLAGS='$(ASAN_CXXFLAGS)' $(MAKE) --no-print-directory -j$(SAN_JOBS) CUDA=0 BUILD=$(ASAN_BUILD) $(ASAN_TARGETS)
asan-test: asan
	@scripts/sanitize.sh asan $(ASAN_BUILD)
tsan: check-deps
	@CXXFLAGS='$(TSAN_CXXFLAGS)' $(MAKE) --no-print-directory -j$(SAN_JOBS) CUDA=0 BUILD=$(TSAN_BUILD) \
	  LIB_SRC='$(TSAN_LIB_SRC)' $(TSAN_TARGETS)
tsan-test: tsan
	@scripts/sanitize.sh tsan $(TSAN_BUILD)
$(BUILD)/tests/sanitizers/%: $(BUILD)/obj/tests/sanitizers/%.o $(LIB)
	@mkdir -p $(@D)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ -lgtest $(LDLIBS)

# ---- fuzzing (tests/fuzz/; docs/testing.md "Fuzzing") ------------------------
#   make fuzz [FUZZ_SECONDS=30] [FUZZ_SEED=0]  build the libFuzzer targets with clang in $(FUZZ_BUILD) and
#                                 run each for FUZZ_SECONDS, two at a time (tests/fuzz/run.sh);
#                                 FUZZ_SEED fixes libFuzzer's seed (0: random; CI uses 1)
# Only the sources the targets exercise are compiled (no dist/, train/, doctor/, CUDA),
# instrumented for coverage, ASan and UBSan. `make test` replays every corpus and
# regression input through the same target sources built by mpicxx with a plain main()
# ($(BUILD)/tests/fuzz_replay_*; tests/e2e/fuzz_regress.sh), so it needs no clang.
FUZZ_CXX     ?= clang++
FUZZ_SECONDS ?= 30
FUZZ_SEED    ?= 0
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.cpp,%,$(sort $(wildcard tests/fuzz/fuzz_*.cpp)))
FUZZ_FLAGS   := -O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
                -fno-sanitize-recover=undefined -std=c++20 -pthread -MMD -MP
# The fuzz targets link objects, not the archive: one of onednn/ and noonednn/ (the lowering, no oneDNN).
FUZZ_LIB_SRC := $(filter-out src/backend/cuda/% src/backend/nocuda/% $(ONEDNN_SRC),\
                  $(filter src/core/% src/backend/% src/nn/% src/optim/% src/config/% src/data/% src/ckpt/% src/text/%,\
                    $(shell find src -name '*.cpp' | sort))) $(shell find src/backend/nocuda -name '*.cpp' | sort)
FUZZ_TOOL_SRC := $(filter-out data_tools/hpcdata.cpp,$(TOOL_SRC))
FUZZ_OBJ     := $(patsubst %.cpp,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRC) $(FUZZ_TOOL_SRC))
FUZZ_BIN     := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz_replay_%)
.PHONY: fuzz fuzz-build fuzz-no-clang
# Objects reached only through the pattern rules: keep them (make would delete them as intermediates).
.SECONDARY: $(FUZZ_OBJ) $(FUZZ_NAMES:%=$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o)
all: $(FUZZ_REPLAY_BIN)
HAVE_FUZZ_CXX := $(shell command -v $(lastword $(FUZZ_CXX)) 2>/dev/null)
fuzz-build: $(if $(HAVE_FUZZ_CXX),$(FUZZ_BIN),fuzz-no-clang)
fuzz-no-clang:
	@echo "make fuzz: $(lastword $(FUZZ_CXX)) not found: install clang and its runtimes (Debian: clang libclang-rt-14-dev) or set FUZZ_CXX"; exit 2
# CPU-only (the nocuda/ stubs, no CUDA flags) and on FUZZ_JOBS cores whatever make was given.
FUZZ_JOBS ?= 2
fuzz:
	@scripts/install-deps.sh --fuzz --no-test
	@$(MAKE) --no-print-directory CUDA=0 -j$(FUZZ_JOBS) fuzz-build
	@FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_SEED=$(FUZZ_SEED) tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

$(FUZZ_BUILD)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_FLAGS) -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_OBJ)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

$(FUZZ_REPLAY_BIN): $(BUILD)/tests/fuzz_replay_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o \
                    $(BUILD)/obj/tests/fuzz/replay_main.o $(FUZZ_TOOL_SRC:%.cpp=$(BUILD)/obj/%.o) $(LIB)
	@mkdir -p $(@D)
	$(MPICXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
