# Writes OUT: a C++ source defining the shipped device profiles (sim/profiles/*.profile) as strings, so
# a profile name needs no file at run time. The .profile files stay the one source of the figures.
# Usage: cmake -DOUT=<file> -DPROFILES="<a.profile;b.profile>" -P embed_profiles.cmake
set(body "// Generated from sim/profiles/*.profile by sim/cmake/embed_profiles.cmake: edit those files.\n")
string(APPEND body "#include \"shipped_profiles.h\"\n\nnamespace openreg::sim::detail {\n")
string(APPEND body "const std::vector<ShippedProfile>& shipped_profiles() {\n  static const std::vector<ShippedProfile> all = {\n")
foreach(path IN LISTS PROFILES)
  get_filename_component(name "${path}" NAME_WE)
  file(READ "${path}" text)
  string(APPEND body "      {\"${name}\", R\"openreg_profile(${text})openreg_profile\"},\n")
endforeach()
string(APPEND body "  };\n  return all;\n}\n}  // namespace openreg::sim::detail\n")
file(WRITE "${OUT}.new" "${body}")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
