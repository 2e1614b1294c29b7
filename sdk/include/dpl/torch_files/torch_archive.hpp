// PyTorch's own file format, read and written without libtorch: the files of
// torch.save(obj, path) (torch >= 1.6, the zip format) holding plain data (TorchValue: dicts,
// lists, tuples, str, int, float, bool, None and dense CPU tensors), such as
// torch.save(model.state_dict(), path). Python's torch.load(path) reads what
// WriteTorchArchive writes, and ReadTorchArchive reads what torch.save writes for such data.
//
// Note [The torch.save layout]: a zip archive of stored (uncompressed) records, as torch 1.13
// writes it:
//   <name>/data.pkl   the object, pickle protocol 2; each tensor is
//                     torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
//                     requires_grad, backward_hooks), its storage a persistent id
//                     ('storage', torch.<Type>Storage, key, location, numel)
//   <name>/data/<key> the bytes of that storage (little-endian), one record per key "0", "1", ...
//   <name>/version    "3\n"
// Each record's data starts at a multiple of 64 bytes (padding in the local header's extra
// field, as torch does, so that readers may map tensors in place). The writer gives every tensor
// a storage of its own, offset 0, row-major strides; dicts are written as the Python type they
// carry (TorchDict::PythonType: nn.Module.state_dict() is an OrderedDict, so a state dict
// written as kOrderedDict reads back in Python exactly as state_dict() returned it; plain dicts
// need no GLOBAL at all). The reader also accepts any storage offset and strides (views are
// copied to contiguous tensors), shared storages, nn.Parameters (read as tensors), the storage
// location ('cuda:0' reads to the CPU like map_location='cpu') and protocols 3-4; it drops
// the _metadata that torch attaches to a state dict (module versions; load_state_dict does not
// need it).
#ifndef DPL_TORCH_FILES_TORCH_ARCHIVE_HPP
#define DPL_TORCH_FILES_TORCH_ARCHIVE_HPP

#include <string>

#include "dpl/support/status.hpp"
#include "dpl/torch_files/torch_value.hpp"

namespace dpl::torch_files {

// The record folder: torch 1.13 names it after the file ("model" for model.pt), later releases
// write "archive"; torch.load accepts any.
inline constexpr char kDefaultTorchArchiveName[] = "archive";

// Writes `root` to `path` in torch.save's format (Note [The torch.save layout]), with
// `archive_name` as the record folder (letters, digits, '_', '-', '.'). Atomic: a temporary file
// in the same folder, fsync, rename over `path`, fsync of the folder; so a crash leaves either
// the old file or the new one. The folder must exist. Errors: InvalidArgument for a value that
// cannot be written (naming its place, e.g. root['model']['fc.weight']), Io naming the path and
// the failed call.
Status WriteTorchArchive(const std::string& path, const TorchValue& root,
                         const std::string& archive_name = kDefaultTorchArchiveName);

// Reads a file written by torch.save (or WriteTorchArchive) holding plain data. Refuses, with a
// message naming the file, saying what it is and what to do: a file that is not a zip archive;
// a legacy (torch < 1.6) torch.save file; a TorchScript archive (torch.jit.save); a truncated or
// corrupt archive (no end record, records outside the file, a CRC-32 mismatch); a pickle that
// names any Python global other than the few a state dict needs (Note [A restricted
// unpickler], torch_pickle.hpp), or holds anything else a TorchValue cannot. Records the pickle
// does not refer to are ignored. Memory: the storages read and the tensors built from them are
// both held until the read completes, about twice the file's size at the peak.
Result<TorchValue> ReadTorchArchive(const std::string& path);

}  // namespace dpl::torch_files

#endif  // DPL_TORCH_FILES_TORCH_ARCHIVE_HPP
