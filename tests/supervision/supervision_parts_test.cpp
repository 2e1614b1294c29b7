// The supervisor's parts on real pipes and processes: the line relay it shares with the hostfile
// runner, the names it gives a worker's end and a vanished machine, the stall picture once a
// machine is known gone, the end of a worker's output it shows (a traceback whole), and a
// program's workers in process groups of their own.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "observability/stall_report.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/folder_lock.hpp"
#include "supervision/line_relay.hpp"
#include "supervision/output_tail.hpp"
#include "supervision/program_spawn.hpp"
#include "support/child_status.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

// A pipe whose read end goes to a relay.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  void Write(const std::string& text) const {
    ASSERT_EQ(write(write_fd, text.data(), text.size()), ssize_t(text.size()));
  }
  void Close() {
    if (write_fd >= 0) close(write_fd);
    write_fd = -1;
  }
  ~Pipe() { Close(); }
};

TEST(LineRelay, HandsOnWholeLinesOfEachSource) {
  Pipe a, b;
  std::vector<std::string> from_a, from_b;
  LineRelay relay;
  EXPECT_EQ(relay.Add(a.read_fd, [&](std::string line) { from_a.push_back(line); }), 0u);
  EXPECT_EQ(relay.Add(b.read_fd, [&](std::string line) { from_b.push_back(line); }), 1u);
  a.Write("first\nsec");
  b.Write("other\n");
  EXPECT_TRUE(relay.Pump(100ms));
  EXPECT_EQ(from_a, std::vector<std::string>{"first"});
  EXPECT_EQ(from_b, std::vector<std::string>{"other"});
  a.Write("ond\nthird");  // the rest of a line, then one without its newline
  a.Close();
  while (relay.AnyOpen() && from_a.size() < 3) relay.Pump(100ms);
  EXPECT_EQ(from_a, (std::vector<std::string>{"first", "second", "third"}));
  EXPECT_TRUE(relay.AnyOpen());  // b has not ended
  b.Close();
  while (relay.AnyOpen()) relay.Pump(100ms);
  EXPECT_EQ(from_b, std::vector<std::string>{"other"});
  EXPECT_FALSE(relay.Pump(100ms));  // nothing left to wait for
}

TEST(LineRelay, DrainsOneSourceWithoutWaiting) {
  Pipe a, b;
  std::vector<std::string> lines;
  LineRelay relay;
  relay.Add(a.read_fd, [&](std::string line) { lines.push_back("a " + line); });
  const size_t second =
      relay.Add(b.read_fd, [&](std::string line) { lines.push_back("b " + line); });
  a.Write("not yet\n");
  b.Write("one\ntwo\nlast words");
  b.Close();
  const auto start = std::chrono::steady_clock::now();
  relay.Drain(second);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(lines, (std::vector<std::string>{"b one", "b two", "b last words"}));
  relay.Drain(second);  // an ended source gives nothing more
  EXPECT_EQ(lines.size(), 3u);
}

using testing::StatusOfChild;

TEST(FailureNaming, SaysHowAWorkerEnded) {
  EXPECT_EQ(DescribeExit(StatusOfChild(1, 0)), "exit code 1");
  EXPECT_EQ(DescribeExit(StatusOfChild(3, 0)),
            "exit code 3 (it lost a peer or the rendezvous store)");
  EXPECT_EQ(DescribeExit(StatusOfChild(0, SIGKILL)),
            "killed by signal 9 (SIGKILL), which the kernel's out-of-memory killer sends when "
            "memory runs out (its log, dmesg, names what it killed)");
  EXPECT_EQ(DescribeExit(StatusOfChild(0, SIGSEGV)), "killed by signal 11 (SIGSEGV)");
}

// Note [One job a checkpoint folder]: a second holder is refused, naming the first; the lock
// goes with its holder.
TEST(FolderLock, OneJobAtATimeHoldsACheckpointFolder) {
  char pattern[] = "/tmp/dpl-folder-lock-XXXXXX";
  const std::string folder = std::string(mkdtemp(pattern)) + "/checkpoints";  // made by Take
  {
    auto first = FolderLock::Take(folder);
    ASSERT_TRUE(first.ok()) << first.status().message();
    auto second = FolderLock::Take(folder);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().message(),
              "--checkpoint-dir " + folder +
                  " is in use by another job (the launcher of its machine 0 holds the folder's "
                  "lock); give each job a folder of its own, or wait until that job ends");
    EXPECT_TRUE(std::filesystem::is_empty(folder)) << "the lock wrote into the folder";
  }
  EXPECT_TRUE(FolderLock::Take(folder).ok()) << "the lock outlived its holder";
  std::system(("rm -rf '" + std::string(pattern) + "'").c_str());
}

