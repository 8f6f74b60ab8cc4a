#include "backend/sanitizer/Sanitizer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "backend/OpenRegRuntime.h"
#include "backend/sanitizer/RaceChecker.h"

namespace openreg::sanitizer {

std::atomic<bool> g_enabled{false};

namespace {

constexpr const char* kVar = "OPENREG_SANITIZER";
// The error code of the torch.AcceleratorError a race raises, and the exit status of report mode.
constexpr int32_t kStreamRaceErrorCode = 66;
std::atomic<int> g_mode{-1};  // -1: not decided yet

int parse_env() {
  const char* v = std::getenv(kVar);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return 0;
  if (std::strcmp(v, "1") == 0) return 1;
  if (std::strcmp(v, "report") == 0) return 2;
  TORCH_CHECK(false, kVar, "=", v, " is not valid: expected 0, 1 or report");
}

RaceChecker& checker() {
  // Leaked: hooks may run during static destruction (tensors freed at exit).
  static RaceChecker* c = new RaceChecker(g_mode.load() == 2 ? RaceChecker::Mode::Record
                                                              : RaceChecker::Mode::Raise);
  return *c;
}

void summary_at_exit() {
  size_t n = checker().report_count();
  if (n == 0) return;
  std::fprintf(stderr, "openreg sanitizer: %zu stream race(s) found\n", n);
  for (const auto& r : checker().reports()) std::fprintf(stderr, "%s\n\n", r.message.c_str());
  std::fflush(stderr);
  std::_Exit(kStreamRaceErrorCode);
}

uint64_t host_id() { return std::hash<std::thread::id>{}(std::this_thread::get_id()); }

StreamId id_of(const c10::Stream& s) { return {s.device_index(), s.id()}; }

// Translate the checker's error once, at the backend boundary, into a torch error (RuntimeError).
template <class F>
void checked(F&& f) {
  try {
    f();
  } catch (const StreamRaceError& e) {
    // torch.AcceleratorError in Python (a RuntimeError, as torch.cuda's device errors are), with
    // error_code kStreamRaceErrorCode, so a test or CI step can tell a race from other failures.
    throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kStreamRaceErrorCode,
                                std::string("openreg sanitizer: ") + e.what());
  }
}

// Where an op was issued: the Python stack of the issuing thread, gathered cheaply when the op is
// issued (code objects and instruction offsets, as the memory history's stacks are) and turned into
// file:line text only if the op takes part in a race.
class PythonStack final : public IssueContext {
 public:
  explicit PythonStack(std::shared_ptr<torch::CapturedTraceback> tb) : tb_(std::move(tb)) {}

  std::string describe() const override {
    const torch::SymbolizedTracebacks s = torch::symbolize({tb_.get()});
    std::string text;
    if (s.tracebacks.empty()) return text;
    // Innermost frame first, as Python prints the innermost call last: print outermost first.
    const auto& frames = s.tracebacks[0];
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      const auto& f = s.all_frames[*it];
      text += "    " + f.filename + ":" + std::to_string(f.lineno) + " in " + f.funcname + "\n";
    }
    return text;
  }

 private:
  std::shared_ptr<torch::CapturedTraceback> tb_;
};

// The issuing thread's Python stack; null on threads that run no Python (C++ programs, device threads).
std::shared_ptr<const IssueContext> issue_context() {
  auto tb = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
  if (!tb) return nullptr;
  return std::make_shared<PythonStack>(std::move(tb));
}

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void access(const std::string& op, const at::Tensor& t, bool write,
            const std::shared_ptr<const IssueContext>& context = issue_context()) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1 || !t.has_storage()) return;
  if (t.numel() == 0 || t.data_ptr() == nullptr) return;
  // Extent of the view: from its first element to one past its furthest element.
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) > 1) last += (t.size(i) - 1) * std::abs(t.stride(i));
  auto begin = reinterpret_cast<uint64_t>(t.data_ptr());
  uint64_t end = begin + static_cast<uint64_t>(last + 1) * t.element_size();
  c10::Stream s = c10::openreg::current_stream(t.device().index());
  checked([&] {
    checker().access(host_id(), id_of(s), t.device().index(), begin, end,
                     write ? AccessKind::Write : AccessKind::Read, {op, describe(t), context});
  });
}

