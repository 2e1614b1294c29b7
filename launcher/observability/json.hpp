// Writing JSON text: one object at a time, keys in the order added. For the metrics file, the
// trace and the store's reports; what is written here is read back by Python's json module.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dpl::observability {

// `text` as a JSON string literal, quotes included; control characters and non-ASCII bytes below
// 0x20 escaped, bytes of UTF-8 passed through.
std::string JsonString(std::string_view text);

// A number with at most `decimals` digits after the point (trailing zeros dropped); NaN and the
// infinities, which JSON cannot hold, as null.
std::string JsonNumber(double value, int decimals);

class JsonObject {
 public:
  JsonObject& Add(std::string_view key, int64_t value);
  JsonObject& Add(std::string_view key, int value) { return Add(key, int64_t(value)); }
  JsonObject& Add(std::string_view key, double value, int decimals);
  JsonObject& Add(std::string_view key, std::string_view text);
  JsonObject& Add(std::string_view key, const char* text) {
    return Add(key, std::string_view(text));
  }
  // `json` is already JSON (an object built here, say).
  JsonObject& AddRaw(std::string_view key, const std::string& json);
  // The object's text: {"key": value, ...} (", " and ": " as Python's json.dumps writes them).
  std::string str() const { return text_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string text_ = "{";
};

}  // namespace dpl::observability