TEST(FailureNaming, NamesTheWorkerAndItsLastLines) {
  const std::deque<std::string> lines = {"[rank 3] epoch 0", "[rank 3] error: out of memory"};
  EndedWorker worker;
  worker.rank = 3;
  worker.machine = 1;
  worker.local_rank = 1;
  worker.pid = 42;
  worker.wait_status = StatusOfChild(1, 0);
  worker.last_lines = &lines;
  EXPECT_EQ(DescribeFailure(worker, FailureRole::kRootCause),
            "rank 3 (machine 1, local rank 1, pid 42) failed first: exit code 1; the last lines of "
            "its log (the root cause):\n    [rank 3] epoch 0\n    [rank 3] error: out of memory");
  worker.last_lines = nullptr;
  const std::string after = DescribeFailure(worker, FailureRole::kAfterPeer);
  EXPECT_EQ(after,
            "rank 3 (machine 1, local rank 1, pid 42) failed: exit code 1; it wrote no output");
  EXPECT_EQ(DescribeVanished({2, 4}, after),
            "machines 2, 4 vanished: their launchers stopped answering (no heartbeat in the "
            "rendezvous store for 1500 ms: killed, or the machine or the network to it is down); "
            "after them, " +
                after);
}

// Note [Lost machines] in heartbeat.hpp: the machine a launcher found vanished is named, with how
// long it was silent, and its ranks are gone in the stall picture rather than "never arrived".
TEST(LostMachines, AreNamedInTheFailureAndAsGoneInTheStallPicture) {
  EXPECT_EQ(DescribeLost({2}),
            "machine 2 vanished: its launcher stopped answering (no heartbeat in the rendezvous "
            "store for 3000 ms: killed, or the machine or the network to it is down); the attempt "
            "ends on every machine, its workers' collectives abandoned");
  const int64_t now = 1700000010000;
  const std::string waiting =
      observability::EncodeStallPost({now - 4000, 7, "allreduce of bucket 1 of 1 (40 B)"});
  const std::vector<std::string> board = {waiting, waiting, "", "", ""};
  EXPECT_EQ(observability::DescribeStalls(board, now, {{1, {2, 3}}}),
            "ranks 0-1 wait in step 7, allreduce of bucket 1 of 1 (40 B), for 4 s; ranks 2-3 are "
            "gone with machine 1 (its launcher vanished); rank 4 never arrived (no blocked call "
            "reported: stopped, still computing, or elsewhere)");
  EXPECT_EQ(observability::DescribeStalls({waiting, ""}, now, {{1, {1}}}),
            "rank 0 waits in step 7, allreduce of bucket 1 of 1 (40 B), for 4 s; rank 1 is gone "
            "with machine 1 (its launcher vanished)");
}

TEST(FailureNaming, NamesAProgramsExitAsItsOwn) {
  const std::deque<std::string> lines = {"[rank 0] ValueError: x"};
  EndedWorker worker;
  worker.wait_status = StatusOfChild(3, 0);
  worker.pid = 7;
  worker.last_lines = &lines;
  worker.codes = ExitCodes::kProgram;
  EXPECT_EQ(DescribeExit(worker.wait_status, ExitCodes::kProgram), "exit code 3");
  EXPECT_EQ(DescribeFailure(worker, FailureRole::kRootCause),
            "rank 0 (machine 0, local rank 0, pid 7) failed first: exit code 3; the end of its "
            "output (the root cause):\n    [rank 0] ValueError: x");
}

std::deque<std::string> Numbered(const std::string& prefix, int from, int to) {
  std::deque<std::string> lines;
  for (int i = from; i < to; ++i) lines.push_back(prefix + std::to_string(i));
  return lines;
}

TEST(OutputTail, KeepsTheLastLinesOfOutputWithoutATraceback) {
  OutputTail tail;
  for (const std::string& line : Numbered("line ", 0, 50)) tail.Add(line);
  EXPECT_EQ(tail.Lines(), Numbered("line ", 30, 50));
}

