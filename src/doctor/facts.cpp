// RankFacts wire format (see facts.h): each value is written as
// "<length>:<bytes>" (numbers in decimal), so any byte may appear in a
// string and nothing needs escaping. serialize() is a template over the
// direction; Writer and Reader give it the same call syntax.
#include "doctor/facts.h"

#include <stdexcept>
#include <string_view>
#include <type_traits>

namespace hpc::doctor {

namespace {

class Writer {
 public:
  void item(const std::string& s) { out_ += std::to_string(s.size()) + ":" + s; }
  template <class Int, class = std::enable_if_t<std::is_integral_v<Int>>>
  void item(Int v) {
    item(std::to_string(v));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  void item(std::string& s) {
    size_t colon = in_.find(':', pos_);
    if (colon == std::string_view::npos) throw std::runtime_error("doctor: truncated rank report");
    size_t len = std::stoull(std::string(in_.substr(pos_, colon - pos_)));
    if (colon + 1 + len > in_.size()) throw std::runtime_error("doctor: truncated rank report");
    s = std::string(in_.substr(colon + 1, len));
    pos_ = colon + 1 + len;
  }
  template <class Int, class = std::enable_if_t<std::is_integral_v<Int>>>
  void item(Int& v) {
    std::string s;
    item(s);
    if constexpr (std::is_same_v<Int, bool>)
      v = s == "1";
    else if constexpr (std::is_unsigned_v<Int>)
      v = static_cast<Int>(std::stoull(s));
    else
      v = static_cast<Int>(std::stoll(s));
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

// F is RankFacts or const RankFacts (and likewise for the parts), so the
// same walk serves both directions.
template <class Io, class T>
void io(Io& a, T& v);

template <class Io, class T>
void io_list(Io& a, std::vector<T>& list) {
  size_t n = list.size();
  a.item(n);
  list.resize(n);
  for (T& v : list) io(a, v);
}
template <class Io, class T>
void io_list(Io& a, const std::vector<T>& list) {
  a.item(list.size());
  for (const T& v : list) io(a, v);
}

template <class Io, class T>
void io(Io& a, T& v) {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, std::string> || std::is_integral_v<U>) {
    a.item(v);
  } else if constexpr (std::is_same_v<U, std::pair<std::string, std::string>>) {
    a.item(v.first);
    a.item(v.second);
  } else if constexpr (std::is_same_v<U, LibVersions>) {
    for (auto* s : {&v.hpctrain, &v.cuda_build, &v.cuda_runtime, &v.cuda_driver, &v.cudnn_build,
                    &v.cudnn_runtime, &v.nccl_build, &v.nccl_runtime, &v.mpi_build, &v.mpi_runtime,
                    &v.hdf5_build, &v.hdf5_runtime, &v.blas_core})
      a.item(*s);
    a.item(v.cuda_built);
    a.item(v.blas_lesser);
  } else if constexpr (std::is_same_v<U, GpuFacts>) {
    a.item(v.index), a.item(v.name), a.item(v.pci_bus_id), a.item(v.total_bytes), a.item(v.numa_node);
  } else if constexpr (std::is_same_v<U, IbPort>) {
    a.item(v.device), a.item(v.port), a.item(v.state), a.item(v.rate), a.item(v.link_layer),
        a.item(v.numa_node);
  } else if constexpr (std::is_same_v<U, SplitFacts>) {
    a.item(v.name), a.item(v.samples), a.item(v.sample_shape), a.item(v.dtype), a.item(v.num_classes),
        a.item(v.mapped), a.item(v.why_not), a.item(v.tokens);
  } else if constexpr (std::is_same_v<U, DataFacts>) {
    a.item(v.checked), a.item(v.path), a.item(v.opens), a.item(v.error), a.item(v.filesystem);
    io_list(a, v.splits);
    a.item(v.locking_env);
  } else if constexpr (std::is_same_v<U, RunDirFacts>) {
    a.item(v.checked), a.item(v.path), a.item(v.probed), a.item(v.exists), a.item(v.writable),
        a.item(v.error), a.item(v.free_bytes), a.item(v.filesystem);
  } else {
    static_assert(std::is_same_v<U, RankFacts>);
    for (auto* i : {&v.rank, &v.world, &v.local_rank, &v.local_size, &v.node, &v.num_nodes, &v.pid, &v.cpus,
                    &v.gpus_visible, &v.nvidia_gpus, &v.env_hidden})
      a.item(*i);
    a.item(v.host), a.item(v.cuda_visible_devices), a.item(v.device), a.item(v.device_note),
        a.item(v.container), a.item(v.ibverbs);
    io(a, v.gpu);
    io(a, v.versions);
    io_list(a, v.ib);
    io_list(a, v.interfaces);
    io_list(a, v.env);
    io(a, v.data);
    io(a, v.run_dir);
  }
}

}  // namespace

std::string encode(const RankFacts& f) {
  Writer w;
  io(w, f);
  return w.take();
}

RankFacts decode(const std::string& text) {
  RankFacts f;
  Reader r(text);
  io(r, f);
  if (!r.done()) throw std::runtime_error("doctor: trailing bytes in a rank report");
  return f;
}

}  // namespace hpc::doctor
