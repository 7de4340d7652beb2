#pragma once
// MultiWorkerMirrored<LocalN> on strata::Cuda: LocalN replicas (GPUs, or logical replicas on
// one GPU) per process, across the processes of an MPI job, the gradients summed over NCCL.
// Link the strata::mpi and strata::cuda CMake targets (NCCL found). See docs/multi_worker.md.

#include "strata/cuda.hpp"
#include "strata/multi_worker.hpp"
#include "strata/train/gradient_sync_cuda_mpi.hpp"
