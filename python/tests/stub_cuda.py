"""CPU tensors that flashrtc takes for CUDA ones, for the CUDA branches of its PyTorch paths without a GPU
(bench/host_overhead.py --stub-kernels, test_eager_cpu.py).

    stub_cuda.install(torch, forward, backward)   # for the rest of the process: run it in a process of its own;
                                                  # again after _signatures.reset_caches()

Real torch, with every tensor saying it is on cuda:0 when Python asks (torch's own dispatch still sees the
CPU), allocations asked for on cuda:0 made on the CPU, device 0 current with stream 0, the library's C
calls replaced by forward and backward (ctypes functions or Python callables taking the struct), and the
operators' CUDA kernels registered for the CPU too. The library itself is loaded (FLASHRTC_LIBRARY): its
struct defaults are the real ones.
"""
from flashrtc import _library, _torch_api

_installed = []  # torch's changes and the CPU kernels: once per process


def install(torch, forward, backward) -> None:
    from flashrtc import _torch_ops
    library = _library.load()
    if not _installed:
        cuda0 = torch.device("cuda", 0)
        torch.Tensor.is_cuda = property(lambda self: True)
        torch.Tensor.device = property(lambda self: cuda0)
        torch.Tensor.get_device = lambda self: 0
        empty = torch.empty

        def cpu_empty(*args, device=None, **kwargs):
            return empty(*args, **kwargs)

        torch.empty = cpu_empty
        for name, kernel in (("attention_forward", _torch_ops.forward_kernel),
                             ("attention_backward", _torch_ops.backward_kernel)):
            _torch_ops._LIBRARY.impl(name, kernel, "CPU")  # as the CUDA kernels are registered
        _installed.append(True)
    real = _torch_api.api()
    _torch_api.cache[:] = [real._replace(empty=torch.empty, current_device=lambda: 0,
                                         current_raw_stream=lambda index: 0)]
    library.forward, library.backward = forward, backward
