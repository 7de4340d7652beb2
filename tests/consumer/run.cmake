# Installs strata from SOURCE_DIR into a scratch prefix, then builds and runs the consumer
# project against the installed package only.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/strata-build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${COMPILER}
    -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCHMARKS=OFF -DSTRATA_BUILD_EXAMPLES=OFF
    -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/strata-build)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer-build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)

# The user's GPU build (examples/gpu): plain C++ against the installed strata::cuda target.
# It compiles and links wherever the CUDA toolkit is; it trains only where there is a GPU.
if(EXISTS /usr/local/cuda/include/cublas_v2.h)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/gpu -B ${WORK_DIR}/gpu-build -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
      -DCUDAToolkit_ROOT=/usr/local/cuda)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/gpu-build)
  execute_process(COMMAND ${WORK_DIR}/gpu-build/fashion_mnist_gpu --epochs 1 RESULT_VARIABLE result)
  if(NOT result EQUAL 0 AND NOT result EQUAL 77)
    message(FATAL_ERROR "fashion_mnist_gpu failed (${result})")
  endif()
endif()
