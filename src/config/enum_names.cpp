// The spelling of every choice option's values (config.h), the one list that
// parsing, --help, to_ini() and messages use.
#include "config/config.h"

namespace hpc {

#define HPC_ENUM_NAMES(E, ...)                            \
  template <>                                             \
  std::span<const EnumName<E>> enum_names<E>() {          \
    static constexpr EnumName<E> names[] = {__VA_ARGS__}; \
    return names;                                         \
  }

HPC_ENUM_NAMES(Command, {Command::Train, "train"}, {Command::Eval, "eval"}, {Command::Doctor, "doctor"},
               {Command::Sample, "sample"}, {Command::Predict, "predict"}, {Command::Export, "export"})
HPC_ENUM_NAMES(ExportFormat, {ExportFormat::Torch, "torch"}, {ExportFormat::Hf, "hf"},
               {ExportFormat::Onnx, "onnx"})
HPC_ENUM_NAMES(EvalSplit, {EvalSplit::Auto, "auto"}, {EvalSplit::Val, "val"}, {EvalSplit::Train, "train"})
HPC_ENUM_NAMES(DataCheck, {DataCheck::Quick, "quick"}, {DataCheck::Full, "full"})
HPC_ENUM_NAMES(SyncBn, {SyncBn::Auto, "auto"}, {SyncBn::On, "true"}, {SyncBn::Off, "false"})
HPC_ENUM_NAMES(OptimizerKind, {OptimizerKind::Sgd, "sgd"}, {OptimizerKind::Adam, "adam"},
               {OptimizerKind::AdamW, "adamw"})
HPC_ENUM_NAMES(ScheduleKind, {ScheduleKind::Constant, "constant"}, {ScheduleKind::Step, "step"},
               {ScheduleKind::Cosine, "cosine"})
HPC_ENUM_NAMES(LrScaling, {LrScaling::None, "none"}, {LrScaling::Linear, "linear"})
HPC_ENUM_NAMES(DeviceChoice, {DeviceChoice::Auto, "auto"}, {DeviceChoice::Cpu, "cpu"},
               {DeviceChoice::Cuda, "cuda"})
HPC_ENUM_NAMES(Precision, {Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"})
HPC_ENUM_NAMES(LossKind, {LossKind::Auto, "auto"}, {LossKind::CrossEntropy, "ce"}, {LossKind::Mse, "mse"})
HPC_ENUM_NAMES(CommBackend, {CommBackend::Auto, "auto"}, {CommBackend::Mpi, "mpi"},
               {CommBackend::Nccl, "nccl"})
HPC_ENUM_NAMES(ProgressStyle, {ProgressStyle::Auto, "auto"}, {ProgressStyle::Bar, "bar"},
               {ProgressStyle::Plain, "plain"}, {ProgressStyle::None, "none"})

HPC_ENUM_NAMES(ReduceAlgo, {ReduceAlgo::Ordered, "ordered"}, {ReduceAlgo::Native, "native"})

#undef HPC_ENUM_NAMES

}  // namespace hpc
