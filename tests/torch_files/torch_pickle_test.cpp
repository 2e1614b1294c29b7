// The unpickler on hand-made pickles (every opcode family, shared objects, torch's dict state)
// and on what it must refuse: Python it would have to run, malformed or truncated pickles, values
// beyond the limits. The launcher and the SDK's libtorch helper had a reader each, which disagreed;
// the one left reads what either read (LONG4; BINSTRING, BINBYTES, NEWOBJ, POP and the globals of
// older torch and of libtorch's pickler), tested here as the union.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "dpl/torch_files/torch_archive.hpp"
#include "dpl/torch_files/torch_pickle.hpp"
#include "torch_files_test_support.hpp"

namespace dpl::torch_files {
namespace {

using testing::CppCheckpoint;
using testing::F32;
using testing::Le32;
using testing::TorchArchiveTest;
using testing::WriteRawArchive;
using testing::operator""_b;
using testing::Str;

std::string Global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string Text(const std::string& text) {
  return "X" + Le32(uint32_t(text.size())) + text;
}
std::string ShortText(const std::string& text) {  // protocol 4's SHORT_BINUNICODE
  return "\x8c" + std::string(1, char(text.size())) + text;
}
std::string Small(uint8_t v) {
  return std::string("K") + char(v);
}
std::string SmallTuple(const std::vector<uint8_t>& values) {
  std::string out = "(";
  for (uint8_t v : values) out += Small(v);
  return out + "t";
}
// _rebuild_tensor_v2 of storage `key` (FloatStorage of `numel`), as torch.save writes it.
std::string TensorPickle(const std::string& key, uint8_t numel, uint8_t offset,
                         const std::vector<uint8_t>& size, const std::vector<uint8_t>& stride) {
  return Global("torch._utils", "_rebuild_tensor_v2") + "((" + Text("storage") +
         Global("torch", "FloatStorage") + Text(key) + Text("cpu") + Small(numel) + "tQ" +
         Small(offset) + SmallTuple(size) + SmallTuple(stride) + "\x89" +
         Global("collections", "OrderedDict") + ")Rt" + "R";
}
std::string Floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

class TorchHandMadePickleTest : public TorchArchiveTest {
 protected:
  Result<TorchValue> Read(const std::string& pickle,
                          const std::vector<std::string>& storages = {}) {
    WriteRawArchive(path_, "a", pickle, storages);
    return ReadTorchArchive(path_);
  }
  // The message for a refused pickle: the file and its pickle record, then `what`.
  std::string Refusal(const std::string& what) { return path_ + ": a/data.pkl " + what; }
  const std::string kReads =
      ", which this reader does not rebuild: it reads tensors, None, bools, ints, floats, "
      "strings, lists, tuples and dicts, as a state dict holds";
  const std::string kRewrite = "; write the file again with torch.save";
  std::string path_ = dir_ / "hand_made.pt";
};

TEST_F(TorchHandMadePickleTest, ReadsSharedObjectsAndTorchsDictState) {
  // {'x': 1, 'y': [inner, inner], 'x': 9}, where inner = {'k': tensor} is memoized and fetched.
  const std::string pickle = "\x80\x02}q\x00("_b + Text("x") + Small(1) + Text("y") + "](}q\x01(" +
                             Text("k") + TensorPickle("0", 3, 1, {2}, {1}) + "uh\x01" + "e" +
                             Text("x") + Small(9) + "u.";
  Result<TorchValue> read = Read(pickle, {Floats({1, 2, 3})});
  ASSERT_TRUE(read.ok()) << read.status().message();
  const TorchValue inner = TorchValue::Dict({{"k", TorchValue::Tensor(F32({2}, {2, 3}))}});
  // Setting 'x' again keeps its first position, as in Python.
  EXPECT_EQ(*read,
            TorchValue::Dict({{"x", TorchValue::Int(9)}, {"y", TorchValue::List({inner, inner})}}));

  // An OrderedDict with torch's _metadata attribute state (BUILD): the state is dropped.
  const std::string ordered = Global("collections", "OrderedDict") + ")R(" + Text("a") + Small(1) +
                              "u}(" + Text("_metadata") + Global("collections", "OrderedDict") +
                              ")Rub.";
  read = Read("\x80\x02" + ordered);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, TorchValue::OrderedDict({{"a", TorchValue::Int(1)}}));
}

TEST_F(TorchHandMadePickleTest, RefusesWhatIsNoPlainData) {
  EXPECT_EQ(Read("\x80\x02" + Global("os", "system") + Text("true") + "\x85R.").status().message(),
            Refusal("calls the Python global 'os.system' (at byte 2), which is not part of a "
                    "state dict; this reader runs no Python code and rebuilds only tensors, "
                    "None, bools, ints, floats, strings, lists, tuples and dicts: save plain "
                    "data, such as model.state_dict()"));
  EXPECT_EQ(
      Read("\x80\x04" + ShortText("builtins") + ShortText("eval") + "\x93.").status().message(),
      Refusal("calls the Python global 'builtins.eval' (at byte 18), which is not part of "
              "a state dict; this reader runs no Python code and rebuilds only tensors, "
              "None, bools, ints, floats, strings, lists, tuples and dicts: save plain "
              "data, such as model.state_dict()"));
  EXPECT_EQ(Read("\x80\x02" + Global("torch", "ComplexFloatStorage") + ".").status().message(),
            Refusal("holds a tensor of storage type torch.ComplexFloatStorage (supported dtypes: "
                    "float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, "
                    "bool) at byte 2" +
                    kReads));
  EXPECT_EQ(Read("\x80\x02i__main__\nX\n.").status().message(),
            Refusal("holds the pickle opcode INST (0x69) at byte 2" + kReads));
  EXPECT_EQ(Read("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."_b).status().message(),
            Refusal("holds an integer that does not fit 64 bits at byte 2" + kReads));
  EXPECT_EQ(
      Read("\x80\x02}(]K\x01u.").status().message(),
      Refusal("holds a dict key that is a list (keys must be str or int) at byte 7" + kReads));
  EXPECT_EQ(Read("\x80\x02]q\x00h\x00"
                 "a."_b)
                .status()
                .message(),
            Refusal("holds a container that contains itself" + kReads));
}

// 2^40 values described in a few hundred bytes, and a list nested 100000 deep (freed without
// recursion).
TEST(TorchUnpicklerTest, RefusesValuesThatExpandBeyondTheLimits) {
  const TorchStorageLoader no_storages = [](const std::string&) -> Result<std::vector<uint8_t>> {
    return Status::InvalidArgument("no storages");
  };
  std::string laughs = "\x80\x02]q\x00"_b;
  for (int level = 0; level < 40; ++level) {
    laughs += std::string("](h") + char(level) + "h" + char(level) + "eq" + char(level + 1);
  }
  laughs += ".";
  UnpickleLimits limits;
  limits.max_values = 1000;
  Result<TorchValue> read = UnpickleTorchValue(reinterpret_cast<const uint8_t*>(laughs.data()),
                                               laughs.size(), "p", no_storages, limits);
  EXPECT_EQ(read.status().message(),
            "p holds more than 1000 values, which this reader does not rebuild: it reads "
            "tensors, None, bools, ints, floats, strings, lists, tuples and dicts, as a state "
            "dict holds");
  std::string deep = "\x80\x02";
  for (int i = 0; i < 100000; ++i) deep += "]";
  for (int i = 0; i < 99999; ++i) deep += "a";
  deep += ".";
  read = UnpickleTorchValue(reinterpret_cast<const uint8_t*>(deep.data()), deep.size(), "p",
                            no_storages, {});
  EXPECT_EQ(read.status().message(),
            "p holds containers nested deeper than 200, which this reader does not rebuild: it "
            "reads tensors, None, bools, ints, floats, strings, lists, tuples and dicts, as a "
            "state dict holds");
}

TEST_F(TorchHandMadePickleTest, RefusesMalformedPicklesAndStorages) {
  EXPECT_EQ(Read("\x80\x02}").status().message(),
            Refusal("is not a valid pickle at byte 3: it ends without a STOP opcode" + kRewrite));
  EXPECT_EQ(Read("\x80\x02}u.").status().message(),
            Refusal("is not a valid pickle at byte 3: an opcode needs a MARK that was not set" +
                    kRewrite));
  EXPECT_EQ(Read("\x80\x02h\x05.").status().message(),
            Refusal("is not a valid pickle at byte 2: it refers to memo entry 5, never stored" +
                    kRewrite));
  EXPECT_EQ(Read("\x80\x02X\xff\x00\x00\x00ab."_b).status().message(),
            Refusal("is not a valid pickle at byte 2: a string runs past the end" + kRewrite));
  const std::string tensor = "\x80\x02" + TensorPickle("0", 2, 0, {3}, {1}) + ".";
  EXPECT_EQ(Read(tensor).status().message(),
            Refusal("refers to storage '0', but the archive has no record 'a/data/0'; write "
                    "the file again with torch.save"));
  EXPECT_EQ(Read(tensor, {"abc"}).status().message(),
            Refusal("is not a valid pickle at byte 86: storage '0' should hold 2 float32 "
                    "elements (8 bytes) but its record has 3 bytes" +
                    kRewrite));
  EXPECT_EQ(Read(tensor, {Floats({1, 2})}).status().message(),
            Refusal("is not a valid pickle at byte 126: a tensor's view reaches element 2 of a "
                    "storage of 2" +
                    kRewrite));
}

// Truncated or flipped pickles (with valid CRCs) never crash the unpickler.
TEST(TorchUnpicklerTest, SurvivesTruncatedAndFlippedPickles) {
  const TorchValue value = CppCheckpoint();  // the storages point into it
  Result<TorchPickle> pickled = PickleTorchValue(value);
  ASSERT_TRUE(pickled.ok());
  const std::string& bytes = pickled->bytes;
  const TorchStorageLoader load = [&](const std::string& key) -> Result<std::vector<uint8_t>> {
    size_t index = 0;
    for (char c : key) {
      if (c < '0' || c > '9' || index > 1000) return Status::InvalidArgument("bad key");
      index = index * 10 + size_t(c - '0');
    }
    if (index >= pickled->storages.size()) return Status::InvalidArgument("no storage");
    return pickled->storages[index]->data;
  };
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  Result<TorchValue> whole = UnpickleTorchValue(data, bytes.size(), "p", load, {});
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(*whole, value);
  for (size_t size = 0; size < bytes.size(); ++size) {
    ASSERT_FALSE(UnpickleTorchValue(data, size, "p", load, {}).ok()) << size;
  }
  size_t refused = 0;
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (uint8_t flip : {0x01, 0x10, 0x80, 0xff}) {
      std::string flipped = bytes;
      flipped[at] = char(uint8_t(flipped[at]) ^ flip);
      const auto* p = reinterpret_cast<const uint8_t*>(flipped.data());
      refused += UnpickleTorchValue(p, flipped.size(), "p", load, {}).ok() ? 0 : 1;
    }
  }
  EXPECT_GT(refused, 0u);
}

