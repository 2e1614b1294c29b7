// A real waitpid status, from a child process that ends the way a test needs.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace dpl::testing {

// The waitpid status of a child that exits with `code`, or is killed by `signal_number` (not 0).
inline int StatusOfChild(int code, int signal_number = 0) {
  const pid_t child = fork();
  if (child == 0) {
    if (signal_number != 0) raise(signal_number);
    _exit(code);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

}  // namespace dpl::testing
