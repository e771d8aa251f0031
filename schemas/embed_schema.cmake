# Writes the schema text as a C++ raw string: placer::wire::schema_text().
file(READ ${IN} SCHEMA)
file(WRITE ${OUT} "// generated from placement.fbs\nnamespace placer::wire {\nconst char* schema_text() {\n  return R\"PLACER_FBS(${SCHEMA})PLACER_FBS\";\n}\n}  // namespace placer::wire\n")
