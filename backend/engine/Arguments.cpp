#include "backend/engine/Arguments.h"

#include "backend/runtime/Generator.h"

#include <ATen/core/Generator.h>

#include <c10/core/Allocator.h>
#include <c10/core/TensorImpl.h>

#include <sys/mman.h>

#include <cstring>

namespace at::openreg {
namespace {

//! Zero-filled host bytes for the shape pass's scratch stand-ins (Note [Meta kernels written in Python]
//! in ShapePass.cpp). Small blocks come from the CPU allocator and are cleared; large ones are fresh
//! anonymous mappings, whose pages the kernel supplies as zeros only when touched. A scratch copy of a
//! large storage therefore costs no memset and no resident memory beyond the pages the CPU kernel reads
//! (mapped to the shared zero page) or writes, so the scratch needs no size bound.
class ZeroedScratchAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    if (nbytes < kMapAtLeast) {
      c10::DataPtr small = c10::GetAllocator(c10::kCPU)->allocate(nbytes);
      if (nbytes > 0) std::memset(small.get(), 0, nbytes);
      return small;
    }
    void* p = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED, "openreg shape pass: cannot map ", nbytes,
                     " bytes of scratch memory");
    return {p, new Mapping{p, nbytes}, &unmap, c10::Device(c10::kCPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static constexpr std::size_t kMapAtLeast = std::size_t{1} << 20;  // below it, clearing is cheaper

  struct Mapping {
    void* data;
    std::size_t bytes;
  };

  static void unmap(void* ctx) {
    auto* m = static_cast<Mapping*>(ctx);
    munmap(m->data, m->bytes);
    delete m;
  }
};

c10::Allocator* zeroed_scratch_allocator() {
  static auto* allocator = new ZeroedScratchAllocator();  // leaked: scratch may be freed during teardown
  return allocator;
}

c10::Storage make_standin_storage(const c10::Storage& real, AliasTarget target) {
  if (target == AliasTarget::kMeta) {
    // Resizable, so an out= argument that the meta kernel resizes shows the new shape.
    return c10::Storage(c10::Storage::use_byte_size_t(), real.nbytes(), c10::GetAllocator(c10::kMeta),
                        /*resizable=*/true);
  }
  if (target == AliasTarget::kCpuScratch) {
    // Resizable for the same reason as Meta's (a resize also takes zeroed bytes); zeroed, so kernels
    // read defined values (a bool is 0).
    return c10::Storage(c10::Storage::use_byte_size_t(), real.nbytes(), zeroed_scratch_allocator(),
                        /*resizable=*/true);
  }
  return cpu_storage_over(const_cast<void*>(real.data_ptr().get()), real.nbytes());
}

at::Tensor make_standin(const at::Tensor& t, c10::Storage storage, AliasTarget target) {
  auto key = target == AliasTarget::kMeta ? c10::DispatchKey::Meta : c10::DispatchKey::CPU;
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.is_conj()) impl->_set_conj(true);
  if (t.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

}  // namespace

const c10::Storage& AliasConverter::standin_storage(const c10::Storage& real) {
  for (const auto& [r, s] : storages_) {
    if (r.unsafeGetStorageImpl() == real.unsafeGetStorageImpl()) return s;
  }
  storages_.emplace_back(real, make_standin_storage(real, target_));
  return storages_.back().second;
}

at::Tensor AliasConverter::convert(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  for (const auto& [impl, standin] : tensors_) {
    if (impl == t.unsafeGetTensorImpl()) return standin;
  }
  tensors_.emplace_back(t.unsafeGetTensorImpl(), make_standin(t, standin_storage(t.storage()), target_));
  return tensors_.back().second;
}

const c10::Storage* AliasConverter::source_of(const c10::StorageImpl* standin) const {
  for (const auto& [r, s] : storages_) {
    if (s.unsafeGetStorageImpl() == standin) return &r;
  }
  return nullptr;
}

c10::WarningHandler* silent_warning_handler() {
  struct Silent final : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  };
  static auto* handler = new Silent();
  return handler;
}

c10::Storage cpu_storage_over(void* data, std::size_t nbytes) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(data, c10::Device(c10::kCPU)),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

at::Tensor cpu_alias_of(const at::Tensor& t) {
  return make_standin(t, make_standin_storage(t.storage(), AliasTarget::kCpu), AliasTarget::kCpu);
}

namespace {

//! The openreg generator an op draws from: the given one, or its device's default.
c10::openreg::OpenRegGeneratorImpl* openreg_generator(const c10::IValue& v, c10::DeviceIndex device) {
  if (v.isNone()) {
    return at::check_generator<c10::openreg::OpenRegGeneratorImpl>(c10::openreg::default_generator(device));
  }
  return at::check_generator<c10::openreg::OpenRegGeneratorImpl>(v.toGenerator());
}

//! A CPU tensor argument captured by a work item: read when the item runs, like CUDA reads it when
//! the op is issued, so the item keeps its own copy (Python numbers wrapped as tensors need none).
at::Tensor snapshot_cpu(const at::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  return t.clone();
}

}  // namespace

c10::IValue convert_arg(const c10::IValue& v, const ArgPlan& a, AliasConverter& conv,
                        const c10::IValue& cpu_generator, c10::DeviceType device_type) {
  return substitute_tensors(v, a, [&](const at::Tensor& t) { return conv.convert(t); }, cpu_generator, device_type);
}

c10::IValue capture_arg(const c10::IValue& v, const ArgPlan& a, AliasConverter& cpu) {
  // A CPU tensor inside a Tensor[] is not copied: only 0-dim ones get past the device check (DeviceScan
  // in OpEngine.cpp), and the item reads them when it runs.
  const bool copies_cpu = a.kind != ArgKind::kTensorList;
  return substitute_tensors(
      v, a, [&](const at::Tensor& t) { return copies_cpu && t.is_cpu() ? snapshot_cpu(t) : cpu.convert(t); },
      c10::IValue(), c10::kCPU);
}

std::uint64_t take_seed(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device,
                        c10::openreg::capture::SeedSource* source) {
  if (!plan.random || plan.generator_arg < 0) return 0;
  c10::openreg::OpenRegGeneratorImpl* generator = openreg_generator(args[plan.generator_arg], device);
  if (source == nullptr) return generator->next_seed_for_op();
  source->generator = c10::intrusive_ptr<c10::GeneratorImpl>::reclaim_copy(generator);
  return generator->next_seed_for_op(&source->offset);
}

}  // namespace at::openreg
