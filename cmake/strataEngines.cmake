# The optional engines as interface targets: strata::mpi (Open MPI), strata::nccl (CUDA
# runtime + NCCL), strata::cuda (the Cuda device backend: CUDA runtime, cuBLAS, NVRTC),
# strata::blas (Eigen's products through OpenBLAS) and strata::text (utf8proc, for the BERT
# tokenizer). strata's own build and the installed package config both include this file, so
# the two define them the same way. A dependency that is not found leaves its target undefined; the headers that need it
# are then simply not usable.
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
# The Cuda device backend compiles its kernels at run time with NVRTC, so a program that
# uses it is built by the ordinary C++ compiler: no nvcc, no CUDA language in CMake.
if(NOT TARGET strata::cuda)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::nvrtc)
    add_library(strata::cuda INTERFACE IMPORTED)
    target_link_libraries(strata::cuda INTERFACE strata::strata CUDA::cudart CUDA::cublas CUDA::nvrtc)
    # NCCL, where found, lets Mirrored<N> put one replica on each of N GPUs.
    if(STRATA_NCCL_LIBRARY AND STRATA_NCCL_INCLUDE_DIR)
      target_include_directories(strata::cuda SYSTEM INTERFACE ${STRATA_NCCL_INCLUDE_DIR})
      target_link_libraries(strata::cuda INTERFACE ${STRATA_NCCL_LIBRARY})
    else()
      set_target_properties(strata::cuda PROPERTIES INTERFACE_COMPILE_DEFINITIONS STRATA_CUDA_NCCL=0)
    endif()
  endif()
endif()
# OpenBLAS behind Eigen's float and double products (EIGEN_USE_BLAS), about twice Eigen's
# own GEMM rate on AVX2 machines. Every translation unit of a program must agree on
# EIGEN_USE_BLAS, which linking this target guarantees. The pthread flavour is preferred:
# strata sets it to one thread per call (include/strata/core/blas.hpp), and unlike Debian's
# serial flavour it is safe to call from several replica threads at once.
if(NOT TARGET strata::blas)
  find_library(STRATA_OPENBLAS_LIBRARY openblas
               PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread NO_DEFAULT_PATH)
  if(NOT STRATA_OPENBLAS_LIBRARY)
    find_library(STRATA_OPENBLAS_LIBRARY openblas)
  endif()
  if(STRATA_OPENBLAS_LIBRARY)
    add_library(strata::blas INTERFACE IMPORTED)
    set_target_properties(strata::blas PROPERTIES INTERFACE_COMPILE_DEFINITIONS "EIGEN_USE_BLAS;STRATA_OPENBLAS")
    target_link_libraries(strata::blas INTERFACE strata::strata ${STRATA_OPENBLAS_LIBRARY})
  endif()
endif()
# utf8proc (Debian's libutf8proc-dev): the Unicode tables behind strata/data/unicode.hpp and
# the BERT tokenizer (strata/text.hpp).
if(NOT TARGET strata::text)
  find_path(STRATA_UTF8PROC_INCLUDE_DIR utf8proc.h)
  find_library(STRATA_UTF8PROC_LIBRARY utf8proc)
  if(STRATA_UTF8PROC_INCLUDE_DIR AND STRATA_UTF8PROC_LIBRARY)
    add_library(strata::text INTERFACE IMPORTED)
    target_include_directories(strata::text SYSTEM INTERFACE ${STRATA_UTF8PROC_INCLUDE_DIR})
    target_link_libraries(strata::text INTERFACE strata::strata ${STRATA_UTF8PROC_LIBRARY})
  endif()
endif()
