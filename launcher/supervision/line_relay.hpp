// The output of child processes, a line at a time: the supervisor reads its workers' pipes (each
// line to the rank's log, the console and the root cause), the hostfile runner its machines'
// launchers' (each line to the console, prefixed with the host). One poll over every open pipe;
// a pipe's last line is handed on even without its newline once the pipe ends.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace dpl::supervision {

class LineRelay {
 public:
  // Takes one complete line, without its newline.
  using LineHandler = std::function<void(std::string line)>;

  LineRelay() = default;
  ~LineRelay();  // closes the pipes still open
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  // Relays what `fd`, a pipe's read end that the relay now owns, carries to `on_line`; returns
  // the source's number (0, 1, ... in the order added).
  size_t Add(int fd, LineHandler on_line);
  // Whether some source has not ended yet.
  bool AnyOpen() const;
  // Waits up to `timeout` for output on every open source and relays what came; a source whose
  // pipe ended is closed. False, at once, when no source is open.
  bool Pump(std::chrono::milliseconds timeout);
  // Relays what `source` wrote until now, without waiting (after its process exited, so that its
  // last lines are relayed before anything is said of its end).
  void Drain(size_t source);

 private:
  struct Source {
    int fd = -1;
    std::string partial_line;
    LineHandler on_line;
  };
  // One read of `source`: false when there was nothing to read or its pipe ended.
  bool Read(Source& source);

  std::vector<Source> sources_;
};

}  // namespace dpl::supervision
