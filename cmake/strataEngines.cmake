# The optional engines as interface targets: strata::mpi (Open MPI), strata::nccl (CUDA
# runtime + NCCL), strata::cuda (the Cuda device backend: CUDA runtime, cuBLAS, NVRTC),
# strata::blas (Eigen's products through OpenBLAS), strata::dnnl (the products through
# oneDNN), strata::text (utf8proc, for the BERT
# tokenizer), strata::ps (ZeroMQ, for ParameterServer's messages) and strata::tensorboard
# (Protocol Buffers, for TensorBoard event files).
# strata's own build and the installed package config both include this file, so the two
# define them the same way. A dependency that is not found leaves its target undefined; the
# headers that need it are then simply not usable.
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
# oneDNN (Debian's libdnnl-dev) as the engine of the CPU backend's products: float, and bf16
# inputs with float sums under MixedPrecision on CPUs with bf16 dot products
# (include/strata/core/dnnl.hpp). Debian builds it on OpenMP; strata sets each calling
# thread's OpenMP team to one thread, so it links libgomp itself. Where OpenBLAS is found
# too, the target links it beside oneDNN (STRATA_DNNL_OPENBLAS): on AVX2-only CPUs it then
# multiplies the few float shapes oneDNN's AVX2 kernels run at half speed. Unlike
# strata::blas it does not define EIGEN_USE_BLAS: Eigen's own products stay Eigen's.
if(NOT TARGET strata::dnnl)
  find_path(STRATA_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(STRATA_DNNL_LIBRARY dnnl)
  find_library(STRATA_GOMP_LIBRARY NAMES gomp libgomp.so.1)
  if(STRATA_DNNL_INCLUDE_DIR AND STRATA_DNNL_LIBRARY AND STRATA_GOMP_LIBRARY)
    add_library(strata::dnnl INTERFACE IMPORTED)
    set_target_properties(strata::dnnl PROPERTIES INTERFACE_COMPILE_DEFINITIONS STRATA_DNNL)
    target_include_directories(strata::dnnl SYSTEM INTERFACE ${STRATA_DNNL_INCLUDE_DIR})
    target_link_libraries(strata::dnnl INTERFACE strata::strata ${STRATA_DNNL_LIBRARY} ${STRATA_GOMP_LIBRARY})
    if(STRATA_OPENBLAS_LIBRARY)
      set_property(TARGET strata::dnnl APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS STRATA_DNNL_OPENBLAS)
      target_link_libraries(strata::dnnl INTERFACE ${STRATA_OPENBLAS_LIBRARY})
    endif()
  endif()
endif()
# The fastest CPU GEMM engine this build has, for a program that trains real models:
# strata::dnnl (oneDNN, with OpenBLAS beside it where found), else strata::blas, else
# Eigen's own kernels.
function(strata_link_fastest_gemm target)
  if(TARGET strata::dnnl)
    target_link_libraries(${target} PRIVATE strata::dnnl)
  elseif(TARGET strata::blas)
    target_link_libraries(${target} PRIVATE strata::blas)
  endif()
endfunction()
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
# ZeroMQ with its C++ binding (Debian's libzmq3-dev and cppzmq-dev): the messages between
# ParameterServer's workers, servers and coordinator (strata/ps.hpp), over inproc:// between
# threads and tcp:// between processes.
if(NOT TARGET strata::ps)
  find_path(STRATA_CPPZMQ_INCLUDE_DIR zmq.hpp)
  find_library(STRATA_ZMQ_LIBRARY zmq)
  if(STRATA_CPPZMQ_INCLUDE_DIR AND STRATA_ZMQ_LIBRARY)
    add_library(strata::ps INTERFACE IMPORTED)
    target_include_directories(strata::ps SYSTEM INTERFACE ${STRATA_CPPZMQ_INCLUDE_DIR})
    target_link_libraries(strata::ps INTERFACE strata::strata ${STRATA_ZMQ_LIBRARY})
  endif()
endif()
# Protocol Buffers (Debian's libprotobuf-dev and protobuf-compiler): TensorBoard event files
# (strata/tensorboard.hpp). The Event messages of include/strata/profile/tensorboard_event.proto
# are generated by protoc into this build tree when CMake configures, and compiled once into
# a small static library that strata::tensorboard links.
if(NOT TARGET strata::tensorboard)
  find_package(Protobuf QUIET)
  find_file(STRATA_TENSORBOARD_PROTO strata/profile/tensorboard_event.proto
            PATHS ${CMAKE_CURRENT_LIST_DIR}/../include ${CMAKE_CURRENT_LIST_DIR}/../../../include NO_DEFAULT_PATH)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND TARGET protobuf::libprotobuf AND STRATA_TENSORBOARD_PROTO)
    get_filename_component(_strata_proto_root ${STRATA_TENSORBOARD_PROTO} DIRECTORY)
    get_filename_component(_strata_proto_root ${_strata_proto_root}/../.. ABSOLUTE)
    set(_strata_generated ${CMAKE_BINARY_DIR}/strata-generated)
    file(MAKE_DIRECTORY ${_strata_generated}/fresh ${_strata_generated}/strata/profile)
    execute_process(COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${_strata_proto_root}
                            --cpp_out=${_strata_generated}/fresh strata/profile/tensorboard_event.proto
                    RESULT_VARIABLE _strata_protoc_result ERROR_VARIABLE _strata_protoc_error)
    if(_strata_protoc_result EQUAL 0)
      foreach(ext h cc)  # copied only when changed: a new configure does not rebuild what uses them
        file(COPY_FILE ${_strata_generated}/fresh/strata/profile/tensorboard_event.pb.${ext}
             ${_strata_generated}/strata/profile/tensorboard_event.pb.${ext} ONLY_IF_DIFFERENT)
      endforeach()
      add_library(strata_tensorboard_events STATIC ${_strata_generated}/strata/profile/tensorboard_event.pb.cc)
      set_target_properties(strata_tensorboard_events PROPERTIES POSITION_INDEPENDENT_CODE ON)
      target_include_directories(strata_tensorboard_events SYSTEM PUBLIC ${_strata_generated})
      target_link_libraries(strata_tensorboard_events PUBLIC strata::strata protobuf::libprotobuf)
      add_library(strata::tensorboard ALIAS strata_tensorboard_events)
      set(STRATA_TENSORBOARD_GENERATED_DIR ${_strata_generated})  # where its header is
    else()
      message(WARNING "strata: protoc failed on ${STRATA_TENSORBOARD_PROTO}; strata::tensorboard is not defined:\n"
                      "${_strata_protoc_error}")
    endif()
  endif()
endif()
