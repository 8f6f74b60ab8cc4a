#include "backend/engine/ShapePassCache.h"

#include <cstring>
#include <unordered_map>

namespace at::openreg {
namespace {

// Tags keep encodings of different argument types apart (an int list [3] vs the int 3).
enum Tag : int64_t { kNone = 1, kInt, kDouble, kBool, kIntList, kDoubleList, kBoolList, kString, kTensor,
                     kUndefinedTensor, kList, kDevice, kGenerator, kComplex, kCpuScalar };

// Bounds the memory of a thread's cache; a program cycling through more signatures than this just
// recomputes (the cache is an optimisation, never needed for correctness).
constexpr size_t kMaxEntries = 8192;

struct Entry {
  std::vector<int64_t> words;
  MetaOutcome outcome;
};

std::unordered_map<std::uint64_t, Entry>& cache() {
  thread_local std::unordered_map<std::uint64_t, Entry> c;
  return c;
}

std::uint64_t hash_words(const std::vector<int64_t>& w) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over 64-bit words, then mixed
  for (int64_t x : w) {
    h ^= static_cast<std::uint64_t>(x);
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

int64_t bits_of(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

}  // namespace

TensorGeometry TensorGeometry::of(const at::Tensor& t) {
  TensorGeometry g;
  if (!t.defined()) return g;
  g.defined = true;
  g.sizes.assign(t.sizes().begin(), t.sizes().end());
  g.strides.assign(t.strides().begin(), t.strides().end());
  g.storage_offset = t.storage_offset();
  g.dtype = t.scalar_type();
  g.conj = t.is_conj();
  g.neg = t.is_neg();
  return g;
}

bool MetaSignature::add_tensor(const at::Tensor& t) {
  if (!t.defined()) {
    words_.push_back(kUndefinedTensor);
    return true;
  }
  if (t.is_cpu()) {
    // A 0-dim CPU tensor is a scalar operand: its value is part of the signature (a meta kernel may
    // read it). Larger CPU tensors (index lists) could be read whole: not cached.
    if (t.dim() != 0 || t.is_conj() || t.is_neg()) return false;
    words_.push_back(kCpuScalar);
    words_.push_back(static_cast<int64_t>(t.scalar_type()));
    words_.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
    int64_t value[2] = {0, 0};
    std::memcpy(value, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof value));
    words_.push_back(value[0]);
    words_.push_back(value[1]);
    return true;
  }
  words_.push_back(kTensor);
  words_.push_back(static_cast<int64_t>(t.device().type()));
  words_.push_back(static_cast<int64_t>(t.scalar_type()));
  words_.push_back(t.dim());
  for (int64_t s : t.sizes()) words_.push_back(s);
  for (int64_t s : t.strides()) words_.push_back(s);
  words_.push_back(t.storage_offset());
  words_.push_back(t.is_conj() | (t.is_neg() << 1));
  // Which earlier argument it shares memory with, and how big that memory is: overlap and bounds
  // checks of the meta kernels depend on both.
  const void* storage = t.storage().unsafeGetStorageImpl();
  int64_t id = 0;
  while (id < static_cast<int64_t>(storages_.size()) && storages_[id] != storage) ++id;
  if (id == static_cast<int64_t>(storages_.size())) storages_.push_back(storage);
  words_.push_back(id);
  words_.push_back(static_cast<int64_t>(t.storage().nbytes()));
  return true;
}

bool MetaSignature::add_value(const c10::IValue& v) {
  if (v.isTensor()) return add_tensor(v.toTensor());
  if (v.isNone()) {
    words_.push_back(kNone);
  } else if (v.isInt()) {
    words_.push_back(kInt);
    words_.push_back(v.toInt());
  } else if (v.isDouble()) {
    words_.push_back(kDouble);
    words_.push_back(bits_of(v.toDouble()));
  } else if (v.isBool()) {
    words_.push_back(kBool);
    words_.push_back(v.toBool());
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    words_.push_back(kComplex);
    words_.push_back(bits_of(c.real()));
    words_.push_back(bits_of(c.imag()));
  } else if (v.isIntList()) {
    add_list(kIntList, v.toIntList(), [](int64_t x) { return x; });
  } else if (v.isDoubleList()) {
    add_list(kDoubleList, v.toDoubleList(), [](double x) { return bits_of(x); });
  } else if (v.isBoolList()) {
    add_list(kBoolList, v.toBoolList(), [](bool x) { return static_cast<int64_t>(x); });
  } else if (v.isString()) {
    const auto& s = v.toStringRef();
    words_.push_back(kString);
    words_.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += sizeof(int64_t)) {
      int64_t w = 0;
      std::memcpy(&w, s.data() + i, std::min(sizeof w, s.size() - i));
      words_.push_back(w);
    }
  } else if (v.isList()) {
    words_.push_back(kList);
    const auto& list = v.toListRef();
    words_.push_back(static_cast<int64_t>(list.size()));
    for (const auto& e : list) {
      if (!add_value(e)) return false;
    }
  } else if (v.isDevice()) {
    words_.push_back(kDevice);
    words_.push_back(static_cast<int64_t>(v.toDevice().type()));
    words_.push_back(v.toDevice().index());
  } else if (v.isGenerator()) {
    words_.push_back(kGenerator);  // the meta pass never sees the generator
  } else {
    return false;
  }
  return true;
}

bool MetaSignature::build(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  words_.clear();
  storages_.clear();
  words_.push_back(reinterpret_cast<int64_t>(&plan));
  for (const auto& a : args) {
    if (!add_value(a)) return false;
  }
  hash_ = hash_words(words_);
  return true;
}

const MetaOutcome* find_meta_outcome(const MetaSignature& sig) {
  auto& c = cache();
  auto it = c.find(sig.hash());
  if (it == c.end() || it->second.words != sig.words()) return nullptr;
  return &it->second.outcome;
}

void store_meta_outcome(const MetaSignature& sig, MetaOutcome outcome) {
  auto& c = cache();
  if (c.size() >= kMaxEntries) c.clear();
  c.insert_or_assign(sig.hash(), Entry{sig.words(), std::move(outcome)});
}

}  // namespace at::openreg
