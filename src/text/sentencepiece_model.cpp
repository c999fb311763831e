// Protocol-buffer wire format, just enough for sentencepiece_model.h: varints,
// and length-delimited fields walked or copied verbatim.
#include "text/sentencepiece_model.h"

#include <cstdint>
#include <string_view>

#include "core/error.h"

namespace hpc::text {

namespace {

constexpr int MODEL_TRAINER_SPEC = 2, MODEL_NORMALIZER_SPEC = 3;
constexpr int TRAINER_MODEL_TYPE = 3, TRAINER_BYTE_FALLBACK = 35;
constexpr int NORMALIZER_NAME = 1, NORMALIZER_ADD_DUMMY_PREFIX = 3;
constexpr int WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5;

struct Field {
  int number = 0, wire = 0;
  uint64_t value = 0;         // WIRE_VARINT
  std::string_view bytes;     // WIRE_BYTES: the payload
  size_t begin = 0, end = 0;  // the whole field (tag included) in the message
};

uint64_t read_varint(std::string_view m, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= m.size()) throw Error(EXIT_INTERNAL, "SentencePiece model: truncated varint");
    const auto b = static_cast<unsigned char>(m[at++]);
    v |= uint64_t{b & 0x7Fu} << shift;
    if (!(b & 0x80)) return v;
  }
  throw Error(EXIT_INTERNAL, "SentencePiece model: varint too long");
}

bool next_field(std::string_view m, size_t& at, Field& f) {
  if (at >= m.size()) return false;
  f.begin = at;
  const uint64_t tag = read_varint(m, at);
  f.number = static_cast<int>(tag >> 3);
  f.wire = static_cast<int>(tag & 7);
  if (f.wire == WIRE_VARINT) {
    f.value = read_varint(m, at);
  } else if (f.wire == WIRE_BYTES) {
    const uint64_t n = read_varint(m, at);
    if (n > m.size() - at) throw Error(EXIT_INTERNAL, "SentencePiece model: field past the end");
    f.bytes = m.substr(at, n);
    at += n;
  } else if (f.wire == WIRE_FIXED64 || f.wire == WIRE_FIXED32) {
    at += f.wire == WIRE_FIXED64 ? 8 : 4;
  } else {
    throw Error(EXIT_INTERNAL, "SentencePiece model: unsupported wire type " + std::to_string(f.wire));
  }
  f.end = at;
  return true;
}

// The last occurrence of a length-delimited field (protobuf: the last one wins).
std::string_view message_field(std::string_view m, int number) {
  std::string_view found;
  Field f;
  for (size_t at = 0; next_field(m, at, f);)
    if (f.number == number && f.wire == WIRE_BYTES) found = f.bytes;
  return found;
}

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

}  // namespace

SentencePieceModelInfo read_sentencepiece_info(const std::string& model_bytes) {
  SentencePieceModelInfo info;
  Field f;
  const std::string_view trainer = message_field(model_bytes, MODEL_TRAINER_SPEC);
  for (size_t at = 0; next_field(trainer, at, f);) {
    if (f.number == TRAINER_MODEL_TYPE && f.wire == WIRE_VARINT)
      info.model_type = f.value == 2 ? "bpe" : f.value == 3 ? "word" : f.value == 4 ? "char" : "unigram";
    if (f.number == TRAINER_BYTE_FALLBACK && f.wire == WIRE_VARINT) info.byte_fallback = f.value != 0;
  }
  const std::string_view normalizer = message_field(model_bytes, MODEL_NORMALIZER_SPEC);
  for (size_t at = 0; next_field(normalizer, at, f);) {
    if (f.number == NORMALIZER_NAME && f.wire == WIRE_BYTES) info.normalizer = std::string(f.bytes);
    if (f.number == NORMALIZER_ADD_DUMMY_PREFIX && f.wire == WIRE_VARINT)
      info.add_dummy_prefix = f.value != 0;
  }
  return info;
}

std::string without_dummy_prefix(const std::string& model_bytes) {
  const std::string_view m = model_bytes;
  std::string out, spec;
  Field f;
  for (size_t at = 0; next_field(m, at, f);) {
    if (f.number != MODEL_NORMALIZER_SPEC || f.wire != WIRE_BYTES) {
      out.append(m.substr(f.begin, f.end - f.begin));
      continue;
    }
    Field g;
    for (size_t in = 0; next_field(f.bytes, in, g);)  // every field of the spec but add_dummy_prefix
      if (g.number != NORMALIZER_ADD_DUMMY_PREFIX) spec.append(f.bytes.substr(g.begin, g.end - g.begin));
  }
  append_varint(spec, uint64_t{NORMALIZER_ADD_DUMMY_PREFIX} << 3 | WIRE_VARINT);
  append_varint(spec, 0);
  append_varint(out, uint64_t{MODEL_NORMALIZER_SPEC} << 3 | WIRE_BYTES);
  append_varint(out, spec.size());
  return out + spec;
}

}  // namespace hpc::text