TEST(OutputTail, ShowsATracebackWholeWithTheChainedOnes) {
  OutputTail tail;
  for (const std::string& line : Numbered("[rank 1] before ", 0, 30)) tail.Add(line);
  std::deque<std::string> traceback = {"[rank 1] Traceback (most recent call last):"};
  for (const std::string& line : Numbered("[rank 1]   frame ", 0, 40)) traceback.push_back(line);
  for (const char* line :
       {"[rank 1] KeyError: 'x'", "[rank 1] ",
        "[rank 1] During handling of the above exception, another exception occurred:", "[rank 1] ",
        "[rank 1] Traceback (most recent call last):", "[rank 1]   frame",
        "[rank 1] RuntimeError: y"}) {
    traceback.push_back(line);
  }
  for (const std::string& line : traceback) tail.Add(line);
  EXPECT_EQ(tail.Lines(), traceback);
  // A later traceback of its own replaces it; "Traceback" inside a line starts none.
  tail.Add("Traceback (most recent call last):\r");
  tail.Add("ValueError: z");
  tail.Add("[rank 1] print('Traceback (most recent call last):')");
  EXPECT_EQ(tail.Lines(),
            (std::deque<std::string>{"Traceback (most recent call last):\r", "ValueError: z",
                                     "[rank 1] print('Traceback (most recent call last):')"}));
}

// torch 2 writes "[rankN]: " before every line of an uncaught exception in a process group.
TEST(OutputTail, FindsTheTracebacksThatTorchPrefixesWithItsRank) {
  OutputTail tail;
  for (const std::string& line : Numbered("[rank 12] before ", 0, 30)) tail.Add(line);
  std::deque<std::string> traceback = {"[rank 12] [rank12]: Traceback (most recent call last):"};
  for (const std::string& line : Numbered("[rank 12] [rank12]:   frame ", 0, 40)) {
    traceback.push_back(line);
  }
  traceback.push_back("[rank 12] [rank12]: RuntimeError: y");
  for (const std::string& line : traceback) tail.Add(line);
  EXPECT_EQ(tail.Lines(), traceback);
  // Only a rank number makes a prefix.
  tail.Add("[rankx]: Traceback (most recent call last):");
  EXPECT_EQ(tail.Lines().front(), traceback.front());
}

TEST(OutputTail, ATracebackLongerThanItKeepsShowsItsLastLines) {
  OutputTail tail;
  tail.Add("Traceback (most recent call last):");
  for (const std::string& line : Numbered("frame ", 0, 300)) tail.Add(line);
  EXPECT_EQ(tail.Lines(), Numbered("frame ", 280, 300));
}

