// Autocast for openreg: torch.autocast("openreg", dtype=torch.float16 / torch.bfloat16).
//
// torch 2.13 registers no policy for AutocastPrivateUse1, so without this file autocast on openreg
// would change nothing. openreg runs CPU kernels, but the point of the device is to behave like an
// accelerator for device-generic code, so it follows CUDA's policy: the op lists ATen publishes for
// backends to reuse (ATen/autocast_mode.h), with CUDA's casting rule for each list.

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::openreg {
namespace {

#define OPENREG_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
}

// Ops outside the lists run in whatever dtype they get, as under CUDA autocast.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

#undef OPENREG_LOWER_PRECISION
#undef OPENREG_FP32
#undef OPENREG_FP32_SET_OPT_DTYPE
#undef OPENREG_PROMOTE

}  // namespace
}  // namespace at::openreg
