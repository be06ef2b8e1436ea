# Man pages: docs/man/<page>.<section>.md (pandoc markdown; functions in
# section 3, overviews in section 7) built to man<section> when pandoc is
# found; the build works without it, and installs none then.  A page's
# NAME line lists every function it documents: each of them gets a .so
# link to the page, so that `man <function>` finds it.  A new page is one
# new file there: the glob finds it.
find_program(PANDOC_EXECUTABLE pandoc)
file(GLOB REGCACHE_MAN_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/man/*.[37].md)
if(NOT PANDOC_EXECUTABLE)
  message(STATUS "regcache: pandoc not found: no man pages")
  return()
endif()
set(man_pages "")
foreach(source ${REGCACHE_MAN_SOURCES})
  get_filename_component(file ${source} NAME)
  string(REGEX REPLACE "\\.md$" "" page ${file})
  string(REGEX REPLACE ".*\\." "" section ${page})
  set(man_dir ${PROJECT_BINARY_DIR}/man/man${section})
  file(MAKE_DIRECTORY ${man_dir})
  add_custom_command(OUTPUT ${man_dir}/${page}
    COMMAND ${PANDOC_EXECUTABLE} -s -t man ${source} -o ${man_dir}/${page}
    DEPENDS ${source} VERBATIM)
  list(APPEND man_pages_${section} ${man_dir}/${page})
  # The functions of its NAME line, up to " - ".
  file(READ ${source} text)
  string(REGEX MATCH "# NAME\n+([^\n]*)" _ "${text}")
  string(REGEX REPLACE " - .*" "" names "${CMAKE_MATCH_1}")
  string(REPLACE "," ";" names "${names}")
  foreach(name ${names})
    string(STRIP "${name}" name)
    if(NOT "${name}.${section}" STREQUAL "${page}")
      file(WRITE ${man_dir}/${name}.${section} ".so man${section}/${page}\n")
      list(APPEND man_pages_${section} ${man_dir}/${name}.${section})
    endif()
  endforeach()
endforeach()
add_custom_target(regcache_man ALL DEPENDS ${man_pages_3} ${man_pages_7})
install(FILES ${man_pages_3} DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
install(FILES ${man_pages_7} DESTINATION ${CMAKE_INSTALL_MANDIR}/man7)
