// The text of --help: the usage, then the flags of the table section by section (each row names
// its section: flags.hpp), each with its value, range and default as its help line says them.
// `--help SECTION` prints that section alone.
#include <sstream>

#include "cli/flags.hpp"
#include "cli/options.hpp"

namespace dpl::cli {
namespace {

constexpr size_t kHelpLineLength = 100;
constexpr size_t kHelpFlagColumn = 34;

constexpr const char* kUsage =
    "usage: launcher [options]             train (the default)\n"
    "       launcher [options] -- PROGRAM [ARGS...]  run PROGRAM as the workers (torchrun's\n"
    "                                      environment; e.g. -- python3 train.py)\n"
    "       launcher --selftest [options]  check the rendezvous and the backend, and measure\n"
    "                                      every link between machines and workers; no training\n"
    "       launcher plugins [--plugin-dir DIR]...  list the plugins found\n"
    "       launcher --help [SECTION]      this help, or one section of it\n\n"
    "Every option may also be set in a --config file as `name = value` (names with - or _).\n";

// Appends `text` to `out` wrapped at kHelpLineLength, continuation lines indented to `column`.
void AppendWrapped(const std::string& text, size_t column, size_t used, std::string* out) {
  std::istringstream words(text);
  size_t position = used;
  for (std::string word; words >> word;) {
    if (position > column && position + 1 + word.size() > kHelpLineLength) {
      *out += "\n" + std::string(column, ' ');
      position = column;
    } else if (position > column) {
      *out += " ";
      ++position;
    }
    *out += word;
    position += word.size();
  }
  *out += "\n";
}

void AppendFlag(const Flag& flag, std::string* text) {
  std::string head = "  --" + flag.name;
  if (flag.name == "help") head = "  -h [ --help ]";
  if (flag.name == kProgramFlag) head = "  --";
  if (!flag.value_name.empty()) head += " " + flag.value_name;
  *text += head;
  if (head.size() + 1 >= kHelpFlagColumn) {
    *text += "\n" + std::string(kHelpFlagColumn, ' ');
  } else {
    *text += std::string(kHelpFlagColumn - head.size(), ' ');
  }
  AppendWrapped(flag.help, kHelpFlagColumn, kHelpFlagColumn, text);
}

// A section's heading, its intro and its flags, in table order; internal flags are left out.
std::string SectionText(const HelpSectionText& section) {
  std::string text = std::string(section.heading) + " (--help " + section.name + "):\n";
  if (*section.intro != '\0') AppendWrapped(section.intro, 0, 0, &text);
  for (const Flag& flag : FlagTable()) {
    if (!flag.internal && flag.section == section.section) AppendFlag(flag, &text);
  }
  return text;
}

}  // namespace

const std::vector<HelpSectionText>& HelpSections() {
  static const std::vector<HelpSectionText> sections = {
      {HelpSection::kJob, "job", "Job and machines", ""},
      {HelpSection::kRendezvous, "rendezvous", "Rendezvous and store",
       "Machine 0 serves the job's store, where every launcher and worker meets the others."},
      {HelpSection::kTraining, "training", "Training", ""},
      {HelpSection::kOptimizer, "optimizer", "Optimizer and schedule", ""},
      {HelpSection::kData, "data", "Data", ""},
      {HelpSection::kPrecision, "precision", "Precision", ""},
      {HelpSection::kCheckpoints, "checkpoints", "Checkpoints", ""},
      {HelpSection::kOutputs, "outputs", "Outputs and observability", ""},
      {HelpSection::kClusters, "clusters", "Clusters",
       "Environment defaults: MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN, then a Slurm step's "
       "variables (srun; in a batch script or salloc shell, start one launcher per node with "
       "`srun --ntasks-per-node=1 launcher ...`) or torchrun's and Kubernetes' (WORLD_SIZE, RANK, "
       "NODE_RANK, GROUP_RANK, LOCAL_WORLD_SIZE, PET_*); plugins are also searched in "
       "DPL_PLUGIN_PATH (colon-separated). torchrun's flags are accepted: --nnodes N|MIN:MAX, "
       "--node-rank N, --nproc-per-node N, --rdzv-endpoint HOST[:PORT], --master_addr, "
       "--master_port."},
  };
  return sections;
}

std::string HelpText(const std::string& section) {
  for (const HelpSectionText& one : HelpSections()) {
    if (section == one.name) return SectionText(one);
  }
  std::string names;
  for (const HelpSectionText& one : HelpSections()) {
    names += std::string(names.empty() ? "" : ", ") + one.name;
  }
  std::string text = kUsage;
  AppendWrapped("Sections (launcher --help SECTION prints one): " + names + ".", 0, 0, &text);
  for (const HelpSectionText& one : HelpSections()) text += "\n" + SectionText(one);
  return text;
}

}  // namespace dpl::cli
