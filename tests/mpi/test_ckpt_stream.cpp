// Checkpoints written from shards (ckpt/shard_stream.h) on real ranks (run
// with 2, 3 and 4): the file rank 0 writes from every rank's shard, chunk by
// chunk, holds the same bits as the one written from whole tensors — the
// flat datasets, every per-tensor /params/<name> dataset with its CRC, and the
// checksum — for chunks that cut shards and tensors anywhere; and a write that
// fails before the first chunk still takes every rank's pieces, so no rank
// waits (the test would hit its 20 s channel timeout otherwise).
#include <hdf5.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/shard_stream.h"
#include "core/error.h"
#include "dist/shards.h"
#include "harness.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
namespace ckpt = hpc::ckpt;

namespace {

// The same checkpoint on every rank: n parameters in tensors of awkward shapes, Adam's two states.
ckpt::Checkpoint make_checkpoint(int64_t n) {
  ckpt::Checkpoint c;
  c.step = 7, c.world_size = 3, c.batch_size = 2, c.global_batch = 6, c.train_samples = 100;
  c.spec = "test";
  c.input_shape = Shape{3};
  c.params = Tensor(Shape{n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) c.params.data<float>()[i] = static_cast<float>(mpitest::input(0, i));
  const std::vector<Shape> shapes = {Shape{17, 3, 5}, Shape{1}, Shape{1000, 33}, Shape{4, 4, 4, 4}};
  int64_t at = 0;
  for (size_t i = 0; at < n; ++i) {
    Shape s = shapes[i % shapes.size()];
    if (at + s.count() > n) s = Shape{n - at};
    c.param_entries.push_back({"t" + std::to_string(i), at, s});
    at += s.count();
  }
  c.buffers.push_back({"0.bn.running_mean", Tensor(Shape{5}, DType::F32)});
  for (const char* name : {"exp_avg", "exp_avg_sq"}) {
    Tensor t(Shape{n}, DType::F32);
    for (int64_t i = 0; i < n; ++i)
      t.data<float>()[i] = static_cast<float>(mpitest::input(name[4] == '_' ? 2 : 1, i));
    c.optimizer_state.push_back({name, t});
  }
  c.optimizer = "adam";
  c.log_window.resize(3);
  return c;
}

ckpt::ShardSnapshot snapshot_of(const ckpt::Checkpoint& c, int rank, int world) {
  ckpt::ShardSnapshot s;
  s.bounds = hpc::dist::shard_bounds(c.num_params(), world);
  s.rank = rank;
  const int64_t lo = s.lo(), count = s.hi() - s.lo();
  auto copy = [&](const Tensor& t) {
    Tensor part(Shape{count}, DType::F32);
    std::memcpy(part.raw(), t.data<float>() + lo, part.num_bytes());
    return part;
  };
  s.params = copy(c.params);
  for (const ckpt::NamedTensor& t : c.optimizer_state) s.state.push_back({t.name, copy(t.value)});
  return s;
}

// The bytes of dataset `name` of an HDF5 file (float32).
std::vector<float> dataset(const std::string& path, const std::string& name) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  std::vector<float> v(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

TEST(CheckpointStream, ShardsWriteTheBitsOfWholeTensors) {
  auto& ctx = mpitest::ctx();
  const int rank = ctx.rank(), world = ctx.world();
  ckpt::ShardChannel channel(MPI_COMM_WORLD, 20);
  const std::string dir = "/tmp/hpctrain-ckpt-stream-" + std::to_string(getppid());
  if (rank == 0) std::filesystem::create_directories(dir);
  for (int64_t n : {int64_t{40001}, int64_t{7}})
    for (int64_t chunk : {int64_t{777}, int64_t{1} << 22}) {
      const ckpt::Checkpoint c = make_checkpoint(n);
      const ckpt::ShardSnapshot own = snapshot_of(c, rank, world);
      const std::string whole = dir + "/whole.h5", streamed = dir + "/streamed.h5";
      if (rank == 0) {
        ckpt::write_checkpoint(whole, c);
        ckpt::Checkpoint meta = c;  // what rank 0 keeps of a sharded save: no flat tensors
        meta.params = Tensor();
        meta.streamed_count = n;
        for (ckpt::NamedTensor& t : meta.optimizer_state) t.value = Tensor();
        ckpt::StreamedSource source(channel, own, chunk);
        ckpt::write_checkpoint(streamed, meta, &source, chunk);
        const ckpt::Checkpoint a = ckpt::read_checkpoint(whole), b = ckpt::read_checkpoint(streamed);
        EXPECT_EQ(std::memcmp(a.params.raw(), b.params.raw(), a.params.num_bytes()), 0);
        for (size_t k = 0; k < a.optimizer_state.size(); ++k)
          EXPECT_EQ(std::memcmp(a.optimizer_state[k].value.raw(), b.optimizer_state[k].value.raw(),
                                a.optimizer_state[k].value.num_bytes()),
                    0);
        EXPECT_EQ(ckpt::content_checksum(a), ckpt::content_checksum(b));
        for (const ckpt::ParamEntry& p : c.param_entries) {
          const std::vector<float> v = dataset(streamed, "params/" + p.name);
          EXPECT_EQ(std::memcmp(v.data(), c.params.data<float>() + p.offset, v.size() * 4), 0) << p.name;
          EXPECT_EQ(static_cast<int64_t>(v.size()), p.shape.count()) << p.name;
        }
      } else {
        ckpt::serve_snapshot(channel, own, chunk);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  // A write that cannot even create its file takes every piece all the same.
  const ckpt::Checkpoint c = make_checkpoint(40001);
  const ckpt::ShardSnapshot own = snapshot_of(c, rank, world);
  if (rank == 0) {
    ckpt::Checkpoint meta = c;
    meta.params = Tensor();
    meta.streamed_count = c.num_params();
    for (ckpt::NamedTensor& t : meta.optimizer_state) t.value = Tensor();
    ckpt::StreamedSource source(channel, own, 1000);
    EXPECT_THROW(ckpt::write_checkpoint(dir + "/no/such/dir/x.h5", meta, &source, 1000), hpc::UserError);
  } else {
    EXPECT_NO_THROW(ckpt::serve_snapshot(channel, own, 1000));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
