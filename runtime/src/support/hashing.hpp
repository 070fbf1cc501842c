#pragma once
// Content digests (XXH3, 128 bits) as lowercase hex.
#include <string>
#include <string_view>

namespace flashrtc::detail {

std::string digest_hex(std::string_view data);

// Incremental digest over several pieces; each piece is length-prefixed so ("ab","c") != ("a","bc").
class Digest {
 public:
  Digest();
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void add(std::string_view piece);
  std::string hex() const;

 private:
  void* state_;
};

}  // namespace flashrtc::detail
