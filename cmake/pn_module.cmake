# pn_module(pn_<room> LIBS...): a static library from every .c file of the
# room's folder. It links the libraries of the rooms its line of
# cmake/import_graph.txt names, and compiles in the room's include context
# (cmake/import_graph.cmake); LIBS are what it needs from outside the tree.
# Files named *_avx2.c / *_avx512.c / *_pclmul.c get their instruction-set
# flags (and only they do: the choice between them is made at run time); .cu
# files are added when the CUDA backend is built. The flags are given here,
# not by `#pragma GCC target`, which clang (the fuzz build) ignores. AVX2
# files get FMA too: the AVX2 path is chosen only on CPUs that have it, and
# -ffp-contract=off keeps the compiler from fusing anything itself, so only
# the explicit, proven-exact fused intrinsics use it.
function(pn_module name)
  get_filename_component(_room ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  if(NOT name STREQUAL "pn_${_room}")
    message(FATAL_ERROR "pn_module(${name}) in ${_room}/: a room's library is pn_${_room}")
  endif()
  file(GLOB _srcs CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.c")
  if(PN_HAVE_CUDA)
    file(GLOB _cu CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.cu")
    list(APPEND _srcs ${_cu})
  endif()
  foreach(_f ${_srcs})
    if(_f MATCHES "_avx2\\.c$")
      set_source_files_properties(${_f} PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-mfma")
    elseif(_f MATCHES "_pclmul\\.c$")
      set_source_files_properties(${_f} PROPERTIES COMPILE_OPTIONS "-mpclmul;-msse2")
    elseif(_f MATCHES "_avx512\\.c$")
      set_source_files_properties(${_f} PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx2;-mf16c;-mfma")
    endif()
  endforeach()
  add_library(${name} STATIC ${_srcs})
  pn_room_includes(${name} ${_room})
  list(TRANSFORM PN_IMPORTS_${_room} PREPEND pn_ OUTPUT_VARIABLE _deps)
  target_link_libraries(${name} PUBLIC ${_deps} ${ARGN})
  if(PN_HAVE_CUDA)
    target_compile_definitions(${name} PUBLIC PN_HAVE_CUDA=1)
    set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    # Bit-exact double arithmetic on the GPU: no fused multiply-add.
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-fmad=false>)
    target_link_libraries(${name} PUBLIC CUDA::cudart)
  endif()
endfunction()
