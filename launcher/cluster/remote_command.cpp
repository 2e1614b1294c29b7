#include "cluster/remote_command.hpp"

#include <cstring>
#include <sstream>

namespace dpl::cluster {
namespace {

constexpr int kSshFailed = 255;  // ssh's own failure: no connection, refused key, lost link
constexpr int kShellSignalBase = 128;

// True when every character is one a shell takes literally outside quotes.
bool IsPlainWord(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       std::strchr("-_./=:,+@%", c) != nullptr;
    if (!plain) return false;
  }
  return true;
}

}  // namespace

std::string ShellQuote(const std::string& text) {
  if (IsPlainWord(text)) return text;
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

Result<std::vector<std::string>> SplitSshOptions(const std::string& text) {
  if (text.find_first_of("'\"\\") != std::string::npos) {
    return Status::InvalidArgument("--ssh-options '" + text +
                                   "': quotes and backslashes are not supported; give words "
                                   "apart by spaces, e.g. \"-p 2222 -i /path/key\"");
  }
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

std::string RemoteShellCommand(const RemoteLaunch& launch) {
  std::string command = "cd " + ShellQuote(launch.working_directory) +
                        " && IFS= read -r DPL_JOB_TOKEN && export DPL_JOB_TOKEN && ";
  // Each line is NAME=<one shell word> (EnvironmentLines), so eval exports it as it was here.
  if (launch.reads_environment) {
    command +=
        "{ while IFS= read -r DPL_FORWARDED && [ -n \"$DPL_FORWARDED\" ]; do "
        "eval \"export $DPL_FORWARDED\"; done; unset DPL_FORWARDED; } && ";
  }
  command += ShellQuote(launch.binary);
  for (const std::string& argument : launch.arguments) command += " " + ShellQuote(argument);
  // Not the shell's last command, which a shell may exec in its place: the shell stays to report
  // a launcher killed by signal N as exit status 128 + N, where sshd would make it ssh's 255.
  return command + "; exit $?";
}

std::vector<std::string> SshArguments(const RemoteLaunch& launch) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  argv.insert(argv.end(), launch.ssh_options.begin(), launch.ssh_options.end());
  argv.push_back(launch.host);
  argv.push_back(RemoteShellCommand(launch));
  return argv;
}

std::string DescribeSshExit(int exit_code) {
  if (exit_code == kSshFailed) {
    return "ssh failed (exit status 255: no connection, a refused login, or the connection was "
           "lost)";
  }
  if (exit_code > kShellSignalBase && exit_code < kSshFailed) {
    const int signal_number = exit_code - kShellSignalBase;
    const char* abbrev = sigabbrev_np(signal_number);
    return "killed by signal " + std::to_string(signal_number) +
           (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
  }
  return "exit code " + std::to_string(exit_code);
}

}  // namespace dpl::cluster
