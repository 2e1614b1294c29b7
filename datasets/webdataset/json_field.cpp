#include "json_field.hpp"

#include <cctype>
#include <stdexcept>

namespace dpl::datasets::webdataset {
namespace {

// A malformed document: the message says where.
struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}

  void SkipSpace() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool Peek(char c) {
    SkipSpace();
    return at_ < text_.size() && text_[at_] == c;
  }
  void Expect(char c) {
    if (!Peek(c)) Fail(std::string("expected '") + c + "'");
    ++at_;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    throw JsonError("is not valid JSON (" + what + " at byte " + std::to_string(at_) + ")");
  }
  bool AtEnd() {
    SkipSpace();
    return at_ == text_.size();
  }

  // A string, its escapes decoded as far as keys need (\uXXXX kept as written).
  std::string String() {
    Expect('"');
    std::string result;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c == '\\') {
        if (at_ >= text_.size()) break;
        c = text_[at_++];
        switch (c) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u':
            result += "\\u";
            continue;
          default:
            break;  // \" \\ \/
        }
      }
      result += c;
    }
    if (at_ >= text_.size()) Fail("an unterminated string");
    ++at_;
    return result;
  }

  // The text of a scalar (number, true, false, null).
  std::string Scalar() {
    SkipSpace();
    const size_t start = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
                                  text_[at_] == '-' || text_[at_] == '+' || text_[at_] == '.')) {
      ++at_;
    }
    if (at_ == start) Fail("expected a value");
    return text_.substr(start, at_ - start);
  }

  // Steps over any value.
  void SkipValue() {
    SkipSpace();
    if (Peek('"')) {
      String();
    } else if (Peek('{') || Peek('[')) {
      const char close = text_[at_] == '{' ? '}' : ']';
      ++at_;
      if (Peek(close)) {
        ++at_;
        return;
      }
      for (;;) {
        if (close == '}') {
          String();
          Expect(':');
        }
        SkipValue();
        if (Peek(',')) {
          ++at_;
          continue;
        }
        Expect(close);
        return;
      }
    } else {
      Scalar();
    }
  }

 private:
  const std::string& text_;
  size_t at_ = 0;
};

// An integer written as a JSON number: digits with an optional sign, and an optional fraction of
// zeros. False otherwise.
bool IntegerOf(const std::string& number, int64_t* value) {
  size_t end = number.find('.');
  const std::string whole = number.substr(0, end);
  if (whole.empty()) return false;
  if (end != std::string::npos && number.find_first_not_of('0', end + 1) != std::string::npos) {
    return false;
  }
  if (end != std::string::npos && end + 1 == number.size()) return false;
  const size_t digits = whole[0] == '-' ? 1 : 0;
  if (whole.size() == digits || whole.size() - digits > 18 ||
      whole.find_first_not_of("0123456789", digits) != std::string::npos) {
    return false;
  }
  *value = std::stoll(whole);
  return true;
}

}  // namespace

std::string ReadJsonIntegerField(const std::string& text, const std::string& field,
                                 int64_t* value) {
  try {
    JsonReader reader(text);
    if (!reader.Peek('{')) return "is not a JSON object";
    reader.Expect('{');
    bool found = false;
    std::string found_text;
    bool found_is_string = false;
    if (!reader.Peek('}')) {
      for (;;) {
        const std::string key = reader.String();
        reader.Expect(':');
        if (key == field) {  // Python's json.loads, and so WebDataset, keeps the last
          found = true;
          found_is_string = reader.Peek('"');
          if (found_is_string) {
            found_text = reader.String();
          } else if (reader.Peek('{') || reader.Peek('[')) {
            reader.SkipValue();
            found_text = "an object or array";
          } else {
            found_text = reader.Scalar();
          }
        } else {
          reader.SkipValue();
        }
        if (reader.Peek(',')) {
          reader.Expect(',');
          continue;
        }
        break;
      }
    }
    reader.Expect('}');
    if (!reader.AtEnd()) reader.Fail("text after the object");
    if (!found) return "has no field \"" + field + "\"";
    if (found_is_string || !IntegerOf(found_text, value)) {
      const std::string shown = found_is_string ? "\"" + found_text + "\"" : found_text;
      return "field \"" + field + "\" is " + shown + ", not an integer";
    }
    return "";
  } catch (const JsonError& error) {
    return error.what();
  }
}

}  // namespace dpl::datasets::webdataset
