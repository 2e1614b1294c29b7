#include "cluster/torchrun_flags.hpp"

#include <algorithm>

#include "cluster/decimal.hpp"

namespace dpl::cluster {
namespace {

constexpr int kMaxCount = 1 << 20;  // far above any job; the command line holds its own limits
constexpr int kMaxPort = 65535;

std::string Quoted(const std::string& text) {
  return "'" + text + "'";
}

bool IsHostCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// Hex digits, ':', '.' (an IPv4 tail), and '%' with a name for a zone (fe80::1%eth0).
bool IsIpv6Character(char c) {
  return IsHostCharacter(c) || c == ':' || c == '%';
}

Result<int> ParsePort(const std::string& endpoint, const std::string& text) {
  const auto port = ParseDecimal(text, kMaxPort);
  if (!port) {
    return Status::InvalidArgument("the port of " + Quoted(endpoint) +
                                   " must be a number from 0 to 65535 (got " + Quoted(text) + ")");
  }
  return static_cast<int>(*port);
}

}  // namespace

const std::vector<FlagAlias>& TorchrunFlagAliases() {
  static const std::vector<FlagAlias> kAliases = {
      {"nnodes", "num-machines", AliasValue::kNodeRange},
      {"node-rank", "machine-id", AliasValue::kSame},
      {"node_rank", "machine-id", AliasValue::kSame},
      {"nproc-per-node", "num-processes", AliasValue::kProcessesPerNode},
      {"nproc_per_node", "num-processes", AliasValue::kProcessesPerNode},
      {"rdzv-endpoint", "master-addr", AliasValue::kEndpoint},
      {"rdzv_endpoint", "master-addr", AliasValue::kEndpoint},
      {"master_addr", "master-addr", AliasValue::kSame},
      {"master_port", "master-port", AliasValue::kSame},
  };
  return kAliases;
}

std::string OtherLaunchersFlagAdvice(const std::string& name) {
  static const std::pair<const char*, const char*> kAdvice[] = {
      {"rdzv-id", "dpl's job is its store: give every launcher the same --job-token instead"},
      {"rdzv-backend", "dpl's rendezvous is machine 0's store, or --store etcd://HOST:PORT"},
      {"rdzv-conf", "dpl's rendezvous takes --rendezvous-timeout and --join-grace"},
      {"standalone", "one machine needs no rendezvous flags in dpl: leave it out"},
      {"tee", "--log-dir DIR writes each rank's output to DIR/rank-N.log"},
      {"redirects", "--log-dir DIR writes each rank's output to DIR/rank-N.log"},
      {"local-ranks-filter", "--log-ranks picks the ranks whose output reaches the console"},
      {"no-python", "the program after -- runs as given: leave it out"},
      {"module", "put the module after --: launcher -- python3 -m MODULE"},
      {"m", "put the module after --: launcher -- python3 -m MODULE"},
      {"monitor-interval", "dpl watches its workers continuously: leave it out"},
      {"start-method", "dpl starts each worker as a process of its own: leave it out"},
      {"role", "leave it out"},
      {"learning-rate", "dpl's flag is --lr"},
      {"nproc", "dpl's flag is --num-processes (or torchrun's --nproc-per-node)"},
      {"nprocs", "dpl's flag is --num-processes (or torchrun's --nproc-per-node)"},
      {"num-procs", "dpl's flag is --num-processes (or torchrun's --nproc-per-node)"},
      {"optim", "dpl's flag is --optimizer"},
      {"warmup", "dpl's flag is --warmup-steps"},
      {"gradient-accumulation-steps", "dpl's flag is --grad-accum"},
      {"max-grad-norm", "dpl's flag is --clip-grad-norm"},
      {"fp16", "dpl's flag is --precision fp16"},
      {"bf16", "dpl's flag is --precision bf16"},
  };
  for (const auto& [flag, advice] : kAdvice) {
    if (name == flag) return advice;
  }
  return "";
}

const FlagAlias* FindTorchrunAlias(std::string_view name) {
  for (const FlagAlias& alias : TorchrunFlagAliases()) {
    if (name == alias.name) return &alias;
  }
  return nullptr;
}

Result<NodeRange> ParseNodeRange(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string min_text = text.substr(0, colon);
  const std::string max_text = colon == std::string::npos ? min_text : text.substr(colon + 1);
  const auto min = ParseDecimal(min_text, kMaxCount);
  const auto max = ParseDecimal(max_text, kMaxCount);
  if (!min || !max || *min < 1 || *max < 1) {
    return Status::InvalidArgument(Quoted(text) +
                                   " is not a number of machines N or a range MIN:MAX (numbers "
                                   "from 1 to " +
                                   std::to_string(kMaxCount) + ")");
  }
  if (*min > *max) {
    return Status::InvalidArgument("the range " + Quoted(text) + " goes down; write it as " +
                                   max_text + ":" + min_text);
  }
  return NodeRange{static_cast<int>(*min), static_cast<int>(*max)};
}

Result<ProcessesPerNode> ParseProcessesPerNode(const std::string& text) {
  using Kind = ProcessesPerNode::Kind;
  if (text == "auto") return ProcessesPerNode{Kind::kAuto, 0};
  if (text == "cpu") return ProcessesPerNode{Kind::kCpu, 0};
  if (text == "gpu") return ProcessesPerNode{Kind::kGpu, 0};
  const auto count = ParseDecimal(text, kMaxCount);
  if (!count || *count < 1) {
    return Status::InvalidArgument(Quoted(text) + " is not a number of processes from 1 to " +
                                   std::to_string(kMaxCount) + ", auto, cpu or gpu");
  }
  return ProcessesPerNode{Kind::kCount, static_cast<int>(*count)};
}

Result<int> ResolveProcessesPerNode(const ProcessesPerNode& processes, int cpu_count,
                                    std::optional<int> gpu_count) {
  using Kind = ProcessesPerNode::Kind;
  switch (processes.kind) {
    case Kind::kCount:
      return processes.count;
    case Kind::kCpu:
      return std::max(cpu_count, 1);
    case Kind::kGpu:
      if (!gpu_count) {
        return Status::InvalidArgument(
            "'gpu' needs the number of GPUs, which the launcher does not count; give the number "
            "of processes instead (e.g. 4)");
      }
      if (*gpu_count < 1) {
        return Status::InvalidArgument(
            "'gpu' asks for one process per GPU, but this machine has "
            "none; give the number of processes instead");
      }
      return *gpu_count;
    case Kind::kAuto:
      if (!gpu_count) {
        return Status::InvalidArgument(
            "'auto' needs the number of GPUs, which the launcher does not count; give the number "
            "of processes instead (e.g. 4)");
      }
      return *gpu_count > 0 ? *gpu_count : std::max(cpu_count, 1);
  }
  return Status::Error("unknown kind of processes per node");
}

Result<Endpoint> ParseEndpoint(const std::string& text, int default_port) {
  auto bad_host = [&](const std::string& why) {
    return Status::InvalidArgument("endpoint " + Quoted(text) + ": " + why +
                                   "; expected HOST, HOST:PORT or [IPv6 address]:PORT");
  };
  if (text.empty()) return bad_host("empty");
  Endpoint endpoint;
  endpoint.port = default_port;
  std::string port_text;
  if (text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return bad_host("'[' is not closed by ']'");
    endpoint.host = text.substr(1, close - 1);
    const std::string rest = text.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return bad_host(Quoted(rest) + " follows ']'");
    if (!rest.empty()) port_text = rest.substr(1);
    endpoint.has_port = !rest.empty();
    if (endpoint.host.empty()) return bad_host("no address inside '[...]'");
    for (char c : endpoint.host) {
      if (!IsIpv6Character(c)) return bad_host(Quoted(std::string(1, c)) + " in the address");
    }
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) {
      return bad_host("an IPv6 address needs brackets, e.g. [fd00::1]:29500");
    }
    endpoint.host = text.substr(0, colon);
    endpoint.has_port = colon != std::string::npos;
    if (endpoint.has_port) port_text = text.substr(colon + 1);
    if (endpoint.host.empty()) return bad_host("no host before ':'");
    for (char c : endpoint.host) {
      if (!IsHostCharacter(c)) return bad_host(Quoted(std::string(1, c)) + " in the host");
    }
  }
  if (endpoint.has_port) {
    DPL_ASSIGN_OR_RETURN(auto port, ParsePort(text, port_text));
    endpoint.port = port;
  }
  return endpoint;
}

