#include "backend/registration/Graph.h"

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Capture.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Generator.h"
#include "backend/runtime/Stream.h"
#include "backend/sanitizer/Sanitizer.h"

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// Note [Graphs on openreg]
// torch.accelerator.Graph and torch.openreg.OpenRegGraph (torch.cuda.CUDAGraph's counterpart) are this
// GraphImplInterface. What a CUDA graph is, and ours:
//  - capture_begin starts stream capture on the current stream (never the default stream, as PyTorch
//    requires of CUDA graphs), in the requested capture_error_mode ("default" is CUDA's "global"). The
//    rules of capture are Note [Stream capture] in runtime/Capture.cpp.
//  - Memory: allocations made for the capture's streams come from the graph's private pool (Note
//    [Private memory pools] in memory/BlockCache.cpp): a pool of its own ({capture id, 0}) or the one
//    passed in (another graph's pool() or graph_pool_handle()), shared. The captured kernels hold the
//    addresses, so a replay reads and writes the memory the capture allocated, and whatever the inputs
//    captured by address hold at the replay. The pool keeps that memory from other code until reset().
//  - Random numbers: a random op captured takes its seed from its generator's offset at the capture.
//    capture_end gives the generators their offsets back (the capture consumed nothing, as CUDA's
//    philox offsets are only "intragraph" during capture) and remembers how many offsets each used;
//    every replay then advances each generator by that many and gives each random kernel the seed of
//    its offset relative to where the replay started. So two replays draw different numbers, and
//    manual_seed followed by the same replays repeats them, as with CUDA graphs, whose generator state
//    is registered with the graph (here every openreg generator a captured op used is).
//  - instantiate (capture_end does it unless keep_graph) prepares the replay (capture::Executable);
//    replay enqueues every node on the current stream and the forked lanes' streams with the captured
//    dependencies, in one call that costs far less host time than issuing the ops. Launches of one
//    graph are ordered.
//  - reset waits for the last replay, then drops the nodes and the graph's use of its pool.

