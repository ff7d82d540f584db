#pragma once
// stub of c10's CUDA error macros (host-only; not relevant to device codegen)
#include <cstdio>
#include <cuda_runtime.h>
#define C10_CUDA_CHECK(EXPR) do { cudaError_t e_ = (EXPR); if (e_ != cudaSuccess) fprintf(stderr, "%s\n", cudaGetErrorString(e_)); } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
