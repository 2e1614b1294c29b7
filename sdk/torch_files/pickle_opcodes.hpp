// The pickle opcodes torch_pickle.cpp writes and torch_unpickler.cpp reads (CPython's
// Lib/pickle.py names them; the comment is each one's argument).
#pragma once

#include <cstdint>

namespace dpl::torch_files::pickle {

enum Opcode : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kBinInt = 'J',   // int32, little-endian
  kBinInt1 = 'K',  // uint8
  kBinInt2 = 'M',  // uint16, little-endian
  kNone = 'N',
  kBinPersId = 'Q',       // pops the persistent id
  kReduce = 'R',          // pops args, callable; pushes callable(*args)
  kBinUnicode = 'X',      // uint32 length, UTF-8
  kBinString = 'T',       // uint32 length; a Python 2 str, read as UTF-8 (torch.load's encoding)
  kShortBinString = 'U',  // uint8 length; as BINSTRING
  kBinBytes = 'B',        // uint32 length; bytes (protocol 3)
  kShortBinBytes = 'C',   // uint8 length; bytes (protocol 3)
  kAppend = 'a',
  kBuild = 'b',   // pops state; sets it on the object below
  kGlobal = 'c',  // "module\nname\n"
  kAppends = 'e',
  kBinGet = 'h',      // uint8 memo index
  kLongBinGet = 'j',  // uint32 memo index
  kEmptyList = ']',
  kBinPut = 'q',      // uint8 memo index
  kLongBinPut = 'r',  // uint32 memo index
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyTuple = ')',
  kBinFloat = 'G',  // float64, big-endian
  kProto = 0x80,    // uint8 protocol
  kNewObj = 0x81,   // pops args, class; pushes class.__new__(class, *args)
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,            // uint8 length, little-endian two's complement
  kLong4 = 0x8b,            // uint32 length, little-endian two's complement
  kShortBinUnicode = 0x8c,  // uint8 length, UTF-8 (protocol 4)
  kBinUnicode8 = 0x8d,      // uint64 length, UTF-8 (protocol 4)
  kStackGlobal = 0x93,      // pops name, module (protocol 4)
  kMemoize = 0x94,          // memo[len(memo)] = top (protocol 4)
  kFrame = 0x95,            // uint64 frame length, ignored (protocol 4)
};

}  // namespace dpl::torch_files::pickle
