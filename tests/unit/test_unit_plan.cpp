// dist::UnitPlan without MPI: units, dependencies, the hook programs and the
// fixed buffers. The programs are run through a checker that plays the
// buffers: a unit's layers may run only while it (and what it reads) is
// gathered, waited for and not freed, in a buffer no other resident unit
// holds; backward may write a unit's gradients only while they are staged,
// in a staging buffer no other staged unit holds; every gather is freed and
// every staged gradient reduced and settled by the end.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "dist/unit_plan.h"
#include "nn/model.h"

using namespace hpc;
using dist::UnitOp;
using dist::UnitPlan;

namespace {

const char* GPT = "embed(32,16,8) block(2) block(2) ln lm_head(32)";
const char* CNN =
    "conv(4,3,pad=1) bn relu res(conv(4,3,pad=1) bn relu conv(4,3,pad=1) bn) relu gap linear(10)";

nn::StoredRange nothing() {
  nn::StoredRange r;
  r.range = [](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; };
  return r;
}

UnitPlan plan_of(const nn::Model& m, int64_t unit = 0, int64_t keep = 0, bool prefetch = true) {
  UnitPlan::Options o;
  o.unit_elems = unit;
  o.keep_elems = keep;
  o.prefetch = prefetch;
  o.unit_option = "dist.zero_unit_mb";
  return UnitPlan(m, o);
}

// Plays the programs of one training step (or an evaluation forward) against the plan's buffers.
struct Checker {
  Checker(const UnitPlan& p, const nn::Model& m) : plan(p), model(m) {}
  const UnitPlan& plan;
  const nn::Model& model;
  std::map<int, int> param_holder, grad_holder;  // buffer -> unit
  std::set<int> resident, ready, staged, reducing;
  int gathers = 0;
  bool whole_grads = false;  // accumulating: gradients go into the whole-size buffer, no staging buffers

  void apply(const UnitOp& op) {
    const dist::Unit& u = plan.units()[static_cast<size_t>(op.unit)];
    switch (op.kind) {
      case UnitOp::Gather:
        ASSERT_EQ(resident.count(op.unit), 0u) << "gathered twice";
        ASSERT_EQ(param_holder.count(u.param_buffer), 0u)
            << "unit " << op.unit << " gathered into buffer " << u.param_buffer << " while unit "
            << param_holder[u.param_buffer] << " is there";
        param_holder[u.param_buffer] = op.unit;
        resident.insert(op.unit);
        ++gathers;
        break;
      case UnitOp::Wait:
        ASSERT_EQ(resident.count(op.unit), 1u) << "waited for a unit not gathered";
        ready.insert(op.unit);
        break;
      case UnitOp::Free:
        ASSERT_EQ(ready.count(op.unit), 1u) << "freed a unit never waited for";
        param_holder.erase(u.param_buffer);
        resident.erase(op.unit);
        ready.erase(op.unit);
        break;
      case UnitOp::OpenGrads:
        if (!whole_grads) {
          ASSERT_EQ(grad_holder.count(u.grad_buffer), 0u) << "staging buffer " << u.grad_buffer << " taken";
          grad_holder[u.grad_buffer] = op.unit;
        }
        staged.insert(op.unit);
        break;
      case UnitOp::ReduceGrads:
        ASSERT_EQ(staged.count(op.unit), 1u);
        reducing.insert(op.unit);
        break;
      case UnitOp::SettleGrads:
        ASSERT_EQ(reducing.count(op.unit), 1u);
        reducing.erase(op.unit);
        staged.erase(op.unit);
        grad_holder.erase(u.grad_buffer);
        break;
    }
  }
  // Layer i runs: everything its parameters live in is ready; backward: its gradients are staged.
  void layer_runs(int i, bool backward) {
    for (const nn::ParamSlot& s : model.layer_params(i)) {
      const int w = plan.unit_at(s.offset);
      EXPECT_EQ(ready.count(w), 1u) << "layer " << i << " runs without unit " << w;
      if (backward) {
        EXPECT_EQ(staged.count(w), 1u) << "layer " << i << " writes unit " << w << " unstaged";
      }
    }
  }
  void forward(bool training) {
    const dist::UnitProgram& p = plan.forward(training);
    for (int i = 0; i < model.num_layers(); ++i) {
      for (const UnitOp& op : p.before[static_cast<size_t>(i)]) apply(op);
      layer_runs(i, false);
      for (const UnitOp& op : p.after[static_cast<size_t>(i)]) apply(op);
    }
  }
  void backward(bool reduce) {
    const dist::UnitProgram& p = plan.backward(reduce);
    for (int i = model.num_layers() - 1; i >= 0; --i) {
      for (const UnitOp& op : p.before[static_cast<size_t>(i)]) apply(op);
      layer_runs(i, true);
      for (const UnitOp& op : p.after[static_cast<size_t>(i)]) apply(op);
    }
    for (const UnitOp& op : p.finish) apply(op);
  }
};

TEST(UnitPlan, AUnitPerLayerAndTheTiedHeadReadsTheEmbedding) {
  const nn::Model m(GPT, Shape{8}, DType::F32, 1, Device::CPU, nothing());
  EXPECT_EQ(m.params().count(), 0);  // stores nothing: the layout alone
  const UnitPlan p = plan_of(m);
  ASSERT_EQ(p.units().size(), 4u);  // embed, block, block, ln (+ lm_head, which owns nothing)
  EXPECT_EQ(p.units().back().end_layer, m.num_layers());
  EXPECT_EQ(p.units().back().deps, std::vector<int>{0});
  EXPECT_EQ(p.units().back().writes, (std::vector<int>{3, 0}));
  EXPECT_TRUE(p.units().back().kept);  // the last unit's backward follows at once
  EXPECT_FALSE(p.units()[1].kept);
  for (size_t u = 0; u < p.units().size(); ++u)
    EXPECT_EQ(p.units()[u].begin % 16 + 0, p.pad(static_cast<int>(u)));
}

TEST(UnitPlan, LayersAreBucketedUpToTheUnitSizeAndNeverSplit) {
  const nn::Model m(GPT, Shape{8}, DType::F32, 1, Device::CPU, nothing());
  const int64_t block = m.layer_end(1) - m.layer_begin(1);
  const UnitPlan p = plan_of(m, 2 * block + 100);
  EXPECT_LT(p.units().size(), 4u);
  for (const dist::Unit& u : p.units()) EXPECT_LE(u.count(), 2 * block + 100);
  try {
    plan_of(m, block - 1);
    ADD_FAILURE() << "a unit smaller than a layer was accepted";
  } catch (const UserError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("dist.zero_unit_mb is smaller than layer 1 block(2)"), std::string::npos) << w;
    EXPECT_NE(w.find("1.block.mlp.fc.weight 64x16"), std::string::npos) << w;
  }
}

