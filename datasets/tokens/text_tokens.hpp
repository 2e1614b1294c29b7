// Note [Text as byte tokens]: the text plugin trains on any UTF-8 text, one token per byte
// (vocabulary 256, as a character-level model of ASCII text). The text of a split is either its
// own file (train.txt, val.txt) or a part of one file: the first (1 - val_fraction) of its
// bytes, cut back to the start of a UTF-8 character, train, the rest validation (and test). The
// text is checked once (valid UTF-8: a binary file given by mistake is refused at its first bad
// byte), and with a data cache (Note [Data cache]) the split's tokens are written there once, keyed
// by the source's path, size and time, the part and the fraction; later runs map that entry
// without reading the source again. Without a cache the source itself is mapped and checked at
// every start.
#pragma once

#include <string>

#include "common/plugin.hpp"
#include "token_array.hpp"

namespace dpl::datasets::tokens {

inline constexpr double kDefaultValFraction = 0.1;

// The split's text as byte tokens (uint8), from the cache or the source. `val_fraction` applies
// when the split is a part of one file; `fraction_given` refuses it where it does not apply.
TokenArray OpenTextTokens(const OpenRequest& request, double val_fraction, bool fraction_given);

// The position of the first byte that is not valid UTF-8 in bytes[0, size), or size when all are.
size_t FirstInvalidUtf8(const uint8_t* bytes, size_t size);

}  // namespace dpl::datasets::tokens
