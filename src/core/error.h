// Errors and exit codes.
//
// hpctrain never crashes on bad input: a problem a user can fix becomes a
// UserError (one line, exit 2); a lost or stuck peer becomes a PeerError
// (exit 3). main() turns them into the message and the exit code, and, in a
// multi-rank job, into an abort of every rank so that none is left waiting.
#pragma once

#include <stdexcept>
#include <string>

namespace hpc {

// Documented process exit codes (docs/outputs.md "Exit codes").
constexpr int EXIT_OK = 0;
constexpr int EXIT_INTERNAL = 1;   // a bug: an invariant failed
constexpr int EXIT_BAD_INPUT = 2;  // bad option, config, data file, model spec, checkpoint
constexpr int EXIT_PEER = 3;       // a peer rank died or a collective timed out
constexpr int EXIT_IO = 74;        // the disk is full, or reading the data failed (EX_IOERR of sysexits.h)
constexpr int EXIT_REQUEUE = 75;   // checkpointed on request (signal / time limit): requeue me

class Error : public std::runtime_error {
 public:
  Error(int exit_code, const std::string& msg) : std::runtime_error(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Something the user can fix: an option, a file, a spec.
class UserError : public Error {
 public:
  explicit UserError(const std::string& msg) : Error(EXIT_BAD_INPUT, msg) {}
};

// A peer rank is gone or a collective did not complete in time.
class PeerError : public Error {
 public:
  explicit PeerError(const std::string& msg) : Error(EXIT_PEER, msg) {}
};

// The system failed us: no space left for a checkpoint (ENOSPC, EDQUOT), an
// I/O error reading the data (EIO). Not a bug, not bad input, and not worth
// a requeue (75) that would fail the same way.
class IoError : public Error {
 public:
  explicit IoError(const std::string& msg) : Error(EXIT_IO, msg) {}
};

// An internal invariant failed: a bug in hpctrain, not in the input.
#define HPC_ASSERT(cond, msg)                                                            \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::hpc::Error(::hpc::EXIT_INTERNAL, std::string("internal error: ") + (msg) + \
                                                   " (" #cond ") at " __FILE__ ":" +     \
                                                   std::to_string(__LINE__));            \
  } while (0)

}  // namespace hpc
