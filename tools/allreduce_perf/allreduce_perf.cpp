// allreduce_perf: like nccl-tests' all_reduce_perf for dpl backends. Spawns N rank processes on
// loopback (fork), each loads the backend plugin, connects through a file store, and rank 0
// prints per size: bytes, elements, time per allreduce, algbw = bytes/time and
// busbw = algbw * 2(n-1)/n (the bytes each link really carries in a ring). float32 sum.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend_loader.hpp"
#include "file_store.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend = "tcp";
  std::string plugin_dir = DPL_BENCH_PLUGIN_DIR;
  std::string backend_options;
  int world_size = 2;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 256ull << 20;
  int factor = 2;
  int iters = 20;
  int warmup = 2;
  bool check = false;
};

const char* kUsage =
    "usage: allreduce_perf --backend tcp|gloo [--world-size N] [--min-bytes B] [--max-bytes B]\n"
    "                      [--factor F] [--iters K] [--warmup W] [--check]\n"
    "                      [--plugin-dir DIR] [--backend-options k=v,...]\n"
    "  sizes accept K, M, G suffixes (powers of 1024); float32 sum allreduce\n";

uint64_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string suffix = end;
  if (suffix == "K" || suffix == "k") value *= 1024;
  if (suffix == "M" || suffix == "m") value *= 1024 * 1024;
  if (suffix == "G" || suffix == "g") value *= 1024.0 * 1024 * 1024;
  return static_cast<uint64_t>(value);
}

bool parse(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allreduce_perf: %s needs a value\n%s", arg.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--backend")
      options->backend = next();
    else if (arg == "--world-size")
      options->world_size = std::atoi(next().c_str());
    else if (arg == "--min-bytes")
      options->min_bytes = parse_bytes(next());
    else if (arg == "--max-bytes")
      options->max_bytes = parse_bytes(next());
    else if (arg == "--factor")
      options->factor = std::atoi(next().c_str());
    else if (arg == "--iters")
      options->iters = std::atoi(next().c_str());
    else if (arg == "--warmup")
      options->warmup = std::atoi(next().c_str());
    else if (arg == "--plugin-dir")
      options->plugin_dir = next();
    else if (arg == "--backend-options")
      options->backend_options = next();
    else if (arg == "--check")
      options->check = true;
    else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "allreduce_perf: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return false;
    }
  }
  if (options->world_size < 1 || options->iters < 1 || options->factor < 2 ||
      options->min_bytes < 4 || options->max_bytes < options->min_bytes) {
    std::fprintf(stderr,
                 "allreduce_perf: need world-size >= 1, iters >= 1, factor >= 2, "
                 "4 <= min-bytes <= max-bytes\n");
    return false;
  }
  return true;
}

// memcpy bandwidth of this machine: the ceiling for any loopback transfer.
double memcpy_gbps(size_t bytes) {
  std::vector<char> source(bytes, 1), target(bytes, 0);
  std::memcpy(target.data(), source.data(), bytes);  // fault the pages in
  const int rounds = 5;
  const auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    source[static_cast<size_t>(r)] = static_cast<char>(r);
    std::memcpy(target.data(), source.data(), bytes);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * rounds / seconds / 1e9 + 0 * target[0];
}

// The backend of `rank`, joined through `store`; nullptr (after saying why) when create failed.
dpl_backend* create_backend(const dpl_backend_plugin_v5& plugin, const Options& options, int rank,
                            const dpl::testing::FileStore& store) {
  dpl_backend_config_v5 config{};
  config.struct_size = sizeof(config);
  config.version = plugin.header.abi_version;
  config.rank = rank;
  config.world_size = options.world_size;
  config.local_rank = rank;
  config.local_world_size = options.world_size;
  config.device_type = kDLCPU;
  config.timeout_ms = 120000;
  config.store = store.view();
  config.options = options.backend_options.c_str();
  config.local_address = "127.0.0.1";  // every rank runs on this machine
  dpl_backend* backend = nullptr;
  if (plugin.create(&config, &backend) != DPL_OK) {
    std::fprintf(stderr, "rank %d: create failed: %s\n", rank, plugin.last_error());
    return nullptr;
  }
  return backend;
}

void print_header(const Options& options) {
  std::printf("# backend %s, world size %d, float32 sum, %d iters (+%d warmup)%s\n",
              options.backend.c_str(), options.world_size, options.iters, options.warmup,
              options.check ? ", checked" : "");
  std::printf("%12s %12s %12s %10s %10s %6s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)", "check");
}

