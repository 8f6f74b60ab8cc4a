#include "backend/engine/ShapePass.h"
#include "backend/engine/Launch.h"

#include "backend/engine/ExecuteThreads.h"

#include "backend/engine/Arguments.h"
#include "backend/engine/Outputs.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/stack.h>

#include <exception>
#include <optional>
#include <vector>

namespace at::openreg {
namespace {

// Note [Meta kernels written in Python]
// The shape pass runs an op's Meta kernel, and for some ops that kernel is a Python function (PyTorch's
// references where a C++ meta kernel is missing or symbolic-shape unfriendly: normal_, mul_.Scalar,
// exponential_, ...). The first such call imports sympy and torch._dynamo (0.3 s, 1 s on a loaded
// machine), a cost a CUDA program never pays, and every such call takes the GIL from a C++ caller.
// For these ops the shape pass runs the CPU kernel instead, on zeroed host scratch of the arguments'
// geometry (AliasTarget::kCpuScratch): CPU's results have the geometry the device's CPU kernel will
// give, which is what the meta kernels imitate. Random ops draw from a private CPU generator, so no
// generator moves; random ops without a Generator argument would draw from CPU's global one and keep
// the Meta kernel. Scratch has no size bound: a Python Meta kernel on a large storage imported
// torch._dynamo and sympy just the same (a 1 s stall at the first large op, which also hid races from
// schedule fuzzing), and large scratch is lazily zeroed mappings (ZeroedScratchAllocator in
// Arguments.cpp), so it costs the CPU kernel's run once per signature, not a copy of the storage.
// A CPU kernel that refuses zeros (a division by an integer zero, an index check) hands over to the
// Meta kernel: never another answer, at worst the old cost. The outcome is cached per signature
// either way.

bool shape_pass_on_cpu(const OpPlan& plan) {
  // Timing-only execution (Note [Timing-only execution] in sim/src/stream.cpp) keeps the Meta kernel:
  // the CPU kernel on scratch runs at the call's sizes (a full-size bf16 matmul: minutes), and a
  // program in that mode runs no kernel at all.
  return (plan.meta_in_python || plan.checks_on_cpu) && !(plan.random && plan.generator_arg < 0) &&
         !timing_only_on();
}

// Note [out= dtypes checked at the call]
// CPU's out= kernels refuse an out= tensor of a dtype they cannot write (tril.out into a float tensor
// for a bool input: "Expected out tensor to have dtype bool"; sort, index_select, cumsum, amax, ...)
// at the call, and so does CUDA; their Meta kernels check only shapes, so openreg raised these errors
// at the next synchronize. So a call that writes an out= tensor of a dtype other than its first
// input's takes its shape pass from CPU's kernel on scratch (an argmax into int64 as well: the pass is
// cached per signature, so it runs once per dtype combination, not per call). If CPU refuses, the call
// takes the sync path, which runs CPU's kernel on the real data: CPU's error at the call, or, should
// zeros alone have provoked the refusal, CPU's result.
bool out_dtype_differs(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  if (!plan.writes) return false;
  std::optional<c10::ScalarType> input;
  for (size_t i = 0; i < args.size() && !input; ++i) {
    if (plan.args[i].written) continue;
    for_each_tensor(args[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition) {
      if (t.defined() && !input) input = t.scalar_type();
    });
  }
  if (!input) return false;
  bool differs = false;
  for (size_t i = plan.inplace ? 1 : 0; i < args.size(); ++i) {
    if (!plan.args[i].written) continue;
    for_each_tensor(args[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition) {
      differs = differs || (t.defined() && t.scalar_type() != *input);
    });
  }
  return differs;
}

//! Whether an out= argument (a written one other than an in-place op's self) shares memory with an
//! argument the op reads (Note [In-place ops keep self's shape]).
bool writes_into_an_input(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  if (!plan.writes) return false;
  for (size_t i = plan.inplace ? 1 : 0; i < args.size(); ++i) {
    if (!plan.args[i].written || !args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& out = args[i].toTensor();
    for (size_t j = 0; j < args.size(); ++j) {
      if (j != i && !plan.args[j].written && args[j].isTensor() && args[j].toTensor().defined() &&
          args[j].toTensor().is_alias_of(out)) {
        return true;
      }
    }
  }
  return false;
}

//! Runs `op` with dispatch key `key` on the stand-ins `conv` makes of `args`; they stay in `standins`,
//! the results in `results`. False when the kernel raised.
bool run_on_standins(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
                     AliasConverter& conv, c10::DispatchKey key, std::vector<c10::IValue>* standins,
                     torch::jit::Stack* results, bool rethrow = false) {
  const size_t n = plan.args.size();
  const c10::DeviceType type = key == c10::DispatchKey::Meta ? c10::kMeta : c10::kCPU;
  c10::IValue generator;
  if (key == c10::DispatchKey::CPU && plan.generator_arg >= 0) {
    thread_local const at::Generator scratch_generator = at::make_generator<at::CPUGeneratorImpl>(0);
    generator = scratch_generator;
  }
  standins->clear();
  standins->reserve(n);
  for (size_t i = 0; i < n; ++i) standins->push_back(convert_arg(args[i], plan.args[i], conv, generator, type));
  *results = torch::jit::Stack(*standins);
  std::optional<SerialHostKernelScope> serial;
  if (key == c10::DispatchKey::CPU) serial.emplace();
  try {
    op.redispatchBoxed(c10::DispatchKeySet(key), results);
  } catch (const std::exception&) {
    if (rethrow) throw;
    return false;
  }
  return true;
}

// Note [Warnings of a cached shape pass]
// CPU and CUDA raise an op's argument warnings on the host at every call ("std(): degrees of freedom is
// <= 0", every time the program asks for it). On openreg those warnings come from the shape pass, the
// only place the op's host-side code runs on the calling thread (the device's run of the CPU kernel
// raises them again on a device thread, where they are dropped as the duplicates they are). A cached
// pass does not run, so its warnings came at the first call of each signature only. So a pass that
// warned is not cached: each such call runs it again, and it warns as CPU's kernel does, every time for
// a TORCH_WARN and once per process for a TORCH_WARN_ONCE (which a replay of recorded warnings would
// repeat). Warnings are rare, so the cost is the pass on the few calls that warn.
class NoticingWarnings final : public c10::WarningHandler {
 public:
  NoticingWarnings() : next_(c10::WarningUtils::get_warning_handler()) {}
  void process(const c10::Warning& warning) override {
    warned_ = true;
    next_->process(warning);
  }
  bool warned() const { return warned_; }

 private:
  c10::WarningHandler* next_;
  bool warned_ = false;
};

//! Runs the shape pass (Meta kernel, or CPU on scratch: Note [Meta kernels written in Python]) on
//! stand-ins of `args`; nullopt when it fails. Resizes out= arguments the way the pass resized their
//! stand-ins (`resized` tells whether any was; `warned`, whether the pass raised a warning).
std::optional<MetaOutcome> run_shape_pass(const c10::OperatorHandle& op, const OpPlan& plan,
                                    c10::ArrayRef<c10::IValue> args, bool* resized, bool* warned) {
  NoticingWarnings noticing;
  c10::WarningUtils::WarningHandlerGuard warning_guard(&noticing);
  std::vector<c10::IValue> standins;
  torch::jit::Stack results;
  bool ran = false;
  // Note [out= dtypes checked at the call] and Note [In-place ops keep self's shape]; random ops
  // without a Generator argument keep the Meta kernel (CPU's would draw from CPU's global generator), as
  // timing-only execution does.
  const bool cpu_decides = !(plan.random && plan.generator_arg < 0) && !timing_only_on() &&
                           (out_dtype_differs(plan, args) || writes_into_an_input(plan, args));
  if (shape_pass_on_cpu(plan) || cpu_decides) {
    // Note [Host-side checks at the call]
    // CUDA checks some ops' arguments on the host before it launches anything (index_put's indices
    // must broadcast together and the value to the indexing result; masked_scatter's mask and self
    // must broadcast), where their Meta kernels check nothing, so openreg reported these errors at the
    // next synchronize, from the device thread. For these ops (OpPolicy.h, kChecksOnCpu) CPU's kernel
    // runs here on zeroed scratch and its error is the call's error, raised now. Zeros are valid data
    // for those checks (index 0 is in range; an all-false mask selects nothing); masks, whose data
    // decides the shapes, take the sync path instead (takes_sync_path).
    AliasConverter scratch(AliasTarget::kCpuScratch);
    ran = run_on_standins(op, plan, args, scratch, c10::DispatchKey::CPU, &standins, &results,
                          /*rethrow=*/plan.checks_on_cpu);
    if (!ran && cpu_decides) return std::nullopt;  // the sync path: CPU decides on the real data
  }
  if (!ran) {
    AliasConverter meta(AliasTarget::kMeta);
    // Failing here, the sync path reruns it on CPU: the caller gets CPU's result or CPU's error.
    if (!run_on_standins(op, plan, args, meta, c10::DispatchKey::Meta, &standins, &results)) return std::nullopt;
  }
  TORCH_INTERNAL_ASSERT(results.size() == plan.returns.size(), plan.name, ": the shape pass returned ",
                        results.size(), " values for ", plan.returns.size(), " returns");
  // Note [In-place ops keep self's shape]
  // An in-place op may not resize `self`, nor an out= op an output that is also one of its inputs
  // (`ldexp_` is `ldexp.out(self, other, out=self)`): CPU and CUDA raise TensorIterator's error at the
  // call when the broadcast shape differs. Some Meta kernels (floor_divide_'s, and out= kernels
  // whose output aliases an input) resize instead, with the out= resize warning, and the device would
  // follow them. The pass's stand-ins tell: a written argument whose shape changed and that is self
  // of an in-place op gets CPU's error here, before anything is queued. An out= argument that is also
  // read is TensorIterator's error on CPU (ldexp_ is ldexp.out(self, other, out=self)), but other
  // kernels resize it (mv.out and matmul's out= reach addmv.out with out= as its self, which CPU
  // resizes with the warning): for such calls CPU's kernel on scratch is the shape pass
  // (writes_into_an_input), and its error or resize is CPU's.
  if (plan.inplace && args[0].isTensor() && standins[0].isTensor()) {
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& like = standins[0].toTensor();
    TORCH_CHECK(!self.defined() || !like.defined() || self.sizes() == like.sizes(), "output with shape ",
                self.sizes(), " doesn't match the broadcast shape ", like.sizes());
  }
  *resized = adopt_written_geometry(plan, args, standins);
  *warned = noticing.warned();

  MetaOutcome outcome;
  outcome.returns.resize(plan.returns.size());
  for (size_t j = 0; j < plan.returns.size(); ++j) {
    const c10::IValue& m = results[j];
    if (m.isTensor()) {
      outcome.returns[j].push_back(TensorGeometry::of(m.toTensor()));
    } else if (m.isTensorList()) {
      for (const at::Tensor& t : m.toTensorList()) outcome.returns[j].push_back(TensorGeometry::of(t));
    }
  }
  return outcome;
}

}  // namespace

namespace {
thread_local bool tl_signature_in_use = false;  // the thread's reusable signature belongs to a lookup
}  // namespace

ShapeLookup::ShapeLookup(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  thread_local MetaSignature reused;  // its buffers keep their capacity from call to call
  if (tl_signature_in_use) {
    owned_ = std::make_unique<MetaSignature>();
    signature_ = owned_.get();
  } else {
    signature_ = &reused;
  }
  cacheable_ = signature_->build(plan, args);
  if (cacheable_) hit_ = find_meta_outcome(*signature_);
  if (!owned_) tl_signature_in_use = true;  // last: a build that throws leaves no lookup holding it
}

ShapeLookup::~ShapeLookup() {
  if (!owned_) tl_signature_in_use = false;
}

const MetaOutcome* output_geometry(const c10::OperatorHandle& op, const OpPlan& plan, c10::ArrayRef<c10::IValue> args,
                                   ShapeLookup& lookup, std::optional<MetaOutcome>& computed) {
  if (lookup.hit_ != nullptr) return lookup.hit_;
  bool resized = false;
  bool warned = false;
  computed = run_shape_pass(op, plan, args, &resized, &warned);
  if (!computed) return nullptr;
  // A resizing call changes its own signature (the out= tensor's shape): nothing to reuse.
  // A pass that warned runs again next time (Note [Warnings of a cached shape pass]).
  if (lookup.cacheable_ && lookup.may_store_ && !resized && !warned) {
    store_meta_outcome(*lookup.signature_, *computed);
  }
  return &*computed;
}

}  // namespace at::openreg
