// Note [Forwarded environment]: which variables --hostfile passes to the other hosts, the lines it
// writes on ssh's standard input, and the remote shell that reads them: run here by /bin/sh, as
// sshd would run it, with values that a shell would otherwise take apart.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cluster/forwarded_environment.hpp"
#include "cluster/remote_command.hpp"

namespace dpl::cluster {
namespace {

TEST(ForwardedEnvironment, TakesTheListedPrefixesAndTheGivenVariables) {
  const std::vector<std::string> here = {"NCCL_SOCKET_IFNAME=eth1",
                                         "PATH=/usr/bin",
                                         "DPL_JOB_TOKEN=secret",
                                         "DPL_PLUGIN_PATH=/p",
                                         "DPL_ATTEMPT=2",
                                         "PYTHONPATH=/src",
                                         "OMP_PROC_BIND=close",
                                         "CUDA_VISIBLE_DEVICES=0,1",
                                         "TORCH_SHOW_CPP_STACKTRACES=1",
                                         "TORCH_HOME=/old",
                                         "NCCL_ODD=two\nlines",
                                         "NCCL_BAD;NAME=x",
                                         "HOME=/root"};
  const ForwardedEnvironment forwarded = SelectForwarded(here, {"TORCH_HOME=/new", "MY_VAR=a b"});
  EXPECT_EQ(
      forwarded.entries,
      (std::vector<std::string>{"NCCL_SOCKET_IFNAME=eth1", "DPL_PLUGIN_PATH=/p", "PYTHONPATH=/src",
                                "OMP_PROC_BIND=close", "CUDA_VISIBLE_DEVICES=0,1",
                                "TORCH_SHOW_CPP_STACKTRACES=1", "TORCH_HOME=/new", "MY_VAR=a b"}));
  EXPECT_EQ(forwarded.left_out, (std::vector<std::string>{"NCCL_ODD", "NCCL_BAD;NAME"}));
  EXPECT_EQ(VariableNames(forwarded.entries),
            "NCCL_SOCKET_IFNAME, DPL_PLUGIN_PATH, PYTHONPATH, OMP_PROC_BIND, "
            "CUDA_VISIBLE_DEVICES, TORCH_SHOW_CPP_STACKTRACES, TORCH_HOME, MY_VAR");
}

TEST(ForwardedEnvironment, IsALineAShellWordEachThenAnEmptyLine) {
  EXPECT_EQ(EnvironmentLines({"A=plain", "B=it's $HOME", "C="}),
            "A=plain\nB='it'\\''s $HOME'\nC=''\n\n");
  EXPECT_EQ(EnvironmentLines({}), "\n");
}

TEST(ForwardedEnvironment, TheRemoteShellReadsThemBeforeItStartsTheLauncher) {
  RemoteLaunch launch{"10.0.0.2", "/tmp", "/usr/bin/env", {}, {}, true};
  EXPECT_EQ(RemoteShellCommand(launch),
            "cd /tmp && IFS= read -r DPL_JOB_TOKEN && export DPL_JOB_TOKEN && { while IFS= read "
            "-r DPL_FORWARDED && [ -n \"$DPL_FORWARDED\" ]; do eval \"export $DPL_FORWARDED\"; "
            "done; unset DPL_FORWARDED; } && /usr/bin/env; exit $?");
  // What sshd does with it: the user's shell runs it, standard input from the runner.
  const std::vector<std::string> entries = {"NCCL_X=a  b", "QUOTED=it's \"$HOME\" `x` \\n;",
                                            "EMPTY="};
  const std::string input = "the-token\n" + EnvironmentLines(entries) + "kept for the launcher\n";
  char path[] = "/tmp/dpl-forwarded-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_EQ(write(fd, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(fd);
  // The launcher here is a shell that prints its environment, then what follows on its input.
  const std::string script =
      RemoteShellCommand({"h", "/tmp", "/bin/sh", {"-c", "env -0; cat"}, {}, true});
  const std::string shell = "/bin/sh -c " + ShellQuote(script) + " < " + path;
  FILE* pipe = popen(shell.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output(1, '\0');  // every entry between two NULs
  char buffer[4096];
  for (size_t read = 0; (read = fread(buffer, 1, sizeof buffer, pipe)) > 0;) {
    output.append(buffer, read);
  }
  EXPECT_EQ(pclose(pipe), 0);
  unlink(path);
  for (const std::string& entry : entries) {
    EXPECT_NE(output.find(std::string(1, '\0') + entry + std::string(1, '\0')), std::string::npos)
        << entry;
  }
  EXPECT_NE(output.find(std::string(1, '\0') + "DPL_JOB_TOKEN=the-token" + std::string(1, '\0')),
            std::string::npos);
  EXPECT_EQ(output.find("DPL_FORWARDED"), std::string::npos);
  EXPECT_EQ(output.substr(output.size() - 22), "kept for the launcher\n");
}

}  // namespace
}  // namespace dpl::cluster
