// The floor of a C++ registration of flashrtc's operators (bench/dispatch_floor.py builds it against the
// installed torch): the schemas of flashrtc::attention_forward and attention_backward under the namespace
// dispatch_floor, kernels that only allocate the outputs as flashrtc's do, and the autograd formula as a
// torch::autograd::Function, so that a call costs what torch's C++ dispatch and autograd cost and nothing
// else.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> forward_kernel(const at::Tensor& q, const at::Tensor&, const at::Tensor&,
                                                  c10::SymInt, std::optional<double>, c10::string_view,
                                                  c10::SymIntArrayRef, bool) {
  return {at::empty_like(q), at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_kernel(const at::Tensor&, const at::Tensor& q,
                                                               const at::Tensor& k, const at::Tensor& v,
                                                               const at::Tensor&, const at::Tensor&,
                                                               c10::SymInt, std::optional<double>,
                                                               c10::string_view, bool) {
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v)};
}

std::tuple<at::Tensor, at::Tensor> call_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                c10::SymInt mask, std::optional<double> scale,
                                                c10::string_view layout, c10::SymIntArrayRef tile,
                                                bool deterministic) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dispatch_floor::attention_forward", "")
                       .typed<decltype(forward_kernel)>();
  return op.call(q, k, v, std::move(mask), scale, layout, tile, deterministic);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_backward(const at::Tensor& dout, const at::Tensor& q,
                                                             const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& o, const at::Tensor& lse,
                                                             c10::SymInt mask, std::optional<double> scale,
                                                             c10::string_view layout, bool deterministic) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dispatch_floor::attention_backward", "")
                       .typed<decltype(backward_kernel)>();
  return op.call(dout, q, k, v, o, lse, std::move(mask), scale, layout, deterministic);
}

struct Attention : public torch::autograd::Function<Attention> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, c10::SymInt mask, std::optional<double> scale,
                               c10::string_view layout, c10::SymIntArrayRef tile, bool deterministic) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [o, lse] = call_forward(q, k, v, mask, scale, layout, tile, deterministic);
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["options"] = c10::ivalue::Tuple::create(mask, scale, std::string(layout), deterministic);
    ctx->mark_non_differentiable({lse});
    return {o, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& options = ctx->saved_data["options"].toTupleRef().elements();
    auto [dq, dk, dv] =
        call_backward(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], options[0].toSymInt(),
                      options[1].toOptional<double>(), options[2].toStringRef(), options[3].toBool());
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> autograd_forward(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, c10::SymInt mask,
                                                    std::optional<double> scale, c10::string_view layout,
                                                    c10::SymIntArrayRef tile, bool deterministic) {
  if (!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView below;  // nothing to record: straight to the kernel, as codegen does
    return call_forward(q, k, v, std::move(mask), scale, layout, tile, deterministic);
  }
  auto outputs = Attention::apply(q, k, v, mask, scale, layout, tile, deterministic);
  return {outputs[0], outputs[1]};
}

}  // namespace

TORCH_LIBRARY(dispatch_floor, m) {
  m.def(
      "attention_forward(Tensor q, Tensor k, Tensor v, SymInt mask, float? scale, str layout, SymInt[] tile, "
      "bool deterministic) -> (Tensor, Tensor)");
  m.def(
      "attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, SymInt mask, "
      "float? scale, str layout, bool deterministic) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(dispatch_floor, CPU, m) {
  m.impl("attention_forward", forward_kernel);
  m.impl("attention_backward", backward_kernel);
}

TORCH_LIBRARY_IMPL(dispatch_floor, Autograd, m) {
  m.impl("attention_forward", autograd_forward);
}
