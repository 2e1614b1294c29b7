// The cifar10 dataset plugin: the CIFAR-10 binary version (cifar-10-binary.tar.gz), whose files
// data_batch_1.bin .. data_batch_5.bin (train) and test_batch.bin (test) are records of one label
// byte and 3072 pixel bytes, a 32x32 image channel-major (1024 red, 1024 green, 1024 blue, rows
// top to bottom). The files are mapped, not copied, and shared with every process reading them.
#include <memory>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "common/plugin.hpp"
#include "common/sample_transform.hpp"
#include "common/transformed_dataset.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::MappedFile;
using dpl::datasets::OpenRequest;
using dpl::support::PluginError;

constexpr int64_t kChannels = 3;
constexpr int64_t kSide = 32;
constexpr int64_t kPixelBytes = kChannels * kSide * kSide;
constexpr int64_t kRecordBytes = 1 + kPixelBytes;
constexpr int64_t kClasses = 10;
constexpr const char* kSubfolder = "cifar-10-batches-bin";  // what the archive unpacks to
// The training set's per-channel mean and standard deviation of pixel / 255 (red, green, blue).
const dpl::datasets::Normalisation kDefaultNormalisation = {{0.4914f, 0.4822f, 0.4465f},
                                                            {0.2470f, 0.2435f, 0.2616f}};

PluginError Invalid(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

std::vector<std::string> SplitFiles(const OpenRequest& request) {
  if (!request.train()) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

// The folder holding the split's first file: --data-dir itself, or the archive's subfolder in it.
std::string FindFolder(const OpenRequest& request, const std::string& first_file) {
  const std::string direct = request.path + "/" + first_file;
  const std::string nested = request.path + "/" + kSubfolder + "/" + first_file;
  if (dpl::datasets::IsRegularFile(direct)) return request.path;
  if (dpl::datasets::IsRegularFile(nested)) return request.path + "/" + kSubfolder;
  throw PluginError(DPL_ERR_NOT_FOUND,
                    "missing data file: looked for " + direct + " and " + nested +
                        "; pass --data-dir with the folder holding the CIFAR-10 binary version "
                        "(" +
                        kSubfolder + ")");
}

// One mapped file of records, checked.
struct RecordFile {
  std::shared_ptr<const MappedFile> file;
  int64_t first_sample = 0;  // its first record's index in the split
  int64_t records = 0;
};

RecordFile OpenRecords(const std::string& path, int64_t first_sample,
                       const std::vector<std::string>& names) {
  if (!dpl::datasets::IsRegularFile(path)) {
    throw PluginError(DPL_ERR_NOT_FOUND, "missing data file: " + path + " (the split is " +
                                             names.front() + " .. " + names.back() + ")");
  }
  RecordFile records;
  records.file = MappedFile::Open(path, MappedFile::Access::kPopulate);
  records.first_sample = first_sample;
  const int64_t size = int64_t(records.file->size());
  if (size == 0) throw Invalid(path + ": holds no records");
  if (size % kRecordBytes != 0) {
    const int64_t whole = size / kRecordBytes;
    throw Invalid(
        path + ": not a whole number of records: its " + std::to_string(size) + " bytes are " +
        std::to_string(whole) + (whole == 1 ? " record" : " records") + " of " +
        std::to_string(kRecordBytes) + " bytes (a label byte and 3x32x32 pixels) and " +
        std::to_string(size % kRecordBytes) + (size % kRecordBytes == 1 ? " byte" : " bytes") +
        " more (a copy cut short, or bytes added to it); download the set again");
  }
  records.records = size / kRecordBytes;
  for (int64_t r = 0; r < records.records; ++r) {
    const int label = records.file->data()[r * kRecordBytes];
    if (label >= kClasses) {
      throw Invalid(path + ": label " + std::to_string(label) + " of record " + std::to_string(r) +
                    " is not a CIFAR-10 class (0..9); is this the CIFAR-100 binary version?");
    }
  }
  return records;
}

class Cifar10Dataset : public dpl::datasets::TransformedDataset {
 public:
  Cifar10Dataset(std::vector<RecordFile> files, int64_t count,
                 dpl::datasets::SampleTransform transform, int num_threads)
      : TransformedDataset(std::move(transform), count, kClasses, num_threads),
        files_(std::move(files)) {}

 private:
  void BeforeFill() const override {
    for (const RecordFile& records : files_) records.file->CheckUnchanged();
  }
  // A record is its label byte, then the pixels.
  const void* SampleAt(int64_t index) const override { return Record(index) + 1; }
  int64_t LabelAt(int64_t index) const override { return int64_t(Record(index)[0]); }

  const uint8_t* Record(int64_t index) const {
    size_t f = 0;
    while (index >= files_[f].first_sample + files_[f].records) ++f;
    return files_[f].file->data() + (index - files_[f].first_sample) * kRecordBytes;
  }

  std::vector<RecordFile> files_;
};

struct Cifar10Traits {
  static constexpr char kName[] = "cifar10";
  struct Options {
    dpl::datasets::TransformOptions transform;
  };

  static Options ReadOptions(const dpl::support::KeyValueOptions& options) {
    return {dpl::datasets::ReadTransformOptions(options, /*images=*/true)};
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    const std::vector<std::string> names = SplitFiles(request);
    const std::string folder = FindFolder(request, names.front());
    std::vector<RecordFile> files;
    int64_t count = 0;
    for (const std::string& name : names) {
      files.push_back(OpenRecords(folder + "/" + name, count, names));
      count += files.back().records;
    }
    dpl::datasets::SampleTransform transform(
        options.transform, kDefaultNormalisation, {kChannels, kSide, kSide},
        dpl::datasets::SourceType::kUInt8, request.train(), request.seed, folder);
    return std::make_unique<Cifar10Dataset>(std::move(files), count, std::move(transform),
                                            request.num_threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 cifar10_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 cifar10_dataset_plugin = dpl::datasets::PluginTable<Cifar10Traits>(
    "1.0.0", "the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin)");
