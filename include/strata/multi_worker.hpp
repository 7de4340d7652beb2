#pragma once
// MultiWorkerMirrored<LocalN>: Trainer<MultiWorkerMirrored<LocalN>> across the processes of
// an MPI job (mpirun, srun), LocalN replica threads in each. Link the strata::mpi CMake
// target and create a strata::comm::MpiEnvironment in main before the trainer. See
// docs/multi_worker.md.

#include "strata/comm/mpi_communicator.hpp"
#include "strata/comm/worker_communicator.hpp"
#include "strata/strategy/mpi_processes.hpp"
#include "strata/train/gradient_sync_mpi.hpp"
