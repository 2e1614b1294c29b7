// The process's limit of open files, raised where the launcher needs many.
#pragma once

namespace dpl {

// Raises the soft limit of open files to the hard one, as `ulimit -n` could: machine 0's store
// holds a connection per worker of the job, and a worker keeps every WebDataset shard of its
// splits open, so either passes the usual soft limit of 1024 at a thousand. Failures are ignored:
// the limit stays as it was.
void RaiseOpenFileLimit();

}  // namespace dpl
