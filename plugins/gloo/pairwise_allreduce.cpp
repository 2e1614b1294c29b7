#include "pairwise_allreduce.hpp"

#include <algorithm>
#include <fstream>
#include <utility>

#include "dpl/support/reduce.hpp"

namespace dpl::gloo_backend {
namespace {

// Note [Priming send buffers]: gloo sizes a socket's send buffer from the first message that
// outgrows it and never again while later messages fit. On loopback a buffer of about one
// segment stalls a synchronous exchange on a delayed acknowledgement (docs/bandwidth.md, "Third
// run"), so each partner's first message is kPrimingBytes, which leaves every send buffer at
// several segments.
constexpr size_t kPrimingBytes = size_t{1} << 20;

// Note [Writing ahead]: taking turns (Note [Synchronous pairs]) leaves one direction of a pair idle
// while the other carries a message. A blocking write returns once its bytes are queued in the
// send buffer, so both ends may write at once when the kernel is sure to take the whole write:
// messages go in chunks of kChunkBytes, chunk i of each direction in step, and a rank writes its
// chunk before reading the peer's when a chunk fits its write-ahead budget, a quarter of the send
// buffer that priming left. At most our last two or three chunks then wait in the buffer. The
// lower rank always writes first; a higher rank without the budget reads first, which keeps the
// order of Note [Synchronous pairs]. Both sides chunk alike; the budget only decides the order.
constexpr size_t kChunkBytes = size_t{128} << 10;
constexpr size_t kPreambleBytes = 48;  // gloo's tcp::Op preamble before each message

size_t WriteAheadBytes(size_t priming_bytes) {
  std::ifstream file("/proc/sys/net/core/wmem_max");
  size_t wmem_max = 0;
  if (!(file >> wmem_max)) return 0;  // unknown: always take turns
  return 2 * std::min(priming_bytes, wmem_max) / 4;
}

size_t ChunkCount(size_t bytes) {
  return (bytes + kChunkBytes - 1) / kChunkBytes;
}

}  // namespace

PairwiseAllreduce::PairwiseAllreduce(std::shared_ptr<gloo::Context> context,
                                     size_t write_ahead_bytes, size_t count,
                                     support::ElementType type, size_t element_size,
                                     dpl_reduce_op op)
    : context_(std::move(context)),
      write_ahead_bytes_(write_ahead_bytes),
      count_(count),
      type_(type),
      element_size_(element_size),
      op_(op),
      scratch_((count + 1) / 2 * element_size),
      // Taken once, in the same order on every rank, so re-binding buffers to new memory later
      // never moves a slot.
      reduce_slot_(context_->nextSlot()),
      gather_slot_(context_->nextSlot()),
      fold_slot_(context_->nextSlot()),
      schedule_(ScheduleOf(context_->rank, context_->size)) {
  for (int partner : schedule_.partners) {
    partners_.emplace_back();
    partners_.back().rank = partner;
  }
  // A rank that folds its data into a partner's owns no range and needs no scratch; the partner
  // it folds into takes the whole tensor before halving.
  if (schedule_.folded) scratch_.clear();
  if (schedule_.fold_partner >= 0 && !schedule_.folded) fold_scratch_.resize(count_ * element_size);
}

PairwiseAllreduce::Schedule PairwiseAllreduce::ScheduleOf(int rank, int size) {
  Schedule schedule;
  while (schedule.virtual_size * 2 <= size) schedule.virtual_size *= 2;
  const int extra = size - schedule.virtual_size;
  if (rank < 2 * extra) {
    schedule.fold_partner = rank ^ 1;
    schedule.folded = rank % 2 == 1;
    schedule.virtual_rank = rank / 2;
  } else {
    schedule.virtual_rank = rank - extra;
  }
  if (schedule.folded) return schedule;
  auto real_rank = [&](int virtual_rank) {
    return virtual_rank < extra ? 2 * virtual_rank : virtual_rank + extra;
  };
  for (int mask = schedule.virtual_size / 2; mask >= 1; mask /= 2) {
    schedule.partners.push_back(real_rank(schedule.virtual_rank ^ mask));
  }
  return schedule;
}

size_t PairwiseAllreduce::PrepareMesh(gloo::Context& context) {
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer != context.rank) context.getPair(peer)->setSync(true, /*busyPoll=*/false);
  }
  std::vector<char> outgoing(kPrimingBytes), incoming(kPrimingBytes);
  const int slot = context.nextSlot();
  const Schedule schedule = ScheduleOf(context.rank, context.size);
  std::vector<int> peers = schedule.partners;  // in schedule order: the fold comes first
  if (schedule.fold_partner >= 0) peers.insert(peers.begin(), schedule.fold_partner);
  for (const int peer : peers) {
    auto& pair = context.getPair(peer);
    auto out = pair->createSendBuffer(slot, outgoing.data(), outgoing.size());
    auto in = pair->createRecvBuffer(slot, incoming.data(), incoming.size());
    auto send = [&] {
      out->send(0, kPrimingBytes, 0);
      out->waitSend();
    };
    if (context.rank < peer) {  // the same order as every exchange (Note [Synchronous pairs])
      send();
      in->waitRecv();
    } else {
      in->waitRecv();
      send();
    }
  }
  return WriteAheadBytes(kPrimingBytes + kPreambleBytes);
}

