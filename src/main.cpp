// hpctrain: the table of contents of a run.
//
//   1. parse and validate the configuration (before MPI: a bad option is one
//      line and exit 2 on every rank, no abort banners)
//   2. start MPI, find out who and where we are
//   3. set up data, model and optimizer on every rank; if any rank fails,
//      all learn it and exit with the same code, the failing rank's message once
//   4. resume from a checkpoint (--resume), agreed like set-up
//   5. train; a failure from here on aborts every rank so none is left waiting;
//      a stop on request (signal, deadline) checkpoints and exits 75
#include <cstdio>
#include <memory>

#include "backend/cpu/blas_core.h"
#include "config/config.h"
#include "core/check.h"
#include "core/error.h"
#include "dist/context.h"
#include "dist/grid.h"
#include "doctor/doctor.h"
#include "train/eval_command.h"
#include "train/export.h"
#include "train/sample.h"
#include "train/started_file.h"
#include "train/trainer.h"

namespace {

// Before MPI_Init only the launcher says which rank this process is: rank 0 (or no launcher) prints.
bool first_rank() { return hpc::launcher_rank() <= 0; }

void print_error(const std::string& what, int rank, int world) {
  if (world > 1)
    std::fprintf(stderr, "hpctrain: error on rank %d: %s\n", rank, what.c_str());
  else
    std::fprintf(stderr, "hpctrain: error: %s\n", what.c_str());
}

// One set-up phase on every rank. If any rank failed, the lowest failing rank
// prints its message and every rank returns the same exit code; 0: all fine.
template <class Phase>
int agreed(hpc::dist::Context& ctx, Phase&& phase) {
  int code = 0;
  std::string message;
  try {
    phase();
  } catch (const hpc::Error& e) {
    code = e.exit_code();
    message = e.what();
  } catch (const std::exception& e) {
    code = hpc::EXIT_INTERNAL;
    message = e.what();
  }
  auto [failed_rank, worst] = ctx.agree_on_failure(code);
  if (failed_rank < 0) return 0;
  if (ctx.rank() == failed_rank) print_error(message, ctx.rank(), ctx.world());
  return worst;
}

int train(const hpc::Config& cfg, hpc::dist::Context& ctx) {
  // The parallel grid (dist.tp × dist.pp; the rest data parallel) and its groups' communicators,
  // then the trainer, which uses them; a world the grid does not fit is one line, exit 2.
  std::unique_ptr<hpc::dist::Grid> grid;
  std::unique_ptr<hpc::train::Trainer> trainer;
  if (int code = agreed(ctx, [&] {
        grid = std::make_unique<hpc::dist::Grid>(ctx, cfg.dist.tp, cfg.dist.pp);
        trainer = std::make_unique<hpc::train::Trainer>(cfg, ctx, *grid);
      }))
    return code;
  // --resume: rank 0 reads and checks the checkpoint; a bad one is one line and exit 2 on every rank.
  if (int code = agreed(ctx, [&] {
        trainer->print_header();
        trainer->load_resume_checkpoint();
      }))
    return code;

  try {
    trainer->apply_resume_checkpoint();
    hpc::train::note_training_started(ctx);  // for the job script: a death from here on is no failed start
    hpc::train::EvalResult r = trainer->run();
    if (ctx.is_root() && r.count > 0 && trainer->exit_code() == hpc::EXIT_OK)
      std::printf("%s\n", trainer->task().final_line(r).c_str());
    return trainer->exit_code();  // 75 after a stop with a checkpoint: requeue me
  } catch (const hpc::Error& e) {
    print_error(e.what(), ctx.rank(), ctx.world());
    ctx.abort(e.exit_code());
  } catch (const std::exception& e) {
    print_error(e.what(), ctx.rank(), ctx.world());
    ctx.abort(hpc::EXIT_INTERNAL);
  }
}

// hpctrain eval / predict: set-up agreed like training's, then the pass (collectives) aborts on failure.
int evaluate(const hpc::Config& cfg, hpc::dist::Context& ctx) {
  std::unique_ptr<hpc::train::EvalCommand> command;
  if (int code = agreed(ctx, [&] { command = std::make_unique<hpc::train::EvalCommand>(cfg, ctx); }))
    return code;
  try {
    return command->run();
  } catch (const hpc::Error& e) {
    print_error(e.what(), ctx.rank(), ctx.world());
    ctx.abort(e.exit_code());
  } catch (const std::exception& e) {
    print_error(e.what(), ctx.rank(), ctx.world());
    ctx.abort(hpc::EXIT_INTERNAL);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // First, before MPI and any thread: BLAS kernels that fit the CPU (may re-execute this program once).
  hpc::backend::cpu::fit_blas_core(argv);
  hpc::Config cfg;
  try {
    const hpc::doctor::Args args(argc, argv);  // doctor's bare --json / --local
    if (!hpc::parse_config(args.argc(), args.argv(), cfg)) return hpc::EXIT_OK;  // --help / --version
  } catch (const hpc::Error& e) {
    if (first_rank()) std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return e.exit_code();
  }
  // Every command is a case (a new one is a compiler warning here until it is handled).
  switch (cfg.command) {
    case hpc::Command::Doctor:  // starts MPI itself: a broken launch is one of its findings, not an exit
      return hpc::doctor::run(cfg, &argc, &argv);
    case hpc::Command::Sample:  // text from a language model's checkpoint: one process, no MPI
      return hpc::train::sample_command(cfg);
    case hpc::Command::Export:  // one process, no MPI
      return hpc::train::export_command(cfg);
    case hpc::Command::Train:
    case hpc::Command::Eval:
    case hpc::Command::Predict:
      break;
  }

  std::unique_ptr<hpc::dist::Context> ctx;
  try {
    ctx = std::make_unique<hpc::dist::Context>(&argc, &argv, cfg.dist);
  } catch (const hpc::Error& e) {
    if (first_rank()) std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return e.exit_code();
  }

  return cfg.command == hpc::Command::Train ? train(cfg, *ctx) : evaluate(cfg, *ctx);
}
