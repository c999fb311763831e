// libhpctrain-sentencepiece.so: Debian's libsentencepiece behind hpc::text::SentencePieceModel.
// Why it is a plugin and not linked in: src/text/sentencepiece_api.h.
#include <sentencepiece_processor.h>

#include <exception>

#include "text/sentencepiece_api.h"

namespace {

class Model : public hpc::text::SentencePieceModel {
 public:
  int piece_count() const override { return sp_.GetPieceSize(); }
  bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const override {
    const auto st = sp_.Encode(text, &ids);
    if (!st.ok()) error = st.message();
    return st.ok();
  }
  bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const override {
    const auto st = sp_.Decode(ids, &text);
    if (!st.ok()) error = st.message();
    return st.ok();
  }
  std::string piece(int id) const override { return sp_.IdToPiece(id); }
  bool is_byte(int id) const override { return sp_.IsByte(id); }
  bool is_control(int id) const override { return sp_.IsControl(id); }
  bool is_unknown(int id) const override { return sp_.IsUnknown(id); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }

  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) hpc::text::SentencePieceModel* hpc_sentencepiece_load(
    const char* bytes, size_t size, std::string* error) {
  try {
    auto model = std::make_unique<Model>();
    const auto st = model->sp_.LoadFromSerializedProto(std::string_view(bytes, size));
    if (!st.ok()) {
      *error = st.message();
      return nullptr;
    }
    return model.release();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
