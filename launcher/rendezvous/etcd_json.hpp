// What the etcd store needs of JSON and base64: etcd's HTTP gateway speaks JSON, with keys and
// values in base64 and 64-bit numbers as strings ("revision": "42"). A small reader, because the
// launcher has no JSON library to parse with (Boost 1.74 has no Boost.JSON) and the gateway's
// answers are small and regular.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpl::rendezvous::etcd {

std::string Base64Encode(std::string_view bytes);
// nullopt for text that is not base64 (RFC 4648, with padding).
std::optional<std::string> Base64Decode(std::string_view text);

// One JSON value. Numbers keep their text; strings are unescaped (\uXXXX as UTF-8).
class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  // nullopt for text that is not one complete JSON value.
  static std::optional<Json> Parse(std::string_view text);

  Type type() const { return type_; }
  // The member `key` of an object, or nullptr (also for a value that is no object).
  const Json* Find(std::string_view key) const;
  // Shortcuts for what the gateway leaves out when it is the default (0, false, ""):
  // the member as text (a string's, a number's) or `fallback`.
  std::string Text(std::string_view key, std::string_view fallback = "") const;
  // The member as an integer, written as a number or as a string of digits; `fallback` when it
  // is missing or not an integer.
  int64_t Integer(std::string_view key, int64_t fallback = 0) const;
  bool Bool(std::string_view key) const;
  // The elements of the member `key` when it is an array; empty otherwise.
  const std::vector<Json>& Items(std::string_view key) const;
  const std::vector<Json>& items() const { return items_; }
  const std::string& text() const { return text_; }

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  std::string text_;                                   // kString, kNumber; "true"/"false" for kBool
  std::vector<Json> items_;                            // kArray
  std::vector<std::pair<std::string, Json>> members_;  // kObject, in their order
};

}  // namespace dpl::rendezvous::etcd
