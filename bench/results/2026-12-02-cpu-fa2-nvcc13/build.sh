#!/bin/sh
# Rebuild FA2 hdim128 fwd (traits <128,128,64,4,false,false,T>) with nvcc 13; ptxas -v logs in log_<dtype>_sm<arch>.txt
cd /tmp/fa2
FL="-O3 -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math -Xptxas -v -Istub -Icsrc/flash_attn/src -Icutlass/include"
for t in fp16 bf16; do T=cutlass::half_t; [ $t = bf16 ] && T=cutlass::bfloat16_t
  for a in 90 80; do nvcc -cubin -arch=sm_$a $FL -DFA_T=$T -o fa2_${t}_sm$a.cubin fa2_fwd128.cu > log_${t}_sm$a.txt 2>&1 & done; done; wait
