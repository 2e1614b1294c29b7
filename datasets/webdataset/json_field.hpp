// The integer field of a sample's .json member that a layout names as its label: a small reader
// of one JSON object's top-level fields (RFC 8259), enough to find one field and step over the
// others whatever they hold (strings with escapes, nested objects and arrays).
#pragma once

#include <cstdint>
#include <string>

namespace dpl::datasets::webdataset {

// Reads top-level field `field` of the JSON object `text` as an integer (a number without a
// fraction or exponent, or with a fraction of zeros: 3 and 3.0). Returns "" and sets *value, or
// says what is wrong ("has no field \"label\"", "is not a JSON object", "field \"label\" is
// \"cat\", not an integer"). A field given twice is read from its last, as Python's json.loads
// reads it.
std::string ReadJsonIntegerField(const std::string& text, const std::string& field, int64_t* value);

}  // namespace dpl::datasets::webdataset
