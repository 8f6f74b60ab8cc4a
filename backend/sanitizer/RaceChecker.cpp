#include "backend/sanitizer/RaceChecker.h"

#include <algorithm>
#include <sstream>

namespace openreg::sanitizer {

size_t RaceChecker::stream_actor(StreamId s) {
  auto it = streams_.find(s);
  if (it != streams_.end()) return it->second;
  size_t idx = actors_.size();
  actors_.push_back({(s.id == kCollectiveLane ? std::string("the collective lane") : "stream " + std::to_string(s.id)) +
                         " on openreg:" + std::to_string(s.device),
                     {}});
  streams_.emplace(s, idx);
  return idx;
}

size_t RaceChecker::host_actor(uint64_t host) {
  auto it = hosts_.find(host);
  if (it != hosts_.end()) return it->second;
  size_t idx = actors_.size();
  actors_.push_back({"host thread " + std::to_string(host), {}, true});
  hosts_.emplace(host, idx);
  return idx;
}

void RaceChecker::join(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void RaceChecker::split_at(std::map<uint64_t, Segment>& segs, uint64_t at) {
  auto it = segs.upper_bound(at);
  if (it == segs.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment tail = it->second;
  it->second.end = at;
  segs.emplace(at, std::move(tail));
}

std::string TensorDesc::str() const {
  if (!text.empty() || dtype == nullptr) return text;
  std::string s = std::string(dtype) + "[";
  for (int i = 0; i < dim && i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  if (dim > kMaxDims) s += ", ...";
  return s + "]";
}

std::string RaceChecker::describe(const Stamp& s, const std::string& actor, AccessKind kind, int device) {
  const Record& r = *s.record;
  const std::string tensor = r.info.tensor.str();
  std::ostringstream os;
  os << (kind == AccessKind::Write ? "write" : "read") << " by " << r.info.op << " on " << actor << " of "
     << (tensor.empty() ? "memory" : tensor) << " bytes [0x" << std::hex << r.begin << ", 0x" << r.end << std::dec
     << (device == kPinnedHost ? ") of pinned host memory" : ") on openreg:" + std::to_string(device));
  if (r.info.context) os << "\n  issued at:\n" << r.info.context->describe();
  return os.str();
}

std::string RaceChecker::message(const Race& r) {
  return "stream race: " + describe(r.now, r.now_actor, r.now_kind, r.device) + "\nis not ordered after the earlier " +
         describe(r.prior, r.prior_actor, r.prior_kind, r.device) +
         (r.host ? "\n(synchronize the stream, an event recorded after the copy, or the device before the host uses "
                   "the pinned memory)"
                 : "\n(add an event wait, wait_stream or record_stream between them)");
}

void RaceChecker::access(uint64_t host, StreamId stream, int device, uint64_t begin, uint64_t end,
                         AccessKind kind, const AccessInfo& info) {
  const Range run{begin, end};
  access_runs(host, stream, device, &run, 1, kind, info);
}

void RaceChecker::access_runs(uint64_t host, StreamId stream, int device, const Range* runs, size_t n_runs,
                         AccessKind kind, const AccessInfo& info) {
  access_impl(host, &stream, device, runs, n_runs, kind, info);
}

void RaceChecker::host_access_runs(uint64_t host, int device, const Range* runs, size_t n_runs, AccessKind kind,
                                   const AccessInfo& info) {
  access_impl(host, nullptr, device, runs, n_runs, kind, info);
}

void RaceChecker::access_impl(uint64_t host, const StreamId* stream, int device, const Range* runs, size_t n_runs,
                              AccessKind kind, const AccessInfo& info) {
  if (n_runs == 0 || runs[0].begin >= runs[n_runs - 1].end) return;
  // Built before the lock: the only allocation of an access, shared by the segments it stamps.
  auto record = std::make_shared<const Record>(Record{info, runs[0].begin, runs[n_runs - 1].end});
  std::vector<Race> races;
  size_t slot = 0;  // Raise mode: the report's place, reserved under the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t h = host_actor(host);
    // The host's own access is stamped on the host's clock: the host ticks like a stream, and the streams
    // it issues to later join its clock, so its access happens before their later work.
    const size_t s = stream != nullptr ? stream_actor(*stream) : h;
    // The op's clock is the join of the stream's and the issuing host thread's, read in place: a raised
    // race must leave every clock as it was, and copying it on every access was most of its cost.
    const Clock& stream_clock = actors_[s].clock;
    const Clock& host_clock = actors_[h].clock;
    const uint64_t epoch = std::max(s < stream_clock.size() ? stream_clock[s] : 0,
                                    s < host_clock.size() ? host_clock[s] : 0) + 1;
    Stamp now{s, epoch, record};

    auto& segs = memory_[device];
    auto report = [&](const Stamp& prior, AccessKind prior_kind) {
      // One report per (earlier op, this op): a range split into segments names each pair once.
      for (const Race& r : races)
        if (r.prior.actor == prior.actor && r.prior.epoch == prior.epoch) return;
      races.push_back({prior, now, prior_kind, kind, actors_[prior.actor].name, actors_[s].name, device,
                       actors_[s].host || actors_[prior.actor].host});
    };
    for (size_t i = 0; i < n_runs && (mode_ == Mode::Record || races.empty()); ++i) {
      const Range& run = runs[i];
      auto it = segs.upper_bound(run.begin);
      if (it != segs.begin()) --it;  // the segment that may hold run.begin
      for (; it != segs.end() && it->first < run.end; ++it) {
        const Segment& seg = it->second;
        if (seg.end <= run.begin) continue;
        if (seg.has_write && !ordered(stream_clock, host_clock, seg.write)) report(seg.write, AccessKind::Write);
        if (kind == AccessKind::Write)
          for (const Stamp& r : seg.reads)
            if (!ordered(stream_clock, host_clock, r)) report(r, AccessKind::Read);
        if (mode_ == Mode::Raise && !races.empty()) break;  // the first race is the one raised
      }
    }
    if (mode_ == Mode::Raise && !races.empty()) {
      slot = reports_.size();
      reports_.push_back({""});  // counted now; the message is built below, outside the lock
    } else {
      Clock& clock = actors_[s].clock;
      if (s != h) join(clock, actors_[h].clock);
      if (clock.size() <= s) clock.resize(s + 1, 0);
      clock[s] = epoch;
      for (size_t i = 0; i < n_runs; ++i) stamp(segs, runs[i], kind, now);
    }
  }
  if (races.empty()) return;
  // Described outside the lock: an issue context may take the GIL, which another thread may hold
  // while it waits for the checker.
  if (mode_ == Mode::Raise) {
    std::string msg = message(races.front());
    {
      std::lock_guard<std::mutex> lock(mu_);
      reports_[slot].message = msg;
    }
    throw StreamRaceError(msg);
  }
  std::vector<RaceReport> built;
  for (const Race& r : races) built.push_back({message(r)});
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : built) reports_.push_back(std::move(r));
}

void RaceChecker::stamp(std::map<uint64_t, Segment>& segs, Range run, AccessKind kind, const Stamp& now) {
  split_at(segs, run.begin);
  split_at(segs, run.end);
  if (kind == AccessKind::Write) {
    // A write supersedes every byte's history in the run: one segment replaces them all, so a range
    // once fragmented (by strided views) is whole again after a dense write.
    auto first = segs.lower_bound(run.begin);
    auto last = segs.lower_bound(run.end);
    auto hint = segs.erase(first, last);
    segs.emplace_hint(hint, run.begin, Segment{run.end, true, now, {}});
    return;
  }
  // Fill gaps so every byte of the run lies in exactly one segment, then stamp them.
  for (uint64_t at = run.begin; at < run.end;) {
    auto it = segs.lower_bound(at);
    uint64_t next = (it == segs.end()) ? run.end : std::min(run.end, it->first);
    if (next > at) {
      segs.emplace_hint(it, at, Segment{next, false, {}, {}});
      at = next;
    } else {
      at = it->second.end;
    }
  }
  for (auto it = segs.lower_bound(run.begin); it != segs.end() && it->first < run.end; ++it) {
    auto& reads = it->second.reads;
    auto r = std::find_if(reads.begin(), reads.end(), [&](const Stamp& x) { return x.actor == now.actor; });
    if (r != reads.end()) *r = now; else reads.push_back(now);
  }
}

void RaceChecker::record_event(uint64_t event, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  events_[event] = actors_[stream_actor(stream)].clock;
}

void RaceChecker::join_actor(size_t into, size_t from) {
  if (into != from) join(actors_[into].clock, actors_[from].clock);
}

void RaceChecker::join_event(size_t into, uint64_t event) {
  auto it = events_.find(event);
  if (it != events_.end()) join(actors_[into].clock, it->second);  // never recorded: nothing to wait for
}

void RaceChecker::wait_event(uint64_t event, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  join_event(stream_actor(stream), event);
}

void RaceChecker::wait_stream(StreamId waiter, StreamId waited) {
  std::lock_guard<std::mutex> lock(mu_);
  join_actor(stream_actor(waiter), stream_actor(waited));  // indices: either may be resolved first
}

void RaceChecker::synchronize_stream(uint64_t host, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  join_actor(host_actor(host), stream_actor(stream));
}

void RaceChecker::synchronize_event(uint64_t host, uint64_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  join_event(host_actor(host), event);
}

void RaceChecker::synchronize_device(uint64_t host, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t h = host_actor(host);
  for (const auto& [id, idx] : streams_)
    if (id.device == device) join_actor(h, idx);
}

void RaceChecker::free_block(uint64_t host, int device, uint64_t begin, uint64_t end, StreamId alloc_stream,
                             const std::vector<StreamId>& recorded) {
  std::lock_guard<std::mutex> lock(mu_);
  Clock covered = actors_[host_actor(host)].clock;
  join(covered, Clock(actors_[stream_actor(alloc_stream)].clock));
  for (StreamId r : recorded) {
    Clock c = actors_[stream_actor(r)].clock;
    join(covered, c);
  }
  auto& segs = memory_[device];
  split_at(segs, begin);
  split_at(segs, end);
  for (auto it = segs.lower_bound(begin); it != segs.end() && it->first < end;) {
    Segment& seg = it->second;
    if (seg.has_write && ordered(covered, seg.write)) seg.has_write = false;
    std::erase_if(seg.reads, [&](const Stamp& r) { return ordered(covered, r); });
    if (!seg.has_write && seg.reads.empty()) it = segs.erase(it); else ++it;
  }
}

bool RaceChecker::has_unordered_for_host(uint64_t host, int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto h = hosts_.find(host);
  const auto mem = memory_.find(device);
  if (mem == memory_.end()) return false;
  static const Clock kNone;
  const Clock& clock = h == hosts_.end() ? kNone : actors_[h->second].clock;
  // Only streams' accesses: another host thread's own use is not something a synchronization orders.
  const auto pending = [&](const Stamp& st) { return !actors_[st.actor].host && !ordered(clock, st); };
  for (const auto& [begin, seg] : mem->second) {
    if (seg.has_write && pending(seg.write)) return true;
    for (const Stamp& r : seg.reads)
      if (pending(r)) return true;
  }
  return false;
}

void RaceChecker::forget(int device, uint64_t begin, uint64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  auto mem = memory_.find(device);
  if (mem == memory_.end()) return;
  auto& segs = mem->second;
  split_at(segs, begin);
  split_at(segs, end);
  segs.erase(segs.lower_bound(begin), segs.lower_bound(end));
}

std::vector<StreamId> RaceChecker::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StreamId> out;
  for (const auto& [id, idx] : streams_) out.push_back(id);
  return out;
}

std::vector<RaceReport> RaceChecker::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

size_t RaceChecker::report_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_.size();
}

}  // namespace openreg::sanitizer
