// Where a file that a flag names (--export, --export-best, --trace) is written.
//
// Note [Files a flag names]: dpl writes such a file whole under a temporary name beside it and
// renames it into place, so nobody ever reads half a model or half a trace. A rename replaces
// whatever the name was: a symbolic link would become a regular file, and a device or a named
// pipe would be replaced too (run as root, `--export /dev/null` replaced /dev/null itself, and
// `--export /dev/full` "succeeded"). So the path is resolved before it is written: a symbolic
// link is followed to the file it names (the link stays and names the new file), and a path
// that is anything but a regular file (a folder, a device, a pipe, a socket) is refused, saying
// what it is.
#pragma once

#include <string>

#include "common/status.hpp"

namespace dpl {

// The path to write for a flag's `path`: the path itself, or the file its symbolic links lead to
// (which need not exist yet); an error naming the path and what it is when that is not a regular
// file, or when the links go round. Callers add the flag as the error's context.
Result<std::string> OutputFileOf(const std::string& path);

}  // namespace dpl
