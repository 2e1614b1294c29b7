#!/usr/bin/env bash
# usage: model_template_test.sh CMAKE BUILD_DIR TEMPLATE_DIR SCRATCH_DIR GENERATOR CXX_COMPILER
# Installs the dpl build into SCRATCH_DIR/prefix, builds tools/model_template against that prefix
# alone (and the libtorch the installed dpl names), and checks that the installed launcher lists
# the model and trains it, and that the plugin exports nothing but its entry symbol. Each failure says which step broke.
set -euo pipefail
cmake_bin=$1 build_dir=$2 template_dir=$3 scratch=$4 generator=$5 cxx_compiler=$6
prefix=$scratch/prefix
template_build=$scratch/template-build

fail() { echo "model template test FAILED: $*" >&2; exit 1; }

rm -rf "$scratch"
mkdir -p "$scratch"

"$cmake_bin" --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log"; fail "cmake --install $build_dir"; }
[[ -e $prefix/include/dpl/torch_model.hpp && -e $prefix/include/dpl/torch_model/plugin.hpp ]] ||
  fail "the install lacks include/dpl/torch_model.hpp or include/dpl/torch_model/"

"$cmake_bin" -S "$template_dir" -B "$template_build" -G "$generator" \
  -DCMAKE_CXX_COMPILER="$cxx_compiler" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS=-Werror >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; fail "configuring the model template against $prefix"; }
"$cmake_bin" --build "$template_build" >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log"; fail "building the model template"; }
plugin=$template_build/libdpl_model_logreg.so
[[ -f $plugin ]] || fail "the template build made no $plugin"

exported=$(nm -D --defined-only "$plugin" | awk '{print $NF}')
[[ $exported == dpl_model_plugin_v4 ]] ||
  fail "$plugin exports more than dpl_model_plugin_v4: $exported"

status=0
listing=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" plugins --plugin-dir "$template_build" 2>&1) ||
  status=$?
echo "$listing"
grep -Eq "^model +logreg +1\.0\.0 +v4 +$plugin\$" <<<"$listing" ||
  fail "the installed launcher does not list the template model (exit status $status)"
# Dropped into a plugin folder, it trains with the unchanged, installed launcher (2 workers, the
# default Fashion-MNIST data).
status=0
training=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" --plugin-dir "$template_build" \
  --model logreg --num-processes 2 --threads-per-worker 1 --max-steps 20 --no-eval \
  --no-progress --master-port 0 2>&1) || status=$?
echo "$training"
grep -q "training done: 20 steps" <<<"$training" ||
  fail "the installed launcher did not train the template model (exit status $status)"
echo "model template test passed: $plugin loads into and trains with $prefix/bin/launcher"
