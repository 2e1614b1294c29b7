#include "supervision/output_check.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "common/output_file.hpp"
#include "dpl/support/options.hpp"
#include "training/checkpoint.hpp"

namespace dpl::supervision {
namespace {

// Whether a missing folder is created by the run (--log-dir, --checkpoint-dir) or must exist.
enum class MissingFolder { kCreated, kRefused };

std::string FolderOf(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// "--flag value: ".
std::string Named(const std::string& flag, const std::string& value) {
  return "--" + flag + " " + value + ": ";
}

// Creates, writes and removes a small file in `folder`.
Status ProbeWrite(const std::string& flag, const std::string& value, const std::string& folder) {
  std::string path = folder + "/.dpl-write-check-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return Status::Io(Named(flag, value) + "cannot create a file in " + folder + ": " +
                      std::strerror(errno) + "; choose a folder this user can write");
  }
  const char probe[] = "dpl checks that this folder can be written\n";
  const ssize_t written = ::write(fd, probe, sizeof probe - 1);
  const int write_error = written < 0 ? errno : 0;
  const int close_error = ::close(fd) != 0 ? errno : 0;
  ::unlink(path.c_str());
  const int error = write_error != 0 ? write_error : close_error;
  if (error != 0 || written != static_cast<ssize_t>(sizeof probe - 1)) {
    return Status::Io(Named(flag, value) + "cannot write in " + folder + ": " +
                      std::strerror(error != 0 ? error : ENOSPC) +
                      "; free space there or choose another folder");
  }
  return Status::Ok();
}

Status CheckFolder(const std::string& flag, const std::string& folder, MissingFolder missing) {
  struct stat info {};
  if (::stat(folder.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) {
      return Status::InvalidArgument(Named(flag, folder) + "this is a file, not a folder");
    }
    return ProbeWrite(flag, folder, folder);
  }
  if (errno != ENOENT) {
    return Status::Io(Named(flag, folder) + std::strerror(errno));
  }
  if (missing == MissingFolder::kRefused) {
    return Status::InvalidArgument(Named(flag, folder) + "no such folder; create it first");
  }
  const std::string parent = FolderOf(folder);
  if (::stat(parent.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return Status::InvalidArgument(Named(flag, folder) + "its parent folder " + parent +
                                   " does not exist; create it first");
  }
  return ProbeWrite(flag, folder, parent);
}

Status CheckFile(const std::string& flag, const std::string& file) {
  struct stat info {};
  if (::stat(file.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return Status::InvalidArgument(Named(flag, file) + "this is a folder; name a file");
  }
  const std::string folder = FolderOf(file);
  if (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return Status::InvalidArgument(Named(flag, file) + "the folder " + folder +
                                   " does not exist; create it first");
  }
  if (::access(file.c_str(), F_OK) == 0 && ::access(file.c_str(), W_OK) != 0) {
    return Status::Io(Named(flag, file) + "cannot write it: " + std::strerror(errno));
  }
  return ProbeWrite(flag, file, folder);
}

// --export and --export-best (Note [Files a flag names]): a link is followed to its file, a path
// that is not a regular file refused, and the file's folder checked as any output file's.
Status CheckExport(const std::string& flag, const std::string& file) {
  const Result<std::string> resolved = OutputFileOf(file);
  if (!resolved.ok()) return resolved.status().WithContext("--" + flag);
  return CheckFile(flag, *resolved);
}

// --metrics /dev/stdout would be the worker's standard output, which the launcher relays into its
// log (on its standard error, each line stamped): nothing would reach the launcher's standard
// output, so `--metrics /dev/stdout | jq` read nothing. Refused with what works instead.
Status RefuseStandardStreams(const std::string& flag, const std::string& file) {
  for (const char* stream : {"/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2",
                             "/proc/self/fd/1", "/proc/self/fd/2", "-"}) {
    if (file != stream) continue;
    return Status::InvalidArgument(
        Named(flag, file) +
        "a worker's standard streams are the launcher's log relay, so the lines would come "
        "stamped into the log, not onto the launcher's standard output; name a file and read it "
        "as it grows (tail -f FILE)");
  }
  return Status::Ok();
}

// Note [A fresh run and an earlier run's checkpoints]: a run without --resume writes its
// checkpoints under the same names as any earlier run in the folder (checkpoint-<step>.pt), so it
// would overwrite some of that run's checkpoints, retention would remove others, and what is left
// would mix the two runs (a later --resume then picks the other run's newest, and refuses its
// options). So the first attempt of a run that does not resume is refused when the folder
// already holds a complete checkpoint, as an output it cannot write: not restarted (a restart
// resumes, and would go on from the other run). Restarts and a requeued Slurm job resume.
Status RefuseAnEarlierRunsCheckpoints(const std::string& folder) {
  DPL_ASSIGN_OR_RETURN(const std::string newest, training::NewestCheckpoint(folder));
  if (newest.empty()) return Status::Ok();
  return Status::InvalidArgument(
      "--checkpoint-dir " + folder +
      " already holds the checkpoints of a run (the newest: " + newest +
      "), which this run would overwrite: add --resume to go on from it, or name an "
      "empty folder");
}

// The file a model plugin reads, where its options name one (file=, as the compiled and the
// torchscript plugins take it); "" when they do not, or when they are malformed (the plugin then
// says what is wrong with them).
std::string ModelFileOf(const std::string& model_options) {
  try {
    const support::KeyValueOptions options(model_options.c_str(), "--model-options");
    return options.GetString("file", "");
  } catch (const support::PluginError&) {
    return "";
  }
}

// Whether two paths name one file, existing or not (links followed, "./" and ".." resolved).
bool SameFile(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path canonical_a = fs::weakly_canonical(fs::absolute(a, error), error);
  if (error) return a == b;
  const fs::path canonical_b = fs::weakly_canonical(fs::absolute(b, error), error);
  return error ? a == b : canonical_a == canonical_b;
}

// Whether `path` names a file that exists inside `folder`, at any depth (links followed).
bool IsFileInside(const std::string& path, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (folder.empty() || !fs::is_regular_file(path, error)) return false;
  const fs::path file = fs::canonical(path, error);
  if (error) return false;
  const fs::path root = fs::canonical(folder, error);
  if (error) return false;
  const auto [root_end, file_at] =
      std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  return root_end == root.end() && file_at != file.end();
}

// Whether the file is what `flag` wrote in an earlier run (a run whose data folder is also where
// it writes, `--data-dir .`): a zip archive as torch.save writes for a model, dpl's JSON lines of
// metrics, Chrome's trace object. None of the data plugins reads such a file.
bool IsEarlierOutput(const std::string& flag, const std::string& path) {
  char head[16] = {};
  std::ifstream(path, std::ios::binary).read(head, sizeof head);
  const std::string start(head, sizeof head);
  if (flag == "--export" || flag == "--export-best") return start.rfind("PK\x03\x04", 0) == 0;
  if (flag == "--metrics") return start.rfind("{\"kind\": ", 0) == 0;
  if (flag == "--trace") return start.rfind("{\"traceEvents\"", 0) == 0;
  return false;
}

// Note [One file, one flag]: two outputs given one file overwrite each other (the best model
// replaced by the final one, the metrics by the trace, with exit 0), and an output given a file
// the run reads (--init-from, the model's package, the --config file, a file of --data-dir)
// replaces it: refused before anything runs. A user's data set lost to `--export
// DATA/train-images-idx3-ubyte.gz` cannot be had back; an earlier run's output in the data's
// folder may be written again.
Status RefuseSharedFiles(const cli::Options& options) {
  const training::TrainingConfig& training = options.training;
  struct NamedFile {
    std::string flag;
    std::string path;
    bool written;
  };
  const NamedFile files[] = {{"--metrics", training.metrics_file, true},
                             {"--trace", training.trace_file, true},
                             {"--export", training.export_file, true},
                             {"--export-best", training.export_best_file, true},
                             {"--init-from", training.init_from, false},
                             {"--model-options file=", ModelFileOf(training.model_options), false},
                             {"--config", options.config_file, false}};
  for (size_t i = 0; i < std::size(files); ++i) {
    for (size_t j = i + 1; j < std::size(files); ++j) {
      const NamedFile& a = files[i];
      const NamedFile& b = files[j];
      if (a.path.empty() || b.path.empty() || !(a.written || b.written)) continue;
      if (!SameFile(a.path, b.path)) continue;
      const std::string what = b.written ? "each would overwrite the other's"
                                         : "the run would replace the file it reads";
      return Status::InvalidArgument(a.flag + " and " + b.flag + " name the same file, " + a.path +
                                     ": " + what + "; give " + (b.written ? b.flag : a.flag) +
                                     " another file");
    }
  }
  for (const NamedFile& file : files) {
    if (!file.written || !IsFileInside(file.path, training.data_dir)) continue;
    if (IsEarlierOutput(file.flag, file.path)) continue;
    return Status::InvalidArgument(file.flag + " " + file.path + " is a file of --data-dir " +
                                   training.data_dir + ", which the run reads: writing " +
                                   file.flag + " there would replace it; give " + file.flag +
                                   " a file outside the data");
  }
  return Status::Ok();
}

}  // namespace

Status CheckOutputsWritable(const cli::Options& options, int machine_id, bool resumes) {
  const training::TrainingConfig& training = options.training;
  if (!options.log_dir.empty()) {
    DPL_RETURN_IF_ERROR(CheckFolder("log-dir", options.log_dir, MissingFolder::kCreated));
  }
  if (!training.dump_parameters_dir.empty()) {
    DPL_RETURN_IF_ERROR(
        CheckFolder("dump-parameters", training.dump_parameters_dir, MissingFolder::kRefused));
  }
  if (machine_id != 0) return Status::Ok();  // rank 0 writes the rest, on machine 0
  DPL_RETURN_IF_ERROR(RefuseSharedFiles(options));
  // Rank 0 reads --init-from after every plugin loaded; a file it cannot read fails now.
  if (!training.init_from.empty() && ::access(training.init_from.c_str(), R_OK) != 0) {
    return Status::InvalidArgument("--init-from " + training.init_from + ": " +
                                   std::strerror(errno) +
                                   "; name a state dict file (torch.save of {name: tensor})");
  }
  if (!training.metrics_file.empty()) {
    DPL_RETURN_IF_ERROR(RefuseStandardStreams("metrics", training.metrics_file));
    DPL_RETURN_IF_ERROR(CheckFile("metrics", training.metrics_file));
  }
  const std::pair<const char*, const std::string*> exports[] = {
      {"export", &training.export_file}, {"export-best", &training.export_best_file}};
  for (const auto& [flag, file] : exports) {
    if (!file->empty()) DPL_RETURN_IF_ERROR(CheckExport(flag, *file));
  }
  if (!training.checkpoint_dir.empty()) {
    DPL_RETURN_IF_ERROR(
        CheckFolder("checkpoint-dir", training.checkpoint_dir, MissingFolder::kCreated));
    if (!resumes) DPL_RETURN_IF_ERROR(RefuseAnEarlierRunsCheckpoints(training.checkpoint_dir));
  }
  return Status::Ok();
}

}  // namespace dpl::supervision