namespace c10::openreg {

namespace {

// What every writer of openreg's files refuses (Note [Writing the trace file] in
// python/torch_openreg/openreg/_trace.py): a destination that exists and is not a regular file (a
// symlink, dangling or not, which would write elsewhere; a FIFO, which would block; a device), checked
// without following links, and opened so that a link or FIFO put there meanwhile fails instead.
void write_regular_file(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    TORCH_CHECK(S_ISREG(st.st_mode), "openreg graph: debug_dump refuses ", path,
                S_ISLNK(st.st_mode) ? ": the destination is a symbolic link" : ": the destination is not a regular file");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  TORCH_CHECK(fd >= 0, "openreg graph: debug_dump cannot write ", path, ": ", std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ::ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      TORCH_CHECK(false, "openreg graph: debug_dump cannot write ", path, ": ", std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

std::atomic<std::uint64_t>& next_capture_id() {
  static std::atomic<std::uint64_t> id{1};
  return id;
}

capture::Mode mode_of(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal:
      return capture::Mode::kThreadLocal;
    case at::GraphCaptureMode::Relaxed:
      return capture::Mode::kRelaxed;
    case at::GraphCaptureMode::Default:
    case at::GraphCaptureMode::Global:
      break;
  }
  return capture::Mode::kGlobal;
}

class OpenRegGraph final : public at::GraphImplInterface {
 public:
  explicit OpenRegGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~OpenRegGraph() override {
    try {
      release();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor reports nothing
    }
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(!has_graph_ && !session_,
                "This OpenRegGraph instance already owns a captured graph. To capture a new graph, create a new "
                "instance or call reset() first.");
    const c10::DeviceIndex device = current_device();
    const OpenRegStream stream = current_openreg_stream(device);
    TORCH_CHECK(stream != default_openreg_stream(device),
                "openreg graphs must be captured on a non-default stream. (However, after capture, it's ok to "
                "replay them on the default stream.)");
    const std::uint64_t id = next_capture_id().fetch_add(1, std::memory_order_relaxed);
    const c10::MempoolId_t chosen = (pool.first != 0 || pool.second != 0) ? pool : c10::MempoolId_t{id, 0};
    // The capture first (it may refuse), then the pool route its streams' allocations take.
    auto session = capture::begin(stream, mode_of(mode), id);
    device_allocator().begin_allocate_to_pool(device, chosen, [id](::openreg::sim::Stream* s) {
      return capture::capture_id_of(s) == id;
    });
    id_ = id;
    device_ = device;
    pool_ = chosen;
    holds_pool_ = true;
    session_ = std::move(session);
  }

  void capture_end() override {
    TORCH_CHECK(session_, "openreg graph: capture_end without capture_begin");
    const OpenRegStream stream = current_openreg_stream(device_);
    std::optional<capture::Captured> captured;
    try {
      captured = capture::end(session_, stream);
    } catch (...) {
      if (capture::has_ended(*session_)) finish_capture(nullptr);  // ended, invalid: the graph owns nothing
      throw;
    }
    finish_capture(&*captured);
    if (captured_->nodes.empty()) {
      TORCH_WARN("The openreg graph is empty. This usually means that the graph was attempted to be captured on "
                 "the wrong device or stream.");
    }
    if (!keep_graph_) instantiate();
  }

  void instantiate() override {
    TORCH_CHECK(has_graph_, "openreg graph: instantiate needs a preceding successful capture");
    if (!executable_) executable_ = std::make_unique<capture::Executable>(*captured_, id_);
  }

  void replay() override {
    TORCH_CHECK(has_graph_, "Called OpenRegGraph::replay without a preceding successful capture.");
    instantiate();
    const OpenRegStream stream = current_openreg_stream(device_);
    capture::check_not_capturing(stream, "replaying a graph");
    std::lock_guard<std::mutex> lock(replay_mutex_);
    ::openreg::sanitizer::on_replay(replay_name_.c_str(), stream, captured_->accesses);
    std::map<const c10::GeneratorImpl*, std::uint64_t> base;  // each generator's offset at this replay
    for (auto& [generator, use] : generators_) {
      base[generator] = static_cast<OpenRegGeneratorImpl*>(use.generator.get())->advance(use.count);
    }
    executable_->launch(stream, [&](const capture::Node& node) {
      const c10::GeneratorImpl* g = node.seed->generator.get();
      const GeneratorUse& use = generators_.at(g);
      return static_cast<OpenRegGeneratorImpl*>(use.generator.get())->seed_at(base[g] + node.seed->offset - use.first);
    });
  }

  void reset() override {
    TORCH_CHECK(!session_, "openreg graph: reset() during a capture; end the capture first");
    release();
  }

  c10::MempoolId_t pool() const override {
    TORCH_CHECK(holds_pool_ || has_graph_, "Called OpenRegGraph::pool() without a preceding successful capture.");
    return pool_;
  }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    if (!debug_) {
      TORCH_WARN("openreg graphs debug not enabled, set with [graph].enable_debug_mode()");
      return;
    }
    TORCH_CHECK(has_graph_, "openreg graph: debug_dump needs a preceding successful capture");
    instantiate();
    write_regular_file(path, executable_->dot());
  }

 private:
  struct GeneratorUse {
    c10::intrusive_ptr<c10::GeneratorImpl> generator;
    std::uint64_t first;  // the first offset the capture took
    std::uint64_t count;  // offsets a replay takes
  };

  // The capture ended: routes end; with `captured`, the graph keeps it and gives the generators back
  // the offsets the capture took.
  void finish_capture(capture::Captured* captured) {
    device_allocator().end_allocate_to_pool(device_, pool_);
    session_.reset();
    if (captured == nullptr) {
      release();
      return;
    }
    captured_ = std::make_unique<capture::Captured>(std::move(*captured));
    replay_name_ = "openreg graph " + std::to_string(id_) + " replay";
    for (const capture::Node& node : captured_->nodes) {
      if (!node.seed) continue;
      const c10::GeneratorImpl* g = node.seed->generator.get();
      auto [it, fresh] = generators_.try_emplace(g, GeneratorUse{node.seed->generator, node.seed->offset, 1});
      if (!fresh) {
        it->second.first = std::min(it->second.first, node.seed->offset);
        it->second.count = std::max(it->second.first + it->second.count, node.seed->offset + 1) - it->second.first;
      }
    }
    for (auto& [g, use] : generators_) {
      std::lock_guard<std::mutex> lock(use.generator->mutex_);
      use.generator->set_offset(use.first);
    }
    has_graph_ = true;
  }

  // Waits for the last replay, then drops the graph and its use of the pool.
  void release() {
    if (executable_) executable_->wait_idle();
    executable_.reset();
    captured_.reset();
    generators_.clear();
    has_graph_ = false;
    if (holds_pool_) {
      device_allocator().release_pool(device_, pool_);
      holds_pool_ = false;
    }
  }

  const bool keep_graph_;
  bool debug_ = false;
  std::uint64_t id_ = 0;
  c10::DeviceIndex device_ = 0;
  c10::MempoolId_t pool_{0, 0};
  bool holds_pool_ = false;
  bool has_graph_ = false;
  std::shared_ptr<capture::Session> session_;
  std::unique_ptr<capture::Captured> captured_;
  std::unique_ptr<capture::Executable> executable_;  // refers to *captured_
  std::map<const c10::GeneratorImpl*, GeneratorUse> generators_;
  std::mutex replay_mutex_;
  std::string replay_name_;
};

}  // namespace

void register_graph_impl() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
    if (!at::GraphImplRegistry()->Has(key)) {
      at::GraphImplRegistry()->Register(key, [](const at::GraphImplArgs& args) -> std::unique_ptr<at::GraphImplInterface> {
        return std::make_unique<OpenRegGraph>(args);
      });
    }
  });
}

c10::MempoolId_t graph_pool_handle() {
  static std::atomic<std::uint64_t> next{1};
  return {0, next.fetch_add(1, std::memory_order_relaxed)};
}

}  // namespace c10::openreg
