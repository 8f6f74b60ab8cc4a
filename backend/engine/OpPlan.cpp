#include "backend/engine/OpPlan.h"

#include "backend/engine/OpPolicy.h"

#include <ATen/core/enum_tag.h>
#include <ATen/core/jit_type.h>

#include <openreg/sim/stream.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace at::openreg {
namespace {

bool is_tensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

//! The element type of an Optional, or the type itself.
c10::TypePtr unwrap_optional(const c10::TypePtr& t, bool* optional) {
  if (auto opt = t->cast<c10::OptionalType>()) {
    *optional = true;
    return opt->getElementType();
  }
  *optional = false;
  return t;
}

ArgPlan classify_argument(const c10::Argument& a) {
  ArgPlan plan;
  plan.written = a.alias_info() != nullptr && a.alias_info()->isWrite();
  bool real_optional = false;
  const auto real = unwrap_optional(a.real_type(), &real_optional);  // ScalarType/Layout: `type()` says int
  plan.scalar_type = real->kind() == c10::TypeKind::ScalarTypeType;
  plan.layout = real->kind() == c10::TypeKind::LayoutType;
  auto type = unwrap_optional(a.type(), &plan.optional);
  if (is_tensor(type)) {
    plan.kind = ArgKind::kTensor;
  } else if (auto list = type->cast<c10::ListType>()) {
    bool element_optional = false;
    auto element = unwrap_optional(list->getElementType(), &element_optional);
    if (is_tensor(element)) {
      plan.kind = element_optional ? ArgKind::kOptionalTensorList : ArgKind::kTensorList;
    }
  } else if (type->kind() == c10::TypeKind::GeneratorType) {
    plan.kind = ArgKind::kGenerator;
  } else if (type->kind() == c10::TypeKind::DeviceObjType) {
    plan.kind = ArgKind::kDevice;
  }
  return plan;
}

bool shares_alias_set(const c10::AliasInfo& a, const c10::AliasInfo& b) {
  for (const auto& s : a.beforeSets()) {
    if (b.beforeSets().count(s) != 0) return true;
  }
  return false;
}

ReturnPlan classify_return(const c10::FunctionSchema& schema, const c10::Argument& r) {
  ReturnPlan plan;
  bool optional = false;
  auto type = unwrap_optional(r.type(), &optional);
  if (auto list = type->cast<c10::ListType>()) {
    plan.is_list = is_tensor(list->getElementType());
    if (!plan.is_list) plan.kind = ReturnKind::kNonTensor;
  } else if (!is_tensor(type)) {
    plan.kind = ReturnKind::kNonTensor;
  }
  if (plan.kind == ReturnKind::kNonTensor || r.alias_info() == nullptr) return plan;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() != nullptr && shares_alias_set(*r.alias_info(), *args[i].alias_info())) {
      plan.arg = static_cast<int>(i);
      plan.kind = r.alias_info()->isWrite() ? ReturnKind::kWrittenArg : ReturnKind::kViewOfArg;
      return plan;
    }
  }
  // An alias annotation that matches no argument (wildcards): treat as a view we cannot place.
  plan.kind = ReturnKind::kNonTensor;
  return plan;
}

// Every overload name of every operator, grouped by operator name; built once (the registry only
// grows at library load, and the out= overloads of aten ops exist from the start).
const std::vector<c10::OperatorName>& overloads_of(const std::string& name) {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (auto& n : c10::Dispatcher::singleton().getAllOpNames()) (*t)[n.name].push_back(n);
    return t;
  }();
  static const std::vector<c10::OperatorName> kNone;
  auto it = table->find(name);
  return it == table->end() ? kNone : it->second;
}

// True when `out` is `functional` plus one trailing written Tensor per return, with the same leading
// arguments (names and types), e.g. add.Tensor and add.out.
bool is_out_variant(const c10::FunctionSchema& functional, const c10::FunctionSchema& out) {
  const auto& fa = functional.arguments();
  const auto& oa = out.arguments();
  const size_t n = fa.size();
  const size_t k = functional.returns().size();
  if (oa.size() != n + k || out.returns().size() != k) return false;
  for (size_t i = 0; i < n; ++i) {
    if (fa[i].name() != oa[i].name() || *fa[i].type() != *oa[i].type()) return false;
    if (oa[i].alias_info() != nullptr) return false;
  }
  for (size_t j = n; j < n + k; ++j) {
    if (!is_tensor(oa[j].type()) || oa[j].alias_info() == nullptr || !oa[j].alias_info()->isWrite()) {
      return false;
    }
  }
  return true;
}