void PairwiseAllreduce::Run(char* data) {
  if (data != bound_) Bind(data);
  const Range all{0, count_};
  const Range none{0, 0};
  if (schedule_.folded) {  // Note [Folding to a power of two]
    Exchange(schedule_.fold_partner, fold_.out.get(), all, 0, nullptr, 0);
    Exchange(schedule_.fold_partner, nullptr, none, 0, fold_.in.get(), count_);
    return;
  }
  if (schedule_.fold_partner >= 0) {
    Exchange(schedule_.fold_partner, nullptr, none, 0, fold_.in.get(), count_);
    support::ReduceInto(type_, op_, data, fold_scratch_.data(), count_);
  }
  const std::vector<Range> ranges = Halve(data);
  // Allgather: the same partners in reverse; each sends its reduced range into the other's data
  // at the same offset, so both end with the parent range.
  for (size_t step = partners_.size(); step-- > 0;) {
    const Range mine = ranges[step + 1];
    const size_t theirs = ranges[step].size - mine.size;  // the other half of the parent
    Partner& partner = partners_[step];
    Exchange(partner.rank, partner.gather_out.get(), mine, mine.begin * element_size_,
             partner.gather_in.get(), theirs);
  }
  if (schedule_.fold_partner >= 0) {
    Exchange(schedule_.fold_partner, fold_.out.get(), all, 0, nullptr, 0);
  }
}

// The same answer on every rank: a rank outside the folds cannot tell that others fold.
bool PairwiseAllreduce::ScattersEvenly() const {
  const size_t world = static_cast<size_t>(context_->size);
  return (world & (world - 1)) == 0 && count_ % world == 0;
}

// With a power-of-two world and count = world * c, every halving splits exactly at multiples of
// c, and the range virtual rank v keeps last is [v * c, (v + 1) * c): its slice.
void PairwiseAllreduce::ReduceScatter(char* data) {
  if (data != bound_) Bind(data);
  Halve(data);
}

// Reduce-scatter: halve the range each step, keeping the half this rank's bit selects.
std::vector<PairwiseAllreduce::Range> PairwiseAllreduce::Halve(char* data) {
  std::vector<Range> ranges{Range{0, count_}};
  for (size_t step = 0; step < partners_.size(); ++step) {
    const Range range = ranges.back();
    const Range lower{range.begin, range.size / 2};
    const Range upper{range.begin + lower.size, range.size - lower.size};
    const bool keep_upper = (schedule_.virtual_rank & (schedule_.virtual_size / 2 >> step)) != 0;
    const Range keep = keep_upper ? upper : lower;
    const Range give = keep_upper ? lower : upper;
    Partner& partner = partners_[step];
    Exchange(partner.rank, partner.reduce_out.get(), give, 0, partner.scratch_in.get(), keep.size);
    if (keep.size > 0) {
      support::ReduceInto(type_, op_, data + keep.begin * element_size_, scratch_.data(),
                          keep.size);
    }
    ranges.push_back(keep);
  }
  return ranges;
}

// gloo buffers name their memory when created, and the caller's tensor may move between calls.
// Every buffer is dropped before any is made: a gloo buffer, send or receive, unregisters its SLOT
// from the pair when destroyed, which would take a new receive buffer of that slot with it.
void PairwiseAllreduce::Bind(char* data) {
  const size_t bytes = count_ * element_size_;
  for (Partner& partner : partners_) {
    partner.reduce_out.reset();
    partner.gather_out.reset();
    partner.scratch_in.reset();
    partner.gather_in.reset();
  }
  fold_.out.reset();
  fold_.in.reset();
  for (Partner& partner : partners_) {
    auto& pair = context_->getPair(partner.rank);
    partner.reduce_out = pair->createSendBuffer(reduce_slot_, data, bytes);
    partner.gather_out = pair->createSendBuffer(gather_slot_, data, bytes);
    partner.scratch_in = pair->createRecvBuffer(reduce_slot_, scratch_.data(), scratch_.size());
    partner.gather_in = pair->createRecvBuffer(gather_slot_, data, bytes);
  }
  if (schedule_.fold_partner >= 0) {
    // The folded rank writes its data into the partner's fold scratch and reads the result
    // straight into its data; the partner reads into the scratch and writes from its data.
    auto& pair = context_->getPair(schedule_.fold_partner);
    fold_.out = pair->createSendBuffer(fold_slot_, data, bytes);
    fold_.in = schedule_.folded ? pair->createRecvBuffer(fold_slot_, data, bytes)
                                : pair->createRecvBuffer(fold_slot_, fold_scratch_.data(), bytes);
  }
  bound_ = data;
}

// One step with one partner: send `out_range` of our data (to `remote_offset` bytes into the
// partner's buffer), receive `in_elements` into `in`, chunk by chunk (Note [Writing ahead]).
void PairwiseAllreduce::Exchange(int partner, gloo::transport::Buffer* out, Range out_range,
                                 size_t remote_offset, gloo::transport::Buffer* in,
                                 size_t in_elements) {
  const size_t out_bytes = out_range.size * element_size_;
  const size_t out_chunks = ChunkCount(out_bytes);
  const size_t in_chunks = ChunkCount(in_elements * element_size_);
  const bool write_first = context_->rank < partner || kChunkBytes <= write_ahead_bytes_;
  for (size_t chunk = 0; chunk < std::max(out_chunks, in_chunks); ++chunk) {
    auto send = [&] {
      if (chunk >= out_chunks) return;
      const size_t offset = chunk * kChunkBytes;
      out->send(out_range.begin * element_size_ + offset, std::min(kChunkBytes, out_bytes - offset),
                remote_offset + offset);
      out->waitSend();
    };
    auto receive = [&] {
      if (chunk < in_chunks) in->waitRecv();
    };
    if (write_first) {
      send();
      receive();
    } else {
      receive();
      send();
    }
  }
}

}  // namespace dpl::gloo_backend
