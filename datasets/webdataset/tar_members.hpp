// The members of a tar shard, read header by header with pread: the POSIX (ustar and pax) and GNU
// formats as the webdataset package (Python's tarfile), GNU and BSD tar and Go's archive/tar
// write them. A pax extended header ('x') or a GNU long name ('L') before a member gives its full
// name (and a pax `size` its size); ustar's prefix field is joined to its name; leading "./" is
// dropped. Only regular files are members; folders, links and the like are stepped over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "shard_file.hpp"

namespace dpl::datasets::webdataset {

// What precedes a member's data in a tar: 512-byte blocks.
inline constexpr uint64_t kTarBlock = 512;
// How much of a member's data each header read brings along (a label, an image's header).
inline constexpr size_t kMemberHeadBytes = 4096;

struct TarMember {
  std::string name;
  uint64_t data_offset = 0;  // byte of the shard where its data starts
  uint64_t size = 0;         // bytes of data
  // The first min(size, kMemberHeadBytes) bytes of its data, valid during the visit.
  const uint8_t* head = nullptr;
  size_t head_size = 0;
};

// Calls visit(member) for every regular file of the tar `shard`, in the order they are stored.
// Throws PluginError(DPL_ERR_INVALID_ARGUMENT) naming the shard, the byte and the member where
// there is one, with what to do, for: a compressed shard (gzip, bzip2, xz, zstd, lz4: they cannot
// be read by offset), an empty file, a header whose checksum fails (not a tar, or damaged), a
// member whose data runs past the end of the file or a shard that ends without the tar
// end-of-archive blocks (truncated), a sparse or multi-volume member, and a malformed pax record.
void ForEachTarMember(const ShardFile& shard, const std::function<void(const TarMember&)>& visit);

}  // namespace dpl::datasets::webdataset
