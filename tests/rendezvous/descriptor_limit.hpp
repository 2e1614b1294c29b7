// For tests that hold a flood of connections open: this process's descriptor limit.
#pragma once

#include <sys/resource.h>

#include <string>

namespace dpl::rendezvous::testing {

// Raises this process's soft descriptor limit to its hard one; "" when it now allows `needed`,
// else why a test that needs them should skip.
inline std::string AllowDescriptors(rlim_t needed) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= needed) return "";
  return "this process may open " + std::to_string(limit.rlim_cur) +
         " descriptors; the test needs " + std::to_string(needed);
}

}  // namespace dpl::rendezvous::testing
