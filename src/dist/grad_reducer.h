// GradReducer: averages the flat gradient buffer across ranks in buckets,
// overlapped with backward (the idea of PyTorch DDP's Reducer).
//
// Buckets are contiguous slices of the flat gradient buffer of about
// bucket_bytes each, cut from the END of the buffer, because backward
// finishes the last layer's gradients first. Model::backward reports a
// frontier after each layer (every gradient at offset ≥ frontier is final);
// each bucket that lies wholly above the frontier starts its AllReduce at
// once, so communication runs while earlier layers are still computing.
// finish() starts any bucket not yet started and waits for all of them.
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace hpc::dist {

class GradReducer {
 public:
  GradReducer(Communicator& comm, const Tensor& grads, double bucket_bytes);

  // Begins a reduction round (the last micro-step of an optimizer step).
  void begin();
  // Called by backward: gradients at offsets ≥ frontier are final.
  void on_ready(int64_t frontier);
  // Starts whatever is left and waits for every bucket. Returns seconds spent waiting here
  // (the communication that backward did not hide).
  double finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    int64_t begin, end;  // element range of the flat buffer
    std::unique_ptr<Request> request;
  };
  void start(Bucket& b);

  Communicator& comm_;
  Tensor grads_;
  std::vector<Bucket> buckets_;  // in launch order: highest offsets first
  size_t next_ = 0;              // first bucket not yet started
};

}  // namespace hpc::dist
