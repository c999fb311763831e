// A SentencePiece .model (Llama 2, Mistral, TinyLlama, T5 …), run by Debian's libsentencepiece.
//
// Valid UTF-8 goes to libsentencepiece as it is, so the ids are its ids.
// Bytes that are not UTF-8 (which SentencePiece itself would turn into
// U+FFFD) are kept exactly when the model has byte fallback: each becomes
// its <0xNN> piece and the text on either side is encoded on its own, the
// part after it without the dummy-prefix space (it continues the document);
// decode() undoes exactly that. Without byte fallback such text is a
// UserError naming the byte's offset.
#pragma once

#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace hpc::text {

// UserError "ORIGIN: not a SentencePiece model (…)" when libsentencepiece cannot load the bytes.
std::unique_ptr<Tokenizer> make_sentencepiece(const std::string& model_bytes, const std::string& origin);

}  // namespace hpc::text
