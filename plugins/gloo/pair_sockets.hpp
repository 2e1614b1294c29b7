// The sockets of a gloo context's pairs, kept so that abort can end a collective that gloo would
// otherwise let wait until its timeout.
//
// Note [Aborting a gloo collective]: the gloo this plugin builds against (Debian's libgloo, a
// 2022 snapshot) has no way to end a running collective from another thread. A call waits either
// in a synchronous pair's blocking recv() or writev() (the pairwise exchange, Note [Synchronous
// pairs]) or on a buffer's condition variable until gloo's event-loop thread reads something
// (gloo's own algorithms on asynchronous pairs); only the timeout bounds both. Pair::close() is no
// way out: it takes the pair's mutex, which a synchronous recv() holds while it blocks, and it
// closes the descriptor, whose number the process may hand to a new socket while gloo's threads
// still use the old one. So once a mesh is connected the plugin keeps a duplicate (dup) of each
// pair's socket, and abort calls shutdown(SHUT_RDWR) on the duplicates. shutdown acts on the
// socket, which the duplicate shares with gloo's descriptor: a blocked recv() returns the end of
// the stream, a blocked writev() fails with EPIPE (the host ignores SIGPIPE, dpl/common.h), and
// the event loop reads the end of the stream; in each case gloo marks the pair failed, wakes every
// buffer waiting on it, and the collective throws. abort closes nothing; the duplicates are closed
// in destroy after every gloo object, so a descriptor abort shuts down is always still ours, and
// gloo's own descriptors are closed by gloo alone.
//
// Note [Finding gloo's sockets]: gloo keeps a pair's descriptor to itself (tcp::Pair's members
// are protected, and Debian's package cannot even compile tcp/pair.h: it lacks the
// gloo/common/memory.h that header includes). What gloo does say is the pair's address
// (Pair::address()), which it resets, once the pair is connected, to its socket's own local
// address. A connected socket's local address is unique on the machine while it lives (a
// listener is closed after its one accept), so the plugin looks through its process's
// descriptors (/proc/self/fd) for the connected TCP sockets whose local address is one of its
// pairs'. Each candidate is duplicated before it is looked at, and the duplicate is what is
// checked and kept: a descriptor that another thread closes and reuses meanwhile is never kept.
#pragma once

#include <gloo/context.h>

#include <vector>

namespace dpl::gloo_backend {

class PairSockets {
 public:
  PairSockets() = default;
  ~PairSockets();
  PairSockets(const PairSockets&) = delete;
  PairSockets& operator=(const PairSockets&) = delete;

  // Keeps a duplicate of the socket of every pair of `context`, whose mesh a tcp device has just
  // connected (Note [Finding gloo's sockets]). Returns the peers whose socket it did not find
  // (none unless gloo changed how it reports a pair's address).
  std::vector<int> Add(gloo::Context& context);
  // From any thread, any number of times: shuts every kept socket down in both directions.
  void ShutDown() const;

 private:
  std::vector<int> fds_;  // filled while the instance is created, read-only afterwards
};

}  // namespace dpl::gloo_backend