std::optional<c10::OperatorHandle> find_out_variant(const c10::OperatorHandle& op, const OpPlan& plan) {
  if (plan.returns.empty()) return std::nullopt;
  for (const auto& r : plan.returns) {
    if (r.kind != ReturnKind::kFresh || r.is_list) return std::nullopt;
  }
  for (const auto& name : overloads_of(op.operator_name().name)) {
    if (name.overload_name == op.operator_name().overload_name) continue;
    auto candidate = c10::Dispatcher::singleton().findSchema(name);
    if (!candidate || !is_out_variant(op.schema(), candidate->schema())) continue;
    // Only worth it when CPU has a kernel for the out= form (a kernel or a composite one).
    if (!candidate->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    return candidate;
  }
  return std::nullopt;
}

//! Whether the Meta kernel that dispatch reaches was registered from Python. The dispatcher names a
//! kernel's origin only in its debug dump ("Meta: registered at .../_meta_registrations.py:54 ::");
//! should that format change, this answers false and the op keeps using its Meta kernel.
bool meta_kernel_in_python(const c10::OperatorHandle& op) {
  const std::string state = op.dumpState();
  const auto at = state.find("\nMeta: registered at ");
  if (at == std::string::npos) return false;
  const auto end = state.find(" :: ", at);
  const std::string origin = state.substr(at, end == std::string::npos ? std::string::npos : end - at);
  return origin.size() > 4 && origin.find(".py:") != std::string::npos;
}

//! Whether the in-place op `name` (a schema name, "aten::zero_") writes every element of self without
//! reading it: a fill, or a fill with random numbers.
bool overwrites_self(std::string_view name) {
  static const std::array<std::string_view, 11> kOverwrite = {
      "aten::fill_",    "aten::zero_",   "aten::copy_",        "aten::normal_",     "aten::uniform_", "aten::bernoulli_",
      "aten::random_", "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_"};
  return std::find(kOverwrite.begin(), kOverwrite.end(), name) != kOverwrite.end();
}

std::unique_ptr<OpPlan> build_plan(const c10::OperatorHandle& op) {
  auto plan = std::make_unique<OpPlan>();
  plan->op = op;
  const auto& schema = op.schema();
  plan->name = ::openreg::sim::intern_name(c10::toString(op.operator_name()).c_str());
  for (const auto& a : schema.arguments()) {
    plan->args.push_back(classify_argument(a));
    if (plan->args.back().kind == ArgKind::kGenerator) {
      plan->generator_arg = static_cast<int>(plan->args.size() - 1);
    }
    plan->writes = plan->writes || plan->args.back().written;
  }
  const std::string& base = schema.name();
  plan->inplace = !base.empty() && base.back() == '_' && !schema.arguments().empty() &&
                  schema.arguments()[0].name() == "self" && !schema.arguments()[0].kwarg_only() &&
                  !plan->args.empty() && plan->args[0].written && plan->args[0].kind == ArgKind::kTensor;
  for (size_t i = 0; i < plan->args.size(); ++i) {
    ArgPlan& a = plan->args[i];
    a.read = !a.written || !(schema.arguments()[i].is_out() || (i == 0 && plan->inplace && overwrites_self(base)));
  }
  for (const auto& r : schema.returns()) {
    plan->returns.push_back(classify_return(schema, r));
    if (plan->returns.back().kind == ReturnKind::kNonTensor) plan->sync_only = plan->host_waits = true;
  }
  plan->random = plan->generator_arg >= 0 || op.hasTag(at::Tag::nondeterministic_seeded);
  const OpPolicy policy = policy_of(op);
  if (policy.data_dependent || policy.data_dependent_with_mask) plan->host_waits = true;
  plan->mask_dependent = policy.data_dependent_with_mask;
  if (policy.data_dependent || policy.shape_pass_disagrees) plan->sync_only = true;
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) plan->sync_only = true;
  if (!plan->sync_only && !policy.out_kernel_differs) plan->out_op = find_out_variant(op, *plan);
  plan->meta_in_python = !plan->sync_only && meta_kernel_in_python(op);
  plan->checks_on_cpu = !plan->sync_only && policy.checks_on_cpu;
  if (policy.makes_quantized) {
    plan->coverage = Coverage::kMakesQuantized;
  } else if (policy.makes_sparse) {
    plan->coverage = Coverage::kMakesSparse;
  } else if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) {
    // The computed CPU entry covers CPU kernels and the composite kernels CPU inherits: exactly what
    // the engine's redispatch to CPU would find.
    plan->coverage = Coverage::kNoCpuKernel;
  }
  plan->sync_when = policy.sync_when;
  plan->resizes_self = policy.resizes_self;
  if (policy.shape_pass_valid_if_arg != nullptr) {
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      if (schema.arguments()[i].name() == policy.shape_pass_valid_if_arg) {
        plan->shape_pass_valid_if_arg = static_cast<int>(i);
      }
    }
  }
  return plan;
}

struct Cached {
  c10::OperatorName name;
  const OpPlan* plan;
};

}  // namespace

const OpPlan& plan_for(const c10::OperatorHandle& op) {
  // Keyed by the operator's schema object, whose address is fixed while the operator is registered;
  // the name check guards against an address reused by an operator registered after another was
  // removed (Python-defined libraries can be torn down).
  const void* key = &op.schema();
  thread_local std::unordered_map<const void*, Cached> local;  // no lock on the hot path
  auto it = local.find(key);
  if (it != local.end() && it->second.name == op.operator_name()) return *it->second.plan;

  // All leaked, like every object device threads touch: plans are referenced from work items, which
  // may run during static destruction.
  static auto* mutex = new std::mutex();  // guards `plans` and `shared`
  static auto* plans = new std::vector<std::unique_ptr<OpPlan>>();
  static auto* shared = new std::unordered_map<const void*, Cached>();
  const OpPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(*mutex);
    auto s = shared->find(key);
    if (s != shared->end() && s->second.name == op.operator_name()) {
      plan = s->second.plan;
    } else {
      plans->push_back(build_plan(op));
      plan = plans->back().get();
      shared->insert_or_assign(key, Cached{op.operator_name(), plan});
    }
  }
  local.insert_or_assign(key, Cached{op.operator_name(), plan});
  return *plan;
}

}  // namespace at::openreg
