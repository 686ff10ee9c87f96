# Chooses CMAKE_CUDA_ARCHITECTURES before enable_language(CUDA).
# The P100 is sm_60. CUDA 13 dropped sm_60 (its oldest target is sm_75), so a
# P100 build needs a CUDA 12.x or older toolkit; with a newer one we build for
# the oldest architecture it supports so the code still compiles and links.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch
                  OUTPUT_VARIABLE _pn_archs ERROR_QUIET RESULT_VARIABLE _pn_rc)
  set(_pn_arch 60)
  if(_pn_rc EQUAL 0 AND _pn_archs)
    string(REGEX MATCHALL "compute_([0-9]+)" _pn_list "${_pn_archs}")
    set(_pn_min 999)
    foreach(_a ${_pn_list})
      string(REGEX REPLACE "compute_" "" _n "${_a}")
      if(_n LESS _pn_min)
        set(_pn_min ${_n})
      endif()
    endforeach()
    if(_pn_min GREATER 60 AND NOT _pn_min EQUAL 999)
      set(_pn_arch ${_pn_min})
      message(STATUS "pn: this CUDA toolkit cannot target sm_60 (oldest: sm_${_pn_min}); "
                     "building for sm_${_pn_min}. A Tesla P100 build needs a CUDA 12.x (or older) toolkit.")
    endif()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${_pn_arch} CACHE STRING "CUDA architectures" FORCE)
endif()
message(STATUS "pn: CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")
