// The start-up BLAS core check (backend/cpu/blas_core.h): the class table,
// the decision to re-execute, the self-check catching a wrong result, and
// the pre-MPI fault lookup that simulates both. The re-execution itself runs
// end to end in tests/e2e/blas_core.sh.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/blas_core.h"
#include "core/error.h"
#include "core/fault.h"

namespace cpu = hpc::backend::cpu;
using cpu::SpeedClass;

namespace {

cpu::CpuIsa isa(SpeedClass c) {
  cpu::CpuIsa i;
  i.avx = c >= SpeedClass::Avx;
  i.avx2 = i.fma = c >= SpeedClass::Avx2;
  i.avx512f = i.avx512bw = i.avx512vl = c >= SpeedClass::Avx512;
  return i;
}

}  // namespace

TEST(BlasCore, ClassOfEachCoreName) {
  EXPECT_EQ(cpu::core_class("Prescott"), SpeedClass::Sse);
  EXPECT_EQ(cpu::core_class("Nehalem"), SpeedClass::Sse);
  EXPECT_EQ(cpu::core_class("Sandybridge"), SpeedClass::Avx);
  EXPECT_EQ(cpu::core_class("Haswell"), SpeedClass::Avx2);
  EXPECT_EQ(cpu::core_class("Zen"), SpeedClass::Avx2);
  EXPECT_EQ(cpu::core_class("SkylakeX"), SpeedClass::Avx512);
  EXPECT_EQ(cpu::core_class("COOPERLAKE"), SpeedClass::Avx512);
  EXPECT_EQ(cpu::core_class("NeoverseN1"), SpeedClass::Unknown);
  EXPECT_STREQ(cpu::speed_class_name(SpeedClass::Avx512), "AVX-512");
}

TEST(BlasCore, CpuClassNeedsEveryFeature) {
  cpu::CpuIsa i = isa(SpeedClass::Avx512);
  EXPECT_EQ(i.best(), SpeedClass::Avx512);
  EXPECT_EQ(i.text(), "AVX AVX2 FMA AVX-512F/BW/VL");
  i.avx512bw = false;  // AVX-512F alone (Knights Landing): the SkylakeX kernels need BW and VL
  EXPECT_EQ(i.best(), SpeedClass::Avx2);
  i = isa(SpeedClass::Avx2);
  i.fma = false;
  EXPECT_EQ(i.best(), SpeedClass::Avx);
  EXPECT_EQ(isa(SpeedClass::Sse).text(), "SSE only");
}

TEST(BlasCore, RequestsTheBestCoreOnlyWhereTheLibraryChoseALesserOne) {
  const cpu::CpuIsa avx512 = isa(SpeedClass::Avx512), avx2 = isa(SpeedClass::Avx2);
  EXPECT_EQ(cpu::core_to_request("Prescott", false, true, avx512), "SkylakeX");
  EXPECT_EQ(cpu::core_to_request("Haswell", false, true, avx512), "SkylakeX");
  EXPECT_EQ(cpu::core_to_request("Prescott", false, true, avx2), "Haswell");
  EXPECT_EQ(cpu::core_to_request("Cooperlake", false, true, avx512), "");  // same class: fits
  EXPECT_EQ(cpu::core_to_request("Zen", false, true, avx2), "");
  EXPECT_EQ(cpu::core_to_request("Prescott", true, true, avx512), "");    // the user's choice is kept
  EXPECT_EQ(cpu::core_to_request("Prescott", false, false, avx512), "");  // a build without DYNAMIC_ARCH
  EXPECT_EQ(cpu::core_to_request("Mystery", false, true, avx512), "");    // a core we cannot rank
  EXPECT_EQ(cpu::core_to_request("Prescott", false, true, isa(SpeedClass::Sse)), "");
}

TEST(BlasCore, SelfCheckPassesAndCatchesAWrongResult) {
  const cpu::SelfCheck good = cpu::sgemm_self_check();
  EXPECT_TRUE(good.ok);
  EXPECT_LT(good.error, 1e-5);
  EXPECT_GT(good.error, 0);  // float rounding is visible: the check compares against float64
  const cpu::SelfCheck bad = cpu::sgemm_self_check(true);
  EXPECT_FALSE(bad.ok);
  EXPECT_GT(bad.error, 1e-3);
}

TEST(BlasCore, ReportsTheCoreInUseWithItsClass) {
  const cpu::BlasCore& b = cpu::blas_core();  // not called from main here: reported, never re-executed
  EXPECT_FALSE(b.core.empty());
  EXPECT_FALSE(b.corrected);
  EXPECT_NE(b.line().find(b.core + " [" + cpu::speed_class_name(b.core_speed) + "]"), std::string::npos)
      << b.line();
  EXPECT_NE(b.line().find("sgemm self-check ok"), std::string::npos) << b.line();
}

TEST(BlasCore, FaultPlannedReadsTheEnvironment) {
  unsetenv("OMPI_COMM_WORLD_RANK");
  setenv("HPCTRAIN_FAULT", "wrong@blas_check", 1);
  EXPECT_TRUE(hpc::fault_planned(hpc::FaultKind::Wrong, hpc::FaultPoint::BlasCheck));
  EXPECT_FALSE(hpc::fault_planned(hpc::FaultKind::Lesser, hpc::FaultPoint::BlasCore));
  setenv("HPCTRAIN_FAULT", "sleep=5@step,lesser@blas_core:1", 1);
  EXPECT_FALSE(hpc::fault_planned(hpc::FaultKind::Lesser, hpc::FaultPoint::BlasCore));  // rank 1 only
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  EXPECT_TRUE(hpc::fault_planned(hpc::FaultKind::Lesser, hpc::FaultPoint::BlasCore));
  unsetenv("OMPI_COMM_WORLD_RANK");
  setenv("HPCTRAIN_FAULT", "wrong@step", 1);  // malformed: no plan here, Context reports it
  EXPECT_FALSE(hpc::fault_planned(hpc::FaultKind::Wrong, hpc::FaultPoint::BlasCheck));
  EXPECT_THROW(hpc::parse_faults("wrong@step"), hpc::UserError);
  EXPECT_THROW(hpc::parse_faults("lesser@blas_check"), hpc::UserError);
  unsetenv("HPCTRAIN_FAULT");
}
