// The few fields of a SentencePiece .model (a ModelProto protocol buffer)
// that libsentencepiece does not expose, read from the protobuf wire format.
//
// Debian's libsentencepiece-dev ships no sentencepiece_model.pb.h, so these
// are read directly: the proto's field numbers are fixed by
// sentencepiece_model.proto (TrainerSpec.model_type = 3, byte_fallback = 35;
// NormalizerSpec.name = 1, add_dummy_prefix = 3). Only called on bytes that
// libsentencepiece has already parsed successfully.
#pragma once

#include <string>

namespace hpc::text {

struct SentencePieceModelInfo {
  std::string model_type = "unigram";   // unigram | bpe | word | char
  bool byte_fallback = false;           // unknown characters become <0xNN> byte pieces
  std::string normalizer = "nmt_nfkc";  // the normalization rule's name ("identity": none)
  bool add_dummy_prefix = true;         // a "▁" is put before the text
};

SentencePieceModelInfo read_sentencepiece_info(const std::string& model_bytes);

// The same model with add_dummy_prefix off: what encodes the text after a byte that is not UTF-8, which
// continues the document rather than starting one.
std::string without_dummy_prefix(const std::string& model_bytes);

}  // namespace hpc::text
