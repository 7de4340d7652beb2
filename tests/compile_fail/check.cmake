# Runs the compiler on SOURCE with -DSTRATA_MUST_FAIL: it must fail, and its output must
# match every ';'-separated regular expression in EXPECTED.
string(REPLACE ";" " " flags_line "${FLAGS}")
separate_arguments(flags UNIX_COMMAND "${flags_line}")
execute_process(COMMAND ${COMPILER} ${flags} -DSTRATA_MUST_FAIL ${SOURCE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled with STRATA_MUST_FAIL, but must not")
endif()
set(text "${out}${err}")
if(text MATCHES "Winvalid-pch")  # the precompiled umbrella header was built with other flags
  message(FATAL_ERROR "the compiler did not use the precompiled strata.hpp:\n${text}")
endif()
foreach(pattern ${EXPECTED})
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "compiler output lacks '${pattern}':\n${text}")
  endif()
endforeach()
message(STATUS "failed to compile as expected")
