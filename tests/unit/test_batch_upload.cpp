// BatchUpload (train/batch_upload.h): x travels in its own dtype, which the
// trainer sets to float32 for a language model on the GPU, so that token ids
// are not rounded to the model's 16-bit dtype (bf16 holds ids exactly only
// below 256). Checked on the CPU, where the same upload/convert path runs
// with a float64 model: ids above 256 (and above bf16's and fp16's exact
// ranges) arrive unchanged in float32, y stays int32, and with x_dtype equal
// to the model's dtype x is converted as before.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/tensor.h"
#include "data/loader.h"
#include "train/batch_upload.h"

namespace hpc::train {
namespace {

data::Batch token_batch() {
  data::Batch b;
  b.valid = 2;
  b.x = Tensor(Shape{2, 3}, DType::F32);
  b.y = Tensor(Shape{2, 3}, DType::I32);
  const float ids[6] = {0, 255, 257, 2049, 50256, 16777215};  // past bf16's and fp16's exact ids
  for (int i = 0; i < 6; ++i) {
    b.x.data<float>()[i] = ids[i];
    b.y.data<int32_t>()[i] = static_cast<int32_t>(ids[i]);
  }
  return b;
}

TEST(BatchUpload, TokenIdsKeepTheirOwnDtype) {
  const data::Batch b = token_batch();
  BatchUpload upload(Device::CPU, DType::F64, DType::F32);
  const auto [x, y] = upload(b);
  ASSERT_EQ(x.dtype(), DType::F32);
  ASSERT_EQ(y.dtype(), DType::I32);
  EXPECT_EQ(x.shape(), b.x.shape());
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(x.data<float>()[i], b.x.data<float>()[i]) << i;
    EXPECT_EQ(y.data<int32_t>()[i], b.y.data<int32_t>()[i]) << i;
  }
}

TEST(BatchUpload, XInTheModelDtypeIsConverted) {
  const data::Batch b = token_batch();
  BatchUpload upload(Device::CPU, DType::F64, DType::F64);
  const auto [x, y] = upload(b);
  ASSERT_EQ(x.dtype(), DType::F64);
  ASSERT_EQ(y.dtype(), DType::I32);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(x.data<double>()[i], double(b.x.data<float>()[i])) << i;
}

}  // namespace
}  // namespace hpc::train
