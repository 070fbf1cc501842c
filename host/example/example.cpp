// A minimal flashrtc application: one small attention on the GPU. Given an arch (`app sm_80`), or without a
// GPU (then sm_90a, H100/H200), it compiles the kernel that call would run on that arch instead, which needs
// only NVRTC.
#include <cmath>
#include <cstdio>
#include <flashrtc/device_memory.hpp>
#include <flashrtc/flashrtc.hpp>
#include <string>
#include <vector>
#ifdef FLASHRTC_EXAMPLE_WITH_TOOLS
#include <flashrtc_tools/tools.hpp>
#endif

namespace {

// Compiles the forward kernel a bf16, d=128, causal call of 4096 tokens runs on a GPU of arch, resolved as
// the call itself resolves (family, then tile), so sm_90a gets its wgmma kernel and sm_80 its mma one.
int compile_for(const std::string& arch) {
  if (!flashrtc::is_supported_arch(arch)) {
    std::fprintf(stderr, "unsupported arch '%s' (supported: %s)\n", arch.c_str(),
                 flashrtc::supported_archs_text().c_str());
    return 2;
  }
  flashrtc::ConfigQuery query;
  query.dtype = flashrtc::DType::kBFloat16;
  query.head_dim = 128;
  query.mask = flashrtc::MaskKind::kCausalTopLeft;
  query.seqlen_q = query.seqlen_kv = 4096;
  const flashrtc::ConfigResolution resolution =
      flashrtc::resolve_config(query, flashrtc::assumed_device_target("", arch));
  const flashrtc::KernelSpec spec = flashrtc::call_kernel_spec(query, resolution);
  const flashrtc::CompiledKernelInfo info = flashrtc::compile_kernel(spec, arch);
  std::printf("%s: %s kernel %s: %d registers, %d bytes spilled (%s)\n", arch.c_str(),
              resolution.family->name.c_str(), info.name_expression.c_str(), info.resources.registers,
              info.resources.spill_store_bytes, flashrtc::to_string(info.source));
#ifdef FLASHRTC_EXAMPLE_WITH_TOOLS
  // What the disk cache holds now, through the tools library (`flashrtc cache ls` is built on it).
  for (const flashrtc::CacheEntry& e : flashrtc::tools::sorted_cache_entries())
    std::printf("cached: %s %s d=%d (%s)\n", flashrtc::tools::short_kernel_name(e.kernel).c_str(),
                e.arch.c_str(), e.head_dim, flashrtc::tools::format_bytes(double(e.size_bytes)).c_str());
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 2) {
      std::fprintf(stderr, "usage: %s [ARCH]\n", argv[0]);
      return 2;
    }
    if (argc == 2) return compile_for(argv[1]);
    if (!flashrtc::device_available()) {
      std::printf("no GPU (%s); compiling for sm_90a instead\n",
                  flashrtc::device_unavailable_reason().c_str());
      return compile_for("sm_90a");
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
