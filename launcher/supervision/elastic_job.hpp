// An elastic job (--num-machines MIN:MAX): attempts on the machines that are there, restarted
// with the machines left when one fails or vanishes (Note [Elastic membership] in
// rendezvous/membership.cpp, Note [Attempt coordinator] in rendezvous/liveness.cpp).
#pragma once

#include "cli/options.hpp"
#include "supervision/attempt.hpp"

namespace dpl::supervision {

// Runs the job's attempts on this machine until the job ends; the launcher's exit code.
int RunElasticJob(const cli::Options& options, Joined& joined);

}  // namespace dpl::supervision
