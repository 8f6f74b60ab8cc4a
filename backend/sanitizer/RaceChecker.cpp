#include "backend/sanitizer/RaceChecker.h"

#include <algorithm>
#include <sstream>

namespace openreg::sanitizer {

size_t RaceChecker::stream_actor(StreamId s) {
  auto it = streams_.find(s);
  if (it != streams_.end()) return it->second;
  size_t idx = actors_.size();
  actors_.push_back({"stream " + std::to_string(s.id) + " on openreg:" + std::to_string(s.device), {}});
  streams_.emplace(s, idx);
  return idx;
}

size_t RaceChecker::host_actor(uint64_t host) {
  auto it = hosts_.find(host);
  if (it != hosts_.end()) return it->second;
  size_t idx = actors_.size();
  actors_.push_back({"host thread " + std::to_string(host), {}});
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

std::string RaceChecker::describe(const Stamp& s, const std::string& actor, AccessKind kind, int device) {
  std::ostringstream os;
  os << (kind == AccessKind::Write ? "write" : "read") << " by " << s.info.op << " on " << actor << " of "
     << (s.info.tensor.empty() ? "memory" : s.info.tensor) << " bytes [0x" << std::hex << s.begin << ", 0x"
     << s.end << std::dec << ") on openreg:" << device;
  if (s.info.context) os << "\n  issued at:\n" << s.info.context->describe();
  return os.str();
}

std::string RaceChecker::message(const Race& r) {
  return "stream race: " + describe(r.now, r.now_actor, r.now_kind, r.device) + "\nis not ordered after the earlier " +
         describe(r.prior, r.prior_actor, r.prior_kind, r.device) +
         "\n(add an event wait, wait_stream or record_stream between them)";
}

void RaceChecker::access(uint64_t host, StreamId stream, int device, uint64_t begin, uint64_t end,
                         AccessKind kind, const AccessInfo& info) {
  if (begin >= end) return;
  std::vector<Race> races;
  size_t slot = 0;  // Raise mode: the report's place, reserved under the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t h = host_actor(host);
    const size_t s = stream_actor(stream);
    // A copy, not a reference: a raised race must leave the stream's clock as it was.
    Clock clock = actors_[s].clock;
    join(clock, actors_[h].clock);
    if (clock.size() <= s) clock.resize(s + 1, 0);
    Stamp now{s, ++clock[s], info, begin, end};

    auto& segs = memory_[device];
    split_at(segs, begin);
    split_at(segs, end);
    auto report = [&](const Stamp& prior, AccessKind prior_kind) {
      races.push_back({prior, now, prior_kind, kind, actors_[prior.actor].name, actors_[s].name, device});
    };
    for (auto it = segs.lower_bound(begin); it != segs.end() && it->first < end; ++it) {
      const Segment& seg = it->second;
      if (seg.has_write && !ordered(clock, seg.write)) report(seg.write, AccessKind::Write);
      if (kind == AccessKind::Write)
        for (const Stamp& r : seg.reads)
          if (!ordered(clock, r)) report(r, AccessKind::Read);
      if (mode_ == Mode::Raise && !races.empty()) break;  // the first race is the one raised
    }
    // One report per (earlier op, this op): a range split into segments names each pair once.
    std::erase_if(races, [&, seen = std::vector<std::pair<size_t, uint64_t>>()](const Race& r) mutable {
      auto key = std::make_pair(r.prior.actor, r.prior.epoch);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) return true;
      seen.push_back(key);
      return false;
    });
    if (mode_ == Mode::Raise && !races.empty()) {
      slot = reports_.size();
      reports_.push_back({""});  // counted now; the message is built below, outside the lock
    } else {
      actors_[s].clock = std::move(clock);
      // Fill gaps so every byte of [begin, end) lies in exactly one segment, then stamp them.
      for (uint64_t at = begin; at < end;) {
        auto it = segs.lower_bound(at);
        uint64_t next = (it == segs.end()) ? end : std::min(end, it->first);
        if (next > at) {
          segs.emplace(at, Segment{next, false, {}, {}});
          at = next;
        } else {
          at = it->second.end;
        }
      }
      for (auto it = segs.lower_bound(begin); it != segs.end() && it->first < end; ++it) {
        Segment& seg = it->second;
        if (kind == AccessKind::Write) {
          seg.has_write = true;
          seg.write = now;
          seg.reads.clear();
        } else {
          auto r = std::find_if(seg.reads.begin(), seg.reads.end(), [&](const Stamp& x) { return x.actor == s; });
          if (r != seg.reads.end()) *r = now; else seg.reads.push_back(now);
        }
      }
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

void RaceChecker::record_event(uint64_t event, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  events_[event] = actors_[stream_actor(stream)].clock;
}

void RaceChecker::wait_event(uint64_t event, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) return;
  join(actors_[stream_actor(stream)].clock, it->second);
}

void RaceChecker::wait_stream(StreamId waiter, StreamId waited) {
  std::lock_guard<std::mutex> lock(mu_);
  Clock snapshot = actors_[stream_actor(waited)].clock;
  join(actors_[stream_actor(waiter)].clock, snapshot);
}

void RaceChecker::synchronize_stream(uint64_t host, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Clock snapshot = actors_[stream_actor(stream)].clock;
  join(actors_[host_actor(host)].clock, snapshot);
}

void RaceChecker::synchronize_event(uint64_t host, uint64_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) return;
  join(actors_[host_actor(host)].clock, it->second);
}

void RaceChecker::synchronize_device(uint64_t host, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t h = host_actor(host);
  for (const auto& [id, idx] : streams_)
    if (id.device == device) {
      Clock snapshot = actors_[idx].clock;
      join(actors_[h].clock, snapshot);
    }
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
