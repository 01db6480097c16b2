// AutocastXLA kernels for the ops xlabridge may add to torch_xla's autocast lists.
//
// The op list is not written here: xlabridge/autocast/_build.py generates
// xlabridge_autocast_ops.h from xlabridge/autocast/_ops.py, one
//   XB_OP("aten::name.overload", registered_id, redispatch_id, cast_policy)
// line per op, and builds this file against it.
//
// Each kernel is torch's own at::autocast::WrapFunction, instantiated for
// DeviceType::XLA exactly as torch_xla's TORCH_LIBRARY_IMPL(aten, AutocastXLA, m)
// block instantiates its kernels, so a call costs what a torch_xla kernel costs.
// The one difference is when they are registered: TORCH_LIBRARY_IMPL registers at
// load time, unconditionally, while xlabridge must register only the ops the
// dispatcher lacks (torch_xla's own kernels are never replaced). So each op gets
// its own torch::Library(IMPL, "aten", AutocastXLA), the object TORCH_LIBRARY_IMPL
// hands its block as `m`, created on request; destroying it removes the kernel.
//
// Python reaches this through three ops in the xlabridge_autocast namespace:
//   compiled_ops() -> str[]             ops this build has kernels for
//   register_ops(str[] names) -> str[]  registers those not yet registered here
//   unregister_ops(str[] names) -> ()   removes registrations made here

#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xlabridge_autocast_ops.h"

namespace {

using Registrar = void (*)(torch::Library&);

struct Kernel {
  const char* name;
  Registrar registrar;
};

#define XB_OP(NAME, REGISTERED, REDISPATCH, POLICY)                    \
  Kernel{NAME, [](torch::Library& m) {                                 \
           m.impl(                                                     \
               NAME,                                                   \
               &at::autocast::WrapFunction<                            \
                   at::autocast::CastPolicy::POLICY,                   \
                   c10::DeviceType::XLA,                               \
                   decltype(at::_ops::REGISTERED::call),               \
                   decltype(at::_ops::REDISPATCH::call),               \
                   &at::_ops::REDISPATCH::call>::type::call);          \
         }},

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> table = {XLABRIDGE_AUTOCAST_OPS(XB_OP)};
  return table;
}

#undef XB_OP

std::mutex registry_mutex;

// Deliberately leaked: destroying it at exit would deregister kernels from a
// dispatcher that may already be gone.
std::map<std::string, std::unique_ptr<torch::Library>>& registry() {
  static auto* libraries = new std::map<std::string, std::unique_ptr<torch::Library>>();
  return *libraries;
}

const Kernel& find_kernel(const std::string& name) {
  for (const auto& kernel : kernels()) {
    if (name == kernel.name) {
      return kernel;
    }
  }
  TORCH_CHECK(false, "xlabridge autocast: no compiled AutocastXLA kernel for '", name,
              "'; expected one of the ops in xlabridge/autocast/_ops.py");
}

std::vector<std::string> compiled_ops() {
  std::vector<std::string> names;
  names.reserve(kernels().size());
  for (const auto& kernel : kernels()) {
    names.emplace_back(kernel.name);
  }
  return names;
}

std::vector<std::string> register_ops(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<std::string> added;
  for (const auto& name : names) {
    const Kernel& kernel = find_kernel(name);
    if (registry().count(name) != 0) {
      continue;
    }
    auto library = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::AutocastXLA, __FILE__, __LINE__);
    kernel.registrar(*library);
    registry().emplace(name, std::move(library));
    added.push_back(name);
  }
  return added;
}

void unregister_ops(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& name : names) {
    registry().erase(name);
  }
}

}  // namespace

TORCH_LIBRARY(xlabridge_autocast, m) {
  m.def("compiled_ops() -> str[]", &compiled_ops);
  m.def("register_ops(str[] names) -> str[]", &register_ops);
  m.def("unregister_ops(str[] names) -> ()", &unregister_ops);
}
