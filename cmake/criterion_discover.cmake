# pn_criterion_discover(TARGET LABEL): registers every Criterion test of
# TARGET as its own ctest test named "<suite>/<test>", the way ctest lists
# them, labelled LABEL (the tests/ folder: a room, or "programs"), so that
# `ctest -L programs` runs the tests of the programs and `ctest -L gguf`
# those of one room's library.
# The list is read from `TARGET --list` when ctest starts (like gtest's
# discovery in PRE_TEST mode), so adding a Test() needs no CMake edit.
function(pn_criterion_discover target label)
  set(_script "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests.cmake")
  file(GENERATE OUTPUT "${_script}" CONTENT "
set(_exe \"$<TARGET_FILE:${target}>\")
if(NOT EXISTS \"\${_exe}\")
  add_test(${target}_NOT_BUILT \"\${_exe}\")
  return()
endif()
execute_process(COMMAND \"\${_exe}\" --list OUTPUT_VARIABLE _out RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  add_test(${target}_LIST_FAILED \"\${_exe}\" --list)
  return()
endif()
string(REPLACE \"\\n\" \";\" _lines \"\${_out}\")
set(_suite \"\")
foreach(_l IN LISTS _lines)
  if(_l MATCHES \"^([A-Za-z0-9_]+): [0-9]+ tests?\$\")
    set(_suite \"\${CMAKE_MATCH_1}\")
  elseif(_l MATCHES \"([A-Za-z0-9_]+)\$\" AND NOT _suite STREQUAL \"\")
    set(_name \"\${_suite}/\${CMAKE_MATCH_1}\")
    add_test(\"\${_name}\" \"\${_exe}\" --filter \"\${_name}\" --jobs 1 --verbose)
    # Criterion exits 0 for a skipped test; ctest must show it as skipped.
    # (Tests outside the filter print \"[SKIP] ...: Test is disabled\".)
    string(REPLACE \"/\" \"::\" _shown \"\${_name}\")
    set_tests_properties(\"\${_name}\" PROPERTIES WORKING_DIRECTORY \"${CMAKE_CURRENT_BINARY_DIR}\" TIMEOUT 900 LABELS \"${label}\"
      SKIP_REGULAR_EXPRESSION \"\\\\[SKIP\\\\] \${_shown}: ([^T]|T[^e])\")
    # The *_scale suites bound time on large inputs (linear, not quadratic):
    # they run alone, so that the other tests do not take their cores.
    if(_suite MATCHES \"_scale\$\")
      set_tests_properties(\"\${_name}\" PROPERTIES RUN_SERIAL TRUE)
    endif()
  endif()
endforeach()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_script}")
endfunction()
