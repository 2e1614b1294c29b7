// The NumPy .npy format as numpy.save writes it (numpy.lib.format, versions 1.0, 2.0 and 3.0):
// the magic "\x93NUMPY", a major and a minor version byte, the header's length (uint16 for 1.0,
// uint32 for 2.0 and 3.0, little-endian), the header, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), } (latin-1, UTF-8 for 3.0)
// padded with spaces and a newline, then the array's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/files.hpp"

namespace dpl::datasets::npy {

// A dtype the reader accepts, as numpy writes its descr ("<f4", "|u1").
struct AcceptedDtype {
  const char* descr;
  const char* name;  // "float32"
  size_t item_size;
};

// One .npy file, mapped: its dtype and shape read from the header and checked.
struct NpyArray {
  std::shared_ptr<const MappedFile> file;
  std::string descr;
  std::vector<int64_t> shape;
  size_t item_size = 0;
  size_t data_offset = 0;
  const uint8_t* data() const { return file->data() + data_offset; }
  const std::string& path() const { return file->path(); }
};

// The dtype, shape and data offset of a .npy that bytes[0 .. size) starts (its preamble and header
// at least; `file_size` is the whole file's, e.g. an archive member's), checked as OpenNpy checks
// a file; `path` names it in messages.
struct NpyLayout {
  std::string descr;
  std::vector<int64_t> shape;
  size_t item_size = 0;
  size_t data_offset = 0;
};
NpyLayout ReadNpyLayout(const std::string& path, const uint8_t* bytes, size_t size,
                        uint64_t file_size, const std::vector<AcceptedDtype>& accepted,
                        const std::string& role, const std::string& conversion);

// Maps `path` and checks its preamble and header, that the array is in C order, that its dtype is
// little-endian and among `accepted` (`role` says what the file holds, for the message: "samples"
// or "labels"; `conversion` is the numpy call that converts, e.g. "x.astype(numpy.float32)"), and
// that exactly the data the header declares follows it. Throws PluginError naming the file:
// DPL_ERR_NOT_FOUND when it is missing, DPL_ERR_INVALID_ARGUMENT for bad content.
NpyArray OpenNpy(const std::string& path, const std::vector<AcceptedDtype>& accepted,
                 const std::string& role, const std::string& conversion);

}  // namespace dpl::datasets::npy