// --- the union of the two former readers ---------------------------------------------------

// LONG4 (the launcher's reader only): any length, sign-extended, as long as the value fits int64.
TEST_F(TorchHandMadePickleTest, ReadsLong4Integers) {
  const std::string pickle =
      "\x80\x02(\x8b\x04\x00\x00\x00\xff\xff\xff\xff"
      "\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00"
      "\x8b\x00\x00\x00\x00t."_b;
  Result<TorchValue> read = Read(pickle);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, TorchValue::Tuple({TorchValue::Int(-1), TorchValue::Int(int64_t(1) << 40),
                                      TorchValue::Int(0)}));
  EXPECT_EQ(Read("\x80\x02\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01."_b)
                .status()
                .message(),
            Refusal("holds an integer that does not fit 64 bits at byte 2" + kReads));
  EXPECT_EQ(Read("\x80\x02\x8b\x05\x00\x00\x00\x01\x02."_b).status().message(),
            Refusal("is not a valid pickle at byte 2: an integer runs past the end" + kRewrite));
}

// BINSTRING and SHORT_BINSTRING (the SDK's reader only): Python 2 strs, read as UTF-8 as
// torch.load decodes them.
TEST_F(TorchHandMadePickleTest, ReadsPython2Strings) {
  Result<TorchValue> read = Read(
      "\x80\x02}(U\x01kT\x05\x00\x00\x00"
      "caf\xc3\xa9u."_b);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, TorchValue::Dict({{"k", Str("caf\xc3\xa9")}}));
  EXPECT_EQ(Read("\x80\x02U\x02\xff\xfe."_b).status().message(),
            Refusal("is not a valid pickle at byte 2: a string is not valid UTF-8" + kRewrite));
  EXPECT_EQ(Read("\x80\x02T\x09\x00\x00\x00"
                 "abc."_b)
                .status()
                .message(),
            Refusal("is not a valid pickle at byte 2: a string runs past the end" + kRewrite));
}

