// Note [Data cache]: inflating Fashion-MNIST's 26 MB of gzip takes each worker about 0.4 s of CPU
// at every start, and decoding a folder of images far longer. With a cache folder (the config's
// cache_dir, from the launcher's --data-cache), the first run also writes the derived data there
// (inflated IDX files, decoded images) atomically, write then rename; later runs read that file
// instead, a plain copy from the page cache. An entry's name starts with a hash of its key, and
// the key holds every source's canonical path, size and modification time (and whatever else
// shapes the derived data), so an edited or replaced source is never served from it. An entry is
// checked like the data it replaces; one that is unreadable or wrong is ignored (with a warning)
// and written again. A cache that cannot be written costs only the time: the run goes on.
#pragma once

#include <cstdint>
#include <string>

namespace dpl::datasets {

// "<canonical path>|<size>|<mtime>|<ctime>" of a source file: the part of a cache key that changes
// whenever the file does. The change time too, because a copy or a rewrite may keep the size and
// be given the old modification time (cp -p, touch -r, rsync -t); no user call sets the ctime.
std::string SourceKey(const std::string& path);

// Where the entry for `key` lives: "<cache_dir>/<16 hex digits of StableHash(key)>-<name>". The
// name is the same whatever C++ library built the plugin.
std::string CacheEntryPath(const std::string& cache_dir, const std::string& key,
                           const std::string& name);

// A 64-bit FNV-1a hash of `text`, independent of the C++ library: it names entries, and an entry
// that holds it checks that it was written for this very key.
uint64_t StableHash(const std::string& text);

}  // namespace dpl::datasets
