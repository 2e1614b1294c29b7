// Runs a backend test body in `world_size` real rank processes (fork), each with its own backend
// instance, connected through a FileStore in a fresh temp directory. The gtest process has no
// threads when it forks, so the children start clean.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend_loader.hpp"
#include "file_store.hpp"

namespace dpl::testing {

// What one rank reports back to the test process through a pipe.
struct RankReport {
  int32_t status = -1;       // dpl_status of the first failing call, or DPL_OK
  int32_t exited_early = 0;  // the body asked the rank to vanish (dead-peer tests)
  uint64_t output_hash = 0;  // FNV-1a of every output byte, to compare ranks
  double seconds = 0;        // wall time of the body
  char message[480] = {};    // error text of the first failure
};

struct RankContext {
  const dpl_backend_plugin_v5* plugin;
  dpl_backend* backend;
  int rank;
  int world_size;
};

inline void fnv1a(uint64_t* hash, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) *hash = (*hash ^ p[i]) * 1099511628211ull;
}

inline void set_message(RankReport* report, const std::string& text) {
  std::snprintf(report->message, sizeof(report->message), "%s", text.c_str());
}

// Whether `status` failed; if so, it and the plugin's message about `what` go into `report`.
inline bool Failed(const RankContext& ctx, RankReport* report, dpl_status status,
                   const std::string& what) {
  if (status == DPL_OK) return false;
  report->status = status;
  set_message(report, what + ": " + ctx.plugin->last_error());
  return true;
}

struct RunOptions {
  int64_t timeout_ms = 20000;
  int wall_limit_s = 90;
  std::string backend_options;
  int32_t device_type = kDLCPU;  // kDLCUDA for the nccl backend
};

// Body: fills *report (status, hash, message). Returns false to make the rank exit at once
// without destroying its backend (a peer that dies).
using RankBody = std::function<bool(const RankContext&, RankReport*)>;

inline std::vector<RankReport> run_ranks(const std::string& backend, int world_size,
                                         const RankBody& body, const RunOptions& options = {}) {
  char directory_template[] = "/tmp/dpl_backend_test_XXXXXX";
  const std::string directory = ::mkdtemp(directory_template);
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int rank = 0; rank < world_size; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) break;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::signal(SIGPIPE, SIG_IGN);  // as the launcher's workers do (dpl/common.h)
      RankReport report;
      std::string error;
      const auto* plugin = load_backend(plugin_path(backend, DPL_TEST_PLUGIN_DIR), &error);
      bool keep_going = true;
      dpl_backend* instance = nullptr;
      if (plugin == nullptr) {
        set_message(&report, "load: " + error);
      } else {
        FileStore store(directory);
        dpl_backend_config_v5 config{};
        config.struct_size = sizeof(config);
        config.version = plugin->header.abi_version;
        config.rank = rank;
        config.world_size = world_size;
        config.local_rank = rank;
        config.local_world_size = world_size;
        config.device_type = options.device_type;
        config.device_id = 0;
        config.timeout_ms = options.timeout_ms;
        config.store = store.view();
        config.options = options.backend_options.c_str();
        config.local_address = "127.0.0.1";  // every rank of these tests runs on this machine
        report.status = plugin->create(&config, &instance);
        if (report.status != DPL_OK) {
          set_message(&report, plugin->last_error());
        } else {
          report.status = DPL_OK;
          const auto start = std::chrono::steady_clock::now();
          keep_going = body(RankContext{plugin, instance, rank, world_size}, &report);
          report.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (keep_going) plugin->destroy(instance);
        }
      }
      report.exited_early = keep_going ? 0 : 1;
      const ssize_t written = ::write(fds[1], &report, sizeof(report));
      ::_exit(written == sizeof(report) ? 0 : 3);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<RankReport> reports(children.size());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.wall_limit_s);
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    while (::waitpid(children[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(children[i], SIGKILL);
        ::waitpid(children[i], &status, 0);
        set_message(&reports[i], "rank hung past the test's wall limit and was killed");
        break;
      }
      ::usleep(2000);
    }
    RankReport report;
    if (::read(pipes[i], &report, sizeof(report)) == sizeof(report)) {
      reports[i] = report;
    } else if (reports[i].message[0] == '\0') {
      // Died before reporting (a crash inside the plugin, say): say how, or the failure is blank.
      set_message(&reports[i], WIFSIGNALED(status) ? "rank died without a report: signal " +
                                                         std::to_string(WTERMSIG(status))
                                                   : "rank exited without a report: exit code " +
                                                         std::to_string(WEXITSTATUS(status)));
    }
    ::close(pipes[i]);
  }
  std::system(("rm -rf " + directory).c_str());
  return reports;
}

}  // namespace dpl::testing
