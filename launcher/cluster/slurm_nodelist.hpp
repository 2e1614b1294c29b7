// Slurm's compressed host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST, the argument of
// `scontrol show hostnames`) expanded into host names, in the order Slurm gives them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

// Slurm refuses a single range of more hosts than this; a whole list is held to it too.
inline constexpr size_t kMaxSlurmHosts = 64 * 1024;

// "gpu[01-02,07],cpu3" -> gpu01 gpu02 gpu07 cpu3; "rack[1-2]-node[01-02]" -> rack1-node01
// rack1-node02 rack2-node01 rack2-node02. What is accepted and refused: Note [Slurm host lists].
// An error names the list and the (1-based) character where it goes wrong.
Result<std::vector<std::string>> ExpandSlurmNodeList(const std::string& list);

}  // namespace dpl::cluster
