#pragma once
// Communication: the Communicator concept, in-process threads, the processes of a machine in
// shared memory, the hierarchy of two communicators, gradient buckets. The MPI and NCCL
// engines need their own libraries and are included on their own:
// strata/comm/mpi_communicator.hpp and strata/comm/process_communicator.hpp (link
// strata::mpi), strata/comm/nccl_communicator.hpp (link strata::nccl).

#include "strata/comm/buckets.hpp"
#include "strata/comm/communicator.hpp"
#include "strata/comm/hierarchical.hpp"
#include "strata/comm/reduce_op.hpp"
#include "strata/comm/rendezvous.hpp"
#include "strata/comm/shm_communicator.hpp"
#include "strata/comm/thread_communicator.hpp"
#include "strata/comm/thread_group.hpp"
