#include "driver/tensor_map.hpp"

#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>

#include "driver/driver_api.hpp"
#include "flashrtc/error.hpp"

namespace flashrtc::detail {

namespace {

[[noreturn]] void invalid(const std::string& field, const std::string& value, const std::string& rule) {
  throw Error(ErrorCode::kInvalidArgument, "tensor map " + field + "=" + value + ": " + rule);
}

std::string indexed(const char* field, unsigned i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

// Bytes per element; 0 for what flashrtc does not encode (packed 4- and 6-bit types, unknown values).
unsigned element_bytes(CUtensorMapDataType dtype) {
  switch (dtype) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool is_floating(CUtensorMapDataType dtype) {
  switch (dtype) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return true;
    default:
      return false;
  }
}

// Bytes of the span a swizzle pattern permutes within; 0 for none, -1 for an unknown value.
int swizzle_span_bytes(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_NONE:
      return 0;
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
    case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B:
    case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B:
    case CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B:
      return 128;
    default:
      return -1;
  }
}

constexpr std::uint64_t kMaxGlobalDim = std::uint64_t{1} << 32;
constexpr std::uint64_t kStrideLimitBytes = std::uint64_t{1} << 40;
constexpr std::uint32_t kMaxBoxDim = 256;
constexpr std::uint32_t kMaxElementStride = 8;

// FNV-1a over the fields == compares.
struct SpecHash {
  std::uint64_t h = 14695981039346656037ull;
  void add(std::uint64_t v) {
    for (int byte = 0; byte < 8; ++byte, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  }
};

std::uint64_t hash_spec(const TensorMapSpec& s) {
  SpecHash hash;
  hash.add(s.dtype);
  hash.add(s.rank);
  hash.add(reinterpret_cast<std::uintptr_t>(s.global_address));
  const unsigned rank = std::min(s.rank, kTensorMapMaxRank);
  for (unsigned i = 0; i < rank; ++i) {
    hash.add(s.global_dims[i]);
    hash.add(s.box_dims[i]);
    hash.add(s.element_strides[i]);
    if (i + 1 < rank) hash.add(s.global_strides_bytes[i]);
  }
  hash.add(s.interleave);
  hash.add(s.swizzle);
  hash.add(s.l2_promotion);
  hash.add(s.oob_fill);
  return hash.h;
}

// Set-associative, replacing round-robin within a set: bounded however many tensors a process sees. The
// generation keeps a test's fake encodings apart from the real driver's.
constexpr std::size_t kMemoSets = 32;
constexpr std::size_t kMemoWays = 4;

struct MemoSlot {
  bool filled = false;
  std::uint64_t generation = 0;
  std::uint64_t hash = 0;
  TensorMapSpec spec;
  CUtensorMap map;
};

struct MemoSet {
  MemoSlot ways[kMemoWays];
  std::size_t next_victim = 0;
};

struct Memo {
  std::mutex mutex;
  MemoSet sets[kMemoSets];
};

}  // namespace

bool operator==(const TensorMapSpec& a, const TensorMapSpec& b) {
  if (a.dtype != b.dtype || a.rank != b.rank || a.global_address != b.global_address ||
      a.interleave != b.interleave || a.swizzle != b.swizzle || a.l2_promotion != b.l2_promotion ||
      a.oob_fill != b.oob_fill)
    return false;
  const unsigned rank = std::min(a.rank, kTensorMapMaxRank);
  return std::equal(a.global_dims, a.global_dims + rank, b.global_dims) &&
         std::equal(a.global_strides_bytes, a.global_strides_bytes + (rank ? rank - 1 : 0),
                    b.global_strides_bytes) &&
         std::equal(a.box_dims, a.box_dims + rank, b.box_dims) &&
         std::equal(a.element_strides, a.element_strides + rank, b.element_strides);
}

void validate_tensor_map(const TensorMapSpec& s) {
  const unsigned elem_bytes = element_bytes(s.dtype);
  if (elem_bytes == 0)
    invalid("dtype", std::to_string(s.dtype),
            "not a whole-byte CUtensorMapDataType (packed types are not supported)");
  const bool interleaved = s.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE;
  if (s.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && s.interleave != CU_TENSOR_MAP_INTERLEAVE_16B &&
      s.interleave != CU_TENSOR_MAP_INTERLEAVE_32B)
    invalid("interleave", std::to_string(s.interleave), "not a CUtensorMapInterleave");
  const int span_bytes = swizzle_span_bytes(s.swizzle);
  if (span_bytes < 0) invalid("swizzle", std::to_string(s.swizzle), "not a CUtensorMapSwizzle");
  if (s.l2_promotion < CU_TENSOR_MAP_L2_PROMOTION_NONE || s.l2_promotion > CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    invalid("l2_promotion", std::to_string(s.l2_promotion), "not a CUtensorMapL2promotion");
  if (s.oob_fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
      s.oob_fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    invalid("oob_fill", std::to_string(s.oob_fill), "not a CUtensorMapFloatOOBfill");
  if (s.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_floating(s.dtype))
    invalid("oob_fill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA",
            "needs a floating-point dtype, not " + std::to_string(s.dtype));
  if (s.interleave == CU_TENSOR_MAP_INTERLEAVE_32B && s.swizzle != CU_TENSOR_MAP_SWIZZLE_32B)
    invalid("swizzle", std::to_string(s.swizzle),
            "CU_TENSOR_MAP_INTERLEAVE_32B needs CU_TENSOR_MAP_SWIZZLE_32B");

  if (s.rank < 1 || s.rank > kTensorMapMaxRank)
    invalid("rank", std::to_string(s.rank), "must be 1.." + std::to_string(kTensorMapMaxRank));
  if (interleaved && s.rank < 3) invalid("rank", std::to_string(s.rank), "must be >= 3 when interleaved");

  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(s.global_address);
  const std::uintptr_t address_align = s.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if (!address) invalid("global_address", "null", "must point at the tensor");
  if (address % address_align) {
    std::ostringstream text;
    text << s.global_address;
    invalid("global_address", text.str(), "must be " + std::to_string(address_align) + "-byte aligned");
  }

  const std::uint64_t stride_align = s.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  for (unsigned i = 0; i < s.rank; ++i) {
    const std::uint64_t dim = s.global_dims[i];
    if (dim < 1 || dim > kMaxGlobalDim)
      invalid(indexed("global_dims", i), std::to_string(dim), "must be 1..2^32");
    const std::uint32_t box = s.box_dims[i];
    if (box < 1 || box > kMaxBoxDim)
      invalid(indexed("box_dims", i), std::to_string(box), "must be 1.." + std::to_string(kMaxBoxDim));
    const std::uint32_t step = s.element_strides[i];
    if (step < 1 || step > kMaxElementStride)
      invalid(indexed("element_strides", i), std::to_string(step),
              "must be 1.." + std::to_string(kMaxElementStride));
  }
  for (unsigned i = 0; i + 1 < s.rank; ++i) {
    const std::uint64_t stride = s.global_strides_bytes[i];
    if (stride % stride_align)
      invalid(indexed("global_strides_bytes", i), std::to_string(stride),
              "must be a multiple of " + std::to_string(stride_align) + " bytes");
    if (stride >= kStrideLimitBytes)
      invalid(indexed("global_strides_bytes", i), std::to_string(stride), "must be < 2^40");
  }
  if (!interleaved) {
    const std::uint64_t inner_bytes = std::uint64_t{s.box_dims[0]} * elem_bytes;
    if (inner_bytes % 16)
      invalid("box_dims[0]", std::to_string(s.box_dims[0]),
              "the inner box is " + std::to_string(inner_bytes) + " bytes, must be a multiple of 16");
    if (span_bytes > 0 && inner_bytes > static_cast<std::uint64_t>(span_bytes))
      invalid("box_dims[0]", std::to_string(s.box_dims[0]),
              "the inner box is " + std::to_string(inner_bytes) + " bytes, more than the " +
                  std::to_string(span_bytes) + "-byte swizzle span");
  }
}

CUtensorMap encode_tensor_map(const TensorMapSpec& spec) {
  static Memo memo;
  const std::uint64_t generation = driver_generation();
  const std::uint64_t hash = hash_spec(spec);
  MemoSet& set = memo.sets[hash % kMemoSets];
  // Encoding is host-side work on a new spec only: done under the lock, so racing first calls encode once.
  std::lock_guard<std::mutex> lock(memo.mutex);
  for (const MemoSlot& slot : set.ways)
    if (slot.filled && slot.hash == hash && slot.generation == generation && slot.spec == spec)
      return slot.map;
  validate_tensor_map(spec);
  CUtensorMap map;
  FLASHRTC_CU_CHECK(cuTensorMapEncodeTiled, &map, spec.dtype, spec.rank,
                    const_cast<void*>(spec.global_address), spec.global_dims, spec.global_strides_bytes,
                    spec.box_dims, spec.element_strides, spec.interleave, spec.swizzle, spec.l2_promotion,
                    spec.oob_fill);
  MemoSlot& slot = set.ways[set.next_victim];
  set.next_victim = (set.next_victim + 1) % kMemoWays;
  slot.filled = true;
  slot.generation = generation;
  slot.hash = hash;
  slot.spec = spec;
  slot.map = map;
  return map;
}

}  // namespace flashrtc::detail
