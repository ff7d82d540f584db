#pragma once
// stub with the same layout as torch's at::PhiloxCudaState
#include <cstdint>
namespace at {
struct PhiloxCudaState {
  PhiloxCudaState() = default;
  union Payload { uint64_t val; int64_t* ptr; };
  Payload seed_{};
  Payload offset_{};
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}
