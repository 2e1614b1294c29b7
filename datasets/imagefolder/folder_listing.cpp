#include "folder_listing.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/files.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::imagefolder {
namespace {

using support::PluginError;

const char* const kReadExtensions[] = {".png", ".jpg", ".jpeg"};
// Extensions torchvision's ImageFolder takes that are not decoded here.
const char* const kRefusedExtensions[] = {".bmp", ".gif", ".pgm", ".ppm", ".tif", ".tiff", ".webp"};

struct Entry {
  std::string name;
  bool directory = false;  // following symbolic links when `follow_links`
  bool regular = false;
};

// The entries of `folder` (without "." and ".."), in no particular order.
std::vector<Entry> ReadFolder(const std::string& folder, bool follow_links) {
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) {
    throw PluginError(DPL_ERR_IO, folder + ": cannot list the folder: " + std::strerror(errno));
  }
  std::vector<Entry> entries;
  while (const dirent* item = ::readdir(dir)) {
    const std::string name = item->d_name;
    if (name == "." || name == "..") continue;
    Entry entry;
    entry.name = name;
    // readdir's type saves a stat per file; links and file systems that do not tell need one.
    if (item->d_type == DT_REG || item->d_type == DT_DIR) {
      entry.regular = item->d_type == DT_REG;
      entry.directory = item->d_type == DT_DIR;
      entries.push_back(entry);
      continue;
    }
    struct stat info {};
    const std::string full = folder + "/" + name;
    const int got = follow_links ? ::stat(full.c_str(), &info) : ::lstat(full.c_str(), &info);
    if (got == 0) {
      entry.directory = S_ISDIR(info.st_mode);
      entry.regular = S_ISREG(info.st_mode);
      // A link to a file counts as the file; a link to a folder stays a link (not followed).
      if (!follow_links && S_ISLNK(info.st_mode)) {
        struct stat target {};
        entry.regular = ::stat(full.c_str(), &target) == 0 && S_ISREG(target.st_mode);
      }
    }
    entries.push_back(entry);
  }
  ::closedir(dir);
  return entries;
}

std::string Lowercase(std::string text) {
  for (char& c : text) c = char(std::tolower(uint8_t(c)));
  return text;
}

bool HasExtension(const std::string& lowercase_name, const char* extension) {
  const size_t length = std::strlen(extension);
  return lowercase_name.size() > length &&
         lowercase_name.compare(lowercase_name.size() - length, length, extension) == 0;
}

std::vector<std::string> ClassFolders(const std::string& split_folder) {
  std::vector<std::string> classes;
  for (const Entry& entry : ReadFolder(split_folder, /*follow_links=*/true)) {
    if (entry.directory) classes.push_back(entry.name);
  }
  std::sort(classes.begin(), classes.end());
  return classes;
}

// Appends the images below `folder` (recursively) as (folder, name) pairs.
void CollectImages(const std::string& folder,
                   std::vector<std::pair<std::string, std::string>>* out) {
  for (const Entry& entry : ReadFolder(folder, /*follow_links=*/false)) {
    if (entry.directory) {
      CollectImages(folder + "/" + entry.name, out);
      continue;
    }
    if (!entry.regular) continue;
    const std::string lowercase = Lowercase(entry.name);
    for (const char* extension : kRefusedExtensions) {
      if (HasExtension(lowercase, extension)) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          folder + "/" + entry.name + ": " + extension +
                              " images are not read (only .png, .jpg and .jpeg); convert it or "
                              "move it out of the folder");
      }
    }
    for (const char* extension : kReadExtensions) {
      if (HasExtension(lowercase, extension)) {
        out->emplace_back(folder, entry.name);
        break;
      }
    }
  }
}

std::string Joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

FolderListing ListImageFolder(const std::string& path, const std::string& split) {
  FolderListing listing;
  listing.split_folder = path + "/" + split;
  // ImageNet's layout (and tools/make_shards.py's, webdataset's) calls the held-out split val/.
  if (split == "test" && !IsDirectory(listing.split_folder) && IsDirectory(path + "/val")) {
    listing.split_folder = path + "/val";
  }
  if (!IsDirectory(listing.split_folder)) {
    throw PluginError(DPL_ERR_NOT_FOUND,
                      "missing data folder: " + listing.split_folder +
                          "; pass --data-dir with a folder holding train/<class>/<image> and "
                          "test/<class>/<image> or val/<class>/<image> (.png, .jpg or .jpeg)");
  }
  listing.classes = ClassFolders(listing.split_folder);
  if (listing.classes.empty()) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, listing.split_folder + ": holds no class folder (" +
                                                    split + "/<class>/<image>)");
  }
  const std::string train_folder = path + "/train";
  if (split != "train" && IsDirectory(train_folder)) {
    const std::vector<std::string> train_classes = ClassFolders(train_folder);
    if (train_classes != listing.classes) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        listing.split_folder + ": its class folders (" + Joined(listing.classes) +
                            ") differ from those of " + train_folder + " (" +
                            Joined(train_classes) +
                            "); both splits need the same classes for the labels to agree");
    }
  }
  for (size_t label = 0; label < listing.classes.size(); ++label) {
    const std::string class_folder = listing.split_folder + "/" + listing.classes[label];
    std::vector<std::pair<std::string, std::string>> images;
    CollectImages(class_folder, &images);
    if (images.empty()) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        class_folder + ": the class folder holds no .png, .jpg or .jpeg image");
    }
    std::sort(images.begin(), images.end());
    for (const auto& [folder, name] : images) {
      listing.images.push_back({folder + "/" + name, int64_t(label)});
    }
  }
  return listing;
}

}  // namespace dpl::datasets::imagefolder
