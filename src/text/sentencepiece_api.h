// The interface between hpctrain and its SentencePiece plugin.
//
// Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and
// exports its symbols; hpctrain also links the system's libprotobuf 3.21 (ONNX
// export). In one symbol namespace the two collide: the process crashes while
// loading, or sentencepiece's version check aborts. So libsentencepiece is
// never linked into hpctrain or hpcdata. plugins/sentencepiece.cpp wraps it
// behind this interface in libhpctrain-sentencepiece.so, which
// sentencepiece.cpp loads with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): the
// plugin and libsentencepiece resolve their own symbols first and add none
// to the process's. Only types of the C++ standard library cross the boundary
// (one libstdc++ is shared), and no exception does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hpc::text {

// One loaded SentencePiece model (a SentencePieceProcessor). Every method is const and thread-safe.
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  virtual int piece_count() const = 0;
  // false and `error` set when libsentencepiece reports a failure.
  virtual bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const = 0;
  virtual std::string piece(int id) const = 0;
  virtual bool is_byte(int id) const = 0;
  virtual bool is_control(int id) const = 0;
  virtual bool is_unknown(int id) const = 0;
  virtual int bos_id() const = 0;  // -1: none
  virtual int eos_id() const = 0;
};

constexpr const char* SENTENCEPIECE_PLUGIN = "libhpctrain-sentencepiece.so";
constexpr const char* SENTENCEPIECE_LOAD_SYMBOL = "hpc_sentencepiece_load";
// The plugin's one entry point: a model from the bytes of a .model file, or nullptr and `error`.
using SentencePieceLoadFn = SentencePieceModel* (*)(const char* bytes, size_t size, std::string* error);

}  // namespace hpc::text
