#!/usr/bin/env bash
# usage: dataset_template_test.sh CMAKE BUILD_DIR TEMPLATE_DIR SCRATCH_DIR GENERATOR C_COMPILER PROBE
# Installs the dpl build into SCRATCH_DIR/prefix, builds tools/dataset_template against that
# prefix alone, checks that the plugin exports nothing but its entry symbol, and loads it with
# PROBE (tests/datasets/dataset_probe, a host's loading, describe and fill) on CSV files written
# here, good and bad, and checks that the INSTALLED launcher lists it and trains the MLP on its data
# (2 ranks: a falling loss, bit-identical ranks). Each failure says which step broke.
set -euo pipefail
cmake_bin=$1 build_dir=$2 template_dir=$3 scratch=$4 generator=$5 c_compiler=$6 probe=$7
prefix=$scratch/prefix
template_build=$scratch/template-build
data=$scratch/data

fail() { echo "dataset template test FAILED: $*" >&2; exit 1; }

rm -rf "$scratch"
mkdir -p "$scratch" "$data"

"$cmake_bin" --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log"; fail "cmake --install $build_dir"; }
for path in include/dpl/dataset.h include/dpl/dataset_v1.h; do
  [[ -e $prefix/$path ]] || fail "the install lacks $path"
done

# Only the installed package: no path into the source or build tree.
"$cmake_bin" -S "$template_dir" -B "$template_build" -G "$generator" \
  -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS=-Werror >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; fail "configuring the dataset template against $prefix"; }
"$cmake_bin" --build "$template_build" >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log"; fail "building the dataset template"; }
plugin=$template_build/libdpl_dataset_csv.so
[[ -f $plugin ]] || fail "the template build made no $plugin"

exported=$(nm -D --defined-only "$plugin" | awk '{print $NF}')
[[ $exported == dpl_dataset_plugin_v1 ]] ||
  fail "$plugin exports more than dpl_dataset_plugin_v1: $exported"

status=0
listing=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" plugins --plugin-dir "$template_build" 2>&1) ||
  status=$?
grep -Eq "^dataset +csv +1\.0\.0 +v1 +$plugin\$" <<<"$listing" ||
  fail "the installed launcher does not list the template data set (exit status $status): $listing"

# What a host reads through it, sample by sample, with the probe.
printf '2,0.5,1.25,-2\n0,1,2,3\r\n\n1,-0.125,0,1e3\n' >"$data/train.csv"
expected='dataset csv 1.0.0 v1
shape (3) count 3 classes 3
0: 2 | 0.5 1.25 -2
1: 0 | 1 2 3
2: 1 | -0.125 0 1000'
output=$("$probe" "$plugin" "$data" train 2>&1) || fail "the probe could not use $plugin: $output"
[[ $output == "$expected" ]] || fail "the probe read from $plugin:
$output
instead of:
$expected"

printf '1,0.5\n1,0.5,7\n' >"$data/test.csv"
status=0
output=$("$probe" "$plugin" "$data" test 2>&1) || status=$?
[[ $status == 1 && $output == "dataset csv 1.0.0 v1
create failed (status 1): dataset \"csv\": $data/test.csv:2: 2 values after the label, but line 1 has 1" ]] ||
  fail "a bad line was not refused as expected (exit status $status): $output"
rm "$data/test.csv"
output=$("$probe" "$plugin" "$data" test 2>&1) || status=$?
[[ $output == *"create failed (status 8): dataset \"csv\": missing data file $data/test.csv;"* ]] ||
  fail "a missing file was not refused as expected: $output"

# The installed launcher trains the MLP on the template's data, 2 ranks: sample i of class i % 3
# has values 2k and 2k+1 raised by 3 for k = its class, plus a small fixed noise.
jobs=$scratch/job
mkdir -p "$jobs/data" "$jobs/dump"
write_csv() {
  awk -v count="$1" -v seed="$2" 'BEGIN {
    for (i = 0; i < count; ++i) {
      label = i % 3; line = label
      for (j = 0; j < 6; ++j) {
        value = ((i * 7 + j * 13 + seed) % 10) / 20 + (int(j / 2) == label ? 3 : 0)
        line = line "," value
      }
      print line
    }
  }'
}
write_csv 96 0 >"$jobs/data/train.csv"
write_csv 30 5 >"$jobs/data/test.csv"
status=0
training=$(env -u DPL_PLUGIN_PATH "$prefix/bin/launcher" --plugin-dir "$template_build" \
  --data csv --data-dir "$jobs/data" --data-cache none --model mlp --num-processes 2 \
  --threads-per-worker 1 --batch-size 16 --epochs 6 --log-interval 3 --seed 3 \
  --metrics "$jobs/metrics.jsonl" --dump-parameters "$jobs/dump" --no-progress --master-port 0 \
  2>&1) || status=$?
[[ $status == 0 ]] || fail "the installed launcher did not train on the template data (exit status $status): $training"
grep -q "training done: 36 steps" <<<"$training" ||
  fail "the installed launcher did not train 36 steps on the template data: $training"
grep -q "accuracy: [0-9]*/30 " <<<"$training" ||
  fail "the installed launcher did not evaluate the 30 samples of test.csv: $training"
losses=$(sed -n 's/^{"kind": "step", .*"loss": \([0-9.]*\), .*/\1/p' "$jobs/metrics.jsonl")
[[ $(wc -l <<<"$losses") == 12 ]] || fail "expected 12 logged losses in $jobs/metrics.jsonl: $losses"
awk 'NR == 1 { first = $1 } END { exit !($1 < first / 2) }' <<<"$losses" ||
  fail "the loss on the template data did not fall to half its first value: $losses"
# fc1 6x128 + 128, fc2 128x3 + 3 floats: the MLP was built for the template's samples and classes.
[[ $(stat -c %s "$jobs/dump/rank-0.bin") == $(((6 * 128 + 128 + 128 * 3 + 3) * 4)) ]] ||
  fail "the MLP trained on the template data has $(stat -c %s "$jobs/dump/rank-0.bin") bytes of parameters"
cmp -s "$jobs/dump/rank-0.bin" "$jobs/dump/rank-1.bin" ||
  fail "the ranks trained on the template data ended with different parameters"
echo "dataset template test passed: $plugin loads, describes and fills, and trains the MLP on 2 ranks"