// A state dict's OrderedDict whose attribute state (BUILD, dropped) holds what no TorchValue
// does: bytes (BINBYTES, SHORT_BINBYTES), an argparse.Namespace (NEWOBJ, then its own BUILD), a
// list subclass (NEWOBJ, then APPENDS) and a torch.Size (REDUCE of a global this reader does not
// know). POP drops a value.
TEST_F(TorchHandMadePickleTest, DropsObjectsItDoesNotRebuildFromObjectState) {
  const std::string tensor = TensorPickle("0", 2, 0, {2}, {1});
  const std::string state =
      "}(" + Text("blob") + "C\x02xy" + Text("big") +
      "B\x03\x00\x00\x00"
      "abc"_b +
      Text("config") + Global("argparse", "Namespace") + ")\x81}(" + Text("lr") + Small(1) + "ub" +
      Text("tags") + Global("mymodule", "MyList") + ")\x81(" + Small(1) + "e" + Text("size") +
      Global("torch", "Size") + SmallTuple({2}) + "\x85R" + "u";
  const std::string pickle = "\x80\x03" + Global("collections", "OrderedDict") + ")R(" + Text("w") +
                             tensor + Text("n") + Small(7) + "00u" + state + "b.";
  Result<TorchValue> read = Read(pickle, {Floats({1, 2})});
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, TorchValue::OrderedDict({{"w", TorchValue::Tensor(F32({2}, {1, 2}))}}));
}

