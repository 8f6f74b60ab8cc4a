#include "backend/sanitizer/Sanitizer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <c10/util/Exception.h>

#include "backend/OpenRegRuntime.h"
#include "backend/sanitizer/RaceChecker.h"

namespace openreg::sanitizer {

std::atomic<bool> g_enabled{false};

namespace {

constexpr const char* kVar = "OPENREG_SANITIZER";
constexpr int kReportExitCode = 66;  // report mode's exit status when races were found
constexpr int kUndecided = -1;
std::atomic<int> g_mode{kUndecided};
// Installed once by the Python binding before use; relaxed: read only while the checker is on, and
// the binding installs them when the module is imported, before any op of the program.
std::atomic<ContextGatherer> g_gatherer{nullptr};
std::atomic<RaceRaiser> g_raiser{nullptr};

Mode parse_env() {
  const char* v = std::getenv(kVar);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return Mode::kOff;
  if (std::strcmp(v, "1") == 0) return Mode::kRaise;
  if (std::strcmp(v, "report") == 0) return Mode::kReport;
  TORCH_CHECK_VALUE(false, kVar, "=", v, " is not valid: expected 0, 1 or report");
}

RaceChecker& checker() {
  // Leaked: hooks may run during static destruction (tensors freed at exit). Built on the first hook,
  // after enable() fixed the mode.
  static RaceChecker* c = new RaceChecker(g_mode.load() == static_cast<int>(Mode::kReport)
                                              ? RaceChecker::Mode::Record
                                              : RaceChecker::Mode::Raise);
  return *c;
}

void summary_at_exit() {
  const auto messages = checker().reports();
  if (messages.empty()) return;
  std::fprintf(stderr, "openreg sanitizer: %zu stream race(s) found\n", messages.size());
  for (const auto& r : messages) std::fprintf(stderr, "%s\n\n", r.message.c_str());
  std::fflush(stderr);
  std::_Exit(kReportExitCode);  // the program "succeeded" but raced: CI must fail
}

uint64_t host_id() {
  thread_local const uint64_t id = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return id;
}

StreamId id_of(const c10::Stream& s) { return {s.device_index(), s.id()}; }

// Translates the checker's error once, at the backend boundary.
template <class F>
void checked(F&& f) {
  try {
    f();
  } catch (const StreamRaceError& e) {
    const std::string msg = std::string("openreg sanitizer: ") + e.what();
    if (RaceRaiser raise = g_raiser.load(std::memory_order_relaxed)) raise(msg);
    TORCH_CHECK(false, msg);
  }
}

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

bool on_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.has_storage() && t.numel() > 0 &&
         t.const_data_ptr() != nullptr;
}

// The bytes a view spans: from its lowest to one past its highest element (negative strides never
// occur in torch; a strided view's holes are included, which can only over-report for two streams
// writing interleaved views of one tensor without ordering, itself a CUDA race by the memory model).
std::pair<uint64_t, uint64_t> span_of(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) > 1) last += (t.size(i) - 1) * std::abs(t.stride(i));
  const auto begin = reinterpret_cast<uint64_t>(t.const_data_ptr());
  return {begin, begin + static_cast<uint64_t>(last + 1) * t.element_size()};
}

// The allocator knows sim streams, the checker (device, id): the streams the checker has seen, by
// their sim streams. A stream the checker never saw has no history to cover, so a miss is harmless.
std::optional<StreamId> stream_of_sim(c10::DeviceIndex device, const void* sim) {
  static std::mutex mutex;  // taken before the checker's lock, never inside it
  static auto* known = new std::unordered_map<const void*, StreamId>;  // leaked: frees run at exit
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known->find(sim);
  if (it != known->end()) return it->second;
  for (const StreamId& id : checker().streams()) {
    if (id.device != device) continue;
    const c10::Stream s(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id.id);
    known->emplace(&c10::openreg::sim_stream(s), id);
  }
  it = known->find(sim);
  if (it != known->end()) return it->second;
  return std::nullopt;
}

}  // namespace

// One op's accesses, on one issue context (gathered once, only if the op touches device memory).
struct detail::OpAccesses {
  const char* name;
  std::shared_ptr<const IssueContext> context;
  bool gathered = false;

  // `stream`: the stream the access is ordered on (default: the current stream of t's device).
  void access(const at::Tensor& t, bool write, const c10::Stream* stream = nullptr) {
    if (!on_device(t)) return;
    if (!gathered) {
      gathered = true;
      if (ContextGatherer g = g_gatherer.load(std::memory_order_relaxed)) context = g();
    }
    const auto [begin, end] = span_of(t);
    const c10::Stream s = stream != nullptr ? *stream : c10::openreg::current_stream(t.device().index());
    checked([&] {
      checker().access(host_id(), id_of(s), t.device().index(), begin, end,
                       write ? AccessKind::Write : AccessKind::Read, {name, describe(t), context});
    });
  }
  void visit(const c10::IValue& v, bool write) {
    if (v.isTensor()) {
      access(v.toTensor(), write);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef())
        if (e.isTensor()) access(e.toTensor(), write);
    }
  }
};

