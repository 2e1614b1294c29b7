#include "dpl/torch_files/torch_archive.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "dpl/torch_files/torch_pickle.hpp"
#include "dpl/torch_files/zip_archive.hpp"
#include "torch_files_test_support.hpp"

namespace dpl::torch_files {
namespace {

using testing::CppCheckpoint;
using testing::F32;
using testing::ModelStateDict;
using testing::Raw;
using testing::Str;
using testing::TempDir;
using testing::TorchArchiveTest;
using testing::WriteRawArchive;

// --- rendering values, files ---------------------------------------------------------------

std::string Hex(const uint8_t* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}
std::string Hex(const std::string& text) {
  return Hex(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

std::string Render(const TorchValue& value);

std::string RenderKey(const TorchDictKey& key) {
  if (const auto* text = std::get_if<std::string>(&key)) return "str:" + Hex(*text);
  return "int:" + std::to_string(std::get<int64_t>(key));
}

std::string RenderItems(const TorchValue::Items& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + Render(items[i]);
  return out;
}

// Mirrors render() of torch_archive_reference.py.
std::string Render(const TorchValue& value) {
  switch (value.kind()) {
    case TorchValue::Kind::kNone:
      return "None";
    case TorchValue::Kind::kBool:
      return std::string("bool:") + (*value.AsBool() ? "True" : "False");
    case TorchValue::Kind::kInt:
      return "int:" + std::to_string(*value.AsInt());
    case TorchValue::Kind::kFloat: {
      uint8_t bits[8];
      std::memcpy(bits, value.AsFloat(), 8);
      std::reverse(bits, bits + 8);
      return "float:" + Hex(bits, 8);
    }
    case TorchValue::Kind::kString:
      return "str:" + Hex(*value.AsString());
    case TorchValue::Kind::kList:
      return "list[" + RenderItems(*value.AsList()) + "]";
    case TorchValue::Kind::kTuple:
      return "tuple(" + RenderItems(*value.AsTuple()) + ")";
    case TorchValue::Kind::kDict: {
      std::string out = value.TypeName() + "{";
      bool first = true;
      for (const TorchDictEntry& entry : *value.AsDict()) {
        out += (first ? "" : ",") + RenderKey(entry.key) + ":" + Render(entry.value);
        first = false;
      }
      return out + "}";
    }
    case TorchValue::Kind::kTensor: {
      const TorchTensor& tensor = *value.AsTensor();
      std::string shape;
      for (size_t i = 0; i < tensor.shape.size(); ++i) {
        shape += (i ? " " : "") + std::to_string(tensor.shape[i]);
      }
      return std::string("tensor<") + TorchDtypeName(tensor.dtype) + ",[" + shape + "]," +
             Hex(tensor.data.data(), tensor.data.size()) + ">";
    }
  }
  return "?";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// --- against PyTorch: one Python run for the whole suite --------------------------------------

class TorchReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    Status written =
        WriteTorchArchive(*dir_ / "cpp_checkpoint.pt", CppCheckpoint(), "cpp_checkpoint");
    if (written.ok()) {
      written = WriteTorchArchive(*dir_ / "cpp_state_dict.pt", ModelStateDict(), "cpp_state_dict");
    }
    if (!written.ok()) {
      failure_ = written.message();
      return;
    }
    const int fd = ::open((*dir_ / "cpp_zip64.zip").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ZipWriterOptions options;
    options.zip64_threshold = 0;  // every record and offset with ZIP64 fields
    ZipWriter zip(fd, "cpp_zip64.zip", options);
    const std::string big(1000, 'x');
    if (!zip.Add("z/small", "abc", 3).ok() || !zip.Add("z/empty", "", 0).ok() ||
        !zip.Add("z/big", big.data(), big.size()).ok() || !zip.Finish().ok()) {
      failure_ = "writing cpp_zip64.zip failed";
    }
    ::close(fd);

    const std::string python = std::string(DPL_TEST_PYTHON);
    const std::string command = python + " " + DPL_TEST_SOURCE_DIR +
                                "/tests/training/torch_archive_reference.py " + dir_->path() +
                                " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string output;
    char buffer[4096];
    while (pipe && std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
    const int status = pipe ? ::pclose(pipe) : -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
      skip_ = DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh): " + output;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failure_ = command + " failed:\n" + output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(failure_, "");
  }
  static std::string Path(const std::string& name) { return *dir_ / name; }

  static TempDir* dir_;
  static std::string skip_;
  static std::string failure_;
};

TempDir* TorchReferenceTest::dir_ = nullptr;
std::string TorchReferenceTest::skip_;
std::string TorchReferenceTest::failure_;

TEST_F(TorchReferenceTest, TorchLoadsWhatCppWrites) {
  // The script also ran load_state_dict(strict=True) on each "model", and loaded the state dict
  // with torch.load(weights_only=True) too.
  EXPECT_EQ(ReadFile(Path("cpp_checkpoint.pt.txt")), Render(CppCheckpoint()));
  EXPECT_EQ(ReadFile(Path("cpp_state_dict.pt.txt")), Render(ModelStateDict()));
  // Python's zipfile reads (and CRC-checks) records written with ZIP64 fields.
  EXPECT_EQ(ReadFile(Path("cpp_zip64.zip.txt")),
            "z/small 616263\nz/empty \nz/big " + Hex(std::string(1000, 'x')));
  Result<std::unique_ptr<ZipReader>> zip = ZipReader::Open(Path("cpp_zip64.zip"));
  ASSERT_TRUE(zip.ok()) << zip.status().message();
  ASSERT_EQ((*zip)->records().size(), 3u);
  Result<std::vector<uint8_t>> big = (*zip)->Read(*(*zip)->Find("z/big"));
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(big->size(), 1000u);
}

TEST_F(TorchReferenceTest, CppReadsTorchsStateDict) {
  // torch.save(module.state_dict()) of Sequential(Linear(3, 2), BatchNorm1d(2)).
  Result<TorchValue> read = ReadTorchArchive(Path("py_state_dict.pt"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(Render(*read), ReadFile(Path("py_state_dict.pt.txt")));
  ASSERT_EQ(read->TypeName(), "OrderedDict");
  std::vector<std::string> names;
  for (const TorchDictEntry& entry : *read->AsDict()) {
    names.push_back(std::get<std::string>(entry.key));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked"}));
  const TorchTensor* weight = read->Find("0.weight")->AsTensor();
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype, TorchDtype::kFloat32);
  EXPECT_EQ(weight->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(weight->data.size(), 24u);
  const TorchTensor* tracked = read->Find("1.num_batches_tracked")->AsTensor();
  ASSERT_NE(tracked, nullptr);
  EXPECT_EQ(tracked->dtype, TorchDtype::kInt64);
  EXPECT_TRUE(tracked->shape.empty());
  EXPECT_EQ(tracked->Values<int64_t>(), (std::vector<int64_t>{3}));  // three forward passes
  EXPECT_EQ(read->Find("1.running_var")->AsTensor()->shape, (std::vector<int64_t>{2}));
}

TEST_F(TorchReferenceTest, CppReadsTorchsCheckpoint) {
  // A checkpoint dict: Adam's state dict, big ints, views, every dtype, tied tensors.
  Result<TorchValue> read = ReadTorchArchive(Path("py_checkpoint.pt"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(Render(*read), ReadFile(Path("py_checkpoint.pt.txt")));
  ASSERT_EQ(read->TypeName(), "dict");
  EXPECT_EQ(*read->Find("step")->AsInt(), int64_t(1) << 40);
  EXPECT_EQ(*read->Find("min")->AsInt(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*read->Find("name")->AsString(), "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80");
  EXPECT_TRUE(std::isnan(*read->Find("nan")->AsFloat()));

  // torch.optim keys its per-parameter state by int.
  const TorchValue* optimizer = read->Find("optimizer");
  ASSERT_NE(optimizer, nullptr);
  const TorchValue* state = optimizer->Find("state");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->AsDict()->size(), 4u);
  const TorchValue* exp_avg =
      state->Find(int64_t(0)) ? state->Find(int64_t(0))->Find("exp_avg") : nullptr;
  ASSERT_NE(exp_avg, nullptr);
  EXPECT_EQ(exp_avg->AsTensor()->shape, (std::vector<int64_t>{2, 3}));
  const TorchValue& group = optimizer->Find("param_groups")->AsList()->at(0);
  EXPECT_EQ(*group.Find("betas"),
            TorchValue::Tuple({TorchValue::Float(0.9), TorchValue::Float(0.999)}));
  EXPECT_EQ(*group.Find("params"), TorchValue::List({TorchValue::Int(0), TorchValue::Int(1),
                                                     TorchValue::Int(2), TorchValue::Int(3)}));
  EXPECT_TRUE(group.Find("foreach")->IsNone());

  // Views of base = arange(12).reshape(3, 4) come back as contiguous copies.
  const TorchValue* views = read->Find("views");
  ASSERT_NE(views, nullptr);
  EXPECT_EQ(*views->Find("transposed")->AsTensor(),
            F32({4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(*views->Find("slice")->AsTensor(), F32({2, 2}, {5, 6, 9, 10}));
  EXPECT_EQ(*views->Find("row")->AsTensor(), F32({4}, {8, 9, 10, 11}));
  EXPECT_EQ(*views->Find("every_other")->AsTensor(), F32({3, 2}, {0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(*views->Find("expanded")->AsTensor(), F32({3}, {1, 1, 1}));
  const TorchValue::Items& tied = *read->Find("tied")->AsList();
  EXPECT_EQ(tied.at(0), tied.at(1));
  EXPECT_EQ(*read->Find("parameter")->AsTensor(), F32({2}, {1, 1}));
  EXPECT_EQ(read->Find("dtypes")->Find("bfloat16")->AsTensor()->data,
            (std::vector<uint8_t>{0x80, 0x3f, 0x40, 0xc0}));
  EXPECT_EQ(read->Find("dtypes")->Find("int8")->AsTensor()->Values<int8_t>(),
            (std::vector<int8_t>{-128, 127}));
}

TEST_F(TorchReferenceTest, CppReadsTorchsProtocol4Pickles) {
  // torch.save(..., pickle_protocol=4): FRAME, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL.
  Result<TorchValue> read = ReadTorchArchive(Path("py_protocol4.pt"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(Render(*read), ReadFile(Path("py_protocol4.pt.txt")));
  EXPECT_EQ(*read, TorchValue::Dict({{"weight", TorchValue::Tensor(F32({2, 2}, {1, 1, 1, 1}))},
                                     {"names", TorchValue::List({Str("a"), Str("b")})}}));
}

TEST_F(TorchReferenceTest, RefusesTorchFilesThatHoldNoPlainData) {
  std::string path = Path("py_torchscript.pt");
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + " is a TorchScript archive (written by torch.jit.save), not a state dict; in " +
                "Python, save its weights with torch.save(torch.jit.load(path).state_dict(), " +
                "new_path) and pass that file");
  path = Path("py_legacy.pt");
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + " is a legacy torch.save file (the format of torch before 1.6), which this " +
                "reader does not read; in Python, save it again in the zip format: " +
                "torch.save(torch.load(path), new_path)");
  path = Path("py_os_system.pt");
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + ": py_os_system/data.pkl calls the Python global 'posix.system' (at byte 2), " +
                "which is not part of a state dict; this reader runs no Python code and " +
                "rebuilds only tensors, None, bools, ints, floats, strings, lists, tuples and " +
                "dicts: save plain data, such as model.state_dict()");
}

// --- C++ only ---------------------------------------------------------------------------------

TEST_F(TorchArchiveTest, RoundTripsEveryKindOfValue) {
  const std::string path = dir_ / "round_trip.pt";
  ASSERT_TRUE(WriteTorchArchive(path, CppCheckpoint(), "round_trip").ok());
  Result<TorchValue> read = ReadTorchArchive(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, CppCheckpoint());
  EXPECT_EQ(Render(*read), Render(CppCheckpoint()));
  // Overwriting is atomic and leaves no temporary file behind.
  ASSERT_TRUE(WriteTorchArchive(path, TorchValue::Int(5), "round_trip").ok());
  EXPECT_EQ(*ReadTorchArchive(path), TorchValue::Int(5));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST_F(TorchArchiveTest, WritesTorchsLayoutWithAlignedRecords) {
  const std::string path = dir_ / "layout.pt";
  ASSERT_TRUE(WriteTorchArchive(path, ModelStateDict(), "layout").ok());
  Result<std::unique_ptr<ZipReader>> zip = ZipReader::Open(path);
  ASSERT_TRUE(zip.ok()) << zip.status().message();
  std::vector<std::string> names;
  const std::string bytes = ReadFile(path);
  for (const ZipRecord& record : (*zip)->records()) {
    names.push_back(record.name);
    EXPECT_EQ(record.method, 0) << record.name;
    const auto* header =
        reinterpret_cast<const uint8_t*>(bytes.data() + record.local_header_offset);
    const uint64_t data = record.local_header_offset + 30 + (header[26] | header[27] << 8) +
                          (header[28] | header[29] << 8);
    EXPECT_EQ(data % 64, 0u) << record.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"layout/data.pkl", "layout/data/0", "layout/data/1",
                                             "layout/data/2", "layout/data/3", "layout/data/4",
                                             "layout/data/5", "layout/data/6", "layout/version"}));
  Result<std::vector<uint8_t>> version = (*zip)->Read(*(*zip)->Find("layout/version"));
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(std::string(version->begin(), version->end()), "3\n");
  Result<std::vector<uint8_t>> tracked = (*zip)->Read(*(*zip)->Find("layout/data/6"));
  ASSERT_TRUE(tracked.ok());
  EXPECT_EQ(*tracked, (std::vector<uint8_t>{7, 0, 0, 0, 0, 0, 0, 0}));
}

TEST_F(TorchArchiveTest, RefusesValuesItCannotWrite) {
  const std::string path = dir_ / "bad.pt";
  TorchValue short_data = TorchValue::Dict(
      {{"model", TorchValue::Dict({{"w", TorchValue::Tensor(Raw(TorchDtype::kFloat32, {2, 3},
                                                                std::vector<uint8_t>(20)))}})}});
  EXPECT_EQ(WriteTorchArchive(path, short_data).message(),
            "writing " + path + ": tensor root['model']['w'] has 20 bytes of data, which does " +
                "not fit its shape [2, 3] of float32 (4 bytes an element)");
  EXPECT_EQ(WriteTorchArchive(path, TorchValue::List({Str("ok"), Str("\xff")})).message(),
            "writing " + path + ": string root[1] is not valid UTF-8");
  TorchValue deep = TorchValue::Int(0);
  std::string where = "root";
  for (size_t i = 0; i <= kMaxTorchValueDepth; ++i) deep = TorchValue::List({std::move(deep)});
  for (size_t i = 0; i < kMaxTorchValueDepth + 1; ++i) where += "[0]";
  EXPECT_EQ(WriteTorchArchive(path, deep).message(),
            "writing " + path + ": " + where + " is nested deeper than 200 containers");
  EXPECT_EQ(WriteTorchArchive(path, TorchValue::Int(1), "a/b").message(),
            "torch archive name 'a/b' for " + path +
                " must be 1 to 255 letters, digits, '_', '-' or '.'");
  const std::string missing = dir_ / "missing/x.pt";
  Status status = WriteTorchArchive(missing, TorchValue::Int(1));
  EXPECT_EQ(status.code(), DPL_ERR_IO);
  EXPECT_EQ(status.message(), "creating " + missing + ".tmp." + std::to_string(::getpid()) +
                                  " failed: No such file or directory");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(TorchArchiveTest, RefusesFilesThatAreNoTorchArchive) {
  const std::string missing = dir_ / "missing.pt";
  EXPECT_EQ(ReadTorchArchive(missing).status().message(),
            "opening " + missing + " failed: No such file or directory");
  const std::string empty = dir_ / "empty.pt";
  WriteFile(empty, "");
  EXPECT_EQ(ReadTorchArchive(empty).status().message(),
            empty + " is empty, not a torch.save archive");
  const std::string text = dir_ / "text.pt";
  WriteFile(text, "0.weight,0.bias\n1,2\n");
  EXPECT_EQ(ReadTorchArchive(text).status().message(),
            text + " is not a torch.save archive (it is not a zip file); pass a file written by " +
                "torch.save(obj, path)");
  const std::string plain_zip = dir_ / "plain.zip";
  {
    const int fd = ::open(plain_zip.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ZipWriter zip(fd, plain_zip);
    ASSERT_TRUE(zip.Add("hello.txt", "hi", 2).ok());
    ASSERT_TRUE(zip.Finish().ok());
    ::close(fd);
  }
  EXPECT_EQ(ReadTorchArchive(plain_zip).status().message(),
            plain_zip + " is a zip archive but not a torch.save archive: its first record " +
                "'hello.txt' is not inside a folder");
  const std::string no_version = dir_ / "no_version.pt";
  WriteRawArchive(no_version, "a", "\x80\x02N.", {}, "");
  EXPECT_EQ(ReadTorchArchive(no_version).status().message(),
            no_version + " has no version record ('a/version'); write it again with torch.save");
  const std::string future = dir_ / "future.pt";
  WriteRawArchive(future, "a", "\x80\x02N.", {}, "99");
  EXPECT_EQ(ReadTorchArchive(future).status().message(),
            future + " has an archive format version '99' that this reader does not know (it " +
                "reads versions 1 to 10)");
}

TEST_F(TorchArchiveTest, RefusesTruncatedAndCorruptArchives) {
  const std::string path = dir_ / "model.pt";
  ASSERT_TRUE(WriteTorchArchive(path, ModelStateDict(), "model").ok());
  const std::string good = ReadFile(path);
  const std::string rewrite = "; write it again or use a good copy";

  WriteFile(path, good.substr(0, good.size() / 2));
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + " is truncated: it has no zip end record (an interrupted write or an " +
                "incomplete copy)" + rewrite);

  // A flipped bit in a record's CRC in the central directory, then one in the record's data.
  const size_t directory_name = good.rfind("model/data/0");
  ASSERT_NE(directory_name, std::string::npos);
  std::string bad_crc = good;
  bad_crc[directory_name - 46 + 16] ^= 0x01;
  WriteFile(path, bad_crc);
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + ": record 'model/data/0' fails its CRC-32 check: the file is corrupt" + rewrite);
  const float weight = -1.25f;  // an element of model/data/0 (0.weight)
  const size_t data = good.find(std::string(reinterpret_cast<const char*>(&weight), 4));
  ASSERT_NE(data, std::string::npos);
  std::string bad_data = good;
  bad_data[data] ^= 0x40;
  WriteFile(path, bad_data);
  EXPECT_EQ(ReadTorchArchive(path).status().message(),
            path + ": record 'model/data/0' fails its CRC-32 check: the file is corrupt" + rewrite);

  // Every shorter prefix is refused; every single flipped byte is refused or changes nothing read.
  const TorchValue expected = ModelStateDict();
  for (size_t size = 0; size < good.size(); ++size) {
    WriteFile(path, good.substr(0, size));
    ASSERT_FALSE(ReadTorchArchive(path).ok()) << "prefix of " << size << " bytes";
  }
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string flipped = good;
      flipped[at] = char(uint8_t(flipped[at]) ^ flip);
      WriteFile(path, flipped);
      Result<TorchValue> read = ReadTorchArchive(path);
      if (read.ok()) {
        ASSERT_EQ(*read, expected) << "byte " << at << " ^ " << int(flip);
      }
    }
  }
}

}  // namespace
}  // namespace dpl::torch_files
