#include "common/npy_format.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "common/sample_transform.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::npy {
namespace {

using support::PluginError;

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

PluginError Invalid(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

// The header's three entries, read from its dict literal.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A reader of the one Python literal numpy writes: a dict of the keys 'descr' (a string),
// 'fortran_order' (True or False) and 'shape' (a tuple of integers).
class HeaderParser {
 public:
  HeaderParser(std::string path, std::string text)
      : path_(std::move(path)), text_(std::move(text)) {
    while (!text_.empty() && (text_.back() == '\n' || text_.back() == ' ' || text_.back() == 0)) {
      text_.pop_back();
    }
  }

  Header Parse() {
    Header header;
    std::map<std::string, bool> seen;
    Expect('{', "expected a dict literal");
    while (!Consume('}')) {
      const std::string key = ParseString("expected a quoted key");
      if (key != "descr" && key != "fortran_order" && key != "shape")
        Fail("unknown key '" + key + "'");
      if (seen[key]) Fail("key '" + key + "' given twice");
      seen[key] = true;
      Expect(':', "expected ':' after '" + key + "'");
      if (key == "descr") {
        SkipSpace();
        if (position_ < text_.size() && text_[position_] == '[') {
          Fail("a structured dtype is not read; save a plain array of numbers");
        }
        header.descr = ParseString("expected a quoted dtype for 'descr'");
      } else if (key == "fortran_order") {
        header.fortran_order = ParseBool();
      } else {
        header.shape = ParseShape();
      }
      if (!Consume(',')) {
        Expect('}', "expected ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (position_ != text_.size()) Fail("text after the dict");
    for (const char* key : {"descr", "fortran_order", "shape"}) {
      if (!seen[key]) Fail(std::string("missing key '") + key + "'");
    }
    return header;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw Invalid(path_ + ": bad .npy header: " + what + " in \"" + text_ + "\"");
  }
  void SkipSpace() {
    while (position_ < text_.size() && std::isspace(uint8_t(text_[position_]))) ++position_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (position_ < text_.size() && text_[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }
  void Expect(char c, const std::string& what) {
    if (!Consume(c)) Fail(what);
  }
  std::string ParseString(const std::string& what) {
    SkipSpace();
    if (position_ >= text_.size() || (text_[position_] != '\'' && text_[position_] != '"')) {
      Fail(what);
    }
    const char quote = text_[position_++];
    const size_t end = text_.find(quote, position_);
    if (end == std::string::npos) Fail(what);
    std::string value = text_.substr(position_, end - position_);
    position_ = end + 1;
    return value;
  }
  bool ParseBool() {
    SkipSpace();
    for (const auto& [word, value] :
         {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      const size_t length = std::strlen(word);
      if (text_.compare(position_, length, word) == 0) {
        position_ += length;
        return value;
      }
    }
    Fail("expected True or False for 'fortran_order'");
  }
  std::vector<int64_t> ParseShape() {
    const std::string what = "expected a tuple of integers for 'shape'";
    std::vector<int64_t> shape;
    Expect('(', what);
    while (!Consume(')')) {
      SkipSpace();
      if (position_ >= text_.size() || !std::isdigit(uint8_t(text_[position_]))) Fail(what);
      int64_t value = 0;
      while (position_ < text_.size() && std::isdigit(uint8_t(text_[position_]))) {
        if (value > (INT64_MAX - 9) / 10) Fail("an extent in 'shape' is too large");
        value = value * 10 + (text_[position_++] - '0');
      }
      if (position_ < text_.size() && text_[position_] == 'L') ++position_;  // Python 2's long
      shape.push_back(value);
      if (!Consume(',')) {
        Expect(')', what);
        break;
      }
    }
    return shape;
  }

  std::string path_;
  std::string text_;
  size_t position_ = 0;
};

uint32_t LittleEndian(const uint8_t* p, size_t bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= uint32_t(p[i]) << (8 * i);
  return value;
}

std::string AcceptedList(const std::vector<AcceptedDtype>& accepted) {
  std::string text;
  for (size_t i = 0; i < accepted.size(); ++i) {
    text += std::string(i == 0                     ? ""
                        : i + 1 == accepted.size() ? " or "
                                                   : ", ") +
            accepted[i].name + " '" + accepted[i].descr + "'";
  }
  return text;
}

// The header of the mapped file `bytes` (`size` bytes) after its preamble is checked;
// `*data_offset` is where the array's data starts.
Header ReadHeader(const std::string& path, const uint8_t* bytes, size_t size, size_t* data_offset) {
  if (size > 0 && std::memcmp(bytes, kMagic, std::min(size, kMagicBytes)) != 0) {
    throw Invalid(path + ": not a .npy file (it does not start with \\x93NUMPY)");
  }
  if (size < kMagicBytes + 4) {
    throw Invalid(path + ": truncated: " + std::to_string(size) +
                  " bytes, shorter than the .npy preamble");
  }
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    throw Invalid(path + ": .npy format version " + std::to_string(major) + "." +
                  std::to_string(minor) + " is not read (versions 1.0, 2.0 and 3.0 are)");
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t preamble = kMagicBytes + 2 + length_bytes;
  if (size < preamble) {
    throw Invalid(path + ": truncated: " + std::to_string(size) +
                  " bytes, shorter than the .npy preamble");
  }
  const size_t header_length = LittleEndian(bytes + 8, length_bytes);
  if (size - preamble < header_length) {
    throw Invalid(path + ": truncated: the header is " + std::to_string(header_length) +
                  " bytes long but only " + std::to_string(size - preamble) +
                  " bytes follow the preamble");
  }
  *data_offset = preamble + header_length;
  return HeaderParser(path,
                      std::string(reinterpret_cast<const char*>(bytes) + preamble, header_length))
      .Parse();
}

// The entry of `accepted` that `descr` names, for a little-endian (or byte-sized) dtype.
const AcceptedDtype& FindDtype(const std::string& path, const std::string& descr,
                               const std::vector<AcceptedDtype>& accepted, const std::string& role,
                               const std::string& conversion) {
  if (descr.size() > 1 && descr[0] == '>' && descr.substr(1) != "u1" && descr.substr(1) != "i1") {
    throw Invalid(path + ": dtype '" + descr + "' is big-endian; save it little-endian (" +
                  conversion + ")");
  }
  const AcceptedDtype* dtype = nullptr;
  for (const AcceptedDtype& candidate : accepted) {
    // The byte-order character may be '<' (little), '=' (native: little here) or '|' (none).
    const std::string name = candidate.descr;
    if (descr.size() == name.size() && std::string("<=|").find(descr[0]) != std::string::npos &&
        descr.compare(1, std::string::npos, name, 1, std::string::npos) == 0) {
      dtype = &candidate;
    }
  }
  if (dtype == nullptr) {
    throw Invalid(path + ": dtype '" + descr + "' is not read for " + role + " (" +
                  AcceptedList(accepted) + "); convert it (" + conversion + ")");
  }
  return *dtype;
}

// Checks that exactly the data the header declares follows it in a file of `file_size` bytes.
void CheckDataSize(const std::string& path, const NpyLayout& layout, uint64_t file_size) {
  uint64_t data_bytes = layout.item_size;
  for (const int64_t extent : layout.shape) {
    if (__builtin_mul_overflow(data_bytes, uint64_t(extent), &data_bytes)) {
      throw Invalid(path + ": shape " + ShapeText(layout.shape) + " is too large");
    }
  }
  const uint64_t follows = file_size - layout.data_offset;
  const std::string declared = "shape " + ShapeText(layout.shape) + " of '" + layout.descr + "' (" +
                               std::to_string(data_bytes) + " bytes of data)";
  if (follows < data_bytes) {
    throw Invalid(path + ": truncated: the header declares " + declared + " but " +
                  std::to_string(follows) + " bytes follow it");
  }
  if (follows > data_bytes) {
    throw Invalid(path + ": " + std::to_string(follows - data_bytes) +
                  " bytes follow the data the header declares, " + declared +
                  "; numpy.save writes none");
  }
}

}  // namespace

NpyLayout ReadNpyLayout(const std::string& path, const uint8_t* bytes, size_t size,
                        uint64_t file_size, const std::vector<AcceptedDtype>& accepted,
                        const std::string& role, const std::string& conversion) {
  NpyLayout layout;
  const Header header = ReadHeader(path, bytes, size, &layout.data_offset);
  if (header.fortran_order) {
    throw Invalid(path +
                  ": the array is in Fortran order; save it in C order "
                  "(numpy.save(path, numpy.ascontiguousarray(array)))");
  }
  layout.descr = header.descr;
  layout.shape = header.shape;
  layout.item_size = FindDtype(path, header.descr, accepted, role, conversion).item_size;
  CheckDataSize(path, layout, file_size);
  return layout;
}

NpyArray OpenNpy(const std::string& path, const std::vector<AcceptedDtype>& accepted,
                 const std::string& role, const std::string& conversion) {
  NpyArray array;
  array.file = MappedFile::Open(path, MappedFile::Access::kRandom);
  const NpyLayout layout = ReadNpyLayout(path, array.file->data(), array.file->size(),
                                         array.file->size(), accepted, role, conversion);
  array.descr = layout.descr;
  array.shape = layout.shape;
  array.item_size = layout.item_size;
  array.data_offset = layout.data_offset;
  return array;
}

}  // namespace dpl::datasets::npy
