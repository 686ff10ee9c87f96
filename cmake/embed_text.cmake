# cmake -DIN=file -DOUT=file.c -P embed_text.cmake: the text of IN as a C string.
file(READ ${IN} _hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
get_filename_component(_name ${IN} NAME)
file(WRITE ${OUT} "/* generated from ${_name}; do not edit */\n"
  "const char pn_default_recipe_name[] = \"${_name}\";\n"
  "const char pn_default_recipe_text[] = {${_bytes} 0x00};\n")
