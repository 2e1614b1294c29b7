// Where a file a flag names is written (Note [Files a flag names]): links are followed to their
// file, anything but a regular file is refused naming what it is, and nothing is changed on disk.
#include "common/output_file.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace dpl {
namespace {

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl_output_file_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    folder_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf '" + folder_ + "'").c_str()); }
  std::string Path(const std::string& name) const { return folder_ + "/" + name; }
  static void Link(const std::string& target, const std::string& link) {
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  }
  static std::string RefusalOf(const std::string& path) {
    const Result<std::string> resolved = OutputFileOf(path);
    return resolved.ok() ? "accepted as " + *resolved : resolved.status().message();
  }

  std::string folder_;
};

TEST_F(OutputFileTest, ANewOrRegularFileIsWrittenWhereNamed) {
  ASSERT_TRUE(OutputFileOf(Path("new.pt")).ok());
  EXPECT_EQ(*OutputFileOf(Path("new.pt")), Path("new.pt"));
  std::ofstream(Path("old.pt")) << "an earlier export";
  EXPECT_EQ(*OutputFileOf(Path("old.pt")), Path("old.pt"));
}

TEST_F(OutputFileTest, LinksAreFollowedToTheFileTheyName) {
  std::ofstream(Path("model.pt")) << "an earlier export";
  Link("model.pt", Path("relative.pt"));           // a relative target, from the link's folder
  Link(Path("relative.pt"), Path("absolute.pt"));  // an absolute one, to another link
  Link("missing.pt", Path("dangling.pt"));         // a file written new
  EXPECT_EQ(*OutputFileOf(Path("relative.pt")), Path("model.pt"));
  EXPECT_EQ(*OutputFileOf(Path("absolute.pt")), Path("model.pt"));
  EXPECT_EQ(*OutputFileOf(Path("dangling.pt")), Path("missing.pt"));
}

TEST_F(OutputFileTest, AnythingButARegularFileIsRefusedSayingWhatItIs) {
  ASSERT_EQ(::mkfifo(Path("pipe").c_str(), 0600), 0);
  ASSERT_EQ(::mkdir(Path("folder").c_str(), 0700), 0);
  Link("/dev/null", Path("to_null"));
  EXPECT_EQ(RefusalOf("/dev/null"),
            "/dev/null is a character device: dpl writes the file whole and renames it into "
            "place, which would replace it; name a regular file");
  EXPECT_NE(RefusalOf(Path("pipe")).find("is a named pipe:"), std::string::npos);
  EXPECT_NE(RefusalOf(Path("folder")).find("is a folder:"), std::string::npos);
  EXPECT_NE(RefusalOf(Path("to_null")).find("(a link to /dev/null) is a character device"),
            std::string::npos);

  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = Path("socket");
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  socket_path.copy(address.sun_path, socket_path.size());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_NE(RefusalOf(socket_path).find("is a socket:"), std::string::npos);
  ::close(listener);

  struct stat info {};
  ASSERT_EQ(::stat("/dev/null", &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));  // looked at, never touched
}

TEST_F(OutputFileTest, ALoopOfLinksIsRefused) {
  Link(Path("b.pt"), Path("a.pt"));
  Link(Path("a.pt"), Path("b.pt"));
  EXPECT_NE(RefusalOf(Path("a.pt")).find("symbolic links in a row (a loop?)"), std::string::npos);
}

}  // namespace
}  // namespace dpl
