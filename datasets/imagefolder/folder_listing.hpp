// The images of one split of an image folder, <path>/<split>/<class>/..., listed in the order of
// torchvision's ImageFolder: classes are the split folder's sub-folders in sorted order (labels
// 0..K-1), and a class's images are every .png, .jpg or .jpeg file (any case) below its folder,
// sorted by folder then name, as sorted(os.walk(...)) and sorted(file names) give. Files with
// another extension are skipped, except those of image formats this plugin does not decode,
// which are refused rather than silently left out. Symbolic links to files are followed; links
// to folders inside a class folder are not (torchvision follows them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpl::datasets::imagefolder {

struct ImageFile {
  std::string path;
  int64_t label = 0;
};

struct FolderListing {
  std::string split_folder;          // <path>/<split>
  std::vector<std::string> classes;  // sorted; label i is classes[i]
  std::vector<ImageFile> images;     // class by class, each in torchvision's order
};

// Lists <path>/<split>. Throws PluginError: DPL_ERR_NOT_FOUND for a missing split folder,
// DPL_ERR_INVALID_ARGUMENT for no class folder, an empty class folder, a file of an image format
// that is not read, or (for the test split) class folders other than the train split's.
FolderListing ListImageFolder(const std::string& path, const std::string& split);

}  // namespace dpl::datasets::imagefolder
