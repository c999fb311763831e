// CUDA core ops (ops.def): cuBLAS for GEMM, kernels/ for the rest.
//
// GEMM precision: float32 is computed in true fp32 (CUBLAS_COMPUTE_32F, no
// TF32), so fp32 means the same thing on both devices and the GPU-vs-CPU
// tests can hold it to fp32 tolerances; bf16/fp16 use tensor cores with fp32
// accumulation; float64 is fp64 (gradient checks). Large 16-bit GEMMs with a
// size that is not a multiple of 8 run on zero-padded copies (worth_padding).
#include <climits>
#include <utility>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/elementwise.cuh"
#include "kernels/reduce.cuh"

namespace hpc::backend::cuda {

namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  HPC_ASSERT(a.count() == b.count() && a.dtype() == b.dtype(),
             std::string(op) + ": " + a.shape().str() + " " + dtype_name(a.dtype()) + " vs " +
                 b.shape().str() + " " + dtype_name(b.dtype()));
}

int as_int(int64_t v, const char* what) {
  HPC_ASSERT(v >= 0 && v <= INT_MAX, std::string("gemm (CUDA): ") + what + " = " + std::to_string(v) +
                                         " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// Calls f.template operator()<S>() with the storage type of a conversion source.
template <typename F>
void dispatch_source(DType dtype, F&& f) {
  switch (dtype) {
    case DType::U8:
      return f.template operator()<uint8_t>();
    case DType::I32:
      return f.template operator()<int32_t>();
    default:
      return dispatch_storage(dtype, "convert", std::forward<F>(f));
  }
}

// A compact row-major matrix in device memory.
struct Matrix {
  void* data;
  int64_t rows, cols;
};

// Copies `from` into the top-left corner of the larger `to`; with zero_rest,
// the rest of `to` becomes 0.
void copy_into(const Matrix& from, const Matrix& to, size_t elem, bool zero_rest, cudaStream_t s) {
  char* dst = static_cast<char*>(to.data);
  const size_t pitch = size_t(to.cols) * elem, width = size_t(from.cols) * elem;
  cudaCheck(
      cudaMemcpy2DAsync(dst, pitch, from.data, width, width, size_t(from.rows), cudaMemcpyDeviceToDevice, s));
  if (!zero_rest) return;
  if (to.cols > from.cols)
    cudaCheck(cudaMemset2DAsync(dst + width, pitch, 0, pitch - width, size_t(from.rows), s));
  if (to.rows > from.rows)
    cudaCheck(cudaMemsetAsync(dst + size_t(from.rows) * pitch, 0, size_t(to.rows - from.rows) * pitch, s));
}

// 16-bit GEMMs with a size that is not a multiple of 8 (a 50,257-token
// vocabulary's logits and their gradients) run on cuBLAS's slow kernels:
// 4.5–6.7 ms for gpt2-124m's output projection on an H200 against 0.8–0.9 ms
// with the vocabulary padded to 50,264 (measured through PyTorch's cuBLAS; a
// padded leading dimension alone does not help when the odd size is k). A
// large GEMM therefore runs on zero-padded copies with every size rounded up to
// a multiple of 8 (the zeros add nothing), and C's corner is copied back; the
// copies cost about 1 ms per 800 MB. Small GEMMs are left alone.
constexpr int64_t PAD_TO = 8;
constexpr int64_t PAD_MIN_MACS = int64_t(1) << 30;

int64_t padded(int64_t v) { return (v + PAD_TO - 1) / PAD_TO * PAD_TO; }

bool worth_padding(DType dtype, int64_t m, int64_t n, int64_t k) {
  return (dtype == DType::BF16 || dtype == DType::F16) && m * n * k >= PAD_MIN_MACS &&
         (m % PAD_TO != 0 || n % PAD_TO != 0 || k % PAD_TO != 0);
}

// Scratch for the padded copies, or null when the GPU has no room for them: the GEMM then
// runs unpadded, on the slower kernels, rather than ending the run (an allocation failure
// is not sticky, and the scratch is allocated afresh by the next op that needs it).
char* padding_scratch(size_t bytes) {
  try {
    return static_cast<char*>(Context::get().scratch(bytes));
  } catch (const UserError&) {
    return nullptr;
  }
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, const Tensor& b,
          double beta, const Tensor& c) {
  require_device("gemm", {&a, &b, &c});
  HPC_ASSERT(a.dtype() == c.dtype() && b.dtype() == c.dtype(), "gemm: mixed dtypes");
  HPC_ASSERT(a.count() >= m * k && b.count() >= k * n && c.count() >= m * n, "gemm: operand too small");
  if (m == 0 || n == 0) return;
  Matrix ma{a.raw(), ta ? k : m, ta ? m : k}, mb{b.raw(), tb ? n : k, tb ? k : n}, mc{c.raw(), m, n};
  const Matrix c_out = mc;
  if (worth_padding(c.dtype(), m, n, k)) {
    const int64_t mp = padded(m), np = padded(n), kp = padded(k);
    const Matrix pa{nullptr, ta ? kp : mp, ta ? mp : kp}, pb{nullptr, tb ? np : kp, tb ? kp : np},
        pc{nullptr, mp, np};
    const size_t elem = dtype_size(c.dtype());
    const auto grows = [](const Matrix& x, const Matrix& p) { return p.rows != x.rows || p.cols != x.cols; };
    size_t bytes = 0;
    for (const auto& [x, p] : {std::pair{ma, pa}, std::pair{mb, pb}, std::pair{mc, pc}})
      if (grows(x, p)) bytes += size_t(p.rows * p.cols) * elem;  // a multiple of 16: each part stays aligned
    char* next = padding_scratch(bytes);
    if (next != nullptr) {
      cudaStream_t s = Context::get().compute();
      const auto move = [&](Matrix& x, Matrix p, bool zero_rest, bool copy) {
        if (!grows(x, p)) return;
        p.data = next;
        next += size_t(p.rows * p.cols) * elem;
        if (copy) copy_into(x, p, elem, zero_rest, s);
        x = p;
      };
      move(ma, pa, true, true);
      move(mb, pb, true, true);
      move(mc, pc, false, beta != 0);  // C's padding is computed and dropped
      m = mp;
      n = np;
      k = kp;
    }
  }
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the same
  // memory, so cuBLAS gets B first and the row-major leading dimensions.
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t type = cuda_data_type(c.dtype(), "gemm");
  const int lda = as_int(ma.cols, "lda"), ldb = as_int(mb.cols, "ldb"), ldc = as_int(mc.cols, "ldc");
  cublasHandle_t h = Context::get().cublas();
  if (c.dtype() == DType::F64) {
    cublasCheck(cublas_api().gemm_ex(h, op_b, op_a, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha,
                                     mb.data, type, ldb, ma.data, type, lda, &beta, mc.data, type, ldc,
                                     CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT));
  } else {
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    cublasCheck(cublas_api().gemm_ex(h, op_b, op_a, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha_f,
                                     mb.data, type, ldb, ma.data, type, lda, &beta_f, mc.data, type, ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (mc.data != c_out.data) {  // the corner of the padded C
    const size_t elem = dtype_size(c.dtype()), width = size_t(c_out.cols) * elem;
    cudaCheck(cudaMemcpy2DAsync(c_out.data, width, mc.data, size_t(mc.cols) * elem, width, size_t(c_out.rows),
                                cudaMemcpyDeviceToDevice, Context::get().compute()));
  }
}

void fill(const Tensor& t, double value) {
  require_device("fill", {&t});
  dispatch_storage(t.dtype(), "fill", [&]<typename T>() {
    kernels::fill(ptr<T>(t, "fill"), t.count(), value, Context::get().compute());
  });
}

void copy(const Tensor& src, const Tensor& dst) {
  check_same(src, dst, "copy");
  if (src.raw() == dst.raw() || src.count() == 0) return;
  cudaStream_t s = Context::get().compute();
  // Unified addressing tells the direction; ordering on the compute stream
  // puts the copy after the kernels that wrote src and before those reading dst.
  cudaCheck(cudaMemcpyAsync(dst.raw(), src.raw(), src.num_bytes(), cudaMemcpyDefault, s));
  // A host side must be complete when copy() returns: the caller reads dst or
  // reuses src next (asynchronous uploads use copy_async).
  if (src.device() == Device::CPU || dst.device() == Device::CPU) cudaCheck(cudaStreamSynchronize(s));
}

void copy_async(const Tensor& host_src, const Tensor& dst) {
  check_same(host_src, dst, "copy_async");
  require_device("copy_async", {&dst});
  HPC_ASSERT(host_src.device() == Device::CPU, "copy_async: the source must be host memory");
  Context& ctx = Context::get();
  // Wait for the compute work queued so far (it may still read dst), copy on
  // the transfer stream, and make later compute work wait for the copy. The
  // calling thread goes on at once; src must stay unchanged until the next
  // op that waits for the GPU.
  Event before = make_event(), after = make_event();
  cudaCheck(cudaEventRecord(before, ctx.compute()));
  cudaCheck(cudaStreamWaitEvent(ctx.transfer(), before, 0));
  cudaCheck(
      cudaMemcpyAsync(dst.raw(), host_src.raw(), dst.num_bytes(), cudaMemcpyHostToDevice, ctx.transfer()));
  cudaCheck(cudaEventRecord(after, ctx.transfer()));
  cudaCheck(cudaStreamWaitEvent(ctx.compute(), after, 0));
  // Destroying an event that is still pending is allowed: the release is deferred until it completes.
}

void convert(const Tensor& src, const Tensor& dst) {
  require_device("convert", {&src, &dst});
  HPC_ASSERT(src.count() == dst.count(), "convert: " + src.shape().str() + " vs " + dst.shape().str());
  cudaStream_t s = Context::get().compute();
  dispatch_storage(dst.dtype(), "convert", [&]<typename D>() {
    dispatch_source(src.dtype(), [&]<typename S>() {
      kernels::convert(src.data<S>(), ptr<D>(dst, "convert"), src.count(), s);
    });
  });
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  require_device("axpy", {&x, &y});
  check_same(x, y, "axpy");
  dispatch_storage(y.dtype(), "axpy", [&]<typename T>() {
    kernels::axpy(alpha, ptr<T>(x, "axpy"), ptr<T>(y, "axpy"), y.count(), Context::get().compute());
  });
}

void scale(const Tensor& x, double alpha) {
  require_device("scale", {&x});
  dispatch_storage(x.dtype(), "scale", [&]<typename T>() {
    kernels::scale(ptr<T>(x, "scale"), x.count(), alpha, Context::get().compute());
  });
}

namespace {
double reduce_to_host(const Tensor& x, bool squares, const char* op) {
  require_device(op, {&x});
  Context& ctx = Context::get();
  const int64_t parts = kernels::sum_partials(x.count());
  double* scratch = static_cast<double*>(ctx.scratch(sizeof(double) * static_cast<size_t>(parts + 1)));
  dispatch_storage(x.dtype(), op, [&]<typename T>() {
    kernels::reduce_sum(ptr<T>(x, op), x.count(), squares, scratch, scratch + parts, ctx.compute());
  });
  return *static_cast<const double*>(ctx.read_back(scratch + parts, sizeof(double)));
}
}  // namespace

double sum_squares(const Tensor& x) { return reduce_to_host(x, true, "sum_squares"); }
double sum(const Tensor& x) { return reduce_to_host(x, false, "sum"); }

void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial) {
  require_device("add_bias", {&y, &bias});
  HPC_ASSERT(bias.count() == channels && y.count() % (channels * spatial) == 0, "add_bias: shapes");
  dispatch_storage(y.dtype(), "add_bias", [&]<typename T>() {
    kernels::add_bias(ptr<T>(y, "add_bias"), ptr<T>(bias, "add_bias"), y.count(), channels, spatial,
                      Context::get().compute());
  });
}

void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial) {
  require_device("bias_grad", {&dy, &dbias});
  HPC_ASSERT(dbias.count() == channels && dy.count() % (channels * spatial) == 0, "bias_grad: shapes");
  Context& ctx = Context::get();
  const int64_t rows = dy.count() / (channels * spatial);
  auto* partials = static_cast<double*>(ctx.scratch(
      sizeof(double) * static_cast<size_t>(kernels::channel_partials(rows, channels, spatial, 1))));
  dispatch_storage(dy.dtype(), "bias_grad", [&]<typename T>() {
    kernels::bias_grad(ptr<T>(dy, "bias_grad"), ptr<T>(dbias, "bias_grad"), rows, channels, spatial, partials,
                       ctx.compute());
  });
}

}  // namespace hpc::backend::cuda