Result<std::vector<std::pair<std::string, std::string>>> TranslateTorchrunFlag(
    const FlagAlias& alias, const std::string& value, int cpu_count, std::optional<int> gpu_count) {
  const std::string flag = std::string("--") + alias.name;
  std::vector<std::pair<std::string, std::string>> flags;
  switch (alias.value) {
    case AliasValue::kSame:
      flags.emplace_back(alias.dpl_flag, value);
      break;
    case AliasValue::kNodeRange: {
      auto range = ParseNodeRange(value);
      if (!range.ok()) return range.status().WithContext(flag);
      // An elastic range stays a range: --num-machines takes MIN:MAX too.
      std::string machines = std::to_string(range->min);
      if (range->min != range->max) machines += ":" + std::to_string(range->max);
      flags.emplace_back(alias.dpl_flag, machines);
      break;
    }
    case AliasValue::kProcessesPerNode: {
      auto processes = ParseProcessesPerNode(value);
      if (!processes.ok()) return processes.status().WithContext(flag);
      auto count = ResolveProcessesPerNode(*processes, cpu_count, gpu_count);
      if (!count.ok()) return count.status().WithContext(flag);
      flags.emplace_back(alias.dpl_flag, std::to_string(*count));
      break;
    }
    case AliasValue::kEndpoint: {
      auto endpoint = ParseEndpoint(value, 0);
      if (!endpoint.ok()) return endpoint.status().WithContext(flag);
      flags.emplace_back(alias.dpl_flag, endpoint->host);
      if (endpoint->has_port) flags.emplace_back("master-port", std::to_string(endpoint->port));
      break;
    }
  }
  return flags;
}

}  // namespace dpl::cluster
