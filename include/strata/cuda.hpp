#pragma once
// The Cuda device policy's backend: Trainer<OneDevice | Mirrored<N> | CentralStorage<N>,
// Cuda, ...> on an NVIDIA GPU. Link the strata::cuda CMake target (CUDA runtime, cuBLAS, NVRTC); no nvcc is needed.
// See docs/gpu.md.

#include "strata/cuda/backend.hpp"
#include "strata/cuda/context.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/kernels.hpp"
#include "strata/cuda/runtime.hpp"
#include "strata/cuda/device_replica.hpp"
#include "strata/nn/activation_cuda.hpp"
#include "strata/nn/attention_cuda.hpp"
#include "strata/nn/bert_cuda.hpp"
#include "strata/nn/dropout_cuda.hpp"
#include "strata/nn/embedding_cuda.hpp"
#include "strata/nn/layer_norm_cuda.hpp"
#include "strata/nn/loss_cuda.hpp"
#include "strata/nn/residual_cuda.hpp"
#include "strata/optim/element_rule_cuda.hpp"
#include "strata/train/central_storage_cuda.hpp"
#include "strata/train/gradient_sync_cuda.hpp"
#include "strata/train/replica_pass_cuda.hpp"
#include "strata/train/slice_update_cuda.hpp"
