// launcher: the dpl host program. Dispatches to the listing of plugins, the launcher role (store,
// rendezvous, spawning and supervising workers) or the worker role. Every error is printed as
// one clear line and turns into a non-zero exit; no exception escapes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "cli/options.hpp"
#include "common/log.hpp"
#include "common/open_files.hpp"
#include "dpl/dpl.h"
#include "plugin_host/plugin_host.hpp"
#include "supervision/launcher.hpp"
#include "worker/worker.hpp"

namespace {

int Fail(const dpl::Status& status) {
  dpl::log::Error(status.message());
  return 1;
}

int Run(int argc, const char* const* argv) {
#ifdef DPL_BUILD_PLUGIN_DIR
  dpl::plugin_host::SetBuildTreePluginDir(DPL_BUILD_PLUGIN_DIR);
#endif
  // Every launcher, and so every worker and program it starts (common/open_files.hpp).
  dpl::RaiseOpenFileLimit();
  auto options = dpl::cli::ParseCommandLine(argc, argv);
  if (!options.ok()) return Fail(options.status());
  switch (options->command) {
    case dpl::cli::Command::kHelp:
      std::cout << dpl::cli::HelpText(options->help_section);
      return 0;
    case dpl::cli::Command::kVersion:
      // The ABI versions of plugins it loads, oldest..newest.
      std::cout << "dpl launcher " << DPL_SDK_VERSION_STRING << " ("
                << dpl::plugin_host::SupportedAbiText() << ")\n";
      return 0;
    case dpl::cli::Command::kPlugins: {
      auto discovery = dpl::plugin_host::DiscoverPlugins(options->plugin_dirs);
      if (!discovery.ok()) return Fail(discovery.status());
      std::cout << dpl::plugin_host::FormatPluginList(*discovery) << std::flush;
      if (!discovery->refused.empty()) {
        return Fail(dpl::Status::Error(std::to_string(discovery->refused.size()) +
                                       " file(s) on the plugin search path were refused; the "
                                       "reasons are listed above"));
      }
      return 0;
    }
    case dpl::cli::Command::kWorker: {
      // A worker has released everything it owns (backend, model, files) when RunWorker returns.
      // What is left are the static destructors of libtorch and the other plugin libraries,
      // about 0.1 s that the job would wait for; skip them.
      const int exit_code = dpl::worker::RunWorker(*options);
      std::fflush(nullptr);
      std::_Exit(exit_code);
    }
    case dpl::cli::Command::kTrain:
    case dpl::cli::Command::kSelftest: {
      const int exit_code = dpl::supervision::RunLauncher(*options);
      // The programs' output (their standard output, relayed) is the job's result too: a job
      // whose output could not be written has not succeeded, as a program's own print fails.
      if (exit_code == 0 && dpl::log::StandardOutputError() != 0) {
        return Fail(dpl::Status::Error("the job's standard output could not be written (" +
                                       std::string(std::strerror(dpl::log::StandardOutputError())) +
                                       "); part of what its programs printed is lost"));
      }
      return exit_code;
    }
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(dpl::Status::Error(std::string("unexpected internal error: ") + e.what()));
  } catch (...) {
    return Fail(dpl::Status::Error("unexpected internal error"));
  }
}
