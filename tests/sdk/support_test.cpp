// The SDK's C++ plugin support (dpl/support/): the error guard, option reading, half and
// bfloat16 conversion, and host reductions that backends and the torch model helper share.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpl/support/error.hpp"
#include "dpl/support/half.hpp"
#include "dpl/support/options.hpp"
#include "dpl/support/reduce.hpp"

namespace {

using dpl::support::Bfloat16ToFloat;
using dpl::support::FloatToBfloat16;
using dpl::support::FloatToHalf;
using dpl::support::HalfToFloat;

TEST(Guarded, EveryExceptionBecomesAStatusAndAPrefixedMessage) {
  using dpl::support::Guarded;
  using dpl::support::LastError;
  EXPECT_EQ(Guarded("p", [] {}), DPL_OK);
  EXPECT_STREQ(LastError(), "");
  EXPECT_EQ(Guarded("p", [] { throw dpl::support::PluginError(DPL_ERR_TIMEOUT, "late"); }),
            DPL_ERR_TIMEOUT);
  EXPECT_STREQ(LastError(), "p: late");
  EXPECT_EQ(Guarded("p", [] { throw std::runtime_error("boom"); }), DPL_ERR_INTERNAL);
  EXPECT_STREQ(LastError(), "p: boom");
  EXPECT_EQ(Guarded("p", [] { throw std::bad_alloc(); }), DPL_ERR_INTERNAL);
  EXPECT_STREQ(LastError(), "p: out of memory");
  EXPECT_EQ(Guarded("p", [] { throw 7; }), DPL_ERR_INTERNAL);
  EXPECT_STREQ(LastError(), "p: unknown exception");
  EXPECT_EQ(Guarded("p", [] { return dpl::support::Fail(DPL_ERR_UNSUPPORTED, "no"); }),
            DPL_ERR_UNSUPPORTED);
  EXPECT_STREQ(LastError(), "p: no");
  // A success clears the text of the failure before it.
  EXPECT_EQ(Guarded("p", [] { return DPL_OK; }), DPL_OK);
  EXPECT_STREQ(LastError(), "");
}

std::string OptionError(const char* text, const std::vector<std::string>& asked) {
  try {
    dpl::support::KeyValueOptions options(text, "--x-options");
    for (const auto& key : asked) (void)options.GetString(key, "");
    options.CheckAllKnown();
  } catch (const dpl::support::PluginError& error) {
    EXPECT_EQ(error.status(), DPL_ERR_INVALID_ARGUMENT);
    return error.what();
  }
  return "";
}

TEST(KeyValueOptions, ReadsTypedValuesAndRefusesWhatNobodyAskedFor) {
  const dpl::support::KeyValueOptions options(" a=1 ,b=2.5,c=true,d=x,,", "--x-options");
  EXPECT_EQ(options.GetInt("a", 0), 1);
  EXPECT_DOUBLE_EQ(options.GetDouble("b", 0), 2.5);
  EXPECT_TRUE(options.GetBool("c", false));
  EXPECT_EQ(options.GetChoice("d", "x", {"x", "y"}), "x");
  EXPECT_EQ(options.GetInt("missing", 42), 42);
  EXPECT_NO_THROW(options.CheckAllKnown());
  EXPECT_EQ(OptionError("a=1,b=2", {"a"}), "unknown option \"b\" in --x-options; known options: a");
  EXPECT_EQ(OptionError("a=1", {}), "unknown option \"a\" in --x-options; known options: (none)");
  EXPECT_EQ(OptionError("a", {}), "--x-options entry \"a\" is not key=value");
  EXPECT_EQ(OptionError("=1", {}), "--x-options entry \"=1\" is not key=value");
  EXPECT_EQ(OptionError("a=1,a=2", {}), "option \"a\" is given twice in --x-options");
  EXPECT_EQ(OptionError("a=1, b= ", {}),
            "option \"b\" in --x-options has no value: give key=value, or leave the key out for "
            "its default");
  EXPECT_THROW(options.GetInt("b", 0), dpl::support::PluginError);
  EXPECT_THROW(options.GetBool("a", false) && options.GetBool("d", false),
               dpl::support::PluginError);
  EXPECT_THROW(options.GetChoice("d", "x", {"y", "z"}), dpl::support::PluginError);
}

TEST(Compression, HalfRoundTrips) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f}) {
    const float back = HalfToFloat(FloatToHalf(v));
    EXPECT_NEAR(back, v, std::fabs(v) * 1e-3f + 1e-7f) << v;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);  // overflow becomes infinity
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
}

TEST(Compression, Bfloat16RoundTrips) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(Bfloat16ToFloat(0x3F80), 1.0f);
  for (float v : {3.14159f, -1e30f, 1e-30f}) {
    EXPECT_NEAR(Bfloat16ToFloat(FloatToBfloat16(v)), v, std::fabs(v) * 4e-3f) << v;
  }
}

TEST(Compression, HalfMatchesFloat16ArithmeticOnEveryPattern) {
  // Every finite half survives the round trip through float32 unchanged, and the rounding of the
  // values halfway between two halves goes to the even one.
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << bits;
      continue;
    }
    EXPECT_EQ(FloatToHalf(value), half) << bits;
  }
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048.0f), 0x3C00);  // halfway: to even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048.0f), 0x3C02);  // halfway: to even (up)
}

TEST(Reduce, SumsMinsAndMaxesEveryTypeAndDividesForTheAverage) {
  using dpl::support::ElementType;
  std::vector<float> a{1, 2, 3}, b{4, -5, 6};
  dpl::support::ReduceInto(ElementType::kFloat32, DPL_REDUCE_SUM, a.data(), b.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{5, -3, 9}));
  dpl::support::DivideInPlace(ElementType::kFloat32, a.data(), 3, 2);
  EXPECT_EQ(a, (std::vector<float>{2.5f, -1.5f, 4.5f}));
  std::vector<int64_t> i{7, -7}, j{1, 1};
  dpl::support::ReduceInto(ElementType::kInt64, DPL_REDUCE_MIN, i.data(), j.data(), 2);
  EXPECT_EQ(i, (std::vector<int64_t>{1, -7}));
  dpl::support::DivideInPlace(ElementType::kInt64, i.data(), 2, 2);
  EXPECT_EQ(i, (std::vector<int64_t>{0, -3}));  // truncated toward zero
  std::vector<uint16_t> h{FloatToBfloat16(1.5f)}, k{FloatToBfloat16(2.0f)};
  dpl::support::ReduceInto(ElementType::kBFloat16, DPL_REDUCE_MAX, h.data(), k.data(), 1);
  EXPECT_EQ(Bfloat16ToFloat(h[0]), 2.0f);
  EXPECT_THROW(
      dpl::support::ReduceInto(ElementType::kUnknown, DPL_REDUCE_SUM, a.data(), b.data(), 1),
      dpl::support::PluginError);
}

}  // namespace
