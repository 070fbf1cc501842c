// A minimal flashrtc application: one small attention on the GPU; without a GPU, one kernel compiled
// for sm_90a (H100/H200), which needs only NVRTC.
#include <cmath>
#include <cstdio>
#include <flashrtc/device_memory.hpp>
#include <flashrtc/flashrtc.hpp>
#include <vector>
#ifdef FLASHRTC_EXAMPLE_WITH_TOOLS
#include <flashrtc_tools/tools.hpp>
#endif

int main() {
  try {
    if (!flashrtc::device_available()) {
      std::printf("no GPU (%s); compiling for sm_90a instead\n",
                  flashrtc::device_unavailable_reason().c_str());
      flashrtc::KernelSpec spec;
      spec.dtype = flashrtc::DType::kBFloat16;
      spec.head_dim = 128;
      spec.mask = flashrtc::MaskKind::kCausalTopLeft;
      spec.tile = flashrtc::default_forward_config(spec.dtype, spec.head_dim, spec.mask);
      const flashrtc::CompiledKernelInfo info = flashrtc::compile_kernel(spec, "sm_90a");
      std::printf("%s: %d registers, %d bytes spilled (%s)\n", info.name_expression.c_str(),
                  info.resources.registers, info.resources.spill_store_bytes,
                  flashrtc::to_string(info.source));
#ifdef FLASHRTC_EXAMPLE_WITH_TOOLS
      // What the disk cache holds now, through the tools library (`flashrtc cache ls` is built on it).
      for (const flashrtc::CacheEntry& e : flashrtc::tools::sorted_cache_entries())
        std::printf("cached: %s %s d=%d (%s)\n", flashrtc::tools::short_kernel_name(e.kernel).c_str(),
                    e.arch.c_str(), e.head_dim, flashrtc::tools::format_bytes(double(e.size_bytes)).c_str());
#endif
      return 0;
    }

    // q, k, v, o: [batch=1, seq=256, heads=4, dim=64] in fp32, so the host needs no conversions.
    const std::int64_t seqlen = 256, heads = 4, head_dim = 64;
    std::vector<float> host(seqlen * heads * head_dim);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = std::sin(0.01f * static_cast<float>(i));
    const std::size_t bytes = host.size() * sizeof(float);
    flashrtc::DeviceBuffer q(bytes), k(bytes), v(bytes), o(bytes);
    q.copy_from_host(host.data(), bytes);
    k.copy_from_host(host.data(), bytes);
    v.copy_from_host(host.data(), bytes);

    flashrtc::ForwardParams p;
    p.dtype = flashrtc::DType::kFloat32;
    p.batch = 1;
    p.seqlen_q = p.seqlen_kv = seqlen;
    p.heads_q = p.heads_kv = heads;
    p.head_dim = head_dim;
    p.q = flashrtc::TensorRef::bnhd(q.data(), seqlen, heads, head_dim);
    p.k = flashrtc::TensorRef::bnhd(k.data(), seqlen, heads, head_dim);
    p.v = flashrtc::TensorRef::bnhd(v.data(), seqlen, heads, head_dim);
    p.o = flashrtc::TensorRef::bnhd(o.data(), seqlen, heads, head_dim);
    p.mask = flashrtc::MaskKind::kCausalTopLeft;
    flashrtc::attention_forward(p);  // asynchronous, on the default stream
    flashrtc::device_synchronize();

    o.copy_to_host(host.data(), bytes);
    std::printf("%s: o[0, 1, 0, 0:4] = %.5f %.5f %.5f %.5f\n", flashrtc::current_device().name.c_str(),
                host[heads * head_dim + 0], host[heads * head_dim + 1], host[heads * head_dim + 2],
                host[heads * head_dim + 3]);
    return 0;
  } catch (const flashrtc::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
