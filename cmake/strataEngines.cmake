# The optional communication engines as interface targets: strata::mpi (Open MPI) and
# strata::nccl (CUDA runtime + NCCL). strata's own build and the installed package config
# both include this file, so the two define them the same way. A dependency that is not
# found leaves its target undefined; the headers that need it are then simply not usable.
if(NOT TARGET strata::mpi)
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API only: the C++ bindings are deprecated
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    add_library(strata::mpi INTERFACE IMPORTED)
    target_link_libraries(strata::mpi INTERFACE strata::strata MPI::MPI_CXX)
  endif()
endif()
if(NOT TARGET strata::nccl)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(STRATA_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(STRATA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(STRATA_NCCL_LIBRARY AND STRATA_NCCL_INCLUDE_DIR)
      add_library(strata::nccl INTERFACE IMPORTED)
      target_include_directories(strata::nccl SYSTEM INTERFACE ${STRATA_NCCL_INCLUDE_DIR})
      target_link_libraries(strata::nccl INTERFACE strata::strata CUDA::cudart ${STRATA_NCCL_LIBRARY})
    endif()
  endif()
endif()
