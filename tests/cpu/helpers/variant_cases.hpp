#pragma once
// The attention variants' argument rules, one table for every entry point's suite (dense, varlen, KV cache,
// forward and backward): invalid values throw kInvalidArgument naming the field; valid ones throw
// kUnsupported naming the variant where no kernel of the call serves it (`served`: the VariantBit bits some
// kernel of the call serves, whose cases the call's own suite runs). Pointers are fake (never dereferenced).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/helpers/runtime_test_util.hpp"
#include "flashrtc/attention_variants.hpp"
#include "flashrtc/c_api.h"
#include "flashrtc/error.hpp"

namespace flashrtc::test {

struct VariantCase {
  std::string what;
  std::function<void(AttentionVariants&)> set;
  ErrorCode code;
  std::vector<std::string> names;  // substrings the message must contain
};

inline const float* fake_floats(std::uintptr_t address) {
  return reinterpret_cast<const float*>(address);
}

// The cases for a call with heads_q query heads (heads_q >= 2).
inline std::vector<VariantCase> variant_cases(std::int64_t heads_q) {
  const std::string hq = std::to_string(heads_q);
  const float* slopes = fake_floats(0xA00000);
  const float* sinks = fake_floats(0xB00000);
  constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument, kUnsupported = ErrorCode::kUnsupported;
  return {
      // Valid, not served.
      {"window_left",
       [](AttentionVariants& v) { v.window_left = 128; },
       kUnsupported,
       {"sliding window", "window_left=128", "kernel serves"}},
      {"window_right",
       [](AttentionVariants& v) { v.window_right = 0; },
       kUnsupported,
       {"sliding window", "window_right=0"}},
      {"softcap", [](AttentionVariants& v) { v.softcap = 30.f; }, kUnsupported, {"softcap=30"}},
      {"ALiBi per head",
       [=](AttentionVariants& v) { v.alibi_slopes = slopes; },
       kUnsupported,
       {"ALiBi", "alibi_slopes"}},
      {"ALiBi per batch and head",
       [=](AttentionVariants& v) {
         v.alibi_slopes = slopes;
         v.alibi_stride_batch = heads_q;
       },
       kUnsupported,
       {"ALiBi"}},
      {"sinks", [=](AttentionVariants& v) { v.sinks = sinks; }, kUnsupported, {"sinks"}},
      // Invalid values, reported before any variant is refused.
      {"window_left -2",
       [](AttentionVariants& v) { v.window_left = -2; },
       kInvalid,
       {"variants.window_left=-2", "-1 (unbounded)"}},
      {"window_right -7 beside a valid softcap",
       [](AttentionVariants& v) {
         v.window_right = -7;
         v.softcap = 5.f;
       },
       kInvalid,
       {"variants.window_right=-7"}},
      {"softcap -1 beside a valid window",
       [](AttentionVariants& v) {
         v.window_left = 4;
         v.softcap = -1.f;
       },
       kInvalid,
       {"variants.softcap=-1", ">= 0"}},
      {"softcap NaN",
       [](AttentionVariants& v) { v.softcap = std::nanf(""); },
       kInvalid,
       {"variants.softcap"}},
      {"softcap inf",
       [](AttentionVariants& v) { v.softcap = std::numeric_limits<float>::infinity(); },
       kInvalid,
       {"variants.softcap=inf", "finite"}},
      {"alibi_stride_batch below heads_q",
       [=](AttentionVariants& v) {
         v.alibi_slopes = slopes;
         v.alibi_stride_batch = 1;
       },
       kInvalid,
       {"variants.alibi_stride_batch=1", ">= heads_q=" + hq}},
      {"alibi_stride_batch negative",
       [=](AttentionVariants& v) {
         v.alibi_slopes = slopes;
         v.alibi_stride_batch = -heads_q;
       },
       kInvalid,
       {"variants.alibi_stride_batch=-" + hq}},
      {"alibi_stride_batch without slopes",
       [=](AttentionVariants& v) { v.alibi_stride_batch = heads_q; },
       kInvalid,
       {"variants.alibi_stride_batch", "without alibi_slopes"}},
      {"alibi_slopes misaligned",
       [](AttentionVariants& v) { v.alibi_slopes = fake_floats(0xA00002); },
       kInvalid,
       {"variants.alibi_slopes", "4-byte aligned"}},
      {"sinks misaligned",
       [](AttentionVariants& v) { v.sinks = fake_floats(0xB00001); },
       kInvalid,
       {"variants.sinks", "4-byte aligned"}},
  };
}

inline void check_error(const Error& e, ErrorCode code, const std::vector<std::string>& names) {
  INFO(std::string(e.what()));
  CHECK(e.code() == code);
  for (const std::string& name : names) CHECK(std::string(e.what()).find(name) != std::string::npos);
}

template <typename Params, typename = void>
struct HasSinkGradient : std::false_type {};
template <typename Params>
struct HasSinkGradient<Params, std::void_t<decltype(std::declval<Params&>().d_sinks)>> : std::true_type {};

// Runs every case through call(valid params with the case's variants), but the valid cases of served
// variants. Params has heads_q and variants; a backward's is given d_sinks where the case sets sinks
// (check_sink_gradient_cases checks its rules).
template <typename Params, typename Call>
void check_variant_cases(const Params& valid, Call&& call, unsigned served = 0) {
  CHECK(!valid.variants.any());
  for (const VariantCase& c : variant_cases(valid.heads_q)) {
    INFO(c.what);
    Params p = valid;
    c.set(p.variants);
    CHECK(p.variants.any());
    if (c.code == ErrorCode::kUnsupported && (variant_bits(p.variants) & ~served) == 0) continue;
    if constexpr (HasSinkGradient<Params>::value)
      if (p.variants.sinks) p.d_sinks = reinterpret_cast<float*>(0xC00000);
    check_error(expect_error([&] { call(p); }), c.code, c.names);
  }
}

// A backward's d_sinks: required with sinks, refused without, 4-byte aligned; with both the sinks are
// refused as not served.
template <typename Params, typename Call>
void check_sink_gradient_cases(const Params& valid, Call&& call) {
  float* const d_sinks = reinterpret_cast<float*>(0xC00000);
  Params p = valid;
  p.variants.sinks = fake_floats(0xB00000);
  check_error(expect_error([&] { call(p); }), ErrorCode::kInvalidArgument, {"d_sinks is null"});
  p.d_sinks = reinterpret_cast<float*>(0xC00002);
  check_error(expect_error([&] { call(p); }), ErrorCode::kInvalidArgument, {"d_sinks=", "4-byte aligned"});
  p.d_sinks = d_sinks;
  check_error(expect_error([&] { call(p); }), ErrorCode::kUnsupported, {"attention sinks"});
  p = valid;
  p.d_sinks = d_sinks;
  check_error(expect_error([&] { call(p); }), ErrorCode::kInvalidArgument, {"d_sinks is set without"});
}

// The C structs' variants (flashrtc_variants): the window needs has_window; every call returns the status of
// the C++ rules with a message naming the field or variant. call returns the entry point's status.
template <typename CParams, typename Call>
void check_c_variant_cases(const CParams& valid, Call&& call, unsigned served = 0) {
  struct Case {
    const char* what;
    std::function<void(flashrtc_variants&)> set;
    flashrtc_status status;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {"window",
       [](flashrtc_variants& v) { v.has_window = 1, v.window_left = 128, v.window_right = -1; },
       FLASHRTC_ERROR_UNSUPPORTED,
       {"sliding window", "window_left=128", "window_right=-1"}},
      {"window (0, 0)",
       [](flashrtc_variants& v) { v.has_window = 1; },
       FLASHRTC_ERROR_UNSUPPORTED,
       {"window_left=0, window_right=0"}},
      {"softcap", [](flashrtc_variants& v) { v.softcap = 30.f; }, FLASHRTC_ERROR_UNSUPPORTED, {"softcap=30"}},
      {"ALiBi",
       [](flashrtc_variants& v) { v.alibi_slopes = fake_floats(0xA00000); },
       FLASHRTC_ERROR_UNSUPPORTED,
       {"ALiBi"}},
      {"bounds without has_window",
       [](flashrtc_variants& v) { v.window_left = 3; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"has_window=0", "window_left=3"}},
      {"has_window 2",
       [](flashrtc_variants& v) { v.has_window = 2; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"variants.has_window=2"}},
      {"window_left -2",
       [](flashrtc_variants& v) { v.has_window = 1, v.window_left = -2; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"variants.window_left=-2"}},
      {"softcap -1",
       [](flashrtc_variants& v) { v.softcap = -1.f; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"variants.softcap=-1"}},
      {"alibi_stride_batch 1",
       [](flashrtc_variants& v) { v.alibi_slopes = fake_floats(0xA00000), v.alibi_stride_batch = 1; },
       FLASHRTC_ERROR_INVALID_ARGUMENT,
       {"variants.alibi_stride_batch=1"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CParams p = valid;
    c.set(p.variants);
    const flashrtc_variants& v = p.variants;
    const unsigned bits = (v.has_window ? kVariantWindow : 0u) | (v.softcap > 0.f ? kVariantSoftcap : 0u) |
                          (v.alibi_slopes ? kVariantAlibi : 0u) | (v.sinks ? kVariantSinks : 0u);
    if (c.status == FLASHRTC_ERROR_UNSUPPORTED && (bits & ~served) == 0)
      continue;  // the call's suite runs it
    CHECK(call(p) == c.status);
    const std::string message = flashrtc_last_error();
    INFO(message);
    for (const std::string& name : c.names) CHECK(message.find(name) != std::string::npos);
  }
}

// A C backward's d_sinks: required with sinks (then refused as unserved), refused without them.
template <typename CParams, typename Call>
void check_c_sink_gradient_cases(const CParams& valid, Call&& call) {
  const auto fails_with = [&](const CParams& p, flashrtc_status status, const char* name) {
    CHECK(call(p) == status);
    const std::string message = flashrtc_last_error();
    INFO(message);
    CHECK(message.find(name) != std::string::npos);
  };
  CParams p = valid;
  p.variants.sinks = fake_floats(0xB00000);
  fails_with(p, FLASHRTC_ERROR_INVALID_ARGUMENT, "d_sinks is null");
  p.d_sinks = reinterpret_cast<float*>(0xC00000);
  fails_with(p, FLASHRTC_ERROR_UNSUPPORTED, "attention sinks");
  p.variants.sinks = nullptr;
  fails_with(p, FLASHRTC_ERROR_INVALID_ARGUMENT, "d_sinks is set without");
}

}  // namespace flashrtc::test