// ... but refuses them where they would be part of the value read, naming the global.
TEST_F(TorchHandMadePickleTest, RefusesObjectsItDoesNotRebuildInTheValue) {
  const std::string ns = "\x80\x02}(" + Text("args") + Global("argparse", "Namespace") + ")\x81}(" +
                         Text("lr") + Small(1) + "ubu.";
  EXPECT_EQ(Read(ns).status().message(),
            Refusal("calls the Python global 'argparse.Namespace' (at byte 13), which is not "
                    "part of a state dict; this reader runs no Python code and rebuilds only "
                    "tensors, None, bools, ints, floats, strings, lists, tuples and dicts: save "
                    "plain data, such as model.state_dict()"));
  const std::string appended =
      "\x80\x02" + Global("mymodule", "MyList") + ")\x81(" + Small(1) + "e.";
  EXPECT_EQ(Read(appended).status().message(),
            Refusal("calls the Python global 'mymodule.MyList' (at byte 2), which is not part of "
                    "a state dict; this reader runs no Python code and rebuilds only tensors, "
                    "None, bools, ints, floats, strings, lists, tuples and dicts: save plain "
                    "data, such as model.state_dict()"));
  EXPECT_EQ(Read("\x80\x03]C\x02xya."_b).status().message(),
            Refusal("holds a bytes object where a value belongs" + kReads));
  EXPECT_EQ(
      Read("\x80\x03"
           "B\x09\x00\x00\x00xy."_b)
          .status()
          .message(),
      Refusal("is not a valid pickle at byte 2: a bytes object runs past the end" + kRewrite));
  EXPECT_EQ(
      Read("\x80\x02" + Global("torch._utils", "_rebuild_tensor_v2") + ")\x81.").status().message(),
      Refusal("is not a valid pickle at byte 36: NEWOBJ makes an object of a function, "
              "not of a class" +
              kRewrite));
}

