#include "support/hashing.hpp"

#include <xxhash.h>

#include <cstdint>
#include <cstdio>

namespace flashrtc::detail {

namespace {
std::string to_hex(XXH128_hash_t hash) {
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(hash.high64),
                static_cast<unsigned long long>(hash.low64));
  return text;
}
}  // namespace

std::string digest_hex(std::string_view data) { return to_hex(XXH3_128bits(data.data(), data.size())); }

Digest::Digest() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }

Digest::~Digest() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Digest::add(std::string_view piece) {
  const std::uint64_t size = piece.size();
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), &size, sizeof(size));
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), piece.data(), piece.size());
}

std::string Digest::hex() const { return to_hex(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

}  // namespace flashrtc::detail