TEST(UnitPlan, ProgramsKeepEveryLayerFedAndNoBufferShared) {
  for (const char* spec : {GPT, CNN}) {
    const Shape in = spec == GPT ? Shape{8} : Shape{1, 8, 8};
    const nn::Model m(spec, in, DType::F32, 1, Device::CPU, nothing());
    for (bool prefetch : {true, false})
      for (int64_t keep : {int64_t{0}, int64_t{1} << 30})
        for (int64_t unit : {int64_t{0}, int64_t{8000}}) {
          const UnitPlan p = plan_of(m, unit, keep, prefetch);
          SCOPED_TRACE(std::string(spec) + (prefetch ? " prefetch" : "") + (keep ? " keep" : "") +
                       (unit ? " bucketed" : ""));
          Checker c{p, m};
          for (int step = 0; step < 2; ++step) {  // buffers are reused from step to step
            c.forward(true);
            c.backward(true);
            EXPECT_TRUE(c.resident.empty() && c.staged.empty()) << "left over after a step";
          }
          // Accumulating (a whole-size gradient buffer): a backward without reductions, then one with.
          Checker a{p, m};
          a.whole_grads = true;
          a.forward(true);
          a.backward(false);
          EXPECT_TRUE(a.resident.empty());
          a.staged.clear();
          a.forward(true);
          a.backward(true);
          EXPECT_TRUE(a.resident.empty() && a.staged.empty());
          c.forward(false);
          EXPECT_TRUE(c.resident.empty()) << "an evaluation forward leaves units gathered";
          // Kept units are not gathered again for backward: one gather each per step, plus the tied
          // embedding's second use.
          if (keep > 0) {
            Checker k{p, m};
            k.forward(true);
            k.backward(true);
            EXPECT_LE(k.gathers, static_cast<int>(p.units().size()) + 1);
          }
        }
  }
}

TEST(UnitPlan, UnitsNeverResidentTogetherShareABuffer) {
  // gpt with 6 blocks: with prefetch at most the current unit, the next and the embedding are resident,
  // so far fewer buffers than units, and a training step's peak is what they hold.
  const nn::Model m("embed(32,16,8) block(2) block(2) block(2) block(2) block(2) block(2) ln lm_head(32)",
                    Shape{8}, DType::F32, 1, Device::CPU, nothing());
  const UnitPlan p = plan_of(m);
  EXPECT_EQ(p.units().size(), 8u);
  EXPECT_LE(p.param_buffers().size(), 4u);
  EXPECT_LE(p.grad_buffers().size(), 4u);
  const int64_t block = m.layer_end(1) - m.layer_begin(1);
  EXPECT_LE(p.peak_resident_elems(), p.units()[0].count() + 2 * block);
  EXPECT_GE(p.param_buffer_elems(), p.peak_resident_elems());
}

}  // namespace
