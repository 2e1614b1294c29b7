#include "rendezvous/etcd_json.hpp"

#include <array>
#include <cstdlib>

namespace dpl::rendezvous::etcd {
namespace {

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
// Deeper nesting than the gateway ever sends is refused rather than recursed into.
constexpr int kMaxDepth = 32;

std::array<int, 256> Base64Values() {
  std::array<int, 256> values;
  values.fill(-1);
  for (int i = 0; i < 64; ++i) values[static_cast<unsigned char>(kBase64Alphabet[i])] = i;
  return values;
}

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string text;
  text.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t group = (uint32_t(uint8_t(bytes[i])) << 16) |
                           (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6)
      text.push_back(kBase64Alphabet[(group >> shift) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) group |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    text.push_back(kBase64Alphabet[(group >> 18) & 63]);
    text.push_back(kBase64Alphabet[(group >> 12) & 63]);
    text.push_back(rest == 2 ? kBase64Alphabet[(group >> 6) & 63] : '=');
    text.push_back('=');
  }
  return text;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  static const std::array<int, 256> values = Base64Values();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int padding = 0;  // '=' may only end the last group, once or twice
    if (i + 4 == text.size() && text[i + 3] == '=') padding = text[i + 2] == '=' ? 2 : 1;
    uint32_t group = 0;
    for (size_t j = 0; j < 4; ++j) {
      const int value = j + padding >= 4 ? 0 : values[static_cast<unsigned char>(text[i + j])];
      if (value < 0) return std::nullopt;
      group = (group << 6) | static_cast<uint32_t>(value);
    }
    bytes.push_back(static_cast<char>(group >> 16));
    if (padding < 2) bytes.push_back(static_cast<char>((group >> 8) & 0xFF));
    if (padding < 1) bytes.push_back(static_cast<char>(group & 0xFF));
  }
  return bytes;
}

// Recursive descent over the text; every method returns false on malformed input.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  bool ParseDocument(Json* out) {
    if (!ParseValue(out, 0)) return false;
    SkipSpace();
    return position_ == text_.size();
  }

 private:
  void SkipSpace() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\n' ||
                                        text_[position_] == '\r' || text_[position_] == '\t')) {
      ++position_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (position_ >= text_.size() || text_[position_] != c) return false;
    ++position_;
    return true;
  }
  bool Literal(std::string_view word) {
    if (text_.substr(position_, word.size()) != word) return false;
    position_ += word.size();
    return true;
  }

  bool ParseValue(Json* out, int depth) {
    if (depth > kMaxDepth) return false;
    SkipSpace();
    if (position_ >= text_.size()) return false;
    const char c = text_[position_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->type_ = Json::Type::kString;
      return ParseString(&out->text_);
    }
    if (c == 't' || c == 'f') {
      out->type_ = Json::Type::kBool;
      out->text_ = c == 't' ? "true" : "false";
      return Literal(out->text_);
    }
    if (c == 'n') return Literal("null");
    return ParseNumber(out);
  }

  bool ParseNumber(Json* out) {
    const size_t start = position_;
    while (position_ < text_.size() &&
           std::string_view("+-0123456789.eE").find(text_[position_]) != std::string_view::npos) {
      ++position_;
    }
    if (position_ == start) return false;
    out->type_ = Json::Type::kNumber;
    out->text_ = std::string(text_.substr(start, position_ - start));
    return true;
  }

  bool ParseHex4(uint32_t* value) {
    if (text_.size() - position_ < 4) return false;
    *value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[position_++];
      const int digit = (c >= '0' && c <= '9')   ? c - '0'
                        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : -1;
      if (digit < 0) return false;
      *value = (*value << 4) | static_cast<uint32_t>(digit);
    }
    return true;
  }

  bool ParseString(std::string* out) {
    ++position_;  // the opening quote
    while (position_ < text_.size()) {
      const char c = text_[position_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (position_ >= text_.size()) return false;
      const char escaped = text_[position_++];
      const std::string_view from = "\"\\/bfnrt", to = "\"\\/\b\f\n\r\t";
      const size_t index = from.find(escaped);
      if (index != std::string_view::npos) {
        out->push_back(to[index]);
      } else if (escaped == 'u') {
        uint32_t code_point = 0;
        if (!ParseHex4(&code_point)) return false;
        AppendUtf8(code_point, out);  // surrogate pairs are not in what the gateway sends
      } else {
        return false;
      }
    }
    return false;
  }

  bool ParseArray(Json* out, int depth) {
    ++position_;
    out->type_ = Json::Type::kArray;
    if (Consume(']')) return true;
    do {
      out->items_.emplace_back();
      if (!ParseValue(&out->items_.back(), depth + 1)) return false;
    } while (Consume(','));
    return Consume(']');
  }

  bool ParseObject(Json* out, int depth) {
    ++position_;
    out->type_ = Json::Type::kObject;
    if (Consume('}')) return true;
    do {
      SkipSpace();
      if (position_ >= text_.size() || text_[position_] != '"') return false;
      std::string key;
      if (!ParseString(&key) || !Consume(':')) return false;
      out->members_.emplace_back(std::move(key), Json());
      if (!ParseValue(&out->members_.back().second, depth + 1)) return false;
    } while (Consume(','));
    return Consume('}');
  }

  std::string_view text_;
  size_t position_ = 0;
};

std::optional<Json> Json::Parse(std::string_view text) {
  Json value;
  JsonParser parser(text);
  if (!parser.ParseDocument(&value)) return std::nullopt;
  return value;
}

const Json* Json::Find(std::string_view key) const {
  for (const auto& member : members_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

std::string Json::Text(std::string_view key, std::string_view fallback) const {
  const Json* member = Find(key);
  if (member == nullptr || (member->type_ != Type::kString && member->type_ != Type::kNumber)) {
    return std::string(fallback);
  }
  return member->text_;
}

int64_t Json::Integer(std::string_view key, int64_t fallback) const {
  const std::string text = Text(key);
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<int64_t>(value) : fallback;
}

bool Json::Bool(std::string_view key) const {
  const Json* member = Find(key);
  return member != nullptr && member->type_ == Type::kBool && member->text_ == "true";
}

const std::vector<Json>& Json::Items(std::string_view key) const {
  static const std::vector<Json> kNone;
  const Json* member = Find(key);
  return member != nullptr && member->type_ == Type::kArray ? member->items_ : kNone;
}

}  // namespace dpl::rendezvous::etcd
