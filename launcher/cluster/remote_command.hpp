// The OpenSSH command line that starts a machine's launcher from a hostfile (--hostfile): batch
// mode (no password prompt), the same working directory and binary path as here, and the job
// token read from the command's standard input, so that it shows in no process list. Only
// builds text; supervision/hostfile_runner.cpp runs it.
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

// `text` as one word of a POSIX shell: 'it'\''s'.
std::string ShellQuote(const std::string& text);

// --ssh-options: words apart by whitespace, passed to ssh before the host ("-p 2222 -i key").
// Quotes are refused, as they would not be taken as a shell takes them.
Result<std::vector<std::string>> SplitSshOptions(const std::string& text);

struct RemoteLaunch {
  std::string host;
  std::string working_directory;
  std::string binary;                    // the launcher, by its absolute path
  std::vector<std::string> arguments;    // the remote launcher's flags
  std::vector<std::string> ssh_options;  // --ssh-options
  // Standard input holds variables after the token's line (Note [Forwarded environment]).
  bool reads_environment = false;
};

// The remote shell's command: change to the working directory, read the job token from the first
// line of standard input into DPL_JOB_TOKEN, then, when it reads the environment, a NAME=value
// line per variable up to an empty line, and run the launcher; its exit status becomes ssh's (a
// launcher killed by signal N: 128 + N, as the shell, which stays, reports it).
std::string RemoteShellCommand(const RemoteLaunch& launch);

// argv of `ssh -o BatchMode=yes OPTIONS... HOST COMMAND`.
std::vector<std::string> SshArguments(const RemoteLaunch& launch);

// What ssh's exit status says of the remote launcher: "exit code 1", "killed by signal 9
// (SIGKILL)" (128 + N, as the remote shell reports it), or for 255 that ssh itself failed.
std::string DescribeSshExit(int exit_code);

}  // namespace dpl::cluster
