#!/usr/bin/env bash
# usage: install_test.sh CMAKE BUILD_DIR TEMPLATE_DIR SCRATCH_DIR GENERATOR C_COMPILER
# Installs the dpl build into SCRATCH_DIR/prefix, builds the plugin template against that prefix
# alone, and runs the installed launcher on it. Each failure says which step broke.
set -euo pipefail
cmake_bin=$1 build_dir=$2 template_dir=$3 scratch=$4 generator=$5 c_compiler=$6
prefix=$scratch/prefix
template_build=$scratch/template-build

fail() { echo "install test FAILED: $*" >&2; exit 1; }

rm -rf "$scratch"
mkdir -p "$scratch"

"$cmake_bin" --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log"; fail "cmake --install $build_dir"; }

for path in bin/launcher include/dpl/dpl.h include/dpl/backend_v1.h include/dpl/backend_v2.h \
            include/dpl/backend_v3.h include/dpl/backend_v4.h include/dpl/backend_v5.h \
            include/dpl/model_v1.h include/dpl/model_v3.h include/dpl/model_v4.h \
            include/dpl/dataset_v1.h include/dpl/dataset_v2.h \
            include/dpl/common.h include/dpl/store.h include/dpl/support/error.hpp \
            include/dpl/torch_model.hpp include/dpl/support/status.hpp \
            include/dpl/torch_files/torch_archive.hpp include/dpl/torch_files/zip_archive.hpp; do
  [[ -e $prefix/$path ]] || fail "the install lacks $path"
done
# The torch_files library that model plugins link (dpl_torch_model_plugin), with its own targets.
[[ -n $(find "$prefix" -name libdpl_torch_files.a) ]] || fail "the install lacks libdpl_torch_files.a"
[[ -n $(find "$prefix" -path '*/cmake/dpl/dplTorchFilesTargets.cmake') ]] ||
  fail "the install lacks lib/cmake/dpl/dplTorchFilesTargets.cmake"
config=$(find "$prefix" -path '*/cmake/dpl/dplConfig.cmake' | head -n 1)
[[ -n $config ]] || fail "the install lacks lib/cmake/dpl/dplConfig.cmake"
plugin_dir=$(find "$prefix" -type d -path '*/dpl/plugins' | head -n 1)
[[ -n $plugin_dir ]] || fail "the install lacks lib/dpl/plugins"

# Only the installed package: no path into the source or build tree.
"$cmake_bin" -S "$template_dir" -B "$template_build" -G "$generator" \
  -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS=-Werror >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; fail "configuring the plugin template against $prefix"; }
"$cmake_bin" --build "$template_build" >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log"; fail "building the plugin template"; }
plugin=$template_build/libdpl_loopback.so
[[ -f $plugin ]] || fail "the template build made no $plugin"

"$prefix/bin/launcher" --version || fail "the installed launcher --version"

status=0
listing=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" plugins --plugin-dir "$template_build" 2>&1) ||
  status=$?
echo "$listing"
grep -Eq "^backend +loopback +1\.0\.0 +v2 +$plugin\$" <<<"$listing" ||
  fail "the installed launcher does not list the template plugin (exit status $status)"
grep -q "plugin search path: $template_build, $plugin_dir" <<<"$listing" ||
  fail "the installed launcher does not search --plugin-dir, then its own $plugin_dir"
if grep -q "$build_dir/plugins_out" <<<"$listing"; then
  fail "the installed launcher also searched the build tree's plugins"
fi
# The template works as a backend: the rendezvous selftest (a barrier and an allgather through it).
selftest=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" --selftest --backend loopback \
  --plugin-dir "$template_build" --num-processes 1 --master-port 0 2>&1) ||
  { echo "$selftest"; fail "the installed launcher's selftest through the template backend"; }
grep -q "selftest ok: world size 1, ranks 0; barrier and allgather through backend loopback" \
  <<<"$selftest" || { echo "$selftest"; fail "the selftest did not run through the template"; }
echo "install test passed: $plugin loads into $prefix/bin/launcher"