// The warmup allreduces, a barrier, then the timed ones: `*seconds` is the time of one.
dpl_status time_allreduce(const dpl_backend_plugin_v5& plugin, dpl_backend* backend,
                          DLTensor* tensor, const Options& options, double* seconds) {
  dpl_status status = DPL_OK;
  for (int w = 0; w < options.warmup && status == DPL_OK; ++w) {
    status = plugin.allreduce(backend, tensor, DPL_REDUCE_SUM, nullptr);
  }
  if (status == DPL_OK) status = plugin.barrier(backend);
  const auto start = Clock::now();
  for (int it = 0; it < options.iters && status == DPL_OK; ++it) {
    status = plugin.allreduce(backend, tensor, DPL_REDUCE_SUM, nullptr);
  }
  *seconds = std::chrono::duration<double>(Clock::now() - start).count() / options.iters;
  return status;
}

// Allreduces a pattern that differs by rank and checks every element of the sum.
bool check_allreduce(const dpl_backend_plugin_v5& plugin, dpl_backend* backend, DLTensor* tensor,
                     std::vector<float>& buffer, size_t count, int rank, int world_size) {
  for (size_t i = 0; i < count; ++i) buffer[i] = static_cast<float>((i + rank) % 13);
  bool good = plugin.allreduce(backend, tensor, DPL_REDUCE_SUM, nullptr) == DPL_OK;
  for (size_t i = 0; i < count && good; ++i) {
    float expected = 0;
    for (int r = 0; r < world_size; ++r) expected += static_cast<float>((i + r) % 13);
    good = buffer[i] == expected;
  }
  return good;
}

void print_row(uint64_t bytes, size_t count, double seconds, int world_size, const char* verdict) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double busbw = algbw * 2.0 * (world_size - 1) / world_size;
  std::printf("%12llu %12zu %12.1f %10.3f %10.3f %6s\n", static_cast<unsigned long long>(bytes),
              count, seconds * 1e6, algbw, busbw, verdict);
  std::fflush(stdout);
}

int run_rank(const Options& options, int rank, const std::string& directory) {
  std::string error;
  const auto* plugin = dpl::testing::load_backend(
      dpl::testing::plugin_path(options.backend, options.plugin_dir), &error);
  if (plugin == nullptr) {
    std::fprintf(stderr, "rank %d: cannot load backend '%s': %s\n", rank, options.backend.c_str(),
                 error.c_str());
    return 1;
  }
  dpl::testing::FileStore store(directory);
  dpl_backend* backend = create_backend(*plugin, options, rank, store);
  if (backend == nullptr) return 1;
  std::vector<float> buffer(options.max_bytes / sizeof(float));
  int failures = 0;
  if (rank == 0) print_header(options);
  for (uint64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.factor) {
    const size_t count = static_cast<size_t>(bytes / sizeof(float));
    int64_t shape = static_cast<int64_t>(count);
    DLTensor tensor{buffer.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    for (size_t i = 0; i < count; ++i) buffer[i] = 0.0f;
    double seconds = 0;
    if (time_allreduce(*plugin, backend, &tensor, options, &seconds) != DPL_OK) {
      std::fprintf(stderr, "rank %d: allreduce of %llu bytes failed: %s\n", rank,
                   static_cast<unsigned long long>(bytes), plugin->last_error());
      return 1;
    }
    const char* verdict = "-";
    if (options.check) {
      const bool good =
          check_allreduce(*plugin, backend, &tensor, buffer, count, rank, options.world_size);
      verdict = good ? "ok" : "WRONG";
      failures += good ? 0 : 1;
    }
    if (rank == 0) print_row(bytes, count, seconds, options.world_size, verdict);
  }
  plugin->destroy(backend);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, &options)) return 2;
  const size_t ceiling_bytes = std::min<uint64_t>(options.max_bytes, 256ull << 20);
  std::printf("# memcpy bandwidth (ceiling, %zu MiB): %.2f GB/s\n", ceiling_bytes >> 20,
              memcpy_gbps(std::max<size_t>(ceiling_bytes, 1 << 20)));
  std::fflush(stdout);
  char directory_template[] = "/tmp/dpl_allreduce_perf_XXXXXX";
  const std::string directory = ::mkdtemp(directory_template);
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < options.world_size; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_rank(options, rank, directory));
    ranks.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : ranks) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::system(("rm -rf " + directory).c_str());
  if (failed != 0) std::fprintf(stderr, "allreduce_perf: %d rank(s) failed\n", failed);
  return failed == 0 ? 0 : 1;
}