bool enable(Mode m) {
  int expected = kUndecided;
  if (!g_mode.compare_exchange_strong(expected, static_cast<int>(m))) return expected == static_cast<int>(m);
  if (m == Mode::kReport) std::atexit(summary_at_exit);
  g_enabled.store(m != Mode::kOff, std::memory_order_relaxed);  // see Note [Sanitizer hooks]
  return true;
}

Mode mode() {
  const int m = g_mode.load();
  return m == kUndecided ? Mode::kOff : static_cast<Mode>(m);
}

std::size_t race_count() { return enabled() ? checker().report_count() : 0; }

std::vector<std::string> race_messages() {
  std::vector<std::string> out;
  if (!enabled()) return out;
  for (auto& r : checker().reports()) out.push_back(std::move(r.message));
  return out;
}

void set_context_gatherer(ContextGatherer gatherer) { g_gatherer.store(gatherer, std::memory_order_relaxed); }
void set_race_raiser(RaceRaiser raiser) { g_raiser.store(raiser, std::memory_order_relaxed); }

namespace {
// Parsed when the backend library loads: a bad value fails the import, naming the variable. "0" and
// unset leave the mode undecided, so torch.openreg.sanitizer.enable() can still turn it on.
const bool g_env_parsed = [] {
  const Mode m = parse_env();
  if (m != Mode::kOff) enable(m);
  return true;
}();
}  // namespace

namespace detail {

void op(const char* name, c10::ArrayRef<c10::IValue> args, const std::vector<char>& written) {
  OpAccesses op{name};
  // Reads first: an in-place op reads and writes its self, and a stream is ordered with itself.
  for (size_t i = 0; i < args.size(); ++i)
    if (i >= written.size() || !written[i]) op.visit(args[i], false);
  for (size_t i = 0; i < args.size() && i < written.size(); ++i)
    if (written[i]) op.visit(args[i], true);
}

void outputs(const char* name, c10::ArrayRef<c10::IValue> outs, const std::vector<char>& fresh) {
  OpAccesses op{name};
  for (size_t i = 0; i < outs.size() && i < fresh.size(); ++i)
    if (fresh[i]) op.visit(outs[i], true);
}

void kernel(const char* name, std::initializer_list<const at::Tensor*> reads,
            std::initializer_list<const at::Tensor*> writes) {
  OpAccesses op{name};
  for (const at::Tensor* t : reads) op.access(*t, false);
  for (const at::Tensor* t : writes) op.access(*t, true);
}

void copy(const at::Tensor& src, const at::Tensor& dst) {
  OpAccesses op{"aten::copy_"};
  const bool src_dev = on_device(src);
  const bool dst_dev = on_device(dst);
  if (src_dev && dst_dev && src.device() != dst.device()) {
    // As ops/Copy.cpp orders a peer copy: it runs on the source's current stream after the
    // destination's current stream reached this point, and the destination's stream waits for it.
    // Both devices' bytes are accessed on the source's stream.
    const c10::Stream from = c10::openreg::current_stream(src.device().index());
    const c10::Stream to = c10::openreg::current_stream(dst.device().index());
    checker().wait_stream(id_of(from), id_of(to));
    op.access(src, false, &from);
    op.access(dst, true, &from);
    checker().wait_stream(id_of(to), id_of(from));
    return;
  }
  op.access(src, false);
  op.access(dst, true);
}

void event_record(const void* e, const c10::Stream& s) {
  checker().record_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_wait(const void* e, const c10::Stream& s) {
  checker().wait_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_sync(const void* e) { checker().synchronize_event(host_id(), reinterpret_cast<uint64_t>(e)); }
void host_wait(const c10::Stream& s) { checker().synchronize_stream(host_id(), id_of(s)); }
void device_sync(c10::DeviceIndex d) { checker().synchronize_device(host_id(), d); }

void free_block(c10::DeviceIndex device, const void* ptr, std::size_t size, const void* alloc_sim_stream,
                const void* const* used_sim_streams, std::size_t n_used) {
  std::optional<StreamId> alloc = stream_of_sim(device, alloc_sim_stream);
  std::vector<StreamId> used;
  for (std::size_t i = 0; i < n_used; ++i)
    if (auto id = stream_of_sim(device, used_sim_streams[i])) used.push_back(*id);
  if (!alloc) alloc = StreamId{device, c10::openreg::default_stream(device).id()};
  const auto begin = reinterpret_cast<uint64_t>(ptr);
  checker().free_block(host_id(), device, begin, begin + size, *alloc, used);
}

}  // namespace detail
}  // namespace openreg::sanitizer
