#!/usr/bin/env bash
# Prepares the data the configs and benchmarks read, under data_cache/ (idempotent: a part whose
# outputs exist is skipped; FORCE=1 redoes it).
#
#   scripts/prepare_data.sh [tokens] [photos] [fmnist]      (no argument: all three)
#
#   tokens  data_cache/fortunes_{train,val}.bin: byte-level uint16 token files (brrr_tokenize) of
#           Debian's `fortunes` texts (/usr/share/games/fortunes). Validation = the held-out files
#           below (a different text from the training files). Where the package is missing (the GPU
#           machine), and the token files were not carried over, the text of Python's standard
#           library (.py sources) stands in, with a warning and a note in data_cache/TOKENS_SOURCE.
#   photos  data_cache/photos/<class>/*.jpg: scripts/make_photo_folder.py (12 classes x 500 JPEGs
#           from scikit-image's photographs); PHOTOS_PER_CLASS, PHOTOS_SEED change it.
#   fmnist  data_cache/fashion_mnist_png/{train,test}/<class>/*.png from the IDX files in
#           FMNIST_DIR (Debian's dataset-fashion-mnist), through bench_export_fmnist_png. Skipped
#           with a message when the IDX files are not installed.
#
# Environment: BUILD_DIR (where brrr_tokenize and bench_export_fmnist_png are; default build),
# DATA_CACHE (default data_cache), FORTUNES_DIR, FMNIST_DIR, PHOTOS_PER_CLASS, PHOTOS_SEED, FORCE.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DATA_CACHE=${DATA_CACHE:-data_cache}
FORTUNES_DIR=${FORTUNES_DIR:-/usr/share/games/fortunes}
FMNIST_DIR=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
PHOTOS_PER_CLASS=${PHOTOS_PER_CLASS:-500}
PHOTOS_SEED=${PHOTOS_SEED:-0}
FORCE=${FORCE:-0}
# Held out for validation: whole files, so validation text was never seen in training.
VAL_FILES="literature startrek tao zippy"

say() { echo "prepare_data: $*"; }
die() { echo "prepare_data: error: $*" >&2; exit 1; }

need_tool() {
  local exe="$BUILD_DIR/$1"
  [[ -x "$exe" ]] || die "$exe not found: build it first (ninja -C $BUILD_DIR $1), or set BUILD_DIR"
  echo "$exe"
}

prepare_tokens() {
  local train="$DATA_CACHE/fortunes_train.bin" val="$DATA_CACHE/fortunes_val.bin"
  if [[ "$FORCE" != 1 && -s "$train" && -s "$val" ]]; then
    say "tokens: $train and $val exist ($(stat -c %s "$train") + $(stat -c %s "$val") bytes)"
    return
  fi
  local tokenize
  tokenize=$(need_tool brrr_tokenize)
  mkdir -p "$DATA_CACHE"
  local -a train_in=() val_in=()
  local source
  if [[ -d "$FORTUNES_DIR" ]]; then
    local f name
    for f in "$FORTUNES_DIR"/*; do
      name=$(basename "$f")
      # the texts are the regular files without an extension (.dat indexes, .u8 links are not)
      [[ -f "$f" && ! -L "$f" && "$name" != *.* ]] || continue
      if [[ " $VAL_FILES " == *" $name "* ]]; then val_in+=("$f"); else train_in+=("$f"); fi
    done
    source="Debian fortunes ($FORTUNES_DIR); validation files: $VAL_FILES"
  else
    local stdlib
    stdlib=$(python3 -c 'import os; print(os.path.dirname(os.__file__))')
    echo "prepare_data: WARNING: $FORTUNES_DIR is missing (package fortunes not installed) and the" \
         "token files were not carried over: using the text of Python's standard library" \
         "($stdlib/*.py) instead. Throughput numbers are unaffected; losses differ." >&2
    mapfile -t train_in < <(ls "$stdlib"/*.py | grep -v -E '/(typing|turtle|pydoc)\.py$' | sort)
    val_in=("$stdlib/typing.py" "$stdlib/turtle.py")
    source="Python standard library sources ($stdlib/*.py); validation: typing.py turtle.py"
  fi
  (( ${#train_in[@]} > 0 && ${#val_in[@]} > 0 )) || die "no input texts found (train ${#train_in[@]}, val ${#val_in[@]})"
  # Write to temporary names first so an interrupted run leaves no half file behind.
  "$tokenize" "${train_in[@]}" -o "$train.tmp" --dtype uint16 --allow-invalid
  "$tokenize" "${val_in[@]}" -o "$val.tmp" --dtype uint16 --allow-invalid
  mv "$train.tmp" "$train"
  mv "$val.tmp" "$val"
  echo "$source" > "$DATA_CACHE/TOKENS_SOURCE"
  say "tokens: $train ($(( $(stat -c %s "$train") / 2 )) tokens from ${#train_in[@]} files)," \
      "$val ($(( $(stat -c %s "$val") / 2 )) tokens from ${#val_in[@]} files); source: $source"
}

prepare_photos() {
  local force=()
  [[ "$FORCE" == 1 ]] && force=(--force)
  python3 scripts/make_photo_folder.py --out "$DATA_CACHE/photos" \
    --per-class "$PHOTOS_PER_CLASS" --seed "$PHOTOS_SEED" "${force[@]}"
}

prepare_fmnist() {
  local out="$DATA_CACHE/fashion_mnist_png"
  if [[ ! -d "$FMNIST_DIR" ]] || ! ls "$FMNIST_DIR"/*idx* >/dev/null 2>&1; then
    say "fmnist: no IDX files in $FMNIST_DIR (Debian package dataset-fashion-mnist): skipped"
    return
  fi
  if [[ "$FORCE" != 1 && -f "$out/.complete" ]]; then
    say "fmnist: $out exists"
    return
  fi
  local export
  export=$(need_tool bench_export_fmnist_png)
  rm -rf "$out"
  "$export" --idx-dir "$FMNIST_DIR" --out "$out" --splits train,test
  touch "$out/.complete"
  say "fmnist: $(find "$out/train" -name '*.png' | wc -l) train and" \
      "$(find "$out/test" -name '*.png' | wc -l) test PNGs under $out"
}

parts=("$@")
(( ${#parts[@]} > 0 )) || parts=(tokens photos fmnist)
for part in "${parts[@]}"; do
  case "$part" in
    tokens) prepare_tokens ;;
    photos) prepare_photos ;;
    fmnist) prepare_fmnist ;;
    *) die "unknown part '$part' (expected tokens, photos, fmnist)" ;;
  esac
done
