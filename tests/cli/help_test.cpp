// --help in sections: every row of the flag table names its section, the help lists every flag a
// user may give exactly once under its section's heading, `--help SECTION` prints that section
// alone, and an unknown section is refused with the list of sections.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The flags whose help lines `help` holds ("  --epochs N ..." starts one), by the heading of the
// section they are under (a line ending in "):" without indentation), in order.
std::map<std::string, std::vector<std::string>> FlagsBySection(const std::string& help) {
  std::map<std::string, std::vector<std::string>> flags;
  std::string heading;
  for (const std::string& line : Lines(help)) {
    if (!line.empty() && line[0] != ' ' && line.size() > 2 &&
        line.compare(line.size() - 2, 2, "):") == 0) {
      heading = line;
    } else if (line.rfind("  -h [ --help ]", 0) == 0) {
      flags[heading].push_back("help");
    } else if (line.rfind("  -- PROGRAM", 0) == 0) {
      flags[heading].push_back("program");
    } else if (line.rfind("  --", 0) == 0) {
      flags[heading].push_back(line.substr(4, line.find(' ', 4) - 4));
    }
  }
  return flags;
}

std::string Heading(const HelpSectionText& section) {
  return std::string(section.heading) + " (--help " + section.name + "):";
}

TEST(Help, EveryRowNamesItsSectionAndNoSectionIsEmpty) {
  std::map<HelpSection, int> rows;
  for (const Flag& flag : FlagTable()) {
    ASSERT_TRUE(flag.section.has_value()) << "--" << flag.name << " names no section of --help";
    if (!flag.internal) ++rows[*flag.section];
  }
  ASSERT_EQ(HelpSections().size(), 9u);
  for (const HelpSectionText& section : HelpSections()) {
    EXPECT_GT(rows[section.section], 0) << section.name << " has no flag";
  }
}

TEST(Help, ListsEveryFlagOnceUnderItsSectionsHeading) {
  const std::string help = HelpText();
  const auto listed = FlagsBySection(help);
  std::multiset<std::string> everywhere;
  for (const auto& [heading, names] : listed) everywhere.insert(names.begin(), names.end());
  for (const HelpSectionText& section : HelpSections()) {
    EXPECT_NE(help.find("\n" + Heading(section) + "\n"), std::string::npos) << Heading(section);
  }
  for (const Flag& flag : FlagTable()) {
    if (flag.internal) {
      EXPECT_EQ(everywhere.count(flag.name), 0u) << "--" << flag.name << " is internal";
      continue;
    }
    EXPECT_EQ(everywhere.count(flag.name), 1u) << "--" << flag.name;
    std::string heading;
    for (const HelpSectionText& section : HelpSections()) {
      if (section.section == flag.section) heading = Heading(section);
    }
    const auto under = listed.find(heading);
    ASSERT_NE(under, listed.end()) << heading;
    EXPECT_NE(std::find(under->second.begin(), under->second.end(), flag.name), under->second.end())
        << "--" << flag.name << " is not under " << heading;
  }
  // The ranges and defaults stay in the rows' own words.
  EXPECT_NE(help.find("passes over the training set, 1..1000000 (default 1)"), std::string::npos);
  EXPECT_NE(help.find("port of machine 0's store, 0..65535 (default $MASTER_PORT, the"),
            std::string::npos);
}

TEST(Help, OneSectionAlone) {
  const std::string training = HelpText("training");
  EXPECT_EQ(training.rfind("Training (--help training):\n", 0), 0u) << training;
  const auto listed = FlagsBySection(training);
  ASSERT_EQ(listed.size(), 1u) << training;
  std::vector<std::string> expected;
  for (const Flag& flag : FlagTable()) {
    if (!flag.internal && flag.section == HelpSection::kTraining) expected.push_back(flag.name);
  }
  EXPECT_EQ(listed.begin()->second, expected);
  EXPECT_EQ(training.find("usage:"), std::string::npos);
  EXPECT_EQ(training.find("--lr "), std::string::npos);
  // The clusters' section says how the environments and torchrun's flags are read.
  std::string clusters;  // with its line breaks and indentation as single spaces
  for (char c : HelpText("clusters")) {
    if (c == '\n') c = ' ';
    if (c != ' ' || clusters.empty() || clusters.back() != ' ') clusters += c;
  }
  EXPECT_NE(clusters.find("--hostfile FILE"), std::string::npos) << clusters;
  EXPECT_NE(clusters.find("torchrun's flags are accepted"), std::string::npos) << clusters;
}

TEST(Help, TheSectionIsTheHelpFlagsOptionalValue) {
  for (const std::vector<std::string>& arguments :
       std::vector<std::vector<std::string>>{{"--help", "data"}, {"--help=data"}, {"-h", "data"}}) {
    auto options = Parse(arguments);
    ASSERT_TRUE(options.ok()) << options.status().message();
    EXPECT_EQ(options->command, Command::kHelp);
    EXPECT_EQ(options->help_section, "data");
  }
  auto whole = Parse({"--help", "--epochs", "2"});
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->command, Command::kHelp);
  EXPECT_EQ(whole->help_section, "");
  EXPECT_EQ(ErrorOf({"--help", "gpus"}),
            "--help: there is no section 'gpus'; the sections are job, rendezvous, training, "
            "optimizer, data, precision, checkpoints, outputs, clusters");
}

// The launcher binary: `--help training` prints that section alone, an unknown section fails.
TEST(Help, TheLauncherPrintsOneSection) {
  const auto run = [](const std::string& arguments, int* exit_code) {
    FILE* pipe = ::popen((std::string(DPL_TEST_LAUNCHER) + " " + arguments + " 2>&1").c_str(), "r");
    std::string output;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
    const int status = ::pclose(pipe);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return output;
  };
  int exit_code = -1;
  EXPECT_EQ(run("--help training", &exit_code), HelpText("training"));
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(run("--help", &exit_code), HelpText());
  EXPECT_EQ(exit_code, 0);
  const std::string refused = run("--help gpus", &exit_code);
  EXPECT_NE(refused.find("error: --help: there is no section 'gpus'; the sections are job, "),
            std::string::npos)
      << refused;
  EXPECT_EQ(exit_code, 1);
}

}  // namespace
}  // namespace dpl::cli