// The same from Python: a state dict given attributes, which torch.save keeps as the
// OrderedDict's object state, reads as the state dict alone.
TEST_F(TorchHandMadePickleTest, ReadsStateDictsWithPythonAttributes) {
  const std::string python = std::string(DPL_TEST_PYTHON);
  const std::string command = python + " " + DPL_TEST_SOURCE_DIR +
                              "/tests/torch_files/state_dict_attributes.py " + dir_.path() +
                              " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  const int status = ::pclose(pipe);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) GTEST_SKIP() << output;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << ":\n" << output;
  const Result<TorchValue> plain = ReadTorchArchive(dir_ / "plain.pt");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_NE(plain->AsDict(), nullptr);
  EXPECT_EQ(plain->AsDict()->size(), 7u);
  for (const char* name : {"attributes_p2.pt", "attributes_p3.pt"}) {
    const Result<TorchValue> read = ReadTorchArchive(dir_ / name);
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(*read, *plain) << name;
  }
}

// NEWOBJ of OrderedDict, and the globals of older torch (_rebuild_tensor), of parameters with
// Python state (_rebuild_parameter_with_state) and of libtorch's pickler (restore_type_tag).
TEST_F(TorchHandMadePickleTest, ReadsTheGlobalsEitherReaderKnew) {
  const std::string v1_tensor = Global("torch._utils", "_rebuild_tensor") + "((" + Text("storage") +
                                Global("torch", "FloatStorage") + Text("0") + Text("cpu") +
                                Small(4) + "tQ" + Small(1) + SmallTuple({3}) + SmallTuple({1}) +
                                "tR";
  const std::string parameter = Global("torch._utils", "_rebuild_parameter_with_state") + "(" +
                                TensorPickle("0", 4, 0, {2, 2}, {1, 2}) + "\x88" +
                                Global("collections", "OrderedDict") + ")R}tR";
  const std::string tagged = Global("torch.jit._pickle", "restore_type_tag") + "(}(" + Text("x") +
                             Small(5) + "u" + Text("Dict[str, int]") + "tR";
  const std::string pickle = "\x80\x02" + Global("collections", "OrderedDict") + ")\x81(" +
                             Text("v1") + v1_tensor + Text("p") + parameter + Text("t") + tagged +
                             "u.";
  Result<TorchValue> read = Read(pickle, {Floats({1, 2, 3, 4})});
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, TorchValue::OrderedDict({{"v1", TorchValue::Tensor(F32({3}, {2, 3, 4}))},
                                            {"p", TorchValue::Tensor(F32({2, 2}, {1, 3, 2, 4}))},
                                            {"t", TorchValue::Dict({{"x", TorchValue::Int(5)}})}}));
  EXPECT_EQ(
      Read("\x80\x02" + Global("torch.jit._pickle", "restore_type_tag") + ")R.").status().message(),
      Refusal("is not a valid pickle at byte 39: restore_type_tag takes (value, type)" + kRewrite));
}

}  // namespace
}  // namespace dpl::torch_files
