// dist::Context (see context.h).
#include "dist/context.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/device.h"
#include "core/check.h"
#include "core/error.h"
#include "dist/devices.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"
#include "dist/watchdog.h"

namespace hpc::dist {

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

// Fixed-size record per rank, so one MPI_Allgather carries everyone's.
struct PeerRecord {
  char host[64];
  int32_t pid;
};

}  // namespace

std::string check_launch(int world_size) {
  // SLURM_STEP_NUM_TASKS exists only inside an srun step (not in the batch
  // script itself), so a single-process command in a batch script is fine.
  int slurm_tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (world_size == 1 && slurm_tasks > 1)
    return "srun started " + std::to_string(slurm_tasks) +
           " tasks but MPI sees a world of 1: each task is its own rank 0 (PMI mismatch). Use "
           "'srun --mpi=pmix' (check 'srun --mpi=list'), or mpirun, and make the container's Open MPI "
           "match the host's";
  return "";
}

namespace {
// A failed call (core/check.h) ends every rank while MPI runs.
[[noreturn]] void abort_all_ranks(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}
}  // namespace

Context::MpiSession::~MpiSession() {
  if (!active) return;
  set_job_abort(nullptr);  // from here on a failed call ends this process only
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Context::Context(int* argc, char*** argv, const DistConfig& cfg) : cfg_(cfg) {
  mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  session_.active = true;
  set_job_abort(abort_all_ranks);
  // Errors come back as codes so mpiCheck can name the call before aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &info_.rank));
  mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &info_.world));
  shape_ = GridShape{info_.world, 1, 1};

  MPI_Comm local;
  mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &local));
  mpiCheck(MPI_Comm_rank(local, &info_.local_rank));
  mpiCheck(MPI_Comm_size(local, &info_.local_size));
  // Node index = how many nodes' first ranks come before mine.
  int first_on_node = info_.rank;
  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first_on_node, 1, MPI_INT, MPI_MIN, local));
  MPI_Comm_free(&local);
  std::vector<int> firsts(static_cast<size_t>(info_.world));
  mpiCheck(MPI_Allgather(&first_on_node, 1, MPI_INT, firsts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  info_.num_nodes = 0;
  for (int r = 0; r < info_.world; ++r)
    if (firsts[static_cast<size_t>(r)] == r) {
      if (r == first_on_node) info_.node = info_.num_nodes;
      ++info_.num_nodes;
    }

  info_.host = host_name();
  info_.pid = static_cast<int>(getpid());
  PeerRecord mine{};
  std::snprintf(mine.host, sizeof mine.host, "%s", info_.host.c_str());
  mine.pid = info_.pid;
  std::vector<PeerRecord> all(static_cast<size_t>(info_.world));
  mpiCheck(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD));
  for (const PeerRecord& p : all)
    peers_.push_back({std::string(p.host, strnlen(p.host, sizeof p.host)), p.pid});

  std::string launch = check_launch(info_.world);
  if (!launch.empty()) throw UserError(launch);  // session_ finalizes MPI on the way out
  install_faults(parse_faults(std::getenv("HPCTRAIN_FAULT")), info_.rank);
  fault_at(FaultPoint::Startup);

  if (info_.world == 1) {
    host_comm_ = std::make_unique<SelfComm>();
    return;
  }
  const bool multiple = thread_level_ >= MPI_THREAD_MULTIPLE;
  watchdog_ = std::make_unique<Watchdog>(MPI_COMM_WORLD, peers_, hb_, cfg_.timeout, multiple);
  auto mpi = std::make_unique<MpiComm>(MPI_COMM_WORLD, cfg_.timeout, &hb_, watchdog_.get(), multiple);
  mpi->set_native_reduce(cfg_.reduce == ReduceAlgo::Native);
  mpi_ = mpi.get();
  host_comm_ = std::move(mpi);
  if (!multiple && is_root())
    std::fprintf(
        stderr,
        "hpctrain: warning: MPI provides %s, not MPI_THREAD_MULTIPLE: a stuck rank still ends the job "
        "after dist.timeout, but the report cannot name it\n",
        thread_level_name(thread_level_));
}

bool Context::thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

Context::~Context() {
  device_comm_.reset();
  host_comm_.reset();
  watchdog_.reset();
}

