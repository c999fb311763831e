// safetensors (see safetensors.h).
#include "train/safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "train/metrics.h"

namespace hpc::train {

namespace {

// A minimal JSON reader for the header: objects, arrays, strings, integers.
struct Json {
  enum Kind { Null, Number, String, Array, Object } kind = Null;
  double number = 0;
  std::string text;
  std::vector<Json> items;        // an array's elements, or an object's values
  std::vector<std::string> keys;  // an object's keys, keys[i] naming items[i]
  const Json* get(const std::string& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &items[i];
    return nullptr;
  }
};

class JsonParser {
 public:
  JsonParser(const std::string& s, std::string what) : s_(s), what_(std::move(what)) {}
  Json parse() {
    Json v = value();
    space();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(what_ + ": header is not valid JSON (" + why + " at byte " + std::to_string(pos_) + ")");
  }
  void space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char peek() {
    space();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') {
        if (++pos_ >= s_.size()) fail("bad escape");
        const char e = s_[pos_];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;  // \uXXXX is not used by tensor names
      } else {
        out += s_[pos_];
      }
      ++pos_;
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Object;
      ++pos_;
      if (peek() == '}') return ++pos_, v;
      for (;;) {
        std::string key = string();
        expect(':');
        v.keys.push_back(std::move(key));
        v.items.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++pos_;
      if (peek() == ']') return ++pos_, v;
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.text = string();
      return v;
    }
    if (s_.compare(pos_, 4, "null") == 0) return pos_ += 4, v;
    size_t end = pos_;
    while (end < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[end])) || std::strchr("+-.eE", s_[end])))
      ++end;
    if (end == pos_) fail("unexpected character");
    v.kind = Json::Number;
    v.number = std::stod(s_.substr(pos_, end - pos_));
    pos_ = end;
    return v;
  }

  const std::string& s_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace

std::string safetensors_bytes(const std::vector<NamedArray>& arrays,
                              const std::vector<std::pair<std::string, std::string>>& meta) {
  std::ostringstream h;
  h << "{\"__metadata__\": {";
  for (size_t i = 0; i < meta.size(); ++i)
    h << (i ? ", " : "") << json_quote(meta[i].first) << ": " << json_quote(meta[i].second);
  h << "}";
  size_t offset = 0;
  for (const NamedArray& a : arrays) {
    const size_t bytes = static_cast<size_t>(a.shape.count()) * sizeof(float);
    h << ", " << json_quote(a.name) << ": {\"dtype\": \"F32\", \"shape\": [";
    for (int d = 0; d < a.shape.rank(); ++d) h << (d ? ", " : "") << a.shape[d];
    h << "], \"data_offsets\": [" << offset << ", " << offset + bytes << "]}";
    offset += bytes;
  }
  h << "}";
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + offset);
  for (const NamedArray& a : arrays)
    out.append(reinterpret_cast<const char*>(a.data), static_cast<size_t>(a.shape.count()) * sizeof(float));
  return out;
}

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  const std::string what = "safetensors file '" + path + "'";
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(what + ": cannot open it");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw UserError(what + ": shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8)
    throw UserError(what + ": header length " + std::to_string(n) + " beyond the file");
  const std::string header = bytes.substr(8, n);
  const Json root = JsonParser(header, what).parse();
  if (root.kind != Json::Object) throw UserError(what + ": the header is not a JSON object");
  const size_t data = 8 + n;
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& name = root.keys[i];
    const Json& t = root.items[i];
    if (name == "__metadata__") continue;
    const Json* dtype = t.get("dtype");
    const Json* shape = t.get("shape");
    const Json* offsets = t.get("data_offsets");
    if (!dtype || !shape || !offsets || shape->kind != Json::Array || offsets->items.size() != 2)
      throw UserError(what + ": tensor '" + name + "' lacks dtype, shape or data_offsets");
    std::vector<int64_t> dims;
    for (const Json& d : shape->items) dims.push_back(static_cast<int64_t>(d.number));
    const Shape s(dims);
    const size_t b = static_cast<size_t>(offsets->items[0].number),
                 e = static_cast<size_t>(offsets->items[1].number);
    const size_t width = dtype->text == "F32" ? 4 : dtype->text == "F64" ? 8 : 0;
    if (width == 0)
      throw UserError(what + ": tensor '" + name + "' is " + dtype->text +
                      "; hpctrain reads F32 and F64 (convert the file to float32)");
    if (e < b || data + e > bytes.size() || e - b != static_cast<size_t>(s.count()) * width)
      throw UserError(what + ": tensor '" + name +
                      "' has a byte range that does not fit its shape or the file");
    Tensor x(s, DType::F32);
    if (width == 4) {
      std::memcpy(x.raw(), bytes.data() + data + b, e - b);
    } else {
      for (int64_t i = 0; i < s.count(); ++i) {
        double v;
        std::memcpy(&v, bytes.data() + data + b + static_cast<size_t>(i) * 8, 8);
        x.data<float>()[i] = static_cast<float>(v);
      }
    }
    out.emplace(name, std::move(x));
  }
  return out;
}

}  // namespace hpc::train
