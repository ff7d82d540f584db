// Minimal TU: FA2 forward hdim128 kernel, traits <128,128,64,4,false,false,T> (run_mha_fwd_hdim128, sm80/sm90 non-dropout)
#include "namespace_config.h"
#include "flash_fwd_launch_template.h"

namespace FLASH_NAMESPACE {
#ifndef FA_T
#define FA_T cutlass::half_t
#endif
using KT = Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, FA_T>;
// <Kernel_traits, Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K, Is_softcap, Return_softmax>
template __global__ void flash_fwd_kernel<KT, false, false, false, false, true,  true, false, false>(KERNEL_PARAM_MODIFIER const Flash_fwd_params);
template __global__ void flash_fwd_kernel<KT, false, false, false, false, false, true, false, false>(KERNEL_PARAM_MODIFIER const Flash_fwd_params);
template __global__ void flash_fwd_kernel<KT, false, true,  false, false, true,  true, false, false>(KERNEL_PARAM_MODIFIER const Flash_fwd_params);
template __global__ void flash_fwd_kernel<KT, false, true,  false, false, false, true, false, false>(KERNEL_PARAM_MODIFIER const Flash_fwd_params);
}
