// What the worker loader reports on its pipe, and the model check's outcome.
#include "protocol/loader_report.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dpl::protocol {
namespace {

TEST(LoaderReport, NamesTheWorkersInLocalRankOrder) {
  const std::string text = EncodeWorkerPids({4242, 17, 90000});
  EXPECT_EQ(text, "4242 17 90000 \n");
  const LoaderReport report = DecodeLoaderReport(text);
  EXPECT_FALSE(report.refused);
  EXPECT_EQ(report.pids, (std::vector<pid_t>{4242, 17, 90000}));
  // A loader that failed midway named fewer, or none.
  EXPECT_EQ(DecodeLoaderReport("4242 ").pids, std::vector<pid_t>{4242});
  EXPECT_TRUE(DecodeLoaderReport("").pids.empty());
  EXPECT_FALSE(DecodeLoaderReport("").refused);
}

TEST(LoaderReport, ARefusalCarriesItsReasonWhole) {
  const std::string reason = "the model 'convnet' takes 1x28x28 images\n  but the data has 3x32x32";
  const LoaderReport report = DecodeLoaderReport(EncodeJobRefusal(reason));
  EXPECT_TRUE(report.refused);
  EXPECT_EQ(report.reason, reason);
  EXPECT_TRUE(report.pids.empty());
  EXPECT_EQ(DecodeLoaderReport(EncodeJobRefusal("")).reason, "");
  EXPECT_FALSE(DecodeLoaderReport("refuse").refused);  // cut short: not a refusal
}

TEST(ModelCheck, CarriesTheCodeAndTheMessage) {
  const std::optional<Status> ok = DecodeModelCheck(EncodeModelCheck(Status::Ok()));
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(ok->ok());
  const Status refused = Status::InvalidArgument("input 3x32x32\ndoes not fit 1x28x28");
  const std::optional<Status> back = DecodeModelCheck(EncodeModelCheck(refused));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(back->message(), "input 3x32x32\ndoes not fit 1x28x28");
  const std::optional<Status> io = DecodeModelCheck(EncodeModelCheck(Status::Io("disk")));
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->code(), DPL_ERR_IO);
}

TEST(ModelCheck, NoOutcomeWhenTheChildDiedFirst) {
  EXPECT_FALSE(DecodeModelCheck("").has_value());
  EXPECT_FALSE(DecodeModelCheck("3").has_value());  // the code, but not its newline
  EXPECT_FALSE(DecodeModelCheck("\nmessage").has_value());
  EXPECT_FALSE(DecodeModelCheck("x3\nmessage").has_value());
  EXPECT_FALSE(DecodeModelCheck("-1\nmessage").has_value());
}

}  // namespace
}  // namespace dpl::protocol
