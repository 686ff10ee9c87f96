# Reads the import graph, cmake/import_graph.txt, the one place it is
# stated, and makes each room's include context from it:
# ${CMAKE_BINARY_DIR}/include/<room>/ holds one link per room the room may
# include (its own among them), each to that room's folder. A room's library
# (pn_module) and the programs (cmd/) compile with that folder as their only
# path into the tree, so `#include "pipeline/quantize.h"` from quant/ finds
# no file and the build fails there.
#
# Sets PN_ROOMS (every room, highest first), PN_LIB_ROOMS (the rooms built as
# libraries: all but those whose line says `every`, the programs) and, per
# room, PN_IMPORTS_<room> (the rooms it may include, `every` spelled out).
set(PN_IMPORT_GRAPH ${CMAKE_SOURCE_DIR}/cmake/import_graph.txt)
set_property(DIRECTORY ${CMAKE_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                                                           ${PN_IMPORT_GRAPH})
file(STRINGS ${PN_IMPORT_GRAPH} _pn_graph_lines)
set(PN_ROOMS)
set(PN_LIB_ROOMS)
set(_pn_every_rooms)
foreach(_line IN LISTS _pn_graph_lines)
  string(REGEX REPLACE "#.*" "" _line "${_line}")
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "")
    continue()
  endif()
  if(NOT _line MATCHES "^([a-z0-9_]+):(.*)$")
    message(FATAL_ERROR "${PN_IMPORT_GRAPH}: \"${_line}\" is not `room: room room ...`")
  endif()
  set(_room ${CMAKE_MATCH_1})
  separate_arguments(_deps UNIX_COMMAND "${CMAKE_MATCH_2}")
  foreach(_dep IN LISTS _deps)
    # One-way: a room names only rooms stated below it, so none is
    # stated yet when its line is read.
    if(NOT _dep STREQUAL "every" AND _dep IN_LIST PN_ROOMS)
      message(FATAL_ERROR "${PN_IMPORT_GRAPH}: ${_room} imports ${_dep}, stated above it")
    endif()
  endforeach()
  list(APPEND PN_ROOMS ${_room})
  if(_deps STREQUAL "every")
    list(APPEND _pn_every_rooms ${_room})
  else()
    list(APPEND PN_LIB_ROOMS ${_room})
    set(PN_IMPORTS_${_room} ${_deps})
  endif()
endforeach()
foreach(_room IN LISTS PN_ROOMS)
  if(_room IN_LIST _pn_every_rooms)
    set(PN_IMPORTS_${_room} ${PN_ROOMS})
    list(REMOVE_ITEM PN_IMPORTS_${_room} ${_room})
  endif()
  foreach(_dep IN LISTS PN_IMPORTS_${_room})
    if(NOT _dep IN_LIST PN_ROOMS)
      message(FATAL_ERROR "${PN_IMPORT_GRAPH}: ${_room} imports ${_dep}, which has no line")
    endif()
  endforeach()
endforeach()

# The include contexts. Links left from an earlier graph are removed first,
# so that a room taken off a line is refused at once.
foreach(_room IN LISTS PN_ROOMS)
  set(_dir ${CMAKE_BINARY_DIR}/include/${_room})
  set(_want ${_room} ${PN_IMPORTS_${_room}})
  file(MAKE_DIRECTORY ${_dir})
  file(GLOB _have LIST_DIRECTORIES true ${_dir}/*)
  foreach(_link IN LISTS _have)
    get_filename_component(_name ${_link} NAME)
    if(NOT IS_SYMLINK ${_link})
      file(REMOVE_RECURSE ${_link})
    elseif(NOT _name IN_LIST _want)
      file(REMOVE ${_link})
    endif()
  endforeach()
  foreach(_dep IN LISTS _want)
    if(NOT EXISTS ${_dir}/${_dep})
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${_dep} ${_dir}/${_dep} SYMBOLIC)
    endif()
  endforeach()
endforeach()

# pn_room_includes(TARGET ROOM): TARGET compiles in ROOM's include context.
# The test layout/a_room_compiles_only_with_the_headers_of_the_rooms_it_imports
# reads the context back from ${CMAKE_BINARY_DIR}/include/<room>.dirs.
function(pn_room_includes target room)
  if(NOT room IN_LIST PN_ROOMS)
    message(FATAL_ERROR "${room}/ is not a room of ${PN_IMPORT_GRAPH}: give it a line there")
  endif()
  target_include_directories(${target} PRIVATE ${CMAKE_BINARY_DIR}/include/${room})
  # One record a room: the programs share cmd's.
  get_property(_done GLOBAL PROPERTY PN_ROOM_DIRS_${room})
  if(_done)
    return()
  endif()
  set_property(GLOBAL PROPERTY PN_ROOM_DIRS_${room} ${target})
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/include/${room}.dirs
       CONTENT "$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,\n>\n")
endfunction()
