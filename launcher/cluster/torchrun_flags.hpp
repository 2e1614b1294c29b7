// torchrun's spellings of the launcher's flags, as data the command line can register, and the
// parsers of their values. A torchrun command line (`torchrun --nnodes 2 --node-rank 1
// --nproc-per-node 4 --rdzv-endpoint host:29400`) then means the same to the launcher.
//
// Values follow torch.distributed.run: --nnodes N or MIN:MAX, --nproc-per-node N|auto|cpu|gpu,
// --rdzv-endpoint HOST[:PORT] ([v6 address]:PORT for IPv6). The parsers' messages do not name
// the flag; the caller adds it (status.WithContext("--nnodes")), so the same parser serves the
// environment (PET_NNODES, PET_RDZV_ENDPOINT).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

// How an alias's value becomes the value of its dpl flag.
enum class AliasValue {
  kSame,              // taken as it is (--node-rank 1 -> --machine-id 1)
  kNodeRange,         // N or MIN:MAX (ParseNodeRange); MIN:MAX is an elastic job
  kProcessesPerNode,  // N, auto, cpu or gpu (ParseProcessesPerNode, ResolveProcessesPerNode)
  kEndpoint,          // HOST[:PORT] (ParseEndpoint) -> --master-addr, and --master-port if given
};

struct FlagAlias {
  const char* name;      // without the leading dashes: "nproc_per_node"
  const char* dpl_flag;  // the launcher's flag, without dashes: "num-processes"; for kEndpoint
                         // "master-addr" (the port goes to "master-port")
  AliasValue value;
};

// Every alias, both spellings torchrun accepts (torch >= 2.0 takes dashes and underscores, 1.x
// only underscores): nnodes, node-rank, node_rank, nproc-per-node, nproc_per_node, rdzv-endpoint,
// rdzv_endpoint, master_addr, master_port. (--master-addr and --master-port are dpl's own.)
const std::vector<FlagAlias>& TorchrunFlagAliases();

// The alias called `name` (no dashes), or nullptr.
const FlagAlias* FindTorchrunAlias(std::string_view name);

// For a flag of torchrun's (or of a training script's) that dpl has in another form, what to
// give instead ("--rdzv-id": "give every launcher the same --job-token"); "" for any other name.
// Names in canonical form (dashes).
std::string OtherLaunchersFlagAdvice(const std::string& name);

struct NodeRange {
  int min = 1;
  int max = 1;
};
// "2" -> {2, 2}; "1:4" -> {1, 4}. Both at least 1, min <= max.
Result<NodeRange> ParseNodeRange(const std::string& text);

struct ProcessesPerNode {
  enum class Kind { kCount, kAuto, kCpu, kGpu };
  Kind kind = Kind::kCount;
  int count = 1;  // for kCount
};
// "4" -> 4; "auto", "cpu", "gpu" as in torchrun.
Result<ProcessesPerNode> ParseProcessesPerNode(const std::string& text);

// What the keywords mean on this machine, as in torchrun: cpu -> `cpu_count`, gpu ->
// `gpu_count`, auto -> `gpu_count` when there are GPUs, else `cpu_count`. `gpu_count` is nothing
// when the caller cannot count GPUs; then gpu (and auto) ask for a number instead.
Result<int> ResolveProcessesPerNode(const ProcessesPerNode& processes, int cpu_count,
                                    std::optional<int> gpu_count);

struct Endpoint {
  std::string host;       // brackets of an IPv6 address removed
  int port = 0;           // 0..65535; the default port when the text has none
  bool has_port = false;  // whether the text gave the port
};
// "host:29400", "10.0.0.1", "[fd00::1]:29400", "[fd00::1]". An IPv6 address needs brackets
// (fd00::1:29400 could be either); a host is letters, digits, '.', '-' and '_'.
Result<Endpoint> ParseEndpoint(const std::string& text, int default_port);

// The dpl flags and values one alias stands for, e.g. ("rdzv-endpoint", "[::1]:1234") ->
// {("master-addr", "::1"), ("master-port", "1234")}; ("nnodes", "2:2") -> {("num-machines",
// "2")}; ("nnodes", "2:4") -> {("num-machines", "2:4")}. `cpu_count` and `gpu_count` resolve
// --nproc-per-node keywords. Errors name the flag.
Result<std::vector<std::pair<std::string, std::string>>> TranslateTorchrunFlag(
    const FlagAlias& alias, const std::string& value, int cpu_count, std::optional<int> gpu_count);

}  // namespace dpl::cluster
