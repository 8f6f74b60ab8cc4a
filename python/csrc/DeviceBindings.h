#pragma once
// Device, stream-priority and device-index bindings of torch_openreg._C (the torch.cuda parity API).

#include <pybind11/pybind11.h>

void bind_device(pybind11::module_& m);
