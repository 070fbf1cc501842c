#pragma once
// The runtime is built with hidden visibility; only what is marked here is part of the shared library's ABI.
#define FLASHRTC_API __attribute__((visibility("default")))