void visit(const std::string& op, const c10::IValue& v, bool write, const std::shared_ptr<const IssueContext>& context) {
  if (v.isTensor()) {
    access(op, v.toTensor(), write, context);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef())
      if (e.isTensor()) access(op, e.toTensor(), write, context);
  }
}

}  // namespace

bool enable(int m) {
  int expected = -1;
  if (!g_mode.compare_exchange_strong(expected, m)) return expected == m;
  if (m == 2) std::atexit(summary_at_exit);
  // Relaxed is enough: the mode above is published by the CAS, and hooks read it only via checker(),
  // whose static initialization synchronizes.
  g_enabled.store(m != 0, std::memory_order_relaxed);
  return true;
}

int mode() { return g_mode.load(); }

namespace {
// Parsed once when the backend library loads: a bad value fails the import, naming the variable.
const bool g_env_parsed = [] {
  int m = parse_env();
  if (m != 0) enable(m);
  return true;
}();
}  // namespace

namespace detail {

void op(const c10::OperatorHandle& o, c10::ArrayRef<c10::IValue> args, const std::vector<bool>& written) {
  const std::string name = o.schema().operator_name().name + (o.schema().overload_name().empty() ? "" : "." + o.schema().overload_name());
  const auto context = issue_context();  // one stack for all of the op's accesses
  // Reads first: an in-place op reads and writes its self, and its stream is ordered with itself.
  for (size_t i = 0; i < args.size(); ++i)
    if (i >= written.size() || !written[i]) visit(name, args[i], false, context);
  for (size_t i = 0; i < args.size() && i < written.size(); ++i)
    if (written[i]) visit(name, args[i], true, context);
}

void outputs(const c10::OperatorHandle& o, c10::ArrayRef<c10::IValue> outs) {
  const std::string name = o.schema().operator_name().name;
  const auto context = issue_context();
  for (const auto& v : outs) visit(name, v, true, context);
}

void tensor(const char* op, const at::Tensor& t, bool write) { access(op, t, write); }

void copy(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const auto context = issue_context();
  access("aten::copy_", src, /*write=*/false, context);
  access("aten::copy_", dst, /*write=*/true, context);
  // A blocking copy between host and device returns after the device stream reached it: the host
  // thread is then ordered after that stream's work (as after a stream synchronize).
  if (non_blocking) return;
  const at::Tensor& dev = src.device().is_cpu() ? dst : src;
  if (src.device().is_cpu() != dst.device().is_cpu())
    checker().synchronize_stream(host_id(), id_of(c10::openreg::current_stream(dev.device().index())));
}

void event_record(const void* e, const c10::Stream& s) {
  checker().record_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_wait(const void* e, const c10::Stream& s) {
  checker().wait_event(reinterpret_cast<uint64_t>(e), id_of(s));
}
void event_sync(const void* e) { checker().synchronize_event(host_id(), reinterpret_cast<uint64_t>(e)); }
void stream_sync(const c10::Stream& s) { checker().synchronize_stream(host_id(), id_of(s)); }
void device_sync(c10::DeviceIndex d) { checker().synchronize_device(host_id(), d); }

void block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                 const std::vector<std::int64_t>& recorded_streams) {
  std::vector<StreamId> recorded;
  recorded.reserve(recorded_streams.size());
  for (std::int64_t id : recorded_streams) recorded.push_back({device, id});
  const auto begin = reinterpret_cast<uint64_t>(ptr);
  checker().free_block(device, begin, begin + size, {device, alloc_stream}, recorded);
}

}  // namespace detail
}  // namespace openreg::sanitizer
