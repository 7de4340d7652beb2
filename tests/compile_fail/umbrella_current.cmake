# The compile checks' precompiled strata.hpp (PCH) must be newer than every header: GCC does
# not check, and the checks would judge the headers as they were when it was made. The build
# remakes it; this fails, naming the header, when the tests run before the build.
file(GLOB_RECURSE headers ${INCLUDE_DIR}/*.hpp)
foreach(header ${headers})
  if(${header} IS_NEWER_THAN ${PCH})
    message(FATAL_ERROR "${header} is newer than ${PCH}, the precompiled strata.hpp of the compile "
                        "checks: build first (cmake --build), which remakes it")
  endif()
endforeach()