CommBackend Context::check_backend(Device device) const {
  // Only an explicit nccl needs the GPU count: a CPU run should not start the CUDA runtime.
  const int gpus = cfg_.backend == CommBackend::Nccl ? backend::cuda_device_count() : 0;
  return resolve_backend(cfg_.backend, device, backend::cuda_built(), gpus);
}

Communicator& Context::grad_comm(Device device) {
  if (check_backend(device) == CommBackend::Mpi || info_.world == 1) return host_comm();
  if (!device_comm_) device_comm_ = make_nccl_comm();
  return *device_comm_;
}

std::unique_ptr<Communicator> Context::make_nccl_comm() {
  if (!backend::cuda_built())
    throw UserError("NCCL: this hpctrain was built without CUDA (rebuild with nvcc present, CUDA=1)");
  const int device = pick_device(info_.local_rank, backend::cuda_device_count());
  // Every rank must learn of a shared GPU, not only the ranks of that node (the others would wait in NCCL).
  constexpr int REC = 128;
  std::string me = info_.host + '\n' + backend::cuda_device_info(device).pci_bus_id;
  me.resize(REC, '\0');
  std::vector<char> all(static_cast<size_t>(REC * info_.world));
  host_comm().allgather(Tensor::borrow(me.data(), Shape{REC}, DType::U8),
                        Tensor::borrow(all.data(), Shape{int64_t{REC} * info_.world}, DType::U8));
  std::vector<std::pair<std::string, std::string>> host_bus;
  for (int r = 0; r < info_.world; ++r) {
    std::string rec(all.data() + static_cast<size_t>(r) * REC, REC);
    rec.resize(std::min(rec.size(), rec.find('\0')));
    const size_t nl = rec.find('\n');
    host_bus.emplace_back(rec.substr(0, nl), nl == std::string::npos ? "" : rec.substr(nl + 1));
  }
  for (const auto& [h, unused] : host_bus) {
    std::vector<std::string> buses;
    for (const auto& [h2, bus] : host_bus)
      if (h2 == h) buses.push_back(bus);
    std::string problem = check_gpu_sharing(buses, h);
    if (!problem.empty()) throw UserError(problem);
  }

  // The compute stream belongs to the device's CUDA context: make the device current first.
  backend::cuda_set_device(device);
  NcclSetup s;
  s.compute_stream = backend::cuda_compute_stream();  // gradients are written there; buckets wait for it
  s.host = &host_comm();
  s.rank = info_.rank;
  s.world = info_.world;
  s.device = device;
  s.timeout_s = cfg_.timeout;
  s.hb = &hb_;
  s.on_fatal = [this](const GroupTag& group, const WaitPoint& at, const std::string& reason) {
    std::string text = watchdog_ ? watchdog_->explain(group, at, reason)
                                 : "collective #" + std::to_string(at.seq) +
                                       (group.kind == GroupKind::World ? "" : " of " + group.name) + " (" +
                                       coll_op_name(at.op) + ") " + reason;
    std::fprintf(stderr, "hpctrain: error on rank %d: %s\n", info_.rank, text.c_str());
    std::fflush(stderr);
    abort(EXIT_PEER);
  };
  return dist::make_nccl_comm(s);
}

std::vector<std::string> Context::gather_lines(const std::string& mine) {
  if (info_.world == 1) return {mine};
  return mpi_->gather_text(mine, 0);
}

std::pair<int, int> Context::agree_on_failure(int my_exit_code) {
  // One Max allreduce: the lowest failing rank is the largest −rank.
  int32_t v[2] = {my_exit_code ? -info_.rank : -info_.world, my_exit_code};
  if (info_.world > 1) host_comm_->allreduce(Tensor::borrow(v, Shape{2}, DType::I32), ReduceOp::Max);
  const int lowest = -v[0];
  return {lowest < info_.world ? lowest : -1, v[1]};
}

void Context::set_grid_shape(const GridShape& shape) {
  HPC_ASSERT(shape.world() == info_.world, "the grid's shape does not cover the world");
  shape_ = shape;
  if (watchdog_) watchdog_->set_shape(shape);
  for (GroupKind kind : {GroupKind::Dp, GroupKind::Tp, GroupKind::Pp, GroupKind::Embed})
    hb_.flight().set_group_name(kind, shape.group_name(kind, info_.rank));
}

void Context::on_step(int64_t step) {
  hb_.set_step(step);
  set_fault_step(step);
  fault_at(FaultPoint::Step);
}

void Context::abort(int exit_code) {
  if (info_.world > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace hpc::dist