TEST(ProgramSpawn, FindsTheProgramOnThePathOrSaysWhyNot) {
  EXPECT_EQ(*FindProgram("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(*FindProgram("/bin/sh", ""), "/bin/sh");
  EXPECT_EQ(FindProgram("dpl-nothing", "/nonexistent:/bin").status().message(),
            "the program 'dpl-nothing' (after --) is not on PATH (/nonexistent:/bin): check its "
            "name, or give its path");
  EXPECT_EQ(FindProgram("/tmp", "").status().message(),
            "cannot start the program '/tmp' (after --): it is a folder");
  EXPECT_EQ(FindProgram("/bin/sh", "").status().code(), DPL_OK);
}

// Reads `fd` until it ends.
std::string ReadAll(int fd) {
  std::string text;
  char buffer[256];
  for (ssize_t count; (count = read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<size_t>(count));
  }
  return text;
}

TEST(ProgramSpawn, StartsEachRankAsTheLeaderOfAGroupOfItsOwn) {
  ProgramLaunch launch;
  // Each rank starts a child that outlives it, in its group.
  launch.argv = {"sh", "-c",
                 "sleep 30 & echo \"$RANK $$ $! $(cut -d' ' -f5 /proc/$!/stat)\"; read x"};
  launch.environments = {{"PATH=/usr/bin:/bin", "RANK=0"}, {"PATH=/usr/bin:/bin", "RANK=1"}};
  auto spawned = SpawnProgram(launch);
  ASSERT_TRUE(spawned.ok()) << spawned.status().message();
  ASSERT_EQ(spawned->pids.size(), 2u);
  std::vector<pid_t> children;
  for (size_t rank = 0; rank < 2; ++rank) {
    const pid_t pid = spawned->pids[rank];
    EXPECT_EQ(getpgid(pid), pid);
    std::string line;
    char c;
    while (read(spawned->standard_output_fds[rank], &c, 1) == 1 && c != '\n') line += c;
    std::istringstream words(line);
    int reported_rank = -1, shell = -1, child = -1, group = -1;
    words >> reported_rank >> shell >> child >> group;
    EXPECT_EQ(reported_rank, static_cast<int>(rank)) << line;
    EXPECT_EQ(shell, pid) << line;  // standard input is /dev/null: `read` ends, the shell exits
    EXPECT_EQ(group, pid) << line;
    children.push_back(child);
  }
  for (pid_t pid : spawned->pids) {
    std::optional<int> status;
    for (int i = 0; i < 500 && !(status = PeekExit(pid)); ++i) usleep(10000);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << *status;
    EXPECT_EQ(PeekExit(pid), status);  // still there: not reaped
    ReleaseProgramWorker(pid);
    EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);  // reaped now
  }
  // Killed with its group; a zombie until whoever adopted it reaps it.
  for (pid_t child : children) {
    const auto alive = [child] {
      std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
      std::string line;
      return std::getline(stat, line) && line.find(") Z ") == std::string::npos;
    };
    for (int i = 0; i < 100 && alive(); ++i) usleep(10000);
    EXPECT_FALSE(alive()) << "a rank's child outlived it";
  }
  for (const auto* fds : {&spawned->output_fds, &spawned->standard_output_fds}) {
    for (int fd : *fds) {
      ReadAll(fd);
      close(fd);
    }
  }
}

// A program's standard output and standard error reach the launcher apart (torchrun keeps a
// program's standard output on its own).
TEST(ProgramSpawn, StandardOutputAndStandardErrorComeApart) {
  ProgramLaunch launch;
  launch.argv = {"sh", "-c", "echo out-$RANK; echo err-$RANK >&2; echo more-out-$RANK"};
  launch.environments = {{"PATH=/usr/bin:/bin", "RANK=0"}, {"PATH=/usr/bin:/bin", "RANK=1"}};
  auto spawned = SpawnProgram(launch);
  ASSERT_TRUE(spawned.ok()) << spawned.status().message();
  ASSERT_EQ(spawned->standard_output_fds.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(ReadAll(spawned->standard_output_fds[rank]), "out-" + r + "\nmore-out-" + r + "\n");
    EXPECT_EQ(ReadAll(spawned->output_fds[rank]), "err-" + r + "\n");
    close(spawned->standard_output_fds[rank]);
    close(spawned->output_fds[rank]);
    std::optional<int> status;
    for (int i = 0; i < 500 && !(status = PeekExit(spawned->pids[rank])); ++i) usleep(10000);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
    ReleaseProgramWorker(spawned->pids[rank]);
  }
}

TEST(ProgramSpawn, AProgramThatCannotStartEndsTheRanksStartedBefore) {
  char path[] = "/tmp/dpl-spawn-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_EQ(write(fd, "echo no interpreter line\n", 25), 25);
  close(fd);
  chmod(path, 0755);
  ProgramLaunch launch;
  launch.argv = {path};
  launch.environments = {{"A=1"}, {"A=2"}};
  auto spawned = SpawnProgram(launch);
  unlink(path);
  EXPECT_EQ(spawned.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(spawned.status().message(),
            std::string("cannot start the program '") + path +
                "' (after --): Exec format error (a script needs a #! line, or give its "
                "interpreter first)");
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // no child left behind
}

TEST(ProgramSpawn, AScriptWhoseInterpreterIsMissingNamesIt) {
  char path[] = "/tmp/dpl-spawn-XXXXXX";
  const int fd = mkstemp(path);
  const std::string script = "#! /no/such/interpreter -u\nprint('never')\n";
  ASSERT_EQ(write(fd, script.data(), script.size()), ssize_t(script.size()));
  close(fd);
  chmod(path, 0755);
  ProgramLaunch launch;
  launch.argv = {path};
  launch.environments = {{"A=1"}};
  auto spawned = SpawnProgram(launch);
  unlink(path);
  EXPECT_EQ(spawned.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(spawned.status().message(),
            std::string("cannot start the program '") + path +
                "' (after --): its #! line names the interpreter /no/such/interpreter, which does "
                "not exist; fix that line, or give an interpreter first");
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
}

}  // namespace
}  // namespace dpl::supervision
